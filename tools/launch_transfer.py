#!/usr/bin/env python3
"""How a launch's time carries over from one GPU to another: for each method of two GPUs' sustained sweeps
(a config's launches grouped by config; cuBLAS, eager, quack as they are), the geometric mean, minimum and
maximum of the first GPU's time over the second's, over every (shape, M, launch) both sweeps timed with
M >= ``--from-m``; with ``--by-model``, the same per shape for each method. A launch timed more than once in a
GPU's files takes its fastest time.

Usage: ``python3 tools/launch_transfer.py --a docs/results/h100/launch_sweep*.json --b
docs/results/h200/launch_sweep*.json [--from-m 2048] [--by-model]``
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path


def fastest(paths: list[Path]) -> dict[tuple, float]:
    """{(model, H, I, M, method): the fastest median_ms} of sweep files."""
    out: dict[tuple, float] = {}
    for path in paths:
        for r in json.loads(path.read_text())["rows"]:
            key = (r["model"], r["hidden_size"], r["intermediate_size"], r["tokens"], r["method"])
            out[key] = min(out.get(key, math.inf), r["median_ms"])
    return out


def ratios(a: dict[tuple, float], b: dict[tuple, float], from_m: int, by_model: bool) -> dict[tuple, list[float]]:
    """{(method's config or name[, model]): [a's time / b's time, one per shared cell and launch]}."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for key in a.keys() & b.keys():
        model, _, _, M, method = key
        if M >= from_m:
            group = method.partition("@")[0]
            out[(group, model) if by_model else (group,)].append(a[key] / b[key])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", nargs="+", type=Path, required=True, help="the first GPU's sweeps (numerator)")
    ap.add_argument("--b", nargs="+", type=Path, required=True, help="the second GPU's sweeps (denominator)")
    ap.add_argument("--from-m", type=int, default=2048)
    ap.add_argument("--by-model", action="store_true")
    args = ap.parse_args()
    rows = ratios(fastest(args.a), fastest(args.b), args.from_m, args.by_model)
    for key, values in sorted(rows.items(), key=lambda kv: (kv[0][0], math.fsum(map(math.log, kv[1])))):
        geomean = math.exp(math.fsum(map(math.log, values)) / len(values))
        print(f"{' '.join(key):60s} n={len(values):4d}  geomean {geomean:.3f}  min {min(values):.3f}  "
              f"max {max(values):.3f}")


if __name__ == "__main__":
    main()
