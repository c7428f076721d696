"""Public functions: fused SwiGLU ``y = silu(x @ W_gate^T) * (x @ W_up^T)``.

Both functions accept ``x`` of shape ``(..., H)`` and return ``(..., I)`` in ``x.dtype``, computed
with fp32 accumulation and one rounding to the output dtype. Both are differentiable: with the CUDA
kernels the backward recomputes the gate and up products with PyTorch GEMMs
(:mod:`fused_swiglu.autograd`); the torch backend is differentiated by autograd.
"""

from __future__ import annotations

import warnings

import torch

from . import ops
from ._dispatch import (AUTO, autocast_cast, below_unfused_check, call_op, check_dual_args, check_packed_args,
                        fast_config, fast_path, plan, plan_key, run_2d, run_op, unfused_predicted_faster)
from .configs import ACCUMULATIONS
from .reference import swiglu_eager, swiglu_fp32_one_rounding
from .weights import LAYOUTS, pack_gate_up, unpack_gate_up


# The fast path of the public functions: choice arguments -> the ops' config argument, for the calls
# that run the CUDA kernels as they are (dual kernel, or a packed weight in either layout).
_FAST_DUAL = {(k, b, a): AUTO[a] for k in ("auto", "dual") for b in ("auto", "cutlass") for a in ACCUMULATIONS}
_FAST_PACKED = {(lay, b, a): AUTO[a] for lay in LAYOUTS for b in ("auto", "cutlass") for a in ACCUMULATIONS}


def _run_concatenated(x: torch.Tensor, w_packed: torch.Tensor, config: str) -> torch.Tensor:
    """The dual operator on the row halves of a concatenated ``w_packed`` (views), sliced inside the checked
    call, so that a ``w_packed`` that cannot be sliced reaches the checks too."""
    I = w_packed.shape[0] // 2
    return run_op(ops.swiglu_dual, x, w_packed[:I], w_packed[I:], config)


