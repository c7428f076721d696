#!/usr/bin/env python3
"""Runs the benchmark's methods on one shape once each inside an NVTX range, for Nsight Compute.

Each method is first called a few times outside the range (kernel compilation, cuBLAS heuristics,
the library's first launch), then once inside an NVTX push/pop range named ``profile`` (one range per method, in the order
given). Under ncu, ``--nvtx --nvtx-include "profile/"`` then profiles exactly those calls, e.g.:

    ncu --nvtx --nvtx-include "profile/" --clock-control none --section SpeedOfLight \\
        python3 scripts/profile_methods.py --model 3B --tokens 8192 --methods fused_evt quack

``--config NAME`` launches that library config for the fused methods (``FUSED_SWIGLU_CONFIG``).
Outputs are checked against float64 first, as in the benchmark (``fused_swiglu.bench.check``).
"""
from __future__ import annotations

import argparse
import os

import torch

from fused_swiglu.bench import check, methods as m
from fused_swiglu.bench.shapes import find as find_models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a Qwen2.5 size (e.g. 3B) or an HxI shape")
    ap.add_argument("--tokens", type=int, required=True, help="M")
    ap.add_argument("--methods", nargs="+", default=["cublas_gemm", "fused_evt", "quack"])
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--config", help="library config name(s) for the fused methods (FUSED_SWIGLU_CONFIG)")
    ap.add_argument("--warm-calls", type=int, default=3, help="calls per method before the profiled one")
    args = ap.parse_args()
    if args.config:
        os.environ["FUSED_SWIGLU_CONFIG"] = args.config
    for method in args.methods:
        if (problem := m.peer_problem(method)) is not None:
            raise SystemExit(problem)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    (shape,) = find_models([args.model])
    H, I, M = shape.hidden_size, shape.intermediate_size, args.tokens
    s = m.make_input_set(M, H, I, dtype, torch.device("cuda"), alternating="quack" in args.methods)
    calls = m.build_calls(args.methods, [s])
    check.check_outputs(calls, s, f"{shape.model} M={M}")
    for method, (fn,) in calls.items():
        for _ in range(args.warm_calls):
            fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("profile")
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    print(f"profiled {', '.join(args.methods)} on {shape.model} (H={H}, I={I}) M={M} {args.dtype}")


if __name__ == "__main__":
    main()
