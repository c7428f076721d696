#!/usr/bin/env python3
"""Splits one problem's N columns into a part of whole waves and a tail, launched back to back.

A persistent kernel whose tile count is not a multiple of the SM count leaves SMs idle in its last
round. This experiment launches a config on the columns [0, n1) of y, with n1 chosen so that its
tiles fill exactly k rounds of the GPU's SMs, and a config of smaller tiles on the columns [n1, I)
(weights and y as column-slice views: packed rows [2·n1, 2I), W_gate/W_up rows [n1, I)). Each split,
and the table's config on the whole problem, is timed alternately with cuBLAS's GEMM of the same
FLOPs (``x @ cat(W_gate, W_up)ᵀ``), rep by rep, each after an L2 flush (the protocol of
tune_configs.py). Output columns are checked against float64 (relative error < 8e-3, no NaN left by
the poisoned output). docs/perf-notes.md, entry 20.

Usage (on a Hopper GPU): ``python3 scripts/tail_split.py [--models ...] [--tokens 512] [--out f.json]``.
Prints cuBLAS time / fused time, > 1 = fused faster.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics

import torch

from fused_swiglu import _lib
from fused_swiglu import configs as C
from fused_swiglu.bench.shapes import find as find_models
from fused_swiglu.weights import pack_gate_up
from fused_swiglu.reference import swiglu_float64
from tune_configs import flush_buffer, output_ok, paired_ms, random_weights  # scripts/ is on sys.path

# The part of whole waves: (TileShape_ClusterShape, raster, swizzle); the tail: smaller tiles.
WAVE_PART = {
    "packed": [("128x128x64_2x1", 0, 1), ("128x192x64_2x1", 0, 1), ("64x192x64_1x1", 0, 1),
               ("64x128x64_1x1", 1, 1), ("128x128x64_1x2", 0, 1)],
    "dual": [("128x128x64_2x1", 0, 1), ("64x128x64_1x1", 1, 1), ("128x128x64_1x2", 0, 1)],
}
TAIL = {
    "packed": ["64x64x64_1x1", "64x128x64_1x1", "64x192x64_1x1", "128x128x64_2x1"],
    "dual": ["64x64x64_1x1", "64x128x64_1x1", "128x128x64_2x1"],
}


def tile_dims(preset: str) -> tuple[int, int, int, int]:
    """(TileM, TileN, ClusterM, ClusterN) of a preset such as '128x192x64_2x1'."""
    tile, cluster = preset.split("_")
    tm, tn, _ = (int(v) for v in tile.split("x"))
    cm, cn = (int(v) for v in cluster.split("x"))
    return tm, tn, cm, cn


def splits(M: int, I: int, preset: str, sms: int) -> list[int]:
    """Column counts n1 < I whose tiles of ``preset`` fill whole rounds of ``sms`` SMs: the floor of
    the round count and one fewer."""
    tm, tn, _, cn = tile_dims(preset)
    rows = math.ceil(M / tm)
    rounds = rows * math.ceil(2 * I / tn) / sms
    out = []
    for k in sorted({math.floor(rounds), math.floor(rounds) - 1}):
        col_tiles = k * sms // rows
        col_tiles -= col_tiles % cn
        n1 = col_tiles * tn // 2
        if k >= 1 and 0 < n1 < I:
            out.append(n1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--tokens", nargs="+", type=int, default=[512])
    ap.add_argument("--kernels", nargs="+", default=["packed", "dual"], choices=["packed", "dual"])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out")
    a = ap.parse_args()
    lib = _lib.library()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = flush_buffer()
    rows = []
    for shape in find_models(a.models):
        H, I = shape.hidden_size, shape.intermediate_size
        wg, wu = random_weights(H, I)
        wp, wcat = pack_gate_up(wg, wu), torch.cat([wg, wu])
        for M in a.tokens:
            x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
            ref = swiglu_float64(x, wg, wu)
            y = torch.empty(M, I, device="cuda", dtype=torch.bfloat16)
            for kernel in a.kernels:

                def launch(name, n0, n1, raster, swizzle, kernel=kernel, x=x, y=y):
                    if kernel == "packed":
                        return lambda: lib.run(name, x, wp[2 * n0 : 2 * n1], None, y[:, n0:n1], raster, swizzle)
                    return lambda: lib.run(name, x, wg[n0:n1], wu[n0:n1], y[:, n0:n1], raster, swizzle)

                table = C.select(kernel, M, I, H, torch.bfloat16)
                cands = [(f"table {table.name}[{table.raster}:{table.swizzle}]",
                          [launch(table.name, 0, I, table.raster, table.swizzle)])]
                for preset, raster, swizzle in WAVE_PART[kernel]:
                    name_a = f"{kernel}_pingpong_{preset}_bf16"
                    if name_a not in lib.names:
                        continue
                    for n1 in splits(M, I, preset, sms):
                        for tail in TAIL[kernel]:
                            name_b = f"{kernel}_pingpong_{tail}_bf16"
                            if name_b in lib.names:
                                cands.append((f"{preset}[{raster}:{swizzle}] n1={n1} + {tail}",
                                              [launch(name_a, 0, n1, raster, swizzle), launch(name_b, n1, I, 0, 1)]))
                results = []
                for label, launches in cands:

                    def call(launches=launches):
                        for f in launches:
                            f()

                    y.fill_(float("nan"))
                    call()
                    torch.cuda.synchronize()
                    bad = not output_ok(y, ref)
                    t_cublas, t_fused = paired_ms(lambda: x @ wcat.T, call, flush, a.reps)
                    ratio = statistics.median(t_cublas) / statistics.median(t_fused)
                    results.append((ratio, label, bad))
                    rows.append(dict(model=shape.model, M=M, kernel=kernel, candidate=label, ratio=ratio,
                                     fused_ms=statistics.median(t_fused), cublas_ms=statistics.median(t_cublas), bad=bad))
                print(f"{shape.model} M={M} {kernel}: {results[0][1]} = {results[0][0]:.3f}", flush=True)
                for ratio, label, bad in sorted(results[1:], reverse=True)[:4]:
                    print(f"    {ratio:.3f} {label}{'  WRONG OUTPUT' if bad else ''}", flush=True)
        del wg, wu, wp, wcat
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=0)
    return 1 if any(r["bad"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
