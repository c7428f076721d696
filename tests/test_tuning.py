"""tuning: where the tuned data is read from, the fallbacks, and the errors for a bad file."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from fused_swiglu import catalog, configs, cost_model, tuning

pytestmark = pytest.mark.usefixtures("package_data_only")

H200 = "NVIDIA H200"


def test_another_gpu_gets_the_reference_costs_without_overrides():
    ref = tuning.load(H200, "bf16")
    other = tuning.load("NVIDIA H100 PCIe", "bf16")
    assert other.costs == ref.costs and not other.overrides_apply
    assert other.override("packed", "fast", 1, 2, 3) is None
    key = next(iter(ref.overrides))
    assert ref.override(*key) is not None and other.override(*key) is None
    fp16 = tuning.load(H200, "fp16")  # no fp16 file: the bf16 one of the same GPU
    assert fp16.source == ref.source and fp16.overrides_apply


def test_a_user_file_comes_first_and_a_bad_one_is_named(monkeypatch, tmp_path):
    ref = json.loads((tuning.PACKAGE_DIR / "nvidia-h200_bf16.json").read_text())
    folder = tmp_path / "user"
    folder.mkdir()
    monkeypatch.setattr(tuning, "user_dir", lambda: folder)
    (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps({**ref, "gpu": "NVIDIA H100 PCIe", "overrides": []}))
    tuning.clear()
    mine = tuning.load("NVIDIA H100 PCIe", "bf16")
    assert mine.source == folder / "nvidia-h100-pcie_bf16.json" and mine.overrides_apply and not mine.overrides
    (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps({**ref, "format": 99}))
    tuning.clear()
    with pytest.raises(ValueError, match="nvidia-h100-pcie_bf16.json: format must be 1"):
        tuning.load("NVIDIA H100 PCIe", "bf16")
    (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps({**ref, "device": {}}))
    tuning.clear()
    with pytest.raises(ValueError, match="KeyError"):
        tuning.load("NVIDIA H100 PCIe", "bf16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        tuning.load(H200, "fp32")
    assert tuning.gpu_slug("NVIDIA H200") == "nvidia-h200" and tuning.gpu_slug("") == "unknown"


def test_an_override_carries_how_it_was_timed():
    parsed = tuning.parse({"format": 1, "gpu": "g", "dtype": "bf16", "device": {"launch_us": 1, "hbm_gbps": 1,
                           "sm_gbps": 1}, "configs": {}, "overrides": [
        {"kernel": "dual", "accumulation": "fast", "M": 4096, "N": 8, "K": 8, "config": "c", "protocol": "sustained"},
        {"kernel": "dual", "accumulation": "fast", "M": 16, "N": 8, "K": 8, "config": "c"}]})
    assert parsed.overrides["dual", "fast", 4096, 8, 8].protocol == "sustained"
    assert parsed.overrides["dual", "fast", 16, 8, 8].protocol == "interleaved"
    assert parsed.device.energy_us_per_byte == 0.0  # no power term unless the file sets one


def test_a_file_of_sustained_launches_alone_takes_the_reference_calibration(monkeypatch, tmp_path):
    folder = tmp_path / "user"
    folder.mkdir()
    monkeypatch.setattr(tuning, "user_dir", lambda: folder)
    section = {"from_m": 2048, "launches": {"dual_pingpong_128x160x64_2x1@2:4": {"tile_us": 0.5, "k_tile_us": 0.25,
                                                                                 "cells": 45}}}
    (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps(
        {"format": 1, "gpu": "NVIDIA H100 PCIe", "dtype": "bf16", "sustained": section}))
    tuning.clear()
    ref, mine = tuning.load(H200, "bf16"), tuning.load("NVIDIA H100 PCIe", "bf16")
    assert mine.source == folder / "nvidia-h100-pcie_bf16.json" and mine.costs_from == ref.source
    assert mine.costs == ref.costs and mine.device == ref.device and mine.smem_bytes == ref.smem_bytes
    assert mine.overrides == {}  # the reference GPU's overrides are its own
    assert mine.sustained_from_m == 2048 and mine.sustained["dual_pingpong_128x160x64_2x1@2:4"].k_tile_us == 0.25
    assert mine.sustained_launches(2047) == {} and len(mine.sustained_launches(2048)) == 1
    # a bad launch key, or a section without from_m, is named with the file
    for bad in ({**section, "launches": {"dual_pingpong_128x160x64_2x1": {"tile_us": 0, "k_tile_us": 1}}},
                {"launches": section["launches"]}):
        (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps(
            {"format": 1, "gpu": "NVIDIA H100 PCIe", "dtype": "bf16", "sustained": bad}))
        tuning.clear()
        with pytest.raises(ValueError, match="nvidia-h100-pcie_bf16.json: "):
            tuning.load("NVIDIA H100 PCIe", "bf16")


def test_launch_keys_round_trip_and_bad_ones_are_refused():
    key = tuning.launch_key("packed_pingpong_128x192x64_2x1", 2, 4)
    assert key == "packed_pingpong_128x192x64_2x1@2:4"
    assert tuning.split_launch_key(key) == ("packed_pingpong_128x192x64_2x1", 2, 4)
    for bad in ("cublas_gemm", "x@2", "x@a:4", "@2:4", "x@2:"):
        with pytest.raises(ValueError, match="a launch key is"):
            tuning.split_launch_key(bad)


def _shipped(kind: str) -> list:
    """The package's tuned files: cost files (``kind="costs"``) or bands files (``"bands"``)."""
    paths = sorted(tuning.PACKAGE_DIR.glob("*.json"))
    return [p for p in paths if p.name.endswith("_families.json") == (kind == "bands")]


