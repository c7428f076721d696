"""SwiGLU over the routed experts of a mixture-of-experts layer: the gate/up projection of every expert and
SwiGLU in one grouped kernel, for serving engines and transformers' experts.

:func:`grouped_swiglu` takes the routed tokens sorted by expert with the ``torch._grouped_mm`` convention
(int32 end offsets per expert) and the experts' weights as transformers stores them (``gate_up_proj``
``(E, 2I, H)``, read in place). It lays the rows out for the kernel (:func:`grouped_layout`: each expert's rows
padded to whole token tiles of 16, 64 or 128 rows, chosen by the routed rows per expert; the expert of every
tile), runs the operator ``fused_swiglu::swiglu_grouped`` (:mod:`fused_swiglu.grouped_ops`) and takes the
padding out again. Every step
runs on the tensors' device with torch operations of sizes fixed by ``T`` and ``E``: nothing waits for the
GPU, so a CUDA graph captures the call and replays it under new routing, and ``torch.compile(fullgraph=True)``
traces it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import configs, grouped_ops
from .grouped_ops import TOKEN_TILE

__all__ = ["GroupedLayout", "TOKEN_TILE", "grouped_layout", "grouped_swiglu", "layout_tile", "padded_rows"]


def padded_rows(tokens: int, experts: int, tile: int = TOKEN_TILE) -> int:
    """T_pad: the rows of the padded layout of ``tokens`` routed rows over ``experts`` experts, each expert's
    rows padded to a multiple of ``tile``: the worst case ``tokens + (tile - 1) * min(experts, tokens)``
    rounded up to ``tile`` (so that it depends on the sizes alone, never on the routing; the C side's
    ``fsw_moe_padded_rows``, csrc/include/fused_swiglu/moe_layout.h)."""
    rows = tokens + (tile - 1) * min(experts, tokens)
    return (rows + tile - 1) // tile * tile


class GroupedLayout(NamedTuple):
    """Where the routed rows go in the kernel's padded layout (:func:`grouped_layout`); all on the offsets'
    device.

    source: ``(T_pad,)`` int64, the routed row each padded row copies (0 where ``valid`` is False).
    valid: ``(T_pad,)`` bool, whether a padded row holds a routed row (False: padding, to be zero).
    tile_expert: ``(T_pad / tile,)`` int32, the expert of each tile of ``tile`` padded rows; E for the tiles
        past the last expert's.
    dest: ``(T,)`` int64, the padded row of each routed row (0 for a row past ``expert_offsets[-1]``).
    routed: ``(T,)`` bool, whether a routed row belongs to an expert (is before ``expert_offsets[-1]``).
    padded_offsets: ``(E,)`` int32, the end row of each expert's tiles in the padded layout (the
        ``torch._grouped_mm`` convention over the padded rows: a grouped product of them stops at
        ``padded_offsets[-1]``, the first row of the tiles past the last expert's).
    """

    source: Tensor
    valid: Tensor
    tile_expert: Tensor
    dest: Tensor
    routed: Tensor
    padded_offsets: Tensor


def grouped_layout(expert_offsets: Tensor, tokens: int, tile: int = TOKEN_TILE) -> GroupedLayout:
    """The padded layout of ``tokens`` routed rows sorted by expert, with the ``torch._grouped_mm`` convention:
    expert e owns rows ``[expert_offsets[e - 1], expert_offsets[e])`` (``expert_offsets[-1]`` = 0). In the
    layout, expert e's rows start at a multiple of ``tile``, in expert order, each expert taking
    ``ceil(count_e / tile)`` whole tiles (an expert without rows takes none), and T_pad =
    :func:`padded_rows` (tokens, E) rows in all; the tiles past the last expert's get the expert E.

    Computed on the offsets' device with fixed-size torch operations (no host synchronisation).

    Args:
        expert_offsets: ``(E,)`` int32 or int64, non-decreasing, ``expert_offsets[-1] <= tokens``. Other
            values give a wrong layout, never an index out of bounds.
        tokens: T, the routed rows (>= 0).
        tile: rows per tile: a grouped config's token tile (:data:`fused_swiglu.configs.grouped.GROUPED_TOKEN_TILES`;
            :func:`layout_tile` gives the one the choice runs) for the kernel; any tile >= 1 for other uses.

    Raises:
        TypeError: expert_offsets is not an integer tensor.
        ValueError: expert_offsets is not 1-D with at least one expert; tokens < 0; tile < 1.
    """
    if not isinstance(expert_offsets, Tensor) or expert_offsets.is_floating_point() or expert_offsets.is_complex() \
            or expert_offsets.dtype == torch.bool:
        raise TypeError(f"expert_offsets must be an integer tensor; got {getattr(expert_offsets, 'dtype', expert_offsets)!r}")
    if expert_offsets.dim() != 1 or expert_offsets.shape[0] < 1:
        raise ValueError(f"expert_offsets must be 1-D (E,) with E >= 1; got shape {tuple(expert_offsets.shape)}")
    if tokens < 0 or tile < 1:
        raise ValueError(f"tokens must be >= 0 and tile >= 1; got tokens={tokens}, tile={tile}")
    E, device = expert_offsets.shape[0], expert_offsets.device
    ends = expert_offsets.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    counts = (ends - starts).clamp_min(0)
    padded = (counts + (tile - 1)) // tile * tile
    padded_ends = torch.cumsum(padded, 0)
    padded_starts = padded_ends - padded
    T_pad = padded_rows(tokens, E, tile)
    tile_first_rows = torch.arange(0, T_pad, tile, device=device, dtype=torch.int64)
    tile_expert = torch.searchsorted(padded_ends, tile_first_rows, right=True)  # E past the last expert
    # padded row -> routed row
    rows = torch.arange(T_pad, device=device, dtype=torch.int64)
    row_expert = tile_expert[rows // tile]
    e = row_expert.clamp_max(E - 1)
    within = rows - padded_starts[e]
    valid = (row_expert < E) & (within < counts[e])
    source = torch.where(valid, starts[e] + within, 0).clamp(0, max(tokens - 1, 0))
    # routed row -> padded row
    routed_rows = torch.arange(tokens, device=device, dtype=torch.int64)
    routed_expert = torch.searchsorted(ends, routed_rows, right=True)
    routed = routed_expert < E
    e = routed_expert.clamp_max(E - 1)
    dest = torch.where(routed, padded_starts[e] + routed_rows - starts[e], 0).clamp(0, max(T_pad - 1, 0))
    return GroupedLayout(source, valid, tile_expert.to(torch.int32), dest, routed, padded_ends.to(torch.int32))


def layout_tile(rows: int, experts: int, config: str = "") -> int:
    """The token tile of the padded layout for ``rows`` routed rows over ``experts`` experts: a named grouped
    config's tile, for ``"promoted"`` the promoted configs' (:data:`fused_swiglu.configs.grouped.GROUPED_PROMOTED_TILE`),
    or for ``""`` the choice's by the mean rows per expert (:func:`fused_swiglu.configs.grouped.grouped_token_tile`)."""
    return configs.grouped.config_tile(config, configs.grouped.grouped_token_tile(rows, experts)[0])


