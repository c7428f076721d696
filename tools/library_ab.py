#!/usr/bin/env python3
"""Kernel times of two versions of the library, the same kernels launched the same way: an A/B for a change that
must not move them (a new launch path, a refactor of the C++ around unchanged device code).

Each version runs in its own process (``fused_swiglu`` from that version's ``src``, its own build cache): this
script uses only the API both sides share (the 16-bit operators with a config name, the FP8 functions with
``config=``, ``swiglu_mlp``), never the benchmark modules, which change between versions. Modes:

``configs``
    The config names the cells launch, one a line (what each side must have built).
``time --side NAME --out FILE [--seconds S] [--heat-seconds S]``
    Every cell, in this process's version: the family's call with its config named (:data:`CELLS`; the training
    step, forward and backward of ``swiglu_mlp``, takes each version's own choice, one rule by H on both), and
    cuBLAS's ``x @ [W_gate; W_up]^T`` of the same problem beside it. Each is one CUDA graph replayed back to back
    for S seconds with the L2 flushed before each replay, after one heat of the GPU; CUDA-event medians.
``summary FILE ... --out FILE``
    Per cell and round, ``(t_B / cuBLAS_B) / (t_A / cuBLAS_A)`` (cuBLAS in each process cancels the clock and
    heat that differ between the processes); the median over the rounds, whether it is within 1 %, and per
    family the geometric mean, least and most. Files are paired by round (``--side`` names, first seen = A).

``tools/library_ab.sh`` runs the rounds, A and B alternating. Usage of this file alone (on a Hopper GPU):
``PYTHONPATH=<version>/src python3 tools/library_ab.py time --side new --out new_r1.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

# Qwen2.5 MLP shapes (H, I)
SHAPES = {"0.5B": (896, 4864), "1.5B": (1536, 8960), "3B": (2048, 11008), "7B": (3584, 18944),
          "14B": (5120, 13824), "32B": (5120, 27648), "72B": (8192, 29568)}
TOKENS = (1, 512, 8192)
# family -> the config named at each M (one that both the versions compared compile); None: the version's choice
CELLS = {
    "dual": {1: "dual_swapab_pingpong_128x16x64_1x1_bf16", 512: "dual_pingpong_128x128x64_2x1_bf16",
             8192: "dual_pingpong_128x160x64_2x1_bf16"},
    "packed": {1: "packed_swapab_pingpong_128x16x64_1x1_bf16", 512: "packed_pingpong_128x128x64_2x1_bf16",
               8192: "packed_pingpong_128x192x64_2x1_bf16"},
    "fp8_row": {1: "packed_fp8_swapab_pingpong_64x16x128_1x1_e4m3", 512: "packed_fp8_pingpong_128x192x128_2x1_e4m3",
                8192: "packed_fp8_pingpong_128x192x128_2x1_e4m3"},
    "fp8_dual": {1: "dual_fp8_swapab_pingpong_128x16x128_1x1_e4m3", 512: "dual_fp8_pingpong_128x128x128_2x1_e4m3",
                 8192: "dual_fp8_pingpong_128x128x128_2x1_e4m3"},
    "fp8_block": {1: "packed_fp8_blockwise_pingpong_64x128x128_1x1_e4m3",
                  512: "packed_fp8_blockwise_cooperative_128x192x128_2x1_e4m3",
                  8192: "packed_fp8_blockwise_cooperative_128x192x128_2x1_e4m3"},
    "train_step": {1: None, 512: None, 8192: None},
}
WITHIN = 0.01  # the bar: each cell's median ratio within 1 %


def config_names() -> list[str]:
    """The config names the cells launch, sorted, without repeats."""
    return sorted({name for by_m in CELLS.values() for name in by_m.values() if name})


def make_call(family: str, config: str | None, M: int, H: int, I: int, device):
    """(the cell's call, cuBLAS's call) on fresh operands."""
    import torch

    import fused_swiglu
    import fused_swiglu.ops  # noqa: F401 (defines the 16-bit operators, in both versions)
    from fused_swiglu import fp8

    g = torch.Generator(device=device).manual_seed(0)
    xb = torch.randn(M, H, device=device, generator=g).to(torch.bfloat16)
    wg, wu = ((torch.randn(I, H, device=device, generator=g) * H**-0.5).to(torch.bfloat16) for _ in range(2))
    w_cat = torch.cat([wg, wu])
    cublas = lambda: torch.mm(xb, w_cat.t())  # noqa: E731
    ops = torch.ops.fused_swiglu
    if family == "dual":
        return (lambda: ops.swiglu_dual(xb, wg, wu, config)), cublas
    if family == "packed":
        wp = fused_swiglu.pack_gate_up(wg, wu)
        return (lambda: ops.swiglu_packed(xb, wp, config)), cublas
    if family in ("fp8_row", "fp8_dual"):
        xq, xs = fp8.quantize_e4m3(xb, per_row=True)
        gq, gs = fp8.quantize_e4m3(wg, per_row=True)
        uq, us = fp8.quantize_e4m3(wu, per_row=True)
        if family == "fp8_dual":  # the weight scales as views of one vector, which the kernel reads in place
            scales = torch.cat([gs.reshape(-1), us.reshape(-1)])
            gv, uv = scales[:I], scales[I:]
            return (lambda: fp8.swiglu_fp8(xq, gq, uq, xs, gv, uv, config=config)), cublas
        wq, ws = fp8.pack_weights(gq, uq, gs, us)
        return (lambda: fp8.swiglu_packed_fp8(xq, wq, xs, ws, config=config)), cublas
    if family == "fp8_block":
        xq, xs = fp8.quantize_e4m3_groups(xb, column_major_scales=True)
        gq, gs = fp8.quantize_e4m3_blocks(wg)
        uq, us = fp8.quantize_e4m3_blocks(wu)
        wq, ws = fp8.pack_weights_blockwise(gq, uq, gs, us)
        return (lambda: fp8.swiglu_packed_fp8(xq, wq, xs, ws, scaling="block", config=config)), cublas
    if family == "train_step":
        leaves = [t.clone().requires_grad_() for t in (xb, wg, wu)]
        wd = (torch.randn(H, I, device=device, generator=g) * I**-0.5).to(torch.bfloat16).requires_grad_()
        dz = torch.randn(M, H, device=device, generator=g).to(torch.bfloat16)

        def step():
            z = fused_swiglu.swiglu_mlp(*leaves, wd)
            return torch.autograd.grad(z, (*leaves, wd), dz)

        return step, cublas
    raise ValueError(f"unknown family {family!r}; known: {', '.join(CELLS)}")


def graph_median_ms(fn, flush, seconds: float) -> float:
    """``fn`` captured in a CUDA graph (the version's own ``bench.timing.as_graph_replays``, which both sides
    have), replayed back to back for ``seconds`` with ``flush`` zeroed before each replay; the median of the
    replays' CUDA-event times, ms."""
    import torch

    from fused_swiglu.bench import timing

    replay = timing.as_graph_replays({"fn": [fn]}, torch.device("cuda", torch.cuda.current_device()))["fn"][0]
    events = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(events) < 10:
        flush.zero_()
        begin, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        replay()
        done.record()
        events.append((begin, done))
        if len(events) % 32 == 0:
            events[-8][1].synchronize()  # keep the host a few replays ahead, no further
    torch.cuda.synchronize()
    return statistics.median(b.elapsed_time(d) for b, d in events)


