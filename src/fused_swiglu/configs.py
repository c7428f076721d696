"""Kernel configurations, the per-shape table and the heuristic that reads it.

A config name is the C library's: ``{kernel}_{schedule}_{tile_m}x{tile_n}x{tile_k}_{cluster_m}x{cluster_n}_{dtype}``,
e.g. ``packed_pingpong_128x192x64_2x1_bf16``. ``tile_n`` counts gate + up columns of a CTA tile.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import torch

from . import env
from ._validate import warn_once
from .errors import UnsupportedError

KERNELS = ("packed", "dual")
DTYPE_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class KernelConfig:
    """One kernel configuration (CUTLASS names: TileShape, ClusterShape, schedule).

    tile_m, tile_n, tile_k: CTA TileShape in elements (tile_n counts gate + up columns).
    cluster_m, cluster_n: ClusterShape in CTAs.
    raster: tile rasterisation, 0 heuristic, 1 along M, 2 along N (launch parameter, not in the name).
    swizzle: tile scheduler max swizzle, 1/2/4/8 (launch parameter, not in the name).
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

    def name(self, dtype: torch.dtype) -> str:
        """The library's config name for ``dtype`` (torch.bfloat16 or torch.float16).

        Raises:
            TypeError: other dtype.
        """
        if dtype not in DTYPE_SUFFIX:
            raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
        return (
            f"{self.kernel}_{self.schedule}_{self.tile_m}x{self.tile_n}x{self.tile_k}_"
            f"{self.cluster_m}x{self.cluster_n}_{DTYPE_SUFFIX[dtype]}"
        )


@dataclass(frozen=True)
class Row:
    """Table row: for ``kernel`` and M <= ``m_max`` (None: any M) use ``config``."""

    kernel: str
    m_max: int | None
    config: KernelConfig


def _rows(kernel: Literal["packed", "dual"]) -> list[Row]:
    return [
        # small M: a 64-row tile wastes less of the wgmma M dimension on padding rows
        Row(kernel, 128, KernelConfig(kernel, "pingpong", 64, 128, 64, 1, 1)),
        # large M: quack's sm90 default shape (128x192, cluster 2x1, pingpong)
        Row(kernel, None, KernelConfig(kernel, "pingpong", 128, 192, 64, 2, 1)),
    ]


# Rows are matched first to last; retune from measurements (docs/perf-notes.md).
TABLE: list[Row] = _rows("packed") + _rows("dual")


@dataclass(frozen=True)
class Choice:
    """What to launch: the library config name and its launch parameters."""

    name: str
    raster: int = 0
    swizzle: int = 1


def table_config(kernel: str, M: int, N: int, K: int) -> KernelConfig:
    """The table's config for a problem (M tokens, N = I, K = H), ignoring availability.

    Raises:
        ValueError: unknown kernel, or no row matches.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got kernel={kernel!r}")
    for row in TABLE:
        if row.kernel == kernel and (row.m_max is None or M <= row.m_max):
            return row.config
    raise ValueError(f"no row of configs.TABLE matches kernel={kernel!r} M={M} N={N} K={K}")


def _launch_params(name: str) -> tuple[int, int]:
    for row in TABLE:
        for dtype in DTYPE_SUFFIX:
            if row.config.name(dtype) == name:
                return row.config.raster, row.config.swizzle
    return 0, 1


def select(
    kernel: str,
    M: int,
    N: int,
    K: int,
    dtype: torch.dtype,
    available: frozenset[str] | None = None,
) -> Choice:
    """Choose the config for one problem.

    Order: a ``FUSED_SWIGLU_CONFIG`` name for this kernel and dtype; else the first matching
    :data:`TABLE` row. If the chosen name is not in ``available`` (default: the loaded library's
    configs), any available config of the same kernel and dtype is used instead, with one warning.

    Args:
        kernel: "packed" or "dual". M: tokens; N: intermediate size I; K: hidden size H.
        dtype: torch.bfloat16 or torch.float16.
        available: config names to choose from (None: ask the library, loading it).

    Raises:
        ValueError: unknown kernel. TypeError: unsupported dtype.
        UnsupportedError: no available config of this kernel and dtype.
    """
    if available is None:
        from . import _lib

        available = _lib.config_names()
    return _select(kernel, M, N, K, dtype, tuple(env.config_override()), available)


@functools.lru_cache(maxsize=4096)
def _select(kernel, M, N, K, dtype, overrides, available) -> Choice:
    suffix = "_" + DTYPE_SUFFIX.get(dtype, "?")
    if suffix == "_?":
        raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
    wanted = [n for n in overrides if n.startswith(kernel + "_") and n.endswith(suffix)]
    name = wanted[0] if wanted else table_config(kernel, M, N, K).name(dtype)
    if name in available:
        return Choice(name, *_launch_params(name))
    same_kind = sorted(n for n in available if n.startswith(kernel + "_") and n.endswith(suffix))
    if not same_kind:
        raise UnsupportedError(
            f"the kernel library has no {kernel} config for {DTYPE_SUFFIX[dtype]}; "
            f"available: {', '.join(sorted(available)) or 'none'}"
        )
    warn_once(
        f"config:{name}",
        f"fused_swiglu: config {name} is not in the kernel library; using {same_kind[0]} instead.",
    )
    return Choice(same_kind[0], *_launch_params(same_kind[0]))


def resolve(kernel: str, config: str, M: int, N: int, K: int, dtype: torch.dtype) -> Choice:
    """An explicit config name (non-empty ``config``) or the heuristic's choice."""
    if config:
        return Choice(config, *_launch_params(config))
    return select(kernel, M, N, K, dtype)