def test_the_shipped_files_name_their_gpus_and_hold_sustained_launches():
    assert _shipped("costs")
    for path in _shipped("costs"):
        data = json.loads(path.read_text())
        assert path.name == tuning.file_name(data["gpu"], data["dtype"])
        parsed = tuning.load(data["gpu"], data["dtype"])
        assert parsed.source == path and parsed.sustained and parsed.sustained_from_m >= 1024


# The shapes `fused-swiglu tune --families` times by default, in its order: a bands file's cells per size.
TUNED_WIDTHS = (4864, 8960, 11008, 18944, 13824, 27648, 29568)  # I of Qwen2.5 0.5B ... 72B


def test_the_shipped_bands_serve_their_gpu_with_configs_timed_at_every_size_they_cover():
    """Every cell of a size a band covers timed the band's launch, or, where that launch was not timed (not legal
    there), its config's default launch, which the choice runs instead. For the families chosen by M, the launch
    the choice runs at each cell (family_choice at that M and I) was timed there."""
    assert _shipped("bands")
    for path in _shipped("bands"):
        data = json.loads(path.read_text())
        assert path.name == tuning.bands_file_name(data["gpu"])
        bands = tuning.load_bands(data["gpu"])
        assert bands.source == path and len(bands.families) == len(data["families"])
        for entry in data["families"]:
            sizes = sorted(int(size) for size in entry["cells"])
            for size in sizes:
                band = bands.band(entry["kernel"], entry["accumulation"], size)
                key = (band.config if (band.raster, band.swizzle) == (0, 1)
                       else tuning.launch_key(band.config, band.raster, band.swizzle))
                assert all(key in cell or band.config in cell for cell in entry["cells"][str(size)]), \
                    (path.name, size, band)
                assert any(key in cell for cell in entry["cells"][str(size)]), (path.name, size, band)
                if entry["by"] != "M":
                    continue
                for I, cell in zip(TUNED_WIDTHS, entry["cells"][str(size)], strict=True):
                    choice, why = configs.family_choice(entry["kernel"], entry["accumulation"], size, size, I,
                                                        data["gpu"], "bf16", None, ("(the rule)", "the rule"))
                    ran = catalog.split_config(choice.name)[0]
                    ran = ran if (choice.raster, choice.swizzle) == (0, 1) else tuning.launch_key(
                        ran, choice.raster, choice.swizzle)
                    assert ran in cell, (path.name, entry["kernel"], size, I, choice, why)


def _reports_of(table):
    """A stand-in for :func:`tuning.reported`: the reports of the GPUs named in ``table``."""
    return lambda gpu: table.get(gpu)


