"""The benchmark's output check: before a shape is timed, each method's result on the first input
set is compared with the float64 ground truth, so that no time is reported for a wrong result.

A method passes when its output has the shape ``(M, I)`` and the input dtype, holds no NaN or
infinity, and is within :data:`MAX_ULP` ulps of the reference (float64 rounded once) on every
element counted by :func:`fused_swiglu.accuracy.compare` (``|ref| >=`` the dtype's counting
threshold times the reference's RMS). Eager PyTorch, which rounds three times, is at most 4 ulps
away at M = 2048 on the Qwen2.5 shapes and the fused kernels at most 2 (``docs/results/h200/``);
an element that was never written, a wrong weight layout or a wrong operand is thousands of ulps
away. ``cublas_gemm`` (the GEMM without the activation, ``(M, 2I)``) is not compared.

Before each fused call a buffer of the output's size is filled with NaN and freed, so that the
caching allocator most likely hands that block to the call's output: an element the kernel leaves
unwritten then reads as NaN instead of a value left behind by another method.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..accuracy import compare, count_threshold_for
from ..errors import WrongOutputError
from ..reference import swiglu_float64
from .methods import FUSED_KERNEL, InputSet

MAX_ULP = 16  # 4x eager PyTorch's largest distance in the results run
NOT_COMPARED = frozenset({"cublas_gemm"})


def output_problem(y: object, ref64: torch.Tensor, dtype: torch.dtype) -> str | None:
    """What is wrong with ``y`` as a SwiGLU result of ``dtype`` for the float64 ground truth
    ``ref64`` (shape ``(M, I)``), or None if nothing is (see the module docstring for the rule)."""
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
    report = compare(y, ref64, count_threshold_for(dtype))
    if report.max_ulp > MAX_ULP:
        return (f"{report.max_ulp} ulps from the float64 reference (at most {MAX_ULP} allowed); "
                f"{report.mismatch:.2%} of counted elements are more than 1 ulp away")
    return None


def check_outputs(calls: dict[str, list[Callable[[], object]]], s: InputSet, label: str) -> None:
    """Run each method's call on input set ``s`` (its first callable) once and check the result.

    Args:
        calls: method name -> callables, as :func:`fused_swiglu.bench.methods.build_calls` returns
            (before they are turned into CUDA-graph replays); the first callable uses ``s``.
        s: the input set of those first callables.
        label: the shape as the message should name it, e.g. ``"Qwen2.5-7B M=512"``.

    Raises:
        WrongOutputError: a method's result fails the check (module docstring).
    """
    dtype = s.x.dtype
    ref64 = swiglu_float64(s.x, s.w_gate, s.w_up)
    for method, fns in calls.items():
        if method in NOT_COMPARED:
            continue
        if method in FUSED_KERNEL:
            torch.full(ref64.shape, float("nan"), dtype=dtype, device=s.x.device)  # freed at once
        y = fns[0]()
        problem = output_problem(y, ref64, dtype)
        if problem is not None:
            raise WrongOutputError(f"{method} on {label}: {problem}; not timed")
        del y
