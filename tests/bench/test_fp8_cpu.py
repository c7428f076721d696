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
