"""bench.tune_families: the pick per size, the bands, the file they go into, and --families (CPU; the timing runs on
a GPU only)."""

import json

import pytest
import torch

from fused_swiglu import catalog, configs, tuning
from fused_swiglu.bench import tune_families
from fused_swiglu.cli.options import find_families

pytestmark = pytest.mark.usefixtures("package_data_only")

SMALL, WIDE = "packed_fp8_pingpong_64x128x128_1x1_e4m3", "packed_fp8_pingpong_128x192x128_2x1_e4m3"
NARROW = "packed_fp8_pingpong_128x192x128_1x1_e4m3"


def test_the_pick_is_the_lowest_geometric_mean_over_the_cells_of_a_size():
    cells = {16: [{SMALL: 1.0, WIDE: 1.5}, {SMALL: 2.0, WIDE: 2.2}],
             4096: [{SMALL: 4.0, WIDE: 2.0}, {SMALL: 1.0, WIDE: 1.05}],  # 2x faster, 5 % slower: WIDE
             8192: [{SMALL: 1.0, WIDE: 0.5, NARROW: 0.4}, {SMALL: 1.0, WIDE: 0.5}]}  # NARROW not timed in every cell
    assert tune_families.picks(cells) == {16: SMALL, 4096: WIDE, 8192: WIDE}
    # a config illegal in any cell of a size is not picked there: 33 token tiles leave a 2 x 1 Pingpong cluster
    widths = {16: [(16, 4864)] * 2, 4096: [(4096, 4864), (4097, 4864)], 8192: [(8192, 4864)] * 2}
    assert tune_families.picks(cells, tune_families.legal_at, widths) == {16: SMALL, 4096: SMALL, 8192: WIDE}
    assert tune_families.picks({1: [{}]}) == {}  # nothing timed: no pick


def test_a_launch_is_priced_at_its_default_where_the_choice_falls_back_to_it():
    """A swizzled launch timed where it is legal and not where its padding leaves the grid: the choice runs the
    band's config at raster 0 / swizzle 1 there, so the pick prices that cell by the default launch's time."""
    swizzled = f"{WIDE}@2:4"
    cells = {8192: [{WIDE: 1.10, swizzled: 1.00, NARROW: 1.04},  # a large shape: the swizzle wins by 10 %
                    {WIDE: 1.00, NARROW: 1.02}]}  # a shape where the swizzle was not timed
    # the swizzled launch costs 1.00 and 1.00 (its default) over the cells' fastest: geomean 1.0, the pick
    assert tune_families.picks(cells) == {8192: swizzled}
    # the priced geometric mean decides: swizzled 1.00 and 1.00 / 0.98 (1.010) against NARROW's 1.04 and
    # 1.00 (1.020) and WIDE's 1.10 and 1.00 / 0.98
    cells[8192][1][NARROW] = 0.98
    assert tune_families.picks(cells) == {8192: swizzled}
    # with legality: the swizzled launch is illegal at the second cell's width, priced by the default there
    widths = {8192: [(8192, 29568), (8192, 4864)]}
    legal = lambda name, M, N: not (name == swizzled and N == 4864)  # noqa: E731
    assert tune_families.picks(cells, legal, widths) == {8192: swizzled}
    # a config whose default launch is illegal at a cell has no price there: not picked
    legal_wide = lambda name, M, N: not (name.startswith(WIDE) and N == 4864)  # noqa: E731
    assert tune_families.picks(cells, legal_wide, widths) == {8192: NARROW}
    # a launch the choice would run at a cell but that was not timed there has no price: not picked
    everywhere = lambda name, M, N: True  # noqa: E731
    assert tune_families.picks(cells, everywhere, widths) == {8192: NARROW}


def test_runs_of_one_pick_make_one_band_and_the_last_is_open():
    bands = tune_families.bands_from({1: SMALL, 8: SMALL, 64: SMALL, 128: WIDE, 512: WIDE, 2048: SMALL, 8192: WIDE})
    assert [(b.up_to, b.config) for b in bands] == [(64, SMALL), (512, WIDE), (2048, SMALL), (None, WIDE)]
    assert [(b.up_to, b.config) for b in tune_families.bands_from({5: SMALL})] == [(None, SMALL)]
    with pytest.raises(ValueError, match="no size has a pick"):
        tune_families.bands_from({})
    # what bands_from writes is what the tuned data reads
    entry = {"kernel": "packed_fp8", "accumulation": "fast", "by": "M", "bands": [b.as_json() for b in bands]}
    assert tuning.parse_bands(entry) == (("packed_fp8", "fast"), tuple(bands))


