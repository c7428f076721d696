"""The training operators of the whole SwiGLU MLP (torch.library), called by :mod:`fused_swiglu.mlp`.

``z = (silu(x W_gate^T) * (x W_up^T)) W_down^T`` for x ``(M, H)``, W_gate and W_up ``(I, H)``,
W_down ``(H, I)``, all of one dtype (CUDA: bf16 / fp16).

``fused_swiglu::mlp_forward(x, w_gate, w_up, w_down) -> (z, y, gu)``
    z ``(M, H)``; y ``(M, I)``, the SwiGLU output; gu ``(M, 2I)`` = ``[g | u]``, the gate and up
    pre-activations ``x W_gate^T`` and ``x W_up^T`` rounded once to the dtype. CUDA: one launch of the
    dual kernel's store variant writes y, g and u from the same fp32 accumulators; z is a cuBLAS GEMM.
``fused_swiglu::mlp_forward_packed(x, w_packed, w_down, layout) -> (z, y, gu)``
    The same with w_packed ``(2I, H)``: ``"interleaved"`` (:func:`fused_swiglu.weights.pack_gate_up`;
    the packed kernel's store variant) or ``"concatenated"`` (``[W_gate; W_up]``: the dual kernel on
    its two row slices).
``fused_swiglu::dswiglu(dz, w_down, gu) -> dgu``
    dgu ``(M, 2I)`` = ``[dg | du]``: the gradients of ``y = silu(g) * u`` at ``dY = dz W_down``,
    computed from the fp32 dY and rounded once. CUDA: one GEMM with a dSwiGLU epilogue, so dY is
    never written.

Autograd of both forwards (only the gradients an input needs are computed): ``dW_down = dz^T y``;
``dgu = dswiglu(dz, W_down, gu)``; ``dx = dg W_gate + du W_up`` (packed: ``dgu W_packed``, one GEMM);
``[dW_gate; dW_up] = dgu^T x``, one GEMM whose row halves are the two gradients (the concatenated
layout's gradient as it is; the interleaved layout's from dgu reordered to that layout, one copy).
y and gu are saved for the backward and are not differentiable. A backward that records a graph
itself (``create_graph=True``) raises RuntimeError: this path keeps no graph through g and u; the
recomputing path (``swiglu_mlp(..., recompute=True)``) supports it.

The CPU kernels compute the same quantities with fp32 (float64 for float64 inputs) PyTorch products
and the same roundings; the fake kernels give shapes, dtypes and contiguous strides (torch.compile).
Operands the CUDA kernels cannot read with TMA (non-unit column stride, a row stride that is not a
multiple of 8 elements, a start not 16-byte aligned) are copied once.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _lib, catalog
from .reference import ieee_fp32_matmul
from .weights import BLOCK, LAYOUTS, unpack_gate_up


# Which training config runs: (kernel, wide) -> (tile_n, cluster_m) of a catalog.TRAINING_CONFIGS
# entry; wide = H >= WIDE_H, where the inference choice itself (fused_swiglu.configs) takes 1 x 1
# clusters and, for the packed kernel, 128 x 192 tiles at M >= 2048.
WIDE_H = 3584
TRAINING_TILES = {
    ("packed_store", False): (128, 2), ("packed_store", True): (192, 1),
    ("dual_store", False): (128, 2), ("dual_store", True): (128, 1),
    ("dswiglu", False): (128, 1), ("dswiglu", True): (128, 1),
}


@functools.lru_cache(maxsize=None)
def config_name(kernel: str, dtype: torch.dtype, H: int) -> str:
    """The library config of training kernel ``kernel`` (``"dual_store"``, ``"packed_store"``,
    ``"dswiglu"``) in ``dtype`` (bf16 / fp16) for hidden size ``H`` (:data:`TRAINING_TILES`), e.g.
    ``dswiglu_pingpong_128x128x64_1x1_bf16``."""
    tile_n, cluster_m = TRAINING_TILES[kernel, H >= WIDE_H]
    entry = next(e for e in catalog.TRAINING_CONFIGS if e[0] == kernel and e[3] == tile_n and e[5] == cluster_m)
    return catalog.name_of(*entry, _lib.DTYPE_NAMES[_lib.DTYPE_CODES[dtype]])


def _tma(t: Tensor) -> Tensor:
    """t as the kernels read it: unit column stride, row stride a multiple of 8, 16-byte aligned."""
    if t.stride(-1) == 1 and t.stride(0) % 8 == 0 and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _halves(t: Tensor) -> tuple[Tensor, Tensor]:
    n = t.shape[1] // 2
    return t[:, :n], t[:, n:]


def _accumulate(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _preactivations_cpu(x: Tensor, w_gate: Tensor, w_up: Tensor) -> tuple[Tensor, Tensor]:
    """The fp32 (float64) gate and up products, unrounded."""
    acc = _accumulate(x.dtype)
    with ieee_fp32_matmul():
        return x.to(acc) @ w_gate.to(acc).T, x.to(acc) @ w_up.to(acc).T


def _launch(config: str, like: Tensor, *args: int) -> None:
    """One kernel launch on the current stream of ``like``'s device (:meth:`fused_swiglu._lib.Library.launch`
    arguments after the config, dtype and device)."""
    device = like.get_device()
    lib = _lib.library()
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            lib.launch(config, like.dtype, device, *args)
    else:
        lib.launch(config, like.dtype, device, *args)


def _forward_cuda(kernel: str, x: Tensor, w: Tensor, w_up: Tensor | None, w_down: Tensor) -> tuple[Tensor, Tensor]:
    M, I = x.shape[0], w_down.shape[1]
    y = x.new_empty((M, I))
    gu = x.new_empty((M, 2 * I))
    if M > 0 and I > 0:
        x, w = _tma(x), _tma(w)
        if w_up is not None:
            w_up = _tma(w_up)
        up, ld_up = (w_up.data_ptr(), w_up.stride(0)) if w_up is not None else (0, 0)
        g = gu.data_ptr()  # g = gu[:, :I] and u = gu[:, I:], addressed without making the views
        _launch(config_name(kernel, x.dtype, x.shape[1]), x, M, I, x.shape[1], x.data_ptr(), x.stride(0), w.data_ptr(),
                w.stride(0), up, ld_up, y.data_ptr(), I, g, g + I * x.element_size(), 2 * I)
    return y, gu


def _forward_cpu(x: Tensor, w_gate: Tensor, w_up: Tensor) -> tuple[Tensor, Tensor]:
    g, u = _preactivations_cpu(x, w_gate, w_up)
    return (F.silu(g) * u).to(x.dtype), torch.cat([g, u], dim=1).to(x.dtype)


def _forward_dual(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    if x.is_cuda:
        y, gu = _forward_cuda("dual_store", x, w_gate, w_up, w_down)
    else:
        y, gu = _forward_cpu(x, w_gate, w_up)
    return y @ w_down.T, y, gu


def _forward_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> tuple[Tensor, Tensor, Tensor]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}; got layout={layout!r}")
    I = w_packed.shape[0] // 2
    if x.is_cuda:
        if layout == "interleaved":
            y, gu = _forward_cuda("packed_store", x, w_packed, None, w_down)
        else:
            y, gu = _forward_cuda("dual_store", x, w_packed[:I], w_packed[I:], w_down)
    else:
        w_gate, w_up = unpack_gate_up(w_packed, layout=layout)
        y, gu = _forward_cpu(x, w_gate, w_up)
    return y @ w_down.T, y, gu


def _dswiglu(dz: Tensor, w_down: Tensor, gu: Tensor) -> Tensor:
    M, I = dz.shape[0], w_down.shape[1]
    if dz.is_cuda:
        dgu = dz.new_empty((M, 2 * I))
        if M > 0 and I > 0:
            dz, w_down, gu = _tma(dz), _tma(w_down), _tma(gu)
            g, d, e = gu.data_ptr(), dgu.data_ptr(), dz.element_size()  # the halves at column offset I
            _launch(config_name("dswiglu", dz.dtype, dz.shape[1]), dz, M, I, dz.shape[1], dz.data_ptr(), dz.stride(0),
                    w_down.data_ptr(), w_down.stride(0), 0, 0, 0, 0, g, g + I * e, gu.stride(0), d, d + I * e, 2 * I)
        return dgu
    acc = _accumulate(dz.dtype)
    with ieee_fp32_matmul():
        dy = dz.to(acc) @ w_down.to(acc)
    g, u = (h.to(acc) for h in _halves(gu))
    s = torch.sigmoid(g)
    return torch.cat([dy * u * (s * (1 + g * (1 - s))), dy * (g * s)], dim=1).to(dz.dtype)


def _check_operands(op: str, H: int | None, I: int | None, shapes: dict[str, tuple[int | None, ...]],
                    **named: Tensor) -> None:
    """The operators' own checks, so that a direct call cannot hand the kernels inconsistent operands:
    every operand 2-D of ``shapes[arg]`` (None: any size), floating point, of the first operand's
    dtype and device; on CUDA bf16 / fp16 with H and I multiples of 8 (16-byte TMA rows).

    Raises:
        TypeError: a dtype (not floating point, not bf16 / fp16 on CUDA, or not the first operand's).
        ValueError: a rank or shape, a device, H or I not a multiple of 8 on CUDA.
    """
    first_arg, first = next(iter(named.items()))
    for arg, t in named.items():
        want = shapes[arg]
        if t.dim() != 2 or any(w is not None and w != n for w, n in zip(want, t.shape)):
            desc = ", ".join("?" if w is None else str(w) for w in want)
            raise ValueError(f"fused_swiglu::{op}: {arg} must be 2-D ({desc}); got {arg} of shape {tuple(t.shape)}")
        if not t.is_floating_point() or t.dtype != first.dtype:
            raise TypeError(f"fused_swiglu::{op}: {arg} must be a floating-point tensor of {first_arg}'s dtype "
                            f"{first.dtype}; got {arg}.dtype={t.dtype}")
        if t.device != first.device:
            raise ValueError(f"fused_swiglu::{op}: {arg} must be on {first_arg}'s device {first.device}; got {arg} "
                             f"on {t.device}")
    if first.is_cuda:
        if first.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"fused_swiglu::{op}: the CUDA kernels take torch.bfloat16 or torch.float16; got "
                            f"{first_arg}.dtype={first.dtype}")
        if H % 8 or H == 0 or I % 8:
            raise ValueError(f"fused_swiglu::{op}: H and I must be multiples of 8 (H > 0) for 16-byte TMA rows; got "
                             f"H={H}, I={I}")


def _dim(t: Tensor, d: int) -> int | None:
    return t.shape[d] if t.dim() == 2 else None


def _check_forward(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> None:
    H, I = _dim(x, 1), _dim(w_gate, 0)
    _check_operands("mlp_forward", H, I, {"x": (None, None), "w_gate": (None, H), "w_up": (I, H), "w_down": (H, I)},
                    x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)


def _check_forward_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"fused_swiglu::mlp_forward_packed: layout must be one of {', '.join(map(repr, LAYOUTS))}; "
                         f"got layout={layout!r}")
    H, I = _dim(x, 1), _dim(w_down, 1)
    rows = None if I is None else 2 * I
    _check_operands("mlp_forward_packed", H, I, {"x": (None, None), "w_packed": (rows, H), "w_down": (H, None)},
                    x=x, w_packed=w_packed, w_down=w_down)


def _check_dswiglu(dz: Tensor, w_down: Tensor, gu: Tensor) -> None:
    M, H, I = _dim(dz, 0), _dim(dz, 1), _dim(w_down, 1)
    cols = None if I is None else 2 * I
    _check_operands("dswiglu", H, I, {"dz": (None, None), "w_down": (H, None), "gu": (M, cols)},
                    dz=dz, w_down=w_down, gu=gu)


@torch.library.custom_op("fused_swiglu::mlp_forward", mutates_args=())
def mlp_forward(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    _check_forward(x, w_gate, w_up, w_down)
    return _forward_dual(x, w_gate, w_up, w_down)


@torch.library.custom_op("fused_swiglu::mlp_forward_packed", mutates_args=())
def mlp_forward_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> tuple[Tensor, Tensor, Tensor]:
    _check_forward_packed(x, w_packed, w_down, layout)
    return _forward_packed(x, w_packed, w_down, layout)


@torch.library.custom_op("fused_swiglu::dswiglu", mutates_args=())
def dswiglu(dz: Tensor, w_down: Tensor, gu: Tensor) -> Tensor:
    _check_dswiglu(dz, w_down, gu)
    return _dswiglu(dz, w_down, gu)


@mlp_forward.register_fake
def _mlp_forward_fake(x, w_gate, w_up, w_down):
    _check_forward(x, w_gate, w_up, w_down)
    M, I = x.shape[0], w_gate.shape[0]
    return x.new_empty((M, w_down.shape[0])), x.new_empty((M, I)), x.new_empty((M, 2 * I))


@mlp_forward_packed.register_fake
def _mlp_forward_packed_fake(x, w_packed, w_down, layout):
    _check_forward_packed(x, w_packed, w_down, layout)
    M, I = x.shape[0], w_packed.shape[0] // 2
    return x.new_empty((M, w_down.shape[0])), x.new_empty((M, I)), x.new_empty((M, 2 * I))


@dswiglu.register_fake
def _dswiglu_fake(dz, w_down, gu):
    _check_dswiglu(dz, w_down, gu)
    return dz.new_empty((dz.shape[0], 2 * w_down.shape[1]))


def _interleave(dgu: Tensor) -> Tensor:
    """``[dg | du]`` (M, 2I) in the interleaved layout: blocks of 8 dg columns, then the 8 matching du."""
    M, I = dgu.shape[0], dgu.shape[1] // 2
    return dgu.view(M, 2, I // BLOCK, BLOCK).transpose(1, 2).reshape(M, 2 * I)


def _no_double_backward() -> None:
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        raise RuntimeError(
            "fused_swiglu.swiglu_mlp: backward with create_graph=True is not supported on the stored "
            "pre-activation path (it keeps no graph through the gate and up products); call "
            "swiglu_mlp(..., recompute=True) for double backward"
        )


def _setup_context(ctx, inputs, output):
    _z, y, gu = output
    ctx.mark_non_differentiable(y, gu)
    ctx.set_materialize_grads(False)  # no zero gradients are made for y and gu
    ctx.save_for_backward(*inputs, y, gu)


def _setup_packed_context(ctx, inputs, output):
    x, w_packed, w_down, layout = inputs
    _setup_context(ctx, (x, w_packed, w_down), output)
    ctx.layout = layout


def _down_grads(dz: Tensor, w_down: Tensor, y: Tensor, gu: Tensor, need_dgu: bool, need_down: bool, eager: bool):
    """(dgu, dW_down), None where not needed. dgu through the operator (``eager`` False: the operators'
    own backward, which torch.compile traces) or the kernel itself (the eager autograd.Functions)."""
    dz = dz.contiguous()
    dw_down = dz.T @ y if need_down else None  # (H, I)
    dgu = None
    if need_dgu:  # (M, 2I)
        dgu = _dswiglu(dz, w_down, gu) if eager else dswiglu(dz, w_down, gu)
    return dgu, dw_down


def _mlp_backward(ctx, dz, _dy, _dgu, eager: bool = False):
    if dz is None:
        return None, None, None, None
    _no_double_backward()
    x, w_gate, w_up, w_down, y, gu = ctx.saved_tensors
    nx, ng, nu, nd = ctx.needs_input_grad
    dgu, dw_down = _down_grads(dz, w_down, y, gu, nx or ng or nu, nd, eager)
    dx = dw_gate = dw_up = None
    if dgu is not None:
        I = w_gate.shape[0]
        dg, du = dgu[:, :I], dgu[:, I:]
        if nx:
            dx = (dg @ w_gate).addmm_(du, w_up)  # (M, H): the second product accumulated in place
        if ng and nu:
            dw = dgu.T @ x  # (2I, H): [dW_gate; dW_up], one GEMM
            dw_gate, dw_up = dw[:I], dw[I:]
        elif ng:
            dw_gate = dg.T @ x
        elif nu:
            dw_up = du.T @ x
    return dx, dw_gate, dw_up, dw_down


def _mlp_packed_backward(ctx, dz, _dy, _dgu, eager: bool = False):
    if dz is None:
        return None, None, None, None
    _no_double_backward()
    x, w_packed, w_down, y, gu = ctx.saved_tensors
    nx, nw, nd = ctx.needs_input_grad[:3]
    dgu, dw_down = _down_grads(dz, w_down, y, gu, nx or nw, nd, eager)
    dx = dw_packed = None
    if dgu is not None:
        if ctx.layout == "interleaved":
            dgu = _interleave(dgu)  # w_packed's row order
        dx = dgu @ w_packed if nx else None  # (M, H)
        dw_packed = dgu.T @ x if nw else None  # (2I, H), in w_packed's layout
    return dx, dw_packed, dw_down, None


mlp_forward.register_autograd(_mlp_backward, setup_context=_setup_context)
mlp_forward_packed.register_autograd(_mlp_packed_backward, setup_context=_setup_packed_context)


class _EagerMlp(torch.autograd.Function):
    """mlp_forward's kernels and backward without the operator's dispatch (eager calls)."""

    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down):
        z, y, gu = _forward_dual(x, w_gate, w_up, w_down)
        ctx.save_for_backward(x, w_gate, w_up, w_down, y, gu)
        return z

    @staticmethod
    def backward(ctx, dz):
        return _mlp_backward(ctx, dz, None, None, eager=True)


class _EagerMlpPacked(torch.autograd.Function):
    """mlp_forward_packed's kernels and backward without the operator's dispatch (eager calls)."""

    @staticmethod
    def forward(ctx, x, w_packed, w_down, layout):
        z, y, gu = _forward_packed(x, w_packed, w_down, layout)
        ctx.save_for_backward(x, w_packed, w_down, y, gu)
        ctx.layout = layout
        return z

    @staticmethod
    def backward(ctx, dz):
        return _mlp_packed_backward(ctx, dz, None, None, eager=True)


def mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """z of ``fused_swiglu::mlp_forward``, differentiable: the operator under torch.compile, the same
    kernels and backward through an autograd.Function in eager (less host time per call)."""
    if torch.compiler.is_compiling():
        return mlp_forward(x, w_gate, w_up, w_down)[0]
    return _EagerMlp.apply(x, w_gate, w_up, w_down)


def mlp_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> Tensor:
    """z of ``fused_swiglu::mlp_forward_packed``, as :func:`mlp`."""
    if torch.compiler.is_compiling():
        return mlp_forward_packed(x, w_packed, w_down, layout)[0]
    return _EagerMlpPacked.apply(x, w_packed, w_down, layout)
