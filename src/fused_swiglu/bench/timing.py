"""Timing protocol.

For each shape, every method is timed in the same run, interleaved rep by rep:

1. Input sets: enough distinct (x, weights) sets that together they exceed 2x the L2 size
   (so no run finds its operands in L2 from the previous one), at most 8 sets and within a
   memory budget (~20 GB).
2. Warm-up: each method runs for about ``warmup_ms`` (at least 2 calls), which also triggers
   compilation and the kernel library's load.
3. Each repetition, for each method (the order rotates every rep): flush L2 by writing a 256 MB
   buffer (``buf.zero_()``), record a CUDA event, run, record an event. Two ways to run:

   * one call on the next input set (``back_to_back=False``, used for CUDA-graph replays): the host
     enqueues the call while the GPU still writes the flush buffer, so the events time the GPU work
     alone;
   * every input set once, back to back (``back_to_back=True``, used for eager calls): after the
     flush the host waits for the GPU to go idle, so the events also time whatever part of the
     host's work per call (Python, dispatch, launch) the GPU waits for; the sample is the elapsed
     time / the number of sets. This is what a stream of eager calls achieves: per call, the
     larger of its host time and its GPU time. The sets' weights, together over 2x L2, keep each
     call's operands out of L2 from its previous turn.
4. Report the median over reps, with the 10th and 90th percentiles, in milliseconds (per call).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

FLUSH_BYTES = 256 * 1024 * 1024
MAX_SETS = 8
MEMORY_BUDGET_BYTES = 20 * 10**9


@dataclass(frozen=True)
class Timing:
    """Milliseconds over ``reps`` repetitions."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    reps: int


def n_input_sets(
    bytes_read_per_set: int,
    bytes_held_per_set: int,
    l2_bytes: int,
    budget_bytes: int = MEMORY_BUDGET_BYTES,
    max_sets: int = MAX_SETS,
) -> int:
    """How many input sets to rotate: enough that the bytes one call reads, summed over sets,
    exceed 2x L2; at most ``max_sets`` and within ``budget_bytes`` of memory held; at least 1."""
    wanted = math.floor(2 * l2_bytes / max(1, bytes_read_per_set)) + 1
    affordable = budget_bytes // max(1, bytes_held_per_set)
    return int(max(1, min(wanted, max_sets, affordable)))


def summarize(samples_ms: Sequence[float]) -> Timing:
    """Median, p10 and p90 (linear interpolation) of the samples.

    Raises:
        ValueError: no samples.
    """
    if not samples_ms:
        raise ValueError("summarize needs at least one sample; got none")
    s = sorted(samples_ms)

    def pct(q: float) -> float:
        pos = q * (len(s) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return Timing(median_ms=pct(0.5), p10_ms=pct(0.1), p90_ms=pct(0.9), reps=len(s))


def warm_gpu(device: torch.device, seconds: float = 1.0) -> None:
    """Keep the GPU busy with bf16 matrix products for ``seconds`` so that the first measured shape
    does not run while clocks are still ramping up from idle."""
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize(device)


def as_graph_replays(
    calls: dict[str, Sequence[Callable[[], object]]], device: torch.device
) -> dict[str, list[Callable[[], object]]]:
    """Each call captured once into a CUDA graph (after two eager warm-up calls on a side stream,
    as capture requires); returns the graphs' ``replay`` methods. Timing these measures the GPU
    work of a method without its per-call host time (launch overhead, Python), as in a serving
    engine that replays graphs."""
    replays: dict[str, list[Callable[[], object]]] = {}
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    for name, fns in calls.items():
        replays[name] = []
        for fn in fns:
            with torch.cuda.stream(stream):
                fn()
                fn()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                fn()
            replays[name].append(graph.replay)
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    return replays


def flush_buffer(device: torch.device) -> torch.Tensor:
    """A 256 MB buffer whose ``zero_()`` evicts L2 (50 MB on H200) with writes."""
    return torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)


