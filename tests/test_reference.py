"""The three references agree within bounds derived from where each one rounds."""

import pytest
import torch

from fused_swiglu.reference import (
    ieee_fp32_matmul,
    swiglu_eager,
    swiglu_float64,
    swiglu_fp32_one_rounding,
)


def _inputs(M, H, I, dtype):
    x = torch.randn(M, H).to(dtype)
    wg = (torch.randn(I, H) / H**0.5).to(dtype)
    wu = (torch.randn(I, H) / H**0.5).to(dtype)
    return x, wg, wu


def _unit_roundoff(dtype):
    return torch.finfo(dtype).eps / 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp32_one_rounding_is_within_one_rounding_of_float64(dtype):
    M, H, I = 64, 256, 128
    x, wg, wu = _inputs(M, H, I, dtype)
    ref = swiglu_float64(x, wg, wu)
    out = swiglu_fp32_one_rounding(x, wg, wu)
    assert out.dtype == dtype and out.shape == (M, I)
    # y32 (fp32 result) vs float64: each fp32 GEMM errs by at most gamma_H * sum|x||w|
    # (gamma_H = H u32 / (1 - H u32)); |silu'| <= 1.1, so
    #   E = 1.1 * dg * |u| + |silu(g)| * du + 4 u32 |y|   (silu and product rounding in fp32)
    # then one rounding to dtype: |out - y32| <= u |y32| <= u (|ref| + E).
    u32 = 2.0**-24
    gamma = H * u32 / (1 - H * u32)
    x64, g64, w64 = x.double(), wg.double(), wu.double()
    g, up = x64 @ g64.T, x64 @ w64.T
    dg = gamma * (x64.abs() @ g64.abs().T)
    du = gamma * (x64.abs() @ w64.abs().T)
    silu_g = torch.nn.functional.silu(g)
    E = 1.1 * dg * up.abs() + silu_g.abs() * du + 4 * u32 * ref.abs()
    tol = E + _unit_roundoff(dtype) * (ref.abs() + E)
    assert ((out.double() - ref).abs() <= tol).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_eager_is_within_three_roundings_of_float64(dtype):
    x, wg, wu = _inputs(64, 256, 128, dtype)
    ref = swiglu_float64(x, wg, wu)
    out = swiglu_eager(x, wg, wu)
    u = _unit_roundoff(dtype)
    # gate, up, silu and the product each round once: |err| <= ~4u |y| plus the error of
    # silu'(g) * dg * u where dg <= u |g|; bound it by 4u (|y| + |g| |u_val|) generously
    g = x.double() @ wg.double().T
    up = x.double() @ wu.double().T
    tol = 4 * u * (ref.abs() + g.abs() * up.abs()) + 1e-6
    assert ((out.double() - ref).abs() <= tol).all()


def test_fp32_one_rounding_closer_than_eager():
    x, wg, wu = _inputs(128, 512, 256, torch.bfloat16)
    ref = swiglu_float64(x, wg, wu)
    err_one = (swiglu_fp32_one_rounding(x, wg, wu).double() - ref).abs().mean()
    err_eager = (swiglu_eager(x, wg, wu).double() - ref).abs().mean()
    assert err_one < err_eager


def test_batched_shapes_and_float64_result():
    x, wg, wu = _inputs(6, 32, 16, torch.float16)
    x3 = x.view(2, 3, 32)
    assert swiglu_float64(x3, wg, wu).shape == (2, 3, 16)
    assert swiglu_float64(x3, wg, wu).dtype == torch.float64
    assert torch.equal(swiglu_fp32_one_rounding(x3, wg, wu).view(6, 16), swiglu_fp32_one_rounding(x, wg, wu))


def test_ieee_fp32_matmul_restores_precision():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with ieee_fp32_matmul():
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