def test_a_gpu_without_a_file_takes_the_data_of_the_gpu_whose_reports_match(monkeypatch):
    h100 = tuning.load("NVIDIA H100 80GB HBM3", "bf16")
    assert h100.reports == tuning.Reports(132, 1980.0, 3352.3, 52428800.0)
    ref = tuning.load(H200, "bf16")
    table = {"NVIDIA H800": tuning.Reports(132, 1980.0, 3352.3),  # an H100 with other links
             "NVIDIA H100 NVL": tuning.Reports(132, 1785.0, 3938.0),  # 10 % off in clock, 17 % in bandwidth
             "NVIDIA H20": tuning.Reports(78, 1980.0, 4022.0)}  # other SM count
    monkeypatch.setattr(tuning, "reported", _reports_of(table))
    tuning.clear()
    h800 = tuning.load("NVIDIA H800", "bf16")
    assert h800.matched == "NVIDIA H100 80GB HBM3" and h800.source == h100.source and h800.gpu == "NVIDIA H800"
    assert h800.sustained == h100.sustained and not h800.overrides_apply
    h200 = tuning.load(H200, "bf16")
    assert h200.reports == tuning.Reports(132, 1980.0, 4814.3, 62914560.0)
    monkeypatch.setitem(table, "NVIDIA H200 NVL", tuning.Reports(132, 1785.0, 4814.3))  # 10 % off in clock
    tuning.clear()
    nvl = tuning.load("NVIDIA H200 NVL", "bf16")
    assert nvl.matched == H200 and nvl.sustained == h200.sustained and not nvl.overrides_apply
    for other in ("NVIDIA H100 NVL", "NVIDIA H20", "NVIDIA GH200 480GB"):  # no match, or nothing reported
        data = tuning.load(other, "bf16")
        assert data.matched == "" and data.source == ref.source and not data.overrides_apply
    # the tolerance: NEAR of the file's GPU's clock and bandwidth each; the SM counts must be equal
    known = tuning.Reports(132, 1000.0, 1000.0)
    assert tuning.Reports(132, 1000.0, 1000.0 * (1 - tuning.NEAR)).distance(known) == pytest.approx(tuning.NEAR)
    assert tuning.Reports(114, 1000.0, 1000.0).distance(known) is None


def test_the_closest_matching_file_serves_and_a_user_file_with_reports_counts(monkeypatch, tmp_path):
    folder = tmp_path / "user"
    folder.mkdir()
    monkeypatch.setattr(tuning, "user_dir", lambda: folder)
    ref = json.loads((tuning.PACKAGE_DIR / "nvidia-h200_bf16.json").read_text())
    (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps(
        {**ref, "gpu": "NVIDIA H100 PCIe", "overrides": [], "reports": {"num_sms": 132, "sm_mhz": 1900.0,
                                                                          "memory_gbps": 3352.3}}))
    monkeypatch.setattr(tuning, "reported", _reports_of({"NVIDIA H800": tuning.Reports(132, 1980.0, 3352.3),
                                                          "NVIDIA H801": tuning.Reports(132, 1910.0, 3352.3)}))
    tuning.clear()
    assert tuning.load("NVIDIA H800", "bf16").matched == "NVIDIA H100 80GB HBM3"  # 0 % off, against 4 %
    assert tuning.load("NVIDIA H801", "bf16").matched == "NVIDIA H100 PCIe"  # 0.5 % off, against 3.5 %
    (folder / "nvidia-h100-pcie_bf16.json").write_text(json.dumps({**ref, "reports": {"num_sms": "many"}}))
    tuning.clear()
    with pytest.raises(ValueError, match="nvidia-h100-pcie_bf16.json: "):
        tuning.load("NVIDIA H801", "bf16")


def test_reports_from_device_properties():
    class Props:
        multi_processor_count, clock_rate, memory_clock_rate, memory_bus_width = 132, 1980000, 2619000, 5120

    assert tuning.Reports.of(Props()) == tuning.Reports(132, 1980.0, 3352.3)  # no L2 size reported: 0
    Props.L2_cache_size = 50 * 2**20
    assert tuning.Reports.of(Props()) == tuning.Reports(132, 1980.0, 3352.3, 50 * 2**20)
    assert tuning.reported("") is None


