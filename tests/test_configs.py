import warnings

import pytest
import torch

import fused_swiglu._validate as v
from fused_swiglu import configs
from fused_swiglu.configs import KernelConfig, select


def test_name_format():
    c = KernelConfig("packed", "pingpong", 128, 192, 64, 2, 1)
    assert c.name(torch.bfloat16) == "packed_pingpong_128x192x64_2x1_bf16"
    assert c.name(torch.float16) == "packed_pingpong_128x192x64_2x1_fp16"
    with pytest.raises(TypeError, match="dtype"):
        c.name(torch.float32)
    with pytest.raises(Exception):
        c.tile_m = 64  # frozen
    promoted = KernelConfig("dual", "cooperative", 128, 128, 64, 2, 1, promote=4)
    assert promoted.name(torch.float16) == "dual_cooperative_128x128x64_2x1_promote4_fp16"
    assert configs.is_promoted(promoted.name(torch.float16)) and not configs.is_promoted(c.name(torch.float16))


ALL = frozenset(c.name(d) for c in configs.choosable_configs() for d in (torch.bfloat16, torch.float16))


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_table_heuristic(kernel):
    # M <= 128: 64x128 on shapes without rows of their own (Kernel-2 at decode sizes: swap-AB); M <= 512
    # on small weights too
    assert select(kernel, 17, 4864, 896, torch.bfloat16, ALL).name == f"{kernel}_pingpong_64x128x64_1x1_bf16"
    assert select(kernel, 128, 27648, 5120, torch.float16, ALL).name == f"{kernel}_pingpong_64x128x64_1x1_fp16"
    assert select(kernel, 512, 4864, 896, torch.bfloat16, ALL).name == f"{kernel}_pingpong_64x128x64_1x1_bf16"
    # M <= 2048: 128x128 tiles
    assert "_pingpong_128x128x64_" in select(kernel, 2048, 18944, 3584, torch.bfloat16, ALL).name


def test_table_launch_parameters_follow_the_row():
    # the same config name can be chosen with different rasterisation in different rows
    big = select("packed", 8192, 13824, 5120, torch.bfloat16, ALL)  # 14B, M = 8192
    assert (big.name, big.raster, big.swizzle) == ("packed_pingpong_128x192x64_2x1_bf16", 2, 8)
    seven = select("packed", 8192, 18944, 3584, torch.bfloat16, ALL)  # 7B, M = 8192 (entry 36)
    assert (seven.name, seven.raster, seven.swizzle) == ("packed_pingpong_128x128x64_1x2_bf16", 1, 2)
    mid = select("packed", 512, 29568, 8192, torch.bfloat16, ALL)  # 72B, M = 512: the general row
    assert (mid.name, mid.raster, mid.swizzle) == ("packed_pingpong_128x128x64_2x1_bf16", 0, 1)
    seven_mid = select("packed", 512, 18944, 3584, torch.bfloat16, ALL)  # 7B, M = 512 (entry 53)
    assert (seven_mid.name, seven_mid.raster, seven_mid.swizzle) == ("packed_pingpong_128x192x64_2x1_bf16", 1, 1)
    small = select("packed", 512, 4864, 896, torch.bfloat16, ALL)  # 0.5B, M = 512
    assert (small.name, small.raster, small.swizzle) == ("packed_pingpong_64x128x64_1x1_bf16", 1, 1)
    dual = select("dual", 8192, 18944, 3584, torch.bfloat16, ALL)
    assert (dual.name, dual.raster, dual.swizzle) == ("dual_pingpong_128x128x64_2x1_bf16", 2, 8)


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_half_width_tiles_at_small_m_on_1_5b_and_3b(kernel):
    half, full = f"{kernel}_pingpong_64x64x64_1x1_bf16", f"{kernel}_pingpong_64x128x64_1x1_bf16"
    assert select(kernel, 17, 8960, 1536, torch.bfloat16, ALL).name == half
    assert select(kernel, 128, 8960, 1536, torch.bfloat16, ALL).name == half
    assert select(kernel, 129, 8960, 1536, torch.bfloat16, ALL).name == full
    assert select(kernel, 64, 11008, 2048, torch.bfloat16, ALL).name == half
    assert select(kernel, 65, 11008, 2048, torch.bfloat16, ALL).name == full
    assert select(kernel, 33, 13824, 5120, torch.bfloat16, ALL).name == full  # 14B


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_swap_ab_at_decode_sizes(kernel):
    # M <= 16 on every shape, up to M = 32 from 3B on, runs the swap-AB tile (entries 25, 26), with
    # either accumulation (its promoted form: entry 59)
    for accumulation, suffix in (("fast", ""), ("promoted", "_promote4")):
        swap = f"{kernel}_swapab_pingpong_128x16x64_1x1{suffix}_bf16"
        for n, h in [(4864, 896), (8960, 1536), (11008, 2048), (18944, 3584), (29568, 8192)]:
            def name(M):
                return select(kernel, M, n, h, torch.bfloat16, ALL, accumulation=accumulation).name

            assert name(1) == swap and name(16) == swap
            assert (name(32) == swap) == (n * h >= configs.SMALL)
            assert "swapab" not in name(33) and configs.is_promoted(name(33)) == (accumulation == "promoted")


