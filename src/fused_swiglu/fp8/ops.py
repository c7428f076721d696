"""The FP8 operators (``torch.ops.fused_swiglu.*``): argument checks, the launches through the kernel
library, fake kernels (torch.compile, CUDA graphs) and CPU kernels (fp32 products of the dequantized
operands, one rounding), and the dequantized references they share. Public entries:
:func:`fused_swiglu.fp8.swiglu_packed_fp8` (the packed kernel) and :func:`fused_swiglu.fp8.swiglu_fp8`
(the dual kernel)."""

from __future__ import annotations

import torch

from .. import _lib
from .._validate import check_tensors
from ..ops import OPS_LIBRARY
from ..weights import BLOCK, unpack_gate_up
from .choice import resolve
from .quantize import E4M3, E4M3_MAX, GROUP, K_BLOCK, PACKED_ROWS, column_major, quantize_e4m3_groups, reciprocal


def _check_e4m3_matrices(op: str, **named: torch.Tensor) -> None:
    """Each named tensor 2-D e4m3."""
    for arg, t in named.items():
        if t.dtype != E4M3:
            raise TypeError(f"{op}: {arg} must be torch.float8_e4m3fn (quantize with fused_swiglu.fp8.quantize_e4m3);"
                            f" got {arg}.dtype={t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"{op}: {arg} must be 2-D; got shape {tuple(t.shape)}")


def _check_row_scale(op: str, arg: str, s: torch.Tensor, n: int, what: str) -> None:
    """A row-scaling scale: fp32, ``(1,)`` or ``(n,)`` / ``(n, 1)``."""
    if s.dtype != torch.float32:
        raise TypeError(f"{op}: {arg} must be torch.float32; got {arg}.dtype={s.dtype}")
    if s.numel() not in (1, n) or s.dim() > 2 or (s.dim() == 2 and s.shape[1] != 1):
        raise ValueError(f"{op}: {arg} must have shape (1,) (per tensor) or ({n},) / ({n}, 1), {what}; "
                         f"got shape {tuple(s.shape)}")


def _check_on_device(op: str, x: torch.Tensor, **named: torch.Tensor) -> None:
    """Each named tensor on x's device."""
    for arg, t in named.items():
        if t.device != x.device:
            raise ValueError(f"{op}: {arg} must be on x's device {x.device}; got {arg} on {t.device}")


def check_operands(x, w_packed, x_scale, w_scale, config, e4m3_out: bool = False,
           op: str = "fused_swiglu::swiglu_packed_fp8", block: bool = False) -> tuple[int, int, int]:
    """Ranks, dtypes, sizes and devices; returns (M, I, H)."""
    check_tensors(x=x, w_packed=w_packed, x_scale=x_scale, w_scale=w_scale)
    _check_e4m3_matrices(op, x=x, w_packed=w_packed)
    M, H = x.shape
    rows, Hw = w_packed.shape
    if Hw != H:
        raise ValueError(f"{op}: w_packed must have x's H={H} columns; got w_packed of shape {tuple(w_packed.shape)}")
    if rows % (2 * BLOCK) != 0 or rows == 0:
        raise ValueError(f"{op}: w_packed must have 2I rows with I a positive multiple of {BLOCK}; got {rows} rows")
    if H % 16 != 0 or H == 0:
        raise ValueError(f"{op}: H (x.shape[1]) must be a positive multiple of 16 (16-byte e4m3 rows for TMA); got H={H}")
    kb = -(-H // K_BLOCK)
    for arg, s, n, what in (("x_scale", x_scale, M, "M (per token)"), ("w_scale", w_scale, rows, "2I (per weight row)")):
        if not block:
            _check_row_scale(op, arg, s, n, what)
            continue
        if s.dtype != torch.float32:
            raise TypeError(f"{op}: {arg} must be torch.float32; got {arg}.dtype={s.dtype}")
        shape = (M if arg == "x_scale" else rows // PACKED_ROWS, kb)
        if tuple(s.shape) != shape:
            what = ("(M, ceil(H / 128)), one per 1 x 128 group of each token" if arg == "x_scale" else
                    "(2I / 8, ceil(H / 128)) from fused_swiglu.fp8.pack_weights_blockwise")
            raise ValueError(f"{op}: {arg} must have shape {shape} = {what}; got shape {tuple(s.shape)}")
    _check_on_device(op, x, w_packed=w_packed, x_scale=x_scale, w_scale=w_scale)
    if e4m3_out and rows % 32 != 0:
        raise ValueError(f"{op}: e4m3 y needs I a multiple of 16 (16-byte e4m3 rows for TMA); got I={rows // 2}")
    resolve(config, M, e4m3_out, block)
    return M, rows // 2, H


def tma_ready(t: torch.Tensor) -> torch.Tensor:
    """t itself if its rows are 16-byte aligned with unit column stride, else a fresh contiguous copy
    (``contiguous()`` would return a misaligned tensor, or a one-row one with any row stride, as it is)."""
    ok = t.stride(1) == 1 and t.stride(0) % 16 == 0 and t.data_ptr() % 16 == 0 and t.stride(0) >= t.shape[1]
    return t if ok else t.clone(memory_format=torch.contiguous_format)


def _scale_ready(s: torch.Tensor) -> torch.Tensor:
    s = s.reshape(-1)
    return s if s.is_contiguous() and s.data_ptr() % 16 == 0 else s.clone()


def _row_scales(x_scale, w_scale) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Row scaling's scales as the kernel reads them, with their fsw_problem strides (0: one scale,
    1: one per row; M = 1 reads one scale either way)."""
    xs, ws = _scale_ready(x_scale), _scale_ready(w_scale)
    return xs, ws, int(xs.numel() > 1), int(ws.numel() > 1)


def _launch(config_name: str, x, w_packed, y, xs, ws, x_scale_stride: int, w_scale_stride: int,
            w_up: torch.Tensor | None = None, **y_scale) -> None:
    """One kernel launch on x's device for M = x.shape[0] > 0: x and the weights copied where TMA cannot
    read them, the scales ``xs`` / ``ws`` already in the config's layout; ``w_up`` for the dual kernel
    (``w_packed`` is then W_gate); ``y_scale*`` for an e4m3 y."""
    x, w_packed = tma_ready(x), tma_ready(w_packed)
    up = {} if w_up is None else (lambda t: {"w_up": t.data_ptr(), "ldw_up": t.stride(0)})(tma_ready(w_up))
    device = x.get_device()
    with torch.cuda.device(device):
        _lib.library().launch(
            config_name, E4M3, device, x.shape[0], y.shape[1], x.shape[1], x.data_ptr(), x.stride(0),
            w_packed.data_ptr(), w_packed.stride(0), y=y.data_ptr(), ldy=y.stride(0), x_scale=xs.data_ptr(),
            w_scale=ws.data_ptr(), x_scale_stride=x_scale_stride, w_scale_stride=w_scale_stride, **up, **y_scale,
        )


OPS_LIBRARY.define("swiglu_packed_fp8(Tensor x, Tensor w_packed, Tensor x_scale, Tensor w_scale, str config) -> Tensor")
swiglu_packed_fp8_op = torch.ops.fused_swiglu.swiglu_packed_fp8.default


@torch.library.register_fake("fused_swiglu::swiglu_packed_fp8")
def _fake(x, w_packed, x_scale, w_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config)
    return x.new_empty((M, I), dtype=torch.bfloat16)


def _cuda(x, w_packed, x_scale, w_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config)
    y = torch.empty((M, I), dtype=torch.bfloat16, device=x.device)
    if M > 0:
        _launch(resolve(config, M), x, w_packed, y, *_row_scales(x_scale, w_scale))
    return y


def dequantized_swiglu(x, w_packed, x_scale, w_scale, dtype: torch.dtype = torch.float32,
                       scaling: str = "row") -> torch.Tensor:
    """SwiGLU of the dequantized operands in ``dtype`` (float32 or float64), unrounded: the reference
    the kernels are checked against. Same arguments as :func:`fused_swiglu.fp8.swiglu_packed_fp8`."""
    if scaling == "block":
        H = x.shape[1]
        xd = x.to(dtype) * x_scale.to(dtype).repeat_interleave(K_BLOCK, dim=1)[:, :H]
        ws = w_scale.to(dtype).repeat_interleave(PACKED_ROWS, dim=0).repeat_interleave(K_BLOCK, dim=1)[:, :H]
        wd = w_packed.to(dtype) * ws
    else:
        xd = x.to(dtype) * x_scale.reshape(-1, 1).to(dtype)
        wd = w_packed.to(dtype) * w_scale.reshape(-1, 1).to(dtype)
    acc = xd @ wd.T  # (M, 2I), packed column order
    g, u = (t.T for t in unpack_gate_up(acc.T, layout="interleaved"))
    return torch.nn.functional.silu(g) * u


def _cpu(x, w_packed, x_scale, w_scale, config):
    check_operands(x, w_packed, x_scale, w_scale, config)
    return dequantized_swiglu(x, w_packed, x_scale, w_scale).to(torch.bfloat16).contiguous()


OPS_LIBRARY.impl("swiglu_packed_fp8", _cuda, "CUDA")
OPS_LIBRARY.impl("swiglu_packed_fp8", _cpu, "CPU")

# e4m3 y: per-group scales written by the kernel, or one static scale read by it
_OUT_OP = "fused_swiglu::swiglu_packed_fp8_e4m3out"
_STATIC_OP = "fused_swiglu::swiglu_packed_fp8_e4m3out_static"
OPS_LIBRARY.define("swiglu_packed_fp8_e4m3out(Tensor x, Tensor w_packed, Tensor x_scale, Tensor w_scale, str config)"
            " -> (Tensor, Tensor)")
OPS_LIBRARY.define("swiglu_packed_fp8_e4m3out_static(Tensor x, Tensor w_packed, Tensor x_scale, Tensor w_scale, "
            "Tensor out_scale, str config) -> Tensor")
swiglu_packed_fp8_e4m3out_op = torch.ops.fused_swiglu.swiglu_packed_fp8_e4m3out.default
swiglu_packed_fp8_e4m3out_static_op = torch.ops.fused_swiglu.swiglu_packed_fp8_e4m3out_static.default


def _check_out_scale(x, out_scale) -> None:
    check_tensors(out_scale=out_scale)
    if out_scale.dtype != torch.float32 or out_scale.numel() != 1:
        raise ValueError(f"{_STATIC_OP}: out_scale must be one fp32 value of shape (1,); got dtype {out_scale.dtype}, "
                         f"shape {tuple(out_scale.shape)}")
    if out_scale.device != x.device:
        raise ValueError(f"{_STATIC_OP}: out_scale must be on x's device {x.device}; got out_scale on {out_scale.device}")


@torch.library.register_fake(_OUT_OP)
def _fake_out(x, w_packed, x_scale, w_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config, True, _OUT_OP)
    return x.new_empty((M, I), dtype=E4M3), x.new_empty((M, -(-I // GROUP)), dtype=torch.float32)


@torch.library.register_fake(_STATIC_OP)
def _fake_static(x, w_packed, x_scale, w_scale, out_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config, True, _STATIC_OP)
    _check_out_scale(x, out_scale)
    return x.new_empty((M, I), dtype=E4M3)


def _cuda_out(x, w_packed, x_scale, w_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config, True, _OUT_OP)
    y = torch.empty((M, I), dtype=E4M3, device=x.device)
    y_scale = torch.empty((M, -(-I // GROUP)), dtype=torch.float32, device=x.device)
    if M > 0:
        _launch(resolve(config, M, True), x, w_packed, y, *_row_scales(x_scale, w_scale), y_scale=y_scale.data_ptr(),
                y_scale_stride_m=y_scale.stride(0), y_scale_stride_g=1, y_scale_mode=_lib.Y_SCALE_GROUP128)
    return y, y_scale


def _cuda_static(x, w_packed, x_scale, w_scale, out_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config, True, _STATIC_OP)
    _check_out_scale(x, out_scale)
    y = torch.empty((M, I), dtype=E4M3, device=x.device)
    if M > 0:
        _launch(resolve(config, M, True), x, w_packed, y, *_row_scales(x_scale, w_scale),
                y_scale=_scale_ready(out_scale).data_ptr(), y_scale_mode=_lib.Y_SCALE_STATIC)
    return y


def _cpu_out(x, w_packed, x_scale, w_scale, config):
    check_operands(x, w_packed, x_scale, w_scale, config, True, _OUT_OP)
    return quantize_e4m3_groups(dequantized_swiglu(x, w_packed, x_scale, w_scale))


def _cpu_static(x, w_packed, x_scale, w_scale, out_scale, config):
    check_operands(x, w_packed, x_scale, w_scale, config, True, _STATIC_OP)
    _check_out_scale(x, out_scale)
    v = dequantized_swiglu(x, w_packed, x_scale, w_scale)
    return (v * reciprocal(out_scale.reshape(1, 1))).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).contiguous()


OPS_LIBRARY.impl("swiglu_packed_fp8_e4m3out", _cuda_out, "CUDA")
OPS_LIBRARY.impl("swiglu_packed_fp8_e4m3out", _cpu_out, "CPU")
OPS_LIBRARY.impl("swiglu_packed_fp8_e4m3out_static", _cuda_static, "CUDA")
OPS_LIBRARY.impl("swiglu_packed_fp8_e4m3out_static", _cpu_static, "CPU")


# block scaling: 1 x 128 token-group scales of x, 128 x 128 block scales of the weights (expanded to
# the packed rows' 8-row groups), applied per k-tile in the mainloop; bf16 y
_BLOCK_OP = "fused_swiglu::swiglu_packed_fp8_blockwise"
OPS_LIBRARY.define("swiglu_packed_fp8_blockwise(Tensor x, Tensor w_packed, Tensor x_scale, Tensor w_scale, str config)"
            " -> Tensor")
swiglu_packed_fp8_blockwise_op = torch.ops.fused_swiglu.swiglu_packed_fp8_blockwise.default


@torch.library.register_fake(_BLOCK_OP)
def _fake_block(x, w_packed, x_scale, w_scale, config):
    M, I, _ = check_operands(x, w_packed, x_scale, w_scale, config, op=_BLOCK_OP, block=True)
    return x.new_empty((M, I), dtype=torch.bfloat16)


def run_block(x, w_packed, x_scale, w_scale, config):
    """The block-scaled operator's CUDA kernel on operands already checked (:func:`check_operands`, block=True)."""
    M, I = x.shape[0], w_packed.shape[0] // 2
    y = torch.empty((M, I), dtype=torch.bfloat16, device=x.device)
    if M > 0:
        xs, ws = column_major(x_scale), column_major(w_scale)  # M-major, 16-byte aligned columns
        _launch(resolve(config, M, block=True), x, w_packed, y, xs, ws, xs.stride(1), ws.stride(1))
    return y


def run_block_cpu(x, w_packed, x_scale, w_scale):
    """The block-scaled operator's CPU kernel on operands already checked."""
    return dequantized_swiglu(x, w_packed, x_scale, w_scale, scaling="block").to(torch.bfloat16).contiguous()


def _cuda_block(x, w_packed, x_scale, w_scale, config):
    check_operands(x, w_packed, x_scale, w_scale, config, op=_BLOCK_OP, block=True)
    return run_block(x, w_packed, x_scale, w_scale, config)


def _cpu_block(x, w_packed, x_scale, w_scale, config):
    check_operands(x, w_packed, x_scale, w_scale, config, op=_BLOCK_OP, block=True)
    return run_block_cpu(x, w_packed, x_scale, w_scale)


OPS_LIBRARY.impl("swiglu_packed_fp8_blockwise", _cuda_block, "CUDA")
OPS_LIBRARY.impl("swiglu_packed_fp8_blockwise", _cpu_block, "CPU")


# The dual kernel: W_gate and W_up as stored (no packing), row scales; bf16 y, fast accumulation
_DUAL_OP = "fused_swiglu::swiglu_dual_fp8"
OPS_LIBRARY.define("swiglu_dual_fp8(Tensor x, Tensor w_gate, Tensor w_up, Tensor x_scale, Tensor gate_scale, "
            "Tensor up_scale, str config) -> Tensor")
swiglu_dual_fp8_op = torch.ops.fused_swiglu.swiglu_dual_fp8.default


def _check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config) -> tuple[int, int, int]:
    """The dual operator's ranks, dtypes, sizes and devices; returns (M, I, H)."""
    op = _DUAL_OP
    check_tensors(x=x, w_gate=w_gate, w_up=w_up, x_scale=x_scale, gate_scale=gate_scale, up_scale=up_scale)
    _check_e4m3_matrices(op, x=x, w_gate=w_gate, w_up=w_up)
    M, H = x.shape
    I = w_gate.shape[0]
    for arg, t in (("w_gate", w_gate), ("w_up", w_up)):
        if t.shape[1] != H:
            raise ValueError(f"{op}: {arg} must have x's H={H} columns; got {arg} of shape {tuple(t.shape)}")
    if w_up.shape[0] != I:
        raise ValueError(f"{op}: w_up must have w_gate's I={I} rows; got w_up of shape {tuple(w_up.shape)}")
    if I % BLOCK != 0 or I == 0:
        raise ValueError(f"{op}: I (w_gate.shape[0]) must be a positive multiple of {BLOCK} (16-byte y rows for TMA);"
                         f" got I={I}")
    if H % 16 != 0 or H == 0:
        raise ValueError(f"{op}: H (x.shape[1]) must be a positive multiple of 16 (16-byte e4m3 rows for TMA);"
                         f" got H={H}")
    per_channel = "I (per output channel)"
    for arg, s, n, what in (("x_scale", x_scale, M, "M (per token)"), ("gate_scale", gate_scale, I, per_channel),
                            ("up_scale", up_scale, I, per_channel)):
        _check_row_scale(op, arg, s, n, what)
    if gate_scale.numel() != up_scale.numel():
        raise ValueError(f"{op}: gate_scale and up_scale must be of one kind, both per tensor (1,) or both per output "
                         f"channel ({I},); got shapes {tuple(gate_scale.shape)} and {tuple(up_scale.shape)}")
    _check_on_device(op, x, w_gate=w_gate, w_up=w_up, x_scale=x_scale, gate_scale=gate_scale, up_scale=up_scale)
    resolve(config, M, dual=True)
    return M, I, H


def _dual_weight_scales(gate_scale: torch.Tensor, up_scale: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The weight scales as the dual kernel reads them (fsw_problem.w_scale): the gate scales, then the up
    scales, in one 16-byte aligned fp32 vector, with its stride (0: (gate, up) per tensor; 1: (2I,) per
    output channel). Views of one such vector (``s[:I]``, ``s[I:]``) are read in place; other scales
    are concatenated (one small copy per call)."""
    g, u = gate_scale.reshape(-1), up_scale.reshape(-1)
    n = g.numel()
    if (g.is_contiguous() and u.is_contiguous() and g.data_ptr() % 16 == 0
            and u.untyped_storage().data_ptr() == g.untyped_storage().data_ptr()
            and u.data_ptr() == g.data_ptr() + 4 * n):
        ws = g.as_strided((2 * n,), (1,))
    else:
        ws = torch.cat([g, u])
    return ws, int(n > 1)


@torch.library.register_fake(_DUAL_OP)
def _fake_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config):
    M, I, _ = _check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config)
    return x.new_empty((M, I), dtype=torch.bfloat16)


def _cuda_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config):
    M, I, _ = _check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config)
    y = torch.empty((M, I), dtype=torch.bfloat16, device=x.device)
    if M > 0:
        xs = _scale_ready(x_scale)
        ws, w_stride = _dual_weight_scales(gate_scale, up_scale)
        _launch(resolve(config, M, dual=True), x, w_gate, y, xs, ws, int(xs.numel() > 1), w_stride, w_up=w_up)
    return y


def dequantized_swiglu_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale,
                            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """SwiGLU of the dequantized operands in ``dtype`` (float32 or float64), unrounded: the reference the
    dual kernel is checked against. Same arguments as :func:`fused_swiglu.fp8.swiglu_fp8`; equal to
    :func:`dequantized_swiglu` on the packed form of the same operands (:func:`~fused_swiglu.fp8.pack_weights`)."""
    xd = x.to(dtype) * x_scale.reshape(-1, 1).to(dtype)
    g = xd @ (w_gate.to(dtype) * gate_scale.reshape(-1, 1).to(dtype)).T
    u = xd @ (w_up.to(dtype) * up_scale.reshape(-1, 1).to(dtype)).T
    return torch.nn.functional.silu(g) * u


def _cpu_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config):
    _check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config)
    return dequantized_swiglu_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale).to(torch.bfloat16).contiguous()


OPS_LIBRARY.impl("swiglu_dual_fp8", _cuda_dual, "CUDA")
OPS_LIBRARY.impl("swiglu_dual_fp8", _cpu_dual, "CPU")


def not_differentiable(op: str) -> None:
    """Register a backward for ``op`` that raises: the FP8 operators have no gradient (without it,
    autograd would differentiate the CPU kernel's PyTorch operations, through the e4m3 rounding)."""

    def backward(ctx, *grads):
        raise RuntimeError(f"{op} has no backward: the FP8 kernels are for inference (quantize a bf16 model's "
                           "weights only after training, or call the operator under torch.no_grad())")

    torch.library.register_autograd(op, backward, setup_context=lambda ctx, inputs, output: None)


for _op in ("fused_swiglu::swiglu_packed_fp8", _OUT_OP, _STATIC_OP, _BLOCK_OP, _DUAL_OP):
    not_differentiable(_op)
