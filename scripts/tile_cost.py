#!/usr/bin/env python3
"""Splits a config's time per output tile into a part that grows with K and a fixed part.

For each config, times ``y = swiglu(x @ W^T)`` at fixed M and N over a range of K (CUDA events,
L2 flushed, median of ``--reps``) and reports the time one SM spends per tile,
``time * SMs / tiles``, against the number of k-tiles. A least-squares line through those points
gives the cost of one k-tile (slope) and the fixed cost per tile (intercept: epilogue, hand-over and
pipeline fill that the schedule does not hide). cuBLAS (one GEMM of the same FLOPs, no activation) is
timed at the same shapes for reference.

Usage (on a Hopper GPU): ``python3 scripts/tile_cost.py [--configs NAME ...] [--m 8192 --n 4864]``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import torch

from fused_swiglu import _lib
from fused_swiglu.weights import pack_gate_up
from tune_configs import flush_buffer, time_ms  # same protocol as the config sweeps (scripts/ is on sys.path)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y over x."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return my - slope * mx, slope


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="*", default=["packed_pingpong_128x128x64_1x2_bf16",
                                                     "packed_pingpong_128x192x64_2x1_bf16",
                                                     "dual_pingpong_128x128x64_1x2_bf16"])
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--n", type=int, default=4864, help="I (output columns)")
    ap.add_argument("--ks", nargs="*", type=int, default=[128, 256, 512, 896, 1536, 2048, 3584])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    lib = _lib.library()
    infos = {c.name: c for c in lib.configs}
    for name in args.configs:
        if name not in infos:
            ap.error(f"--configs: {name} is not in the kernel library")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = flush_buffer()
    M, N = args.m, args.n
    rows = []
    for K in args.ks:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        wg = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
        wu = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
        wp, wcat = pack_gate_up(wg, wu), torch.cat([wg, wu])
        y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        rows.append(dict(config="cublas_gemm", K=K, ms=statistics.median(time_ms(lambda: x @ wcat.T, flush, args.reps))))
        for name in args.configs:
            c = infos[name]
            w, w_up = (wp, None) if c.kernel == "packed" else (wg, wu)
            tiles = math.ceil(M / c.tile_m) * math.ceil(2 * N / c.tile_n)
            ms = statistics.median(time_ms(lambda: lib.run(name, x, w, w_up, y, 0, 1), flush, args.reps))
            rows.append(dict(config=name, K=K, ms=ms, tiles=tiles, k_tiles=math.ceil(K / c.tile_k),
                             us_per_tile_per_sm=ms * 1e3 * sms / tiles))
    for name in ["cublas_gemm", *args.configs]:
        print(name)
        for r in (r for r in rows if r["config"] == name):
            cub = next(q["ms"] for q in rows if q["config"] == "cublas_gemm" and q["K"] == r["K"])
            extra = f"  {r['us_per_tile_per_sm']:.3f} us/tile/SM" if "tiles" in r else ""
            print(f"  K={r['K']:5d} {r['ms']:.4f} ms  cuBLAS/this {cub / r['ms']:.2f}{extra}")
        pts = [(r["k_tiles"], r["us_per_tile_per_sm"]) for r in rows if r["config"] == name and "tiles" in r]
        if len(pts) >= 2:
            a, b = fit(pts)
            print(f"  fit: {b:.4f} us per k-tile, {a:.3f} us fixed per tile")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), M=M, N=N, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
