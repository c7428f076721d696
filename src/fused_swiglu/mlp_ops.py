"""The training operators of the whole SwiGLU MLP (torch.library), called by :mod:`fused_swiglu.mlp`.

``z = (silu(x W_gate^T) * (x W_up^T)) W_down^T`` for x ``(M, H)``, W_gate and W_up ``(I, H)``,
W_down ``(H, I)``, all of one dtype (CUDA: bf16 / fp16).

``fused_swiglu::mlp_forward(x, w_gate, w_up, w_down) -> (z, y, gu)``
    z ``(M, H)``; y ``(M, I)``, the SwiGLU output; gu ``(M, 2I)`` = ``[g | u]``, the gate and up
    pre-activations ``x W_gate^T`` and ``x W_up^T`` rounded once to the dtype: one call of
    ``fused_swiglu::swiglu_dual_store`` (:mod:`fused_swiglu.training_ops`); z is a PyTorch GEMM.
``fused_swiglu::mlp_forward_packed(x, w_packed, w_down, layout) -> (z, y, gu)``
    The same with w_packed ``(2I, H)``: ``"interleaved"`` (:func:`fused_swiglu.weights.pack_gate_up`;
    ``swiglu_packed_store``) or ``"concatenated"`` (``[W_gate; W_up]``: ``swiglu_dual_store`` on its
    two row slices).

Autograd of both forwards (only the gradients an input needs are computed): ``dW_down = dz^T y``;
``dgu = fused_swiglu::dswiglu(dz, W_down, gu)``; ``dx = dg W_gate + du W_up`` (packed: ``dgu W_packed``, one GEMM);
``[dW_gate; dW_up] = dgu^T x``, one GEMM whose row halves are the two gradients (the concatenated
layout's gradient as it is; the interleaved layout's from dgu reordered to that layout, one copy).
y and gu are saved for the backward and are not differentiable. A backward that records a graph
itself (``create_graph=True``) raises RuntimeError: this path keeps no graph through g and u; the
recomputing path (``swiglu_mlp(..., recompute=True)``) supports it.

On the CPU the same operators compute the same quantities with fp32 (float64 for float64 inputs)
PyTorch products and the same roundings; fake kernels give shapes, dtypes and contiguous strides
(torch.compile).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import training_ops
from .training_ops import check_operands, dswiglu
from .weights import BLOCK, LAYOUTS


def _forward_dual(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    y, gu = training_ops.swiglu_dual_store(x, w_gate, w_up, "")
    return y @ w_down.T, y, gu


def _forward_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> tuple[Tensor, Tensor, Tensor]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}; got layout={layout!r}")
    if layout == "interleaved":
        y, gu = training_ops.swiglu_packed_store(x, w_packed, "")
    else:  # [W_gate; W_up]: the dual kernel on its two row slices
        I = w_packed.shape[0] // 2
        y, gu = training_ops.swiglu_dual_store(x, w_packed[:I], w_packed[I:], "")
    return y @ w_down.T, y, gu


def _dim(t: Tensor, d: int) -> int | None:
    return t.shape[d] if t.dim() == 2 else None


def _check_forward(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> None:
    H, I = _dim(x, 1), _dim(w_gate, 0)
    check_operands("mlp_forward", H, I, {"x": (None, None), "w_gate": (None, H), "w_up": (I, H), "w_down": (H, I)},
                   x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)


def _check_forward_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"fused_swiglu::mlp_forward_packed: layout must be one of {', '.join(map(repr, LAYOUTS))}; "
                         f"got layout={layout!r}")
    H, I = _dim(x, 1), _dim(w_down, 1)
    rows = None if I is None else 2 * I
    check_operands("mlp_forward_packed", H, I, {"x": (None, None), "w_packed": (rows, H), "w_down": (H, None)},
                   x=x, w_packed=w_packed, w_down=w_down)


@torch.library.custom_op("fused_swiglu::mlp_forward", mutates_args=())
def mlp_forward(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    _check_forward(x, w_gate, w_up, w_down)
    return _forward_dual(x, w_gate, w_up, w_down)


@torch.library.custom_op("fused_swiglu::mlp_forward_packed", mutates_args=())
def mlp_forward_packed(x: Tensor, w_packed: Tensor, w_down: Tensor, layout: str) -> tuple[Tensor, Tensor, Tensor]:
    _check_forward_packed(x, w_packed, w_down, layout)
    return _forward_packed(x, w_packed, w_down, layout)


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


def _down_grads(dz: Tensor, w_down: Tensor, y: Tensor, gu: Tensor, need_dgu: bool, need_down: bool):
    """(dgu, dW_down), None where not needed; dgu through the dswiglu operator."""
    dz = dz.contiguous()
    dw_down = dz.T @ y if need_down else None  # (H, I)
    dgu = None
    if need_dgu:  # (M, 2I)
        dgu = dswiglu(dz, w_down, gu)
    return dgu, dw_down


def _mlp_backward(ctx, dz, _dy, _dgu):
    if dz is None:
        return None, None, None, None
    _no_double_backward()
    x, w_gate, w_up, w_down, y, gu = ctx.saved_tensors
    nx, ng, nu, nd = ctx.needs_input_grad
    dgu, dw_down = _down_grads(dz, w_down, y, gu, nx or ng or nu, nd)
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


def _mlp_packed_backward(ctx, dz, _dy, _dgu):
    if dz is None:
        return None, None, None, None
    _no_double_backward()
    x, w_packed, w_down, y, gu = ctx.saved_tensors
    nx, nw, nd = ctx.needs_input_grad[:3]
    dgu, dw_down = _down_grads(dz, w_down, y, gu, nx or nw, nd)
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
        return _mlp_backward(ctx, dz, None, None)


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
        return _mlp_packed_backward(ctx, dz, None, None)


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
