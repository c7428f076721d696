"""fused_swiglu.fp8 on the CPU: quantization, packing, the operator's checks, CPU and fake kernels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fp8_common import e4m3_ulp
from fused_swiglu import catalog, configs, fp8
from fused_swiglu.weights import pack_gate_up

E4M3 = torch.float8_e4m3fn


def _operands(M=5, H=32, I=16, per_token=True, per_channel=True):
    x, xs = fp8.quantize_e4m3(torch.randn(M, H), per_row=per_token)
    gq, gs = fp8.quantize_e4m3(torch.randn(I, H) * H**-0.5, per_row=per_channel)
    uq, us = fp8.quantize_e4m3(torch.randn(I, H) * H**-0.5, per_row=per_channel)
    return x, xs, gq, gs, uq, us


def test_quantize_scales_are_amax_over_448_and_round_trip_within_e4m3_precision():
    t = torch.randn(7, 64, generator=torch.Generator().manual_seed(0))
    t[3] = 0.0
    q, s = fp8.quantize_e4m3(t, per_row=True)
    assert q.dtype == E4M3 and s.dtype == torch.float32 and s.shape == (7,)
    assert torch.equal(s[3], torch.tensor(1.0)) and (q[3].float() == 0).all()
    rows = [i for i in range(7) if i != 3]
    assert torch.allclose(s[rows], t[rows].abs().amax(1) / 448)
    assert (q.float().abs().amax(1)[rows] == 448).all()  # the row's largest value maps to e4m3's largest
    back = q.float() * s[:, None]
    # 3 mantissa bits: half an ulp is 2^-4 of the value for normals, 2^-10 (of the scale) for subnormals
    assert ((back - t).abs() <= t.abs() * 2**-4 + 2**-10 * s[:, None]).all()
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
    with pytest.raises(ValueError, match=r"gate_scale must have shape \(1,\) \(per tensor\) or \(16,\)"):
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
        y, y_scale = fp8.swiglu_packed_fp8_op(fx, fw, fxs, fws, None, "row", False, "")
        assert y.shape == (9, 16) and y.dtype == torch.bfloat16
        assert y_scale is None
        with pytest.raises(TypeError, match="x must be torch.float8_e4m3fn"):
            fp8.swiglu_packed_fp8_op(fx.to(torch.bfloat16), fw, fxs, fws, None, "row", False, "")
        with pytest.raises(ValueError, match="x_scale may be None only with scaling='block'"):
            fp8.swiglu_packed_fp8_op(fx, fw, None, fws, None, "row", False, "")
        with pytest.raises(ValueError, match="out_dtype must be torch.bfloat16 or torch.float8_e4m3fn"):
            fp8.swiglu_packed_fp8(fx, fw, fxs, fws, out_dtype=torch.float16)
        with pytest.raises(ValueError, match="out_dtype must be torch.bfloat16 or torch.float8_e4m3fn"):
            fp8.swiglu_packed_fp8(fx, fw, fxs, fws, out_dtype="e4m3")
        with pytest.raises(TypeError, match="e4m3_out must be a bool"):
            fp8.check_packed(fx, fw, fxs, fws, None, "row", 1)


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


def test_group_quantization_scales_each_128_columns_by_its_amax():
    t = torch.randn(3, 300) * torch.tensor([1.0, 100.0, 1e-3])[:, None]
    t[1, 128:256] = 0.0  # an all-zero group
    q, s = fp8.quantize_e4m3_groups(t)
    assert q.dtype == E4M3 and q.shape == (3, 300) and s.dtype == torch.float32 and s.shape == (3, 3)
    for g, cols in enumerate((slice(0, 128), slice(128, 256), slice(256, 300))):  # the last group: 44 columns
        assert torch.equal(s[:, g], t[:, cols].abs().amax(1) / 448)
    assert s[1, 1] == 0 and (q[1, 128:256].float() == 0).all()
    back = q.float() * s.repeat_interleave(128, dim=1)[:, :300]
    assert ((back - t).abs() <= t.abs() * 2**-4 + s.repeat_interleave(128, 1)[:, :300] * 2**-10).all()
    top = q.float().abs()
    assert top[:, :128].amax(1).eq(448).all() and top[0, 256:].amax() == 448


def test_group_quantization_refuses_bad_input():
    with pytest.raises(ValueError, match="group must be a positive int"):
        fp8.quantize_e4m3_groups(torch.ones(2, 2), group=0)
    with pytest.raises(ValueError, match="t must be 2-D"):
        fp8.quantize_e4m3_groups(torch.ones(2))
    q, s = fp8.quantize_e4m3_groups(torch.ones(0, 256))
    assert q.shape == (0, 256) and s.shape == (0, 2)


def test_cpu_kernel_for_e4m3_output_is_within_one_e4m3_ulp_of_float64():
    torch.manual_seed(0)  # the fp32 group maxima are within 1e-6 of float64's for these operands
    x, xs, gq, gs, uq, us = _operands(M=6, H=64, I=144)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    q, s = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=E4M3)
    ref = fp8.dequantized_swiglu(x, wp, xs, ws, torch.float64)
    groups = torch.nn.functional.pad(ref.abs(), (0, 256 - 144)).reshape(6, 2, 128).amax(2)
    assert s.shape == (6, 2) and torch.allclose(s.double(), groups / 448, rtol=1e-6, atol=0)
    exact = ref / s.double().repeat_interleave(128, 1)[:, :144]
    assert ((q.double() - exact).abs() <= e4m3_ulp(exact)).all()
    assert (q.double().abs().reshape(6, -1).amax(1) == 448).all()  # each row's largest value is the top of the range
    static = (ref.abs().max() / 448 / 2).float().reshape(1)  # the largest half saturates
    qs, same = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=E4M3, out_scale=static)
    assert same is static
    exact = ref / static.double()
    inside = exact.abs() <= 448
    assert ((qs.double() - exact).abs() <= e4m3_ulp(exact))[inside].all()
    assert (qs.double()[~inside] == 448 * exact[~inside].sign()).all() and (~inside).any()


def test_nan_and_degenerate_scales_follow_the_kernels_rules():
    t = torch.tensor([[1.0, float("nan"), -2.0] + [0.0] * 125, [float("nan")] * 128])
    q, s = fp8.quantize_e4m3_groups(t)
    assert s[0, 0] == torch.tensor(2.0) / 448 and s[1, 0] == 0  # NaN left out of the amax
    assert torch.isnan(q.float()[0, 1]) and q.float()[0, 2] == -448 and torch.isnan(q.float()[1]).all()
    fmax = torch.finfo(torch.float32).max
    assert torch.equal(fp8.quantize.reciprocal(torch.tensor([0.0, float("nan"), 0.5])), torch.tensor([fmax, fmax, 2.0]))


def test_e4m3_output_checks_its_arguments():
    x, xs, gq, gs, uq, us = _operands(M=4, H=32, I=16)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    with pytest.raises(ValueError, match="out_dtype must be torch.bfloat16 or torch.float8_e4m3fn"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=torch.float16)
    with pytest.raises(ValueError, match="out_scale is for e4m3 y"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, out_scale=torch.ones(1))
    with pytest.raises(ValueError, match="accumulation='fast' only"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=E4M3, accumulation="promoted")
    with pytest.raises(ValueError, match="out_scale must be one fp32 value"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=E4M3, out_scale=torch.ones(2))
    with pytest.raises(ValueError, match="config must be '' or one of .* for e4m3 y"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=E4M3, config=fp8.CONFIG_NAMES[0])
    x8, xs8, g8, gs8, u8, us8 = _operands(M=4, H=32, I=8)
    w8, ws8 = fp8.pack_weights(g8, u8, gs8, us8)
    with pytest.raises(ValueError, match="e4m3 y needs I a multiple of 16"):
        fp8.swiglu_packed_fp8(x8, w8, xs8, ws8, out_dtype=E4M3)
    with pytest.raises(TypeError, match="x must be torch.float8_e4m3fn"):
        fp8.swiglu_packed_fp8(x.float(), wp, xs, ws, out_dtype=E4M3)


def test_e4m3_output_fake_kernels_and_torch_compile():
    x, xs, gq, gs, uq, us = _operands(M=9, H=32, I=272)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    with FakeTensorMode() as mode:
        fx, fw, fxs, fws = (mode.from_tensor(t) for t in (x, wp, xs, ws))
        q, s = fp8.swiglu_packed_fp8_op(fx, fw, fxs, fws, None, "row", True, "")
        assert q.shape == (9, 272) and q.dtype == E4M3 and s.shape == (9, 3) and s.dtype == torch.float32
        qs, none = fp8.swiglu_packed_fp8_op(fx, fw, fxs, fws, mode.from_tensor(torch.ones(1)), "row", True, "")
        assert qs.shape == (9, 272) and qs.dtype == E4M3 and none is None
    compiled = torch.compile(lambda a: fp8.swiglu_packed_fp8(a, wp, xs, ws, out_dtype=E4M3), fullgraph=True,
                             backend="eager")
    got, want = compiled(x), fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=E4M3)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])


def test_e4m3_output_choice_by_m():
    def name(schedule, tm, cm):
        return catalog.name_of("packed_fp8", schedule, tm, 256, 128, cm, 1, 0, "e4m3_e4m3out")

    assert fp8.choose_out_config(1) == fp8.choose_out_config(2048) == name("pingpong", 64, 1)
    assert fp8.choose_out_config(2049) == name("cooperative", 128, 2)
    assert set(fp8.OUT_CONFIG_NAMES) == {name("pingpong", 64, 1), name("cooperative", 128, 2)}


def _block_operands(M=6, H=272, I=152):
    x, xs = fp8.quantize_e4m3_groups(torch.randn(M, H), column_major_scales=True)
    gq, gs = fp8.quantize_e4m3_blocks(torch.randn(I, H) * H**-0.5)
    uq, us = fp8.quantize_e4m3_blocks(torch.randn(I, H) * H**-0.5 * 3)
    return x, xs, gq, gs, uq, us


def test_block_quantization_scales_each_128_by_128_block():
    w = torch.randn(200, 300)
    w[128:, :128] = 0.0  # an all-zero block: scale 1
    q, s = fp8.quantize_e4m3_blocks(w)
    assert q.shape == (200, 300) and s.shape == (2, 3)
    assert s[1, 0] == 1.0 and (q[128:, :128].float() == 0).all()
    assert torch.equal(s[0, 2], w[:128, 256:].abs().max() / 448) and torch.equal(s[1, 1], w[128:, 128:256].abs().max() / 448)
    full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:200, :300]
    back = q.float() * full
    assert ((back - w).abs() <= w.abs() * 2**-4 + full * 2**-10).all()  # half an ulp; subnormals: 2^-10


def test_pack_weights_blockwise_expands_block_scales_over_the_packed_8_row_groups():
    _, _, gq, gs, uq, us = _block_operands(I=272)
    wp, ws = fp8.pack_weights_blockwise(gq, uq, gs, us)
    assert torch.equal(wp.float(), pack_gate_up(gq.float(), uq.float()))
    assert ws.shape == (2 * 272 // 8, 3) and ws.stride(0) == 1 and ws.stride(1) % 4 == 0
    for group in range(ws.shape[0]):
        pair, up = divmod(group, 2)
        source = us if up else gs
        assert torch.equal(ws[group], source[pair * 8 // 128]), group
    with pytest.raises(ValueError, match=r"gate_scale must have shape \(ceil\(I / 128\), ceil\(H / 128\)\) = \(3, 3\)"):
        fp8.pack_weights_blockwise(gq, uq, gs[:2], us)
    with pytest.raises(ValueError, match="multiple of 8"):
        fp8.pack_weights_blockwise(gq[:12], uq[:12], gs[:1], us[:1])


def test_cpu_kernel_for_block_scaling_is_the_blockwise_dequantized_swiglu():
    x, xs, gq, gs, uq, us = _block_operands()
    wp, ws = fp8.pack_weights_blockwise(gq, uq, gs, us)
    y = fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block")
    xd = x.double() * xs.double().repeat_interleave(128, 1)[:, :272]
    g = xd @ (gq.double() * gs.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:152, :272]).T
    u = xd @ (uq.double() * us.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:152, :272]).T
    ref = torch.nn.functional.silu(g) * u
    assert y.dtype == torch.bfloat16 and y.shape == (6, 152)
    assert torch.allclose(y.double(), ref, rtol=2**-8, atol=1e-6)
    row_major = xs.contiguous()  # any layout of the same values
    assert torch.equal(fp8.swiglu_packed_fp8(x, wp, row_major, ws, scaling="block"), y)


def test_block_scaling_checks_its_arguments():
    x, xs, gq, gs, uq, us = _block_operands()
    wp, ws = fp8.pack_weights_blockwise(gq, uq, gs, us)
    with pytest.raises(ValueError, match="scaling must be one of"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="tile")
    for bad in (np.array(["row", "row"]), ["row"]):  # named before any comparison with it, e4m3 y included
        with pytest.raises(TypeError, match="scaling must be a str"):
            fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling=bad, out_dtype=fp8.E4M3)
    with pytest.raises(ValueError, match=r"x_scale must have shape \(6, 3\)"):
        fp8.swiglu_packed_fp8(x, wp, xs[:, :2], ws, scaling="block")
    with pytest.raises(ValueError, match=r"w_scale must have shape \(38, 3\)"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws[:30], scaling="block")
    with pytest.raises(ValueError, match="scaling='block' writes bfloat16 y"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block", out_dtype=E4M3)
    with pytest.raises(ValueError, match="for block scaling"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block", config=fp8.CONFIG_NAMES[0])
    with FakeTensorMode() as mode:
        fx, fw, fxs, fws = (mode.from_tensor(t) for t in (x, wp, xs, ws))
        y, _ = fp8.swiglu_packed_fp8_op(fx, fw, fxs, fws, None, "block", False, "")
        assert y.shape == (6, 152) and y.dtype == torch.bfloat16
        y, _ = fp8.swiglu_packed_fp8_op(fx.to(torch.bfloat16), fw, None, fws, None, "block", False, "")
        assert y.shape == (6, 152) and y.dtype == torch.bfloat16


def test_block_scaling_choice_by_m():
    def name(schedule, tm, tn, cm):
        return catalog.name_of("packed_fp8_blockwise", schedule, tm, tn, 128, cm, 1, 0, "e4m3")

    assert fp8.choose_blockwise_config(1) == fp8.choose_blockwise_config(128) == name("pingpong", 64, 128, 1)
    assert fp8.choose_blockwise_config(129) == name("cooperative", 128, 192, 2)
    assert set(fp8.BLOCKWISE_CONFIG_NAMES) == {name("pingpong", 64, 128, 1), name("cooperative", 128, 192, 2)}


def test_column_major_scales_keep_values_and_align_columns():
    s = torch.randn(5, 3)
    c = fp8.column_major(s)
    assert torch.equal(c, s) and c.stride() == (1, 8) and fp8.column_major(c) is c


def test_the_one_choice_answers_the_e4m3_plan_kinds():
    for M in (1, 16, 17, 128, 129, 2048, 4097):
        resolve = lambda kind, config="": configs.resolve(kind, config, M, 64, 64, E4M3).name  # noqa: E731
        assert resolve("packed_fp8") == fp8.choose_config(M)
        assert resolve("packed_fp8", "promoted") == fp8.choose_config(M, "promoted")
        assert resolve("packed_fp8_e4m3out") == fp8.choose_out_config(M)
        assert resolve("packed_fp8_block") == fp8.choose_blockwise_config(M)
        assert resolve("dual_fp8") == fp8.choose_dual_config(M)
    choice, why = configs.explain("packed_fp8_block", "", 9, 64, 64, E4M3)
    assert choice.name == fp8.choose_blockwise_config(9) and "packed_fp8_block family's rule by M" in why
    name = fp8.DUAL_CONFIG_NAMES[0]
    assert configs.explain("dual_fp8", name, 9, 64, 64, E4M3) == (configs.Choice(name),
                                                                  "named by the call's config argument")
    with pytest.raises(ValueError, match="for block scaling"):
        configs.resolve("packed_fp8_block", fp8.CONFIG_NAMES[0], 9, 64, 64, E4M3)


def test_quantize_leaves_nan_out_of_the_scale_and_blockwise_packing_traces():
    q, s = fp8.quantize_e4m3(torch.tensor([[1000.0, float("nan"), 3.0]]), per_row=True)
    assert s.item() == pytest.approx(1000 / 448) and q[0, 0].float() == 448 and torch.isnan(q[0, 1].float())
    w = torch.full((128, 128), 2.0)
    w[0, 0] = float("nan")
    q, s = fp8.quantize_e4m3_blocks(w)
    assert s.item() == pytest.approx(2 / 448) and (q.float()[1:] == 448).all()
    gb, gbs = fp8.quantize_e4m3_blocks(torch.randn(16, 32))
    ub, ubs = fp8.quantize_e4m3_blocks(torch.randn(16, 32))
    compiled = torch.compile(lambda: fp8.pack_weights_blockwise(gb, ub, gbs, ubs), fullgraph=True, backend="eager")
    for got, want in zip(compiled(), fp8.pack_weights_blockwise(gb, ub, gbs, ubs)):
        assert torch.equal(got.view(torch.uint8) if got.dtype == E4M3 else got,
                           want.view(torch.uint8) if want.dtype == E4M3 else want)


def test_a_fast_config_with_promoted_accumulation_is_refused():
    x, xs, gq, gs, uq, us = _operands(M=3)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    fast = next(n for n in fp8.CONFIG_NAMES if "_promote" not in n)
    promoted = next(n for n in fp8.CONFIG_NAMES if "_promote" in n)
    for config in (fast, "fast"):
        with pytest.raises(ValueError, match=f"config='{config}' runs fast accumulation; got accumulation='promoted'"):
            fp8.swiglu_packed_fp8(x, wp, xs, ws, accumulation="promoted", config=config)
    assert fp8.swiglu_packed_fp8(x, wp, xs, ws, config=promoted).shape == (3, 16)  # the name fixes it
    assert fp8.swiglu_packed_fp8(x, wp, xs, ws, accumulation="promoted", config="").shape == (3, 16)


def test_none_and_the_empty_config_are_the_choice_in_both_fp8_functions():
    x, xs, gq, gs, uq, us = _operands(M=3)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    assert torch.equal(fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=None), fp8.swiglu_fp8(x, gq, uq, xs, gs, us))
    assert torch.equal(fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=""), fp8.swiglu_fp8(x, gq, uq, xs, gs, us))
    assert torch.equal(fp8.swiglu_packed_fp8(x, wp, xs, ws, config=""), fp8.swiglu_packed_fp8(x, wp, xs, ws))


@pytest.mark.parametrize("config", [3, 1.5, ["promoted"]])
def test_a_config_that_is_not_a_str_is_a_type_error(config):
    x, xs, gq, gs, uq, us = _operands(M=3)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    says = f"config must be a str \\(a config name, or '' for the choice\\); got {type(config).__name__}"
    with pytest.raises(TypeError, match=says):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, config=config)
    with pytest.raises(TypeError, match=says):
        fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=config)


def test_flags_and_scale_shapes_are_checked():
    t = torch.randn(4, 32)
    with pytest.raises(TypeError, match="per_row must be True or False; got per_row='no'"):
        fp8.quantize_e4m3(t, per_row="no")
    with pytest.raises(TypeError, match="column_major_scales must be True or False"):
        fp8.quantize_e4m3_groups(t, column_major_scales="yes")
    with pytest.raises(ValueError, match="group must be a positive int; got group=True"):
        fp8.quantize_e4m3_groups(t, True)
    gq, gs = fp8.quantize_e4m3(torch.randn(16, 32), per_row=True)
    with pytest.raises(ValueError, match=r"gate_scale must have shape \(1,\) \(per tensor\) or \(16,\) / \(16, 1\)"):
        fp8.pack_weights(gq, gq, gs.reshape(2, 8), gs)


def test_infinities_saturate_and_leave_the_scale_to_the_finite_values():
    q, s = fp8.quantize_e4m3(torch.tensor([[1000.0, float("inf"), -float("inf"), 3.0]]), per_row=False)
    assert s.item() == pytest.approx(1000 / 448) and q.float()[0, :3].tolist() == [448, 448, -448]
    q, s = fp8.quantize_e4m3_blocks(torch.tensor([[2.0, float("inf")], [1.0, 0.5]]))
    assert s.item() == pytest.approx(2 / 448) and q.float()[0, 1] == 448


def test_a_named_config_with_its_launch_runs_on_the_cpu_as_the_name_alone():
    x, xs, gq, gs, uq, us = _operands(M=5)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    name = "packed_fp8_pingpong_128x192x128_2x1_e4m3"
    want = fp8.swiglu_packed_fp8(x, wp, xs, ws, config=name)
    assert torch.equal(fp8.swiglu_packed_fp8(x, wp, xs, ws, config=name + "@1:2"), want)
    dual = "dual_fp8_pingpong_128x128x128_2x1_e4m3"
    assert torch.equal(fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=dual + "@2:8"),
                       fp8.swiglu_fp8(x, gq, uq, xs, gs, us, config=dual))
    with pytest.raises(ValueError, match="raster in"):
        fp8.swiglu_packed_fp8(x, wp, xs, ws, config=name + "@7:2")


def test_the_eager_fast_path_table_is_exactly_what_the_checked_path_accepts():
    """``swiglu_packed_fp8``'s CUDA fast path (config None) looks (accumulation, scaling, out_dtype) up in a table;
    the table must hold exactly the combinations the checked path accepts, each with the operator arguments that
    path passes (e4m3_out, and the config ``_config_for`` gives), since only a GPU takes the fast path."""
    x, xs, gq, gs, uq, us = _operands(M=3, H=32, I=16)
    row = fp8.pack_weights(gq, uq, gs, us)
    xb, xbs, bgq, bgs, buq, bus = _block_operands(M=3)
    wb, wbs = fp8.pack_weights_blockwise(bgq, buq, bgs, bus)
    for a in fp8.ACCUMULATIONS:
        for sc in fp8.SCALINGS:
            for dt in (torch.bfloat16, fp8.E4M3):
                operands = (x, row[0], xs, row[1]) if sc == "row" else (xb, wb, xbs, wbs)
                try:
                    fp8.swiglu_packed_fp8(*operands, accumulation=a, scaling=sc, out_dtype=dt, config="")
                    accepted = True
                except ValueError:
                    accepted = False
                assert ((a, sc, dt) in fp8._FAST) == accepted, (a, sc, dt)
                if accepted:
                    assert fp8._FAST[(a, sc, dt)] == (dt == fp8.E4M3, fp8._config_for(None, a, sc))
