"""``fused-swiglu bench``: time every method on every (model, tokens) shape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import configs
from . import check, methods as m
from . import report, shapes, timing
from .defaults import KERNEL_REPS as REPS, KERNEL_WARMUP_MS as WARMUP_MS

DTYPES = configs.DTYPE_OF_SUFFIX


@dataclass
class BenchOptions:
    models: list[str] | None = None
    tokens: list[int] = field(default_factory=lambda: list(shapes.TOKENS))
    dtype: str = "bf16"
    methods: list[str] | None = None  # None: methods.default_methods(), resolved by run_bench
    out: Path | None = None
    config: str | None = None
    warmup_ms: float = WARMUP_MS
    reps: int = REPS
    cuda_graph: bool = False  # time CUDA-graph replays (GPU time without per-call host time)
    protocol: str = "auto"  # timing.PROTOCOLS: "auto" = sustained for CUDA graphs from M = 1024 on
    seconds: float = timing.SUSTAINED_SECONDS  # sustained protocol: per method and cell


def _config_name(method: str, M: int, H: int, I: int, dtype: torch.dtype) -> str:
    if method not in m.FUSED_KERNEL:
        return ""
    from .. import _lib
    from ..configs import NUM_SMS, select

    kernel, accumulation = m.FUSED_KERNEL[method]
    num_sms, gpu, smem = _lib.target(torch.cuda.current_device()) if torch.cuda.is_available() else (NUM_SMS, "", None)
    return select(kernel, M, I, H, dtype, accumulation=accumulation, num_sms=num_sms, gpu=gpu, smem_limit=smem).name


def derive(rows: list[dict]) -> None:
    """Fill speedup_vs_eager (eager ms / method ms) and ratio_to_cublas (method ms / cuBLAS ms)
    for rows of one shape, in place; None where the peer was not measured."""
    by_method = {r["method"]: r["median_ms"] for r in rows}
    for r in rows:
        eager, cublas = by_method.get("eager"), by_method.get("cublas_gemm")
        r["speedup_vs_eager"] = eager / r["median_ms"] if eager else None
        r["ratio_to_cublas"] = r["median_ms"] / cublas if cublas else None


def _measure_shape(shape, M: int, opts: BenchOptions, dtype: torch.dtype, device: torch.device,
                   timer: timing.CellTimer, l2: int, optional: frozenset[str] = frozenset(),
                   on_left_out: Callable[[str, str], None] | None = None) -> list[dict]:
    """Check, then time (``timer``: by the cell's protocol), every method of ``opts`` on one (model,
    tokens) shape; one row per method.

    A method in ``optional`` whose check fails (:func:`fused_swiglu.bench.check.check_outputs`) is
    removed from ``opts.methods`` and reported to ``on_left_out(method, why)``; the others are timed.
    """
    H, I = shape.hidden_size, shape.intermediate_size
    alternating = "quack" in opts.methods
    n_sets = timing.n_input_sets(m.bytes_read(M, H, I, dtype), m.bytes_held(M, H, I, dtype, alternating), l2)
    sets = [m.make_input_set(M, H, I, dtype, device, alternating) for _ in range(n_sets)]
    calls = m.build_calls(opts.methods, sets)
    left_out = check.check_outputs(calls, sets[0], f"{shape.model} M={M}", optional)  # before any timing
    for method, why in left_out.items():
        opts.methods.remove(method)
        if on_left_out is not None:
            on_left_out(method, why)
    if opts.cuda_graph:
        calls = timing.as_graph_replays(calls, device)
    times = timer.time(calls, M)
    rows = []
    for method, t in times.items():
        rows.append({
            "model": shape.model, "hidden_size": H, "intermediate_size": I, "tokens": M,
            "dtype": opts.dtype, "method": method,
            "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
            "tflops": report.tflops(M, H, I, t.median_ms),
            "config": _config_name(method, M, H, I, dtype),
            "protocol": timer.kind(M), "sm_mhz": t.sm_mhz, "power_w": t.power_w,
        })
    derive(rows)
    del sets, calls
    torch.cuda.empty_cache()
    return rows


def _gpu_setup() -> tuple[torch.device, torch.Tensor, int]:
    """The current GPU, the L2 flush buffer and the L2 size in bytes; warms the GPU up."""
    device = torch.device("cuda", torch.cuda.current_device())
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    return device, flush, l2


def _stop_reason(e: BaseException) -> str:
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def run_bench(opts: BenchOptions, console) -> list[dict]:
    """Run the benchmark; prints a progress bar and the table to ``console``; writes JSON + CSV
    when ``opts.out`` is set. Returns the rows.

    If the run stops early (a wrong result, Ctrl-C, SIGTERM), the rows of the shapes measured so far
    are still printed and written, with ``meta["complete"] = False`` and ``meta["stopped_by"]``
    naming the cause, and the exception is raised again. A complete run has ``complete = True``.

    ``opts.methods`` None runs :func:`fused_swiglu.bench.methods.default_methods` (every method,
    the optional peers where their package imports); the JSON's ``meta["peers_not_run"]`` then
    says why each left-out peer did not run. Such a default peer whose call raises or returns a
    wrong result on a shape is left out from that shape on (its rows before it stay), with the
    reason printed and in ``peers_not_run``: a broken peer install does not stop the benchmark of
    the kernels. Peers asked for by name in ``opts.methods`` stop the run like any method.

    Raises:
        ValueError: an unknown method or model, or an optional peer asked for by name whose package
            does not import here.
        WrongOutputError: a method's result on a shape failed the check made before that shape is
            timed (:mod:`fused_swiglu.bench.check`).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if opts.config:
        configs.set_config_override(opts.config)
    peers_not_run: dict[str, str] = {}
    optional: frozenset[str] = frozenset()
    if opts.methods is None:
        opts.methods = m.default_methods()
        peers_not_run = {p: m.peer_problem(p) for p in m.OPTIONAL_PEERS if p not in opts.methods}
        optional = frozenset(p for p in m.OPTIONAL_PEERS if p in opts.methods)
    for method in opts.methods:
        if method not in m.METHODS:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(m.METHODS)}")
        if (problem := m.peer_problem(method)) is not None:
            raise ValueError(f"--methods: {problem}")
    for peer, why in peers_not_run.items():
        console.print(f"not run: {why}")
    dtype = DTYPES[opts.dtype]
    models = shapes.find(opts.models)

    def left_out(peer: str, why: str) -> None:
        peers_not_run[peer] = f"{why}; left out from there on"
        console.print(f"not run: {peers_not_run[peer]}")
    device, flush, l2 = _gpu_setup()
    timer = timing.CellTimer(device, flush, opts.protocol, opts.cuda_graph, reps=opts.reps, warmup_ms=opts.warmup_ms,
                             seconds=opts.seconds, console=console)
    rows: list[dict] = []
    cells = [(s, M) for s in models for M in opts.tokens]
    todo = timer.order(cells, lambda c: c[1])
    stopped: BaseException | None = None
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        ) as progress:
            task = progress.add_task("bench", total=len(todo))
            for shape, M in todo:
                progress.update(task, description="heat soak" if timer.needs_soak(M) else f"{shape.model} M={M}")
                rows.extend(_measure_shape(shape, M, opts, dtype, device, timer, l2, optional, left_out))
                progress.advance(task)
    except BaseException as e:  # keep what was measured, then stop as asked
        stopped = e
        raise
    finally:
        order = {c: i for i, c in enumerate((s.model, M) for s, M in cells)}
        rows.sort(key=lambda r: order[r["model"], r["tokens"]])  # stable: the methods keep their order
        if stopped is None or rows:
            _report(rows, opts, device, console, stopped, peers_not_run, timer)
    return rows


