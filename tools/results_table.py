#!/usr/bin/env python3
"""Writes docs/results/<gpu>/README.md from the JSON of ``fused-swiglu bench`` and ``accuracy``.

Usage: ``python3 tools/results_table.py bench.json [bench_cuda_graph.json ...] --accuracy accuracy.json
[accuracy_fp16.json ...] > README.md`` in docs/results/<gpu>/ (the bench files come first: ``--accuracy``
takes every file after it). Every number in the output is read from the given files.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

ORDER = ["eager", "cublas_gemm", "torch_compile", "quack", "fused_packed", "fused_dual", "fused_packed_promoted",
         "fused_dual_promoted"]
FUSED = ["fused_packed", "fused_dual", "fused_packed_promoted", "fused_dual_promoted"]
SHORT = {"fused_packed": "packed", "fused_dual": "dual", "fused_packed_promoted": "packed-p", "fused_dual_promoted": "dual-p"}


def bench_section(bench: dict) -> list[str]:
    meta = bench["meta"]
    cells: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    order: list[tuple[str, int]] = []
    for r in bench["rows"]:
        key = (r["model"], r["tokens"])
        cells[key][r["method"]] = r
        if key not in order:
            order.append(key)
    methods = [m for m in ORDER if any(m in c for c in cells.values())]
    mode = ("CUDA-graph replays (GPU time, no per-call host time)" if meta.get("cuda_graph")
            else "one eager call per repetition (includes per-call host time)")
    out = [f"## {bench['rows'][0]['dtype']}, {mode}: median ms", ""]
    out.append(f"CUDA events, L2 flushed before every repetition, {meta.get('reps', '?')} repetitions after "
               f"warm-up, input sets rotated. Ratios > 1: the fused kernel is faster. "
               f"-p: accumulation=\"promoted\"." + (" quack: quack-kernels' gemm_gated (SwiGLU epilogue), "
                                                     "default config." if "quack" in methods else ""))
    out.append("")
    fused = [f for f in FUSED if f in methods]
    bases = ["cublas_gemm", "eager"] + (["quack"] if "quack" in methods else [])
    label = {"cublas_gemm": "cuBLAS", "eager": "eager", "quack": "quack"}
    head = ["model", "M", *methods, *(f"{SHORT[f]} vs {label[b]}" for b in bases for f in fused)]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for model, M in order:
        t = {m: cells[(model, M)][m]["median_ms"] for m in methods if m in cells[(model, M)]}
        row = [model.replace("Qwen2.5-", ""), str(M)] + [f"{t[m]:.4f}" if m in t else "—" for m in methods]
        for base in bases:
            for f in fused:
                row.append(f"{t[base] / t[f]:.2f}" if f in t and base in t else "—")
        out.append("| " + " | ".join(row) + " |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", nargs="+", help="bench JSON files")
    ap.add_argument("--accuracy", required=True, nargs="+", help="accuracy JSON files (one per dtype)")
    ap.add_argument("--note", action="append", default=[], help="a sentence printed under the runs (repeatable)")
    args = ap.parse_args()
    benches = [json.load(open(p)) for p in args.bench]
    accs = [json.load(open(p)) for p in args.accuracy]
    meta = benches[0]["meta"]
    out = [f"# Results: {meta.get('gpu', '?')}", ""]
    out.append("Produced by `tools/results_table.py` from the JSON files in this folder, written by "
               "`fused-swiglu bench --out bench.json`, `fused-swiglu bench --cuda-graph --out "
               "bench_cuda_graph.json`, `fused-swiglu accuracy --out accuracy.json` and `fused-swiglu accuracy "
               "--dtype fp16 --out accuracy_fp16.json`.")
    keys = ["gpu", "sm_count", "driver_version", "torch_version", "cuda_version", "fused_swiglu_version",
            "nvcc_version", "timestamp"]
    out.append("")
    out.append(" · ".join(f"{k}: {meta[k]}" for k in keys if k != "timestamp" and k in meta))
    out.append("")
    # each file's own run: they may come from different runs (docs/perf-notes.md says why)
    files = [*zip(args.bench, benches), *zip(args.accuracy, accs)]
    def run(path: str, d: dict) -> str:
        lib = d["meta"].get("kernel_library") or {}
        return f"{Path(path).name} {d['meta'].get('timestamp', '?')}" + (
            f" (kernel library {lib['sha256_16']})" if lib.get("sha256_16") else "")

    out.append("Runs: " + " · ".join(run(path, d) for path, d in files) + ".")
    out.append("")
    for note in args.note:
        out += [note, ""]
    for bench in benches:
        out += bench_section(bench)
    for acc in accs:
        am = acc["meta"]
        share = am.get("count_threshold_of_rms", 0.01)
        out += [f"## Accuracy against float64, {am.get('dtype', 'bf16')}, M = {am.get('tokens', 2048)} "
                f"(seed {am.get('seed', '?')})", ""]
        out.append("exact: bit-identical to the float64 result rounded once; mismatch: more than 1 ulp away, "
                   f"among elements of at least {100 * share:g} % of the RMS (definitions in "
                   "`src/fused_swiglu/accuracy.py`).")
        out.append("")
        out.append("| model | method | exact | mismatch | max ulp |")
        out.append("|---|---|---|---|---|")
        for r in acc["rows"]:
            out.append(f"| {r['model'].replace('Qwen2.5-', '')} | {r['method']} | {100 * r['exact']:.2f} % | "
                       f"{100 * r['mismatch']:.2g} % | {r['max_ulp']} |")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