def test_bands_go_into_the_gpus_bands_file_and_replace_their_family(tmp_path):
    entry = {"kernel": "dswiglu", "accumulation": "fast", "by": "H",
             "bands": [{"up_to": None, "config": "dswiglu_pingpong_128x128x64_1x1"}]}
    gpu = "Test GPU"  # no bands file in the package
    path = tmp_path / tuning.bands_file_name(gpu)
    data = tune_families.write_families(path, [entry], gpu)
    assert set(data) == {"format", "gpu", "families"} and data["families"] == [entry]
    again = {**entry, "bands": [{"up_to": 4096, "config": "dswiglu_pingpong_128x128x64_1x1"},
                                {"up_to": None, "config": "dswiglu_pingpong_128x128x64_1x1"}]}
    fp8 = {"kernel": "packed_fp8", "accumulation": "promoted", "by": "M",
           "bands": [{"up_to": None, "config": "packed_fp8_pingpong_64x128x128_1x1_promote1_e4m3"}]}
    data = tune_families.write_families(path, [again, fp8], gpu)  # the same family is replaced
    assert data["families"] == [again, fp8]
    read = tuning.parse_bands_file(json.loads(path.read_text()), path)
    assert set(read.families) == {("dswiglu", "fast"), ("packed_fp8", "promoted")}  # a valid file
    # the GPU's cost data is another file, untouched
    assert not (tmp_path / tuning.file_name(gpu, "bf16")).exists()
    # a GPU whose bands the package ships: the new file starts from a copy of those, its family replaced
    h100 = "NVIDIA H100 80GB HBM3"
    shipped = json.loads((tuning.PACKAGE_DIR / tuning.bands_file_name(h100)).read_text())["families"]
    data = tune_families.write_families(tmp_path / tuning.bands_file_name(h100), [entry], h100)
    kept = [e for e in shipped if e["kernel"] != "dswiglu"]
    assert kept and len(kept) < len(shipped) and data["families"] == kept + [entry]


def test_an_unknown_family_is_refused_and_full_names_take_the_dtype():
    """(Every family's call runs in the next test, on the operators' CPU kernels.)"""

    with pytest.raises(ValueError, match="kernel must be one of"):
        tune_families.family_call("packed", "x", object())
    assert tune_families.full_name("dswiglu", "dswiglu_pingpong_128x128x64_1x1", torch.float16).endswith("_fp16")
    assert tune_families.full_name("packed_fp8", SMALL, torch.float16) == SMALL


def test_a_config_that_raises_is_left_out_with_a_line():
    said = []

    def refuse():
        raise RuntimeError("UnsupportedError: can_implement\nmore")

    kept = tune_families.runnable({"a": [lambda: None], "b": [refuse]}, lambda *a, **k: said.append(a[0]), "7B M=1")
    assert list(kept) == ["a"] and said == ["7B M=1: b not timed: UnsupportedError: can_implement"]


def test_families_by_group_and_by_name():
    every = find_families(None)
    assert len(every) == 8 and set(k for k, _ in every) == set(catalog.BANDED_FAMILIES)
    assert find_families([]) == every
    assert find_families(["training", "dswiglu"]) == [("dual_store", "fast"), ("packed_store", "fast"),
                                                     ("dswiglu", "fast")]
    assert find_families(["packed_fp8@promoted,dual_fp8"]) == [("packed_fp8", "promoted"), ("dual_fp8", "fast")]
    assert find_families(["FP8"]) == find_families(["fp8"]) and find_families(["DSwiGLU"]) == [("dswiglu", "fast")]
    with pytest.raises(ValueError, match="--families: unknown family 'fp16'; known: fp8, training, packed_fp8, "):
        find_families(["fp16"])
    for kernel, accumulation in every:
        assert catalog.banded_names(kernel, accumulation)  # each family has configs to time
        assert all(configs.banded_config(n) for n in catalog.banded_names(kernel, accumulation))


