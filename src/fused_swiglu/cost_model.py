"""The cost model that ranks kernel configs for one problem: M tokens, N = I, K = H.

A config's predicted time on a GPU of ``num_sms`` SMs, in microseconds::

    launch_us + (compute ** p + memory ** p) ** (1 / p)

* ``compute = rounds * (tile_us + k_tiles * k_tile_us)``: ``rounds`` is the persistent tile
  scheduler's waves, ``ceil(tiles / ctas)``, where ``tiles`` is the output tile grid as CUTLASS's
  scheduler runs it (rounded up to whole clusters and, with a swizzle above 1, to whole swizzle
  blocks) and ``ctas`` the CTAs it launches (``num_sms`` rounded down to whole clusters, at most one
  per tile); ``tile_us`` and ``k_tile_us`` are the config's own measured costs per tile and per k-tile
  of a round at full occupancy (:class:`ConfigCosts`, written by ``fused-swiglu tune``).
* ``memory = hbm_traffic / min(gbps, ctas * sm_gbps)``: the bytes the launch moves through HBM
  (:func:`hbm_traffic`: each operand once, and the operand the rasterisation walks past again for
  every column (row) of clusters where it does not fit in L2) over the config's own measured
  bandwidth at decode sizes, or what its CTAs can stream where few of them run.
* ``p`` (:class:`DeviceCosts`) blends the two where both bound the launch (p = 1 adds them, a large
  p takes the larger).
* At the power cap (from M = ``power_from_m`` tokens on: prefill and training sizes, where every
  method draws the board's limit) the clock falls with the
  energy a launch spends, and moving a byte through HBM costs energy the SMs then lack. The launch
  then takes at least ``compute + energy_us_per_byte * (dram_traffic - hbm_bytes)``: the bytes a tile
  order reads again beyond each operand's one read (the one read is in every order, and in the
  measured ``compute``). :func:`dram_traffic` models them wave by wave (which x panels and weight
  panels a wave of persistent CTAs touches, and whether the group of panels it sweeps stays in
  ``l2_reuse_bytes`` of L2), so the rasterisation and swizzle are chosen by it.
  ``energy_us_per_byte`` 0 leaves the term out.

Where the tuned data holds sustained costs for a launch (a config with its raster and swizzle, fitted
by ``fused-swiglu tune`` from timings at the power cap) the choice ranks those launches instead, from
the tuned data's ``from_m`` on: :func:`predict_sustained_us`, ``rounds * (tile_us + k_tiles *
k_tile_us)`` with that launch's own costs, which hold its tile order's energy and its clock at the cap.

The model knows nothing of a config's legality (cluster fill, swizzle padding, shared memory):
:mod:`fused_swiglu.configs` drops illegal configs before ranking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class TileGeometry(Protocol):
    """What the model reads of a config (:class:`fused_swiglu.configs.KernelConfig` has it)."""

    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    swap_ab: bool


@dataclass(frozen=True)
class DeviceCosts:
    """A GPU's costs shared by every config.

    launch_us: fixed GPU time per launch (prologue, pipeline fill, tail), microseconds.
    hbm_gbps: the HBM bandwidth a whole-GPU launch sustains, GB/s (1e9 bytes per second).
    sm_gbps: what one CTA streams on its own, GB/s (bounds launches of few CTAs).
    l2_bytes: the share of L2 an operand may take and still be read from HBM only once, bytes.
    blend: the exponent p of the module docstring.
    energy_us_per_byte: at the power cap, the microseconds each byte of :func:`dram_traffic` adds
        (0: no power term).
    l2_reuse_bytes: the L2 a wave's group of panels may fill and still be read again from L2 by the
        next wave, bytes (:func:`dram_traffic`).
    power_from_m: the fewest tokens M the power term applies to.
    """

    launch_us: float
    hbm_gbps: float
    sm_gbps: float
    l2_bytes: float = 25e6
    blend: float = 2.0
    energy_us_per_byte: float = 0.0
    l2_reuse_bytes: float = 30e6
    power_from_m: int = 1024


@dataclass(frozen=True)
class UnfusedCosts:
    """The unfused path at the power cap (PyTorch's two GEMMs and ``silu(g) * u``): microseconds per GFLOP
    of the two products (``us_per_gflop``) and per MB the path moves through HBM (``us_per_mb``:
    x, the weights, g and u written and read again, y)."""

    us_per_gflop: float
    us_per_mb: float


@dataclass(frozen=True)
class ConfigCosts:
    """One config's measured costs: microseconds per round of tiles (``tile_us``) and per k-tile of
    a round (``k_tile_us``), at full occupancy; the HBM bandwidth it reaches at decode sizes
    (``gbps``, GB/s; 0: the device's)."""

    tile_us: float
    k_tile_us: float
    gbps: float = 0.0


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def tile_grid(config: TileGeometry, M: int, N: int) -> tuple[int, int]:
    """Output tiles along the GEMM's M and N: ``(ceil(M / tile_m), ceil(2N / tile_n))``; with swap-AB
    the weight rows are GEMM-M, ``(ceil(2N / tile_m), ceil(M / tile_n))``."""
    if config.swap_ab:
        return _ceil(2 * N, config.tile_m), _ceil(M, config.tile_n)
    return _ceil(M, config.tile_m), _ceil(2 * N, config.tile_n)


def effective_swizzle(swizzle: int, blocks_m: int, blocks_n: int) -> int:
    """The swizzle CUTLASS's sm90 persistent scheduler applies: ``swizzle`` reduced to 8 / 4 / 2 / 1
    where the smaller grid dimension is below 6 / 3 / 2 tiles (tile_scheduler_params.h)."""
    smaller = min(blocks_m, blocks_n)
    return next(s for s, need in ((8, 6), (4, 3), (2, 2), (1, 0)) if swizzle >= s and smaller >= need)


def scheduled_tiles(config: TileGeometry, M: int, N: int, swizzle: int = 1) -> int:
    """Tiles the persistent scheduler runs: the grid rounded up in both dimensions to whole clusters
    times the effective swizzle. The padding tiles run the whole mainloop on zero-filled operands."""
    blocks_m, blocks_n = tile_grid(config, M, N)
    if blocks_m == 0 or blocks_n == 0:
        return 0
    s = effective_swizzle(swizzle, blocks_m, blocks_n) if not config.swap_ab else 1
    padded_m = _ceil(blocks_m, s * config.cluster_m) * s * config.cluster_m
    padded_n = _ceil(blocks_n, s * config.cluster_n) * s * config.cluster_n
    return padded_m * padded_n


def persistent_ctas(config: TileGeometry, num_sms: int) -> int:
    """CTAs of a full persistent grid: ``num_sms`` rounded down to whole clusters (at least one)."""
    cluster = config.cluster_m * config.cluster_n
    return max(cluster, num_sms // cluster * cluster)


def rounds(config: TileGeometry, M: int, N: int, num_sms: int, swizzle: int = 1) -> tuple[int, int]:
    """``(rounds, ctas)``: waves of the persistent scheduler and the CTAs that run them."""
    tiles = scheduled_tiles(config, M, N, swizzle)
    if tiles == 0:
        return 0, 0
    ctas = min(tiles, persistent_ctas(config, num_sms))
    return _ceil(tiles, ctas), ctas


def hbm_bytes(M: int, N: int, K: int, element_bytes: int = 2) -> int:
    """Bytes a call moves through HBM at least: x (M, K), both weights (2N, K) and y (M, N)."""
    return element_bytes * (M * K + 2 * N * K + M * N)


def raster_along_m(config: TileGeometry, M: int, N: int, raster: int = 0) -> bool:
    """Whether the scheduler walks the tile grid along GEMM-M first (raster 1; raster 0, CUTLASS's
    heuristic: where the grid has more tiles along N than along M)."""
    if raster:
        return raster == 1
    blocks_m, blocks_n = tile_grid(config, M, N)
    return blocks_n > blocks_m


def hbm_traffic(config: TileGeometry, M: int, N: int, K: int, l2_bytes: float, raster: int = 0, swizzle: int = 1,
                element_bytes: int = 2) -> float:
    """Bytes a launch reads from and writes to HBM, modelled: y once, each operand once, and the
    operand along the walk (GEMM-M's, A, when the walk is along M) once more per column of clusters
    (swizzle blocks of columns) after the first where it is larger than ``l2_bytes``. GEMM-M's operand
    is x, or the weights with swap-AB."""
    blocks_m, blocks_n = tile_grid(config, M, N)
    x, w = element_bytes * M * K, element_bytes * 2 * N * K
    a, b = (w, x) if config.swap_ab else (x, w)
    s = 1 if config.swap_ab else effective_swizzle(swizzle, blocks_m, blocks_n)
    if raster_along_m(config, M, N, raster):
        passes = _ceil(blocks_n, config.cluster_n * s) if a > l2_bytes else 1
        traffic = a * passes + b
    else:
        passes = _ceil(blocks_m, config.cluster_m * s) if b > l2_bytes else 1
        traffic = a + b * passes
    return traffic + element_bytes * M * N


def _log_swizzle(swizzle: int, blocks_m: int, blocks_n: int) -> int:
    return effective_swizzle(swizzle, blocks_m, blocks_n).bit_length() - 1


def dram_traffic(config: TileGeometry, M: int, N: int, K: int, num_sms: int, l2_reuse_bytes: float,
                 raster: int = 0, swizzle: int = 1, element_bytes: int = 2) -> float:
    """Bytes a launch moves through HBM by its tile order (the power term of :func:`predict_us`).

    CUTLASS's persistent scheduler walks the cluster grid along its major dimension (N with raster 2,
    M with raster 1; raster 0 takes M where there are more tiles along N) in groups of ``s`` clusters
    of the minor dimension (``s`` the effective swizzle): the clusters of one group, major position by
    major position, then the next group. One wave, the grid's ``C`` clusters at once, touches the
    group's minor panels (a minor panel: one tile's rows of its operand over all of K) and about
    ``C / s`` clusters' major panels. Where that footprint fits ``l2_reuse_bytes``, a group's minor
    panels are read once while the group is swept, and the major operand once per group (once in
    all where it fits L2 beside the group); otherwise every wave reads its minor panels again (and,
    where one wave spans whole sweeps, everything it touches). y is written once. With swap-AB the
    weights are GEMM-M's operand and the swizzle is 1.
    """
    blocks_m, blocks_n = tile_grid(config, M, N)
    if blocks_m == 0 or blocks_n == 0 or K == 0:
        return 0.0
    x, w, y = element_bytes * M * K, element_bytes * 2 * N * K, element_bytes * M * N
    a, b = (w, x) if config.swap_ab else (x, w)  # GEMM-M's operand, GEMM-N's
    along_m = raster_along_m(config, M, N, raster)
    s = 1 if config.swap_ab else 1 << _log_swizzle(swizzle, blocks_m, blocks_n)
    # (tiles, CTAs per cluster, bytes of one panel) of the major and minor dimensions
    panel_m, panel_n = a / blocks_m, b / blocks_n
    major = (blocks_m, config.cluster_m, panel_m) if along_m else (blocks_n, config.cluster_n, panel_n)
    minor = (blocks_n, config.cluster_n, panel_n) if along_m else (blocks_m, config.cluster_m, panel_m)
    major_clusters = _ceil(major[0], major[1])
    minor_clusters = _ceil(minor[0], minor[1])
    wave = max(1, persistent_ctas(config, num_sms) // (config.cluster_m * config.cluster_n))
    group = s * major_clusters  # clusters of one group
    if wave <= group:
        minor_panels = min(s, wave) * minor[1]
        major_panels = min(major[0], _ceil(wave, s) * major[1])
    else:
        minor_panels = min(minor[0], _ceil(wave, major_clusters) * minor[1])
        major_panels = major[0]
    footprint = minor_panels * minor[2] + major_panels * major[2]
    minor_bytes, major_bytes = minor[0] * minor[2], major[0] * major[2]
    groups = _ceil(minor_clusters, s)
    if footprint <= l2_reuse_bytes:  # a group's minor panels stay while it is swept
        major_reads = 1 if major_bytes + s * minor[1] * minor[2] <= l2_reuse_bytes else groups
        return minor_bytes + major_bytes * major_reads + y
    waves = _ceil(groups * s * major_clusters, wave)
    if wave <= group:  # each wave reads its minor panels again; each group pass the major operand
        traffic = waves * minor_panels * minor[2] + groups * major_bytes
    else:  # a wave spans whole sweeps: it reads all it touches
        traffic = waves * footprint
    return max(minor_bytes + major_bytes, traffic) + y


def predict_us(
    config: TileGeometry,
    costs: ConfigCosts,
    device: DeviceCosts,
    M: int,
    N: int,
    K: int,
    num_sms: int,
    raster: int = 0,
    swizzle: int = 1,
) -> float:
    """The model's time of one launch in microseconds (module docstring); 0 for an empty problem."""
    waves, ctas = rounds(config, M, N, num_sms, swizzle)
    if waves == 0 or K == 0:
        return 0.0
    compute = waves * (costs.tile_us + _ceil(K, config.tile_k) * costs.k_tile_us)
    gbps = min(costs.gbps or device.hbm_gbps, ctas * device.sm_gbps)
    memory = hbm_traffic(config, M, N, K, device.l2_bytes, raster, swizzle) / (gbps * 1e3)
    p = device.blend
    blended = (compute**p + memory**p) ** (1 / p)
    if device.energy_us_per_byte > 0 and M >= device.power_from_m:
        again = dram_traffic(config, M, N, K, num_sms, device.l2_reuse_bytes, raster, swizzle) - hbm_bytes(M, N, K)
        blended = max(blended, compute + device.energy_us_per_byte * max(0.0, again))
    return device.launch_us + blended


def predict_sustained_us(config: TileGeometry, costs: ConfigCosts, M: int, N: int, K: int, num_sms: int,
                         swizzle: int = 1) -> float:
    """A launch's time at the power cap in microseconds from its sustained costs (module docstring):
    ``rounds * (tile_us + ceil(K / tile_k) * k_tile_us)``, the rounds of the tiles the scheduler runs with
    ``swizzle`` (padding tiles included); 0 for an empty problem."""
    waves, _ = rounds(config, M, N, num_sms, swizzle)
    if waves == 0 or K == 0:
        return 0.0
    return waves * (costs.tile_us + _ceil(K, config.tile_k) * costs.k_tile_us)


def unfused_features(M: int, N: int, K: int, element_bytes: int = 2) -> tuple[float, float]:
    """(GFLOP, MB) of the unfused path for M tokens, N = I, K = H: ``4 M N K`` multiply-adds x 2 and the
    bytes of x, both weights, g and u (written, then read) and y."""
    return 4 * M * N * K / 1e9, element_bytes * (M * K + 2 * N * K + 5 * M * N) / 1e6


def predict_unfused_us(costs: UnfusedCosts, M: int, N: int, K: int) -> float:
    """The unfused path's time at the power cap in microseconds (:class:`UnfusedCosts`)."""
    gflop, mb = unfused_features(M, N, K)
    return costs.us_per_gflop * gflop + costs.us_per_mb * mb