def test_explicit_config_must_match_the_op_kernel_and_dtype():
    with pytest.raises(ValueError, match="config must name a dual kernel"):
        configs.resolve("dual", "packed_swapab_pingpong_128x16x64_1x1_bf16", 1, 64, 896, torch.bfloat16)
    with pytest.raises(ValueError, match="config must name a packed kernel"):
        configs.resolve("packed", "dual_pingpong_64x128x64_1x1_bf16", 1, 64, 896, torch.bfloat16)
    with pytest.raises(ValueError, match="ending with '_fp16'"):
        configs.resolve("packed", "packed_pingpong_64x128x64_1x1_bf16", 1, 64, 896, torch.float16)
    assert configs.KernelConfig("packed", "pingpong", 128, 16, 64, 1, 1, swap_ab=True).name(torch.float16) == (
        "packed_swapab_pingpong_128x16x64_1x1_fp16")


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_no_half_empty_128_row_tiles_up_to_m_320(kernel):
    # M = 192 or 320 would leave half of the last 128-row tile empty (perf-notes entry 13): 64-row tiles
    # at 128 < M <= 192 and 256 < M <= 320 (entry 28: 64x192 on large weights for packed above M = 256);
    # two 128-row tiles under a 2x1 cluster once the second is more than half used (entry 32)
    for n, h in [(11008, 2048), (13824, 5120), (27648, 5120), (29568, 8192)]:
        for M in (129, 192, 257, 320):
            assert "_pingpong_64x" in select(kernel, M, n, h, torch.bfloat16, ALL).name, (n, M)
        for M in (193, 256):  # 3B, 32B and 72B; 14B (and 7B) lost 2-5 % with them; Kernel-1 on 3B: 128x96 (entry 46)
            name = select(kernel, M, n, h, torch.bfloat16, ALL).name
            two_by_one = n != 13824 and not (kernel == "dual" and n == 11008)
            assert (name == f"{kernel}_pingpong_128x128x64_2x1_bf16") == two_by_one, (n, M)


def test_128_row_tiles_at_m_512_only_above_m_448():
    # a 128-row tile is at least 7/8 full above M = 448; at 448 the last one is half empty (entries 22, 27)
    for n, h in [(8960, 1536), (11008, 2048)]:
        assert select("dual", 449, n, h, torch.bfloat16, ALL).name == "dual_pingpong_128x96x64_1x1_bf16"
    assert select("dual", 384, 8960, 1536, torch.bfloat16, ALL).name == "dual_pingpong_128x96x64_1x1_bf16"
    # entry 46: on 1.5B Kernel-1 takes 128x96 along M at 384 < M <= 448 too
    assert select("dual", 448, 8960, 1536, torch.bfloat16, ALL) == configs.Choice("dual_pingpong_128x96x64_1x1_bf16", 1)
    # entry 43: on 3B, after entry 41 removed the partial tile's extra cost, 128x96 from M = 385 on
    assert select("dual", 448, 11008, 2048, torch.bfloat16, ALL).name == "dual_pingpong_128x96x64_1x1_bf16"
    assert select("packed", 385, 11008, 2048, torch.bfloat16, ALL).name == "packed_pingpong_128x96x64_1x1_bf16"
    # entry 55: Kernel-2 on 1.5B takes 64x192 to M = 448, then 128x192 2x1 (four token tiles) to 512
    assert select("packed", 385, 8960, 1536, torch.bfloat16, ALL) == configs.Choice("packed_pingpong_64x192x64_1x1_bf16")
    assert select("packed", 448, 8960, 1536, torch.bfloat16, ALL).name == "packed_pingpong_64x192x64_1x1_bf16"
    assert select("packed", 449, 8960, 1536, torch.bfloat16, ALL) == configs.Choice("packed_pingpong_128x192x64_2x1_bf16")
    assert select("packed", 512, 8960, 1536, torch.bfloat16, ALL).name == "packed_pingpong_128x192x64_2x1_bf16"
    assert select("packed", 448, 4864, 896, torch.bfloat16, ALL).name == "packed_pingpong_64x128x64_1x1_bf16"
    assert select("packed", 448, 13824, 5120, torch.bfloat16, ALL).name == "packed_pingpong_64x192x64_1x1_bf16"
    assert select("packed", 512, 13824, 5120, torch.bfloat16, ALL).raster == 1
    assert select("dual", 512, 4864, 896, torch.bfloat16, ALL).name == "dual_pingpong_64x128x64_1x1_bf16"  # 0.5B


