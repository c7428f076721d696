#!/usr/bin/env python3
"""How close the choice comes on a GPU the project has never seen: the choice with a GPU's own tuned file
against the choice with that file hidden, priced by the launch timings of sweeps measured on that GPU.

For each cell (shape, M) of the sweeps and each kernel (packed, dual), both choices are made on the CPU:
``configs.select`` for the GPU by its name (its own file), and for a stand-in name that has no file but
reports what the GPU reports, with the GPU's own files hidden (the package's other files only, no user
folder): the choice then takes the data of another GPU whose reports match, else the reference GPU's costs
scaled to those reports, as on a part the project has never seen. Each chosen launch (``config@raster:swizzle``)
is looked up among the sweep's rows of that cell, its time divided by the cell's cuBLAS time in the same
file (sweeps of different runs are compared by that ratio; a launch timed in several files takes the median
of its ratios). Prints each kernel's cells where the hidden choice is slower than the tuned one by more than
``--within`` (default 5 %), the geometric mean of hidden / tuned, and the cells where a chosen launch was not
timed (no verdict there).

Usage: ``python3 tools/hidden_choice.py docs/results/h100/launch_sweep*.json [--out hidden.json]`` (``--out``:
``{"meta": {..., "summary": per kernel}, "rows": one per kernel and cell}``). ``--dram-byte-scale K``
multiplies the time the scaled data charges per DRAM byte (``tuning.scaled``'s ``us_per_dram_byte``) by K, to
see what a stronger bandwidth term would change.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

from fused_swiglu import catalog, configs, env, tuning

STAND_IN = "a Hopper GPU without tuned data"  # the name the hidden choice is made for


def cells_of(paths: list[Path]) -> tuple[str, dict]:
    """(GPU name, {(model, H, I, M): {launch key: [time / cuBLAS time, one per file]}}) of sustained sweeps.

    Raises:
        SystemExit: the files come from several GPUs, or a cell has no cuBLAS row.
    """
    gpus, cells = set(), defaultdict(lambda: defaultdict(list))
    for path in paths:
        data = json.loads(path.read_text())
        gpus.add(data["meta"]["gpu"])
        by_cell = defaultdict(dict)
        for r in data["rows"]:
            if r.get("protocol") == "sustained":
                by_cell[r["model"], r["hidden_size"], r["intermediate_size"], r["tokens"]][r["method"]] = r["median_ms"]
        for cell, times in by_cell.items():
            if "cublas_gemm" not in times:
                raise SystemExit(f"{path}: cell {cell} has no cublas_gemm row to normalize by")
            for method, ms in times.items():
                if "@" in method:
                    cells[cell][method].append(ms / times["cublas_gemm"])
    if len(gpus) != 1:
        raise SystemExit(f"the sweeps come from {len(gpus)} GPUs ({', '.join(sorted(gpus))}); give one GPU's")
    return gpus.pop(), cells


def launch_of(choice: configs.Choice) -> str:
    """The sweep's key of a bf16 choice: ``<config without dtype>@<raster>:<swizzle>``."""
    return tuning.launch_key(choice.name.removesuffix("_bf16"), choice.raster, choice.swizzle)


