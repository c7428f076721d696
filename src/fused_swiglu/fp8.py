"""FP8 (e4m3) GEMM + SwiGLU: x and the packed gate/up weights in ``torch.float8_e4m3fn``, y in bf16.

::

    acc[m, r] = sum_k x[m, k] * W_packed[r, k]                     (FP8 tensor cores, fp32 accumulators)
    g, u      = acc[m, r] * x_scale[m] * w_scale[r]                (fp32: the dequantization scales)
    y[m, j]   = silu(g[m, j]) * u[m, j]                            (fp32, rounded once to bfloat16)

Scales are fp32 and multiply the quantized values back: ``x ~ x_fp8 * x_scale`` (``quantize_e4m3``
returns them so). Layouts, both contiguous on x's device:

* ``x_scale``: ``(1,)`` one scale for all tokens (per tensor), or ``(M,)`` / ``(M, 1)`` one per token.
* ``w_scale``: ``(1,)`` one scale for both weights, or ``(2I,)`` / ``(2I, 1)`` one per row of
  ``W_packed``, i.e. per output channel of W_gate and W_up in the interleaved row order of
  :func:`fused_swiglu.weights.pack_gate_up` (:func:`pack_weights` packs a gate/up pair with its scales).

Accumulation: ``"fast"`` lets GMMA accumulate all of K (the tensor cores' FP8 accumulation keeps
fewer mantissa bits than fp32); ``"promoted"`` adds each 128-deep k-tile's partial sum into an fp32
accumulator (CUTLASS's FP8 mainloop). Measured accuracy and speed: ``docs/fp8.md``.

Operator: ``torch.ops.fused_swiglu.swiglu_packed_fp8(x, w_packed, x_scale, w_scale, config)``
(``config``: ``""`` fast, ``"promoted"``, or an e4m3 config name of :data:`catalog.FP8_CONFIGS`),
with a fake kernel (torch.compile, CUDA graphs) and a CPU kernel (fp32 products of the dequantized
operands, one rounding). It is not differentiable.
"""

from __future__ import annotations

import torch

from . import _lib, catalog
from ._validate import check_choice, check_tensors
from .ops import _DEF
from .weights import BLOCK, pack_gate_up, unpack_gate_up

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # largest finite e4m3 value
ACCUMULATIONS = ("fast", "promoted")
CONFIG_NAMES = tuple(catalog.fp8_names())


