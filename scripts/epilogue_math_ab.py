#!/usr/bin/env python3
"""A/B of the SwiGLU epilogue's two maths (``epilogue_math`` 0: IEEE division, 1: branch-free
reciprocal) on the same configs, next to the cuBLAS GEMM of the same FLOPs.

For each shape, kernel and token count M the candidates are the config the selection table chooses
(for ``--accumulation``)
and, with ``--all-configs``, every bf16 Pingpong config of that kernel that compiles the branch-free
math, at each of ``--rasters``. Each candidate runs with both maths, in turn with cuBLAS, rep by rep
(``tune_configs.in_turn_ms``: L2 flushed before each); medians of ``--reps``. Every output is first
checked against the fp32 one-rounding reference (NaN-poisoned; ``tune_configs.output_ok``: no NaN
left, relative error below 8e-3).

Prints ``cuBLAS time / config time`` for each math; ``--out`` writes every row as JSON.

Usage (on a Hopper GPU): ``python3 scripts/epilogue_math_ab.py --tokens 512 2048 [--models 3B 14B]
[--all-configs] [--rasters 0:1 1:1] [--reps 20] [--out ab.json]``.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.bench.shapes import find as find_models
from fused_swiglu.reference import swiglu_fp32_one_rounding
from tune_configs import flush_buffer, in_turn_ms, kernel_operands, output_ok  # scripts/ is on sys.path


def candidates(lib, kernel: str, M: int, I: int, H: int, accumulation: str, all_configs: bool,
               rasters: list[tuple[int, int]]):
    """(name, raster, swizzle, is_table_choice) to time; only configs that compile both maths."""
    bf = lib.branch_free_names
    chosen = configs.select(kernel, M, I, H, torch.bfloat16, lib.names, accumulation, branch_free=bf)
    out = []
    if chosen.name in bf:
        out.append((chosen.name, chosen.raster, chosen.swizzle, True))
    if all_configs:
        for name in sorted(bf):
            if not name.startswith(f"{kernel}_pingpong_") or not name.endswith("_bf16") or "promote" in name:
                continue
            for r, s in rasters:
                if (name, r, s) != (chosen.name, chosen.raster, chosen.swizzle):
                    out.append((name, r, s, False))
    return chosen, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"],
                    help="Qwen2.5 sizes or HxI shapes")
    ap.add_argument("--tokens", nargs="+", type=int, required=True, help="token counts M")
    ap.add_argument("--kernels", nargs="+", default=["packed", "dual"], choices=["packed", "dual"])
    ap.add_argument("--accumulation", default="fast", choices=list(configs.ACCUMULATIONS),
                    help="the table whose choices are timed (default fast)")
    ap.add_argument("--all-configs", action="store_true", help="also every branch-free-capable config")
    ap.add_argument("--rasters", nargs="+", default=["0:1", "1:1"], help="raster:swizzle pairs (--all-configs)")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per cell (default 20)")
    ap.add_argument("--out", help="write every row as JSON here")
    a = ap.parse_args()
    rasters = [tuple(int(v) for v in r.split(":")) for r in a.rasters]

    lib = _lib.library()
    flush = flush_buffer()
    rows = []
    for shape in find_models(a.models):
        H, I = shape.hidden_size, shape.intermediate_size
        wcat, operands = kernel_operands(H, I)
        x_all = torch.randn(max(a.tokens), H, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(max(a.tokens), I, device="cuda", dtype=torch.bfloat16)
        wg, wu = wcat[:I], wcat[I:]
        for M in a.tokens:
            x = x_all[:M]
            ref = swiglu_fp32_one_rounding(x, wg, wu).float()
            for kernel in a.kernels:
                w, w_up = operands[kernel]
                chosen, cands = candidates(lib, kernel, M, I, H, a.accumulation, a.all_configs, rasters)
                for name, r, s, is_choice in cands:
                    for math in (0, 1):
                        y[:M].fill_(float("nan"))
                        lib.run(name, x, w, w_up, y[:M], r, s, math)
                        if not output_ok(y[:M], ref):
                            raise SystemExit(f"{shape.model} M={M} {name}@{r}:{s} math {math}: wrong output")
                    fns = [lambda x=x: x @ wcat.T]
                    for math in (0, 1):
                        fns.append(lambda x=x, n=name, r=r, s=s, m=math: lib.run(n, x, w, w_up, y[:M], r, s, m))
                    t_cub, t0, t1 = (statistics.median(v) * 1e3 for v in in_turn_ms(fns, flush, a.reps))
                    rows.append(dict(model=shape.model, kernel=kernel, tokens=M, config=f"{name}@{r}:{s}",
                                     table_choice=is_choice, accumulation=a.accumulation, table_math=chosen.epilogue_math,
                                     cublas_us=t_cub, ieee_us=t0, branch_free_us=t1))
                    print(f"{shape.model:>13} {kernel:6} M={M:<5} {name}@{r}:{s}{' *' if is_choice else '  '} "
                          f"cuBLAS/ieee {t_cub / t0:.3f}  cuBLAS/branch-free {t_cub / t1:.3f}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