def test_reported_reads_the_named_device_and_older_properties_give_none(monkeypatch):
    import types

    import torch

    full = types.SimpleNamespace(name="NVIDIA H800", multi_processor_count=132, clock_rate=1980000,
                                 memory_clock_rate=2619000, memory_bus_width=5120)
    old = types.SimpleNamespace(name="NVIDIA H20", multi_processor_count=78)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: (full, old)[i])
    tuning.reported.cache_clear()
    try:
        assert tuning.reported("NVIDIA H800") == tuning.Reports(132, 1980.0, 3352.3)
        assert tuning.reported("NVIDIA H20") is None and tuning.reported("NVIDIA B200") is None
    finally:
        tuning.reported.cache_clear()


def test_each_shipped_training_rule_covers_the_cells_its_source_measured_the_fused_step_slower_and_no_faster_one():
    root = Path(__file__).resolve().parents[1]
    for path in _shipped("costs"):
        data = json.loads(path.read_text())
        rule = tuning.load(data["gpu"], data["dtype"]).training_unfused
        if rule is None:
            continue
        rows = json.loads((root / rule.source).read_text())["rows"]
        fused = [r for r in rows if r["method"] == "fused_dual"]  # what a patched block runs
        assert fused and any(r["eager_over"] < 1 for r in fused)
        for r in fused:
            covered = r["tokens"] >= rule.from_m and r["hidden_size"] >= rule.from_h
            if r["eager_over"] < 1:
                assert covered, (path.name, r["model"], r["tokens"])
            # and none it covers where the fused step was faster beyond a cell's noise (entry 104: 1-5 %)
            assert not covered or r["eager_over"] < 1.01, (path.name, r["model"], r["tokens"], r["eager_over"])


def test_the_training_rule_is_read_from_the_file_that_measured_it(tmp_path):
    h200 = tuning.load(H200, "bf16")
    assert h200.training_unfused == tuning.TrainingRule(8192, 3584, "docs/results/h200/backward_sustained.json")
    root = Path(__file__).resolve().parents[1]
    assert (root / h200.training_unfused.source).is_file()
    h100 = tuning.load("NVIDIA H100 80GB HBM3", "bf16").training_unfused
    assert h100 == tuning.TrainingRule(2048, 8192, "docs/results/h100/backward_sustained.json")
    ref = json.loads((tuning.PACKAGE_DIR / "nvidia-h200_bf16.json").read_text())
    bad = tmp_path / "x_bf16.json"
    bad.write_text(json.dumps({**ref, "training": {"unfused_from_m": 8192}}))
    with pytest.raises(ValueError, match="x_bf16.json: KeyError"):
        tuning._read(bad)


def _families_file(folder: Path, gpu: str, families) -> None:
    folder.mkdir(exist_ok=True)
    (folder / tuning.bands_file_name(gpu)).write_text(json.dumps({"format": 1, "gpu": gpu, "families": families}))


FP8_BANDS = {"kernel": "packed_fp8", "accumulation": "fast", "by": "M", "bands": [
    {"up_to": 8, "config": "packed_fp8_swapab_pingpong_64x16x128_1x1_e4m3"},
    {"up_to": 512, "config": "packed_fp8_pingpong_64x128x128_1x1_e4m3"},
    {"up_to": None, "config": "packed_fp8_pingpong_128x192x128_2x1_e4m3", "raster": 1, "swizzle": 4}]}


def test_family_bands_serve_their_gpu_by_size_and_no_other(monkeypatch, tmp_path):
    monkeypatch.setattr(tuning, "user_dir", lambda: tmp_path / "user")
    _families_file(tmp_path / "user", "Test GPU", [FP8_BANDS])
    tuning.clear()
    mine = tuning.load_bands("Test GPU")
    assert mine.source == tmp_path / "user" / "test-gpu_families.json"
    # a GPU's costs do not come from its bands file: the choice of its 16-bit kernels is what it was
    assert tuning.load("Test GPU", "bf16").source == tuning.load(H200, "bf16").source
    got = {M: mine.band("packed_fp8", "fast", M) for M in (1, 8, 9, 512, 513, 10**6)}
    assert [b.config.split("_")[-3] for b in got.values()] == ["64x16x128", "64x16x128", "64x128x128", "64x128x128",
                                                              "128x192x128", "128x192x128"]
    assert (got[513].raster, got[513].swizzle) == (1, 4) and got[8].up_to == 8 and got[513].up_to is None
    assert mine.band("packed_fp8", "promoted", 4) is None and mine.band("dswiglu", "fast", 4096) is None
    assert tuning.load_bands("Other GPU").band("packed_fp8", "fast", 1) is None  # no file of its own: no bands
    assert tuning.load_bands("").families == {}