def test_a_run_times_every_config_through_its_operator_and_writes_the_picks(monkeypatch, tmp_path):
    """The whole run on the CPU (the operators' CPU kernels), its timer replaced: a config's time is set by its
    name, so that the picks are known; every family's configs are called with the config named."""

    from fused_swiglu import _lib
    from fused_swiglu.bench import power, timing
    from fused_swiglu.bench.shapes import MlpShape

    # a launch other than the default is timed from M = 256 on (along M) and may be picked: a tie at M = 1024
    # goes to the key first in sort order, 128 x 192 along M here
    fast = {"packed_fp8_pingpong_64x128x128_1x1_e4m3", "packed_fp8_pingpong_128x192x128_1x1_e4m3@1:1",
            "dswiglu_pingpong_128x128x64_1x1_bf16", "packed_store_pingpong_128x192x64_1x1_bf16"}
    seen = []

    def fake_timer(calls, device, **kw):
        out = {}
        for key, fns in calls.items():
            fns[-1]()  # the call runs (the CPU kernel)
            seen.append(key)
            name = key.split(":", 1)[1]
            out[key] = timing.summarize([1.0 if any(f in (name, name + "_bf16") for f in fast) else 2.0])
        return out

    protocols = []
    monkeypatch.setattr(timing, "time_interleaved", lambda calls, device, **kw: (protocols.append("interleaved"),
                                                                               fake_timer(calls, device))[1])
    monkeypatch.setattr(timing, "time_sustained", lambda calls, device, monitor, seconds, flush: (
        protocols.append(("sustained", monitor, seconds)), fake_timer(calls, device))[1])
    monkeypatch.setattr(timing, "as_graph_replays", lambda calls, device: calls)
    monkeypatch.setattr(timing, "heat_soak", lambda device, monitor: protocols.append("soak"))
    monkeypatch.setattr(power, "Monitor", lambda index: "monitor")
    monkeypatch.setattr(power, "nvml_index", lambda device: 0)
    monkeypatch.setattr(timing, "flush_buffer", lambda device: None)
    monkeypatch.setattr(timing, "warm_gpu", lambda device: None)
    monkeypatch.setattr(_lib, "target", lambda index: (132, "Test GPU", None))
    families = find_families(None)
    paths = tune_families.run_families([MlpShape("tiny", 128, 128)], families, torch.bfloat16, tmp_path, reps=1,
                                       tokens=[16, 1024], device=torch.device("cpu"), seconds=0.5)
    # below M = 1024 interleaved; from there on at the power cap, after one heat soak (e4m3, then training cells)
    sustained = ("sustained", "monitor", 0.5)
    assert protocols == ["interleaved", "soak", sustained, "interleaved", sustained]
    assert paths == [tmp_path / "test-gpu_families.json"]  # e4m3 and training bands in one file, not a cost file
    assert {k.split(":")[0] for k in seen} == set(catalog.BANDED_FAMILIES)
    # every launch the choice considers at each cell, for every config: swap-AB ones not past their token tiles
    def launches(group, M):
        return [f"{k}:{n}" for k, a in group for name in catalog.banded_names(k, a)
                for n in tune_families.launch_names(name, M, 128)]

    e4m3, training = families[:5], families[5:]  # the e4m3 cells first, then the training cells
    assert seen == launches(e4m3, 16) + launches(e4m3, 1024) + launches(training, 16) + launches(training, 1024)
    assert "packed_fp8:packed_fp8_pingpong_128x192x128_1x1_e4m3@1:1" in launches(e4m3, 1024)
    assert not any("swapab" in key for key in launches(e4m3, 1024))
    data = json.loads(paths[0].read_text())
    got = {(e["kernel"], e["accumulation"]): [(b["up_to"], b["config"], b["raster"], b["swizzle"]) for b in e["bands"]]
           for e in data["families"]}
    assert got["packed_fp8", "fast"] == [(16, "packed_fp8_pingpong_64x128x128_1x1_e4m3", 0, 1),
                                         (None, "packed_fp8_pingpong_128x192x128_1x1_e4m3", 1, 1)]
    assert got["dswiglu", "fast"] == [(None, "dswiglu_pingpong_128x128x64_1x1", 0, 1)]
    assert got["packed_store", "fast"] == [(None, "packed_store_pingpong_128x192x64_1x1", 0, 1)]
    assert set(got) == set(families) and all(len(bands) >= 1 for bands in got.values())
    assert set(data["families"][0]["cells"]) == {"16", "1024"}
    # a run started again with the same identity takes every cell from the saved progress; --fresh times them again
    assert (tmp_path / "test-gpu_families.progress.json").is_file()
    timed_before, protocols[:] = len(seen), []
    again = tune_families.run_families([MlpShape("tiny", 128, 128)], families, torch.bfloat16, tmp_path, reps=1,
                                       tokens=[16, 1024], device=torch.device("cpu"), seconds=0.5)
    assert again == paths and len(seen) == timed_before and protocols == []
    assert json.loads(paths[0].read_text())["families"] == data["families"]
    tune_families.run_families([MlpShape("tiny", 128, 128)], families, torch.bfloat16, tmp_path, reps=1,
                               tokens=[16, 1024], device=torch.device("cpu"), seconds=0.5, fresh=True)
    assert protocols == ["interleaved", "soak", sustained, "interleaved", sustained]