def swiglu(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    *,
    backend: str = "auto",
    kernel: str = "auto",
    accumulation: str = "fast",
) -> torch.Tensor:
    """Fused ``silu(x @ w_gate.T) * (x @ w_up.T)``.

    Args:
        x: ``(..., H)`` activations, torch.bfloat16 or torch.float16, any strides. With the CUDA
            kernels, non-contiguous or misaligned x is copied once (rows need unit column stride,
            a row stride that is a multiple of 8 elements and a 16-byte aligned start). Under
            ``torch.autocast`` to bf16 / fp16, float32 / float16 / bfloat16 x and weights are cast to
            that dtype first, as ``torch.mm``'s inputs are.
        w_gate: ``(I, H)`` gate_proj weight, same dtype and device as x. Same copy rule as x.
        w_up: ``(I, H)`` up_proj weight, same dtype and device as x. Same copy rule as x.
        backend: ``"cutlass"`` (the CUDA kernels; needs a CUDA tensor on a compute capability 9.0
            GPU), ``"torch"`` (fp32 PyTorch matrix products, one rounding; any device), or
            ``"auto"`` (cutlass when the tensors are on a Hopper GPU, else torch with one warning
            per process). On a Hopper GPU, an eager call of at least 2048 tokens where that GPU's
            tuned data predicts PyTorch's unfused path (two GEMMs in x's dtype, then
            ``silu(g) * u``) faster than the kernel at the power cap runs that path instead
            (:func:`fused_swiglu.configs.explain` names such problems); under torch.compile,
            the kernels.
        kernel: ``"dual"`` (the dual kernel: one dual GEMM reading w_gate and w_up as they are),
            ``"packed"`` (the packed kernel: packs the weights with :func:`pack_gate_up` on every call,
            a copy of both weights, 2·I·H elements read and written, then one GEMM with a SwiGLU
            epilogue; to pay the copy once, pack yourself and call :func:`swiglu_packed`), or
            ``"auto"`` (= ``"dual"``).
        accumulation: how the CUDA kernels sum the K products (the torch backend always runs its
            IEEE fp32 matrix products). ``"fast"``: GMMA accumulates all of K in its fp32
            accumulators, whose additions do not round to nearest. ``"promoted"``: GMMA
            accumulates 4 k-tiles (256 products) at a time and each partial sum is added into a
            second fp32 accumulator with round-to-nearest: more outputs bit-equal to the correctly
            rounded float64 result (about as often as PyTorch's fp32 matrix products rounded
            once), for more GPU time. The measured rates and costs: docs/performance.md and
            docs/results/h200.

    Returns:
        ``(..., I)`` tensor of x's dtype on x's device, contiguous. x with no rows (M = 0)
        returns an empty tensor without a launch. Differentiable with respect to x and the
        weights: the backward recomputes ``x @ w_gate.T`` and ``x @ w_up.T`` with PyTorch GEMMs
        in the input dtype, then follows eager PyTorch's autograd (:mod:`fused_swiglu.autograd`).

    Raises:
        TypeError: an argument is not a dense (strided) tensor; a dtype is not bf16/fp16 or the
            dtypes differ; backend, kernel or accumulation not a str.
        ValueError: w_gate/w_up not 2-D or of different shapes; ``x.shape[-1] != H``; tensors on
            different devices; unknown backend, kernel or accumulation; with the CUDA kernels, H or
            I not a multiple of 8 (16-byte TMA rows) or H = 0.
        RuntimeError: backend="cutlass" on a CPU tensor or a GPU that is not compute capability
            9.0; a CUDA error from the kernel library.
        fused_swiglu.errors.BuildError: the kernel library could not be built or loaded.
    """
    x, w_gate, w_up = autocast_cast(x, w_gate, w_up)
    config = fast_config(_FAST_DUAL, kernel, backend, accumulation)
    if config is not None and fast_path(x) and (backend != "auto" or below_unfused_check(x)):
        # _dispatch.op_first's rule, written inline: no closure or extra frame on the per-call path
        try:
            return run_op(ops.swiglu_dual, x, w_gate, w_up, config)
        except Exception:
            plan(None, backend, lambda: check_dual_args(x, w_gate, w_up, kernel, backend, accumulation))  # typed error
            raise

    def validate() -> tuple[int, int, torch.device]:
        return check_dual_args(x, w_gate, w_up, kernel, backend, accumulation)

    I, H, use = plan(plan_key("swiglu", (kernel, accumulation), backend, x, w_gate, w_up), backend, validate)
    if use == "torch":
        return swiglu_fp32_one_rounding(x, w_gate, w_up)
    if backend == "auto" and unfused_predicted_faster("packed" if kernel == "packed" else "dual", x, I, accumulation):
        return swiglu_eager(x, w_gate, w_up)
    config = AUTO[accumulation]
    if kernel == "packed":
        w_packed = pack_gate_up(w_gate, w_up)  # (2I, H): one copy of both weights per call
        return run_2d(x, I, H, lambda x2d: call_op(ops.swiglu_packed, x2d, w_packed, config), w_packed)
    return run_2d(x, I, H, lambda x2d: call_op(ops.swiglu_dual, x2d, w_gate, w_up, config), w_gate, w_up)


# What a call of a deprecated layout is told to write instead, by function.
CONCATENATED_INSTEAD = {"swiglu_packed": "swiglu(x, *w_packed.chunk(2))",
                        "swiglu_mlp_packed": "swiglu_mlp(x, *w_packed.chunk(2), w_down)"}


def warn_concatenated(function: str) -> None:
    """A FutureWarning, once per calling line (Python's default filter), that ``layout="concatenated"`` of
    ``function`` is deprecated, naming the call to write instead; nothing while torch.compile traces."""
    if not torch.compiler.is_compiling():
        warnings.warn(f"{function}(..., layout='concatenated') is deprecated and will be removed in 0.3: "
                      f"{function} runs the packed kernel only; for [W_gate; W_up] weights call "
                      f"{CONCATENATED_INSTEAD[function]} (the dual kernel on row views of the one weight, as "
                      "this call does)", FutureWarning, stacklevel=3)  # the caller of function


