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


def fastest(paths: list[Path]) -> tuple[str, dict[tuple, float]]:
    """(the GPU, {(model, H, I, M, method): the fastest median_ms}) of one GPU's sweep files, rows of the
    sustained protocol with a positive time only.

    Raises:
        SystemExit: the files name more than one GPU (``meta.gpu``), or none.
    """
    out: dict[tuple, float] = {}
    gpus = set()
    for path in paths:
        data = json.loads(path.read_text())
        gpus.add(data["meta"].get("gpu"))
        for r in data["rows"]:
            if r.get("protocol", "sustained") == "sustained" and (r.get("median_ms") or 0) > 0:
                key = (r["model"], r["hidden_size"], r["intermediate_size"], r["tokens"], r["method"])
                out[key] = min(out.get(key, math.inf), r["median_ms"])
    if len(gpus) != 1 or None in gpus:
        raise SystemExit(f"the sweeps of one side must come from one GPU named in meta.gpu; got {sorted(map(str, gpus))}")
    return gpus.pop(), out


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
    (gpu_a, a), (gpu_b, b) = fastest(args.a), fastest(args.b)
    if gpu_a == gpu_b:
        raise SystemExit(f"both sides are sweeps of {gpu_a}")
    print(f"{gpu_a} time / {gpu_b} time, M >= {args.from_m}")
    rows = ratios(a, b, args.from_m, args.by_model)
    for key, values in sorted(rows.items(), key=lambda kv: (kv[0][0], math.fsum(map(math.log, kv[1])))):
        geomean = math.exp(math.fsum(map(math.log, values)) / len(values))
        print(f"{' '.join(key):60s} n={len(values):4d}  geomean {geomean:.3f}  min {min(values):.3f}  "
              f"max {max(values):.3f}")


if __name__ == "__main__":
    main()
