#!/usr/bin/env python3
"""Accuracy of two builds of the kernel library on the same inputs: the selection table's choice for
both kernels, launched from library A and from library B, against float64 (``fused_swiglu.accuracy``:
exact-match, mismatch and max ulp, as ``fused-swiglu accuracy`` reports them).

Inputs as in ``fused-swiglu accuracy``: x ~ N(0, 1), weights ~ N(0, 1/H), bf16, fresh each run
(the seed is printed).

Usage (on a Hopper GPU): ``python3 scripts/library_accuracy_ab.py --a OLD.so --b NEW.so
[--models 0.5B 7B] [--tokens 2048] [--out acc.json]``.
"""
from __future__ import annotations

import argparse
import json
import os

from pathlib import Path

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.accuracy import compare, count_threshold_for
from fused_swiglu.bench.shapes import find as find_models
from fused_swiglu.reference import swiglu_float64
from fused_swiglu.weights import pack_gate_up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="library A (libfused_swiglu.so)")
    ap.add_argument("--b", required=True, help="library B (libfused_swiglu.so)")
    ap.add_argument("--models", nargs="+", default=None, help="Qwen2.5 sizes or HxI shapes (default: all seven)")
    ap.add_argument("--tokens", type=int, default=2048, help="M (default 2048)")
    ap.add_argument("--out", help="write every row as JSON here")
    a = ap.parse_args()

    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # each core library loads its config libraries from its own folder
    libs = {k: _lib.Library(p, config_dirs=(Path(p).parent,)) for k, p in (("a", a.a), ("b", a.b))}
    available = libs["b"].names
    threshold = count_threshold_for(torch.bfloat16)
    rows = []
    for shape in find_models(a.models):
        H, I, M = shape.hidden_size, shape.intermediate_size, a.tokens
        x = torch.randn(M, H, device="cuda", generator=gen).to(torch.bfloat16)
        wg = (torch.randn(I, H, device="cuda", generator=gen) * H**-0.5).to(torch.bfloat16)
        wu = (torch.randn(I, H, device="cuda", generator=gen) * H**-0.5).to(torch.bfloat16)
        operands = {"packed": (pack_gate_up(wg, wu), None), "dual": (wg, wu)}
        ref64 = swiglu_float64(x, wg, wu)
        for kernel, (w, w_up) in operands.items():
            for name, lib in libs.items():
                c = configs.select(kernel, M, I, H, torch.bfloat16, available)
                y = torch.full((M, I), float("nan"), device="cuda", dtype=torch.bfloat16)
                lib.run(c.name, x, w, w_up, y, c.raster, c.swizzle)
                r = compare(y, ref64, threshold)
                rows.append(dict(model=shape.model, tokens=M, kernel=kernel, library=name, config=c.name,
                                 exact=r.exact, mismatch=r.mismatch,
                                 max_ulp=r.max_ulp))
                print(f"{shape.model} M={M} {kernel} {name}: exact {r.exact:.4%} mismatch {r.mismatch:.4%} "
                      f"max ulp {r.max_ulp} ({c.name})", flush=True)
        del x, wg, wu, operands, ref64
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"seed": seed, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