def test_a_family_with_no_legal_pick_is_left_out_and_the_others_written(monkeypatch, tmp_path):

    from fused_swiglu import _lib
    from fused_swiglu.bench import timing
    from fused_swiglu.bench.shapes import MlpShape

    monkeypatch.setattr(timing, "time_interleaved",
                        lambda calls, device, **kw: {k: timing.summarize([1.0]) for k in calls})
    monkeypatch.setattr(timing, "flush_buffer", lambda device: None)
    monkeypatch.setattr(timing, "warm_gpu", lambda device: None)
    monkeypatch.setattr(_lib, "target", lambda index: (132, "Test GPU", None))
    monkeypatch.setattr(tune_families, "legal_at", lambda name, M, N: not name.startswith("packed_fp8"))
    said = []

    class Console:
        def print(self, text, **kw):
            said.append(text)

    paths = tune_families.run_families([MlpShape("tiny", 128, 128)], [("packed_fp8", "fast"), ("dswiglu", "fast")],
                                       torch.bfloat16, tmp_path, reps=1, tokens=[16], device=torch.device("cpu"),
                                       console=Console())
    data = json.loads(paths[0].read_text())
    assert [e["kernel"] for e in data["families"]] == ["dswiglu"]
    assert any(line.startswith("packed_fp8: no config ran legally in every cell of any size") for line in said)


def test_shapes_are_checked_by_the_families_asked_for_before_any_gpu_work():
    from fused_swiglu.bench.shapes import MlpShape, check_family_shapes

    odd_i = [MlpShape("4096x14344", 4096, 14344)]  # I a multiple of 8, not of 128
    check_family_shapes(odd_i, [("dswiglu", "fast")])  # the training kernels take 16-byte rows
    check_family_shapes(odd_i, [("dswiglu", "fast"), ("packed_fp8", "fast")])  # e4m3: H of 16, I of 8
    with pytest.raises(ValueError, match="takes H a multiple of 16 and I of 128"):
        check_family_shapes(odd_i, [("dswiglu", "fast"), ("packed_fp8_e4m3out", "fast")])
    with pytest.raises(ValueError, match="takes H a multiple of 16 and I of 8"):
        check_family_shapes([MlpShape("4104x14336", 4104, 14336)], [("packed_fp8", "fast")])
    with pytest.raises(ValueError, match="takes H a multiple of 8 and I of 8"):
        check_family_shapes([MlpShape("4100x14340", 4100, 14340)], [("dual_store", "fast")])


def test_a_launch_whose_output_differs_from_its_default_launch_is_left_out_with_a_line():
    said = []
    y = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    calls = {"k:a@2:8": [lambda: (y.clone(), y[:, :1] + 1)],  # before its default launch in the dict
             "k:a": [lambda: (y.clone(), y[:, :1].clone())],
             "k:a@1:1": [lambda: (y.clone(), y[:, :1].clone())],
             "k:b@2:4": [lambda: y.to(torch.bfloat16)], "k:b": [lambda: y.to(torch.bfloat16)]}
    kept = tune_families.runnable(calls, lambda *a, **k: said.append(a[0]), "72B M=2048")
    assert list(kept) == ["k:a", "k:a@1:1", "k:b@2:4", "k:b"]  # in the given order
    assert said == ["72B M=2048: k:a@2:8 not timed: its output differs from k:a's on the same inputs"]
    nan = torch.full((2,), float("nan"))
    assert list(tune_families.runnable({"k:c": [lambda: nan.clone()], "k:c@2:2": [lambda: nan.clone()]},
                                       lambda *a, **k: None, "")) == ["k:c", "k:c@2:2"]  # bit for bit, NaN too


def test_a_launch_without_its_default_launch_is_left_out_and_running_out_of_memory_is_raised():
    said = []

    def refuse():
        raise RuntimeError("UnsupportedError: can_implement")

    y = torch.ones(2)
    kept = tune_families.runnable({"k:a": [refuse], "k:a@2:4": [lambda: y.clone()]},
                                  lambda *a, **k: said.append(a[0]), "M=1")
    assert kept == {} and said[1] == ("M=1: k:a@2:4 not timed: its config's default launch did not run, so its "
                                      "output is unchecked")

    def out_of_memory():
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        tune_families.runnable({"k:a": [out_of_memory]}, lambda *a, **k: None, "M=1")