def time_interleaved(
    calls: dict[str, Sequence[Callable[[], object]]],
    device: torch.device,
    warmup_ms: float = 25.0,
    reps: int = 50,
    flush: torch.Tensor | None = None,
    back_to_back: bool = False,
    warmup_calls: int | None = None,
) -> dict[str, Timing]:
    """Time each method's calls (one callable per input set) by the protocol above.

    Args:
        calls: method name -> callables, one per input set, each running the method once.
        device: the CUDA device the calls run on.
        warmup_ms: wall-clock warm-up per method, milliseconds.
        reps: timed repetitions per method.
        flush: the L2 flush buffer (allocated if None).
        back_to_back: time every input set's call back to back after an idle GPU (per-call time
            with the host's share), instead of one call enqueued behind the flush (GPU time).
        warmup_calls: warm up with exactly this many calls per method instead of for ``warmup_ms``
            (calls with collectives: every rank must run the same number).

    Returns:
        method name -> :class:`Timing`.
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1; got reps={reps}")
    flush = flush if flush is not None else flush_buffer(device)
    names = list(calls)
    with torch.cuda.device(device):
        for name in names:
            fns = calls[name]
            start, n = time.perf_counter(), 0
            while (n < warmup_calls if warmup_calls is not None
                   else n < 2 or (time.perf_counter() - start) * 1e3 < warmup_ms):
                fns[n % len(fns)]()
                n += 1
                if n % len(fns) == 0:
                    torch.cuda.synchronize(device)
        torch.cuda.synchronize(device)
        events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {n: [] for n in names}
        for rep in range(reps):
            order = names[rep % len(names):] + names[: rep % len(names)]
            for name in order:
                fns = calls[name]
                flush.zero_()
                begin = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                if back_to_back:
                    torch.cuda.synchronize(device)
                    begin.record()
                    for i in range(len(fns)):
                        fns[(rep + i) % len(fns)]()
                else:
                    begin.record()
                    fns[rep % len(fns)]()
                end.record()
                events[name].append((begin, end))
            if rep % 8 == 7:
                torch.cuda.synchronize(device)  # keep the host from running far ahead
        torch.cuda.synchronize(device)
    per_rep = {name: len(calls[name]) if back_to_back else 1 for name in names}
    return {name: summarize([b.elapsed_time(e) / per_rep[name] for b, e in events[name]]) for name in names}


def time_grid(
    shapes: Sequence,
    tokens: Sequence[int],
    calls_for: Callable[[object, int, torch.device, int], dict[str, Sequence[Callable[[], object]]]],
    rows_of: Callable[[object, int, dict[str, Timing]], list[dict]],
    line_of: Callable[[dict], str],
    console,
    reps: int,
    warmup_ms: float,
    cuda_graph: bool,
) -> tuple[list[dict], torch.device]:
    """Every shape (an MlpShape) at every M on the current CUDA device, by :func:`time_interleaved`:
    ``calls_for(shape, M, device, l2_bytes)`` builds (and may check) the methods' calls of one cell,
    captured as CUDA graphs with ``cuda_graph``; ``rows_of(shape, M, timings)`` turns the cell's timings
    into rows and ``line_of(row)`` each row into its part of the cell's printed line. Dynamo's cache is
    reset per shape (its recompile limit). Returns the rows and the device."""
    device = torch.device("cuda", torch.cuda.current_device())
    flush = flush_buffer(device)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    warm_gpu(device)
    rows: list[dict] = []
    for shape in shapes:
        torch._dynamo.reset()
        for M in tokens:
            calls = calls_for(shape, M, device, l2)
            if cuda_graph:
                calls = as_graph_replays(calls, device)
            cell = rows_of(shape, M, time_interleaved(calls, device, warmup_ms=warmup_ms, reps=reps, flush=flush))
            rows += cell
            console.print(f"{shape.model} M={M}: " + ", ".join(line_of(r) for r in cell))
            del calls
            torch.cuda.empty_cache()
    return rows, device

