"""Gate/up weight layouts.

Hugging Face checkpoints store ``gate_proj.weight`` and ``up_proj.weight`` as two ``(I, H)``
tensors (``I`` = intermediate size, ``H`` = hidden size). The packed kernel reads one
``(2I, H)`` tensor in the *interleaved* layout below, so that each 16-row block of the packed
GEMM's output holds 8 gate columns next to the 8 matching up columns and the SwiGLU epilogue
finds both operands of ``silu(g) * u`` in one tile.
"""

from __future__ import annotations

import torch

from ._validate import check_choice, check_tensors

BLOCK = 8  # rows of W_gate (and of W_up) per interleaved block
LAYOUTS = ("interleaved", "concatenated")


def check_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor, interleaved: bool = True) -> tuple[int, int]:
    check_tensors(w_gate=w_gate, w_up=w_up)
    for arg, t in (("w_gate", w_gate), ("w_up", w_up)):
        if t.dim() != 2:
            raise ValueError(f"{arg} must be 2-D (I, H); got shape {tuple(t.shape)}")
    if w_gate.shape != w_up.shape:
        raise ValueError(
            "w_gate and w_up must have the same shape (I, H); "
            f"got w_gate {tuple(w_gate.shape)} and w_up {tuple(w_up.shape)}"
        )
    if w_gate.dtype != w_up.dtype:
        raise TypeError(
            f"w_gate and w_up must have the same dtype; got w_gate {w_gate.dtype} and w_up {w_up.dtype}"
        )
    if w_gate.device != w_up.device:
        raise ValueError(
            "w_gate and w_up must be on the same device; "
            f"got w_gate on {w_gate.device} and w_up on {w_up.device}"
        )
    I, H = w_gate.shape
    if interleaved:
        _check_block(I, "I (rows of w_gate)")
    return I, H


def _check_block(I: int, what: str) -> None:
    if I % BLOCK != 0:
        raise ValueError(f"{what} must be a multiple of {BLOCK} for the interleaved layout; got I={I}")


def check_packed_weight(w_packed: torch.Tensor) -> tuple[int, int]:
    check_tensors(w_packed=w_packed)
    if w_packed.dim() != 2:
        raise ValueError(f"w_packed must be 2-D (2I, H); got shape {tuple(w_packed.shape)}")
    rows, H = w_packed.shape
    if rows % 2 != 0:
        raise ValueError(f"w_packed must have an even number of rows (2I); got {rows} rows")
    return rows // 2, H


def pack_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Pack gate and up weights into the interleaved layout the packed kernel reads.

    Layout ("interleaved"): ``W_packed`` has ``2I`` rows. For block ``b = 0 .. I/8 - 1``, rows
    ``[16b, 16b + 8)`` are ``W_gate`` rows ``[8b, 8b + 8)`` and rows ``[16b + 8, 16b + 16)`` are
    ``W_up`` rows ``[8b, 8b + 8)``. Equivalently::

        torch.stack([w_gate.view(I // 8, 8, H), w_up.view(I // 8, 8, H)], dim=1).reshape(2 * I, H)

    Example with I = 16: packed rows are ``g0..g7, u0..u7, g8..g15, u8..u15``.

    Args:
        w_gate: ``(I, H)`` gate_proj weight, any dtype, any strides.
        w_up: ``(I, H)`` up_proj weight, same shape, dtype and device as ``w_gate``.

    Returns:
        ``(2I, H)`` contiguous tensor, same dtype and device (a new copy; costs one read and one
        write of both weights).

    Raises:
        TypeError: an argument is not a dense (strided) tensor, or the dtypes differ.
        ValueError: not 2-D, shapes differ, devices differ, or ``I`` is not a multiple of 8.
    """
    I, H = check_gate_up(w_gate, w_up)
    g = w_gate.reshape(I // BLOCK, BLOCK, H)  # (I/8, 8, H)
    u = w_up.reshape(I // BLOCK, BLOCK, H)  # (I/8, 8, H)
    return torch.stack([g, u], dim=1).reshape(2 * I, H).contiguous()  # (2I, H)


def unpack_gate_up(
    w_packed: torch.Tensor, *, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a packed ``(2I, H)`` weight back into ``(w_gate, w_up)``.

    Args:
        w_packed: ``(2I, H)`` tensor, any dtype.
        layout: required keyword (no default, so a weight is never split by a guessed layout):
            ``"interleaved"`` (see :func:`pack_gate_up`) or ``"concatenated"``
            (``W = [W_gate; W_up]``: gate rows ``[0, I)``, up rows ``[I, 2I)``).

    Returns:
        ``(w_gate, w_up)``, each ``(I, H)`` contiguous, same dtype and device. For
        ``"concatenated"`` with a contiguous ``w_packed`` these are views of it (row slices; writing
        to them writes to ``w_packed``); for ``"interleaved"`` they are new tensors.

    Raises:
        TypeError: ``w_packed`` is not a dense (strided) tensor.
        ValueError: not 2-D, odd row count, unknown ``layout``, or (interleaved) ``I`` not a
            multiple of 8.
    """
    I, H = check_packed_weight(w_packed)
    check_choice("layout", layout, LAYOUTS)
    if layout == "concatenated":
        return w_packed[:I].contiguous(), w_packed[I:].contiguous()
    _check_block(I, "I (half the rows of w_packed)")
    blocks = w_packed.reshape(I // BLOCK, 2, BLOCK, H)  # (I/8, gate|up, 8, H)
    return blocks[:, 0].reshape(I, H).contiguous(), blocks[:, 1].reshape(I, H).contiguous()


def concatenated_to_interleaved(w: torch.Tensor) -> torch.Tensor:
    """Convert a ``[W_gate; W_up]`` ``(2I, H)`` weight (as some checkpoints fuse ``gate_up_proj``)
    to the interleaved layout of :func:`pack_gate_up`.

    Returns a new ``(2I, H)`` contiguous tensor. Raises like :func:`unpack_gate_up` with
    ``layout="concatenated"``, plus ValueError if ``I`` is not a multiple of 8.
    """
    I, _ = check_packed_weight(w)
    return pack_gate_up(w[:I], w[I:])
