"""bench --fp8's own pieces on the CPU: the unfused e4m3-output path's quantization and the check that
dequantizes each method's output."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fused_swiglu import fp8
from fused_swiglu.bench import fp8 as bench_fp8


def test_the_unfused_e4m3_output_is_the_kernels_group_quantization():
    gu = torch.randn(5, 512).to(torch.bfloat16)
    q, scale = bench_fp8.silu_and_mul_quantize(gu)
    g, u = gu.float().chunk(2, dim=-1)
    eq, es = fp8.quantize_e4m3_groups(F.silu(g) * u)
    assert torch.equal(scale, es) and torch.equal(q.view(torch.uint8), eq.view(torch.uint8))


def test_outputs_are_dequantized_per_group_for_the_check():
    v = torch.randn(3, 256) * 7
    q, scale = fp8.quantize_e4m3_groups(v)
    back = bench_fp8.dequantized_output((q, scale))
    assert back.shape == v.shape and ((back - v).abs() <= v.abs() * 2**-4 + 1e-6).all()
    y = torch.randn(2, 8).to(torch.bfloat16)
    assert torch.equal(bench_fp8.dequantized_output(y), y.float())


def test_the_dual_method_reads_one_sets_weights_and_scales_as_views():
    H, I = 32, 16
    xq, xs = fp8.quantize_e4m3(torch.randn(3, H), per_row=True)
    gq, gs = fp8.quantize_e4m3(torch.randn(I, H), per_row=True)
    uq, us = fp8.quantize_e4m3(torch.randn(I, H), per_row=True)
    w_cat = torch.cat([gq.view(torch.uint8), uq.view(torch.uint8)]).view(fp8.E4M3)
    s = bench_fp8.Fp8Set(xq, xs, *fp8.pack_weights(gq, uq, gs, us), w_cat, torch.cat([gs, us]).reshape(1, -1),
                         xq.float(), w_cat.float())
    x, g, u, x_scale, g_scale, u_scale = bench_fp8.dual_operands(s)
    assert g.data_ptr() == w_cat.data_ptr() and u.data_ptr() == w_cat.data_ptr() + I * H
    assert torch.equal(g.view(torch.uint8), gq.view(torch.uint8))
    assert torch.equal(u.view(torch.uint8), uq.view(torch.uint8))
    assert torch.equal(g_scale, gs) and torch.equal(u_scale, us) and u_scale.data_ptr() == g_scale.data_ptr() + 4 * I
    assert "fp8_fused_dual" in bench_fp8.METHODS
    y = fp8.swiglu_fp8(x, g, u, x_scale, g_scale, u_scale)
    ref = fp8.dequantized_swiglu(s.x, s.w_packed, s.x_scale, s.w_scale)
    assert torch.allclose(y.float(), ref, rtol=2**-8, atol=1e-6)
