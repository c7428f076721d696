"""fused_swiglu.fp8.swiglu_fp8 (the dual kernel in e4m3) on the CPU: the operator's checks, its CPU and
fake kernels, the weight-scale vector the kernel reads, and the config choice."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fused_swiglu import catalog, fp8


def _operands(M=5, H=32, I=16, per_token=True, per_channel=True):
    x, xs = fp8.quantize_e4m3(torch.randn(M, H), per_row=per_token)
    gq, gs = fp8.quantize_e4m3(torch.randn(I, H) * H**-0.5, per_row=per_channel)
    uq, us = fp8.quantize_e4m3(torch.randn(I, H) * H**-0.5 * 3, per_row=per_channel)
    return x, gq, uq, xs, gs, us


def _float64(x, gq, uq, xs, gs, us):
    xd = x.double() * xs.double().reshape(-1, 1)
    g = xd @ (gq.double() * gs.double().reshape(-1, 1)).T
    u = xd @ (uq.double() * us.double().reshape(-1, 1)).T
    return torch.nn.functional.silu(g) * u


@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, False), (True, False), (False, True)])
def test_cpu_kernel_is_the_dequantized_swiglu_rounded_once(per_token, per_channel):
    ops = _operands(M=7, H=48, I=24, per_token=per_token, per_channel=per_channel)
    y = fp8.swiglu_fp8(*ops)
    assert y.dtype == torch.bfloat16 and y.shape == (7, 24) and y.is_contiguous()
    ref = _float64(*ops)
    assert torch.allclose(y.double(), ref, rtol=2**-8, atol=1e-6)
    x, gq, uq, xs, gs, us = ops
    assert torch.equal(fp8.swiglu_fp8(x, gq, uq, xs.reshape(-1, 1), gs.reshape(-1, 1), us.reshape(-1, 1)), y)
    assert torch.equal(y, fp8.dequantized_swiglu_dual(*ops).to(torch.bfloat16))
    # the packed form of the same operands computes the same function
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    assert torch.allclose(fp8.dequantized_swiglu(x, wp, xs, ws, torch.float64),
                          fp8.dequantized_swiglu_dual(*ops, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_the_operator_checks_its_operands():
    x, gq, uq, xs, gs, us = _operands()
    x24, _ = fp8.quantize_e4m3(torch.randn(5, 24), per_row=True)
    w24, _ = fp8.quantize_e4m3(torch.randn(16, 24), per_row=True)
    w12, s12 = fp8.quantize_e4m3(torch.randn(12, 32), per_row=True)
    cases = [
        ((x.float(), gq, uq, xs, gs, us), TypeError, "x must be torch.float8_e4m3fn"),
        ((x, gq.to(torch.bfloat16), uq, xs, gs, us), TypeError, "w_gate must be torch.float8_e4m3fn"),
        ((x, gq, uq.float(), xs, gs, us), TypeError, "w_up must be torch.float8_e4m3fn"),
        ((x, gq, uq, xs.double(), gs, us), TypeError, "x_scale must be torch.float32"),
        ((x, gq, uq, xs, gs.half(), us), TypeError, "gate_scale must be torch.float32"),
        ((x, gq, uq, xs, gs, us.double()), TypeError, "up_scale must be torch.float32"),
        ((x.reshape(-1), gq, uq, xs, gs, us), ValueError, "x must be 2-D"),
        ((x, gq.reshape(-1), uq, xs, gs, us), ValueError, "w_gate must be 2-D"),
        ((x[:, :16], gq, uq, xs, gs, us), ValueError, "w_gate must have x's H=16 columns"),
        ((x, gq, uq[:, :16], xs, gs, us), ValueError, "w_up must have x's H=32 columns"),
        ((x, gq, uq[:8], xs, gs, us), ValueError, "w_up must have w_gate's I=16 rows"),
        ((x, w12, w12, xs, s12, s12), ValueError, "I .* must be a positive multiple of 8"),
        ((x24, w24, w24, xs, gs, us), ValueError, "H .* must be a positive multiple of 16"),
        ((x, gq, uq, xs[:2], gs, us), ValueError, r"x_scale must have shape \(1,\) .* \(5,\)"),
        ((x, gq, uq, xs, gs[:4], us), ValueError, r"gate_scale must have shape \(1,\) .* \(16,\)"),
        ((x, gq, uq, xs, gs, us.reshape(2, 8)), ValueError, r"up_scale must have shape \(1,\) .* \(16,\)"),
        ((x, gq, uq, xs, gs, us[:1]), ValueError, "gate_scale and up_scale must be of one kind"),
        ((x, gq, uq, xs, gs[:1], us), ValueError, "gate_scale and up_scale must be of one kind"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            fp8.swiglu_fp8(*args)
    with pytest.raises(TypeError, match="w_up must be a"):  # not a tensor (check_tensors)
        fp8.swiglu_fp8(x, gq, None, xs, gs, us)
    with pytest.raises(ValueError, match="config must be '' or one of .* for the dual e4m3 kernel"):
        fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=fp8.CONFIG_NAMES[0])
    with pytest.raises(ValueError, match="config must be '' or one of"):
        fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config="promoted")
    assert torch.equal(fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=fp8.DUAL_CONFIG_NAMES[0]),
                       fp8.swiglu_fp8(x, gq, uq, xs, gs, us))  # any name of the family on the CPU


def test_fake_kernel_gives_shape_dtype_and_checks():
    ops = _operands(M=9, I=24)
    no_tokens, one_scale = ops[0][:0], torch.ones(1)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in ops]
        y = fp8.swiglu_dual_fp8_op(*fake, "")
        assert y.shape == (9, 24) and y.dtype == torch.bfloat16
        empty = fp8.swiglu_dual_fp8_op(mode.from_tensor(no_tokens), *fake[1:3], mode.from_tensor(one_scale),
                                       *fake[4:], "")
        assert empty.shape == (0, 24)
        with pytest.raises(TypeError, match="w_up must be torch.float8_e4m3fn"):
            fp8.swiglu_dual_fp8_op(fake[0], fake[1], fake[2].to(torch.bfloat16), *fake[3:], "")


def test_the_operator_traces_under_torch_compile_fullgraph():
    x, gq, uq, xs, gs, us = _operands()
    compiled = torch.compile(lambda a: fp8.swiglu_fp8(a, gq, uq, xs, gs, us), fullgraph=True, backend="eager")
    assert torch.equal(compiled(x), fp8.swiglu_fp8(x, gq, uq, xs, gs, us))


def test_choice_by_m():
    def name(kernel, tm, tn, cm):
        return catalog.name_of(kernel, "pingpong", tm, tn, 128, cm, 1, 0, "e4m3")

    assert fp8.choose_dual_config(1) == fp8.choose_dual_config(16) == name("dual_fp8_swapab", 128, 16, 1)
    assert fp8.choose_dual_config(17) == fp8.choose_dual_config(128) == name("dual_fp8", 64, 128, 1)
    assert fp8.choose_dual_config(129) == fp8.choose_dual_config(8192) == name("dual_fp8", 128, 128, 2)
    assert set(fp8.DUAL_CONFIG_NAMES) == {name("dual_fp8_swapab", 128, 16, 1), name("dual_fp8", 64, 128, 1),
                                          name("dual_fp8", 128, 128, 2)}
    assert set(fp8.DUAL_CONFIG_NAMES) == set(catalog.fp8_dual_names())