def test_shape_rows_match_their_shape_only():
    # 14B at M <= 448 has a 64x192 row of its own; 3B at 384 < M <= 512 and 14B at 448 < M <= 512
    # 128x96 rows; a hidden size off by 8 gets the general rows (or the wave rule where it decides)
    assert select("packed", 512, 11008, 2048, torch.bfloat16, ALL).name == "packed_pingpong_128x96x64_1x1_bf16"
    assert select("packed", 448, 13824, 5120, torch.float16, ALL).name == "packed_pingpong_64x192x64_1x1_fp16"
    assert select("packed", 512, 13824, 5120, torch.float16, ALL).name == "packed_pingpong_128x96x64_1x1_fp16"
    assert configs.row_config("packed", 512, 11008, 2056) == configs._pp("packed", 128, 128, 2, 1)
    assert configs.table_config("packed", 384, 11008, 2056) == configs.row_config("packed", 384, 11008, 2056)
    assert configs.table_config("packed", 256, 11008, 2056) == configs.wave_config("packed", 256, 11008, 2056)
    assert select("packed", 1400, 11008, 2048, torch.bfloat16, ALL).name == "packed_pingpong_128x128x64_1x2_bf16"
    assert select("packed", 768, 11008, 2048, torch.bfloat16, ALL).name == "packed_pingpong_128x128x64_2x1_bf16"
    assert configs.Row("dual", None, configs._pp("dual", 64, 128, 1, 1), shape=(64, 32)).matches("dual", 1, 64, 32)
    assert not configs.Row("dual", None, configs._pp("dual", 64, 128, 1, 1), shape=(64, 32)).matches("dual", 1, 32, 64)


def test_rows_between_m_256_and_384():
    # entry 28: large weights take 64x192 (packed) up to M = 352 and 128x96 up to 384; 1.5B 128x96
    # above M = 320; 0.5B and 3B keep 64x128. Entry 42: Kernel-1 at 256 < M <= 320 by shape
    large, small = (18944, 3584), (8960, 1536)  # 7B, 1.5B
    expect = {
        ("packed", large, 256): "packed_pingpong_128x192x64_2x1", ("packed", large, 257): "packed_pingpong_64x192x64_1x1",
        ("packed", large, 352): "packed_pingpong_64x192x64_1x1", ("packed", large, 353): "packed_pingpong_128x96x64_1x1",
        ("packed", large, 384): "packed_pingpong_128x96x64_1x1", ("dual", large, 320): "dual_pingpong_128x96x64_1x1",
        ("dual", (13824, 5120), 300): "dual_pingpong_64x128x64_1x1",  # 14B
        ("dual", (29568, 8192), 257): "dual_pingpong_64x192x64_1x1", ("dual", (27648, 5120), 320): "dual_pingpong_64x192x64_1x1",
        ("dual", large, 321): "dual_pingpong_128x96x64_1x1", ("dual", large, 384): "dual_pingpong_128x96x64_1x1",
        ("packed", small, 320): "packed_pingpong_64x128x64_1x1", ("packed", small, 321): "packed_pingpong_128x96x64_1x1",
        ("dual", small, 384): "dual_pingpong_128x96x64_1x1",
        ("packed", (11008, 2048), 352): "packed_pingpong_64x128x64_1x1",  # 3B
        ("dual", (4864, 896), 352): "dual_pingpong_64x128x64_1x1",  # 0.5B
    }
    for (kernel, (n, h), M), name in expect.items():
        assert select(kernel, M, n, h, torch.bfloat16, ALL).name == name + "_bf16", (kernel, n, h, M)
    assert select("dual", 300, 29568, 8192, torch.bfloat16, ALL).raster == 1  # 72B: 64x192 along M


def test_rows_measured_after_the_shifted_token_tile():
    # entry 43: 576 < M <= 640 (five 128-token tiles) 128x96 on 0.5B-14B, 32B and 72B keep 128x128 1x2;
    # 384 < M <= 448: 3B 128x96, 32B 64x192 along M (both kernels), 7B and 72B packed 64x192 along M
    b05, b3, b7, b14, b32, b72 = (4864, 896), (11008, 2048), (18944, 3584), (13824, 5120), (27648, 5120), (29568, 8192)
    for kernel in ("packed", "dual"):
        for n, h in (b05, b3, b7, b14):
            for M in (577, 640):
                assert select(kernel, M, n, h, torch.bfloat16, ALL).name == f"{kernel}_pingpong_128x96x64_1x1_bf16"
        for n, h in (b32, b72):
            assert select(kernel, 600, n, h, torch.bfloat16, ALL).name == f"{kernel}_pingpong_128x128x64_1x2_bf16"
        assert select(kernel, 448, *b3, torch.bfloat16, ALL).name == f"{kernel}_pingpong_128x96x64_1x1_bf16"
        assert configs.table_config(kernel, 385, *b32) == configs._pp(kernel, 64, 192, 1, 1, raster=1)
    for n, h in (b7, b72):
        assert configs.table_config("packed", 448, n, h) == configs._pp("packed", 64, 192, 1, 1, raster=1)
        assert configs.table_config("dual", 448, n, h) == configs._pp("dual", 128, 128, 2, 1)


