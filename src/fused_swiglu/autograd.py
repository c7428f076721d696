"""Backward of the fused SwiGLU ops, by PyTorch matrix products.

The forward kernels never write the gate and up products ``g = x W_gate^T`` and ``u = x W_up^T``
(not writing them is what fusing buys), so the backward recomputes them with cuBLAS GEMMs in the
input dtype and then follows PyTorch's eager autograd of ``F.silu(g) * u`` step by step, with the
same fused elementwise kernels (``silu``, ``silu_backward``) and the same roundings:

    y  = silu(g) * u,          silu(v) = v * sigmoid(v)
    du = dy * silu(g)
    dg = silu_backward(dy * u, g) = (dy * u) * sigmoid(g) * (1 + g * (1 - sigmoid(g)))
    dx = dg @ W_gate + du @ W_up,   dW_gate = dg^T @ x,   dW_up = du^T @ x

(the derivative of v * sigmoid(v), with sigmoid' = sigmoid * (1 - sigmoid)). So the gradients equal
those of eager PyTorch on the same inputs, up to the order of the GEMMs' fp32 sums. The packed op
keeps the interleaved layout of :func:`fused_swiglu.weights.pack_gate_up` throughout: one GEMM
recomputes ``[g | u]`` interleaved, the elementwise steps write ``[dg | du]`` interleaved, one GEMM
gives ``dx`` and one gives ``dW_packed`` already in the packed layout. Only the gradients an input
needs are computed (``ctx.needs_input_grad``).

Cost: eager autograd's backward plus the recomputation of g and u, i.e. one extra forward's worth
of GEMM FLOPs (4·M·H·I); it holds two ``(M, I)`` products and two ``(M, I)`` gradients at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .weights import BLOCK


def swiglu_input_grads(
    dy: torch.Tensor, g: torch.Tensor, u: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``y = silu(g) * u`` with respect to g and u, as eager autograd computes them.

    With grad mode on (a backward with ``create_graph=True``) the same quantities are formed from
    differentiable operations instead (``aten.silu_backward`` has no derivative, and ``out=``
    writes are not recorded), so second derivatives work; ``out`` is then ignored.

    Args:
        dy, g, u: tensors of one shape and dtype (any strides).
        out: optional ``(dg, du)`` tensors (e.g. strided views of one buffer) to write into.

    Returns:
        ``(dg, du)`` in that dtype (written into ``out`` when given and grad mode is off).
    """
    if torch.is_grad_enabled():
        s = torch.sigmoid(g)
        return dy * u * (s * (1 + g * (1 - s))), dy * (g * s)
    dg, du = out if out is not None else (None, None)
    du = torch.mul(dy, F.silu(g), out=du) if du is not None else dy * F.silu(g)
    dyu = dy * u
    if dg is not None:
        return torch.ops.aten.silu_backward.grad_input(dyu, g, grad_input=dg), du
    return torch.ops.aten.silu_backward(dyu, g), du


def dual_backward(
    dy: torch.Tensor, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, needs: tuple[bool, bool, bool]
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Gradients of ``silu(x @ w_gate.T) * (x @ w_up.T)``.

    Args:
        dy: ``(M, I)`` gradient of the output. x: ``(M, H)``. w_gate, w_up: ``(I, H)``. One dtype.
        needs: whether x, w_gate, w_up need a gradient.

    Returns:
        ``(dx (M, H), dw_gate (I, H), dw_up (I, H))`` in the input dtype, None where not needed.
    """
    if not any(needs):
        return None, None, None
    g = x @ w_gate.T  # (M, I)
    u = x @ w_up.T  # (M, I)
    dg, du = swiglu_input_grads(dy, g, u)
    dx = torch.addmm(dg @ w_gate, du, w_up) if needs[0] else None  # (M, H)
    dw_gate = dg.T @ x if needs[1] else None  # (I, H)
    dw_up = du.T @ x if needs[2] else None  # (I, H)
    return dx, dw_gate, dw_up


def packed_backward(
    dy: torch.Tensor, x: torch.Tensor, w_packed: torch.Tensor, needs: tuple[bool, bool]
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Gradients of the packed op, ``w_packed`` in the interleaved layout (blocks of 8 gate rows,
    then the 8 matching up rows; :func:`fused_swiglu.weights.pack_gate_up`).

    Args:
        dy: ``(M, I)``. x: ``(M, H)``. w_packed: ``(2I, H)``. One dtype.
        needs: whether x, w_packed need a gradient.

    Returns:
        ``(dx (M, H), dw_packed (2I, H) interleaved)``, None where not needed.
    """
    if not any(needs):
        return None, None
    M = x.shape[0]
    I = w_packed.shape[0] // 2
    gu = (x @ w_packed.T).view(M, I // BLOCK, 2, BLOCK)  # (M, I/8, gate|up, 8)
    dy3 = dy.reshape(M, I // BLOCK, BLOCK)
    if torch.is_grad_enabled():  # create_graph=True: no out= writes, so autograd records every step
        dgu = torch.stack(swiglu_input_grads(dy3, gu[:, :, 0], gu[:, :, 1]), dim=2).view(M, 2 * I)
    else:
        dgu = torch.empty((M, 2 * I), dtype=gu.dtype, device=gu.device)  # interleaved like w_packed
        halves = dgu.view(M, I // BLOCK, 2, BLOCK)
        swiglu_input_grads(dy3, gu[:, :, 0], gu[:, :, 1], out=(halves[:, :, 0], halves[:, :, 1]))
    dx = dgu @ w_packed if needs[0] else None  # (M, H)
    dw_packed = dgu.T @ x if needs[1] else None  # (2I, H)
    return dx, dw_packed
