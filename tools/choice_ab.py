#!/usr/bin/env python3
"""A/B of the config choice against the previous selection table, on the benchmark's Qwen2.5 cells.

``tools/data/table_choices_f3647a5.json`` holds what the 107-row table (with its wave and tail
rules) chose at commit f3647a5 for every Qwen2.5 shape and the benchmark's token counts, per kernel
and accumulation. For each such cell this times that config (with its raster and swizzle) and the
current choice (``configs.select`` on this GPU) in turn, rep by rep (the benchmark's protocol:
L2 flushed before each call, input sets rotated, CUDA-event medians of the GPU time), and writes
``new_over_old`` (the current choice's median time over the table's; > 1: slower).

Usage (on a Hopper GPU): ``python3 tools/choice_ab.py --out choice_ab.json [--reps 30]``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.bench import timing, tune
from fused_swiglu.bench.shapes import MODELS, TOKENS

DATA = Path(__file__).resolve().parent / "data" / "table_choices_f3647a5.json"


def variant(name: str, raster: int, swizzle: int) -> tune.Variant:
    base = configs.BY_BASE_NAME[name.removesuffix("_bf16")]
    cfg = dataclasses.replace(base, raster=raster, swizzle=swizzle)
    return tune.Variant(cfg, raster, swizzle)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    old = {(r["hidden_size"], r["intermediate_size"], r["tokens"], r["kernel"], r["accumulation"]): r
           for r in json.loads(DATA.read_text())["choices"]}
    device = torch.device("cuda", torch.cuda.current_device())
    num_sms, gpu, smem = _lib.target(device.index)
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    rows = []
    for shape in MODELS:
        K, N = shape.hidden_size, shape.intermediate_size
        for M in TOKENS:
            pairs = []
            for kernel in configs.KERNELS:
                for acc in configs.ACCUMULATIONS:
                    r = old[(K, N, M, kernel, acc)]
                    before = variant(r["config"], r["raster"], r["swizzle"])
                    choice = configs.select(kernel, M, N, K, torch.bfloat16, accumulation=acc, num_sms=num_sms,
                                            gpu=gpu, smem_limit=smem)
                    after = variant(choice.name, choice.raster, choice.swizzle)
                    pairs.append((kernel, acc, before, after))
            found = {v.key: v for _, _, b, n in pairs for v in (b, n)}
            times = tune.time_variants(list(found.values()), M, N, K, torch.bfloat16, device, a.reps, flush)
            for kernel, acc, before, after in pairs:
                rows.append({"model": shape.model, "hidden_size": K, "intermediate_size": N, "tokens": M,
                             "kernel": kernel, "accumulation": acc, "table": before.key, "choice": after.key,
                             "table_ms": times[before.key], "choice_ms": times[after.key],
                             "new_over_old": times[after.key] / times[before.key]})
                print(f"{shape.model:14s} M={M:5d} {kernel:6s} {acc:8s} {rows[-1]['new_over_old']:.3f} "
                      f"{before.key} -> {after.key}", flush=True)
    worst = max(rows, key=lambda r: r["new_over_old"])
    meta = {"gpu": gpu, "reps": a.reps, "torch": torch.__version__,
            "worst_new_over_old": worst["new_over_old"], "worst_cell": f"{worst['model']} M={worst['tokens']} "
            f"{worst['kernel']} {worst['accumulation']}",
            "cells_over_1.03": sum(r["new_over_old"] > 1.03 for r in rows), "cells": len(rows)}
    Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