def test_rows_between_m_32_and_256():
    # entries 32 and 37: per-shape rows after the swap-AB tiles; (kernel, shape, M) -> config at both ends of each row
    b15, b3, b7, b14, b32, b72 = (8960, 1536), (11008, 2048), (18944, 3584), (13824, 5120), (27648, 5120), (29568, 8192)
    expect = {
        ("packed", b7, 33): "64x64x64_1x1", ("packed", b7, 64): "64x64x64_1x1", ("packed", b72, 64): "64x128x64_1x1",
        ("packed", b14, 64): "64x128x64_1x1", ("packed", b14, 65): "128x128x64_1x2",
        ("packed", b14, 128): "128x128x64_1x2", ("packed", b14, 129): "64x128x64_1x1",
        ("packed", b7, 129): "64x128x64_1x1", ("packed", b7, 160): "64x128x64_1x1", ("packed", b72, 160): "64x192x64_1x1",
        ("packed", b32, 65): "64x192x64_1x1", ("packed", b32, 96): "64x192x64_1x1", ("packed", b32, 97): "64x128x64_1x1",
        ("packed", b7, 97): "128x96x64_1x1", ("packed", b7, 128): "128x96x64_1x1",
        ("packed", b32, 160): "64x192x64_1x1", ("packed", b32, 161): "64x128x64_1x1",
        ("packed", b72, 192): "64x192x64_1x1", ("packed", b72, 193): "128x128x64_2x1", ("packed", b7, 192): "64x128x64_1x1",
        ("packed", b7, 193): "128x192x64_2x1", ("packed", b14, 193): "128x160x64_2x1", ("packed", b14, 256): "128x160x64_2x1",
        ("packed", b3, 192): "64x128x64_1x1", ("packed", b3, 193): "128x128x64_2x1",
        ("packed", b15, 192): "64x128x64_1x1", ("packed", b15, 256): "128x96x64_1x1",
        ("dual", b32, 64): "64x64x64_1x1", ("dual", b14, 64): "64x128x64_1x1", ("dual", b72, 33): "64x128x64_1x1", ("dual", b14, 128): "128x128x64_1x2",
        ("dual", b72, 65): "128x128x64_1x2", ("dual", b72, 80): "128x128x64_1x2", ("dual", b72, 81): "64x128x64_1x1",
        ("dual", b7, 97): "128x96x64_1x1", ("dual", b7, 129): "64x128x64_1x1",
        ("dual", b32, 193): "128x128x64_2x1", ("dual", b14, 256): "128x160x64_2x1", ("dual", b7, 193): "128x96x64_1x1", ("dual", b7, 192): "64x128x64_1x1", ("dual", b3, 256): "128x96x64_1x1", ("dual", b15, 193): "128x96x64_1x1",
    }
    for (kernel, (n, h), M), tile in expect.items():
        assert select(kernel, M, n, h, torch.bfloat16, ALL).name == f"{kernel}_pingpong_{tile}_bf16", (kernel, n, h, M)
    for kernel in ("packed", "dual"):  # 0.5B keeps 64x128 from M = 17 to 512
        assert {select(kernel, M, 4864, 896, torch.bfloat16, ALL).name for M in range(17, 513, 8)} == {
            f"{kernel}_pingpong_64x128x64_1x1_bf16"}
    # entry 46: Kernel-1 at 192 < M <= 256 on 3B and 7B, 128x96 along M
    for n, h in [(11008, 2048), (18944, 3584)]:
        for M in (193, 224, 256):
            assert select("dual", M, n, h, torch.bfloat16, ALL) == configs.Choice("dual_pingpong_128x96x64_1x1_bf16", 1), (n, M)


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_128x160_rows_where_its_tile_count_fills_waves(kernel):
    # entry 27: 14B at 512 < M <= 2048 (even token-tile counts, entry 29); elsewhere the general rows
    wide = f"{kernel}_pingpong_128x160x64_2x1_bf16"
    for M in (640, 768, 1024, 2048):  # 640: five token tiles, odd
        assert (select(kernel, M, 13824, 5120, torch.bfloat16, ALL).name == wide) == (M != 640), M
    assert select(kernel, 2049, 13824, 5120, torch.bfloat16, ALL).name != wide
    for n, h in [(8960, 1536), (27648, 5120), (18944, 3584)]:  # 1.5B, 32B, 7B
        assert select(kernel, 1024, n, h, torch.bfloat16, ALL).name != wide
    assert configs.row_config(kernel, 1024, 13824, 5128).tile_n != 160  # not 14B: no row of 14B's


