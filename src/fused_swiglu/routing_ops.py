"""The routing operator (torch.library): the grouped kernels' padded layout of a top-k routing in one call.

``fused_swiglu::moe_layout(top_k_index, experts, tile, padded_rows) -> (source, tile_expert, pair_row,
padded_offsets, order, expert_offsets)``
    top_k_index ``(T, k)`` int64 or int32: the experts of each token; pair ``i = t k + j`` is token t's j-th
    expert. An id below 0 counts as expert 0, an id from ``experts`` on belongs to no expert. ``tile``: rows
    per token tile (a grouped config's, :func:`fused_swiglu.grouped.layout_tile`); ``padded_rows``: T_pad =
    :func:`fused_swiglu.grouped.padded_rows` ``(T k, experts, tile)``, the layout's rows for every routing.
    Expert e's pairs take rows ``[start_e, start_e + count_e)``, in pair order (a stable sort by expert), from
    ``start_e`` (a multiple of ``tile``: each expert ``ceil(count_e / tile)`` whole tiles, in expert order).
    Returns, all new and contiguous on top_k_index's device:

    - source ``(T_pad,)`` int64: the token of each row (``pair // k``); 0 for the padding rows of an expert's
      last tile and the rows past the last expert's tiles (they read token 0 and are never read back);
    - tile_expert ``(T_pad / tile,)`` int32: each tile's expert, ``experts`` past the last expert's tiles (the
      grouped operator's ``tile_expert``);
    - pair_row ``(T k,)`` int64: the row of each pair, in (token, slot) order; 0 for a pair of no expert;
    - padded_offsets ``(experts,)`` int32: the end row of each expert's tiles (``torch._grouped_mm``'s offsets
      over the layout's rows);
    - order ``(T k,)`` int64: the pairs ``t k + j`` in expert order, each expert's in pair order, then the pairs
      of no expert in pair order (:func:`sort_pairs`' order);
    - expert_offsets ``(experts,)`` int32: the end of each expert's pairs in that order (:func:`sort_pairs`'
      offsets).

It is :func:`fused_swiglu.experts.route_experts` followed by :func:`fused_swiglu.grouped.grouped_layout`, with
the rows named by token and pair instead of by sorted pair, and the sort's own result beside them. CUDA kernel: one launch (``csrc/capi/moe_layout.cu``,
through the operator library, no host synchronisation; at most 8192 experts). CPU kernel: those PyTorch
operations. Fake kernel: the shapes. Errors name the argument and the rule (TypeError / ValueError from the
CPU and fake kernels, RuntimeError from the CUDA kernel).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .grouped import grouped_layout, padded_rows
from .grouped_ops import check_dense, check_expert_ids
from .op_library import OPS_LIBRARY, cuda_kernels_from_library

OP = "fused_swiglu::moe_layout"
NAMES = ("moe_layout",)  # operators whose CUDA kernels are C++
MAX_EXPERTS = 8192  # the CUDA kernel's (include/fused_swiglu/moe_layout.h, FSW_MOE_LAYOUT_MAX_EXPERTS)
MAX_TILE = 1024
# The experts forward builds its layout with the CUDA kernel up to this many (token, expert) pairs, with
# layout_by_sorting past it. The kernel's blocks (at most one per SM) each place a chunk of the pairs, 1,024 at a
# time with 32 block barriers each, after reading every id once: its reads grow with pairs x blocks, about
# 128 MB of int64 ids at 131,072 pairs on 132 SMs. Past that the sort's ~40 kernels may be the cheaper; the bound
# itself is not measured (docs/perf-notes.md, entries 96 and 122).
KERNEL_MAX_PAIRS = 131072
INDEX_DTYPES = (torch.int64, torch.int32)
OPS_LIBRARY.define("moe_layout(Tensor top_k_index, int experts, int tile, int padded_rows) -> "
                   "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
cuda_kernels_from_library(*NAMES)

moe_layout = torch.ops.fused_swiglu.moe_layout.default


def check_arguments(top_k_index: Tensor, experts: int, tile: int, rows: int) -> tuple[int, int]:
    """The operator's rules, named in errors; returns ``(T, k)``.

    Raises:
        TypeError: top_k_index not a dense int64 / int32 tensor.
        ValueError: top_k_index not 2-D (T, k) with k >= 1; experts outside [1, 8192]; tile outside [1, 1024];
            padded_rows not :func:`fused_swiglu.grouped.padded_rows` ``(T k, experts, tile)``.
    """
    check_dense(OP, top_k_index=top_k_index)
    if top_k_index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{OP}: top_k_index must be torch.int64 or torch.int32; got top_k_index.dtype="
                        f"{top_k_index.dtype}")
    if top_k_index.dim() != 2 or top_k_index.shape[1] < 1:
        raise ValueError(f"{OP}: top_k_index must be 2-D (T, k) with k >= 1; got shape {tuple(top_k_index.shape)}")
    if not 1 <= experts <= MAX_EXPERTS:
        raise ValueError(f"{OP}: experts must be in [1, {MAX_EXPERTS}]; got {experts}")
    if not 1 <= tile <= MAX_TILE:
        raise ValueError(f"{OP}: tile must be in [1, {MAX_TILE}]; got {tile}")
    T, k = top_k_index.shape
    want = padded_rows(T * k, experts, tile)
    if rows != want:
        raise ValueError(f"{OP}: padded_rows must be fused_swiglu.grouped.padded_rows({T * k}, {experts}, {tile}) = "
                         f"{want}; got {rows}")
    return T, k


@torch.library.register_fake(OP)
def _moe_layout_fake(top_k_index, experts, tile, padded_rows):
    T, k = check_arguments(top_k_index, experts, tile, padded_rows)
    new = top_k_index.new_empty
    return (new((padded_rows,), dtype=torch.int64), new((padded_rows // tile,), dtype=torch.int32),
            new((T * k,), dtype=torch.int64), new((experts,), dtype=torch.int32), new((T * k,), dtype=torch.int64),
            new((experts,), dtype=torch.int32))


def _moe_layout_cpu(top_k_index, experts, tile, padded_rows):
    check_arguments(top_k_index, experts, tile, padded_rows)
    check_expert_ids(OP, top_k_index, experts, "the experts argument")
    return layout_by_sorting(top_k_index, experts, tile)


def uses_kernel(device: torch.device, pairs: int, experts: int) -> bool:
    """Whether the experts forward takes its layout from the CUDA kernel: a CUDA device, at most
    :data:`MAX_EXPERTS` experts and :data:`KERNEL_MAX_PAIRS` pairs; else from :func:`layout_by_sorting`."""
    return device.type == "cuda" and experts <= MAX_EXPERTS and pairs <= KERNEL_MAX_PAIRS


def layout(top_k_index: Tensor, experts: int, tile: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The operator's six outputs for the experts forward, from the CUDA kernel or the sort as
    :func:`uses_kernel` says (the same values either way). Arguments not checked."""
    pairs = top_k_index.numel()
    if uses_kernel(top_k_index.device, pairs, experts):
        return moe_layout(top_k_index, experts, tile, padded_rows(pairs, experts, tile))
    return layout_by_sorting(top_k_index, experts, tile)


