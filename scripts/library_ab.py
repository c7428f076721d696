#!/usr/bin/env python3
"""A/B of two builds of the kernel library: the selection table's choice for both kernels, launched
from library A and from library B, next to the cuBLAS GEMM of the same FLOPs.

For each shape and token count M, the table's config for Kernel-2 (packed) and Kernel-1 (dual) runs
from both libraries with the table's raster and swizzle, and all five launches are
timed in turn, rep by rep (``tune_configs.in_turn_ms``: L2 flushed before each, the first of them
rotating); medians of ``--reps`` are kept. The two libraries' Kernel-1 outputs of each cell are
compared bit for bit. Both libraries must hold the configs that the table picks (same config names).

Prints, per shape, ``M:packed/dual`` with time(A) / time(B) (> 1: B is faster; ``!`` marks a cell
whose outputs differ); ``--out`` writes every row as JSON. Perf-notes entry 41 ran it with A = the
library before that entry and B = the library after it.

Usage (on a Hopper GPU): ``python3 scripts/library_ab.py --a OLD.so --b NEW.so [--models 7B 4096x14336]
[--tokens 129 257 ...] [--reps 10] [--accumulation promoted] [--out ab.json]``; about a minute for the defaults on an H200.
"""
from __future__ import annotations

import argparse
import json
import statistics

from pathlib import Path

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.bench.shapes import find as find_models
from tune_configs import flush_buffer, in_turn_ms, kernel_operands  # scripts/ is on sys.path

DEFAULT_TOKENS = [1, 17, 33, 65, 100, 128, 129, 150, 170, 200, 257, 300, 340, 400, 450, 512, 520, 600, 700, 800,
                  900, 1000, 1100, 1300, 1500, 1700, 2048, 2100, 2500, 3000, 4100, 5000, 8192, 8200]
DEFAULT_MODELS = ["0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B", "4096x14336"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="library A (libfused_swiglu.so)")
    ap.add_argument("--b", required=True, help="library B (libfused_swiglu.so)")
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="Qwen2.5 sizes or HxI shapes")
    ap.add_argument("--tokens", nargs="+", type=int, default=DEFAULT_TOKENS, help="token counts M")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per cell (default 10)")
    ap.add_argument("--accumulation", default="fast", choices=configs.ACCUMULATIONS,
                    help="the table's rows of this accumulation (default fast)")
    ap.add_argument("--out", help="write every row as JSON here")
    a = ap.parse_args()

    # each core library loads its config libraries from its own folder
    lib_a = _lib.Library(a.a, config_dirs=(Path(a.a).parent,))
    lib_b = _lib.Library(a.b, config_dirs=(Path(a.b).parent,))
    available = lib_b.names
    flush = flush_buffer()
    rows = []
    for shape in find_models(a.models):
        H, I = shape.hidden_size, shape.intermediate_size
        wcat, operands = kernel_operands(H, I)
        x_all = torch.randn(max(a.tokens), H, device="cuda", dtype=torch.bfloat16)
        y_a = torch.empty(max(a.tokens), I, device="cuda", dtype=torch.bfloat16)
        y_b = torch.empty_like(y_a)
        line = []
        for M in a.tokens:
            x = x_all[:M]
            fns, names = [lambda: x @ wcat.T], []
            for kernel, (w, w_up) in operands.items():
                c = configs.select(kernel, M, I, H, torch.bfloat16, available, a.accumulation)
                for lib, y in ((lib_a, y_a), (lib_b, y_b)):
                    fns.append(lambda lib=lib, y=y, c=c, w=w, w_up=w_up:
                               lib.run(c.name, x, w, w_up, y[:M], c.raster, c.swizzle))
                names.append(f"{c.name}@{c.raster}:{c.swizzle}")
            t = [statistics.median(v) * 1e3 for v in in_turn_ms(fns, flush, a.reps)]
            same = bool(torch.equal(y_a[:M], y_b[:M]))  # the last launches of each: Kernel-1
            rows.append(dict(model=shape.model, hidden_size=H, intermediate_size=I, tokens=M, cublas_us=t[0],
                             packed_a_us=t[1], packed_b_us=t[2], dual_a_us=t[3], dual_b_us=t[4],
                             packed_config=names[0], dual_config=names[1], dual_bit_identical=same))
            line.append(f"{M}:{t[1] / t[2]:.2f}/{t[3] / t[4]:.2f}{'' if same else '!'}")
        print(f"{shape.model} A/B packed/dual: {' '.join(line)}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