@pytest.mark.parametrize("kernel", ["packed", "dual"])
@pytest.mark.parametrize("M", [600, 640, 1152, 1664, 4097, 8320])
def test_odd_token_tile_counts_skip_2x1_clusters(kernel, M):
    # entry 29: a 2x1 cluster over an odd number of 128-token tiles ran 6-45 % slower than 1x2; at
    # 576 < M <= 640 the shapes up to 14B take 128x96 (entry 43), which has no cluster
    for n, h in [(4864, 896), (11008, 2048), (18944, 3584), (13824, 5120), (29568, 8192)]:
        name = select(kernel, M, n, h, torch.bfloat16, ALL).name
        want = "_128x96x64_1x1_" if M <= 640 and (n, h) != (29568, 8192) else "_128x128x64_1x2_"
        assert want in name, (n, h, M, name)


def test_every_table_row_is_reachable():
    shapes = [(4864, 896), (8960, 1536), (11008, 2048), (18944, 3584), (13824, 5120), (27648, 5120),
              (29568, 8192)]
    used = {select(k, M, n, h, torch.bfloat16, ALL, accumulation=acc).name for k in ("packed", "dual")
            for M in (1, 128, 300, 512, 2048, 8192) for n, h in shapes for acc in configs.ACCUMULATIONS}
    assert used == {r.config.name(torch.bfloat16) for r in configs.TABLE}
    # every row is the first match somewhere (a row hidden behind earlier ones would be dead code
    # whose comment describes a choice that never runs)
    first = set()
    for kernel in ("packed", "dual"):
        for n, h in list(configs.MEASURED_SHAPES) + OTHER_SHAPES:
            for acc in configs.ACCUMULATIONS:
                for M in [*range(1, 1153), *range(1160, 2305, 8), 3000, 4096, 8192]:
                    first.add(next(i for i, row in enumerate(configs.TABLE) if row.matches(kernel, M, n, h, acc)))
    dead = [configs.TABLE[i] for i in range(len(configs.TABLE)) if i not in first]
    assert not dead, dead


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
    assert select("dual", 4096, 64, 64, torch.bfloat16, ALL).name == "dual_pingpong_128x128x64_1x2_bf16"


def test_env_override_names_outside_the_library_are_ignored_with_a_warning(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    configs._select.cache_clear()
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "garbage, packed_pingpong_256x192x64_2x1_bf16,,")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        big = select("packed", 8192, 29568, 8192, torch.bfloat16, ALL)  # 72B: the table's choice, not a fallback
        select("packed", 4096, 29568, 8192, torch.bfloat16, ALL)  # another problem: no second warning
    assert (big.name, big.raster, big.swizzle) == ("packed_pingpong_128x128x64_1x2_bf16", 1, 2)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2, messages  # one per bad name, once per process
    assert "'garbage', which is not a config of the kernel library" in messages[0]
    assert "'packed_pingpong_256x192x64_2x1_bf16'" in messages[1]


def test_env_override_of_the_tables_choice_keeps_its_launch_parameters(monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "packed_pingpong_128x192x64_2x1_bf16")
    big = select("packed", 8192, 27648, 5120, torch.bfloat16, ALL)  # 32B, M = 8192: rasterised along N
    assert (big.name, big.raster, big.swizzle) == ("packed_pingpong_128x192x64_2x1_bf16", 2, 8)
    other = select("packed", 2048, 27648, 5120, torch.bfloat16, ALL)  # the table says 128x128 here
    assert (other.name, other.raster, other.swizzle) == ("packed_pingpong_128x192x64_2x1_bf16", 0, 1)