def swiglu_packed(
    x: torch.Tensor,
    w_packed: torch.Tensor,
    *,
    layout: str,
    backend: str = "auto",
    accumulation: str = "fast",
) -> torch.Tensor:
    """Fused SwiGLU by the packed kernel, on gate and up weights interleaved in one ``(2I, H)`` tensor.

    Args:
        x: ``(..., H)`` activations, torch.bfloat16 or torch.float16, any strides
            (non-contiguous or misaligned x is copied once, as in :func:`swiglu`).
        w_packed: ``(2I, H)``, same dtype and device as x.
        layout: required. ``"interleaved"``: the layout of :func:`pack_gate_up` (blocks of 8 gate
            rows then 8 up rows), read by the packed kernel (one GEMM with a SwiGLU epilogue).
            ``"concatenated"`` (deprecated, removed in 0.3; a FutureWarning): ``w_packed = [W_gate; W_up]``
            (gate rows ``[0, I)``, up rows ``[I, 2I)``), run by the dual kernel on the two row slices,
            as ``swiglu(x, *w_packed.chunk(2))`` is, which is what to call instead.
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``, as in :func:`swiglu` (with the interleaved
            layout, ``"auto"`` on a Hopper GPU always runs the packed kernel: the unfused path would
            unpack the weights).
        accumulation: ``"fast"`` or ``"promoted"``, as in :func:`swiglu`.

    Returns:
        ``(..., I)`` tensor of x's dtype on x's device, contiguous; differentiable with respect
        to x and w_packed, as in :func:`swiglu` (the interleaved layout's gradient is interleaved).

    Raises:
        TypeError: layout missing or not a str; an argument is not a dense (strided) tensor; a dtype is
            not bf16/fp16 or the dtypes differ; backend or accumulation not a str.
        ValueError: unknown layout, backend or accumulation; w_packed not 2-D or with an odd row count;
            ``x.shape[-1] != H``; different devices; with the CUDA kernels, H or I not a multiple
            of 8 (16-byte TMA rows); interleaved layout with I not a multiple of 8.
        RuntimeError: as in :func:`swiglu`.
    """
    if layout == "concatenated":
        warn_concatenated("swiglu_packed")
    x, w_packed = autocast_cast(x, w_packed)
    config = fast_config(_FAST_PACKED, layout, backend, accumulation)
    if config is not None and fast_path(x) and (layout == "interleaved" or backend != "auto" or below_unfused_check(x)):
        # _dispatch.op_first's rule, written inline: no closure or extra frame on the per-call path
        try:
            if layout == "interleaved":
                return run_op(ops.swiglu_packed, x, w_packed, config)
            return _run_concatenated(x, w_packed, config)
        except Exception:
            plan(None, backend, lambda: check_packed_args(x, w_packed, layout, backend, accumulation))  # typed error
            raise

    def validate() -> tuple[int, int, torch.device]:
        return check_packed_args(x, w_packed, layout, backend, accumulation)

    I, H, use = plan(plan_key("swiglu_packed", (layout, accumulation), backend, x, w_packed), backend, validate)
    if use == "torch":
        w_gate, w_up = unpack_gate_up(w_packed, layout=layout)
        return swiglu_fp32_one_rounding(x, w_gate, w_up)
    config = AUTO[accumulation]
    if layout == "interleaved":
        return run_2d(x, I, H, lambda x2d: call_op(ops.swiglu_packed, x2d, w_packed, config), w_packed)
    w_gate, w_up = w_packed[:I], w_packed[I:]  # (I, H) row-slice views, 16-byte aligned when H % 8 == 0
    if backend == "auto" and unfused_predicted_faster("dual", x, I, accumulation):
        return swiglu_eager(x, w_gate, w_up)
    return run_2d(x, I, H, lambda x2d: call_op(ops.swiglu_dual, x2d, w_gate, w_up, config), w_gate, w_up)
