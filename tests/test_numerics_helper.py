"""The GPU tests' criterion (numerics.py), checked on CPU: it accepts fp32-one-rounding results
and rejects PyTorch's three-rounding eager path."""

import pytest
import torch

from fused_swiglu.reference import swiglu_eager, swiglu_fp32_one_rounding
from numerics import assert_matches_float64


def _inputs(dtype):
    x = torch.randn(256, 512).to(dtype)
    wg = (torch.randn(256, 512) / 512**0.5).to(dtype)
    wu = (torch.randn(256, 512) / 512**0.5).to(dtype)
    return x, wg, wu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_accepts_one_rounding(dtype):
    x, wg, wu = _inputs(dtype)
    assert_matches_float64(swiglu_fp32_one_rounding(x, wg, wu), x, wg, wu, "fp32 one rounding")


def test_rejects_eager_and_nan():
    x, wg, wu = _inputs(torch.bfloat16)
    with pytest.raises(AssertionError, match="mismatch="):
        assert_matches_float64(swiglu_eager(x, wg, wu), x, wg, wu, "eager")
    out = swiglu_fp32_one_rounding(x, wg, wu)
    out[3, 5] = float("nan")
    with pytest.raises(AssertionError, match="1 of 65536 elements are not finite"):
        assert_matches_float64(out, x, wg, wu, "poisoned")


def test_one_2_ulp_element_in_a_small_output_passes_and_two_do_not():
    # GMMA's rare long-K element (numerics.MAX_MISMATCH): one in a 1 x 29568 output is allowed, a
    # second one is not, and a 3-ulp element never is
    from fused_swiglu.accuracy import ulp_at

    torch.manual_seed(0)
    x = torch.randn(1, 512).to(torch.bfloat16)
    wg = (torch.randn(29568, 512) / 512**0.5).to(torch.bfloat16)
    wu = (torch.randn(29568, 512) / 512**0.5).to(torch.bfloat16)
    good = swiglu_fp32_one_rounding(x, wg, wu)
    ref = good.double()
    big = ref.abs().argsort(descending=True)[0, :3].tolist()  # counted, and far from the elementwise bound

    def nudged(ulps):
        out = good.clone()
        for j, k in zip(big, ulps):
            out[0, j] = (ref[0, j] + k * ulp_at(ref[0, j], torch.bfloat16)).to(torch.bfloat16)
        return out

    assert_matches_float64(nudged([2]), x, wg, wu, "one element 2 ulp away")
    with pytest.raises(AssertionError, match="mismatch="):
        assert_matches_float64(nudged([2, 2]), x, wg, wu, "two elements 2 ulp away")
    with pytest.raises(AssertionError, match="max_ulp=3"):
        assert_matches_float64(nudged([3]), x, wg, wu, "one element 3 ulp away")