def _report(rows: list[dict], opts: BenchOptions, device: torch.device, console,
            stopped: BaseException | None, peers_not_run: dict[str, str] | None = None,
            timer: timing.CellTimer | None = None) -> None:
    """Print the table and, with ``opts.out``, write JSON + CSV (marked incomplete if ``stopped``)."""
    console.print(report.bench_table(rows))
    reason = None if stopped is None else _stop_reason(stopped)
    if reason is not None:
        console.print(f"stopped after {len(rows)} rows ({reason}); the table holds the shapes measured before")
    if opts.out:
        meta = report.machine_meta(device)
        meta.update({"reps": opts.reps, "warmup_ms": opts.warmup_ms, "l2_flush_bytes": timing.FLUSH_BYTES,
                     "cuda_graph": opts.cuda_graph,
                     "protocol": "CUDA-graph replay, one per rep behind the L2 flush (GPU time)" if opts.cuda_graph
                     else "eager calls, every input set back to back after the L2 flush and an idle GPU "
                          "(per call: the larger of host and GPU time)",
                     "protocol_choice": opts.protocol,
                     "sustained": f"rows with protocol 'sustained': after a heat soak to the power cap, each "
                                  f"method's CUDA-graph replays back to back for {opts.seconds:g} s (L2 flushed "
                                  "before each, input sets rotated), SM clock and power sampled by NVML; the "
                                  "other rows: the methods interleaved rep by rep",
                     "complete": stopped is None})
        if timer is not None and (soak := timer.soak_meta()) is not None:
            meta["heat_soak"] = soak
        if reason is not None:
            meta["stopped_by"] = reason
        if peers_not_run:
            meta["peers_not_run"] = peers_not_run
        paths = report.write_results(opts.out, meta, rows, report.BENCH_FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}" + ("" if stopped is None else " (incomplete)"))
