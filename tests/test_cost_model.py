"""cost_model: tile grids, CUTLASS's persistent-scheduler rounding, HBM traffic and the prediction."""

import pytest

from fused_swiglu import configs, cost_model
from fused_swiglu.cost_model import ConfigCosts, DeviceCosts

PACKED_128 = configs.BY_BASE_NAME["packed_pingpong_128x128x64_2x1"]
PACKED_1X2 = configs.BY_BASE_NAME["packed_pingpong_128x128x64_1x2"]
SWAP = configs.BY_BASE_NAME["packed_swapab_pingpong_128x16x64_1x1"]
DEVICE = DeviceCosts(launch_us=5.0, hbm_gbps=4000.0, sm_gbps=100.0, l2_bytes=50e6, blend=16.0)
COSTS = ConfigCosts(tile_us=1.0, k_tile_us=0.3, gbps=3000.0)


def test_tile_grid_counts_gate_and_up_columns_and_swaps_with_swap_ab():
    assert cost_model.tile_grid(PACKED_128, 129, 4096) == (2, 64)  # 2N = 8192 columns of 128
    assert cost_model.tile_grid(SWAP, 17, 4096) == (64, 2)  # weight rows on GEMM-M, tokens on GEMM-N


def test_scheduled_tiles_round_up_to_clusters_and_swizzle_blocks():
    assert cost_model.scheduled_tiles(PACKED_128, 3 * 128, 4096) == 4 * 64  # 3 token tiles -> 2 clusters
    assert cost_model.scheduled_tiles(PACKED_1X2, 3 * 128, 4096) == 3 * 64
    # swizzle 8 with a 2x1 cluster: 18 token tiles padded to 32 (CUTLASS's rounding)
    assert cost_model.scheduled_tiles(PACKED_128, 2304, 27648, swizzle=8) == 32 * 432
    # the swizzle shrinks where the smaller grid dimension is short (below 6 / 3 / 2 tiles)
    assert cost_model.effective_swizzle(8, 5, 100) == 4 and cost_model.effective_swizzle(8, 1, 100) == 1
    assert cost_model.scheduled_tiles(PACKED_128, 0, 4096) == 0


def test_rounds_are_waves_of_whole_clusters():
    assert cost_model.persistent_ctas(PACKED_128, 132) == 132 and cost_model.persistent_ctas(PACKED_128, 131) == 130
    assert cost_model.rounds(PACKED_128, 256, 64 * 66, 132) == (1, 132)  # 2 x 66 tiles: one full wave
    assert cost_model.rounds(PACKED_128, 256, 64 * 67, 132) == (2, 132)  # 134 tiles: a second wave of 2
    assert cost_model.rounds(PACKED_128, 128 * 2, 64, 132) == (1, 2)  # 2 tiles: 2 CTAs
    assert cost_model.rounds(PACKED_128, 0, 64, 132) == (0, 0)