@pytest.mark.parametrize("change, says", [
    ({"kernel": "packed"}, "kernel must be one of packed_fp8, "),
    ({"by": "H"}, "packed_fp8 is chosen by M; got by='H'"),
    ({"accumulation": "promoted"}, "band config must be one of packed_fp8_pingpong_64x128x128_1x1_promote1_e4m3"),
    ({"kernel": "dual_fp8", "accumulation": "promoted", "by": "M"}, "dual_fp8 has no configs of accumulation"),
    ({"bands": [{"up_to": 8, "config": "packed_fp8_pingpong_64x128x128_1x1_e4m3"}]}, "null last"),
    ({"bands": [{"up_to": None, "config": "x"}, {"up_to": None, "config": "x"}]}, "null last"),
    ({"bands": [{"up_to": 64, "config": "x"}, {"up_to": 16, "config": "x"}, {"up_to": None, "config": "x"}]},
     "increasing positive up_to bounds"),
    ({"bands": [{"up_to": 0, "config": "x"}, {"up_to": None, "config": "x"}]}, "increasing positive"),
    ({"bands": []}, "null last"),
    ({"bands": [{"up_to": None, "config": "packed_fp8_pingpong_64x128x128_1x1_e4m3", "swizzle": 3}]},
     "swizzle 1, 2, 4 or 8"),
    ({"bands": [{"up_to": None}]}, "KeyError: 'config'"),
    ({"bands": [5]}, "bands must be objects; got 5"),
    ({"bands": "x"}, "an object with a list of bands"),
    ({"bands": [{"up_to": 16.9, "config": "x"}, {"up_to": None, "config": "x"}]}, "up_to must be an integer; got 16.9"),
    ({"bands": [{"up_to": True, "config": "x"}, {"up_to": None, "config": "x"}]}, "up_to must be an integer; got True"),
])
def test_a_bad_family_entry_is_named_with_its_file(monkeypatch, tmp_path, change, says):
    monkeypatch.setattr(tuning, "user_dir", lambda: tmp_path / "user")
    _families_file(tmp_path / "user", "Test GPU", [{**FP8_BANDS, **change}])
    tuning.clear()
    with pytest.raises(ValueError, match="test-gpu_families.json: .*" + says.replace("(", r"\(").replace(")", r"\)")):
        tuning.load_bands("Test GPU")
    _families_file(tmp_path / "user", "Test GPU", [5])
    tuning.clear()
    with pytest.raises(ValueError, match="each entry must be an object"):
        tuning.load_bands("Test GPU")
    assert tuning.load("Test GPU", "bf16").costs  # a bad bands file never stops the 16-bit choice


