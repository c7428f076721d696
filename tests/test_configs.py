"""configs: the config choice. These tests check invariants of the rule and of the shipped tuned
data (every choice compiled and legal, every override reachable), not which config wins where."""

import dataclasses
import json
import re
import warnings

import pytest
import torch

import fused_swiglu._validate as v
from fused_swiglu import catalog, configs, cost_model, env, tuning
from fused_swiglu.bench.model_shapes import SWEEP_MODELS
from fused_swiglu.bench.shapes import MODELS
from fused_swiglu.configs import KernelConfig, select

ALL = frozenset(catalog.names())
SHAPES = sorted({(s.intermediate_size, s.hidden_size) for s in (*MODELS, *SWEEP_MODELS)}) + [(200, 64), (4104, 2056)]
TOKENS = [0, 1, 3, 7, 16, 17, 100, 127, 128, 129, 256, 333, 511, 512, 1000, 2048, 2304, 3000, 4097, 6000, 8192]


pytestmark = pytest.mark.usefixtures("package_data_only")

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"


def test_name_format():
    c = KernelConfig("packed", "pingpong", 128, 192, 64, 2, 1)
    assert c.name(torch.bfloat16) == "packed_pingpong_128x192x64_2x1_bf16"
    assert c.name(torch.float16) == "packed_pingpong_128x192x64_2x1_fp16"
    assert c.base_name == "packed_pingpong_128x192x64_2x1"
    with pytest.raises(TypeError, match="dtype"):
        c.name(torch.float32)
    with pytest.raises(Exception):
        c.tile_m = 64  # frozen
    promoted = KernelConfig("dual", "cooperative", 128, 128, 64, 2, 1, promote=4)
    assert promoted.name(torch.float16) == "dual_cooperative_128x128x64_2x1_promote4_fp16"
    assert configs.is_promoted(promoted.name(torch.float16)) and not configs.is_promoted(c.name(torch.float16))
    swap = KernelConfig("packed", "pingpong", 128, 16, 64, 1, 1, swap_ab=True)
    assert swap.name(torch.bfloat16) == "packed_swapab_pingpong_128x16x64_1x1_bf16"
    paired = KernelConfig("dual", "pingpong", 128, 192, 64, 1, 1, paired=True)
    assert paired.name(torch.bfloat16) == "dual_paired_pingpong_128x192x64_1x1_bf16"


def test_catalog_names_are_the_configs_names():
    assert [c.name(d) for c in configs.CATALOG for d in (torch.bfloat16, torch.float16)] == catalog.names()
    assert len(set(catalog.names())) == len(catalog.names())
    assert configs.choosable_configs() == frozenset(configs.CATALOG)


def _choices(kernel, accumulation, num_sms=132, gpu=H200):
    for n, h in SHAPES:
        for M in TOKENS:
            yield (M, n, h), configs.choose_config(kernel, M, n, h, accumulation, num_sms, gpu)


@pytest.mark.parametrize("kernel", configs.KERNELS)
@pytest.mark.parametrize("accumulation", configs.ACCUMULATIONS)
def test_every_choice_is_compiled_legal_and_of_its_kind(kernel, accumulation):
    data = tuning.load(H200, "bf16")
    for (M, n, h), c in _choices(kernel, accumulation):
        assert c.base_name in configs.BY_BASE_NAME, c
        assert c.kernel == kernel and c.accumulation == accumulation, (M, n, h, c)
        if configs.sustained_ranking(kernel, M, n, h, accumulation, 132, data):
            # a launch timed at the power cap: its costs count the padding tiles it runs
            assert tuning.launch_key(c.base_name, c.raster, c.swizzle) in data.sustained, (M, n, h, c)
            continue
        assert configs.legal(c, M, n), (M, n, h, c)
        assert configs.token_tiles_fill_clusters(c, M, n)
        assert configs.swizzle_padding(c, M, n) <= configs.SWIZZLE_PADDING_MAX


def test_every_compiled_config_is_chosen_somewhere():
    """No catalog entry that the rule never picks on some GPU with shipped data (each costs compile time in
    every build)."""
    chosen = set()
    for gpu in (H200, H100):
        for kernel in configs.KERNELS:
            for accumulation in configs.ACCUMULATIONS:
                chosen |= {c.base_name for _, c in _choices(kernel, accumulation, gpu=gpu)}
        chosen |= {o.config for o in tuning.load(gpu, "bf16").overrides.values()}
    assert {c.base_name for c in configs.CATALOG} - chosen == set()


def test_shipped_data_covers_every_config_and_its_overrides_are_reachable():
    data = tuning.load(H200, "bf16")
    assert data.source == tuning.PACKAGE_DIR / "nvidia-h200_bf16.json" and data.overrides_apply
    # the interleaved calibration prices every config but those timed only at the power cap (sustained
    # launches of some GPU's file, from its M on)
    sustained_only = {c.base_name for c in configs.CATALOG} - set(data.costs)
    priced = {tuning.split_launch_key(k)[0] for gpu in (H200, H100) for k in tuning.load(gpu, "bf16").sustained}
    assert set(data.costs) <= {c.base_name for c in configs.CATALOG} and sustained_only <= priced
    assert all(c.k_tile_us > 0 and c.gbps >= 0 for c in data.costs.values())  # gbps 0: the device's
    assert set(data.smem_bytes) == set(data.costs) and max(data.smem_bytes.values()) <= 232448
    raw = json.loads(data.source.read_text())
    num_sms = raw["num_sms"]
    for o in raw["overrides"]:
        key = (o["kernel"], o["accumulation"], o["M"], o["N"], o["K"])
        override = data.overrides[key]
        base = configs.BY_BASE_NAME[override.config]
        assert (base.kernel, base.accumulation) == key[:2]
        config = dataclasses.replace(base, raster=override.raster, swizzle=override.swizzle)
        assert configs.legal(config, o["M"], o["N"]), o
        assert o["gain"] is None or o["gain"] > tuning.OVERRIDE_GAIN, o
        got = configs.choose_config(o["kernel"], o["M"], o["N"], o["K"], o["accumulation"], num_sms, H200)
        model = configs.model_config(*key[:1], o["M"], o["N"], o["K"], o["accumulation"], num_sms, data)
        if not configs.override_applies(override, config, o["M"], o["N"], o["K"], num_sms, data):
            # timed interleaved, at an M where the GPU runs at its power cap, with a tile order that re-reads
            assert o["M"] >= tuning.SUSTAINED_FROM_M and override.protocol == "interleaved", o
            assert got == model
            continue
        assert (model.base_name, model.raster, model.swizzle) != (override.config, override.raster, override.swizzle), o
        # the override is what the rule returns for its problem
        assert (got.base_name, got.raster, got.swizzle) == (override.config, override.raster, override.swizzle)


