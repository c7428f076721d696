"""fused_swiglu.fp8.dynamic: block-scaled FP8 SwiGLU from 16-bit activations (CPU kernel, fake kernel, errors)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fused_swiglu import fp8
from fused_swiglu.fp8.dynamic import swiglu_packed_fp8_dynamic


def _weights(I=64, H=272):
    gq, gs = fp8.quantize_e4m3_blocks(torch.randn(I, H))
    uq, us = fp8.quantize_e4m3_blocks(torch.randn(I, H))
    return fp8.pack_weights_blockwise(gq, uq, gs, us)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_equals_quantize_then_the_block_scaled_operator(dtype):
    torch.manual_seed(0)
    w, ws = _weights()
    x = torch.randn(5, 272, dtype=dtype)
    xq, xs = fp8.quantize_e4m3_groups(x)
    want = fp8.swiglu_packed_fp8(xq, w, xs, ws, scaling="block")
    got = swiglu_packed_fp8_dynamic(x, w, ws)
    assert got.dtype == torch.bfloat16 and got.shape == (5, 64)
    assert torch.equal(got, want)


def test_fake_kernel_gives_the_shape():
    w, ws = _weights()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.randn(7, 272, dtype=torch.bfloat16))
        y = swiglu_packed_fp8_dynamic(x, mode.from_tensor(w), mode.from_tensor(ws))
    assert y.shape == (7, 64) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("make, error, says", [
    (lambda x, w, ws: (x.float(), w, ws), TypeError, "x must be torch.bfloat16 or torch.float16"),
    (lambda x, w, ws: (x[None], w, ws), ValueError, "x must be 2-D"),
    (lambda x, w, ws: (x[:, :256], w, ws), ValueError, "w_packed must have x's H=256 columns"),
    (lambda x, w, ws: (x, w.view(torch.uint8), ws), TypeError, "w_packed must be torch.float8_e4m3fn"),
    (lambda x, w, ws: (x, w, ws[:, :1]), ValueError, "w_scale must have shape"),
    (lambda x, w, ws: (x, w, ws.double()), TypeError, "w_scale must be torch.float32"),
])
def test_bad_arguments_are_named(make, error, says):
    w, ws = _weights()
    x = torch.randn(3, 272, dtype=torch.bfloat16)
    with pytest.raises(error, match=says):
        swiglu_packed_fp8_dynamic(*make(x, w, ws))


def test_unknown_config_is_named():
    w, ws = _weights()
    with pytest.raises(ValueError, match="config"):
        swiglu_packed_fp8_dynamic(torch.randn(3, 272, dtype=torch.bfloat16), w, ws, config="nope")


def test_every_fp8_operator_refuses_a_backward():
    torch.manual_seed(1)
    wb, wbs = _weights()
    gq, gs = fp8.quantize_e4m3(torch.randn(64, 256), per_row=True)
    uq, us = fp8.quantize_e4m3(torch.randn(64, 256), per_row=True)
    w, ws = fp8.pack_weights(gq, uq, gs, us)
    xq, xs = fp8.quantize_e4m3(torch.randn(3, 256), per_row=True)
    xbq, xbs = fp8.quantize_e4m3_groups(torch.randn(3, 272))
    g = lambda t: t.clone().requires_grad_()  # noqa: E731
    outputs = [
        ("swiglu_packed_fp8", fp8.swiglu_packed_fp8(xq, w, g(xs), ws)),
        ("swiglu_packed_fp8", fp8.swiglu_packed_fp8(xq, w, g(xs), ws, out_dtype=torch.float8_e4m3fn)[1]),
        ("swiglu_packed_fp8", fp8.swiglu_packed_fp8(xq, w, g(xs), ws, out_dtype=torch.float8_e4m3fn,
                                                    out_scale=torch.ones(1))[0].float()),
        ("swiglu_packed_fp8", fp8.swiglu_packed_fp8(xbq, wb, g(xbs), wbs, scaling="block")),
        ("swiglu_dual_fp8", fp8.swiglu_fp8(xq, gq, uq, g(xs), gs, us)),
        ("swiglu_packed_fp8", swiglu_packed_fp8_dynamic(g(torch.randn(3, 272, dtype=torch.bfloat16)), wb, wbs)),
        ("quantize_e4m3_groups", fp8.quantize_e4m3_groups_op(g(torch.randn(3, 272, dtype=torch.bfloat16)), False)[1]),
    ]
    for name, out in outputs:
        with pytest.raises(RuntimeError, match=f"fused_swiglu::{name} has no backward"):
            out.float().sum().backward()


def test_a_non_tensor_argument_is_a_type_error():
    w, ws = _weights()
    with pytest.raises(TypeError, match="w_scale must be a torch.Tensor"):
        swiglu_packed_fp8_dynamic(torch.randn(3, 272, dtype=torch.bfloat16), w, 1.0)
