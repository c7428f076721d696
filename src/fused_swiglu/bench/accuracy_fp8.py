"""``fused-swiglu accuracy --dtype e4m3``: the e4m3 kernels and the unfused FP8 path against float64
of the dequantized operands on every model shape (the same definitions as the 16-bit table:
:mod:`fused_swiglu.accuracy`, elements of at least 1 % of the RMS counted, bf16 output)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .. import fp8
from ..accuracy import compare
from . import report
from .fp8 import dual_operands, make_sets, silu_and_mul, unfused, unfused_blockwise
from .shapes import find_fp8

M_TOKENS = 2048


# method -> (its output from one input set, whether it reads the block-quantized operands)
METHODS = {
    "fp8_fused": (lambda s: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale), False),
    "fp8_fused_dual": (lambda s: fp8.swiglu_fp8(*dual_operands(s)), False),
    "fp8_fused_promoted": (lambda s: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale,
                                                           accumulation="promoted"), False),
    "fp8_unfused": (lambda s: unfused(s, silu_and_mul), False),
    "fp8_fused_blockwise": (lambda s: fp8.swiglu_packed_fp8(s.block.x, s.block.w_packed, s.block.x_scale,
                                                            s.block.w_scale, scaling="block"), True),
    "fp8_unfused_blockwise": (lambda s: unfused_blockwise(s.block, silu_and_mul), True),
}


def run_accuracy_fp8(console, out: Path | None = None, seed: int | None = None,
                     models: list[str] | None = None) -> list[dict]:
    """x ~ N(0, 1) (M = 2048) and weights ~ N(0, 1/H) quantized to e4m3 per token and per weight row,
    and (the blockwise methods) per 1 x 128 token group and 128 x 128 weight block; every method against
    float64 of its dequantized operands, rounded once to bf16. The seed is fresh unless given, and printed."""
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    console.print(f"seed {seed}")
    torch.manual_seed(seed)
    device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for shape in find_fp8(models):
        s = make_sets(M_TOKENS, shape.hidden_size, shape.intermediate_size, device, l2_bytes=0, blockwise=True)[0]
        b = s.block
        refs = {False: fp8.dequantized_swiglu(s.x, s.w_packed, s.x_scale, s.w_scale, torch.float64),
                True: fp8.dequantized_swiglu(b.x, b.w_packed, b.x_scale, b.w_scale, torch.float64, scaling="block")}
        for method, (fn, block) in METHODS.items():
            r = compare(fn(s), refs[block])
            rows.append({"model": shape.model, "method": method, "exact": r.exact, "mismatch": r.mismatch,
                         "max_ulp": r.max_ulp, "counted": r.counted, "n": r.n})
        del s, b, refs
        torch.cuda.empty_cache()
    console.print(report.accuracy_table(rows, "bf16 (e4m3 operands dequantized)"))
    if out:
        meta = report.machine_meta(device)
        meta.update({"seed": seed, "dtype": "e4m3", "out_dtype": "bf16", "tokens": M_TOKENS,
                     "scales": "x per token, weights per row (output channel); blockwise methods: x per "
                               "1 x 128 token group, weights per 128 x 128 block; fp32",
                     "reference": "float64 of the dequantized e4m3 operands", "count_threshold_of_rms": 0.01})
        paths = report.write_results(out, meta, rows, report.ACCURACY_FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
