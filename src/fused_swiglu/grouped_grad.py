"""Products over the grouped kernels' padded layout for the backward formulas of ``fused_swiglu::swiglu_grouped``
and ``fused_swiglu::experts_down``: each expert's rows (whole token tiles, :func:`fused_swiglu.grouped.grouped_layout`)
times that expert's weights, and each expert's weight gradient summed over its rows.

``torch._grouped_mm`` over the experts' padded end rows in bf16 (the one dtype torch.compile traces it in), one
``torch.bmm`` per token tile for the others (each tile's expert's weights gathered: tiles x weight-matrix
elements of memory). Every step device-side: no host synchronisation.
Rows past the last expert's tiles take part in nothing: their products are 0, and they add nothing to a weight
gradient (whatever they hold, NaN included).
"""

from __future__ import annotations

import torch
from torch import Tensor

# the dtypes whose products go through torch._grouped_mm (its meta kernel, which torch.compile and opcheck
# trace, takes bf16 only)
GROUPED_MM_DTYPES = (torch.bfloat16,)


def expert_offsets(tile_expert: Tensor, experts: int, tile: int) -> Tensor:
    """``(E,)`` int32: the end row of each expert's tiles, from the layout's non-decreasing ``tile_expert``
    (``padded_offsets`` of :func:`fused_swiglu.grouped.grouped_layout`)."""
    ids = torch.arange(experts, device=tile_expert.device, dtype=tile_expert.dtype)
    return torch.searchsorted(tile_expert, ids, right=True, out_int32=True) * tile


def _valid(rows: int, offsets: Tensor) -> Tensor:
    """``(rows, 1)`` bool: the rows of some expert's tiles."""
    return (torch.arange(rows, device=offsets.device) < offsets[-1]).unsqueeze(1)


def _by_tile(t: Tensor, tile_expert: Tensor) -> Tensor:
    """``(T_pad, C)`` as ``(tiles, tile, C)``, the layout's token tiles (an empty layout included)."""
    tiles = tile_expert.shape[0]
    return t.reshape(tiles, t.shape[0] // tiles if tiles else 0, t.shape[1])


def _tile_weights(w: Tensor, tile_expert: Tensor) -> Tensor:
    """Each tile's expert's weights, ``(tiles, ...)`` (tiles past the last expert's on the last expert)."""
    return w.index_select(0, tile_expert.clamp(0, w.shape[0] - 1).long())


def rows_times_weights(a: Tensor, w: Tensor, offsets: Tensor, tile_expert: Tensor, *, transpose: bool) -> Tensor:
    """``(T_pad, N)``: row r of expert e's tiles times e's weights, ``a[r] @ w[e]^T`` with ``w (E, N, K)``
    (``transpose=True``) or ``a[r] @ w[e]`` with ``w (E, K, N)``; 0 on the rows past the last expert's tiles.
    ``a (T_pad, K)``; ``offsets`` as :func:`expert_offsets`."""
    if a.dtype in GROUPED_MM_DTYPES:
        out = torch._grouped_mm(a, w.transpose(1, 2) if transpose else w, offs=offsets)
    else:
        wt = _tile_weights(w, tile_expert)
        out = torch.bmm(_by_tile(a, tile_expert), wt.transpose(1, 2) if transpose else wt)
        out = out.reshape(a.shape[0], out.shape[2])
    return torch.where(_valid(a.shape[0], offsets), out, 0)


def weight_grad(d: Tensor, a: Tensor, offsets: Tensor, tile_expert: Tensor, experts: int) -> Tensor:
    """``(E, N, K)``: for each expert the sum over the rows of its tiles of ``d[r]^T a[r]`` (``d (T_pad, N)``,
    ``a (T_pad, K)``); 0 for an expert with no rows."""
    if d.dtype in GROUPED_MM_DTYPES:
        return torch._grouped_mm(d.t(), a, offs=offsets)
    valid = _valid(a.shape[0], offsets)
    d, a = torch.where(valid, d, 0), torch.where(valid, a, 0)
    per_tile = torch.bmm(_by_tile(d, tile_expert).transpose(1, 2), _by_tile(a, tile_expert))
    out = d.new_zeros((experts, d.shape[1], a.shape[1]))
    return out.index_add_(0, tile_expert.clamp(0, experts - 1).long(), per_tile)  # past tiles add 0