def test_the_choice_follows_the_device_s_sm_count():
    """An H100 PCIe (114 SMs) runs rounds of 114 CTAs: the model's ranking changes with the SM count
    on some problems (the overrides are the H200's and apply to its SM count's data only by name)."""
    data = tuning.load("", "bf16")
    differ = 0
    for n, h in SHAPES:
        for M in TOKENS:
            a = configs.model_config("packed", M, n, h, "fast", 132, data)
            b = configs.model_config("packed", M, n, h, "fast", 114, data)
            differ += a != b
    assert differ > 0
    c = configs.CATALOG[0]
    assert cost_model.rounds(c, 64, 64 * 114, 114) == (2, 114)
    assert cost_model.rounds(c, 64, 64 * 114, 132) == (2, 132)
    with pytest.raises(ValueError, match="num_sms must be >= 1"):
        configs.choose_config("packed", 256, 14336, 4096, num_sms=0)


def test_legality():
    pp = configs.BY_BASE_NAME["packed_pingpong_128x128x64_2x1"]
    assert configs.token_tiles_fill_clusters(pp, 256, 4096)  # 2 token tiles
    assert not configs.token_tiles_fill_clusters(pp, 384, 4096)  # 3 token tiles: half a cluster
    pn = configs.BY_BASE_NAME["packed_pingpong_128x128x64_1x2"]
    assert configs.token_tiles_fill_clusters(pn, 384, 4096) and not configs.token_tiles_fill_clusters(pn, 384, 4160)
    co = configs.BY_BASE_NAME["packed_cooperative_128x192x64_2x1_promote4"]
    assert configs.token_tiles_fill_clusters(co, 384, 4096)  # Cooperative: exempt
    # CUTLASS's swizzle rounding: M = 2304 with swizzle 8 and a 2x1 cluster pads 18 token tiles to 32
    wide = KernelConfig("packed", "pingpong", 128, 192, 64, 2, 1, raster=2, swizzle=8)
    assert configs.swizzle_padding(wide, 2304, 27648) == pytest.approx(32 / 18)
    assert not configs.legal(wide, 2304, 27648) and configs.legal(wide, 4096, 27648)
    assert configs.legal(pp, 256, 4096, smem_limit=100_000) is True  # no smem figures given: not checked
    assert not configs.legal(pp, 256, 4096, smem_limit=100_000, smem_bytes={pp.base_name: 213504})
    assert configs.legal(pp, 256, 4096, smem_limit=232448, smem_bytes={pp.base_name: 213504})


def test_swap_ab_configs_serve_up_to_four_token_tiles():
    narrow = configs.BY_BASE_NAME["packed_swapab_pingpong_128x16x64_1x1"]
    wide = configs.BY_BASE_NAME["packed_swapab_pingpong_128x112x64_1x1"]
    assert configs.swap_ab_serves(narrow, 64) and not configs.swap_ab_serves(narrow, 65)
    assert configs.swap_ab_serves(wide, 448) and not configs.swap_ab_serves(wide, 449)
    assert configs.launch_options(wide, 449, 4864) == [] and configs.launch_options(wide, 333, 4864)
    # the one swap-AB launch measured past the bound, 0.80x cuBLAS at M = 1000 on an H100, is no longer chosen
    chosen, _ = configs.explain("dual", "", 1000, 13824, 5120, torch.bfloat16, 132, "NVIDIA H100 80GB HBM3",
                                available=ALL)
    assert "swapab" not in chosen.name
    big = configs.BY_BASE_NAME["packed_pingpong_128x192x64_2x1"]
    assert configs.swap_ab_serves(big, 1 << 20)
    for (M, _, _), c in _choices("packed", "fast"):
        assert configs.swap_ab_serves(c, M), (M, c)