def test_fallback_to_available_config_warns_once(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    avail = frozenset({"dual_cooperative_128x256x64_1x1_bf16", "packed_pingpong_64x128x64_1x1_bf16",
                       "dual_cooperative_128x128x64_2x1_promote4_fp16"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert select("dual", 4096, 64, 64, torch.bfloat16, avail).name == "dual_cooperative_128x256x64_1x1_bf16"
        assert select("dual", 8192, 64, 64, torch.bfloat16, avail).name == "dual_cooperative_128x256x64_1x1_bf16"
    assert len(caught) == 1 and "not in the kernel library" in str(caught[0].message)
    with pytest.raises(NotImplementedError, match="no dual config for fp16"):
        select("dual", 1, 64, 64, torch.float16, avail)
    with pytest.raises(ValueError, match="kernel must be one of"):
        select("triple", 1, 64, 64, torch.float16, avail)


# The wave rule for shapes outside the seven measured ones (perf-notes entry 35).
OTHER_SHAPES = [(14336, 4096), (28672, 8192), (11008, 4096), (12288, 4096), (25600, 5120), (8192, 2048), (200, 64)]


def test_measured_shapes_keep_their_rows():
    for n, h in configs.MEASURED_SHAPES:
        for kernel in ("packed", "dual"):
            for M in (1, 33, 64, 65, 200, 256, 448, 512, 640, 1024, 2048, 2049, 8192):
                for acc in ("fast", "promoted"):
                    assert configs.table_config(kernel, M, n, h, acc) == configs.row_config(kernel, M, n, h, acc)


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_wave_rule_serves_other_shapes_where_it_decides(kernel):
    for n, h in OTHER_SHAPES:
        for M in (1, 16, 32, 65, 128, 192, 257, 300, 384, 1100, 2048, 8192):  # the general rows
            assert configs.table_config(kernel, M, n, h) == configs.row_config(kernel, M, n, h), (n, h, M)
        for M in (33, 64):
            assert configs.table_config(kernel, M, n, h) == configs._pp(kernel, 64, 64, 1, 1)
        for M in (193, 200, 224, 256, 385, 448, 512, 840, 1024):
            assert configs.table_config(kernel, M, n, h) == configs.wave_config(kernel, M, n, h)
            assert configs.table_config(kernel, M, n, h) in configs.WAVE_CANDIDATES[kernel]
        # promoted accumulation has no wave rule
        assert configs.table_config(kernel, 512, n, h, "promoted") == configs.row_config(kernel, 512, n, h, "promoted")


@pytest.mark.parametrize("kernel", ["packed", "dual"])
@pytest.mark.parametrize("M", [193, 200, 224, 256, 385, 448, 513, 640, 1000, 1024])
def test_wave_rule_picks_the_cheapest_candidate(kernel, M):
    for n, h in OTHER_SHAPES:
        pick = configs.wave_config(kernel, M, n, h)
        token_tiles = -(-M // 128)
        # clusters: 2x1 only over an even number of token tiles, 1x2 only over an odd one
        assert (pick.cluster_m, pick.cluster_n) == ((2, 1) if token_tiles % 2 == 0 else (1, 2)) or pick.cluster_m == pick.cluster_n == 1
        allowed = [c for c in configs.WAVE_CANDIDATES[kernel]
                   if not (c.cluster_m == 2 and token_tiles % 2) and not (c.cluster_n == 2 and token_tiles % 2 == 0)]
        costs = {c: configs.wave_cost(c, M, n) for c in allowed}
        assert costs[pick] == min(costs.values())
        assert pick.tile_n == max(c.tile_n for c in allowed if costs[c] == costs[pick])


def test_wave_cost_counts_rounds_of_tiles():
    # Qwen3-32B's MLP (I = 25600) at M = 512: 4 token tiles; 2I / 160 = 320 tiles across -> 1280 tiles,
    # 10 rounds of 132 (9.7) x 160 = 1600; 128 wide: 1600 tiles, 13 rounds x 128 = 1664; 192 wide:
    # 267 -> 1068 tiles, 9 rounds x 192 = 1728; 96 wide: 534 -> 2136 tiles, 17 rounds x 96 / 0.85
    assert configs.wave_cost(configs._pp("packed", 128, 160, 2, 1), 512, 25600) == 1600
    assert configs.wave_cost(configs._pp("packed", 128, 128, 2, 1), 512, 25600) == 1664
    assert configs.wave_cost(configs._pp("packed", 128, 192, 2, 1), 512, 25600) == 1728
    assert configs.wave_cost(configs._pp("packed", 128, 96, 1, 1), 512, 25600) == pytest.approx(17 * 96 / 0.85)
    assert configs.wave_config("packed", 512, 25600, 5120) == configs._pp("packed", 128, 160, 2, 1)
    assert configs.wave_config("packed", 384, 25600, 5120) is None  # 256 < M <= 384: the rows
    assert configs.wave_config("packed", 1025, 25600, 5120) is None  # M > 1024: the rows
    # M = 256, two token tiles: 160 wide 640 tiles, 5 rounds x 160 = 800; 128 wide 800 tiles, 7 x 128 = 896
    assert configs.wave_config("packed", 256, 25600, 5120) == configs._pp("packed", 128, 160, 2, 1)
    assert configs.wave_config("dual", 256, 25600, 5120) == configs._pp("dual", 128, 160, 2, 1)
    # with fewer SMs the rounds change: 114 SMs (H100 PCIe) -> 6 x 160 = 960 against 8 x 128 = 1024
    assert configs.wave_cost(configs._pp("packed", 128, 160, 2, 1), 256, 25600, num_sms=114) == 960
    assert configs.wave_cost(configs._pp("packed", 128, 128, 2, 1), 256, 25600, num_sms=114) == 1024
    # Llama-2-7B's MLP (I = 11008) at M = 256: 192 wide 115 x 2 = 230 tiles, 2 rounds x 192 = 384 beats
    # 128 wide (344 tiles, 3 x 128 = 384: a tie, to the wider) and 160 wide (276 tiles, 3 x 160)
    assert configs.wave_config("packed", 256, 11008, 4096) == configs._pp("packed", 128, 192, 2, 1)
    assert configs.wave_config("dual", 256, 11008, 4096) == configs._pp("dual", 128, 128, 2, 1)


def test_problem_sizes_are_checked():
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError), (None, TypeError), (float("nan"), TypeError)):
        with pytest.raises(error, match="M must be"):
            configs.table_config("packed", bad, 64, 64)
        with pytest.raises(error, match="N must be"):
            configs.wave_config("dual", 512, bad, 64)
        with pytest.raises(error, match="K must be"):
            select("dual", 512, 64, bad, torch.bfloat16, ALL)
    with pytest.raises(ValueError, match="num_sms must be >= 1; got 0"):
        configs.wave_cost(configs._pp("packed", 128, 128, 2, 1), 256, 4096, num_sms=0)
    with pytest.raises(ValueError, match="kernel must be one of"):
        configs.wave_config("triple", 256, 4096, 4096)
    # any iterable of names is accepted as the available configs
    assert select("dual", 512, 4864, 896, torch.bfloat16, set(ALL)) == select("dual", 512, 4864, 896, torch.bfloat16, ALL)
    assert select("dual", 512, 4864, 896, torch.bfloat16, list(ALL)).name == "dual_pingpong_64x128x64_1x1_bf16"


def test_swizzle_padding_follows_cutlass_rounding():
    # perf-notes entry 38: the persistent scheduler rounds the tile grid up to swizzle x cluster
    dual_n = configs._pp("dual", 128, 128, 2, 1, raster=2, swizzle=8)
    assert configs.swizzle_padding(dual_n, 2304, 18944) == pytest.approx(32 / 18)  # 18 token tiles -> 32
    assert configs.swizzle_padding(dual_n, 4096, 18944) == 1.0  # 32 token tiles, 296 across
    assert configs.swizzle_padding(dual_n, 4096, 29568) == pytest.approx(464 / 462)  # 72B: 462 across -> 464
    # the swizzle shrinks on small grids: 2 token tiles take swizzle 2 -> rounded to 4 (2 x cluster 2)
    assert configs.swizzle_padding(dual_n, 256, 18944) == pytest.approx(4 / 2)
    along_m = configs._pp("packed", 128, 128, 1, 2, raster=1, swizzle=2)
    assert configs.swizzle_padding(along_m, 520, 18944) == pytest.approx(6 / 5)
    assert configs.swizzle_padding(along_m, 2304, 18944) == 1.0
    assert configs.swizzle_padding(configs._pp("packed", 128, 128, 2, 1), 2304, 18944) == 1.0  # swizzle 1
    assert configs.swizzle_padding(configs._pp("packed", 128, 16, 1, 1, swap_ab=True), 5, 18944) == 1.0


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_rows_whose_swizzle_pads_fall_through(kernel):
    seven, fourteen, big = (18944, 3584), (13824, 5120), (29568, 8192)
    for (n, h) in (seven, fourteen, big):
        for M in (2112, 2240, 2304, 2560, 3072, 3328, 4352, 520, 600, 1032):
            for acc in ("fast", "promoted"):
                cfg = configs.table_config(kernel, M, n, h, acc)
                assert configs.swizzle_padding(cfg, M, n) <= configs.SWIZZLE_PADDING_MAX, (kernel, n, h, M, acc, cfg)
    # M = 4096 and 8192 keep the rasterised rows
    assert configs.table_config("dual", 4096, *seven).swizzle == 8
    assert configs.table_config("dual", 2304, *seven) == configs._pp("dual", 128, 128, 1, 2)
    assert configs.table_config("packed", 2304, *fourteen) == configs._pp("packed", 128, 128, 1, 2, raster=1, swizzle=2)
    assert configs.table_config("packed", 600, *big) == configs._pp("packed", 128, 128, 1, 2)
    assert configs.table_config(kernel, 2304, *seven, "promoted").swizzle == 1
    assert configs.table_config(kernel, 8192, *seven, "promoted").swizzle == 8


# Token counts whose last 128-token tile would be at most half full (perf-notes entry 39).
@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_tail_rule_takes_64_token_tiles_where_the_last_128_token_tile_is_half_empty(kernel):
    shapes = list(configs.MEASURED_SHAPES) + OTHER_SHAPES
    for n, h in shapes:
        long_k = kernel == "packed" and h >= 8192
        # entry 46: Kernel-1 on the small Qwen2.5 shapes takes 128x96 tiles along M instead
        small_dual = kernel == "dual" and (n, h) in configs.SMALL_QWEN25
        tail = configs._pp(kernel, 128, 96, 1, 1, raster=1) if small_dual else configs._pp(kernel, 64, 192, 1, 1, raster=1)
        for M in (513, 520, 576, 641, 704, 769, 832, 897, 960, 1025, 1088):
            want = None if long_k and M > 768 else tail
            assert configs.tail_config(kernel, M, n, h) == want, (n, h, M)
            for acc in ("fast", "promoted"):
                cfg = configs.table_config(kernel, M, n, h, acc)
                assert (cfg == tail) == (acc == "fast" and want is not None), (n, h, M, acc, cfg)
        # the last 128-token tile more than half full, whole token tiles, or outside 512 < M <= 1152
        for M in (512, 577, 600, 640, 705, 768, 1024, 1089, 1152, 1153, 1160, 448, 2048):
            assert configs.tail_config(kernel, M, n, h) is None, (n, h, M)
            # outside, a row may choose the same tile (entry 43: 32B at M <= 448; entry 46: the small
            # shapes' Kernel-1 rows up to M = 896)
            if 512 < M <= 1152 and not (small_dual and M <= 896):
                assert configs.table_config(kernel, M, n, h) != tail, (n, h, M)
    # the benchmark's token counts lie outside 512 < M <= 1152 or are multiples of 128: never the rule
    for M in (1, 16, 128, 512, 2048, 8192):
        assert configs.tail_config(kernel, M, 14336, 4096) is None
    # the packed kernel's limit at long K, at its edges
    tail = configs._pp(kernel, 64, 192, 1, 1, raster=1)
    assert configs.tail_config(kernel, 769, 14336, 8191) == tail
    assert configs.tail_config(kernel, 704, 14336, 8192) == tail
    assert (configs.tail_config(kernel, 769, 14336, 8192) is None) == (kernel == "packed")
    assert (configs.tail_config(kernel, 1088, 14336, 16384) is None) == (kernel == "packed")


def test_tail_rule_checks_its_arguments():
    with pytest.raises(ValueError, match="kernel must be one of"):
        configs.tail_config("triple", 520, 14336, 4096)
    with pytest.raises(ValueError, match="M must be >= 0"):
        configs.tail_config("packed", -1, 14336, 4096)
    with pytest.raises(ValueError, match="N must be >= 0"):
        configs.tail_config("packed", 520, -8, 4096)
    with pytest.raises(TypeError, match="K must be an int"):
        configs.tail_config("dual", 520, 14336, 4096.0)


def test_tail_rule_configs_are_compiled():
    for kernel in ("packed", "dual"):
        for dtype in (torch.bfloat16, torch.float16):
            name = configs._pp(kernel, 64, 192, 1, 1).name(dtype)
            assert select(kernel, 520, 18944, 3584, dtype, ALL) == configs.Choice(name, 1, 1)


def test_choosable_configs_cover_every_choice():
    choosable = configs.choosable_configs()
    assert all(c.raster == 0 and c.swizzle == 1 for c in choosable)
    plain = lambda c: configs.KernelConfig(c.kernel, c.schedule, c.tile_m, c.tile_n, c.tile_k,  # noqa: E731
                                           c.cluster_m, c.cluster_n, promote=c.promote, swap_ab=c.swap_ab)
    shapes = list(configs.MEASURED_SHAPES) + OTHER_SHAPES
    for kernel in ("packed", "dual"):
        for n, h in shapes:
            for M in list(range(0, 2200, 8)) + [2305, 4096, 8192, 8193]:
                for acc in ("fast", "promoted"):
                    assert plain(configs.table_config(kernel, M, n, h, acc)) in choosable, (kernel, n, h, M, acc)


def test_the_wave_rule_follows_the_device_s_sm_count():
    """On an H100 PCIe (114 SMs) the wave rule counts rounds of 114 CTAs: at Llama-3-8B's MLP and
    M = 256, 128x160 tiles (360 of them) take 3 rounds on 132 SMs but 4 on 114, where 128x128 tiles
    (448) take 4 rounds of narrower tiles on both."""
    names = frozenset(c.name(d) for c in configs.choosable_configs() for d in (torch.bfloat16, torch.float16))
    h200 = select("packed", 256, 14336, 4096, torch.bfloat16, available=names, num_sms=132)
    h100_pcie = select("packed", 256, 14336, 4096, torch.bfloat16, available=names, num_sms=114)
    assert h200.name == "packed_pingpong_128x160x64_2x1_bf16"
    assert h100_pcie.name == "packed_pingpong_128x128x64_2x1_bf16"
    # the measured shapes keep their rows whatever the SM count
    assert configs.table_config("packed", 256, 4864, 896, num_sms=114) == configs.table_config("packed", 256, 4864, 896)
    with pytest.raises(ValueError, match="num_sms must be >= 1"):
        configs.table_config("packed", 256, 14336, 4096, num_sms=0)