def run_time(side: str, out: Path, seconds: float, heat_seconds: float) -> dict:
    """Mode ``time``: every cell in this process's version; writes and returns ``{"meta", "rows"}``."""
    import torch

    import fused_swiglu

    device = torch.device("cuda", torch.cuda.current_device())
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.uint8, device=device)
    H, I = SHAPES["72B"]
    a = torch.randn(8192, H, device=device).to(torch.bfloat16)
    b = torch.randn(2 * I, H, device=device).to(torch.bfloat16)
    end = time.perf_counter() + heat_seconds
    while time.perf_counter() < end:  # to the power cap, as the cells after it run
        for _ in range(20):
            torch.mm(a, b.t())
        torch.cuda.synchronize()
    del a, b
    rows = []
    for model, (H, I) in SHAPES.items():
        for M in TOKENS:
            for family, by_m in CELLS.items():
                fn, cublas = make_call(family, by_m[M], M, H, I, device)
                ms = graph_median_ms(fn, flush, seconds)
                rows.append({"family": family, "model": f"Qwen2.5-{model}", "tokens": M, "config": by_m[M] or "choice",
                             "median_ms": ms, "cublas_ms": graph_median_ms(cublas, flush, seconds)})
                print(f"{side} {family} {model} M={M}: {ms:.4f} ms (cuBLAS {rows[-1]['cublas_ms']:.4f})", flush=True)
                del fn, cublas
            torch.cuda.empty_cache()
    meta = {"side": side, "fused_swiglu_version": getattr(fused_swiglu, "__version__", "?"),
            "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "seconds": seconds,
            "heat_seconds": heat_seconds}
    result = {"meta": meta, "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def summarize(results: list[dict]) -> dict:
    """Mode ``summary`` on loaded ``time`` results: the first side seen is A; the k-th file of each side makes
    round k.

    Raises:
        ValueError: not exactly two sides, or sides with different numbers of files.
    """
    sides: dict[str, list[dict]] = {}
    for r in results:
        sides.setdefault(r["meta"]["side"], []).append(r)
    if len(sides) != 2 or len({len(v) for v in sides.values()}) != 1:
        raise ValueError(f"need the same number of files of two sides; got {({k: len(v) for k, v in sides.items()})}")
    (a_name, a_runs), (b_name, b_runs) = sides.items()
    ratios: dict[tuple, list[float]] = {}
    for a, b in zip(a_runs, b_runs):
        rows_b = {(r["family"], r["model"], r["tokens"]): r for r in b["rows"]}
        for r in a["rows"]:
            key = (r["family"], r["model"], r["tokens"])
            if key in rows_b:
                s = rows_b[key]
                ratios.setdefault(key, []).append((s["median_ms"] / s["cublas_ms"]) / (r["median_ms"] / r["cublas_ms"]))
    rows = [{"family": f, "model": m, "tokens": t, "b_over_a": statistics.median(v), "rounds": len(v),
             "within": abs(statistics.median(v) - 1) <= WITHIN} for (f, m, t), v in ratios.items()]
    families = {}
    for f in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == f]
        ratios = [r["b_over_a"] for r in mine]
        families[f] = {"geomean": math.exp(statistics.fmean(math.log(x) for x in ratios)), "min": min(ratios),
                       "max": max(ratios), "cells": len(mine), "within": sum(r["within"] for r in mine)}
    return {"meta": {"a": a_name, "b": b_name, "a_meta": a_runs[0]["meta"], "b_meta": b_runs[0]["meta"],
                     "ratio": "(t_B / cuBLAS_B) / (t_A / cuBLAS_A), median over rounds", "within": WITHIN},
            "families": families, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    sub.add_parser("configs")
    t = sub.add_parser("time")
    t.add_argument("--side", required=True)
    t.add_argument("--out", required=True, type=Path)
    t.add_argument("--seconds", type=float, default=0.25)
    t.add_argument("--heat-seconds", type=float, default=20.0)
    s = sub.add_parser("summary")
    s.add_argument("files", nargs="+", type=Path)
    s.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    if args.mode == "configs":
        print("\n".join(config_names()))
    elif args.mode == "time":
        run_time(args.side, args.out, args.seconds, args.heat_seconds)
    else:
        result = summarize([json.loads(f.read_text()) for f in args.files])
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        for f, r in result["families"].items():
            print(f"{f}: {result['meta']['b']} / {result['meta']['a']} geomean {r['geomean']:.4f} "
                  f"[{r['min']:.4f}, {r['max']:.4f}], {r['within']} of {r['cells']} cells within {WITHIN:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