def test_a_gpu_with_less_shared_memory_gets_only_configs_that_fit():
    data = tuning.load(H200, "bf16")
    limit = sorted(data.smem_bytes.values())[len(data.smem_bytes) // 2]
    for (M, n, h), c in _choices_with_limit(limit):
        assert data.smem_bytes[c.base_name] <= limit, (M, n, h, c)


def _choices_with_limit(limit):
    for n, h in SHAPES[:4]:
        for M in (1, 128, 2048):
            for kernel in configs.KERNELS:
                try:
                    yield (M, n, h), configs.choose_config(kernel, M, n, h, "fast", 132, H200, smem_limit=limit)
                except ValueError as e:  # nothing of this kernel fits: said so, naming the problem
                    assert "is legal for" in str(e)


@pytest.mark.parametrize("kernel", ["packed", "dual"])
@pytest.mark.parametrize("M", [1, 128, 512, 2048, 8192])
def test_accumulation_chooses_among_its_own_configs(kernel, M):
    for n, h in [(4864, 896), (18944, 3584), (29568, 8192)]:
        fast = select(kernel, M, n, h, torch.bfloat16, ALL).name
        promoted = select(kernel, M, n, h, torch.bfloat16, ALL, accumulation="promoted").name
        assert not configs.is_promoted(fast) and f"_promote{configs.PROMOTE}_" in promoted
        assert promoted.startswith(kernel + "_") and promoted.endswith("_bf16")
    with pytest.raises(ValueError, match="accumulation must be one of"):
        select(kernel, M, 64, 64, torch.bfloat16, ALL, accumulation="exact")


def test_promoted_never_falls_back_to_fast_accumulation(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    fast_only = frozenset(n for n in ALL if not configs.is_promoted(n))
    with pytest.raises(NotImplementedError, match="accumulation='promoted'"):
        select("packed", 2048, 18944, 3584, torch.bfloat16, fast_only, accumulation="promoted")
    # an override naming a fast config does not apply to promoted calls, and vice versa
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "packed_pingpong_128x192x64_2x1_bf16")
    assert configs.is_promoted(select("packed", 1, 64, 64, torch.bfloat16, ALL, accumulation="promoted").name)


def test_env_override_applies_to_its_kernel_and_dtype(monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "packed_pingpong_128x192x64_2x1_bf16, dual_pingpong_64x128x64_1x1_fp16")
    assert select("packed", 1, 64, 64, torch.bfloat16, ALL).name == "packed_pingpong_128x192x64_2x1_bf16"
    assert select("dual", 4096, 64, 64, torch.float16, ALL).name == "dual_pingpong_64x128x64_1x1_fp16"
    own = configs.choose_config("dual", 4096, 64, 64, dtype=torch.bfloat16)
    assert select("dual", 4096, 64, 64, torch.bfloat16, ALL).name == own.name(torch.bfloat16)


def test_env_override_names_outside_the_library_are_ignored_with_a_warning(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "garbage, packed_pingpong_256x192x64_2x1_bf16,,")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        big = select("packed", 8192, 29568, 8192, torch.bfloat16, ALL)
        select("packed", 4096, 29568, 8192, torch.bfloat16, ALL)  # another problem: no second warning
    own = configs.choose_config("packed", 8192, 29568, 8192)
    assert (big.name, big.raster, big.swizzle) == (own.name(torch.bfloat16), own.raster, own.swizzle)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2, messages  # one per bad name, once per process
    assert "'garbage', which is not a config of the kernel library" in messages[0]
    assert "'packed_pingpong_256x192x64_2x1_bf16'" in messages[1]


def test_env_override_of_the_choice_keeps_its_launch_parameters(monkeypatch):
    # a problem whose choice launches with non-default parameters (the rule ranks rasterised and
    # swizzled launches at large M)
    (M, n, h), own = next(((p, c) for p, c in _choices("packed", "fast") if (c.raster, c.swizzle) != (0, 1)))
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", own.name(torch.bfloat16))
    got = select("packed", M, n, h, torch.bfloat16, ALL, gpu=H200)
    assert (got.name, got.raster, got.swizzle) == (own.name(torch.bfloat16), own.raster, own.swizzle)
    other = next(c for c in configs.candidates("packed", "fast") if c.base_name != own.base_name and not c.swap_ab)
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", other.name(torch.bfloat16))
    configs._select.cache_clear()
    got = select("packed", M, n, h, torch.bfloat16, ALL, gpu=H200)
    assert (got.name, got.raster, got.swizzle) == (other.name(torch.bfloat16), 0, 1)


def test_env_override_may_give_the_launch_and_a_bad_launch_is_ignored_with_a_warning(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "packed_pingpong_128x192x64_1x1_bf16@7:8, "
                       "packed_pingpong_128x192x64_2x1_bf16@1:4")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = select("packed", 8192, 18944, 3584, torch.bfloat16, ALL, gpu=H200)
    assert (got.name, got.raster, got.swizzle) == ("packed_pingpong_128x192x64_2x1_bf16", 1, 4)
    (message,) = [str(w.message) for w in caught]
    assert "FUSED_SWIGLU_CONFIG: config's launch must have raster in (0, 1, 2)" in message and "ignored" in message
    choice, why = configs.explain("packed", "", 8192, 18944, 3584, torch.bfloat16, gpu=H200, available=ALL)
    assert (choice.raster, choice.swizzle) == (1, 4) and why == "FUSED_SWIGLU_CONFIG names it"


def test_explain_does_not_credit_an_override_whose_launch_was_ignored(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    own = configs.select("packed", 8192, 18944, 3584, torch.bfloat16, ALL, gpu=H200)
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", own.name + "@7:8")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        choice, why = configs.explain("packed", "", 8192, 18944, 3584, torch.bfloat16, gpu=H200, available=ALL)
    assert choice == own and "FUSED_SWIGLU_CONFIG" not in why


def test_fallback_to_available_config_warns_once(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    avail = frozenset({"dual_cooperative_128x256x64_1x1_bf16", "packed_pingpong_64x128x64_1x1_bf16",
                       "dual_cooperative_128x128x64_2x1_promote4_fp16"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert select("dual", 4096, 64, 64, torch.bfloat16, avail).name == "dual_cooperative_128x256x64_1x1_bf16"
        assert select("dual", 8192, 64, 64, torch.bfloat16, avail).name == "dual_cooperative_128x256x64_1x1_bf16"
    assert len(caught) <= 2 and all("not in the kernel library" in str(w.message) for w in caught)
    with pytest.raises(NotImplementedError, match="no dual config for fp16"):
        select("dual", 1, 64, 64, torch.float16, avail)
    with pytest.raises(ValueError, match="kernel must be one of"):
        select("triple", 1, 64, 64, torch.float16, avail)


def test_select_without_a_device_takes_the_current_one(monkeypatch):
    monkeypatch.setattr(configs, "_current_device", lambda: (114, H200, 232448))
    got = select("packed", 333, 14336, 4096, torch.bfloat16, ALL)
    want = configs.choose_config("packed", 333, 14336, 4096, "fast", 114, H200, torch.bfloat16, 232448)
    assert (got.name, got.raster, got.swizzle) == (want.name(torch.bfloat16), want.raster, want.swizzle)
    # a device named by the caller wins
    got = select("packed", 333, 14336, 4096, torch.bfloat16, ALL, num_sms=132, gpu="")
    want = configs.choose_config("packed", 333, 14336, 4096, "fast", 132, "", torch.bfloat16)
    assert got.name == want.name(torch.bfloat16)


def test_problem_sizes_are_checked():
    for bad, err in [(-1, ValueError), (1.5, TypeError), (True, TypeError)]:
        with pytest.raises(err, match="M must be"):
            configs.choose_config("packed", bad, 64, 64)
        with pytest.raises(err, match="N must be"):
            select("packed", 1, bad, 64, torch.bfloat16, ALL)
    with pytest.raises(TypeError, match="dtype"):
        configs.choose_config("packed", 1, 64, 64, dtype=torch.float32)
    with pytest.raises(ValueError, match="kernel must be one of"):
        configs.choose_config("triple", 1, 64, 64)


def test_explicit_config_must_match_the_op_kernel_and_dtype():
    configs.check_config("packed", "packed_pingpong_64x128x64_1x1_bf16", torch.bfloat16)
    configs.check_config("dual", "", torch.float16)
    for kernel, name, dtype in [("dual", "packed_pingpong_64x128x64_1x1_bf16", torch.bfloat16),
                                ("packed", "packed_pingpong_64x128x64_1x1_fp16", torch.bfloat16)]:
        with pytest.raises(ValueError, match="config must name"):
            configs.check_config(kernel, name, dtype)
    with pytest.raises(TypeError, match="config must be a str"):
        configs.check_config("packed", 3, torch.bfloat16)
    with pytest.raises(TypeError, match="config must be a str"):
        configs.grouped.check_grouped_config(None, torch.bfloat16)


def test_an_interleaved_override_stands_where_its_tile_order_re_reads_nothing():
    data = dataclasses.replace(tuning.load(H200, "bf16"), sustained={})  # the cost model's power term
    base = configs.BY_BASE_NAME["dual_pingpong_128x128x64_2x1"]
    interleaved = tuning.Override(base.base_name, 0, 1)
    sustained = tuning.Override(base.base_name, 0, 1, protocol="sustained")
    along_m = dataclasses.replace(base, raster=0, swizzle=1)
    swizzled = dataclasses.replace(base, raster=2, swizzle=8)
    # 7B at M = 8192: along M every wave reads x again; raster N with swizzle 8 re-reads the weights
    assert not configs.override_applies(interleaved, along_m, 8192, 18944, 3584, 132, data)
    assert not configs.override_applies(interleaved, swizzled, 8192, 18944, 3584, 132, data)
    assert configs.override_applies(sustained, along_m, 8192, 18944, 3584, 132, data)
    # below the sustained regime, and where x stays in L2 (7B at M = 2048), it stands
    assert configs.override_applies(interleaved, along_m, 512, 18944, 3584, 132, data)
    assert configs.override_applies(interleaved, along_m, 2048, 18944, 3584, 132, data)


def test_a_grid_that_swizzle_8_pads_gets_swizzle_4_at_the_power_cap():
    # 3B at M = 8192: the 128 x 128 tile's 172 weight tiles are padded to 176 by swizzle 8 (illegal), not
    # by swizzle 4; raster N with swizzle 4 keeps a 512-token panel of x in L2 across the weights
    pp = configs.BY_BASE_NAME["packed_pingpong_128x128x64_2x1"]
    launches = {(v.raster, v.swizzle) for v in configs.launch_options(pp, 8192, 11008)}
    assert (2, 4) in launches and (2, 8) not in launches
    data = dataclasses.replace(tuning.load(H200, "bf16"), sustained={})  # the cost model's power term
    for kernel in ("dual", "packed"):
        chosen = configs.model_config(kernel, 8192, 11008, 2048, "fast", 132, data)
        assert (chosen.raster, chosen.swizzle) == (2, 4), chosen


def _with_sustained(launches: dict[str, tuple[float, float]], from_m: int = 2048) -> tuning.Tuning:
    data = tuning.load(H200, "bf16")
    return dataclasses.replace(data, sustained={k: cost_model.ConfigCosts(a, b) for k, (a, b) in launches.items()},
                               sustained_from_m=from_m)


def test_from_its_m_on_the_choice_ranks_the_sustained_launches_by_their_costs():
    # two launches of one config: the cheaper per k-tile wins wherever both run the same rounds
    data = _with_sustained({"packed_pingpong_128x192x64_2x1@2:4": (0.0, 1.0),
                            "packed_pingpong_128x192x64_2x1@1:8": (0.0, 0.9),
                            "dual_pingpong_128x160x64_2x1@2:8": (0.0, 0.5)})
    ranked = configs.sustained_ranking("packed", 8192, 18944, 3584, "fast", 132, data)
    assert [(c.base_name, c.raster, c.swizzle) for _, c in ranked] == [
        ("packed_pingpong_128x192x64_2x1", 1, 8), ("packed_pingpong_128x192x64_2x1", 2, 4)]
    pick = configs.model_config("packed", 8192, 18944, 3584, "fast", 132, data)
    assert (pick.base_name, pick.raster, pick.swizzle) == ("packed_pingpong_128x192x64_2x1", 1, 8)
    # the predicted time: rounds of the tiles run (padding included) times the launch's costs
    v = dataclasses.replace(configs.BY_BASE_NAME["packed_pingpong_128x192x64_2x1"], raster=1, swizzle=8)
    rounds, _ = cost_model.rounds(v, 8192, 18944, 132, 8)
    assert ranked[0][0] == pytest.approx(rounds * 56 * 0.9)
    # another kernel or accumulation, or M below from_m: not these launches
    assert configs.sustained_ranking("packed", 8192, 18944, 3584, "promoted", 132, data) == []
    assert configs.sustained_ranking("packed", 2047, 18944, 3584, "fast", 132, data) == []
    assert configs.model_config("packed", 2047, 18944, 3584, "fast", 132, data) == configs.model_config(
        "packed", 2047, 18944, 3584, "fast", 132, dataclasses.replace(data, sustained={}))
    # a launch key of a config the catalog lacks is skipped; a shared-memory limit below the config's drops it
    data = _with_sustained({"packed_pingpong_999x192x64_2x1@2:4": (0.0, 0.1),
                            "packed_pingpong_128x192x64_2x1@2:4": (0.0, 1.0)})
    assert len(configs.sustained_ranking("packed", 8192, 18944, 3584, "fast", 132, data)) == 1
    smem = data.smem_bytes["packed_pingpong_128x192x64_2x1"]
    assert configs.sustained_ranking("packed", 8192, 18944, 3584, "fast", 132, data, smem_limit=smem - 1) == []


def test_where_sustained_costs_serve_only_a_sustained_override_stands():
    data = _with_sustained({"dual_pingpong_128x160x64_2x1@2:8": (0.0, 0.5)})
    base = configs.BY_BASE_NAME["dual_pingpong_128x128x64_2x1"]
    swizzled = dataclasses.replace(base, raster=2, swizzle=8)
    interleaved = tuning.Override(base.base_name, 2, 8)
    assert not configs.override_applies(interleaved, swizzled, 2048, 18944, 3584, 132, data)
    assert configs.override_applies(dataclasses.replace(interleaved, protocol="sustained"), swizzled, 2048, 18944,
                                    3584, 132, data)
    # below from_m the interleaved override stands as before
    assert configs.override_applies(interleaved, swizzled, 512, 18944, 3584, 132, data)


@pytest.mark.parametrize("gpu", [H200, "NVIDIA H100 80GB HBM3", "NVIDIA H800", ""])
def test_the_shipped_sustained_launches_serve_every_large_m_choice(gpu):
    """From the data's from_m on, both kernels choose a launch timed at the power cap on that GPU (or, for
    a GPU without data, on the reference GPU)."""
    data = tuning.load(gpu, "bf16")
    assert data.sustained and data.sustained_from_m == 2048
    for n, h in SHAPES:
        for M in (2048, 3000, 4097, 6000, 8192, 12000, 16384):
            for kernel in configs.KERNELS:
                c = configs.choose_config(kernel, M, n, h, "fast", 132, gpu)
                assert tuning.launch_key(c.base_name, c.raster, c.swizzle) in data.sustained, (gpu, M, n, h, c)


def test_explain_says_why_each_kind_of_choice_was_made(monkeypatch):
    def why(kernel, config, M, N, K, available=ALL):
        choice, reason = configs.explain(kernel, config, M, N, K, torch.bfloat16, 132, H200, available=available)
        want = configs.select(kernel, M, N, K, torch.bfloat16, available, configs.AUTO_CONFIG.get(config, "fast"),
                              132, H200) if config in configs.AUTO_CONFIG else configs.Choice(config)
        assert choice == want  # explain never chooses differently
        return choice, reason

    name = "dual_pingpong_128x128x64_1x1_bf16"
    assert why("dual", name, 64, 64, 64)[1] == "named by the call's config argument"
    (kernel, accumulation, M, N, K), found = next(iter(tuning.load(H200, "bf16").overrides.items()))
    choice, reason = why(kernel, "" if accumulation == "fast" else "promoted", M, N, K)
    assert choice.name.startswith(found.config) and reason.startswith("the tuned override for this problem")
    choice, reason = why("dual", "", 512, 18944, 3584)
    assert reason.startswith("the cost model (") and " us predicted; next " in reason
    choice, reason = why("dual", "", 8192, 18944, 3584)
    assert reason.startswith("the sustained costs at the power cap (") and "from M = 2048" in reason
    assert " us predicted; next " in reason
    missing = ALL - {choice.name}
    with warnings.catch_warnings():  # the substitution's own warning (select's, tested elsewhere)
        warnings.simplefilter("ignore", RuntimeWarning)
        fallback, reason = why("dual", "", 8192, 18944, 3584, available=missing)
    assert fallback.name != choice.name and reason.startswith(f"the choice, {choice.name}, is not in the kernel library")
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", name)
    configs._select.cache_clear()
    assert why("dual", "", 8192, 18944, 3584) == (configs.Choice(name), "FUSED_SWIGLU_CONFIG names it")


def test_explain_builds_nothing_and_refuses_sizes_no_kernel_serves(monkeypatch):
    from fused_swiglu import _lib

    def no_library():
        raise AssertionError("explain loaded the kernel library")

    monkeypatch.setattr(_lib, "is_loaded", lambda: False)
    monkeypatch.setattr(_lib, "config_names", no_library)
    choice, why = configs.explain("dual", "", 8192, 18944, 3584, torch.bfloat16, 132, H200)
    assert choice.name in ALL and why.startswith("the sustained costs")
    choice, why = configs.explain("packed", "", 0, 4864, 896, torch.bfloat16, 132, H200)
    assert why.startswith("M = 0: the operators return the empty result without a launch (else: ")
    for N, K in ((18945, 3584), (18944, 0), (0, 3584)):
        with pytest.raises(ValueError, match="positive multiples of 8"):
            configs.explain("dual", "", 16, N, K, torch.bfloat16, 132, H200)


def test_the_unfused_path_is_taken_where_its_costs_predict_it_faster(monkeypatch):
    data = _with_sustained({"dual_pingpong_128x160x64_2x1@2:8": (0.0, 0.5)})
    # the fused launch: rounds x 56 k-tiles x 0.5 us at 7B; the unfused path priced below and above it
    v = dataclasses.replace(configs.BY_BASE_NAME["dual_pingpong_128x160x64_2x1"], raster=2, swizzle=8)
    fused_us = cost_model.predict_sustained_us(v, cost_model.ConfigCosts(0.0, 0.5), 8192, 18944, 3584, 132, 8)
    gflop, mb = cost_model.unfused_features(8192, 18944, 3584)
    def serve(d):
        load = lambda gpu, dtype: d  # noqa: E731
        load.cache_clear = lambda: None  # as tuning.load's
        monkeypatch.setattr(tuning, "load", load)
        configs.unfused_faster.cache_clear()

    for factor, want in ((0.9, True), (1.1, False)):
        serve(dataclasses.replace(data, unfused=cost_model.UnfusedCosts(factor * fused_us / gflop, 0.0)))
        assert configs.unfused_faster("dual", 8192, 18944, 3584, gpu=H200) is want
        # below from_m, with promoted accumulation, or without sustained launches of the kernel: never
        assert not configs.unfused_faster("dual", 2047, 18944, 3584, gpu=H200)
        assert not configs.unfused_faster("dual", 8192, 18944, 3584, "promoted", gpu=H200)
        assert not configs.unfused_faster("packed", 8192, 18944, 3584, gpu=H200)
    serve(dataclasses.replace(data, unfused=None))
    assert not configs.unfused_faster("dual", 8192, 18944, 3584, gpu=H200)
    configs.unfused_faster.cache_clear()
    with pytest.raises(ValueError, match="dtype must be"):
        configs.unfused_faster("dual", 8192, 18944, 3584, dtype=torch.float32)


def test_the_shipped_data_prices_the_unfused_path_on_both_gpus():
    for gpu in (H200, "NVIDIA H100 80GB HBM3"):
        data = tuning.load(gpu, "bf16")
        assert data.unfused is not None and data.unfused.us_per_gflop > 0


def test_a_config_name_the_library_does_not_compile_is_refused_with_the_closest():
    with pytest.raises(ValueError, match=r"one the library compiles.*got config='packed_pingpong_128x999x64_2x1_bf16' "
                                         r"\(closest: packed_pingpong_128x\d+x64_2x1_bf16"):
        configs.explain("packed", "packed_pingpong_128x999x64_2x1_bf16", 512, 4864, 896, torch.bfloat16)
    with pytest.raises(ValueError, match=r"closest: packed_pingpong_128x192x64_2x1_bf16"):
        configs.check_config("packed", "packed_pingpong_128x192x64_2x1_bf17", torch.bfloat16)
    configs.check_config("dswiglu", "dswiglu_pingpong_128x128x64_1x1_bf16", torch.bfloat16)  # a training config


def test_explain_says_where_swiglu_and_a_patched_block_run_the_unfused_path():
    h100 = "NVIDIA H100 80GB HBM3"
    cells = [(M, n, h) for n, h in SHAPES for M in (2048, 6000, 8192)]
    unfused = [c for c in cells if configs.unfused_faster("dual", *c, gpu=h100)]
    assert unfused and len(unfused) < len(cells)  # the shipped H100 data: some cells, not all
    for cell in (unfused[0], next(c for c in cells if c not in unfused)):
        _, why = configs.explain("dual", "", *cell, torch.bfloat16, 132, h100, available=ALL)
        said = "swiglu(backend='auto') runs PyTorch's unfused path, and a block patched by fuse_swiglu_mlps its own"
        assert (said in why) is (cell in unfused), (cell, why)


def test_explain_names_the_gpu_whose_data_a_matching_gpu_takes(monkeypatch):
    h100 = tuning.load("NVIDIA H100 80GB HBM3", "bf16")
    monkeypatch.setattr(tuning, "reported", lambda gpu: h100.reports if gpu == "NVIDIA H800" else None)
    tuning.clear()
    mine = configs.choose_config("packed", 8192, 18944, 3584, "fast", 132, "NVIDIA H800")
    assert mine == configs.choose_config("packed", 8192, 18944, 3584, "fast", 132, "NVIDIA H100 80GB HBM3")
    _, why = configs.explain("packed", "", 8192, 18944, 3584, torch.bfloat16, 132, "NVIDIA H800", available=ALL)
    assert ("NVIDIA H800 has no tuned data of its own and its SM count, SM clock and memory bandwidth match "
            "NVIDIA H100 80GB HBM3's, whose data serves it") in why, why
    _, why = configs.explain("packed", "", 8192, 18944, 3584, torch.bfloat16, 132, "NVIDIA H20", available=ALL)
    assert "NVIDIA H20 has no tuned data of its own and matches no GPU that has: NVIDIA H200's serves it" in why, why
    _, why = configs.explain("packed", "", 8192, 18944, 3584, torch.bfloat16, 132, "NVIDIA H200", available=ALL)
    assert "no tuned data" not in why, why


def test_clearing_the_tuned_data_clears_the_choices_made_from_it(monkeypatch):
    """A choice made before the data changed is not reused after tuning.clear() (a new file, a GPU's reports)."""
    h100 = tuning.load("NVIDIA H100 80GB HBM3", "bf16")
    problem = (2048, 14336, 4096)  # where the two GPUs' data pick different launches
    before = configs.choose_config("packed", *problem, "fast", 132, "NVIDIA H800")  # the H200's data
    monkeypatch.setattr(tuning, "reported", lambda gpu: h100.reports if gpu == "NVIDIA H800" else None)
    tuning.clear()
    after = configs.choose_config("packed", *problem, "fast", 132, "NVIDIA H800")
    assert after == configs.choose_config("packed", *problem, "fast", 132, "NVIDIA H100 80GB HBM3")
    choice, why = configs.explain("packed", "", *problem, torch.bfloat16, 132, "NVIDIA H800", available=ALL)
    assert choice.name == after.name(torch.bfloat16) and (choice.raster, choice.swizzle) == (after.raster, after.swizzle)
    assert before != after  # the two GPUs' data pick different launches here


def test_the_training_step_runs_unfused_where_the_data_measured_it_slower():
    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    assert configs.training_unfused(8192, 3584, h200) and configs.training_unfused(16384, 8192, h200)
    assert not configs.training_unfused(8191, 3584, h200)  # fewer tokens than measured
    assert not configs.training_unfused(8192, 2048, h200)  # a smaller hidden size than measured
    assert configs.training_unfused(2048, 8192, h100)  # the H100 measured it slower at H = 8192 from 2048 tokens
    assert not configs.training_unfused(2047, 8192, h100) and not configs.training_unfused(8192, 5120, h100)
    with pytest.raises(ValueError, match="dtype must be"):
        configs.training_unfused(8192, 3584, h200, torch.float32)


def test_set_config_override_takes_a_string_or_none():
    for bad in (3, ["packed_pingpong_128x192x64_2x1_bf16"]):
        with pytest.raises(TypeError, match="names must be a string of comma-separated config names, or None"):
            configs.set_config_override(bad)
    assert env.config_override_origin() == "FUSED_SWIGLU_CONFIG"  # nothing was set
    kernels = "is not a config of the 16-bit packed or dual kernels, which the override applies to"
    for bad, words in (("garbage", f"names: 'garbage' {kernels}"),
                       ("packed_pingpong_128x192x64_2x1_bf16,dual_pingpong_128x128x64_2x1_bf17",
                        f"names: 'dual_pingpong_128x128x64_2x1_bf17' {kernels} .closest: "),
                       ("packed_fp8_pingpong_128x192x128_2x1_e4m3", kernels),  # its calls take config= instead
                       ("dswiglu_pingpong_128x128x64_1x1_bf16", kernels),
                       ("packed_pingpong_128x192x64_2x1_bf16@9:9",
                        "names: 'packed_pingpong_128x192x64_2x1_bf16@9:9' has a malformed launch: config's launch "
                        "must have raster in")):
        with pytest.raises(ValueError, match=words):
            configs.set_config_override(bad)
        assert env.config_override_origin() == "FUSED_SWIGLU_CONFIG"  # nothing was set
    try:  # names with launches, spaces and an empty entry, as FUSED_SWIGLU_CONFIG is read
        configs.set_config_override(" packed_pingpong_128x192x64_2x1_bf16@2:4, dual_pingpong_128x128x64_2x1_fp16,")
        assert env.config_override() == ["packed_pingpong_128x192x64_2x1_bf16@2:4", "dual_pingpong_128x128x64_2x1_fp16"]
    finally:
        configs.set_config_override(None)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"gpu": 5}, TypeError, "gpu must be a str"),
    ({"gpu": b"NVIDIA H200"}, TypeError, "gpu must be a str"),
    ({"smem_limit": "big"}, TypeError, "smem_limit must be None or an int"),
    ({"smem_limit": True}, TypeError, "smem_limit must be None or an int"),
    ({"smem_limit": 1.5}, TypeError, "smem_limit must be None or an int"),
    ({"smem_limit": -5}, ValueError, "smem_limit must be >= 0"),
    ({"available": "packed_swapab_pingpong_128x16x64_1x1_bf16"}, TypeError, "not one name"),
    ({"available": [3]}, TypeError, "available must be None or a collection of config names"),
])
def test_explain_names_a_bad_device_argument(kwargs, error, words):
    with pytest.raises(error, match=words):
        configs.explain("packed", "", 64, 4096, 4096, torch.bfloat16, **kwargs)


def test_explain_takes_a_collection_of_names():
    names = ["packed_pingpong_64x128x64_1x1_bf16"]
    choice, _ = configs.explain("packed", "", 64, 4096, 4096, torch.bfloat16, available=names)
    assert choice.name == names[0]


def test_a_config_without_a_recorded_shared_memory_size_fits_only_the_sm90_maximum():
    """The H200's data records no size for a config added after it was tuned: such a config serves a device
    with the full sm_90 shared memory, not one that reports less (a size it cannot check)."""
    data = tuning.load(H200, "bf16")
    config = configs.BY_BASE_NAME["packed_cooperative_256x192x64_2x1"]
    assert config.base_name not in data.smem_bytes
    assert configs.legal(config, 8192, 18944, configs.SM90_SMEM_MAX, data.smem_bytes)
    assert not configs.legal(config, 8192, 18944, 200_000, data.smem_bytes)
    known = configs.BY_BASE_NAME["packed_pingpong_64x128x64_1x1"]
    assert configs.legal(known, 8192, 18944, data.smem_bytes[known.base_name], data.smem_bytes)


def test_explain_names_the_shared_memory_limit_that_leaves_no_config():
    with pytest.raises(ValueError, match="is legal for M=64 N=4096 K=4096 within smem_limit=100000 bytes"):
        configs.explain("packed", "", 64, 4096, 4096, torch.bfloat16, gpu=H200, smem_limit=100_000)


@pytest.mark.parametrize("kernel, M, N, K", [("packed_fp8", 2048, 18944, 3584), ("dual_store", 8192, 4864, 896),
                                             ("dswiglu", 8192, 4864, 896)])
@pytest.mark.parametrize("gpu", [H200, "NVIDIA H100 80GB HBM3"])  # the rule alone; bands whose launch cannot fit
def test_a_family_names_the_shared_memory_limit_its_rule_does_not_fit(kernel, M, N, K, gpu):
    dtype = torch.float8_e4m3fn if kernel in configs.FP8_KERNELS else torch.bfloat16
    with pytest.raises(ValueError, match=f"no {kernel} config is legal for M={M} N={N} within smem_limit=1000 bytes"):
        configs.explain(kernel, "", M, N, K, dtype, gpu=gpu, smem_limit=1000)
    assert configs.explain(kernel, "", M, N, K, dtype, gpu=gpu, smem_limit=configs.SM90_SMEM_MAX)[0].name


@pytest.mark.parametrize("kernel", sorted(configs.FP8_KERNELS))
def test_explain_takes_an_e4m3_familys_dtypes_only(kernel):
    for dtype in configs.FP8_DTYPES:
        assert configs.explain(kernel, "", 16, 4864, 896, dtype)[0].name.endswith(("_e4m3", "_e4m3out"))
    for dtype in (torch.float16, torch.float32, torch.int8):
        with pytest.raises(ValueError, match=f"dtype must be torch.float8_e4m3fn .* for {kernel}; got dtype={dtype}"):
            configs.explain(kernel, "", 16, 4864, 896, dtype)


def _bands_file(tmp_path, gpu: str, families: list[dict]) -> None:
    """A bands file for ``gpu`` in the user's tuning folder (package_data_only's)."""
    folder = tuning.user_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / tuning.bands_file_name(gpu)).write_text(json.dumps({"format": 1, "gpu": gpu, "families": families}))
    tuning.clear()