def quantize_e4m3(t: torch.Tensor, *, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``t`` to e4m3 with fp32 scales ``amax / 448`` (so that ``t ~ q * scale``).

    Args:
        t: 2-D floating-point tensor ``(rows, cols)``.
        per_row: one scale per row (``(rows,)``) if True, else one for the tensor (``(1,)``).

    Returns:
        ``(q, scale)``: ``q`` contiguous ``float8_e4m3fn`` of t's shape; ``scale`` contiguous fp32.
        An all-zero row (or tensor), or one whose amax / 448 underflows to 0, gets scale 1.

    Raises:
        TypeError: ``t`` is not a floating-point tensor. ValueError: ``t`` is not 2-D.
    """
    check_tensors(t=t)
    if not t.is_floating_point():
        raise TypeError(f"t must be a floating-point tensor; got t.dtype={t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"t must be 2-D (rows, cols); got shape {tuple(t.shape)}")
    t32 = t.float()
    if t32.numel() == 0:
        return t32.to(E4M3).contiguous(), torch.ones(t32.shape[0] if per_row else 1, device=t.device)
    amax = t32.abs().amax(dim=1) if per_row else t32.abs().amax().reshape(1)
    scale = amax / E4M3_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # zero rows, and amax so small that amax / 448 is 0
    q = (t32 / (scale[:, None] if per_row else scale)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.contiguous(), scale.contiguous()


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
        :func:`~fused_swiglu.weights.pack_gate_up`) or a scale's size is neither 1 nor I.
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
        if s.numel() not in (1, I):
            raise ValueError(f"{arg} must hold 1 (per tensor) or I={I} (per channel) scales; got shape {tuple(s.shape)}")
        scales.append(s.reshape(-1).to(w_gate.device))
    if scales[0].numel() == 1 and scales[1].numel() == 1 and bool((scales[0] == scales[1]).all()):
        return packed, scales[0].clone().contiguous()
    g, u = (s.expand(I).reshape(I, 1) for s in scales)
    return packed, pack_gate_up(g, u).reshape(2 * I)


def choose_config(M: int, accumulation: str = "fast") -> str:
    """The e4m3 config for M tokens: up to 16 tokens the swap-AB form (64 weight rows by 16 tokens, the
    most CTAs streaming the weights), up to 128 tokens 64 x 128 tiles, then 128 x 192 tiles (fast:
    Pingpong, with a 2 x 1 cluster where the 128-token tiles come in pairs; promoted: Cooperative, whose
    two warpgroups hold 64 x 192 each beside the second accumulator)."""
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    promote = 1 if accumulation == "promoted" else 0
    if M <= 16:
        return catalog.name_of("packed_fp8_swapab", "pingpong", 64, 16, 128, 1, 1, promote, "e4m3")
    if M <= 128:
        return catalog.name_of("packed_fp8", "pingpong", 64, 128, 128, 1, 1, promote, "e4m3")
    if promote:
        return catalog.name_of("packed_fp8", "cooperative", 128, 192, 128, 2, 1, 1, "e4m3")
    cluster_m = 2 if -(-M // 128) % 2 == 0 else 1
    return catalog.name_of("packed_fp8", "pingpong", 128, 192, 128, cluster_m, 1, 0, "e4m3")


def _resolve(config: str, M: int) -> str:
    if config in ("", "fast", "promoted"):
        return choose_config(M, config or "fast")
    if config not in CONFIG_NAMES:
        raise ValueError(f"config must be '', 'promoted' or one of {', '.join(CONFIG_NAMES)}; got config={config!r}")
    return config


def _check(x, w_packed, x_scale, w_scale, config) -> tuple[int, int, int]:
    """Ranks, dtypes, sizes and devices; returns (M, I, H)."""
    check_tensors(x=x, w_packed=w_packed, x_scale=x_scale, w_scale=w_scale)
    op = "fused_swiglu::swiglu_packed_fp8"
    for arg, t in (("x", x), ("w_packed", w_packed)):
        if t.dtype != E4M3:
            raise TypeError(f"{op}: {arg} must be torch.float8_e4m3fn (quantize with fused_swiglu.fp8.quantize_e4m3);"
                            f" got {arg}.dtype={t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"{op}: {arg} must be 2-D; got shape {tuple(t.shape)}")
    M, H = x.shape
    rows, Hw = w_packed.shape
    if Hw != H:
        raise ValueError(f"{op}: w_packed must have x's H={H} columns; got w_packed of shape {tuple(w_packed.shape)}")
    if rows % (2 * BLOCK) != 0 or rows == 0:
        raise ValueError(f"{op}: w_packed must have 2I rows with I a positive multiple of {BLOCK}; got {rows} rows")
    if H % 16 != 0 or H == 0:
        raise ValueError(f"{op}: H (x.shape[1]) must be a positive multiple of 16 (16-byte e4m3 rows for TMA); got H={H}")
    for arg, s, n, what in (("x_scale", x_scale, M, "M (per token)"), ("w_scale", w_scale, rows, "2I (per weight row)")):
        if s.dtype != torch.float32:
            raise TypeError(f"{op}: {arg} must be torch.float32; got {arg}.dtype={s.dtype}")
        if s.numel() not in (1, n) or s.dim() > 2 or (s.dim() == 2 and s.shape[1] != 1):
            raise ValueError(f"{op}: {arg} must have shape (1,) (per tensor) or ({n},) / ({n}, 1), {what}; "
                             f"got shape {tuple(s.shape)}")
    for arg, t in (("w_packed", w_packed), ("x_scale", x_scale), ("w_scale", w_scale)):
        if t.device != x.device:
            raise ValueError(f"{op}: {arg} must be on x's device {x.device}; got {arg} on {t.device}")
    _resolve(config, M)
    return M, rows // 2, H


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """t itself if its rows are 16-byte aligned with unit column stride, else a fresh contiguous copy
    (``contiguous()`` would return a misaligned tensor, or a one-row one with any row stride, as it is)."""
    ok = t.stride(1) == 1 and t.stride(0) % 16 == 0 and t.data_ptr() % 16 == 0 and t.stride(0) >= t.shape[1]
    return t if ok else t.clone(memory_format=torch.contiguous_format)


def _scale_ready(s: torch.Tensor) -> torch.Tensor:
    s = s.reshape(-1)
    return s if s.is_contiguous() and s.data_ptr() % 16 == 0 else s.clone()


_DEF.define("swiglu_packed_fp8(Tensor x, Tensor w_packed, Tensor x_scale, Tensor w_scale, str config) -> Tensor")
swiglu_packed_fp8_op = torch.ops.fused_swiglu.swiglu_packed_fp8.default


@torch.library.register_fake("fused_swiglu::swiglu_packed_fp8")
def _fake(x, w_packed, x_scale, w_scale, config):
    M, I, _ = _check(x, w_packed, x_scale, w_scale, config)
    return x.new_empty((M, I), dtype=torch.bfloat16)


def _cuda(x, w_packed, x_scale, w_scale, config):
    M, I, H = _check(x, w_packed, x_scale, w_scale, config)
    y = torch.empty((M, I), dtype=torch.bfloat16, device=x.device)
    if M == 0:
        return y
    x, w_packed = _tma_ready(x), _tma_ready(w_packed)
    xs, ws = _scale_ready(x_scale), _scale_ready(w_scale)
    device = x.get_device()
    with torch.cuda.device(device):
        _lib.library().launch(
            _resolve(config, M), E4M3, device, M, I, H, x.data_ptr(), x.stride(0), w_packed.data_ptr(),
            w_packed.stride(0), y=y.data_ptr(), ldy=y.stride(0), x_scale=xs.data_ptr(), w_scale=ws.data_ptr(),
            x_scale_stride=int(xs.numel() > 1), w_scale_stride=int(ws.numel() > 1),  # M = 1: one scale either way
        )
    return y


def dequantized_swiglu(x, w_packed, x_scale, w_scale, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """SwiGLU of the dequantized operands in ``dtype`` (float32 or float64), unrounded: the reference
    the kernels are checked against. Same arguments as :func:`swiglu_packed_fp8`."""
    xd = x.to(dtype) * x_scale.reshape(-1, 1).to(dtype)
    wd = w_packed.to(dtype) * w_scale.reshape(-1, 1).to(dtype)
    acc = xd @ wd.T  # (M, 2I), packed column order
    g, u = (t.T for t in unpack_gate_up(acc.T, layout="interleaved"))
    return torch.nn.functional.silu(g) * u


def _cpu(x, w_packed, x_scale, w_scale, config):
    _check(x, w_packed, x_scale, w_scale, config)
    return dequantized_swiglu(x, w_packed, x_scale, w_scale).to(torch.bfloat16).contiguous()


_DEF.impl("swiglu_packed_fp8", _cuda, "CUDA")
_DEF.impl("swiglu_packed_fp8", _cpu, "CPU")


def swiglu_packed_fp8(x: torch.Tensor, w_packed: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor, *,
                      accumulation: str = "fast", config: str | None = None) -> torch.Tensor:
    """``silu(x W_gate^T) * (x W_up^T)`` from e4m3 operands and their fp32 scales, in bfloat16.

    Args:
        x: ``(M, H)`` ``float8_e4m3fn``, H a multiple of 16 (any strides; copied once where the
            rows are not 16-byte aligned with unit column stride).
        w_packed: ``(2I, H)`` ``float8_e4m3fn`` in the interleaved layout (:func:`pack_weights`).
        x_scale: fp32 ``(1,)`` or ``(M,)`` / ``(M, 1)`` (module docstring).
        w_scale: fp32 ``(1,)`` or ``(2I,)`` / ``(2I, 1)`` in the packed row order.
        accumulation: ``"fast"`` or ``"promoted"`` (module docstring).
        config: an e4m3 config name to run instead of the choice by M (benchmarks, tests).

    Returns:
        ``(M, I)`` contiguous bfloat16 tensor on x's device.

    Raises:
        TypeError: x or w_packed not e4m3, a scale not fp32, or an argument not a dense tensor.
        ValueError: ranks, H mismatch or not a multiple of 16, I not a multiple of 8, a scale's shape,
            devices, an unknown accumulation or config; the library's own checks on CUDA.
        BuildError: the config's library is not prebuilt and cannot be built here.
        UnsupportedError: the kernel library lacks the config (a library built from other sources).
        RuntimeError: a CUDA error at launch.
    """
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    chosen = config if config is not None else ("promoted" if accumulation == "promoted" else "")
    return swiglu_packed_fp8_op(x, w_packed, x_scale, w_scale, chosen)
