#!/usr/bin/env python3
"""A/B of two selection tables: the configs chosen by a previous ``configs.py`` (``--old``, a copy of
src/fused_swiglu/configs.py from another commit) and by the current one, for both kernels, next to
the cuBLAS GEMM of the same FLOPs, from one kernel library.

For each shape and token count M, the cells where the two tables choose differently (config, raster,
or swizzle) run cuBLAS, the old choice and the new choice in turn, rep by rep
(``tune_configs.in_turn_ms``: L2 flushed before each, the first of them rotating); medians of
``--reps`` are kept. Cells where both tables agree are skipped.

Prints, per shape and kernel, ``M:old/new`` time ratios (> 1: the new choice is faster) and their
geometric mean; ``--out`` writes every row as JSON.

Usage (on a Hopper GPU): ``python3 scripts/table_ab.py --old configs_old.py [--models 0.5B 7B]
[--tokens 194 204 ...] [--reps 10] [--out ab.json]``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.bench.shapes import find as find_models
from tune_configs import flush_buffer, in_turn_ms, kernel_operands  # scripts/ is on sys.path


def load_old_table(path: str):
    """The ``configs`` module of another commit, imported as a submodule of fused_swiglu (its relative
    imports resolve to the current package)."""
    spec = importlib.util.spec_from_file_location("fused_swiglu._configs_old", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def label(c) -> str:
    """``name@raster:swizzle`` of a choice."""
    return f"{c.name}@{c.raster}:{c.swizzle}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="a configs.py of another commit")
    ap.add_argument("--models", nargs="+", default=["0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"],
                    help="Qwen2.5 sizes or HxI shapes")
    ap.add_argument("--tokens", nargs="+", type=int, required=True, help="token counts M")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per cell (default 10)")
    ap.add_argument("--out", help="write every row as JSON here")
    a = ap.parse_args()

    old = load_old_table(a.old)
    lib = _lib.library()
    available = lib.names
    flush = flush_buffer()
    rows = []
    for shape in find_models(a.models):
        H, I = shape.hidden_size, shape.intermediate_size
        wcat, operands = kernel_operands(H, I)
        x_all = torch.randn(max(a.tokens), H, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(max(a.tokens), I, device="cuda", dtype=torch.bfloat16)
        for kernel, (w, w_up) in operands.items():
            line, ratios = [], []
            for M in a.tokens:
                c_old = old.select(kernel, M, I, H, torch.bfloat16, available)
                c_new = configs.select(kernel, M, I, H, torch.bfloat16, available)
                if label(c_old) == label(c_new):  # the two modules' Choice classes never compare equal
                    continue
                x = x_all[:M]
                fns = [lambda x=x: x @ wcat.T]
                for c in (c_old, c_new):
                    fns.append(lambda c=c, x=x: lib.run(c.name, x, w, w_up, y[:M], c.raster, c.swizzle))
                t_cublas, t_old, t_new = (statistics.median(v) * 1e3 for v in in_turn_ms(fns, flush, a.reps))
                rows.append(dict(model=shape.model, kernel=kernel, tokens=M, cublas_us=t_cublas, old_us=t_old,
                                 new_us=t_new, old_config=label(c_old), new_config=label(c_new)))
                ratios.append(t_old / t_new)
                line.append(f"{M}:{t_old / t_new:.2f}")
            if ratios:
                mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
                print(f"{shape.model} {kernel}: old/new {' '.join(line)}  geometric mean {mean:.3f}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