def test_a_gpus_family_bands_take_the_place_of_the_rule_where_legal(tmp_path):
    bands = [{"up_to": 8, "config": "packed_fp8_pingpong_64x128x128_1x1_e4m3"},
             {"up_to": None, "config": "packed_fp8_pingpong_128x192x128_2x1_e4m3", "raster": 2, "swizzle": 4}]
    _bands_file(tmp_path, "Test GPU", [
        {"kernel": "packed_fp8", "accumulation": "fast", "by": "M", "bands": bands},
        {"kernel": "dswiglu", "accumulation": "fast", "by": "H", "bands": [
            {"up_to": None, "config": "dswiglu_pingpong_128x128x64_1x1"}]}])
    N, K = 18944, 3584
    rule = {M: configs.resolve("packed_fp8", "", M, N, K, torch.bfloat16, gpu="Other GPU") for M in (1, 4096, 4097)}
    assert rule[1].name == catalog.name_of("packed_fp8_swapab", "pingpong", 64, 16, 128, 1, 1, 0, "e4m3")
    choice, why = configs.explain("packed_fp8", "", 1, N, K, torch.bfloat16, gpu="Test GPU")
    assert choice == configs.Choice("packed_fp8_pingpong_64x128x128_1x1_e4m3") and "band for M from 1 to 8" in why
    choice, why = configs.explain("packed_fp8", "", 4096, N, K, torch.bfloat16, gpu="Test GPU")
    assert choice == configs.Choice("packed_fp8_pingpong_128x192x128_2x1_e4m3", 2, 4) and "M from 9 on" in why
    assert "test-gpu_families.json" in why
    # 33 token tiles: a 2 x 1 Pingpong cluster is not legal there, so the family's rule serves, saying why
    choice, why = configs.explain("packed_fp8", "", 4097, N, K, torch.bfloat16, gpu="Test GPU")
    assert choice == rule[4097] and "is not a launch for M = 4097" in why and "rule by M" in why
    # a named config and another accumulation are not banded
    named = "packed_fp8_pingpong_64x128x128_1x1_e4m3"
    assert configs.resolve("packed_fp8", named, 4096, N, K, torch.bfloat16, gpu="Test GPU") == configs.Choice(named)
    promoted = configs.resolve("packed_fp8", "promoted", 4096, N, K, torch.bfloat16, gpu="Test GPU")
    assert promoted == configs.resolve("packed_fp8", "promoted", 4096, N, K, torch.bfloat16, gpu="Other GPU")
    # the training kernels' bands by H, named in the call's dtype (an fp16 call reads the bf16 file)
    for dtype, suffix in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        choice, why = configs.explain("dswiglu", "", 8192, 4864, 896, dtype, gpu="Test GPU")
        assert choice.name == f"dswiglu_pingpong_128x128x64_1x1_{suffix}" and "dswiglu band for H from 1 on" in why
    wide = configs.explain("dual_store", "", 8192, 4864, 896, torch.bfloat16, gpu="Test GPU")
    assert "H = 896 < 3584" in wide[1]  # no dual_store bands: the rule