def compare(gpu: str, cells: dict, within: float, dram_byte_scale: float = 1.0) -> dict:
    """Per kernel: rows (cell, tuned and hidden launches, their cuBLAS ratios, hidden / tuned) and a summary."""
    own, dirs, scaled = tuning.reported, tuning._dirs, tuning.scaled
    reports = tuning.load(gpu, "bf16").reports
    if reports is None:
        raise SystemExit(f"{gpu}'s tuned file records no reports: the stand-in cannot report as it")
    if gpu == tuning.REFERENCE[0]:
        raise SystemExit(f"{gpu} is the reference GPU: its data is what a GPU without any takes; nothing to hide")
    others = Path(tempfile.mkdtemp())  # the package's files but the GPU's own
    try:
        env.set_config_names("")  # no FUSED_SWIGLU_CONFIG override in either choice
        for path in tuning.PACKAGE_DIR.glob("*.json"):
            if not path.name.startswith(tuning.gpu_slug(gpu) + "_"):
                shutil.copy(path, others)
        tuning.reported = lambda name: reports if name == STAND_IN else own(name)
        tuning._dirs = lambda: [others]
        if dram_byte_scale != 1.0:
            def stronger(data, mine):
                t = scaled(data, mine)
                return dataclasses.replace(t, us_per_dram_byte=t.us_per_dram_byte * dram_byte_scale)
            tuning.scaled = stronger
        hidden_from = tuning.load(STAND_IN, "bf16")
        out = {"gpu": gpu, "reports": vars(reports), "dram_byte_scale": dram_byte_scale, "hidden_takes": hidden_from.matched or (
            f"the reference GPU's costs scaled to {gpu}'s reports" if hidden_from.scaled_to else "the reference GPU's"),
               "within": within, "kernels": {}}
        every = frozenset(catalog.names())  # every config compiled, without loading a library
        for kernel in ("packed", "dual"):
            rows, untimed = [], []
            for (model, H, I, M), launches in sorted(cells.items()):
                picks = {}
                for who, name in (("tuned", gpu), ("hidden", STAND_IN)):
                    tuning._dirs = dirs if who == "tuned" else (lambda: [others])
                    tuning.clear()
                    picks[who] = launch_of(configs.select(kernel, M, I, H, torch.bfloat16, every, num_sms=reports.num_sms,
                                                          gpu=name))
                times = {who: launches.get(key) for who, key in picks.items()}
                if not all(times.values()):
                    untimed.append({"model": model, "tokens": M, **picks})
                    continue
                t = {who: statistics.median(v) for who, v in times.items()}
                rows.append({"model": model, "hidden_size": H, "intermediate_size": I, "tokens": M, **picks,
                             "tuned_over_cublas": t["tuned"], "hidden_over_cublas": t["hidden"],
                             "hidden_over_tuned": t["hidden"] / t["tuned"]})
            ratios = [r["hidden_over_tuned"] for r in rows]
            out["kernels"][kernel] = {
                "rows": rows, "untimed": untimed,
                "geomean": math.exp(math.fsum(map(math.log, ratios)) / len(ratios)) if ratios else None,
                "worse": [r for r in rows if r["hidden_over_tuned"] > 1 + within],
                "same_launch": sum(r["tuned"] == r["hidden"] for r in rows)}
        return out
    finally:
        tuning.reported, tuning._dirs, tuning.scaled = own, dirs, scaled
        env.set_config_names(None)
        tuning.clear()
        shutil.rmtree(others, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--within", type=float, default=0.05)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dram-byte-scale", type=float, default=1.0)
    a = ap.parse_args()
    if not a.dram_byte_scale > 0:
        ap.error(f"--dram-byte-scale must be positive; got {a.dram_byte_scale}")
    gpu, cells = cells_of(a.sweeps)
    result = compare(gpu, cells, a.within, a.dram_byte_scale)
    print(f"{gpu}: the hidden choice takes {result['hidden_takes']}")
    for kernel, k in result["kernels"].items():
        n = len(k["rows"])
        print(f"{kernel}: {n} cells timed for both choices ({k['same_launch']} the same launch), "
              f"{len(k['untimed'])} with a chosen launch not timed; hidden / tuned geomean "
              f"{k['geomean']:.3f}; {len(k['worse'])} cells more than {a.within:.0%} slower:")
        for r in k["worse"]:
            print(f"  {r['model']} M={r['tokens']}: {r['hidden']} {r['hidden_over_tuned']:.3f}x the time of "
                  f"{r['tuned']}")
    if a.out:  # a results file: meta and one row per kernel and cell (untimed cells without times)
        rows = [{"kernel": kernel, **r} for kernel, k in result["kernels"].items() for r in k["rows"] + k["untimed"]]
        meta = {key: value for key, value in result.items() if key != "kernels"}
        meta["summary"] = {kernel: {"geomean": k["geomean"], "worse": len(k["worse"]), "same_launch": k["same_launch"],
                                    "untimed": len(k["untimed"])} for kernel, k in result["kernels"].items()}
        a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