def test_a_gpu_matching_none_takes_the_reference_costs_scaled_to_what_it_reports(monkeypatch):
    """An H20-like part: 78 SMs (no file's SM count), the H200's clock, 0.83x its memory bandwidth."""
    import torch

    from fused_swiglu import configs

    ref = tuning.load(H200, "bf16")
    mine = tuning.Reports(78, ref.reports.sm_mhz / 1.1, ref.reports.memory_gbps * 0.83)
    monkeypatch.setattr(tuning, "reported", lambda gpu: mine if gpu == "NVIDIA H20" else None)
    tuning.clear()
    got = tuning.load("NVIDIA H20", "bf16")
    assert got.scaled_to == mine and not got.overrides_apply and got.matched == ""
    name = next(iter(ref.costs))
    assert got.costs[name].tile_us == pytest.approx(ref.costs[name].tile_us * 1.1)
    assert got.costs[name].k_tile_us == pytest.approx(ref.costs[name].k_tile_us * 1.1)
    assert got.device.hbm_gbps == pytest.approx(ref.device.hbm_gbps * 0.83)
    assert got.device.launch_us == pytest.approx(ref.device.launch_us * 1.1)
    key = next(iter(ref.sustained))
    assert got.sustained[key].tile_us == pytest.approx(ref.sustained[key].tile_us * 1.1)
    assert got.unfused.us_per_mb == pytest.approx(ref.unfused.us_per_mb / 0.83)
    why = configs.explain("dual", "", 16, 4864, 896, torch.bfloat16, 78, "NVIDIA H20")[1]
    assert f"its costs scaled to the {mine.sm_mhz:.0f} MHz SM clock and {mine.memory_gbps:.0f} GB/s" in why
    # each DRAM byte costs the difference of the two GPUs' times per byte, added to the sustained ranking
    assert ref.us_per_dram_byte == 0
    assert got.us_per_dram_byte == pytest.approx(1e-3 / mine.memory_gbps - 1e-3 / ref.reports.memory_gbps)
    M, N, K = 8192, 29568, 8192
    plain = dataclasses.replace(got, us_per_dram_byte=0.0)
    with_memory = {v: t for t, v in configs.sustained_ranking("dual", M, N, K, "fast", 78, got)}
    without = {v: t for t, v in configs.sustained_ranking("dual", M, N, K, "fast", 78, plain)}
    assert with_memory.keys() == without.keys() and len(with_memory) > 1
    for v, t in with_memory.items():
        dram = cost_model.dram_traffic(v, M, N, K, 78, got.device.l2_reuse_bytes, v.raster, v.swizzle)
        assert t == pytest.approx(without[v] + got.us_per_dram_byte * dram)
    why = configs.explain("dual", "", M, N, K, torch.bfloat16, 78, "NVIDIA H20")[1]
    assert "each byte a launch moves through DRAM charged at that bandwidth" in why
    # not visible (no reports): the reference's costs as measured
    assert tuning.load("NVIDIA H20 other", "bf16").scaled_to is None
    # no L2 size reported: the reference's L2 terms as they are; reported: scaled by the two sizes' ratio
    assert mine.l2_bytes == 0 and got.device.l2_reuse_bytes == ref.device.l2_reuse_bytes
    smaller = dataclasses.replace(mine, l2_bytes=ref.reports.l2_bytes * 0.8)
    again = tuning.scaled(ref, smaller)
    assert again.device.l2_reuse_bytes == pytest.approx(ref.device.l2_reuse_bytes * 0.8)
    assert again.device.l2_bytes == pytest.approx(ref.device.l2_bytes * 0.8)
    assert "MiB L2" not in configs.explain("dual", "", M, N, K, torch.bfloat16, 78, "NVIDIA H20")[1]
    monkeypatch.setattr(tuning, "reported", lambda gpu: smaller if gpu == "NVIDIA H20" else None)
    tuning.clear()
    why = configs.explain("dual", "", M, N, K, torch.bfloat16, 78, "NVIDIA H20")[1]
    assert f"the L2 it may reuse scaled to its {smaller.l2_bytes / 2**20:.0f} MiB L2" in why


def test_a_band_whose_launch_cannot_serve_runs_its_config_at_the_default_launch(monkeypatch, tmp_path):
    """A band's raster and swizzle are tuned at some sizes; where they pad the grid past the rule at another
    problem, the band's config still serves there with raster 0 and swizzle 1, before the family's rule."""
    monkeypatch.setattr(tuning, "user_dir", lambda: tmp_path / "user")
    _families_file(tmp_path / "user", "Test GPU", [{"kernel": "packed_fp8", "accumulation": "fast", "by": "M", "bands": [
        {"up_to": None, "config": "packed_fp8_pingpong_128x192x128_1x1_e4m3", "raster": 2, "swizzle": 8}]}])
    tuning.clear()
    try:
        wide, why = configs.explain("packed_fp8", "", 2048, 18944, 3584, torch.bfloat16, gpu="Test GPU")
        assert (wide.name, wide.raster, wide.swizzle) == ("packed_fp8_pingpong_128x192x128_1x1_e4m3", 2, 8)
        narrow, why = configs.explain("packed_fp8", "", 2048, 4864, 896, torch.bfloat16, gpu="Test GPU")
        assert (narrow.name, narrow.raster, narrow.swizzle) == ("packed_fp8_pingpong_128x192x128_1x1_e4m3", 0, 1)
        assert "launched with raster 0 and swizzle 1" in why and "is not a launch for M = 2048, I = 4864" in why
    finally:
        tuning.clear()