def sort_pairs(top_k_index: Tensor, experts: int) -> tuple[Tensor, Tensor]:
    """The pairs of a ``(T, k)`` routing sorted by expert, on its device: ``(order, offsets)``, order ``(T k,)``
    int64 the flat pair indices ``t k + j`` in expert order (a stable sort: one expert's pairs in pair order),
    offsets ``(experts,)`` int32 the end of each expert's pairs in that order. An id below 0 counts as expert
    0's, in pair order among its other pairs (as the CUDA kernel places it); an id from ``experts`` on belongs to
    no expert and sorts past ``offsets[-1]``, in pair order among the other such pairs. Arguments not checked."""
    sorted_ids, order = torch.sort(top_k_index.reshape(-1).clamp(0, experts), stable=True)
    ids = torch.arange(experts, device=sorted_ids.device, dtype=sorted_ids.dtype)
    return order, torch.searchsorted(sorted_ids, ids, right=True, out_int32=True)  # pairs with an id <= e


def layout_by_sorting(top_k_index: Tensor, experts: int, tile: int
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The operator's outputs from PyTorch operations on top_k_index's device (:func:`sort_pairs`, searches and
    gathers; any number of experts): the CPU kernel, and the layout of more experts or pairs than the CUDA kernel
    takes. Arguments not checked."""
    T, k = top_k_index.shape
    order, offsets = sort_pairs(top_k_index, experts)
    layout = grouped_layout(offsets, T * k, tile)
    token = order.div(k, rounding_mode="floor")
    source = torch.where(layout.valid, token[layout.source], 0)
    pair_row = torch.empty_like(order).index_copy_(0, order, layout.dest)
    return source, layout.tile_expert, pair_row, layout.padded_offsets, order, offsets


OPS_LIBRARY.impl("moe_layout", _moe_layout_cpu, "CPU")
