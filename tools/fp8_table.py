#!/usr/bin/env python3
"""Prints the e4m3 tables of docs/fp8.md from ``fused-swiglu bench fp8`` and ``accuracy --dtype e4m3`` JSON.

Usage: ``python3 tools/fp8_table.py docs/results/h200/bench_fp8.json docs/results/h200/accuracy_fp8.json``.
Every number in the output is read from the two files.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(bench_path: str, accuracy_path: str) -> None:
    bench, acc = json.load(open(bench_path)), json.load(open(accuracy_path))
    ms: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for r in bench["rows"]:
        ms[(r["model"], r["tokens"])][r["method"]] = r["median_ms"]
    tokens = sorted({m for _, m in ms})
    models = list(dict.fromkeys(model for model, _ in ms))
    short = lambda m: m.removeprefix("Qwen2.5-")  # noqa: E731
    def ratio(model: str, m: int, num: str, den: str) -> str:
        cell = ms[(model, m)]
        return f"{cell[num] / cell[den]:.2f}" if num in cell and den in cell else "–"  # a method not timed there

    for title, num, den in (("bf16 packed kernel time / fused e4m3 time (fast accumulation)", "fused_packed", "fp8_fused"),
                            ("unfused e4m3 path time / fused e4m3 time (fast accumulation)", "fp8_unfused", "fp8_fused"),
                            ("fused e4m3 packed kernel time / fused e4m3 dual kernel time (fast accumulation)",
                             "fp8_fused", "fp8_fused_dual"),
                            ("unfused e4m3 path time / fused e4m3 dual kernel time", "fp8_unfused", "fp8_fused_dual"),
                            ("bf16 packed kernel time / fused e4m3 time (promoted accumulation)", "fused_packed",
                             "fp8_fused_promoted"),
                            ("bf16 packed kernel time / fused e4m3-output time", "fused_packed", "fp8_fused_e4m3out"),
                            ("unfused e4m3-output path time / fused e4m3-output time", "fp8_unfused_e4m3out",
                             "fp8_fused_e4m3out"),
                            ("bf16 packed kernel time / fused block-scaled time", "fused_packed", "fp8_fused_blockwise"),
                            ("cuBLAS block-scaled path time / fused block-scaled time", "fp8_unfused_blockwise",
                             "fp8_fused_blockwise")):
        if not any(den in cell for cell in ms.values()):
            continue
        print(f"{title}, by M:\n")
        print("| model | " + " | ".join(str(m) for m in tokens) + " |")
        print("|---|" + "---|" * len(tokens))
        for model in models:
            print(f"| {short(model)} | " + " | ".join(ratio(model, m, num, den) for m in tokens) + " |")
        print()
    print("Fused e4m3 (fast) median ms and TFLOP/s at M = 8192:\n")
    hi = {r["model"]: (r["hidden_size"], r["intermediate_size"]) for r in bench["rows"]}
    print("| model | ms | TFLOP/s |\n|---|---|---|")
    for model in models:
        t = ms[(model, 8192)]["fp8_fused"]
        H, I = hi[model]
        print(f"| {short(model)} | {t:.3f} | {2 * 8192 * H * 2 * I / t / 1e9:.0f} |")
    print()
    print(f"Accuracy against float64 of the dequantized operands, M = {acc['meta'].get('tokens')} "
          f"(seed {acc['meta'].get('seed')}): exact % / mismatch % / max ulp\n")
    cells: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in acc["rows"]:
        cells[r["model"]][r["method"]] = r
    methods = list(dict.fromkeys(r["method"] for r in acc["rows"]))
    print("| model | " + " | ".join(methods) + " |")
    print("|---|" + "---|" * len(methods))
    for model, row in cells.items():
        print(f"| {short(model)} | " + " | ".join(
            f"{100 * row[m]['exact']:.1f} / {100 * row[m]['mismatch']:.2f} / {row[m]['max_ulp']}" for m in methods) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