def grouped_swiglu(x_sorted: Tensor, gate_up_proj: Tensor, expert_offsets: Tensor, *, config: str = "") -> Tensor:
    """``y[r] = silu(x_sorted[r] W_gate[e]^T) * (x_sorted[r] W_up[e]^T)`` for every routed row r, e the expert
    that owns it, with ``W_gate[e] = gate_up_proj[e, :I]`` and ``W_up[e] = gate_up_proj[e, I:]``.

    Args:
        x_sorted: ``(T, H)``, the routed rows (token copies, one per (token, expert) pair) sorted by expert:
            expert e owns rows ``[expert_offsets[e - 1], expert_offsets[e])``. The grouping is the offsets':
            rows are not reordered (sort them by expert first, e.g. ``torch.sort`` of the routing's expert
            ids, stable). CUDA: torch.bfloat16 or torch.float16; CPU: any floating dtype of 16 bits or more.
        gate_up_proj: ``(E, 2I, H)`` of x_sorted's dtype and device, each expert's gate rows then its up rows
            (transformers' experts layout); read in place on CUDA, so unit stride along H, row and expert
            strides multiples of 8 elements and a 16-byte aligned start (any contiguous tensor).
        expert_offsets: ``(E,)`` int32 on x_sorted's device: cumulative end rows per expert (the
            ``torch._grouped_mm`` convention), non-decreasing, ``expert_offsets[-1] <= T``; rows from
            ``expert_offsets[-1]`` on belong to no expert and get zeros. Read on the device only.
        config: ``""`` (the choice, fast accumulation: :func:`fused_swiglu.configs.grouped.grouped_choice`),
            ``"promoted"`` (the choice, promoted accumulation, as :func:`fused_swiglu.swiglu`'s: a second fp32
            accumulator every 4 k-tiles; 16-row token tiles) or a grouped config name for x_sorted's dtype
            (:func:`fused_swiglu.catalog.grouped_names`), optionally with its launch ``@1:<S>``: its token tiles run
            in groups of S = 1, 2, 4 or 8 (:data:`fused_swiglu.configs.grouped.GROUPED_TOKEN_GROUP`; a name alone: 1).

    Returns:
        ``(T, I)`` in x_sorted's dtype, new and contiguous: fp32 accumulation and SwiGLU, one rounding (the
        CPU: fp32 PyTorch products, one rounding; float64 in float64).

    Raises:
        TypeError: an argument not a dense tensor; x_sorted not floating point (not bf16 / fp16 on CUDA);
            gate_up_proj not of x_sorted's dtype; expert_offsets not int32.
        ValueError: a rank or shape (gate_up_proj's H not x_sorted's, an odd row count per expert,
            expert_offsets not of E entries), a device, H or I not a multiple of 8 on CUDA, a config the
            choice refuses; on the CPU, offsets out of order or outside [0, T].
        RuntimeError: from the CUDA operator, a rule these checks leave to it (gate_up_proj's strides not
            readable in place by TMA), naming the argument.

    The offsets' order and range are checked in an eager call on the CPU (ValueError; not while torch.compile
    traces); on CUDA not (it would wait for the GPU): values outside the rules give wrong rows there, never a
    read or write out of bounds. Differentiable with respect to x_sorted and gate_up_proj (the backward
    recomputes the gate and up products).
    """
    E, _, _ = grouped_ops.check_weights(x_sorted, gate_up_proj, config, op="grouped_swiglu", x_name="x_sorted")
    grouped_ops.check_dense("grouped_swiglu", expert_offsets=expert_offsets)
    if expert_offsets.dtype != torch.int32:
        raise TypeError(f"grouped_swiglu: expert_offsets must be torch.int32 (the torch._grouped_mm convention); got "
                        f"expert_offsets.dtype={expert_offsets.dtype}")
    if tuple(expert_offsets.shape) != (E,):
        raise ValueError(f"grouped_swiglu: expert_offsets must be 1-D with one end offset per expert, ({E},); got shape "
                         f"{tuple(expert_offsets.shape)}")
    grouped_ops.check_like("grouped_swiglu", "x_sorted", x_sorted, same_dtype=False, expert_offsets=expert_offsets)
    T = x_sorted.shape[0]
    grouped_ops.check_offsets("grouped_swiglu", expert_offsets, T)
    layout = grouped_layout(expert_offsets, T, layout_tile(T, E, config))
    x_pad = x_sorted.index_select(0, layout.source)
    x_pad.masked_fill_(~layout.valid[:, None], 0)
    y_pad = grouped_ops.swiglu_grouped(x_pad, gate_up_proj, layout.tile_expert, config)
    y = y_pad.index_select(0, layout.dest)
    return y.masked_fill_(~layout.routed[:, None], 0)
