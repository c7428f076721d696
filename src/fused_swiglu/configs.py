"""Kernel configurations, the per-shape table and the heuristic that reads it.

A config name is the C library's:
``{kernel}_{schedule}_{tile_m}x{tile_n}x{tile_k}_{cluster_m}x{cluster_n}[_promote{p}]_{dtype}``,
e.g. ``packed_pingpong_128x192x64_2x1_bf16``. ``tile_n`` counts gate + up columns of a CTA tile;
``_promote{p}``: GMMA accumulates ``p`` k-tiles at a time and each partial sum is added into a
second fp32 accumulator (two-level accumulation; absent: GMMA accumulates all of K).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Literal

import torch

from . import env
from ._validate import check_choice, warn_once
from .errors import UnsupportedError

KERNELS = ("packed", "dual")
# "fast": GMMA accumulates all of K in its fp32 accumulators. "promoted": GMMA accumulates PROMOTE
# k-tiles at a time and each partial sum is added into a second fp32 accumulator (perf-notes entry 7).
ACCUMULATIONS = ("fast", "promoted")
PROMOTE = 4
DTYPE_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class KernelConfig:
    """One kernel configuration (CUTLASS names: TileShape, ClusterShape, schedule).

    tile_m, tile_n, tile_k: CTA TileShape in elements (tile_n counts gate + up columns; with
        swap_ab, tile_m counts weight rows, gate + up, and tile_n tokens).
    cluster_m, cluster_n: ClusterShape in CTAs.
    raster: tile rasterisation, 0 heuristic, 1 along M, 2 along N (launch parameter, not in the name).
    swizzle: tile scheduler max swizzle, 1/2/4/8 (launch parameter, not in the name).
    promote: k-tiles per GMMA partial sum before it is added into the fp32 main accumulator;
        0 = GMMA accumulates all of K.
    swap_ab: the GEMM takes the weights as GMMA's A operand and the tokens as B (packed kernel,
        decode sizes; perf-notes entry 25).
    """

    kernel: Literal["packed", "dual"]
    schedule: Literal["pingpong", "cooperative"]
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    raster: int = 0
    swizzle: int = 1
    promote: int = 0
    swap_ab: bool = False

    def name(self, dtype: torch.dtype) -> str:
        """The library's config name for ``dtype`` (torch.bfloat16 or torch.float16).

        Raises:
            TypeError: other dtype.
        """
        if dtype not in DTYPE_SUFFIX:
            raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
        return (
            f"{self.kernel}{'_swapab' if self.swap_ab else ''}_{self.schedule}_{self.tile_m}x{self.tile_n}x{self.tile_k}_"
            f"{self.cluster_m}x{self.cluster_n}{f'_promote{self.promote}' if self.promote else ''}_"
            f"{DTYPE_SUFFIX[dtype]}"
        )


@dataclass(frozen=True)
class Row:
    """Table row: for ``kernel``, M <= ``m_max`` (None: any M), weight size ``I * H`` in
    ``[weight_min, weight_max)`` (weight_max None: unbounded) and, if ``shape`` is given, exactly
    ``(I, H) == shape``, use ``config``. A Pingpong config with a cluster of 2 CTAs along M matches
    only when the token tiles (ceil(M / tile_m)) pair up: with an odd count it ran 6-45 % slower
    than the same tile with a 1x2 cluster (perf-notes entry 29), so such M falls through to a later row."""

    kernel: str
    m_max: int | None
    config: KernelConfig
    weight_min: int = 0
    weight_max: int | None = None
    shape: tuple[int, int] | None = None

    def matches(self, kernel: str, M: int, N: int, K: int, accumulation: str = "fast") -> bool:
        w = N * K
        return (
            self.kernel == kernel
            and (self.config.promote > 0) == (accumulation == "promoted")
            and (self.m_max is None or M <= self.m_max)
            and w >= self.weight_min
            and (self.weight_max is None or w < self.weight_max)
            and (self.shape is None or self.shape == (N, K))
            and token_tiles_fill_clusters(self.config, M)
            and swizzle_padding(self.config, M, N) <= SWIZZLE_PADDING_MAX
        )


def token_tiles_fill_clusters(config: KernelConfig, M: int) -> bool:
    """Whether M's token tiles (ceil(M / tile_m)) fill whole clusters along M; always true for
    Cooperative, swap-AB and clusters of one CTA along M (Row docstring, perf-notes entry 29)."""
    if config.schedule != "pingpong" or config.swap_ab or config.cluster_m == 1:
        return True
    return -(-M // config.tile_m) % config.cluster_m == 0


# A row whose swizzle would make CUTLASS's persistent scheduler run more than 2 % padding tiles falls
# through to the next row (perf-notes entry 38).
SWIZZLE_PADDING_MAX = 1.02


def swizzle_padding(config: KernelConfig, M: int, N: int) -> float:
    """Tiles the persistent scheduler runs / tiles of the problem, for M tokens and N = I.

    CUTLASS's sm90 persistent scheduler (cutlass/gemm/kernel/tile_scheduler_params.h) rounds the tile
    grid up, in both dimensions, to a multiple of swizzle x cluster size, with the swizzle reduced to
    8 / 4 / 2 / 1 where the smaller grid dimension is below 6 / 3 / 2 tiles. The padding tiles run
    the whole mainloop on zero-filled operands: with swizzle 8 and a 2x1 cluster, M = 2304 (18 token
    tiles, padded to 32) ran at 0.49x cuBLAS where M = 4096 ran at 1.04x. Swap-AB configs (swizzle 1)
    return 1.0.
    """
    if config.swap_ab or config.swizzle <= 1:
        return 1.0
    blocks_m, blocks_n = -(-M // config.tile_m), -(-2 * N // config.tile_n)
    if blocks_m == 0 or blocks_n == 0:
        return 1.0
    smaller = min(blocks_m, blocks_n)
    swizzle = next(s for s, need in ((8, 6), (4, 3), (2, 2), (1, 0)) if config.swizzle >= s and smaller >= need)
    padded_m = -(-blocks_m // (swizzle * config.cluster_m)) * swizzle * config.cluster_m
    padded_n = -(-blocks_n // (swizzle * config.cluster_n)) * swizzle * config.cluster_n
    return padded_m * padded_n / (blocks_m * blocks_n)


def _pp(kernel, tile_m, tile_n, cluster_m, cluster_n, raster=0, swizzle=1, promote=0, swap_ab=False) -> KernelConfig:
    return KernelConfig(kernel, "pingpong", tile_m, tile_n, 64, cluster_m, cluster_n, raster, swizzle, promote, swap_ab)


def _co(kernel, tile_m, tile_n, cluster_m, cluster_n, raster=0, swizzle=1, promote=0) -> KernelConfig:
    return KernelConfig(kernel, "cooperative", tile_m, tile_n, 64, cluster_m, cluster_n, raster, swizzle, promote)


SMALL = 20_000_000  # I*H below this: Qwen2.5-0.5B (4.4M) and 1.5B (13.8M)
LARGE = 50_000_000  # I*H from this on: 7B (67.9M), 14B (70.8M), 32B (141.6M), 72B (242.2M)

# Qwen2.5 MLP shapes (I, H): the benchmark's, measured row by row; some have rows of their own.
QWEN25_0_5B = (4864, 896)
QWEN25_1_5B = (8960, 1536)
QWEN25_3B = (11008, 2048)
QWEN25_7B = (18944, 3584)
QWEN25_14B = (13824, 5120)
QWEN25_32B = (27648, 5120)
QWEN25_72B = (29568, 8192)
MEASURED_SHAPES = frozenset({QWEN25_0_5B, QWEN25_1_5B, QWEN25_3B, QWEN25_7B, QWEN25_14B, QWEN25_32B, QWEN25_72B})
_UP_TO_14B = (QWEN25_0_5B, QWEN25_1_5B, QWEN25_3B, QWEN25_7B, QWEN25_14B)
SMALL_QWEN25 = (QWEN25_0_5B, QWEN25_1_5B, QWEN25_3B)  # the measured shapes with I*H below LARGE

# Rows are matched first to last. Each choice is the fastest configuration in the sweeps of
# scripts/tune_configs.py on the H200 (bf16, L2 flushed; docs/perf-notes.md entries 1-4 and 11):
#   Decode sizes: the swap-AB forms (128 weight rows by 16 tokens) keep the weight stream in flight
#     that a 64-token-row tile wastes on X (entries 24-26): Kernel-2 0.87-1.05x cuBLAS at M <= 16 in
#     the sweep where the normal form ran at 0.74-0.95x, Kernel-1 0.86-1.04x where it ran at
#     0.68-0.95x; up to M = 32 (two token tiles) on weights of 3B and up.
#   Small M on 1.5B (M <= 128) and 3B (M <= 64): 64x64 tiles. 2I/128 = 140 and 172 tiles leave most
#     of a second wave of 132 SMs idle; 280 and 344 half-width tiles fill it better (entry 14).
#   M <= 384: 64x128 tiles: the most CTAs for the memory-bound weight read at small M, and no half-empty
#     128-row tiles at M = 192 or 320 (entry 13: at least 0.91 of the best measured config's speed at
#     every M in 192..384 on five shapes, where the M = 512 rows had fallen to 0.45-0.79 of cuBLAS).
#     Entry 28 (M = 257..384): on weights of 7B and up, packed 64x192 at 256 < M <= 352 (+4-41 %) and
#     128x96 at 352 < M <= 384 for packed and 320 < M <= 384 for dual (+1-27 %); on 1.5B 128x96 for
#     both at 320 < M <= 384 (+1-21 %); 0.5B and 3B keep 64x128 (128x96 within -4..+13 %, mixed).
#   32 < M <= 256 (entry 32, measured at M = 48..256 in steps of 16): per-shape rows where a config beat
#     those rows by more than 2 % in two sweeps and through the public API. 64x64 at M <= 64 on 7B and
#     32B (+3-8 %; 14B and 72B keep 64x128); on large weights packed 64x192 at 64 < M <= 96 and dual
#     128x128 1x2 at 64 < M <= 80, packed 64x192 at 128 < M <= 160 (192 on 72B; +12-44 %: three 64-token
#     tiles of 192 columns instead of 128); 14B 128x128 1x2 at 64 < M <= 128 (+6-10 %), 7B 128x96 at
#     96 < M <= 128 (+3-4 %). At 192 < M <= 256, two 128-token tiles: 128x96 on 1.5B, 128x128 with a
#     2x1 cluster on 3B, 32B and 72B (+5-30 %). On 7B and 14B, whose 128x128 2x1 had lost 2-6 % at
#     M = 224 and 256, the wave rule's tiles (entry 35) in an A/B against 64x128 (entry 37): 7B packed
#     128x192, dual 128x160, 14B 128x160, all 2x1: +24-51 % at M = 193-216 (the fourth 64-token tile
#     at most 3/8 full), +6-19 % at 224, -0.3 to +5.5 % at 240-256.
#   M <= 512: a few tiles per SM, so the SM time left idle in the last wave weighs as much as a tile's
#     speed (entry 11). Per-shape rows where a config beat the general row by more than 1 % in the
#     M = 512 sweep (packed 3B, 14B: 64x192; packed 32B: 128x192); else 64x128 rasterised along M on
#     small weights and 128x128 with cluster 2x1. Once M > 448, where the 128-row token tiles are at
#     least 7/8 used in total (M / 512), 128x96 (cluster 1x1; 2I/96 tiles fill the last wave on 1.5B,
#     3B, 14B and 32B) where it beat the previous row by 1-7 % (entry 27): packed 1.5B and 14B, dual 1.5B, 3B, 14B and 32B; at
#     M = 448 it runs 0.6-0.8x (3.5 token tiles), so those shapes keep their M <= 448 rows. Packed 3B
#     runs 128x96 from 384 < M <= 448 (entry 43) on to M = 512: +2-3 % at every M in 449..512 over
#     64x192 in two runs (entry 49). Packed 7B runs 128x192 2x1 along M there: +1-2 % at every M in
#     449..512 over 128x128 2x1 in two runs (entry 53).
#   M <= 2048: 128x128 tiles; the scheduler's default rasterisation was within noise of the best.
#     On 14B, 128x160 (one 160-wide GMMA, gate 80 + up 80 in the dual kernel), whose tile count fills
#     the last wave better: +1.4-2.4 % at M = 1024 and 2048 (entry 27); on 1.5B and 32B it gained at
#     M = 1024 but lost 1.5-2 % at M = 768 (entry 29), so those keep the general rows.
#   Odd token-tile counts skip the 2x1-cluster rows (Row docstring, entry 29): 128x128 1x2 then.
#   384 < M <= 448 and 576 < M <= 640 (entry 43, two sweeps after entry 41): 3B 128x96 (both kernels,
#     +6-8 %), 32B 64x192 along M (both, +6-7 %), 7B and 72B packed 64x192 along M (+3 %, +7 %) at
#     384 < M <= 448; 128x96 for both kernels on 0.5B-14B at 576 < M <= 640 (+1-9 %; 32B and 72B lost).
#   Kernel-1 at 256 < M <= 320 (entry 42, measured after entry 41 shifted partial token tiles inside
#     the problem): 64x192 along M on 72B (+28-35 %) and 32B (+0-11 %), 128x96 on 7B (+4-13 %) against
#     64x128; 1.5B, 3B, 14B and 4096x14336 keep 64x128 (alternatives -20 to +15 %, mixed).
#   Before any row (and before the wave rule), with fast accumulation, at 512 < M <= 1152 where the last
#     128-token tile would be at most half full: 64x192 tiles for both kernels, for the packed kernel
#     at K >= 8192 only to M = 768 (tail_config, entry 39); Kernel-1 on 0.5B, 1.5B and 3B takes 128x96
#     along M there instead (entry 46).
#   Entry 46 (a survey after entries 41-43, checked on a third set of token counts, +2-13 % in geometric
#     mean per shape): Kernel-1 128x96 along M on 0.5B-3B at 512 < M <= 896; Kernel-2 128x96 along M
#     on 0.5B and 1.5B at 640 < M <= 896; Kernel-2 64x128 along M on 7B and 14B at 128 < M <= 160;
#     Kernel-1 128x96 on 3B and 7B at 192 < M <= 256; Kernel-1 at 384 < M <= 448: 64x192 along M on 14B,
#     128x96 along M on 1.5B.
#   M > 2048: on small weights (0.5B, 1.5B) the packed kernel along M with swizzle 2 (entry 19: +1-7 %
#     on 0.5B, within +-1 % on 1.5B; the dual kernel showed no difference beyond +-1 %). On large
#     weights the dual kernel rasterises along N with swizzle 8 to keep a wave's operands in L2; the
#     packed kernel does so with 128x192 tiles on 14B and 32B only, and elsewhere runs 128x128 1x2
#     along M with swizzle 2: +1.3-2.8 % on 7B and 72B and -0.5 to +3.7 % on 8 other large shapes at
#     M = 4096 and 8192 in an A/B timed rep by rep (entry 36), where 14B and 32B lost 0.3-1.3 %.
TABLE: list[Row] = [
    Row("packed", 16, _pp("packed", 128, 16, 1, 1, swap_ab=True)),
    Row("packed", 32, _pp("packed", 128, 16, 1, 1, swap_ab=True), weight_min=SMALL),
    Row("packed", 128, _pp("packed", 64, 64, 1, 1), shape=QWEN25_1_5B),
    Row("packed", 64, _pp("packed", 64, 64, 1, 1), shape=QWEN25_3B),
    # 32 < M <= 256 (entry 32): by shape, where a config beat the M <= 384 row by more than 2 %
    Row("packed", 64, _pp("packed", 64, 64, 1, 1), shape=QWEN25_7B),
    Row("packed", 64, _pp("packed", 64, 64, 1, 1), shape=QWEN25_32B),
    Row("packed", 64, _pp("packed", 64, 128, 1, 1), weight_min=LARGE),
    Row("packed", 128, _pp("packed", 128, 128, 1, 2), shape=QWEN25_14B),
    Row("packed", 96, _pp("packed", 64, 192, 1, 1), weight_min=LARGE),
    Row("packed", 128, _pp("packed", 128, 96, 1, 1), shape=QWEN25_7B),
    Row("packed", 128, _pp("packed", 64, 128, 1, 1), weight_min=LARGE),
    Row("packed", 192, _pp("packed", 64, 192, 1, 1), shape=QWEN25_72B),
    # 128 < M <= 160 on 7B and 14B (entry 46): 64x128 along M, +3-5 % and +12-14 % over 64x192
    Row("packed", 160, _pp("packed", 64, 128, 1, 1, raster=1), shape=QWEN25_7B),
    Row("packed", 160, _pp("packed", 64, 128, 1, 1, raster=1), shape=QWEN25_14B),
    Row("packed", 160, _pp("packed", 64, 192, 1, 1), weight_min=LARGE),
    Row("packed", 192, _pp("packed", 64, 128, 1, 1), weight_min=LARGE),
    Row("packed", 256, _pp("packed", 128, 128, 2, 1), shape=QWEN25_32B),
    Row("packed", 256, _pp("packed", 128, 128, 2, 1), shape=QWEN25_72B),
    Row("packed", 256, _pp("packed", 128, 192, 2, 1), shape=QWEN25_7B),
    Row("packed", 256, _pp("packed", 128, 160, 2, 1), shape=QWEN25_14B),
    Row("packed", 256, _pp("packed", 64, 128, 1, 1), weight_min=LARGE),
    Row("packed", 192, _pp("packed", 64, 128, 1, 1), shape=QWEN25_3B),
    Row("packed", 256, _pp("packed", 128, 128, 2, 1), shape=QWEN25_3B),
    Row("packed", 192, _pp("packed", 64, 128, 1, 1), shape=QWEN25_1_5B),
    Row("packed", 256, _pp("packed", 128, 96, 1, 1), shape=QWEN25_1_5B),
    Row("packed", 352, _pp("packed", 64, 192, 1, 1), weight_min=LARGE),
    Row("packed", 384, _pp("packed", 128, 96, 1, 1), weight_min=LARGE),
    Row("packed", 320, _pp("packed", 64, 128, 1, 1), shape=QWEN25_1_5B),
    Row("packed", 384, _pp("packed", 128, 96, 1, 1), shape=QWEN25_1_5B),
    Row("packed", 384, _pp("packed", 64, 128, 1, 1)),
    # 384 < M <= 448 (entry 43, after entry 41): per shape
    Row("packed", 512, _pp("packed", 128, 96, 1, 1), shape=QWEN25_3B),
    Row("packed", 448, _pp("packed", 64, 192, 1, 1, raster=1), shape=QWEN25_7B),
    Row("packed", 448, _pp("packed", 64, 192, 1, 1, raster=1), shape=QWEN25_32B),
    Row("packed", 448, _pp("packed", 64, 192, 1, 1, raster=1), shape=QWEN25_72B),
    Row("packed", 448, _pp("packed", 64, 192, 1, 1), shape=QWEN25_14B),
    Row("packed", 512, _pp("packed", 128, 96, 1, 1, raster=1), shape=QWEN25_14B),
    Row("packed", 512, _pp("packed", 128, 192, 2, 1), shape=QWEN25_32B),
    Row("packed", 512, _pp("packed", 128, 192, 2, 1, raster=1), shape=QWEN25_7B),
    # Qwen2.5-1.5B after the two-MUFU epilogue (entry 55): 64x192 to 448, 128x192 2x1 to 512
    Row("packed", 448, _pp("packed", 64, 192, 1, 1), shape=QWEN25_1_5B),
    Row("packed", 448, _pp("packed", 64, 128, 1, 1, raster=1), weight_max=SMALL),
    Row("packed", 512, _pp("packed", 128, 192, 2, 1), shape=QWEN25_1_5B),
    Row("packed", 512, _pp("packed", 64, 128, 1, 1, raster=1), weight_max=SMALL),
    Row("packed", 512, _pp("packed", 128, 128, 2, 1)),
    # 576 < M <= 640 (entry 43): five 128-token tiles, the last more than half full; 128x96 up to 14B
    *(Row("packed", 640, _pp("packed", 128, 96, 1, 1), shape=s) for s in _UP_TO_14B),
    # 640 < M <= 896 on 0.5B and 1.5B (entry 46; token counts the tail rule leaves to the rows)
    *(Row("packed", 896, _pp("packed", 128, 96, 1, 1, raster=1), shape=s) for s in (QWEN25_0_5B, QWEN25_1_5B)),
    Row("packed", 2048, _pp("packed", 128, 160, 2, 1), shape=QWEN25_14B),
    Row("packed", 2048, _pp("packed", 128, 128, 2, 1)),
    Row("packed", None, _pp("packed", 128, 192, 2, 1, raster=2, swizzle=8), shape=QWEN25_14B),
    Row("packed", None, _pp("packed", 128, 192, 2, 1, raster=2, swizzle=8), shape=QWEN25_32B),
    Row("packed", None, _pp("packed", 128, 128, 1, 2, raster=1, swizzle=2), weight_min=LARGE),
    Row("packed", None, _pp("packed", 128, 128, 1, 2, raster=1, swizzle=2), weight_max=SMALL),
    Row("packed", None, _pp("packed", 128, 128, 1, 2)),
    Row("dual", 16, _pp("dual", 128, 16, 1, 1, swap_ab=True)),
    Row("dual", 32, _pp("dual", 128, 16, 1, 1, swap_ab=True), weight_min=SMALL),
    Row("dual", 128, _pp("dual", 64, 64, 1, 1), shape=QWEN25_1_5B),
    Row("dual", 64, _pp("dual", 64, 64, 1, 1), shape=QWEN25_3B),
    # 32 < M <= 256 (entry 32), as for packed; dual 64x192 lost there (entry 11), so 128x128 1x2 at 64 < M <= 80
    Row("dual", 64, _pp("dual", 64, 64, 1, 1), shape=QWEN25_7B),
    Row("dual", 64, _pp("dual", 64, 64, 1, 1), shape=QWEN25_32B),
    Row("dual", 64, _pp("dual", 64, 128, 1, 1), weight_min=LARGE),
    Row("dual", 128, _pp("dual", 128, 128, 1, 2), shape=QWEN25_14B),
    Row("dual", 80, _pp("dual", 128, 128, 1, 2), weight_min=LARGE),
    Row("dual", 128, _pp("dual", 128, 96, 1, 1), shape=QWEN25_7B),
    Row("dual", 192, _pp("dual", 64, 128, 1, 1), weight_min=LARGE),
    Row("dual", 256, _pp("dual", 128, 128, 2, 1), shape=QWEN25_32B),
    Row("dual", 256, _pp("dual", 128, 128, 2, 1), shape=QWEN25_72B),
    Row("dual", 256, _pp("dual", 128, 96, 1, 1, raster=1), shape=QWEN25_7B),  # entry 46
    Row("dual", 256, _pp("dual", 128, 160, 2, 1), shape=QWEN25_14B),
    Row("dual", 192, _pp("dual", 64, 128, 1, 1), shape=QWEN25_3B),
    Row("dual", 256, _pp("dual", 128, 96, 1, 1, raster=1), shape=QWEN25_3B),  # entry 46
    Row("dual", 192, _pp("dual", 64, 128, 1, 1), shape=QWEN25_1_5B),
    Row("dual", 256, _pp("dual", 128, 96, 1, 1), shape=QWEN25_1_5B),
    # 256 < M <= 320 (entry 42, after entry 41 removed the partial tile's extra cost): per shape
    Row("dual", 320, _pp("dual", 64, 192, 1, 1, raster=1), shape=QWEN25_72B),
    Row("dual", 320, _pp("dual", 64, 192, 1, 1, raster=1), shape=QWEN25_32B),
    Row("dual", 320, _pp("dual", 128, 96, 1, 1), shape=QWEN25_7B),
    Row("dual", 320, _pp("dual", 64, 128, 1, 1), weight_min=LARGE),
    Row("dual", 384, _pp("dual", 128, 96, 1, 1), weight_min=LARGE),
    Row("dual", 320, _pp("dual", 64, 128, 1, 1), shape=QWEN25_1_5B),
    Row("dual", 384, _pp("dual", 128, 96, 1, 1), shape=QWEN25_1_5B),
    Row("dual", 384, _pp("dual", 64, 128, 1, 1)),
    # 384 < M <= 448 (entry 43, after entry 41): per shape; 14B and 1.5B from entry 46
    Row("dual", 448, _pp("dual", 128, 96, 1, 1), shape=QWEN25_3B),
    Row("dual", 448, _pp("dual", 64, 192, 1, 1, raster=1), shape=QWEN25_14B),
    Row("dual", 448, _pp("dual", 128, 96, 1, 1, raster=1), shape=QWEN25_1_5B),
    Row("dual", 448, _pp("dual", 64, 192, 1, 1, raster=1), shape=QWEN25_32B),
    Row("dual", 448, _pp("dual", 64, 128, 1, 1, raster=1), weight_max=SMALL),
    Row("dual", 448, _pp("dual", 128, 128, 2, 1)),
    Row("dual", 512, _pp("dual", 128, 96, 1, 1), shape=QWEN25_1_5B),
    Row("dual", 512, _pp("dual", 128, 96, 1, 1), shape=QWEN25_3B),
    Row("dual", 512, _pp("dual", 128, 96, 1, 1), shape=QWEN25_14B),
    Row("dual", 512, _pp("dual", 128, 96, 1, 1, raster=1), shape=QWEN25_32B),
    Row("dual", 512, _pp("dual", 64, 128, 1, 1, raster=1), weight_max=SMALL),
    Row("dual", 512, _pp("dual", 128, 128, 2, 1)),
    # 512 < M <= 896 on 0.5B, 1.5B and 3B (entry 46): 128x96 along M, at the token counts the tail rule
    # leaves to the rows (577-640, 705-768, 833-896); the tail rule's counts take the same tile there
    *(Row("dual", 896, _pp("dual", 128, 96, 1, 1, raster=1), shape=s) for s in SMALL_QWEN25),
    # 576 < M <= 640 (entry 43), as for packed; on 0.5B-3B the entry-46 rows above serve it
    *(Row("dual", 640, _pp("dual", 128, 96, 1, 1), shape=s) for s in (QWEN25_7B, QWEN25_14B)),
    Row("dual", 2048, _pp("dual", 128, 160, 2, 1), shape=QWEN25_14B),
    Row("dual", 2048, _pp("dual", 128, 128, 1, 2)),
    Row("dual", None, _pp("dual", 128, 128, 2, 1, raster=2, swizzle=8), weight_min=LARGE),
    Row("dual", None, _pp("dual", 128, 128, 1, 2)),
    # accumulation="promoted" (perf-notes entry 7; sweeps of 64x128 Pingpong and 128x192 / 128x128
    # Cooperative, rasters 0:1, 1:1, 2:8): 64x128 Pingpong at M <= 512 and on weights below LARGE;
    # Cooperative above (a warpgroup's accumulators and partial sums must fit its 232 registers, so
    # no 128-row Pingpong tile), rasterised along N with swizzle 8 at M > 2048.
    # decode sizes as with fast accumulation: the swap-AB tiles, whose 16 accumulators per thread leave
    # room for 16 partial sums (entry 59)
    Row("packed", 16, _pp("packed", 128, 16, 1, 1, promote=PROMOTE, swap_ab=True)),
    Row("packed", 32, _pp("packed", 128, 16, 1, 1, promote=PROMOTE, swap_ab=True), weight_min=SMALL),
    Row("packed", 512, _pp("packed", 64, 128, 1, 1, promote=PROMOTE)),
    Row("packed", None, _pp("packed", 64, 128, 1, 1, promote=PROMOTE), weight_max=LARGE),
    Row("packed", 2048, _co("packed", 128, 192, 2, 1, promote=PROMOTE)),
    Row("packed", None, _co("packed", 128, 192, 2, 1, raster=2, swizzle=8, promote=PROMOTE)),
    Row("packed", None, _co("packed", 128, 192, 2, 1, promote=PROMOTE)),  # where swizzle 8 pads (entry 38)
    Row("dual", 16, _pp("dual", 128, 16, 1, 1, promote=PROMOTE, swap_ab=True)),
    Row("dual", 32, _pp("dual", 128, 16, 1, 1, promote=PROMOTE, swap_ab=True), weight_min=SMALL),
    Row("dual", 512, _pp("dual", 64, 128, 1, 1, promote=PROMOTE)),
    Row("dual", None, _pp("dual", 64, 128, 1, 1, promote=PROMOTE), weight_max=LARGE),
    Row("dual", 2048, _co("dual", 128, 128, 2, 1, promote=PROMOTE)),
    Row("dual", None, _co("dual", 128, 128, 2, 1, raster=2, swizzle=8, promote=PROMOTE)),
    Row("dual", None, _co("dual", 128, 128, 2, 1, promote=PROMOTE)),  # where swizzle 8 pads (entry 38)
]


@dataclass(frozen=True)
class Choice:
    """What to launch: the library config name and its launch parameters."""

    name: str
    raster: int = 0
    swizzle: int = 1


def is_promoted(name: str) -> bool:
    """Whether a library config name uses promoted (two-level) accumulation."""
    return "_promote" in name


# Shapes outside MEASURED_SHAPES (perf-notes entry 35). The general rows were chosen on the seven
# Qwen2.5 shapes. On 13 other SwiGLU shapes (Llama 2 / 3.x, Qwen3, Mistral-Nemo, Yi, DeepSeek), timed
# against them rep by rep (3 rounds of 30), two rules replace them in the ranges where they won:
#   32 < M <= 64: 64x64, twice the CTAs of 64x128 streaming the weights: +3-6 % on average, at worst
#     6 % slower (DeepSeek-67B's shape), at best 15 % faster.
#   192 < M <= 256 and 384 < M <= 1024: the 128-token tile whose count wastes the least SM time in its
#     last wave (the lever of entries 11 and 27): fewest rounds x tile width among WAVE_CANDIDATES.
#     +28 % on average at M = 200 (the rows' 64-token tiles leave the fourth one 1/8 full), +5 % at 256,
#     +1.4-2.1 % at 512-1024, with at worst 8 % lost (one cell at M = 768). Not at 256 < M <= 384 (-0.7 %
#     on average at M = 384, -11 % at worst) nor above 1024 (within +-0.2 % on average).
NUM_SMS = 132  # H100 SXM and H200; the wave rule counts rounds of this many CTAs
WAVE_M = ((192, 256), (384, 1024))  # the wave rule serves lo < M <= hi (except where tail_config applies)
# Speed per multiply-add relative to the 128-, 160- and 192-wide tiles: 128x96 runs 0.79-0.86x
# cuBLAS at M = 2048 where those run 1.01-1.06x (entry 27).
WAVE_EFFICIENCY = {96: 0.85}
WAVE_CANDIDATES = {
    kernel: tuple(
        _pp(kernel, 128, tile_n, cm, cn)
        for tile_n, cm, cn in ((96, 1, 1), (128, 2, 1), (128, 1, 2), (160, 2, 1), (192, 2, 1))
        if not (kernel == "dual" and tile_n == 192)  # dual 128x192 spills registers (entry 27)
    )
    for kernel in KERNELS
}


def _check_sizes(**sizes: int) -> None:
    """Each keyword's value is an int >= 0 (num_sms: >= 1).

    Raises:
        TypeError: a value that is not an int (bool included). ValueError: one below its minimum.
    """
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int; got {value!r}")
        if value < (1 if name == "num_sms" else 0):
            raise ValueError(f"{name} must be >= {1 if name == 'num_sms' else 0}; got {value}")


def wave_cost(config: KernelConfig, M: int, N: int, num_sms: int = NUM_SMS) -> float:
    """Rounds of CTAs times tile width over relative speed: the wave rule's cost of ``config`` for M
    tokens and N = I (tiles of 2N accumulator columns). Lower is faster.

    Raises:
        TypeError, ValueError: M, N not ints >= 0 or num_sms not an int >= 1.
    """
    _check_sizes(M=M, N=N, num_sms=num_sms)
    return _wave_cost(config, M, N, num_sms)


def _wave_cost(config: KernelConfig, M: int, N: int, num_sms: int) -> float:
    tiles = -(-M // config.tile_m) * -(-2 * N // config.tile_n)
    return -(-tiles // num_sms) * config.tile_n / WAVE_EFFICIENCY.get(config.tile_n, 1.0)


def wave_config(kernel: str, M: int, N: int, K: int, num_sms: int = NUM_SMS) -> KernelConfig | None:
    """The config for a shape outside :data:`MEASURED_SHAPES` with fast accumulation, or None where
    the table's general rows decide (M <= 32, 64 < M <= 192, 256 < M <= 384, M > 1024); where
    :func:`tail_config` applies, :func:`table_config` takes that instead. Among WAVE_CANDIDATES the
    lowest :func:`wave_cost`, the wider tile on a tie; a 2x1 cluster only with an even number of
    token tiles and the 1x2 cluster only with an odd one (Row docstring, entry 29).

    Raises:
        ValueError: unknown kernel; M, N, K not ints >= 0 or num_sms not an int >= 1 (TypeError for a
            non-int).
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got kernel={kernel!r}")
    _check_sizes(M=M, N=N, K=K, num_sms=num_sms)
    return _wave_config(kernel, M, N, num_sms)


