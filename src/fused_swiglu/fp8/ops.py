"""The FP8 operators (``torch.ops.fused_swiglu.*``): schemas, fake kernels (torch.compile, CUDA graphs),
CPU kernels (fp32 products of the dequantized operands, one rounding), the argument checks that the
public functions, the fake and the CPU kernels share, and the dequantized references. Their CUDA kernels
are C++ in the operator library (``csrc/torch/fp8_ops.cpp``), with their configs from the one plan
callback (:mod:`fused_swiglu._plans`). Two kernel families and the quantization kernel:

* ``swiglu_packed_fp8(x, w_packed, x_scale?, w_scale, out_scale?, scaling, e4m3_out, config) -> (y, y_scale?)``:
  the packed kernel; ``scaling`` ``"row"`` or ``"block"``; ``x_scale`` None: x bf16/fp16, quantized per
  1 x 128 group first (block scaling); y bfloat16, or e4m3 with ``e4m3_out`` (static ``out_scale``, or one
  scale per 1 x 128 group returned as ``y_scale``; else ``y_scale`` is None).
  ``e4m3_out`` is a bool rather than a dtype, and ``y_scale`` None rather than an empty tensor: the cheaper
  argument and return on every call.
* ``swiglu_dual_fp8(x, w_gate, w_up, x_scale, gate_scale, up_scale, config) -> y``: the dual kernel, row
  scales, bfloat16 y.
* ``quantize_e4m3_groups(t, column_major_scales) -> (q, scale)``.

Public entries: :func:`fused_swiglu.fp8.swiglu_packed_fp8`, :func:`fused_swiglu.fp8.swiglu_fp8`,
:func:`fused_swiglu.fp8.swiglu_packed_fp8_dynamic` and :func:`fused_swiglu.fp8.quantize_e4m3_groups`."""

from __future__ import annotations

import torch

from .._dispatch import PLAIN, call_op, op_first
from .._validate import check_choice, check_tensors
from ..op_library import OPS_LIBRARY, cuda_kernels_from_library
from ..weights import BLOCK, unpack_gate_up
from ..configs.fp8 import SCALINGS, resolve
from .quantize import (E4M3, E4M3_MAX, GROUP, K_BLOCK, PACKED_ROWS, m_major_scales, quantize_groups_torch,
                       reciprocal)

PACKED_OP = "fused_swiglu::swiglu_packed_fp8"
DUAL_OP = "fused_swiglu::swiglu_dual_fp8"
QUANTIZE_OP = "fused_swiglu::quantize_e4m3_groups"
OPS_LIBRARY.define("swiglu_packed_fp8(Tensor x, Tensor w_packed, Tensor? x_scale, Tensor w_scale, Tensor? out_scale, "
                   "str scaling, bool e4m3_out, str config) -> (Tensor, Tensor?)")
OPS_LIBRARY.define("swiglu_dual_fp8(Tensor x, Tensor w_gate, Tensor w_up, Tensor x_scale, Tensor gate_scale, "
                   "Tensor up_scale, str config) -> Tensor")
OPS_LIBRARY.define("quantize_e4m3_groups(Tensor t, bool column_major_scales) -> (Tensor, Tensor)")
NAMES = ("swiglu_packed_fp8", "swiglu_dual_fp8", "quantize_e4m3_groups")
cuda_kernels_from_library(*NAMES)
swiglu_packed_fp8_op = torch.ops.fused_swiglu.swiglu_packed_fp8.default
swiglu_dual_fp8_op = torch.ops.fused_swiglu.swiglu_dual_fp8.default
quantize_e4m3_groups_op = torch.ops.fused_swiglu.quantize_e4m3_groups.default
OUT_DTYPES = (torch.bfloat16, E4M3)
_X_DTYPES = (torch.bfloat16, torch.float16)  # x quantized by the operator (x_scale None)


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


def _check_block_scale(op: str, arg: str, s: torch.Tensor, shape: tuple[int, int], what: str) -> None:
    """A block-scaling scale: fp32 of ``shape``."""
    if s.dtype != torch.float32:
        raise TypeError(f"{op}: {arg} must be torch.float32; got {arg}.dtype={s.dtype}")
    if tuple(s.shape) != shape:
        raise ValueError(f"{op}: {arg} must have shape {shape} = {what}; got shape {tuple(s.shape)}")


