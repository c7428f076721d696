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
    """

    launch_us: float
    hbm_gbps: float
    sm_gbps: float
    l2_bytes: float = 25e6
    blend: float = 2.0


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
    return device.launch_us + (compute**p + memory**p) ** (1 / p)