def test_hbm_traffic_reads_the_walked_operand_again_only_where_it_exceeds_l2():
    M, N, K = 6000, 28672, 8192
    x, w, y = 2 * M * K, 2 * 2 * N * K, 2 * M * N
    blocks_m, blocks_n = cost_model.tile_grid(PACKED_1X2, M, N)
    assert cost_model.raster_along_m(PACKED_1X2, M, N)  # CUTLASS's heuristic: more tiles along N
    # along M: x (98 MB, over L2) once per column of 1x2 clusters
    assert cost_model.hbm_traffic(PACKED_1X2, M, N, K, 50e6) == x * -(-blocks_n // 2) + w + y
    assert cost_model.hbm_traffic(PACKED_1X2, M, N, K, 200e6) == x + w + y  # fits: once
    # along N (raster 2): the weights (over L2) once per row of clusters, here each token tile
    assert cost_model.hbm_traffic(PACKED_1X2, M, N, K, 50e6, raster=2) == x + w * blocks_m + y
    assert cost_model.hbm_bytes(M, N, K) == x + w + y


def test_prediction_grows_with_work_and_blends_its_bounds():
    small = cost_model.predict_us(PACKED_128, COSTS, DEVICE, 256, 4096, 1024, 132)
    longer = cost_model.predict_us(PACKED_128, COSTS, DEVICE, 256, 4096, 4096, 132)
    assert DEVICE.launch_us < small < longer
    assert cost_model.predict_us(PACKED_128, COSTS, DEVICE, 0, 4096, 1024, 132) == 0.0
    # one wave, K = 4096: compute = 1 + 64 * 0.3; the memory term is the bytes over 3000 GB/s
    M, N, K = 256, 64 * 66, 4096
    compute = 1.0 + 64 * 0.3
    memory = cost_model.hbm_traffic(PACKED_128, M, N, K, 50e6) / 3000e3
    p = DEVICE.blend
    assert cost_model.predict_us(PACKED_128, COSTS, DEVICE, M, N, K, 132) == pytest.approx(
        5.0 + (compute**p + memory**p) ** (1 / p))
    # few CTAs: bounded by what they stream (2 CTAs x 100 GB/s)
    few = cost_model.predict_us(PACKED_128, ConfigCosts(0.0, 0.0, 3000.0), DEVICE, 256, 64, 1 << 20, 132)
    assert few == pytest.approx(5.0 + cost_model.hbm_traffic(PACKED_128, 256, 64, 1 << 20, 50e6) / 200e3)


DUAL_2X1 = configs.BY_BASE_NAME["dual_pingpong_128x128x64_2x1"]


def test_dram_traffic_follows_the_tile_order():
    """Qwen2.5-7B at M = 8192 (64 x 296 tiles of 128 x 128, 2 x 1 clusters, 66 clusters a wave): along M
    a wave reads all of x (59 MB, past the L2 it may reuse) and reads it again every wave; raster N
    with swizzle 8 sweeps a 16-tile (2048-token) panel of x across the weights, 4 groups in all."""
    M, N, K, reuse = 8192, 18944, 3584, 30e6
    x, w, y = 2 * M * K, 2 * 2 * N * K, 2 * M * N
    along_m = cost_model.dram_traffic(DUAL_2X1, M, N, K, 132, reuse, raster=1)
    assert along_m == cost_model.dram_traffic(DUAL_2X1, M, N, K, 132, reuse)  # CUTLASS's heuristic walks M here
    waves = -(-64 * 296 // 132)
    assert along_m == pytest.approx(waves * (x + 3 * w / 296) + y, rel=1e-9)  # x and 3 weight panels a wave
    swizzled = cost_model.dram_traffic(DUAL_2X1, M, N, K, 132, reuse, raster=2, swizzle=8)
    assert swizzled == x + 4 * w + y  # the group's x panel stays; the weights once per 16 token tiles
    assert cost_model.dram_traffic(DUAL_2X1, M, N, K, 132, reuse, raster=2, swizzle=4) == x + 8 * w + y
    # where everything fits, each operand once, whatever the order
    for raster, swizzle in ((0, 1), (1, 1), (2, 8)):
        assert cost_model.dram_traffic(DUAL_2X1, 256, 1024, 512, 132, reuse, raster, swizzle) == \
            cost_model.hbm_bytes(256, 1024, 512)
    assert cost_model.dram_traffic(SWAP, 16, 4096, 4096, 132, reuse) == cost_model.hbm_bytes(16, 4096, 4096)


def test_the_power_term_prices_the_re_reads_of_large_m_launches_only():
    M, N, K = 8192, 18944, 3584
    costs = ConfigCosts(tile_us=1.0, k_tile_us=1.0, gbps=3000.0)
    off = cost_model.predict_us(DUAL_2X1, costs, DEVICE, M, N, K, 132, raster=1)
    power = DeviceCosts(**{**DEVICE.__dict__, "energy_us_per_byte": 1e-7, "l2_reuse_bytes": 30e6})
    again = cost_model.dram_traffic(DUAL_2X1, M, N, K, 132, 30e6, raster=1) - cost_model.hbm_bytes(M, N, K)
    on = cost_model.predict_us(DUAL_2X1, costs, power, M, N, K, 132, raster=1)
    waves, _ = cost_model.rounds(DUAL_2X1, M, N, 132)
    compute = waves * (costs.tile_us + K // 64 * costs.k_tile_us)
    assert on == pytest.approx(max(off - DEVICE.launch_us, compute + 1e-7 * again) + DEVICE.launch_us)
    assert on > off
    swizzled = cost_model.predict_us(DUAL_2X1, costs, power, M, N, K, 132, raster=2, swizzle=8)
    assert swizzled < on  # the model now tells the orders apart
    # below power_from_m, or where the order re-reads nothing, priced as before
    for m in (128, 1000):
        assert cost_model.predict_us(DUAL_2X1, costs, power, m, N, K, 132) == \
            cost_model.predict_us(DUAL_2X1, costs, DEVICE, m, N, K, 132)
    assert cost_model.predict_us(DUAL_2X1, costs, power, 1024, 1024, 512, 132) == \
        cost_model.predict_us(DUAL_2X1, costs, DEVICE, 1024, 1024, 512, 132)


def test_a_sustained_prediction_is_rounds_times_the_launchs_costs():
    v = configs.BY_BASE_NAME["packed_pingpong_128x192x64_2x1"]
    costs = cost_model.ConfigCosts(tile_us=2.0, k_tile_us=0.5)
    rounds, _ = cost_model.rounds(v, 6000, 29568, 132, 4)  # 47 token tiles: the 2 x 1 cluster pads one
    assert cost_model.scheduled_tiles(v, 6000, 29568, 4) == 48 * 308
    assert cost_model.predict_sustained_us(v, costs, 6000, 29568, 8192, 132, 4) == pytest.approx(rounds * (2 + 128 * 0.5))
    assert cost_model.predict_sustained_us(v, costs, 0, 29568, 8192, 132, 4) == 0.0
    assert cost_model.predict_sustained_us(v, costs, 6000, 29568, 0, 132, 4) == 0.0