def _wave_config(kernel: str, M: int, N: int, num_sms: int) -> KernelConfig | None:
    if 32 < M <= 64:
        return _pp(kernel, 64, 64, 1, 1)
    if not any(lo < M <= hi for lo, hi in WAVE_M):
        return None
    best = None
    for config in WAVE_CANDIDATES[kernel]:
        odd = -(-M // config.tile_m) % 2 == 1
        if not token_tiles_fill_clusters(config, M) or (config.cluster_n == 2 and not odd):
            continue
        key = (_wave_cost(config, M, N, num_sms), -config.tile_n)
        if best is None or key < best[0]:
            best = (key, config)
    return best[1]


# Token counts whose last 128-token tile would be at most half full (perf-notes entry 39): at
# 512 < M <= 1152 (T = 5 to 9 token tiles of 128) with M mod 128 in 1..64, 64-token tiles of 192
# columns (cluster 1x1, rasterised along M) run 2T - 1 64-row tiles instead of T 128-row ones, the last
# of which would be at least half empty. In an A/B on 20 shapes (the 7 Qwen2.5 ones and 13 Llama /
# Qwen3 / Mistral / Yi / DeepSeek ones) at the 20 such token counts of the run, against the previous
# choice and timed rep by rep: +9.1 % (packed) and +8.1 % (dual) in geometric mean, +4-13 % per
# token-tile count, at worst -15 % (packed) / -8 % (dual) in a single cell. The packed kernel at
# K >= 8192 lost 3-7 % beyond M = 768, so there it stops at 768. At T = 10 the dual kernel no longer
# gained (-0.3 % over its 80 cells); both kernels stop at 1152.
TAIL_M = (512, 1152)  # the rule serves lo < M <= hi
TAIL_PACKED_LONG_K = 8192  # from this K on, the packed kernel takes the rule only up to M = 768
TAIL_PACKED_LONG_K_M_MAX = 768
TAIL_CONFIGS = {kernel: _pp(kernel, 64, 192, 1, 1, raster=1) for kernel in KERNELS}
# Perf-notes entry 46, after entry 41 made a partial last 128-token tile cost no more than a whole one:
# on the measured shapes below LARGE (0.5B, 1.5B, 3B) Kernel-1 runs these token counts faster on
# 128x96 tiles along M: +1-20 % per cell over 64x192 at 20 such counts (geometric mean +2.6-11 % per
# shape). Other shapes below LARGE were not measured again and keep 64x192.
TAIL_SMALL_DUAL = _pp("dual", 128, 96, 1, 1, raster=1)


def tail_config(kernel: str, M: int, N: int, K: int) -> KernelConfig | None:
    """The config for M tokens whose last 128-token tile would be at most half full (see
    :data:`TAIL_M`), with fast accumulation, for N = I and K = H: 64x192 Pingpong, cluster 1x1,
    rasterised along M (Kernel-1 on the small Qwen2.5 shapes: 128x96 along M,
    :data:`TAIL_SMALL_DUAL`); None where the rule does not apply.

    Raises:
        ValueError: unknown kernel; M, N or K below 0. TypeError: M, N or K not an int.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got kernel={kernel!r}")
    _check_sizes(M=M, N=N, K=K)
    return _tail_config(kernel, M, N, K)


def _tail_config(kernel: str, M: int, N: int, K: int) -> KernelConfig | None:
    lo, hi = TAIL_M
    if not lo < M <= hi or not 1 <= M % 128 <= 64:
        return None
    if kernel == "packed" and K >= TAIL_PACKED_LONG_K and M > TAIL_PACKED_LONG_K_M_MAX:
        return None
    if kernel == "dual" and (N, K) in SMALL_QWEN25:
        return TAIL_SMALL_DUAL
    return TAIL_CONFIGS[kernel]


def choosable_configs() -> frozenset[KernelConfig]:
    """Every config that :func:`table_config` can return (TABLE rows, the wave rule's and the tail
    rule's), with raster 0 and swizzle 1: the kernel library must compile each of them."""
    rules = [c for cs in WAVE_CANDIDATES.values() for c in cs]
    rules += [_pp(k, 64, 64, 1, 1) for k in KERNELS] + list(TAIL_CONFIGS.values()) + [TAIL_SMALL_DUAL]
    return frozenset(dataclasses.replace(c, raster=0, swizzle=1) for c in [r.config for r in TABLE] + rules)


def table_config(
    kernel: str, M: int, N: int, K: int, accumulation: str = "fast", num_sms: int = NUM_SMS
) -> KernelConfig:
    """The table's config for a problem (M tokens, N = I, K = H) on a GPU of ``num_sms`` SMs,
    ignoring availability: for fast accumulation, :func:`tail_config` where it applies, then, on a
    shape outside :data:`MEASURED_SHAPES`, :func:`wave_config` where it decides; else the first
    matching :data:`TABLE` row.

    Raises:
        ValueError: unknown kernel or accumulation, M, N or K below 0, num_sms below 1, or no row
            matches. TypeError: M, N, K or num_sms not an int.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got kernel={kernel!r}")
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    _check_sizes(M=M, N=N, K=K, num_sms=num_sms)
    if accumulation == "fast":
        config = _tail_config(kernel, M, N, K)
        if config is None and (N, K) not in MEASURED_SHAPES:
            config = _wave_config(kernel, M, N, num_sms)
        if config is not None:
            return config
    return row_config(kernel, M, N, K, accumulation)


def row_config(kernel: str, M: int, N: int, K: int, accumulation: str = "fast") -> KernelConfig:
    """The first :data:`TABLE` row matching the problem (no tail or wave rule).

    Raises:
        ValueError: no row matches.
    """
    for row in TABLE:
        if row.matches(kernel, M, N, K, accumulation):
            return row.config
    raise ValueError(
        f"no row of configs.TABLE matches kernel={kernel!r} M={M} N={N} K={K} accumulation={accumulation!r}"
    )


def select(
    kernel: str,
    M: int,
    N: int,
    K: int,
    dtype: torch.dtype,
    available: frozenset[str] | None = None,
    accumulation: str = "fast",
    num_sms: int = NUM_SMS,
) -> Choice:
    """Choose the config for one problem on a GPU of ``num_sms`` SMs.

    Order: the first ``FUSED_SWIGLU_CONFIG`` name that is in ``available`` (default: the loaded
    library's configs) and is of this kernel, dtype and accumulation (launched with the table's
    rasterisation and swizzle if it is the table's own choice, else the defaults); else
    :func:`table_config`'s choice (tail rule, wave rule, then the first matching :data:`TABLE` row). Override names that are not in ``available`` are ignored with one
    warning each. If the table's name is not in ``available``, any available config of the same
    kernel, dtype and accumulation is used instead, with one warning.

    Args:
        kernel: "packed" or "dual". M: tokens; N: intermediate size I; K: hidden size H.
        dtype: torch.bfloat16 or torch.float16.
        available: config names to choose from (any iterable of str; None: every config the core
            library lists, which loads it and, on first use, builds it: see the README's "Building").
        accumulation: "fast" or "promoted" (see :data:`ACCUMULATIONS`).
        num_sms: the GPU's SM count (the wave rule's rounds of CTAs; default: the H100 SXM's and
            H200's 132).

    Raises:
        ValueError: unknown kernel or accumulation, M, N or K below 0, num_sms below 1. TypeError:
            unsupported dtype, or M, N, K or num_sms not an int.
        UnsupportedError: no available config of this kernel, dtype and accumulation.
    """
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    _check_sizes(M=M, N=N, K=K, num_sms=num_sms)
    if available is not None:
        available = frozenset(available)
    else:
        from . import _lib

        available = _lib.config_names()
    return _select(kernel, M, N, K, dtype, tuple(env.config_override()), available, accumulation, num_sms)


def _names_kernel(name: str, kernel: str, suffix: str) -> bool:
    """``name`` is a config of ``kernel`` ("packed" or "dual", swap-AB forms included) for the dtype
    whose name suffix is ``suffix`` ("_bf16" or "_fp16")."""
    return name.startswith(kernel + "_") and name.endswith(suffix)


@functools.lru_cache(maxsize=4096)
def _select(kernel, M, N, K, dtype, overrides, available, accumulation, num_sms) -> Choice:
    suffix = "_" + DTYPE_SUFFIX.get(dtype, "?")
    if suffix == "_?":
        raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
    promoted = accumulation == "promoted"

    def fits(n: str) -> bool:
        return _names_kernel(n, kernel, suffix) and is_promoted(n) == promoted

    cfg = table_config(kernel, M, N, K, accumulation, num_sms)
    table_name = cfg.name(dtype)
    for n in overrides:
        if n not in available:
            warn_once(
                f"override:{n}",
                f"fused_swiglu: FUSED_SWIGLU_CONFIG names {n!r}, which is not a config of the kernel "
                f"library; it is ignored (available: {', '.join(sorted(available)) or 'none'}).",
            )
    wanted = [n for n in overrides if n in available and fits(n)]
    if wanted:
        name = wanted[0]
        # the table's launch parameters stay with its config; another config runs with the defaults
        raster, swizzle = (cfg.raster, cfg.swizzle) if name == table_name else (0, 1)
        return Choice(name, raster, swizzle)
    if table_name in available:
        return Choice(table_name, cfg.raster, cfg.swizzle)
    same_kind = sorted(n for n in available if fits(n))
    if not same_kind:
        raise UnsupportedError(
            f"the kernel library has no {kernel} config for {DTYPE_SUFFIX[dtype]} with "
            f"accumulation={accumulation!r}; available: {', '.join(sorted(available)) or 'none'}"
        )
    warn_once(
        f"config:{table_name}",
        f"fused_swiglu: config {table_name} is not in the kernel library; using {same_kind[0]} instead.",
    )
    return Choice(same_kind[0])


# The ops' ``config`` argument: a library config name, or one of these keys for the table's choice.
AUTO_CONFIG = {"": "fast", "promoted": "promoted"}


def resolve(
    kernel: str, config: str, M: int, N: int, K: int, dtype: torch.dtype, num_sms: int = NUM_SMS
) -> Choice:
    """The ops' ``config`` argument to a launch on a GPU of ``num_sms`` SMs: ``""`` = the table's
    choice with fast accumulation, ``"promoted"`` = the table's choice with promoted accumulation,
    else a config name as is.

    Raises:
        ValueError: a config name of the other kernel (a packed config reads 2I weight rows, a dual
            config two I-row weights), or of another dtype.
    """
    check_config(kernel, config, dtype)
    if config in AUTO_CONFIG:
        return select(kernel, M, N, K, dtype, accumulation=AUTO_CONFIG[config], num_sms=num_sms)
    return Choice(config)


def check_config(kernel: str, config: str, dtype: torch.dtype) -> None:
    """Raise ValueError unless ``config`` is ``""``, ``"promoted"`` or a name of a ``kernel`` config
    for ``dtype`` (the ops' ``config`` argument; see :func:`resolve`)."""
    if config in AUTO_CONFIG:
        return
    suffix = "_" + DTYPE_SUFFIX.get(dtype, "?")
    if not isinstance(config, str) or not _names_kernel(config, kernel, suffix):
        raise ValueError(
            f"config must name a {kernel} kernel for {dtype} (a name starting with {kernel + '_'!r} and "
            f"ending with {suffix!r}), '' or 'promoted'; got config={config!r}"
        )