def test_every_banded_name_is_a_compiled_config_of_its_family():
    compiled = set(catalog.fp8_names() + catalog.fp8_out_names() + catalog.fp8_blockwise_names()
                   + catalog.fp8_dual_names() + catalog.training_names())
    for kernel, (by, entries, suffix) in catalog.BANDED_FAMILIES.items():
        names = [*catalog.banded_names(kernel, "fast"), *catalog.banded_names(kernel, "promoted")]
        assert len(names) == len(entries) and by in ("M", "H")
        for name in names:
            assert (name if suffix else f"{name}_bf16") in compiled
            assert configs.banded_config(name).base_name.startswith(kernel.removesuffix("_block").removesuffix(
                "_e4m3out"))


@pytest.mark.parametrize("kernel, config", [("packed_fp8", ""), ("dual_fp8", ""), ("grouped_dual", "promoted"),
                                            ("dswiglu", ""), ("dual", "")])
def test_explain_checks_the_problem_and_the_device_for_every_family(kernel, config):
    ok = (16, 4864, 896, torch.bfloat16)
    with pytest.raises(ValueError, match="M must be >= 0; got -1"):
        configs.explain(kernel, config, -1, *ok[1:])
    with pytest.raises(ValueError, match="N = I and K = H must be positive multiples of 8"):
        configs.explain(kernel, config, 16, 4860, 896, torch.bfloat16)
    with pytest.raises(ValueError, match="num_sms must be >= 1"):
        configs.explain(kernel, config, *ok, num_sms=0)
    with pytest.raises(TypeError, match="gpu must be a str"):
        configs.explain(kernel, config, *ok, 132, 123)
    assert configs.explain(kernel, config, *ok)[0].name


