"""The benchmark's output check: before a shape is timed, each method's result on the first input
set is compared with the float64 ground truth, so that no time is reported for a wrong result.

Every compared method's output must have the shape ``(M, I)`` and the input dtype, and hold no NaN
or infinity. Then:

* the fused kernels (``fused_*``) must be within :data:`MAX_ULP` ulps of the reference (float64
  rounded once) on every element counted by :func:`fused_swiglu.accuracy.compare` (``|ref| >=``
  the dtype's counting threshold times the reference's RMS). They are at most 2 ulps away at
  M = 2048 on the Qwen2.5 shapes (``docs/results/h200/``); an element that was never written, a
  wrong weight layout or a wrong operand is thousands of ulps away. The elements too small to be
  counted must be within the counting threshold (in absolute terms) of the reference.
* PyTorch's paths (``eager``, ``torch_compile``) must be within :data:`PEER_MAX_REL_ERR` relative
  L2 error: cuBLAS may reduce in bf16/fp16 where PyTorch allows it
  (``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction``), which no ulp bound
  of ours should fail, while a wrong operand is off by tens of per cent.

``cublas_gemm`` (the GEMM without the activation, ``(M, 2I)``) is not compared.

Before each fused call a buffer of the output's size is filled with NaN and freed, so that the
caching allocator most likely hands that block to the call's output: an element the kernel leaves
unwritten then reads as NaN instead of a value left behind by another method.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..accuracy import compare, count_limit, count_threshold_for
from ..errors import WrongOutputError
from ..reference import swiglu_float64
from .methods import FUSED_KERNEL, InputSet

MAX_ULP = 16  # fused kernels: 8x their largest distance in the results run (2 ulps)
PEER_MAX_REL_ERR = 0.05  # PyTorch's paths: ||y - ref|| / ||ref||, 10x a bf16 result with ~3 roundings
NOT_COMPARED = frozenset({"cublas_gemm"})


def output_problem(y: object, ref64: torch.Tensor, dtype: torch.dtype, fused: bool = True) -> str | None:
    """What is wrong with ``y`` as a SwiGLU result of ``dtype`` for the float64 ground truth
    ``ref64`` (shape ``(M, I)``), or None if nothing is; ``fused``: hold ``y`` to the fused
    kernels' ulp bound rather than the PyTorch paths' relative error (module docstring)."""
    if not isinstance(y, torch.Tensor):
        return f"returned {type(y).__name__}, not a tensor"
    if tuple(y.shape) != tuple(ref64.shape):
        return f"shape {tuple(y.shape)}, expected {tuple(ref64.shape)}"
    if y.dtype != dtype:
        return f"dtype {y.dtype}, expected {dtype}"
    if y.numel() == 0:
        return None
    bad = int((~torch.isfinite(y)).sum().item())
    if bad:
        return f"{bad} of {y.numel()} elements are NaN or infinite"
    ref64 = ref64.to(y.device)
    if fused:
        threshold = count_threshold_for(dtype)
        report = compare(y, ref64, threshold)
        if report.max_ulp > MAX_ULP:
            return (f"{report.max_ulp} ulps from the float64 reference (at most {MAX_ULP} allowed); "
                    f"{report.mismatch:.2%} of counted elements are more than 1 ulp away")
        # elements too small to be counted may differ in their last bits, not by more than the
        # counting threshold itself
        limit = count_limit(ref64, threshold).item()
        small = ref64.abs() < limit
        if small.any():
            worst = (y[small].to(torch.float64) - ref64[small]).abs().max().item()
            if not worst <= limit:
                return (f"an element below the counting threshold is {worst:.3g} from the float64 reference "
                        f"(at most {limit:.3g}, the threshold, allowed)")
        return None
    err = (y.to(torch.float64) - ref64).norm().item() / max(ref64.norm().item(), 1e-300)
    if not err <= PEER_MAX_REL_ERR:
        return f"relative error {err:.3g} against the float64 reference (at most {PEER_MAX_REL_ERR} allowed)"
    return None


def check_outputs(calls: dict[str, list[Callable[[], object]]], s: InputSet, label: str,
                  optional: frozenset[str] = frozenset()) -> dict[str, str]:
    """Run each method's call on input set ``s`` (its first callable) once and check the result.

    Args:
        calls: method name -> callables, as :func:`fused_swiglu.bench.methods.build_calls` returns
            (before they are turned into CUDA-graph replays); the first callable uses ``s``.
        s: the input set of those first callables.
        label: the shape as the message should name it, e.g. ``"Qwen2.5-7B M=512"``.
        optional: methods that are left out instead of stopping the run when their call raises
            an exception or their result fails the check (the optional peers that the benchmark
            runs by default): they are removed from ``calls``.

    Returns:
        method -> why it was left out, for the ``optional`` methods that failed (empty if none did).

    Raises:
        WrongOutputError: a method not in ``optional`` fails the check (module docstring).
    """
    left_out: dict[str, str] = {}
    if all(method in NOT_COMPARED for method in calls):
        return left_out
    dtype = s.x.dtype
    ref64 = swiglu_float64(s.x, s.w_gate, s.w_up)
    for method, fns in list(calls.items()):
        if method in NOT_COMPARED:
            continue
        fused = method in FUSED_KERNEL
        if fused:
            torch.full(ref64.shape, float("nan"), dtype=dtype, device=s.x.device)  # freed at once
        try:
            y = fns[0]()
            problem = output_problem(y, ref64, dtype, fused)
        except Exception as e:  # an optional peer's own failure (its install, its compiler) here
            if method not in optional:
                raise
            problem = f"its call raised {type(e).__name__}: {e}"
        if problem is not None:
            if method in optional:
                left_out[method] = f"{method} on {label}: {problem}"
                del calls[method]
                continue
            raise WrongOutputError(f"{method} on {label}: {problem}; not timed")
        del y
    return left_out
