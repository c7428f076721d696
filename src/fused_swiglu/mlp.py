"""The whole SwiGLU MLP block, ``z = down(silu(x W_gate^T) * (x W_up^T))``, for training and inference.

When autograd records the call, the forward runs the fused up-projection's store variant, which also
writes the gate and up pre-activations, and the backward reads them: one GEMM through the down
projection with a dSwiGLU epilogue gives ``[dg | du]``, then one GEMM each for dx and for the gate and
up weight gradients (:mod:`fused_swiglu.mlp_ops`). Otherwise (no input requires grad, or grad mode is
off) it is the inference kernel followed by the down projection, and nothing extra is written.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _validate as v
from . import mlp_ops
from ._dispatch import check_dual_args, check_packed_args, on_2d, plan, plan_key, records_grad
from .functional import swiglu, swiglu_packed, warn_concatenated
from .reference import swiglu_fp32_one_rounding
from .weights import unpack_gate_up


def _check_down(w_down: torch.Tensor, x: torch.Tensor, I: int, H: int) -> None:
    v.check_tensors(w_down=w_down)
    v.check_dtypes(x=x, w_down=w_down)
    v.check_devices(x=x, w_down=w_down)
    if w_down.dim() != 2 or tuple(w_down.shape) != (H, I):
        transposed = (": it looks transposed: pass down_proj.weight as stored, not its .T"
                      if tuple(w_down.shape) == (I, H) and I != H else "")
        raise ValueError(
            f"w_down must be 2-D (H, I) = ({H}, {I}) (down_proj.weight of the same MLP); got w_down of shape "
            f"{tuple(w_down.shape)}{transposed}"
        )



def swiglu_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    *,
    recompute: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """The SwiGLU MLP ``silu(x @ w_gate.T) * (x @ w_up.T) @ w_down.T``, differentiable.

    Args:
        x: ``(..., H)`` activations, torch.bfloat16 or torch.float16, any strides (copied once where
            the kernels cannot read them).
        w_gate, w_up: ``(I, H)`` gate_proj and up_proj weights; w_down: ``(H, I)`` down_proj weight.
            All of x's dtype and device.
        recompute: when autograd records the call: False (default) stores the gate and up
            pre-activations, ``(..., 2I)`` in x's dtype, for a fused backward; True stores nothing
            extra and the backward recomputes them with PyTorch GEMMs (less memory, more time; also
            the path that supports ``create_graph=True``).
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``, as in :func:`fused_swiglu.swiglu`.

    Returns:
        ``(..., H)`` tensor of x's dtype: the up projection with fp32 accumulation and one rounding
        to ``y``, then a cuBLAS GEMM. Gradients (x, w_gate, w_up, w_down; only those needed):
        ``dg, du`` from the fp32 ``dz @ w_down`` and the stored pre-activations, rounded once; the
        rest by GEMMs in x's dtype.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`fused_swiglu.swiglu` for x, w_gate and w_up;
            ValueError if w_down is not ``(H, I)``; TypeError if recompute is not a bool.
        RuntimeError: a backward with ``create_graph=True`` through the stored path.
    """
    v.check_bool("recompute", recompute)

    def validate() -> tuple[int, int, torch.device]:
        I, H, device = check_dual_args(x, w_gate, w_up, "dual", backend, "fast")
        _check_down(w_down, x, I, H)
        return I, H, device

    _, _, use = plan(plan_key("swiglu_mlp", (), backend, x, w_gate, w_up, w_down), backend, validate)
    if use == "torch":
        return F.linear(swiglu_fp32_one_rounding(x, w_gate, w_up), w_down)
    if recompute or not records_grad((x, w_gate, w_up, w_down)):
        return F.linear(swiglu(x, w_gate, w_up, backend="cutlass"), w_down)
    return on_2d(mlp_ops.mlp, x, w_gate, w_up, w_down)


def swiglu_mlp_packed(
    x: torch.Tensor,
    w_packed: torch.Tensor,
    w_down: torch.Tensor,
    *,
    layout: str,
    recompute: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """:func:`swiglu_mlp` by the packed kernel, with the gate and up weights interleaved in one ``(2I, H)``
    tensor.

    Args:
        x: ``(..., H)``, as in :func:`swiglu_mlp`.
        w_packed: ``(2I, H)`` in ``layout``: ``"interleaved"`` (:func:`fused_swiglu.pack_gate_up`;
            the packed kernel; its gradient is reordered to that layout, one copy of ``(M, 2I)``) or
            ``"concatenated"`` (deprecated, removed in 0.3; a FutureWarning: ``[W_gate; W_up]``, the dual
            kernel on the two row slices, its gradient one GEMM; call
            ``swiglu_mlp(x, *w_packed.chunk(2), w_down)`` instead).
        w_down: ``(H, I)``. recompute, backend: as in :func:`swiglu_mlp`.

    Returns:
        ``(..., H)`` tensor of x's dtype; differentiable with respect to x, w_packed and w_down.

    Raises:
        As :func:`fused_swiglu.swiglu_packed` and :func:`swiglu_mlp`.
    """
    if layout == "concatenated":
        warn_concatenated("swiglu_mlp_packed")
    v.check_bool("recompute", recompute)

    def validate() -> tuple[int, int, torch.device]:
        I, H, device = check_packed_args(x, w_packed, layout, backend, "fast")
        _check_down(w_down, x, I, H)
        return I, H, device

    I, _, use = plan(plan_key("swiglu_mlp_packed", (layout,), backend, x, w_packed, w_down), backend, validate)
    if use == "torch":
        return F.linear(swiglu_fp32_one_rounding(x, *unpack_gate_up(w_packed, layout=layout)), w_down)
    if recompute or not records_grad((x, w_packed, w_down)):
        y = (swiglu_packed(x, w_packed, layout=layout, backend="cutlass") if layout == "interleaved"
             else swiglu(x, w_packed[:I], w_packed[I:], backend="cutlass"))
        return F.linear(y, w_down)
    return on_2d(mlp_ops.mlp_packed, x, w_packed, w_down, layout)
