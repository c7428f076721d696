"""``fused-swiglu sweep``: the config choice against every compiled config, on many model shapes.

For each shape and token count, in one turn rep by rep (the benchmark's timing protocol):

* ``eager``: PyTorch's unfused path; ``cublas_gemm``: one GEMM of the same FLOPs (``x @ [Wg; Wu]^T``);
* ``fused_packed`` / ``fused_dual``: the public calls (:func:`fused_swiglu.swiglu_packed`,
  :func:`fused_swiglu.swiglu` with ``kernel="dual"``), fast accumulation, with their own choice;
* every compiled config of both kernels with the launch parameters ``fused-swiglu tune`` times
  (:func:`fused_swiglu.bench.tune.variants`), in the two stages of
  :func:`fused_swiglu.bench.tune.time_two_stage`: the methods above, the cost model's picks and the
  fastest compiled configs of the first stage are timed together in the second, whose medians the
  rows report.

Rows (``model``, ``hidden_size``, ``intermediate_size``, ``tokens``, ``method``, ``median_ms``, and
``config`` where one applies): the four methods above; ``best_compiled`` (the fastest compiled config
of either kernel), ``best_compiled_packed`` / ``best_compiled_dual`` (of each kernel), and ``model_packed`` /
``model_dual`` (the cost model's pick without overrides, from the same timings). ``summary`` checks
the choice against them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from .. import _lib, configs, tuning
from ..functional import swiglu, swiglu_packed
from ..reference import swiglu_eager
from . import timing, tune
from .shapes import MlpShape

KERNEL_METHOD = {"packed": "packed", "dual": "dual"}
WITHIN_BEST = 1.05  # the choice's time over the best compiled config's, at most
MIN_VS_CUBLAS = 0.90  # cuBLAS time over the choice's, at least


def sweep_cell(shape: MlpShape, M: int, dtype: torch.dtype, device: torch.device, reps: int,
               flush: torch.Tensor) -> list[dict]:
    """The rows of one shape at M tokens (module docstring)."""
    N, K = shape.intermediate_size, shape.hidden_size
    sets = tune.make_operands(M, N, K, dtype, device)
    w_cat = [torch.cat([s.w_gate, s.w_up]) for s in sets]
    extra = {
        "eager": [lambda s=s: swiglu_eager(s.x, s.w_gate, s.w_up) for s in sets],
        "cublas_gemm": [lambda s=s, w=w: torch.mm(s.x, w.t()) for s, w in zip(sets, w_cat)],
        "fused_packed": [lambda s=s: swiglu_packed(s.x, s.w_packed, layout="interleaved", backend="cutlass") for s in sets],
        "fused_dual": [lambda s=s: swiglu(s.x, s.w_gate, s.w_up, kernel="dual", backend="cutlass") for s in sets],
    }
    num_sms, gpu, smem = _lib.target(device.index)
    data = tuning.load(gpu, configs.DTYPE_SUFFIX[dtype])
    chosen, models = {}, {}
    for kernel in KERNEL_METHOD:
        c = configs.choose_config(kernel, M, N, K, "fast", num_sms, gpu, dtype, smem)
        chosen[kernel] = tune.Variant(c, c.raster, c.swizzle)
        m = configs.model_config(kernel, M, N, K, "fast", num_sms, data, smem)
        models[kernel] = tune.Variant(m, m.raster, m.swizzle)
    fast = [v for v in tune.variants(M, N) if v.config.accumulation == "fast"]
    times, final = tune.time_two_stage(fast, M, N, K, dtype, device, reps, flush, extra=extra,
                                       keep=[*chosen.values(), *models.values()], sets=sets)
    base = {"model": shape.model, "hidden_size": K, "intermediate_size": N, "tokens": M}
    config_of = {f"fused_{short}": chosen[kernel].key for kernel, short in KERNEL_METHOD.items()}
    rows = [{**base, "method": m, "median_ms": times[m], "config": config_of.get(m, "")} for m in extra]
    for kernel, short in KERNEL_METHOD.items():
        mine = {k: times[k] for k in final if "@" in k and configs.BY_BASE_NAME[k.split("@")[0]].kernel == kernel}
        best = min(mine, key=mine.get)
        rows.append({**base, "method": f"best_compiled_{short}", "median_ms": mine[best], "config": best})
        pick = models[kernel].key
        rows.append({**base, "method": f"model_{short}", "median_ms": times.get(pick, math.nan), "config": pick})
    compiled = {k: times[k] for k in final if "@" in k}
    best = min(compiled, key=compiled.get)
    rows.append({**base, "method": "best_compiled", "median_ms": compiled[best], "config": best})
    return rows


def run_sweep(shapes: Sequence[MlpShape], tokens: Sequence[int], dtype: torch.dtype, reps: int = 10,
              console=None) -> list[dict]:
    """Every shape at every token count on the current CUDA device (rows of :func:`sweep_cell`),
    after one discarded warm-up cell (the first shape at the first token count)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

    device = torch.device("cuda", torch.cuda.current_device())
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    rows: list[dict] = []
    if shapes and tokens:
        # a first cell, timed and dropped: in a process's first cell the public calls have run
        # slower than the same config launched directly in that turn (config_choice.md)
        sweep_cell(shapes[0], tokens[0], dtype, device, reps, flush)
    with Bar(TextColumn("[bold]sweep[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
             TimeRemainingColumn(), console=console) as bar:
        task = bar.add_task("", total=len(shapes) * len(tokens))
        for shape in shapes:
            for M in tokens:
                rows += sweep_cell(shape, M, dtype, device, reps, flush)
                bar.update(task, advance=1, description=f"{shape.model} M={M}")
    return rows


def summary(rows: Sequence[dict]) -> dict:
    """Per fused method: cells, the worst choice/best_compiled ratio, cells slower than ``WITHIN_BEST``
    of the best, below ``MIN_VS_CUBLAS`` of cuBLAS, and slower than eager; the same for the model's
    pick alone. Ratios are times (> 1: slower than the yardstick) except ``vs_cublas`` (cuBLAS time /
    the method's: < 1 slower)."""
    cells: dict[tuple, dict[str, float]] = {}
    for r in rows:
        cells.setdefault((r["model"], r["tokens"]), {})[r["method"]] = r["median_ms"]
    out = {}
    for short in KERNEL_METHOD.values():
        for method in (f"fused_{short}", f"model_{short}"):
            over_best = [c[method] / c[f"best_compiled_{short}"] for c in cells.values()]
            vs_cublas = [c["cublas_gemm"] / c[method] for c in cells.values()]
            vs_eager = [c[method] / c["eager"] for c in cells.values()]
            out[method] = {
                "cells": len(cells),
                "worst_over_best": max(over_best),
                "over_best_above_limit": sum(x > WITHIN_BEST for x in over_best),
                "worst_vs_cublas": min(vs_cublas),
                "below_cublas_limit": sum(x < MIN_VS_CUBLAS for x in vs_cublas),
                "slower_than_eager": sum(x > 1.0 for x in vs_eager),
                "geomean_vs_cublas": math.exp(sum(map(math.log, vs_cublas)) / len(vs_cublas)),
            }
    return out


def write(rows: Sequence[dict], path: Path, meta: dict) -> None:
    """``{"meta": ..., "summary": summary(rows), "rows": rows}`` as JSON, one row per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = ",\n".join("  " + json.dumps(r) for r in rows)
    path.write_text('{"meta": %s,\n "summary": %s,\n "rows": [\n%s\n]}\n'
                    % (json.dumps(meta), json.dumps(summary(rows), indent=1), body))
