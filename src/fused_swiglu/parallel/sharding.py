"""Tensor-parallel shards of a SwiGLU MLP's weights.

Rank ``r`` of ``world_size`` ``t`` computes the output columns ``[r I/t, (r + 1) I/t)`` of the
up-projection: the gate rows and the up rows of those same columns (column parallel), and the
matching columns of ``W_down`` (row parallel: the rank's partial ``z`` is summed over ranks).

* Dual weights: ``W_gate[rows]`` and ``W_up[rows]``, two ``(I/t, H)`` row slices.
* Interleaved packed weight (:func:`fused_swiglu.pack_gate_up`): 16-row blocks are in column order,
  so the shard is one contiguous row slice ``[2 r I/t, 2 (r + 1) I/t)``, itself interleaved.
  Cutting it anywhere else would split a block of 8 gate rows from its 8 up rows.
* Concatenated packed weight (``[W_gate; W_up]``): the shard is ``[W_gate[rows]; W_up[rows]]``,
  again concatenated. Taking rows ``[2 r I/t, 2 (r + 1) I/t)`` instead would give rank 0 gate rows
  only.
* ``W_down`` ``(H, I)``: columns ``[r I/t, (r + 1) I/t)``.

The rule for every layout: ``I`` divisible by ``8 t``, so that each rank holds whole 8-row blocks
(the interleaved layout's gate/up pairs, and the kernels' 16-byte TMA rows).
"""

from __future__ import annotations

import torch

from .._validate import check_choice, check_tensors
from ..weights import BLOCK, LAYOUTS, check_packed_weight, check_gate_up


def _check_rank(rank: object, world_size: object) -> None:
    for arg, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{arg} must be an int; got {type(value).__name__}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1; got world_size={world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}")


def local_size(I: int, world_size: int) -> int:
    """Columns of the up-projection per rank, ``I / world_size``.

    Raises:
        ValueError: ``I`` is not a multiple of ``8 * world_size`` (each rank must hold whole blocks
            of 8 rows).
    """
    if I % (BLOCK * world_size) != 0:
        raise ValueError(
            f"intermediate size I must be a multiple of {BLOCK} * world_size = {BLOCK * world_size} so that "
            f"each rank holds whole blocks of {BLOCK} gate rows and their {BLOCK} up rows; "
            f"got I={I}, world_size={world_size}"
        )
    return I // world_size


def shard_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s gate and up weights for the dual kernel.

    Args:
        w_gate, w_up: ``(I, H)`` full weights (Hugging Face ``gate_proj.weight``, ``up_proj.weight``),
            same shape, dtype and device.
        rank, world_size: ints, ``0 <= rank < world_size``.

    Returns:
        ``(w_gate_r, w_up_r)``, each ``(I / world_size, H)`` contiguous: rows
        ``[rank I/t, (rank + 1) I/t)`` (views of contiguous inputs, no copy).

    Raises:
        TypeError: not dense tensors, dtypes differ, rank/world_size not ints.
        ValueError: shapes (not 2-D or differing), devices differ, rank out of range, or ``I`` not a
            multiple of ``8 * world_size``.
    """
    I, _ = check_gate_up(w_gate, w_up, interleaved=False)  # the rule below is the sharding's
    _check_rank(rank, world_size)
    n = local_size(I, world_size)
    rows = slice(rank * n, (rank + 1) * n)
    return w_gate[rows].contiguous(), w_up[rows].contiguous()


def shard_packed(w_packed: torch.Tensor, rank: int, world_size: int, *, layout: str) -> torch.Tensor:
    """Rank ``rank``'s ``(2I / world_size, H)`` share of a packed gate/up weight, in the same layout.

    Args:
        w_packed: ``(2I, H)``; ``layout`` ``"interleaved"`` (:func:`fused_swiglu.pack_gate_up`) or
            ``"concatenated"`` (``[W_gate; W_up]``).
        rank, world_size: ints, ``0 <= rank < world_size``.

    Returns:
        Contiguous ``(2I / world_size, H)``: the gate and up rows of columns
        ``[rank I/t, (rank + 1) I/t)`` (interleaved: a view of a contiguous input; concatenated: a
        new tensor).

    Raises:
        TypeError, ValueError: as :func:`shard_gate_up`, plus an odd row count or unknown layout.
    """
    I, _ = check_packed_weight(w_packed)
    check_choice("layout", layout, LAYOUTS)
    _check_rank(rank, world_size)
    n = local_size(I, world_size)
    if layout == "interleaved":
        return w_packed[2 * rank * n:2 * (rank + 1) * n].contiguous()
    rows = slice(rank * n, (rank + 1) * n)
    return torch.cat([w_packed[:I][rows], w_packed[I:][rows]])


def shard_down(w_down: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s columns of the down projection.

    Args:
        w_down: ``(H, I)`` (Hugging Face ``down_proj.weight``).
        rank, world_size: ints, ``0 <= rank < world_size``.

    Returns:
        ``(H, I / world_size)`` contiguous copy of columns ``[rank I/t, (rank + 1) I/t)``.

    Raises:
        TypeError: not a dense tensor; rank/world_size not ints.
        ValueError: not 2-D, rank out of range, or ``I`` not a multiple of ``8 * world_size``.
    """
    check_tensors(w_down=w_down)
    if w_down.dim() != 2:
        raise ValueError(f"w_down must be 2-D (H, I); got shape {tuple(w_down.shape)}")
    _check_rank(rank, world_size)
    n = local_size(w_down.shape[1], world_size)
    return w_down[:, rank * n:(rank + 1) * n].contiguous()
