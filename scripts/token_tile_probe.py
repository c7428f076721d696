#!/usr/bin/env python3
"""Times the swap-AB configs with 112-token tiles beside the current choice and cuBLAS at given M.

At M = 333 the 64- and 128-row tiles leave the last token tile partly empty, where three 112-token
tiles are 99 % full. For each public sweep shape, at each ``--tokens`` M, this times the choice of
each kernel, its swap-AB 128x112 config and the cuBLAS GEMM of the same FLOPs, in turn rep by rep
(the benchmark's protocol), whether or not the choice already is the 112-token config.
Prints and writes ``{shape, M, kernel, choice_ms, swapab112_ms, cublas_ms}`` rows.

Usage (on a Hopper GPU): ``python3 scripts/token_tile_probe.py --out probe.json [--tokens 333 1000]``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.bench import timing, tune
from fused_swiglu.bench.model_shapes import SWEEP_MODELS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", nargs="+", type=int, default=[333])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    num_sms, gpu, smem = _lib.target(device.index)
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    rows = []
    for shape in SWEEP_MODELS:
        N, K = shape.intermediate_size, shape.hidden_size
        for M in a.tokens:
            sets = tune.make_operands(M, N, K, torch.bfloat16, device)
            w_cat = [torch.cat([s.w_gate, s.w_up]) for s in sets]
            extra = {"cublas_gemm": [lambda s=s, w=w: torch.mm(s.x, w.t()) for s, w in zip(sets, w_cat)]}
            pairs = {}
            for kernel in configs.KERNELS:
                c = configs.choose_config(kernel, M, N, K, "fast", num_sms, gpu, torch.bfloat16, smem)
                wide = configs.BY_BASE_NAME[f"{kernel}_swapab_pingpong_128x112x64_1x1"]
                pairs[kernel] = (tune.Variant(c, c.raster, c.swizzle), tune.Variant(wide))
            found = [v for pair in pairs.values() for v in pair]
            times = tune.time_variants(found, M, N, K, torch.bfloat16, device, a.reps, flush, extra=extra, sets=sets)
            for kernel, (chosen, wide) in pairs.items():
                row = {"model": shape.model, "tokens": M, "kernel": kernel, "choice": chosen.key,
                       "choice_ms": times[chosen.key], "swapab112_ms": times.get(wide.key),
                       "cublas_ms": times["cublas_gemm"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps({"gpu": gpu, "reps": a.reps, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