def _check_on_device(op: str, x: torch.Tensor, **named: torch.Tensor) -> None:
    """Each named tensor on x's device."""
    for arg, t in named.items():
        if t.device != x.device:
            raise ValueError(f"{op}: {arg} must be on x's device {x.device}; got {arg} on {t.device}")


def _check_x(op: str, x: torch.Tensor, quantized_here: bool) -> None:
    """x 2-D e4m3, or 2-D bf16/fp16 where the operator quantizes it (``x_scale`` None)."""
    if not quantized_here:
        _check_e4m3_matrices(op, x=x)
        return
    if x.dtype not in _X_DTYPES:
        raise TypeError(f"{op}: x must be torch.bfloat16 or torch.float16 where x_scale is None (quantized here per "
                        f"1 x 128 group); got x.dtype={x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{op}: x must be 2-D (M, H); got shape {tuple(x.shape)}")


def check_packed(x, w_packed, x_scale, w_scale, out_scale=None, scaling: str = "row", e4m3_out: bool = False,
                 config: str = "", op: str = PACKED_OP) -> tuple[int, int, int]:
    """The packed family's arguments (as ``swiglu_packed_fp8``'s schema): ranks, dtypes, sizes, devices,
    the combination of scaling, output dtype and scales, and the config; returns (M, I, H).

    Raises:
        TypeError: a dtype, ``e4m3_out`` not a bool, or an argument not a dense tensor. ValueError: the rest.
    """
    check_tensors(x=x, w_packed=w_packed, w_scale=w_scale, **({} if x_scale is None else {"x_scale": x_scale}),
                  **({} if out_scale is None else {"out_scale": out_scale}))
    check_choice("scaling", scaling, SCALINGS)
    if not isinstance(e4m3_out, bool):
        raise TypeError(f"{op}: e4m3_out must be a bool (True: e4m3 y); got e4m3_out={e4m3_out!r}")
    block = scaling == "block"
    if block and e4m3_out:
        raise ValueError(f"{op}: scaling='block' writes bfloat16 y (e4m3 y is computed with scaling='row')")
    if out_scale is not None and not e4m3_out:
        raise ValueError(f"{op}: out_scale is for e4m3 y (out_dtype=torch.float8_e4m3fn); got it with bfloat16 y")
    if x_scale is None and not block:
        raise ValueError(f"{op}: x_scale may be None only with scaling='block' (x bf16/fp16, quantized per 1 x 128 "
                         "group by the operator)")
    _check_x(op, x, x_scale is None)
    _check_e4m3_matrices(op, w_packed=w_packed)
    M, H = x.shape
    rows, Hw = w_packed.shape
    if Hw != H:
        raise ValueError(f"{op}: w_packed must have x's H={H} columns; got w_packed of shape {tuple(w_packed.shape)}")
    if rows % (2 * BLOCK) != 0 or rows == 0:
        raise ValueError(f"{op}: w_packed must have 2I rows with I a positive multiple of {BLOCK}; got {rows} rows")
    if H % 16 != 0 or H == 0:
        raise ValueError(f"{op}: H (x.shape[1]) must be a positive multiple of 16 (16-byte e4m3 rows for TMA); got H={H}")
    if block:
        kb = -(-H // K_BLOCK)
        if x_scale is not None:
            _check_block_scale(op, "x_scale", x_scale, (M, kb), "(M, ceil(H / 128)), one per 1 x 128 group of each token")
        _check_block_scale(op, "w_scale", w_scale, (rows // PACKED_ROWS, kb),
                           "(2I / 8, ceil(H / 128)) from fused_swiglu.fp8.pack_weights_blockwise")
    else:
        _check_row_scale(op, "x_scale", x_scale, M, "M (per token)")
        _check_row_scale(op, "w_scale", w_scale, rows, "2I (per weight row)")
    if out_scale is not None and (out_scale.dtype != torch.float32 or out_scale.numel() != 1):
        raise ValueError(f"{op}: out_scale must be one fp32 value of shape (1,); got dtype {out_scale.dtype}, "
                         f"shape {tuple(out_scale.shape)}")
    named = {"w_packed": w_packed, "w_scale": w_scale, "x_scale": x_scale, "out_scale": out_scale}
    _check_on_device(op, x, **{arg: t for arg, t in named.items() if t is not None})
    if e4m3_out and rows % 32 != 0:
        raise ValueError(f"{op}: e4m3 y needs I a multiple of 16 (16-byte e4m3 rows for TMA); got I={rows // 2}")
    resolve(config, M, e4m3_out, block)
    return M, rows // 2, H


def check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config: str = "") -> tuple[int, int, int]:
    """The dual operator's ranks, dtypes, sizes and devices; returns (M, I, H).

    Raises:
        TypeError: a dtype, or an argument not a dense tensor. ValueError: the rest.
    """
    op = DUAL_OP
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


def check_quantize_input(t: torch.Tensor) -> None:
    """The quantization operator's input: a 2-D bf16/fp16 tensor (any strides)."""
    check_tensors(t=t)
    if t.dtype not in _X_DTYPES:
        raise TypeError(f"{QUANTIZE_OP}: t must be torch.bfloat16 or torch.float16; got t.dtype={t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{QUANTIZE_OP}: t must be 2-D (rows, cols); got shape {tuple(t.shape)}")


def run_checked(check, op, x, *rest) -> object:
    """``call_op(op, x, *rest)`` (:func:`fused_swiglu._dispatch.call_op`) with the argument checks ``check()``
    before it, or, for an eager call on a plain CUDA tensor x, after it only where the operator raises
    (:func:`fused_swiglu._dispatch.op_first`: its C++ kernel checks every rule itself, and the Python checks
    then name the argument and the rule with the documented TypeError or ValueError; an error they find nothing
    wrong behind, e.g. a CUDA error, is raised as it is). An empty x (M = 0) takes the checks first: the
    operator returns at once without asking for a plan, so it would not check the config."""
    if type(x) in PLAIN and x.is_cuda and x.dim() == 2 and x.shape[0] > 0 and not torch.compiler.is_compiling():
        return op_first(check, call_op, op, x, *rest)
    check()
    return call_op(op, x, *rest)


@torch.library.register_fake(PACKED_OP)
def _fake_packed(x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, config):
    M, I, _ = check_packed(x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, config)
    y_scale = x.new_empty((M, -(-I // GROUP)), dtype=torch.float32) if e4m3_out and out_scale is None else None
    return x.new_empty((M, I), dtype=E4M3 if e4m3_out else torch.bfloat16), y_scale


@torch.library.register_fake(DUAL_OP)
def _fake_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config):
    M, I, _ = check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config)
    return x.new_empty((M, I), dtype=torch.bfloat16)


@torch.library.register_fake(QUANTIZE_OP)
def _fake_quantize(t, column_major_scales):
    check_quantize_input(t)
    rows, cols = t.shape
    groups = -(-cols // GROUP)
    scale = (m_major_scales(rows, groups, t)[:rows] if column_major_scales
             else t.new_empty((rows, groups), dtype=torch.float32))
    return t.new_empty((rows, cols), dtype=E4M3), scale


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


def _cpu_packed(x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, config):
    M, I, _ = check_packed(x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, config)
    if x_scale is None:
        x, x_scale = quantize_groups_torch(x)
    v = dequantized_swiglu(x, w_packed, x_scale, w_scale, scaling=scaling)
    if not e4m3_out:
        return v.to(torch.bfloat16).contiguous(), None
    if out_scale is None:
        return quantize_groups_torch(v)
    return (v * reciprocal(out_scale.reshape(1, 1))).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).contiguous(), None


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
    check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config)
    return dequantized_swiglu_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale).to(torch.bfloat16).contiguous()


def _cpu_quantize(t, column_major_scales):
    check_quantize_input(t)
    return quantize_groups_torch(t, column_major_scales)


OPS_LIBRARY.impl("swiglu_packed_fp8", _cpu_packed, "CPU")
OPS_LIBRARY.impl("swiglu_dual_fp8", _cpu_dual, "CPU")
OPS_LIBRARY.impl("quantize_e4m3_groups", _cpu_quantize, "CPU")


def not_differentiable(op: str) -> None:
    """Register a backward for ``op`` that raises: the FP8 operators have no gradient (without it,
    autograd would differentiate the CPU kernel's PyTorch operations, through the e4m3 rounding)."""

    def backward(ctx, *grads):
        raise RuntimeError(f"{op} has no backward: the FP8 kernels are for inference (quantize a bf16 model's "
                           "weights only after training, or call the operator under torch.no_grad())")

    torch.library.register_autograd(op, backward, setup_context=lambda ctx, inputs, output: None)


for _op in (PACKED_OP, DUAL_OP, QUANTIZE_OP):
    not_differentiable(_op)
