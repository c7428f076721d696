"""e4m3 quantization and weight packing for the FP8 kernels (scales multiply back: ``t ~ q * scale``)."""

from __future__ import annotations

import torch

from .._validate import check_tensors
from ..weights import pack_gate_up

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # largest finite e4m3 value
GROUP = 128  # columns per scale of a 1 x 128 group (token groups of x, output groups of an e4m3 y)
K_BLOCK = 128  # K per block scale (1 x 128 token groups, 128 x 128 weight blocks)
PACKED_ROWS = 8  # the packed layout's run of gate rows, then of up rows (weights.pack_gate_up)


def _check_matrix(arg: str, t: torch.Tensor) -> None:
    check_tensors(**{arg: t})
    if not t.is_floating_point():
        raise TypeError(f"{arg} must be a floating-point tensor; got {arg}.dtype={t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{arg} must be 2-D (rows, cols); got shape {tuple(t.shape)}")


def _check_positive_int(arg: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{arg} must be a positive int; got {arg}={value!r}")


def _check_bool(arg: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{arg} must be True or False; got {arg}={value!r}")


def quantize_e4m3(t: torch.Tensor, *, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``t`` to e4m3 with fp32 scales ``amax / 448`` (so that ``t ~ q * scale``).

    Args:
        t: 2-D floating-point tensor ``(rows, cols)``.
        per_row: one scale per row (``(rows,)``) if True, else one for the tensor (``(1,)``).

    Returns:
        ``(q, scale)``: ``q`` contiguous ``float8_e4m3fn`` of t's shape; ``scale`` contiguous fp32.
        An all-zero row (or tensor), or one whose amax / 448 underflows to 0, gets scale 1. NaN and
        infinities do not count towards the amax: a NaN stays NaN, an infinity saturates at +-448.

    Raises:
        TypeError: ``t`` is not a floating-point tensor, or ``per_row`` not a bool. ValueError: ``t`` is not 2-D.
    """
    _check_matrix("t", t)
    _check_bool("per_row", per_row)
    t32 = t.float()
    if t32.numel() == 0:
        return t32.to(E4M3).contiguous(), torch.ones(t32.shape[0] if per_row else 1, device=t.device)
    magnitude = t32.abs().masked_fill(~t32.isfinite(), 0.0)  # NaN and infinities left out of the amax
    amax = magnitude.amax(dim=1) if per_row else magnitude.amax().reshape(1)
    scale = amax / E4M3_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # zero rows, and amax so small that amax / 448 is 0
    q = (t32 / (scale[:, None] if per_row else scale)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.contiguous(), scale.contiguous()


def quantize_e4m3_groups(t: torch.Tensor, group: int = GROUP, *,
                         column_major_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``t`` to e4m3 per 1 x ``group`` group of each row, as the e4m3-output kernels do.

    ``scale = amax / 448`` (fp32) over each group of ``group`` consecutive columns of a row (the last
    one possibly shorter); each value becomes ``t * (1 / scale)`` (fp32) rounded to nearest e4m3 and
    saturated at +-448; an all-zero group gets scale 0 and zeros. A NaN stays NaN and does not count
    towards its group's amax (as in the kernels, whose amax is ``fmaxf``); an infinity does, as in the
    kernels: its group's scale is infinite, its other values become 0 and the infinity NaN.

    Args:
        t: 2-D floating-point tensor ``(rows, cols)``, computed with in fp32.
        group: columns per scale (positive).
        column_major_scales: return the scales row-contiguous along ``rows`` (stride ``(1, ld)``, ld
            the row count rounded up to 4): the layout the block-scaled kernels read x's scales in
            (``scaling="block"``), as DeepGEMM's and vLLM's column-major option.

    Returns:
        ``(q, scale)``: ``q`` contiguous ``float8_e4m3fn`` of t's shape; ``scale`` fp32
        ``(rows, ceil(cols / group))``, row-major (or as ``column_major_scales``), so that
        ``t ~ q * scale`` repeated over each group. A bf16/fp16 ``t`` on a Hopper GPU with 128-column
        groups is quantized by one kernel (the operator ``torch.ops.fused_swiglu.quantize_e4m3_groups``), with the same
        result bit for bit (a NaN's sign aside); other inputs by PyTorch operations.

    Raises:
        TypeError: ``t`` is not a floating-point tensor, or ``column_major_scales`` not a bool.
        ValueError: ``t`` is not 2-D or ``group`` not a positive int.
    """
    _check_matrix("t", t)
    _check_positive_int("group", group)
    _check_bool("column_major_scales", column_major_scales)
    if _kernel_quantizes(t, group):
        from .._dispatch import call_op

        return call_op(torch.ops.fused_swiglu.quantize_e4m3_groups.default, t, column_major_scales)
    return quantize_groups_torch(t, column_major_scales, group)


def quantize_groups_torch(t: torch.Tensor, column_major_scales: bool = False,
                          group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantize_e4m3_groups` by PyTorch operations (any device and floating dtype): the CPU
    kernel of the quantization operator and the path of inputs its CUDA kernel does not take."""
    rows, cols = t.shape
    groups = -(-cols // group)
    t32 = torch.nn.functional.pad(t.float(), (0, groups * group - cols)).reshape(rows, groups, group)
    magnitude = t32.abs().nan_to_num(nan=0.0, posinf=float("inf"))  # NaN left out of the amax
    scale = magnitude.amax(dim=2) / E4M3_MAX if groups else t32.new_zeros(rows, 0)
    inv = reciprocal(scale)
    q = (t32 * inv[:, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).reshape(rows, groups * group)[:, :cols]
    return q.contiguous(), column_major(scale) if column_major_scales else scale.contiguous()


def _kernel_quantizes(t: torch.Tensor, group: int) -> bool:
    """Whether the quantization operator's CUDA kernel takes ``t``: a non-empty bf16/fp16 tensor on a
    Hopper GPU, 128-column groups."""
    from .._validate import hopper_status

    return (t.is_cuda and t.dtype in (torch.bfloat16, torch.float16) and group == GROUP and t.numel() > 0
            and hopper_status(t.device) is None)


def reciprocal(scale: torch.Tensor) -> torch.Tensor:
    """``1 / scale`` in fp32 as the e4m3-output epilogue takes it: ``fminf(rcp(scale), FLT_MAX)``, so a
    zero or NaN scale gives FLT_MAX (zeros stay zero, every other value saturates at +-448)."""
    fmax = torch.finfo(torch.float32).max
    return torch.reciprocal(scale.float()).nan_to_num(nan=fmax, posinf=fmax).clamp(max=fmax)


def column_major(scale: torch.Tensor) -> torch.Tensor:
    """``scale`` (rows, blocks) copied to storage contiguous along rows, each column starting on a
    16-byte boundary (stride ``(1, ld)``, ld = rows rounded up to 4): x's scales as the block-scaled
    kernels read them. A tensor already so laid out is returned as is."""
    rows, blocks = scale.shape
    if scale.stride(0) == 1 and scale.stride(1) % 4 == 0 and scale.stride(1) >= rows and scale.data_ptr() % 16 == 0:
        return scale
    padded = m_major_scales(rows, blocks, scale, zeroed=True)  # rows past `rows` read as 0
    padded[:rows] = scale
    return padded[:rows]


def m_major_scales(rows: int, blocks: int, like: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
    """A fresh fp32 ``(ceil(rows / 4) * 4, blocks)`` tensor of stride ``(1, ld)`` on ``like``'s device: the
    block-scaled kernels' layout of scales, with the padding rows they read (zero-filled if ``zeroed``)."""
    ld = -(-rows // 4) * 4
    return (like.new_zeros if zeroed else like.new_empty)((blocks, ld), dtype=torch.float32).T


def pack_weights(w_gate: torch.Tensor, w_up: torch.Tensor, gate_scale: torch.Tensor,
                 up_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack e4m3 gate and up weights with their scales for :func:`swiglu_packed_fp8`.

    Args:
        w_gate, w_up: ``(I, H)`` ``float8_e4m3fn``, I a multiple of 8.
        gate_scale, up_scale: fp32, ``(1,)`` per tensor or ``(I,)`` / ``(I, 1)`` per output channel.

    Returns:
        ``(w_packed, w_scale)``: ``(2I, H)`` e4m3 in the interleaved layout of
        :func:`fused_swiglu.weights.pack_gate_up`, and fp32 ``(1,)`` when both scales are one equal
        value, else ``(2I,)`` in the same row order.

    Raises:
        TypeError: a weight is not e4m3 or a scale not fp32. ValueError: shapes (as
        :func:`~fused_swiglu.weights.pack_gate_up`) or a scale's shape is not (1,), (I,) or (I, 1).
    """
    check_tensors(w_gate=w_gate, w_up=w_up, gate_scale=gate_scale, up_scale=up_scale)
    for arg, t in (("w_gate", w_gate), ("w_up", w_up)):
        if t.dtype != E4M3:
            raise TypeError(f"{arg} must be torch.float8_e4m3fn; got {arg}.dtype={t.dtype}")
    packed = pack_gate_up(w_gate.view(torch.uint8), w_up.view(torch.uint8)).view(E4M3)
    I = w_gate.shape[0]
    scales = []
    for arg, s in (("gate_scale", gate_scale), ("up_scale", up_scale)):
        if s.dtype != torch.float32:
            raise TypeError(f"{arg} must be torch.float32; got {arg}.dtype={s.dtype}")
        if tuple(s.shape) not in ((1,), (I,), (I, 1)):
            raise ValueError(f"{arg} must have shape (1,) (per tensor) or ({I},) / ({I}, 1) (per channel); got shape "
                             f"{tuple(s.shape)}")
        scales.append(s.reshape(-1).to(w_gate.device))
    if scales[0].numel() == 1 and scales[1].numel() == 1 and bool((scales[0] == scales[1]).all()):
        return packed, scales[0].clone().contiguous()
    g, u = (s.expand(I).reshape(I, 1) for s in scales)
    return packed, pack_gate_up(g, u).reshape(2 * I)


def quantize_e4m3_blocks(w: torch.Tensor, block: int = K_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a weight ``w`` to e4m3 per ``block`` x ``block`` block (the fine-grained FP8 checkpoints'
    recipe): ``scale = amax / 448`` per block (the last row and column of blocks possibly partial),
    values ``w / scale`` rounded to nearest e4m3; an all-zero block gets scale 1; NaN and infinities do not
    count towards its block's amax (a NaN stays NaN, an infinity saturates at +-448).

    Args:
        w: 2-D floating-point tensor ``(rows, cols)``.
        block: rows and columns per block (positive).

    Returns:
        ``(q, scale)``: ``q`` contiguous ``float8_e4m3fn`` of w's shape, ``scale`` contiguous fp32
        ``(ceil(rows / block), ceil(cols / block))`` with ``w ~ q * scale`` over each block.

    Raises:
        TypeError: ``w`` is not a floating-point tensor. ValueError: ``w`` is not 2-D or ``block`` < 1.
    """
    _check_matrix("w", w)
    _check_positive_int("block", block)
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    padded = torch.nn.functional.pad(w.float(), (0, bc * block - cols, 0, br * block - rows))
    blocks = padded.reshape(br, block, bc, block)
    scale = blocks.abs().masked_fill(~blocks.isfinite(), 0.0).amax(dim=(1, 3)) / E4M3_MAX  # NaN, inf left out
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (blocks / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.reshape(br * block, bc * block)[:rows, :cols].contiguous(), scale.contiguous()


def pack_weights_blockwise(w_gate: torch.Tensor, w_up: torch.Tensor, gate_scale: torch.Tensor,
                           up_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack e4m3 gate and up weights with their 128 x 128 block scales for ``scaling="block"``.

    Args:
        w_gate, w_up: ``(I, H)`` ``float8_e4m3fn``, I a multiple of 8.
        gate_scale, up_scale: fp32 ``(ceil(I / 128), ceil(H / 128))``: the scale of each 128 x 128 block
            (the last row and column of blocks possibly partial), multiplying back as transformers'
            fine-grained FP8 ``weight_scale_inv`` does.

    Returns:
        ``(w_packed, w_scale)``: ``(2I, H)`` e4m3 in the interleaved layout of
        :func:`fused_swiglu.weights.pack_gate_up`, and fp32 ``(2I / 8, ceil(H / 128))`` with stride
        ``(1, ld)``: one scale per 8 packed rows (each block scale repeated over the 8-row groups of its
        rows) per K block, the layout the block-scaled kernels read.

    Raises:
        TypeError: a weight is not e4m3 or a scale not fp32. ValueError: shapes (as
        :func:`~fused_swiglu.weights.pack_gate_up`) or a scale's shape.
    """
    check_tensors(w_gate=w_gate, w_up=w_up)
    for arg, t in (("w_gate", w_gate), ("w_up", w_up)):
        if t.dtype != E4M3:
            raise TypeError(f"{arg} must be torch.float8_e4m3fn; got {arg}.dtype={t.dtype}")
    packed = pack_gate_up(w_gate.view(torch.uint8), w_up.view(torch.uint8)).view(E4M3)
    I, H = w_gate.shape
    blocks = (-(-I // K_BLOCK), -(-H // K_BLOCK))
    for arg, s in (("gate_scale", gate_scale), ("up_scale", up_scale)):
        check_tensors(**{arg: s})
        if s.dtype != torch.float32:
            raise TypeError(f"{arg} must be torch.float32; got {arg}.dtype={s.dtype}")
        if tuple(s.shape) != blocks:
            raise ValueError(f"{arg} must have shape (ceil(I / 128), ceil(H / 128)) = {blocks}; got {tuple(s.shape)}")
    rows = torch.arange(I, device=w_gate.device)[::PACKED_ROWS] // K_BLOCK  # block row of each 8-row group
    g, u = (s.to(w_gate.device)[rows] for s in (gate_scale, up_scale))  # (I / 8, KB)
    groups = torch.stack([g, u], dim=1).reshape(2 * I // PACKED_ROWS, blocks[1])  # gate group, its up group, ...
    return packed, column_major(groups)

