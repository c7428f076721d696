#!/usr/bin/env python3
"""Times the selection table's own choice for both kernels over a fine grid of token counts M.

The benchmark measures M = 1, 16, 128, 512, 2048 and 8192 only; a table row can be badly wrong in
between (docs/perf-notes.md, entries 37 and 38: 0.49x cuBLAS at M = 2304 from swizzle padding). For
each shape and M this times the cuBLAS GEMM of the same FLOPs (``x @ [W_gate; W_up]^T``) and the
config that ``configs.select`` picks for Kernel-2 (packed) and Kernel-1 (dual), launched through the
kernel library with the table's raster and swizzle. All of them run in turn, rep by
rep (``tune_configs.in_turn_ms``: the L2 flushed before each, the first of them rotating), and the
medians of ``--reps`` are kept. No output is checked here (the GPU test suite does that for every
config).

``--configs`` adds library configs to the same turn: an A/B against the table's choice. Perf-notes
entry 39 timed 64x192 tiles (``packed_pingpong_64x192x64_1x1_bf16@1:1``) against the table of the
time; the table now picks them at those token counts, so to repeat that comparison name the previous
choices instead (``packed_pingpong_128x128x64_1x2_bf16`` at odd numbers of 128-token tiles,
``..._2x1_bf16`` at even ones).

Prints, per shape, every M where either kernel runs below ``--below`` of cuBLAS's speed
(cuBLAS time / fused time, "packed/dual"), and for each ``--configs`` entry the geometric mean of
(its kernel's table time / its time) over the token counts; ``--out`` writes every row as JSON.

Usage (on a Hopper GPU): ``python3 scripts/table_sweep.py [--models 7B 4096x14336] [--tokens 520 2304]
[--configs NAME@RASTER:SWIZZLE ...] [--out sweep.json]``. Default M: 8 ... 2048 in steps of 8, then
2112 ... 4096 in steps of 64; about a minute for the seven Qwen2.5 shapes on an H200.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.bench.shapes import find as find_models
from tune_configs import flush_buffer, in_turn_ms, kernel_operands  # scripts/ is on sys.path

DEFAULT_TOKENS = list(range(8, 2049, 8)) + list(range(2112, 4097, 64))


def parse_configs(specs: list[str]) -> list[tuple[str, int, int]]:
    """``NAME`` or ``NAME@RASTER:SWIZZLE`` (raster 0/1/2, swizzle 1/2/4/8; NAME alone: 0:1) ->
    (name, raster, swizzle), for bf16 packed or dual config names.

    Raises:
        SystemExit: a malformed entry, a name not of a bf16 packed / dual config, or one entry twice.
    """
    out = []
    for spec in specs:
        name, at, launch = spec.partition("@")
        raster, colon, swizzle = launch.partition(":") if at else ("0", ":", "1")
        if not colon or raster not in ("0", "1", "2") or swizzle not in ("1", "2", "4", "8"):
            raise SystemExit(f"--configs: {spec!r}: write NAME or NAME@RASTER:SWIZZLE (RASTER 0-2, SWIZZLE 1/2/4/8)")
        if not name.endswith("_bf16") or not name.startswith(("packed_", "dual_")):
            raise SystemExit(f"--configs: {name!r} is not the name of a bf16 packed or dual config")
        if (name, int(raster), int(swizzle)) in out:
            raise SystemExit(f"--configs: {name}@{raster}:{swizzle} is named twice")
        out.append((name, int(raster), int(swizzle)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", help="Qwen2.5 sizes or HxI shapes (default: the seven Qwen2.5 models)")
    ap.add_argument("--tokens", nargs="+", type=int, help="token counts (default: the fine grid above)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per M (default 5)")
    ap.add_argument("--below", type=float, default=0.8, help="report M where cuBLAS time / fused time < this")
    ap.add_argument("--configs", nargs="+", default=[], metavar="NAME@RASTER:SWIZZLE",
                    help="library configs (bf16) to time in the same turn as the table's choice")
    ap.add_argument("--out", help="write every row as JSON here")
    a = ap.parse_args()

    extra = parse_configs(a.configs)
    lib = _lib.library()
    available = lib.names
    missing = [name for name, _, _ in extra if name not in available]
    if missing:
        raise SystemExit(f"--configs: not in the kernel library: {', '.join(missing)}")
    labels = [f"{name}@{raster}:{swizzle}" for name, raster, swizzle in extra]
    tokens = a.tokens or DEFAULT_TOKENS
    flush = flush_buffer()
    rows = []
    for shape in find_models(a.models):
        H, I = shape.hidden_size, shape.intermediate_size
        wcat, operands = kernel_operands(H, I)
        x_all = torch.randn(max(tokens), H, device="cuda", dtype=torch.bfloat16)
        y_all = torch.empty(max(tokens), I, device="cuda", dtype=torch.bfloat16)
        launches = [(name, raster, swizzle, *operands[name.split("_")[0]]) for name, raster, swizzle in extra]
        low, gains = [], {label: [] for label in labels}
        for M in tokens:
            x, y = x_all[:M], y_all[:M]
            fns, names = [lambda: x @ wcat.T], []
            for kernel, (w, w_up) in operands.items():
                c = configs.select(kernel, M, I, H, torch.bfloat16, available)
                fns.append(lambda c=c, w=w, w_up=w_up: lib.run(c.name, x, w, w_up, y, c.raster, c.swizzle))
                names.append(f"{c.name}@{c.raster}:{c.swizzle}")
            for n, r, s, w, w_up in launches:
                fns.append(lambda n=n, r=r, s=s, w=w, w_up=w_up: lib.run(n, x, w, w_up, y, r, s))
            t_cublas, t_packed, t_dual, *t_extra = (statistics.median(t) for t in in_turn_ms(fns, flush, a.reps))
            rows.append(dict(model=shape.model, hidden_size=H, intermediate_size=I, tokens=M, cublas_ms=t_cublas,
                             packed_ms=t_packed, dual_ms=t_dual, packed_config=names[0], dual_config=names[1],
                             configs_ms=dict(zip(labels, t_extra))))
            for label, (name, _, _), t in zip(labels, extra, t_extra):
                gains[label].append((t_packed if name.startswith("packed_") else t_dual) / t)
            r_packed, r_dual = t_cublas / t_packed, t_cublas / t_dual
            if min(r_packed, r_dual) < a.below:
                low.append(f"{M}:{r_packed:.2f}/{r_dual:.2f}")
        print(f"{shape.model} below {a.below}: {' '.join(low) or 'none'}", flush=True)
        for label, g in gains.items():
            mean = math.exp(sum(map(math.log, g)) / len(g))
            print(f"  {label}: table time / its time, geometric mean {mean:.3f} (min {min(g):.3f}, max {max(g):.3f})")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
