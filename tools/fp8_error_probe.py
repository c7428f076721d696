"""Error of the e4m3 paths against float64 of the dequantized operands, normalized by the output's RMS:
ours (fast, promoted) and cuBLAS's FP8 GEMM (torch._scaled_mm, fast and precise accumulation, fp32
output, silu * up in fp32, rounded once to bf16). Prints one line per shape and path."""

import sys

import torch

from fused_swiglu import fp8
from fused_swiglu.accuracy import compare
from fused_swiglu.bench.fp8 import make_sets
from fused_swiglu.bench.shapes import find_fp8

torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
for shape in find_fp8(sys.argv[2:] or ["0.5B", "7B", "72B"]):
    for M in (1, 2048):
        s = make_sets(M, shape.hidden_size, shape.intermediate_size, torch.device("cuda"), 0)[0]
        ref = fp8.dequantized_swiglu(s.x, s.w_packed, s.x_scale, s.w_scale, torch.float64)
        rms = ref.pow(2).mean().sqrt()

        def cublas(fast):
            gu = torch._scaled_mm(s.x, s.w_cat.t(), scale_a=s.x_scale.reshape(-1, 1), scale_b=s.w_cat_scale,
                                  out_dtype=torch.float32, use_fast_accum=fast)
            g, u = gu.chunk(2, dim=-1)
            return (torch.nn.functional.silu(g) * u).to(torch.bfloat16)

        paths = {"ours_fast": fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale),
                 "ours_promoted": fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale, accumulation="promoted"),
                 "cublas_fast": cublas(True), "cublas_precise": cublas(False)}
        for name, y in paths.items():
            e = ((y.double() - ref).abs() / rms).flatten()
            r = compare(y, ref)
            q = torch.quantile(e[: 2**24].float(), torch.tensor([0.5, 0.999], device=e.device)).tolist()
            print(f"{shape.model:18s} M={M:5d} {name:15s} max_e={e.max().item():.2e} p50={q[0]:.2e} "
                  f"p99.9={q[1]:.2e} mismatch={100 * r.mismatch:.4f}% max_ulp={r.max_ulp} exact={100 * r.exact:.2f}%")
