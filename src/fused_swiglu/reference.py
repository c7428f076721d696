"""Reference SwiGLU computations, beside the kernels they check.

All compute ``y = silu(x @ W_gate^T) * (x @ W_up^T)`` with ``silu(v) = v * sigmoid(v)``, for
``x`` of shape ``(..., H)`` and weights of shape ``(I, H)``; results have shape ``(..., I)``.
They differ only in where they round:

* :func:`swiglu_eager` - PyTorch's unfused path: the gate GEMM, the up GEMM and the SiLU each
  round to the input dtype (three roundings before the final product).
* :func:`swiglu_fp32_one_rounding` - fp32 GEMMs (IEEE, no TF32) and fp32 SwiGLU, one rounding to
  the input dtype: what a fused kernel with fp32 accumulation can reach.
* :func:`swiglu_float64` - everything in float64, not rounded: the ground truth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from ._validate import autocast_dtype


@contextlib.contextmanager
def ieee_fp32_matmul() -> Iterator[None]:
    """Run fp32 matrix products in full IEEE fp32 (no TF32 / bf16 shortcuts), then restore.

    Under torch.compile the global setting cannot be switched inside the traced region; the
    compiled graph uses the precision in force when it is compiled ("highest" is PyTorch's default).
    """
    if torch.compiler.is_compiling():
        yield
        return
    previous = torch.get_float32_matmul_precision()
    if previous == "highest":
        yield
        return
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def exact_dtypes(t: torch.Tensor):
    """A context in which the products of tensors on ``t``'s device run in the dtypes given, not an
    autocast region's (which would make an fp32 or float64 reference a bf16 one)."""
    kind = t.device.type
    return torch.autocast(kind, enabled=False) if autocast_dtype(kind) is not None else contextlib.nullcontext()


def swiglu_eager(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """PyTorch's unfused SwiGLU: ``F.silu(x @ w_gate.T) * (x @ w_up.T)``.

    Args:
        x: ``(..., H)``; w_gate, w_up: ``(I, H)``; all one dtype and device.

    Returns:
        ``(..., I)`` in ``x.dtype``; the gate and up products and the SiLU are each rounded to
        that dtype before the multiply.
    """
    return F.silu(x @ w_gate.T) * (x @ w_up.T)


def swiglu_float64(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Ground truth: inputs upcast to float64 (exactly), all arithmetic in float64.

    Args:
        x: ``(..., H)``; w_gate, w_up: ``(I, H)``; any floating dtype, one device.

    Returns:
        ``(..., I)`` float64, not rounded to the input dtype.
    """
    xd = x.to(torch.float64)
    with exact_dtypes(x):
        g = xd @ w_gate.to(torch.float64).T  # (..., I)
        u = xd @ w_up.to(torch.float64).T  # (..., I)
    return F.silu(g) * u


def swiglu_fp32_one_rounding(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor
) -> torch.Tensor:
    """fp32 GEMMs (IEEE fp32, TF32 off, not autocast) and fp32 ``silu(g) * u``, rounded once to ``x.dtype``.

    This is the numerics the fused kernels target: fp32 accumulation, SwiGLU on the fp32
    accumulators, one rounding at the store.

    Args:
        x: ``(..., H)``; w_gate, w_up: ``(I, H)``; one floating dtype, one device.

    Returns:
        ``(..., I)`` in ``x.dtype``.
    """
    xf = x.to(torch.float32)
    with ieee_fp32_matmul(), exact_dtypes(x):
        g = xf @ w_gate.to(torch.float32).T  # (..., I) fp32
        u = xf @ w_up.to(torch.float32).T  # (..., I) fp32
    return (F.silu(g) * u).to(x.dtype)
