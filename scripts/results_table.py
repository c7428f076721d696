#!/usr/bin/env python3
"""Writes docs/results/<gpu>/README.md from the JSON of ``fused-swiglu bench`` and ``accuracy``.

Usage: ``python3 scripts/results_table.py docs/results/h200/bench.json docs/results/h200/accuracy.json
> docs/results/h200/README.md``. Every number in the output is read from the two files.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

ORDER = ["eager", "cublas_gemm", "torch_compile", "fused_evt", "fused_dual"]


def main(bench_path: str, accuracy_path: str) -> None:
    bench = json.load(open(bench_path))
    acc = json.load(open(accuracy_path))
    meta = bench["meta"]
    cells: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for r in bench["rows"]:
        cells[(r["model"], r["tokens"])][r["method"]] = r
    methods = [m for m in ORDER if any(m in c for c in cells.values())]
    out = [f"# Results: {meta.get('gpu_name', meta.get('gpu', '?'))}", ""]
    out.append(
        "Produced by `scripts/results_table.py` from `bench.json` and `accuracy.json` in this folder "
        "(`fused-swiglu bench --out bench.json`, `fused-swiglu accuracy --out accuracy.json`)."
    )
    keys = ["gpu_name", "sm_count", "driver_version", "torch_version", "cuda_version", "fused_swiglu_version",
            "git_commit", "nvcc_version", "timestamp"]
    out.append("")
    out.append(" · ".join(f"{k}: {meta[k]}" for k in keys if k in meta))
    out += ["", f"## SwiGLU MLP forward, {bench['rows'][0]['dtype']}: median ms (CUDA events, L2 flushed)", ""]
    out.append("Ratios: `fused/cuBLAS` = cublas_gemm time ÷ fused time and `fused/eager` = eager time ÷ fused "
               "time (> 1: the fused kernel is faster).")
    out.append("")
    head = ["model", "M", *methods, "evt vs cuBLAS", "dual vs cuBLAS", "evt vs eager", "dual vs eager"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    order = []
    for r in bench["rows"]:
        if (r["model"], r["tokens"]) not in order:
            order.append((r["model"], r["tokens"]))
    for model, M in order:
        c = cells[(model, M)]
        t = {m: c[m]["median_ms"] for m in methods if m in c}
        row = [model.replace("Qwen2.5-", ""), str(M)] + [f"{t[m]:.4f}" if m in t else "—" for m in methods]
        for fused in ("fused_evt", "fused_dual"):
            row.append(f"{t['cublas_gemm'] / t[fused]:.2f}" if fused in t and "cublas_gemm" in t else "—")
        for fused in ("fused_evt", "fused_dual"):
            row.append(f"{t['eager'] / t[fused]:.2f}" if fused in t and "eager" in t else "—")
        out.append("| " + " | ".join(row) + " |")
    out += ["", "## Accuracy against float64 (M = 2048)", ""]
    out.append("exact: bit-identical to the float64 result rounded once; mismatch: more than 1 ulp away, among "
               "elements of at least 1 % of the RMS (definitions in `src/fused_swiglu/accuracy.py`).")
    out.append("")
    out.append("| model | method | exact | mismatch | max ulp |")
    out.append("|---|---|---|---|---|")
    for r in acc["rows"]:
        out.append(f"| {r['model'].replace('Qwen2.5-', '')} | {r['method']} | {100 * r['exact']:.2f} % | "
                   f"{100 * r['mismatch']:.4f} % | {r['max_ulp']} |")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