def test_an_unknown_kernel_is_refused_naming_every_family():
    with pytest.raises(ValueError, match="'dswiglu', 'packed_fp8', 'packed_fp8_e4m3out', 'packed_fp8_block', 'dual_fp8', "
                                         "'grouped_dual'; got kernel='foo'"):
        configs.explain("foo", "", 1, 8, 8, torch.bfloat16)


def test_a_gpu_whose_file_holds_no_calibration_is_told_whose_costs_serve_it():
    why = configs.explain("dual", "", 1, 18944, 3584, torch.bfloat16, 132, H100)[1]
    assert "nvidia-h100-80gb-hbm3_bf16.json) holds no calibration of its own" in why
    assert "holds no calibration" not in configs.explain("dual", "", 1, 18944, 3584, torch.bfloat16, 132, H200)[1]


@pytest.mark.parametrize("kernel, name, dtype", [
    ("packed", "packed_pingpong_128x192x64_2x1_bf16", torch.bfloat16),
    ("dual", "dual_pingpong_128x128x64_1x1_fp16", torch.float16),
    ("dual_store", "dual_store_pingpong_128x128x64_2x1_bf16", torch.bfloat16),
    ("packed_fp8", "packed_fp8_pingpong_128x192x128_2x1_e4m3", torch.bfloat16),
    ("packed_fp8_e4m3out", "packed_fp8_cooperative_128x256x128_2x1_e4m3_e4m3out", torch.bfloat16),
    ("packed_fp8_block", "packed_fp8_blockwise_cooperative_128x192x128_2x1_e4m3", torch.bfloat16),
    ("dual_fp8", "dual_fp8_pingpong_128x128x128_2x1_e4m3", torch.bfloat16),
])
def test_a_named_config_runs_with_the_launch_its_name_gives(kernel, name, dtype):
    """``<name>@<raster>:<swizzle>``: the config with that tile order, in every family the choice launches by
    name (the tune of the banded families times launches this way), resolved and explained alike."""
    for launch, want in [("", (0, 1)), ("@2:8", (2, 8)), ("@1:1", (1, 1)), ("@0:4", (0, 4))]:
        choice = configs.resolve(kernel, name + launch, 8192, 4864, 896, dtype)
        assert (choice.name, choice.raster, choice.swizzle) == (name, *want)
        explained, why = configs.explain(kernel, name + launch, 8192, 4864, 896, dtype, gpu="")
        assert explained == choice and "named" in why


