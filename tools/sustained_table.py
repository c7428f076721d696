#!/usr/bin/env python3
"""Prints the tables of docs/results/h200/sustained.md from the sustained-protocol results files.

Usage: ``python3 tools/sustained_table.py docs/results/h200 [more.json ...]`` (reads ``sustained.json``,
written by ``fused-swiglu bench --cuda-graph --protocol sustained``; ``backward_sustained.json``, by ``bench
backward --cuda-graph --protocol sustained``; ``fp8_sustained.json``, by ``bench fp8 --protocol
sustained``; each where present; then the forward tables of each further file named). Every number in the
output is read from those files. Ratios are peer time / fused time: > 1 means the fused kernel is faster.
"""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

QWEN = ("Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B", "Qwen2.5-72B")


def cells(path: Path) -> tuple[dict, dict[tuple[str, int], dict[str, dict]]]:
    data = json.loads(path.read_text())
    out: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for r in data["rows"]:
        out[(r["model"], r["tokens"])][r["method"]] = r
    return data["meta"], out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def header(meta: dict, name: str) -> str:
    soak = meta.get("heat_soak") or {}
    soak_text = (f"; heat soak's last second {soak['sm_mhz']:.0f} MHz, {soak['power_w']:.0f} W "
                 f"(limit {soak['power_limit_w']:.0f} W)" if soak else "")
    return (f"`{name}`: {meta['gpu']}, {meta['timestamp']}, commit {meta.get('git_commit')}, kernel library "
            f"{meta.get('kernel_library', {}).get('sha256_16', '?')}{soak_text}.")


def forward(meta: dict, by_cell: dict, name: str = "sustained.json") -> None:
    print(header(meta, name))
    print()
    has_quack = all("quack" in c for c in by_cell.values())
    q_head, q_rule = (" quack | best vs quack |", "---|---|") if has_quack else ("", "")
    print(f"| shape | M | eager | cuBLAS |{q_head} dual | packed | best vs cuBLAS | dual vs cuBLAS | best vs eager "
          "| MHz cuBLAS / dual / packed | W cuBLAS / dual / packed | dual config | packed config |")
    print(f"|---|---|---|---|{q_rule}---|---|---|---|---|---|---|---|---|")
    best, dual, vs_eager, vs_quack = {}, {}, {}, {}
    for (model, M), c in by_cell.items():
        e, cb, d, p = (c[k]["median_ms"] for k in ("eager", "cublas_gemm", "fused_dual", "fused_packed"))
        b = min(d, p)
        best[model, M], dual[model, M], vs_eager[model, M] = cb / b, cb / d, e / b
        q_text = ""
        if has_quack:
            q = c["quack"]["median_ms"]
            vs_quack[model, M] = q / b
            q_text = f" {q:.3f} | {q / b:.3f} |"
        mhz = " / ".join(f"{c[k]['sm_mhz']:.0f}" for k in ("cublas_gemm", "fused_dual", "fused_packed"))
        watts = " / ".join(f"{c[k]['power_w']:.0f}" for k in ("cublas_gemm", "fused_dual", "fused_packed"))
        short = lambda name: c[name]["config"].removesuffix("_bf16").removesuffix("_fp16")  # noqa: E731
        print(f"| {model} | {M} | {e:.3f} | {cb:.3f} |{q_text} {d:.3f} | {p:.3f} | {cb / b:.3f} | {cb / d:.3f} | "
              f"{e / b:.3f} | {mhz} | {watts} | {short('fused_dual')} | {short('fused_packed')} |")
    print()
    for label, pick in (("the seven Qwen2.5 shapes", lambda m: m in QWEN),
                        ("the other public shapes", lambda m: m not in QWEN), ("all shapes", lambda m: True)):
        keys = [k for k in best if pick(k[0])]
        if not keys:
            continue
        worst = min(keys, key=best.get)
        worst_dual = min(keys, key=dual.get)
        worst_eager = min(keys, key=vs_eager.get)
        print(f"- {label} ({len(keys)} cells): faster fused kernel vs cuBLAS geometric mean "
              f"{geomean([best[k] for k in keys]):.3f}, lowest {best[worst]:.3f} ({worst[0]} M={worst[1]}); "
              f"dual vs cuBLAS lowest {dual[worst_dual]:.3f} ({worst_dual[0]} M={worst_dual[1]}); "
              f"vs eager lowest {vs_eager[worst_eager]:.3f} ({worst_eager[0]} M={worst_eager[1]}); "
              f"cells with the faster kernel ≥ 0.98× cuBLAS: {sum(best[k] >= 0.98 for k in keys)}; "
              f"dual ≥ 0.97×: {sum(dual[k] >= 0.97 for k in keys)}; ≥ 1.05× eager: "
              f"{sum(vs_eager[k] >= 1.05 for k in keys)}"
              + (f"; vs quack geometric mean {geomean([vs_quack[k] for k in keys]):.3f}, cells ≥ 0.97× quack: "
                 f"{sum(vs_quack[k] >= 0.97 for k in keys)}; quack vs cuBLAS geometric mean "
                 f"{geomean([best[k] / vs_quack[k] for k in keys]):.3f}" if vs_quack else ""))
    print()


