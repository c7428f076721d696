#!/usr/bin/env python3
"""Write the ``sustained`` section of a tuned-data file from launch timings at the power cap.

Reads one or more results files of ``tools/schedule_ab.py --protocol sustained`` (rows of launch keys
``config@raster:swizzle`` with their median times; one GPU), fits each launch's costs with
:func:`fused_swiglu.bench.tune.fit_sustained` and writes them into ``--out``, a tuned-data file
(:mod:`fused_swiglu.tuning`): into its ``sustained`` section where the file exists, else into a new file
that holds only that section (the reference GPU's file then gives the costs of the interleaved
calibration). Prints, per cell, the fastest launch timed and the one the fitted costs rank first.

Usage: ``python3 tools/sustained_fit.py docs/results/h100/launch_sweep.json --out
src/fused_swiglu/tuned/nvidia-h100-80gb-hbm3_bf16.json``.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

from fused_swiglu import configs, cost_model, tuning
from fused_swiglu.bench import tune


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    rows, metas = [], []
    for path in a.sweeps:
        data = json.loads(path.read_text())
        metas.append(data["meta"])
        rows += [r for r in data["rows"] if r.get("protocol") == "sustained"]
    gpus = {m["gpu"] for m in metas}
    if len(gpus) != 1:
        raise SystemExit(f"the sweeps come from {len(gpus)} GPUs ({', '.join(sorted(gpus))}); give one GPU's")
    gpu, num_sms = metas[0]["gpu"], int(metas[0]["num_sms"])
    section = tune.fit_sustained(rows, num_sms)
    section["source"] = [str(p) for p in a.sweeps]
    tune.write_sustained(a.out, section, gpu, metas[0].get("dtype", "bf16"), num_sms)
    print(f"wrote {a.out}: {len(section['launches'])} launches from M = {section['from_m']}")

    costs = {k: cost_model.ConfigCosts(v["tile_us"], v["k_tile_us"]) for k, v in section["launches"].items()}
    cells: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in rows:
        cells[r["model"], r["hidden_size"], r["intermediate_size"], r["tokens"]][r["method"]] = r["median_ms"]
    ratios = []
    for (model, K, N, M), times in sorted(cells.items()):
        for kernel in configs.KERNELS:
            timed = {k: t for k, t in times.items() if k in costs and k.startswith(kernel + "_")}
            if not timed:
                continue

            def predicted(key: str) -> float:
                name, raster, swizzle = tuning.split_launch_key(key)
                v = configs.BY_BASE_NAME[name]
                return cost_model.predict_sustained_us(v, costs[key], M, N, K, num_sms, swizzle)

            best, pick = min(timed, key=timed.get), min(timed, key=predicted)
            ratios.append(timed[best] / timed[pick])
            print(f"{model:17s} M={M:5d} {kernel:6s} fastest {best:38s} ranked first {pick:38s} "
                  f"{timed[best] / timed[pick]:.3f}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"fastest / ranked-first time, in sample: geometric mean {geo:.3f}, lowest {min(ratios):.3f}")


if __name__ == "__main__":
    main()
