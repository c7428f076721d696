"""fused_swiglu.fp8 on the CPU: quantization, packing, the operator's checks, CPU and fake kernels."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fused_swiglu import catalog, fp8
from fused_swiglu.weights import pack_gate_up

E4M3 = torch.float8_e4m3fn


def _operands(M=5, H=32, I=16, per_token=True, per_channel=True):
    x, xs = fp8.quantize_e4m3(torch.randn(M, H), per_row=per_token)
    gq, gs = fp8.quantize_e4m3(torch.randn(I, H) * H**-0.5, per_row=per_channel)
    uq, us = fp8.quantize_e4m3(torch.randn(I, H) * H**-0.5, per_row=per_channel)
    return x, xs, gq, gs, uq, us


def test_quantize_scales_are_amax_over_448_and_round_trip_within_e4m3_precision():
    t = torch.randn(7, 64)
    t[3] = 0.0
    q, s = fp8.quantize_e4m3(t, per_row=True)
    assert q.dtype == E4M3 and s.dtype == torch.float32 and s.shape == (7,)
    assert torch.equal(s[3], torch.tensor(1.0)) and (q[3].float() == 0).all()
    rows = [i for i in range(7) if i != 3]
    assert torch.allclose(s[rows], t[rows].abs().amax(1) / 448)
    assert (q.float().abs().amax(1)[rows] == 448).all()  # the row's largest value maps to e4m3's largest
    back = q.float() * s[:, None]
    assert ((back - t).abs() <= t.abs() * 2**-4 + 1e-6 * s[:, None]).all()  # 3 mantissa bits: half-ulp 2^-4
    q1, s1 = fp8.quantize_e4m3(t, per_row=False)
    assert s1.shape == (1,) and torch.allclose(s1, t.abs().max().reshape(1) / 448)


def test_quantize_refuses_bad_input():
    with pytest.raises(TypeError, match="t must be a floating-point tensor"):
        fp8.quantize_e4m3(torch.ones(2, 2, dtype=torch.int32), per_row=True)
    with pytest.raises(ValueError, match="t must be 2-D"):
        fp8.quantize_e4m3(torch.ones(2), per_row=True)


@pytest.mark.parametrize("per_channel", [True, False])
def test_pack_weights_interleaves_rows_and_scales_alike(per_channel):
    _, _, gq, gs, uq, us = _operands(per_channel=per_channel)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    assert wp.dtype == E4M3 and ws.dtype == torch.float32
    expected = pack_gate_up(gq.float(), uq.float())
    assert torch.equal(wp.float(), expected)
    I = gq.shape[0]
    expected_scale = pack_gate_up(gs.expand(I).reshape(I, 1), us.expand(I).reshape(I, 1)).reshape(-1)
    assert torch.equal(ws.expand(2 * I), expected_scale)


def test_pack_weights_keeps_one_scale_when_both_are_one_equal_value():
    _, _, gq, _, uq, _ = _operands(per_channel=False)
    s = torch.tensor([0.5])
    wp, ws = fp8.pack_weights(gq, uq, s, s.clone())
    assert ws.shape == (1,) and ws.item() == 0.5
    _, ws2 = fp8.pack_weights(gq, uq, s, torch.tensor([0.25]))
    assert ws2.shape == (2 * gq.shape[0],)


def test_pack_weights_refuses_bad_input():
    _, _, gq, gs, uq, us = _operands()
    with pytest.raises(TypeError, match="w_gate must be torch.float8_e4m3fn"):
        fp8.pack_weights(gq.float(), uq, gs, us)
    with pytest.raises(TypeError, match="up_scale must be torch.float32"):
        fp8.pack_weights(gq, uq, gs, us.double())
    with pytest.raises(ValueError, match="gate_scale must hold 1 .* or I=16"):
        fp8.pack_weights(gq, uq, gs[:3], us)


@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, False), (True, False), (False, True)])
def test_cpu_kernel_is_the_dequantized_swiglu_rounded_once(per_token, per_channel):
    x, xs, gq, gs, uq, us = _operands(per_token=per_token, per_channel=per_channel)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    y = fp8.swiglu_packed_fp8(x, wp, xs, ws)
    assert y.dtype == torch.bfloat16 and y.shape == (5, 16) and y.is_contiguous()
    xd = x.double() * xs.double().reshape(-1, 1)
    g = xd @ (gq.double() * gs.double().reshape(-1, 1)).T
    u = xd @ (uq.double() * us.double().reshape(-1, 1)).T
    ref = torch.nn.functional.silu(g) * u
    assert torch.allclose(y.double(), ref, rtol=2**-8, atol=1e-6)
    assert torch.equal(fp8.swiglu_packed_fp8(x, wp, xs.reshape(-1, 1), ws.reshape(-1, 1)), y)  # (n, 1) scales


def _check_errors(call):
    x, xs, gq, gs, uq, us = _operands()
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    cases = [
        ((x.float(), wp, xs, ws), TypeError, "x must be torch.float8_e4m3fn"),
        ((x, wp.to(torch.bfloat16), xs, ws), TypeError, "w_packed must be torch.float8_e4m3fn"),
        ((x, wp, xs.double(), ws), TypeError, "x_scale must be torch.float32"),
        ((x, wp, xs[:2], ws), ValueError, r"x_scale must have shape \(1,\) .* \(5,\)"),
        ((x, wp, xs, ws[:4]), ValueError, r"w_scale must have shape \(1,\) .* \(32,\)"),
        ((x[:, :16], wp, xs, ws), ValueError, "w_packed must have x's H=16 columns"),
        ((x.reshape(-1), wp, xs, ws), ValueError, "x must be 2-D"),
        ((x, wp[:24], xs, ws[:24]), ValueError, "I a positive multiple of 8"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            call(*args)
    x24, _ = fp8.quantize_e4m3(torch.randn(5, 24), per_row=True)
    w24, _ = fp8.quantize_e4m3(torch.randn(32, 24), per_row=True)
    with pytest.raises(ValueError, match="H .* must be a positive multiple of 16"):
        call(x24, w24, xs, ws)


def test_the_operator_checks_its_operands_on_cpu():
    _check_errors(fp8.swiglu_packed_fp8)
    x, xs, gq, gs, uq, us = _operands()
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    with pytest.raises(ValueError, match="accumulation must be one of"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, accumulation="exact")
    with pytest.raises(ValueError, match="config must be '', 'promoted' or one of"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, config="packed_pingpong_128x192x64_2x1_bf16")


def test_fake_kernel_gives_shape_dtype_and_checks():
    x, xs, gq, gs, uq, us = _operands(M=9)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    with FakeTensorMode() as mode:
        fx, fw, fxs, fws = (mode.from_tensor(t) for t in (x, wp, xs, ws))
        y = fp8.swiglu_packed_fp8_op(fx, fw, fxs, fws, "")
        assert y.shape == (9, 16) and y.dtype == torch.bfloat16
        with pytest.raises(TypeError, match="x must be torch.float8_e4m3fn"):
            fp8.swiglu_packed_fp8_op(fx.to(torch.bfloat16), fw, fxs, fws, "")


def test_the_operator_traces_under_torch_compile_fullgraph():
    x, xs, gq, gs, uq, us = _operands()
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    compiled = torch.compile(lambda a: fp8.swiglu_packed_fp8(a, wp, xs, ws), fullgraph=True, backend="eager")
    assert torch.equal(compiled(x), fp8.swiglu_packed_fp8(x, wp, xs, ws))


def test_choice_by_m():
    def name(kernel, schedule, tm, tn, cm, p):
        return catalog.name_of(kernel, schedule, tm, tn, 128, cm, 1, p, "e4m3")

    for acc, p in (("fast", 0), ("promoted", 1)):
        assert fp8.choose_config(1, acc) == fp8.choose_config(16, acc) == name("packed_fp8_swapab", "pingpong", 64, 16, 1, p)
        assert fp8.choose_config(17, acc) == fp8.choose_config(128, acc) == name("packed_fp8", "pingpong", 64, 128, 1, p)
    assert fp8.choose_config(129) == name("packed_fp8", "pingpong", 128, 192, 2, 0)  # two 128-token tiles: 2 x 1
    assert fp8.choose_config(257) == name("packed_fp8", "pingpong", 128, 192, 1, 0)  # three: no cluster
    assert fp8.choose_config(257, "promoted") == name("packed_fp8", "cooperative", 128, 192, 2, 1)


def test_quantize_keeps_underflowing_and_empty_inputs_finite():
    q, s = fp8.quantize_e4m3(torch.tensor([[1e-44, 0.0], [0.0, 0.0], [2.0, -1.0]]), per_row=True)
    assert torch.isfinite(q.float()).all() and (s > 0).all() and s[0] == 1.0 and s[1] == 1.0
    for per_row, shape in ((True, (0,)), (False, (1,))):
        q, s = fp8.quantize_e4m3(torch.empty(0, 32), per_row=per_row)
        assert q.shape == (0, 32) and q.dtype == E4M3 and s.shape == shape


def test_operands_tma_cannot_read_are_copied_to_aligned_rows():
    raw = torch.zeros(3, 32 + 16, dtype=torch.uint8)
    for t in (raw[:1, 8:40],                       # one row, 8 bytes off: contiguous() would keep it
              raw[:, 8:40],                        # rows 8 bytes off
              torch.zeros(32, 1, dtype=torch.uint8).T):  # one row with row stride 1
        ready = fp8._tma_ready(t.view(E4M3))
        assert ready.data_ptr() % 16 == 0 and ready.stride(1) == 1 and ready.stride(0) % 16 == 0
        assert ready.stride(0) >= ready.shape[1] and torch.equal(ready.view(torch.uint8), t)
    aligned = torch.zeros(4, 32, dtype=torch.uint8).view(E4M3)
    assert fp8._tma_ready(aligned) is aligned