@pytest.mark.parametrize("config, words", [
    ("packed_pingpong_128x192x64_2x1_bf16@3:8", "raster in (0, 1, 2)"),
    ("packed_pingpong_128x192x64_2x1_bf16@1:3", "swizzle in (1, 2, 4, 8)"),
    ("packed_pingpong_128x192x64_2x1_bf16@1", "<name>@<raster>:<swizzle>"),
    ("packed_pingpong_128x192x64_2x1_bf16@a:b", "<name>@<raster>:<swizzle>"),
    ("packed_pingpong_128x192x64_2x1_bf16@\u00b2:8", "<name>@<raster>:<swizzle>"),  # a digit int() refuses
    ("packed_pingpong_128x192x64_2x1_bf16@\u0661:8", "<name>@<raster>:<swizzle>"),  # not an ASCII digit
    ("packed_pingpong_128x192x64_2x1_bf16@ 1:8", "<name>@<raster>:<swizzle>"),
    ("packed_pingpong_128x192x64_2x1_bf16@1:8@1:8", "<name>@<raster>:<swizzle>"),
    ("@1:2", "<name>@<raster>:<swizzle>"),
    ("promoted@1:2", "must name a config, not the choice"),
    ("packed_pingpong_128x192x64_2x1_bf16@100:8", "<name>@<raster>:<swizzle>"),  # at most two digits
    ("dual_pingpong_128x128x64_1x1_bf16@1:2", "must name a packed kernel"),
])
def test_a_bad_launch_in_a_config_is_named(config, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        configs.resolve("packed", config, 8192, 4864, 896, torch.bfloat16)


def test_a_bad_launch_in_an_e4m3_config_is_named():
    name = "packed_fp8_pingpong_128x192x128_2x1_e4m3"
    for config, words in [(name + "@4:1", "raster in"), ("promoted@2:8", "must name a config, not the choice"),
                          ("@2:8", "<name>@<raster>:<swizzle>"), ("dual_fp8_pingpong_128x128x128_2x1_e4m3@1:1",
                                                              "config must be '', 'promoted' or one of")]:
        with pytest.raises(ValueError, match=re.escape(words)):
            configs.resolve("packed_fp8", config, 8192, 4864, 896, torch.bfloat16)
    with pytest.raises(ValueError, match="grouped kernel takes raster 1 in its launch"):
        configs.resolve("grouped_dual", "grouped_dual_swapab_pingpong_128x16x64_1x1_bf16@2:8", 64, 768, 2048,
                        torch.bfloat16, token_tile=16)


def test_a_config_that_is_not_a_str_is_a_type_error_in_every_family():
    for kernel in ("packed", "dual_store", "packed_fp8", "dual_fp8", "grouped_dual"):
        with pytest.raises(TypeError, match="config must be a str"):
            configs.explain(kernel, None, 2048, 768, 2048, torch.bfloat16)


def test_explain_of_a_training_kernel_says_where_the_patched_step_runs_unfused():
    h100 = "NVIDIA H100 80GB HBM3"
    _, why = configs.explain("dual_store", "", 2048, 29568, 8192, torch.bfloat16, gpu=h100)
    assert "runs the block's own forward and PyTorch's backward instead" in why
    _, why = configs.explain("dual_store", "", 1024, 29568, 8192, torch.bfloat16, gpu=h100)
    assert "PyTorch's backward" not in why  # fewer tokens than the rule's
    _, why = configs.explain("dual_store", "", 2048, 18944, 3584, torch.bfloat16, gpu=h100)
    assert "PyTorch's backward" not in why  # a smaller hidden size than the rule's


def test_explain_says_when_the_named_gpu_is_not_hopper():
    for gpu in ("NVIDIA A100-SXM4-80GB", "NVIDIA B200", "NVIDIA L40S"):
        _, why = configs.explain("packed", "", 2048, 18944, 3584, torch.bfloat16, gpu=gpu)
        assert f"{gpu} is not a Hopper GPU" in why and "patched blocks run PyTorch" in why, gpu
    for gpu in ("", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H100 PCIe", "NVIDIA GH200 480GB", "NVIDIA H20",
                "NVIDIA H800"):
        _, why = configs.explain("packed", "", 2048, 18944, 3584, torch.bfloat16, gpu=gpu)
        assert "not a Hopper GPU" not in why, gpu
    _, why = configs.explain("dual_store", "", 2048, 18944, 3584, torch.bfloat16, gpu="NVIDIA A100-SXM4-80GB")
    assert "not a Hopper GPU" in why  # every family's answer


def test_the_paired_dual_config_is_reached_by_name_and_never_chosen():
    """The paired dual kernel (the packed kernel's epilogue over W_gate and W_up as stored) runs where a call or
    a tool names it; the choice never returns it, nor does an override name it."""
    names = catalog.dual_paired_names()
    assert names == ["dual_paired_pingpong_128x192x64_1x1_bf16", "dual_paired_pingpong_128x192x64_1x1_fp16",
                     "dual_paired_cooperative_256x192x64_1x1_bf16", "dual_paired_cooperative_256x192x64_1x1_fp16"]
    configs.check_config("dual", names[0], torch.bfloat16)
    configs.check_config("dual", names[1] + "@2:8", torch.float16)
    assert configs.resolve("dual", names[0] + "@1:4", 8192, 3584, 18944, torch.bfloat16) == configs.Choice(
        names[0], 1, 4)
    with pytest.raises(ValueError, match="config must name a packed kernel"):
        configs.check_config("packed", names[0], torch.bfloat16)
    paired = configs.BY_BASE_NAME["dual_paired_pingpong_128x192x64_1x1"]
    assert (paired.kernel, paired.paired, paired.tile_n) == ("dual", True, 192)
    assert paired not in configs.choosable_configs() and not set(names) & configs.OVERRIDABLE_NAMES
    for M in (1, 512, 2048, 8192):
        for n, h in SHAPES:
            assert not configs.choose_config("dual", M, n, h, "fast", 132, H200).paired
