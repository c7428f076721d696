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
