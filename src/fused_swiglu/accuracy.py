"""Accuracy metrics against a float64 ground truth, shared by the tests and ``fused-swiglu accuracy``.

Definitions (bf16 or fp16 output ``out``, float64 ground truth ``ref64`` of the same inputs):

* reference: ``ref64`` rounded *once* (round-to-nearest-even) to ``out.dtype``.
* ``exact``: fraction of all elements whose bits equal the reference's.
* ``mismatch``: fraction, among the *counted* elements (``|ref64| >= 1 %`` of the RMS of
  ``ref64``), that are more than 1 ulp from the reference. Below that magnitude the fp32
  accumulation order alone decides the last bits, so those elements are not counted.
* ``max_ulp``: largest ulp distance over the counted elements.

Ulp distance is exact: each value's bit pattern is mapped to an integer that is monotonic in the
value (sign-magnitude to two's complement), and the distance is the difference of those integers,
i.e. the number of representable values stepped over. ``+0`` and ``-0`` are 0 apart; the two
smallest subnormals of opposite sign are 2 apart. A NaN against a non-NaN is ``NAN_ULP`` apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# (fraction bits, smallest normal exponent, largest finite value) of each output dtype
_FORMATS = {
    torch.bfloat16: (7, -126, float(torch.finfo(torch.bfloat16).max)),
    torch.float16: (10, -14, float(torch.finfo(torch.float16).max)),
}
NAN_ULP = 1 << 20  # larger than any distance between two 16-bit values
COUNT_THRESHOLD = 0.01  # counted elements: |ref| >= 1 % of the reference RMS


def _check_pair(a: torch.Tensor, b: torch.Tensor, a_name: str, b_name: str, b_dtype: torch.dtype | None = None) -> None:
    """``a`` bf16/fp16; ``b`` of ``b_dtype`` (``a``'s where None) and of ``a``'s shape; else TypeError /
    ValueError naming them."""
    _check_dtype(a.dtype, a_name)
    if b_dtype is None and b.dtype != a.dtype:
        raise TypeError(f"{a_name} and {b_name} must have the same dtype; got {a_name} {a.dtype} and {b_name} {b.dtype}")
    if b_dtype is not None and b.dtype != b_dtype:
        raise TypeError(f"{b_name} must be {b_dtype}; got {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"{a_name} and {b_name} must have the same shape; got {tuple(a.shape)} and {tuple(b.shape)}")


def _check_dtype(dtype: torch.dtype, arg: str) -> None:
    if dtype not in _FORMATS:
        raise TypeError(f"{arg} must be torch.bfloat16 or torch.float16; got {dtype}")


def round_once(ref64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round float64 values to ``dtype`` in one step (round-to-nearest-even).

    ``ref64.to(torch.bfloat16)`` may go through float32 and round twice; this does not.

    Args:
        ref64: float64 tensor, any shape.
        dtype: ``torch.bfloat16`` or ``torch.float16``.

    Returns:
        Tensor of ``dtype``, same shape and device. Values beyond the largest finite value by at
        least half an ulp become inf; NaN stays NaN.

    Raises:
        TypeError: ``ref64`` is not float64 or ``dtype`` is not bf16/fp16.
    """
    if ref64.dtype != torch.float64:
        raise TypeError(f"ref64 must be torch.float64; got {ref64.dtype}")
    max_finite = _FORMATS[dtype][2]
    quantum = ulp_at(ref64, dtype)  # a power of two: the spacing of dtype at each value
    rounded = torch.round(ref64 / quantum) * quantum  # exact: division by a power of two
    rounded = torch.where(rounded.abs() > max_finite, torch.copysign(torch.full_like(rounded, float("inf")), rounded), rounded)
    rounded = torch.where(torch.isfinite(ref64), rounded, ref64)
    return rounded.to(dtype)  # exact: every value is representable in dtype


def count_threshold_for(dtype: torch.dtype) -> float:
    """The counting threshold that gives ``dtype`` the same immunity to fp32 accumulation-order
    noise as the 1 % definition gives bf16.

    That noise is a fixed fraction of the RMS whatever the output type; fp16 has 3 more fraction
    bits than bf16, so its ulp is 8 times finer and the same noise reaches 1 ulp at 8 times the
    magnitude: 8 % of the RMS for fp16, 1 % for bf16.

    Raises:
        TypeError: ``dtype`` is not bf16/fp16.
    """
    _check_dtype(dtype, "dtype")
    return COUNT_THRESHOLD * 2.0 ** (_FORMATS[dtype][0] - _FORMATS[torch.bfloat16][0])


def count_limit(ref64: torch.Tensor, count_threshold: float = COUNT_THRESHOLD) -> torch.Tensor:
    """The magnitude from which an element of the float64 reference ``ref64`` is counted:
    ``count_threshold * RMS(ref64)`` (a 0-d float64 tensor on ``ref64``'s device)."""
    return count_threshold * ref64.square().mean().sqrt()


def ulp_at(ref64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype`` values at each ``|ref64|``: ``eps * 2**floor(log2|v|)`` for normal
    magnitudes, the subnormal spacing below (float64, same shape).

    Raises:
        TypeError: ``ref64`` is not float64 or ``dtype`` is not bf16/fp16.
    """
    if ref64.dtype != torch.float64:
        raise TypeError(f"ref64 must be torch.float64; got {ref64.dtype}")
    _check_dtype(dtype, "dtype")
    frac_bits, min_exp, _ = _FORMATS[dtype]
    _, e = torch.frexp(ref64)
    e = torch.where(ref64 == 0, torch.full_like(e, min_exp), e)  # frexp(0) gives exponent 0
    return torch.ldexp(torch.ones_like(ref64), torch.clamp(e - 1, min=min_exp) - frac_bits)


def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map bf16/fp16 bit patterns to int64 keys monotonic in the value (+0 and -0 both map to 0)."""
    bits = t.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
    magnitude = bits & 0x7FFF
    return torch.where(bits & 0x8000 != 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Number of representable values between ``a`` and ``b`` (elementwise, exact).

    Args:
        a, b: same shape, same dtype (bf16 or fp16).

    Returns:
        int64 tensor of that shape; ``NAN_ULP`` where exactly one of the two is NaN, 0 where both are.

    Raises:
        TypeError: dtypes differ or are not bf16/fp16.
        ValueError: shapes differ.
    """
    _check_pair(a, b, "a", "b")
    dist = (_ordered_bits(a) - _ordered_bits(b)).abs()
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    dist = torch.where(nan_a & nan_b, torch.zeros_like(dist), dist)
    return torch.where(nan_a ^ nan_b, torch.full_like(dist, NAN_ULP), dist)


@dataclass(frozen=True)
class AccuracyReport:
    """Accuracy of one output against float64 (see module docstring for definitions).

    exact, mismatch: fractions in [0, 1]; max_ulp: ulps (int); counted: elements counted for
    mismatch/max_ulp; n: all elements.
    """

    exact: float
    mismatch: float
    max_ulp: int
    counted: int
    n: int


def compare(out: torch.Tensor, ref64: torch.Tensor, count_threshold: float = COUNT_THRESHOLD) -> AccuracyReport:
    """Measure ``out`` against the float64 ground truth ``ref64``.

    Args:
        out: bf16 or fp16 tensor, any shape.
        ref64: float64 tensor of the same shape (e.g. :func:`fused_swiglu.reference.swiglu_float64`),
            any device (moved to ``out``'s device).
        count_threshold: elements with ``|ref64| >= count_threshold * RMS(ref64)`` are counted for
            ``mismatch`` and ``max_ulp`` (default 1 %, the definition above).

    Returns:
        :class:`AccuracyReport`.

    Raises:
        TypeError: ``out`` is not bf16/fp16 or ``ref64`` is not float64.
        ValueError: shapes differ.
    """
    _check_pair(out, ref64, "out", "ref64", torch.float64)
    ref64 = ref64.to(out.device)
    n = out.numel()
    if n == 0:
        return AccuracyReport(exact=1.0, mismatch=0.0, max_ulp=0, counted=0, n=0)
    ref = round_once(ref64, out.dtype)
    same_bits = out.contiguous().view(torch.int16) == ref.contiguous().view(torch.int16)
    exact = same_bits.sum().item() / n
    counted_mask = ref64.abs() >= count_limit(ref64, count_threshold)
    counted = int(counted_mask.sum().item())
    dist = ulp_distance(out, ref)[counted_mask]
    mismatch = (dist > 1).sum().item() / counted if counted else 0.0
    max_ulp = int(dist.max().item()) if counted else 0
    return AccuracyReport(exact=exact, mismatch=mismatch, max_ulp=max_ulp, counted=counted, n=n)
