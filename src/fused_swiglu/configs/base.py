"""What a kernel configuration is: the 16-bit kernels' names, accumulations and dtypes, one compiled config
(:class:`KernelConfig`), the catalog of them, and what a choice launches (:class:`Choice`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from .. import catalog

KERNELS = ("packed", "dual")
# "fast": GMMA accumulates all of K in its fp32 accumulators. "promoted": GMMA accumulates PROMOTE
# k-tiles at a time and each partial sum is added into a second fp32 accumulator.
ACCUMULATIONS = ("fast", "promoted")
PROMOTE = 4
DTYPE_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "fp16"}
DTYPE_OF_SUFFIX = {suffix: dtype for dtype, suffix in DTYPE_SUFFIX.items()}  # "bf16" -> torch.bfloat16
NUM_SMS = 132  # H100 SXM and H200: the default where no device is named


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
    swap_ab: the GEMM takes the weights as GMMA's A operand and the tokens as B (decode sizes).
    paired: the dual kernel with its weights' rows paired by 8 in shared memory (``dual_paired``).
    """

    kernel: Literal["packed", "dual"]
    schedule: Literal["pingpong", "cooperative"]
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    raster: Literal[0, 1, 2] = 0
    swizzle: Literal[1, 2, 4, 8] = 1
    promote: int = 0
    swap_ab: bool = False
    paired: bool = False

    @property
    def base_name(self) -> str:
        """The config name without its dtype suffix (the tuned data's key)."""
        return (
            f"{self.kernel}{'_swapab' if self.swap_ab else ''}{'_paired' if self.paired else ''}_{self.schedule}_{self.tile_m}x{self.tile_n}x{self.tile_k}_"
            f"{self.cluster_m}x{self.cluster_n}{f'_promote{self.promote}' if self.promote else ''}"
        )

    @property
    def accumulation(self) -> str:
        return "promoted" if self.promote else "fast"

    def name(self, dtype: torch.dtype) -> str:
        """The library's config name for ``dtype`` (torch.bfloat16 or torch.float16).

        Raises:
            TypeError: other dtype.
        """
        if dtype not in DTYPE_SUFFIX:
            raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
        return f"{self.base_name}_{DTYPE_SUFFIX[dtype]}"


def config_of_entry(entry: tuple) -> KernelConfig:
    """The config of a catalog entry ``(kernel, schedule, tile_m, tile_n, tile_k, cluster_m, cluster_n, promote)``
    (raster 0, swizzle 1)."""
    kernel, schedule, tile_m, tile_n, tile_k, cluster_m, cluster_n, promote = entry
    swap_ab = kernel.endswith("_swapab")
    paired = kernel.endswith("_paired")
    return KernelConfig(kernel.removesuffix("_swapab").removesuffix("_paired"), schedule, tile_m, tile_n, tile_k,
                        cluster_m, cluster_n, promote=promote, swap_ab=swap_ab, paired=paired)


# Every compiled config (raster 0, swizzle 1), in catalog order: the candidates of every choice.
CATALOG: tuple[KernelConfig, ...] = tuple(config_of_entry(e) for e in catalog.CONFIGS)
# The compiled configs reached by name only (the paired dual kernel): never a candidate of the choice; tuned
# data may name them once measured.
NAMED_ONLY: tuple[KernelConfig, ...] = tuple(config_of_entry(e) for e in catalog.DUAL_PAIRED_CONFIGS)
BY_BASE_NAME: dict[str, KernelConfig] = {c.base_name: c for c in CATALOG + NAMED_ONLY}


def candidates(kernel: str, accumulation: str) -> tuple[KernelConfig, ...]:
    """The compiled configs of ``kernel`` ("packed"/"dual", swap-AB forms included) and accumulation."""
    return tuple(c for c in CATALOG if c.kernel == kernel and c.accumulation == accumulation)


@dataclass(frozen=True)
class Choice:
    """What to launch: the library config name and its launch parameters."""

    name: str
    raster: int = 0
    swizzle: int = 1


def is_promoted(name: str) -> bool:
    """Whether a library config name uses promoted (two-level) accumulation."""
    return "_promote" in name


# The ops' ``config`` argument: a library config name, or one of these keys for the automatic choice.
AUTO_CONFIG = {"": "fast", "promoted": "promoted"}
