"""``fused-swiglu bench``: time every method on every (model, tokens) shape."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import env
from . import check, methods as m
from . import report, shapes, timing

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class BenchOptions:
    models: list[str] | None = None
    tokens: list[int] = field(default_factory=lambda: list(shapes.TOKENS))
    dtype: str = "bf16"
    methods: list[str] = field(default_factory=lambda: list(m.METHODS))
    out: Path | None = None
    config: str | None = None
    warmup_ms: float = 25.0
    reps: int = 50
    cuda_graph: bool = False  # time CUDA-graph replays (GPU time without per-call host time)


def _config_name(method: str, M: int, H: int, I: int, dtype: torch.dtype) -> str:
    if method not in m.FUSED_KERNEL:
        return ""
    from ..configs import select

    kernel, accumulation = m.FUSED_KERNEL[method]
    return select(kernel, M, I, H, dtype, accumulation=accumulation).name


def derive(rows: list[dict]) -> None:
    """Fill speedup_vs_eager (eager ms / method ms) and ratio_to_cublas (method ms / cuBLAS ms)
    for rows of one shape, in place; None where the peer was not measured."""
    by_method = {r["method"]: r["median_ms"] for r in rows}
    for r in rows:
        eager, cublas = by_method.get("eager"), by_method.get("cublas_gemm")
        r["speedup_vs_eager"] = eager / r["median_ms"] if eager else None
        r["ratio_to_cublas"] = r["median_ms"] / cublas if cublas else None


def run_bench(opts: BenchOptions, console) -> list[dict]:
    """Run the benchmark; prints a progress bar and the table to ``console``; writes JSON + CSV
    when ``opts.out`` is set. Returns the rows.

    Raises:
        ValueError: an unknown method or model.
        WrongOutputError: a method's result on a shape failed the check made before that shape is
            timed (:mod:`fused_swiglu.bench.check`).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if opts.config:
        os.environ[env.PREFIX + "CONFIG"] = opts.config
    for method in opts.methods:
        if method not in m.METHODS:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(m.METHODS)}")
    dtype = DTYPES[opts.dtype]
    models = shapes.find(opts.models)
    device = torch.device("cuda", torch.cuda.current_device())
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    rows: list[dict] = []
    todo = [(s, M) for s in models for M in opts.tokens]
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as progress:
        task = progress.add_task("bench", total=len(todo))
        for shape, M in todo:
            H, I = shape.hidden_size, shape.intermediate_size
            progress.update(task, description=f"{shape.model} M={M}")
            n_sets = timing.n_input_sets(m.bytes_read(M, H, I, dtype), m.bytes_held(M, H, I, dtype), l2)
            sets = [m.make_input_set(M, H, I, dtype, device) for _ in range(n_sets)]
            calls = m.build_calls(opts.methods, sets)
            check.check_outputs(calls, sets[0], f"{shape.model} M={M}")  # before any timing
            if opts.cuda_graph:
                calls = timing.as_graph_replays(calls, device)
            times = timing.time_interleaved(calls, device, opts.warmup_ms, opts.reps, flush)
            shape_rows = []
            for method, t in times.items():
                shape_rows.append({
                    "model": shape.model, "hidden_size": H, "intermediate_size": I, "tokens": M,
                    "dtype": opts.dtype, "method": method,
                    "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                    "tflops": report.tflops(M, H, I, t.median_ms),
                    "config": _config_name(method, M, H, I, dtype),
                })
            derive(shape_rows)
            rows.extend(shape_rows)
            del sets, calls
            torch.cuda.empty_cache()
            progress.advance(task)
    console.print(report.bench_table(rows))
    if opts.out:
        meta = report.machine_meta(device)
        meta.update({"reps": opts.reps, "warmup_ms": opts.warmup_ms, "l2_flush_bytes": timing.FLUSH_BYTES,
                     "cuda_graph": opts.cuda_graph})
        paths = report.write_results(opts.out, meta, rows, report.BENCH_FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