def section(title: str, meta: dict, name: str) -> None:
    print(f"## {title}\n\n{header(meta, name)}\n")


def training(meta: dict, by_cell: dict) -> None:
    section("Training step (forward + backward of the whole MLP block: gate, up, down), bf16", meta,
            "backward_sustained.json")
    methods = list(dict.fromkeys(m for c in by_cell.values() for m in c))
    print("| shape | M | " + " | ".join(f"{m} ms (MHz, W)" for m in methods) + " | "
          + " | ".join(f"eager / {m}" for m in methods if m != "eager") + " |")
    print("|---|---|" + "---|" * (2 * len(methods) - 1))
    for (model, M), c in by_cell.items():
        timed = " | ".join(f"{c[m]['median_ms']:.2f} ({c[m]['sm_mhz']:.0f}, {c[m]['power_w']:.0f})" for m in methods)
        ratios = " | ".join(f"{c['eager']['median_ms'] / c[m]['median_ms']:.3f}" for m in methods if m != "eager")
        print(f"| {model} | {M} | {timed} | {ratios} |")
    print()


def fp8(meta: dict, by_cell: dict) -> None:
    section("e4m3 inputs, bf16 output", meta, "fp8_sustained.json")
    pairs = (("fp8_unfused", "fp8_fused", "row scales: unfused / fused"),
             ("fp8_unfused_blockwise", "fp8_fused_blockwise",
              "block scales: cuBLAS block-scaled + silu-and-mul / fused"),
             ("fused_packed", "fp8_fused", "bf16 packed / e4m3 fused"))
    print("| shape | M | " + " | ".join(p[2] for p in pairs)
          + " | MHz fused / unfused (row) | MHz fused / unfused (block) |")
    print("|---|---|" + "---|" * (len(pairs) + 2))
    for (model, M), c in by_cell.items():
        ratios = " | ".join(f"{c[a]['median_ms'] / c[b]['median_ms']:.3f}" if a in c and b in c else "–"
                            for a, b, _ in pairs)
        mhz = lambda a, b: f"{c[a]['sm_mhz']:.0f} / {c[b]['sm_mhz']:.0f}" if a in c and b in c else "–"  # noqa: E731
        print(f"| {model} | {M} | {ratios} | {mhz('fp8_fused', 'fp8_unfused')} | "
              f"{mhz('fp8_fused_blockwise', 'fp8_unfused_blockwise')} |")
    print()


def main(folder: str, more: list[str]) -> None:
    root = Path(folder)
    for name, table in (("sustained.json", forward), ("backward_sustained.json", training),
                        ("fp8_sustained.json", fp8)):
        if (root / name).exists():
            table(*cells(root / name))
    for name in more:  # further forward runs, e.g. off the tile multiples
        print(f"## Forward, bf16, `{name}`\n")
        forward(*cells(root / name), name=name)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/results/h200", sys.argv[2:])
