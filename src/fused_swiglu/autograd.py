"""Backward of the fused SwiGLU ops, by PyTorch matrix products.

The forward kernels never write the gate and up products ``g = x W_gate^T`` and ``u = x W_up^T``
(not writing them is what fusing buys), so the backward recomputes them with cuBLAS GEMMs in the
input dtype (fp32 accumulation, one rounding, as PyTorch's own eager backward has them), evaluates
the SwiGLU derivatives in fp32, and forms the input and weight gradients with GEMMs:

    y  = silu(g) * u,          silu(v) = v * sigmoid(v)
    dg = dy * u * silu'(g),    silu'(v) = sigmoid(v) * (1 + v * (1 - sigmoid(v)))
    du = dy * silu(g)
    dx = dg @ W_gate + du @ W_up,   dW_gate = dg^T @ x,   dW_up = du^T @ x

(silu' is the derivative of v * sigmoid(v) with sigmoid' = sigmoid * (1 - sigmoid).) The packed
op keeps the interleaved layout of :func:`fused_swiglu.weights.pack_gate_up` throughout: one GEMM
recomputes ``[g | u]`` interleaved, one GEMM gives ``dx`` and one gives ``dW_packed`` already in the
packed layout. Only the gradients an input needs are computed (``ctx.needs_input_grad``).

Cost: recomputing g and u is one extra forward's worth of GEMM FLOPs (4·M·H·I), and the backward
holds two ``(M, I)`` products and two ``(M, I)`` gradients at a time.
"""

from __future__ import annotations

import torch

from .weights import BLOCK


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for 16-bit inputs, float64 for float64 (the reference checks)."""
    return torch.promote_types(dtype, torch.float32)


def swiglu_input_grads(dy: torch.Tensor, g: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``y = silu(g) * u`` with respect to g and u.

    Args:
        dy, g, u: tensors of one shape and dtype (g, u as recomputed in the input dtype).

    Returns:
        ``(dg, du)`` in that dtype, computed in fp32 (float64 for float64 inputs) and rounded once.
    """
    acc = _compute_dtype(g.dtype)
    gf, uf, dyf = g.to(acc), u.to(acc), dy.to(acc)
    s = torch.sigmoid(gf)
    dg = dyf * uf * s * (1 + gf * (1 - s))
    du = dyf * gf * s
    return dg.to(g.dtype), du.to(g.dtype)


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
    dg, du = swiglu_input_grads(dy.reshape(M, I // BLOCK, BLOCK), gu[:, :, 0], gu[:, :, 1])
    dgu = torch.stack([dg, du], dim=2).view(M, 2 * I)  # (M, 2I) interleaved like w_packed's rows
    dx = dgu @ w_packed if needs[0] else None  # (M, H)
    dw_packed = dgu.T @ x if needs[1] else None  # (2I, H)
    return dx, dw_packed
