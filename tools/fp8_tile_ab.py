#!/usr/bin/env python3
"""Times e4m3 configs against the choice (fused_swiglu.fp8.choose_config) on given shapes and token counts.

Usage: ``python3 tools/fp8_tile_ab.py --configs NAME [NAME ...] [--models 7B 72B ...] [--tokens 1 2048 8192]
[--reps 30] [--out ab.json]``. Every config that can serve a cell (its token-tile clusters filled) is
timed with the choice and the unfused FP8 path (``bench fp8``'s), interleaved rep by rep, CUDA-graph
replays, L2 flushed, input sets rotated; prints config time / choice time per cell (< 1: the config is
faster) and writes the rows as JSON with ``--out``.
"""
from __future__ import annotations

import argparse
import json

import torch

from fused_swiglu import fp8
from fused_swiglu.bench import fp8 as fp8_bench
from fused_swiglu.bench.shapes import find_fp8
from fused_swiglu.bench import report, timing


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", required=True)
    ap.add_argument("--models", nargs="+", default=["7B", "14B", "32B", "72B"])
    ap.add_argument("--tokens", nargs="+", type=int, default=[1, 16, 2048, 8192])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    for name in args.configs:
        if name not in fp8.CONFIG_NAMES:
            raise SystemExit(f"--configs: {name!r} is not an e4m3 config; known: {', '.join(fp8.CONFIG_NAMES)}")
    device = torch.device("cuda", torch.cuda.current_device())
    flush = timing.flush_buffer(device)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    timing.warm_gpu(device)
    rows = []
    for shape in find_fp8(args.models):
        torch._dynamo.reset()
        for M in args.tokens:
            sets = fp8_bench.make_sets(M, shape.hidden_size, shape.intermediate_size, device, l2)
            choice = fp8.choose_config(M)
            # swap-AB configs at decode sizes only, the others above them; 2 x 1 clusters on whole pairs
            names = [choice] + [n for n in args.configs if n != choice and ("swapab" in n) == (M <= 16) and (
                "_2x1_" not in n or -(-M // int(n.split("_")[-3].split("x")[0])) % 2 == 0)]
            calls = {n: [lambda s=s, n=n: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale, config=n)
                         for s in sets] for n in names}
            calls.update(fp8_bench.calls_for(sets, ["fp8_unfused"]))
            t = timing.time_interleaved(timing.as_graph_replays(calls, device), device, reps=args.reps, flush=flush)
            base = t[choice].median_ms
            line = [f"{shape.model} M={M}: choice {choice} {base:.4f} ms"]
            for n, tm in t.items():
                rows.append({"model": shape.model, "tokens": M, "config": n, "choice": n == choice,
                             "median_ms": tm.median_ms, "over_choice": tm.median_ms / base})
                if n != choice:
                    line.append(f"{n} {tm.median_ms / base:.3f}")
            print("; ".join(line), flush=True)
            del sets, calls
            torch.cuda.empty_cache()
    if args.out:
        meta = report.machine_meta(device)
        meta.update({"reps": args.reps, "protocol": "CUDA-graph replays, time_interleaved, L2 flushed, sets rotated"})
        json.dump({"meta": meta, "rows": rows}, open(args.out, "w"), indent=2)


if __name__ == "__main__":
    main()
