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

This interleaved protocol answers "which method takes less GPU time for the same work": methods
alternate within microseconds, so they share one clock and one power state. At large M every method
drives the GPU to its power cap, and there the clock a method runs at depends on its own energy per
multiply-add; interleaving averages the methods' power and hides that. The **sustained protocol**
(:func:`time_sustained`) times the way a busy GPU runs and the way users and peer libraries time
kernels: after a heat soak that brings the GPU to its power cap (:func:`heat_soak`), each method's
CUDA-graph replays run back to back for about a second (L2 flushed before each, input sets rotated),
while NVML samples the SM clock and board power (:mod:`fused_swiglu.bench.power`). Rows then carry
``sm_mhz`` and ``power_w``. :func:`protocol_for` picks it from M = :data:`SUSTAINED_FROM_M` on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from . import power
from .defaults import PROTOCOLS, SUSTAINED_FROM_M, SUSTAINED_SECONDS  # "auto": sustained from SUSTAINED_FROM_M on

FLUSH_BYTES = 256 * 1024 * 1024
MAX_SETS = 8
MEMORY_BUDGET_BYTES = 20 * 10**9
SOAK_SECONDS = 30.0  # longest heat soak
GRID_FIELDS = ("protocol", "sm_mhz", "power_w")  # what time_grid adds to each row
AHEAD = 16  # sustained protocol: calls the host enqueues ahead of the GPU


@dataclass(frozen=True)
class Timing:
    """Milliseconds over ``reps`` repetitions."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    reps: int
    sm_mhz: float | None = None  # sustained protocol: the median SM clock while the method ran
    power_w: float | None = None  # and the median board power


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


def protocol_for(protocol: str, M: int, cuda_graph: bool) -> str:
    """``"sustained"`` or ``"interleaved"`` for a cell: ``protocol`` itself unless it is ``"auto"``,
    which takes the sustained one for CUDA-graph timing from M = :data:`SUSTAINED_FROM_M` on (eager
    timing answers a host-time question: always interleaved).

    Raises:
        ValueError: an unknown protocol, or ``"sustained"`` without CUDA graphs.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(map(repr, PROTOCOLS))}; got protocol={protocol!r}")
    if protocol == "sustained" and not cuda_graph:
        raise ValueError("the sustained protocol times CUDA-graph replays; use it with cuda_graph (--cuda-graph)")
    if protocol != "auto":
        return protocol
    return "sustained" if cuda_graph and M >= SUSTAINED_FROM_M else "interleaved"


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


def heat_soak(device: torch.device, monitor: power.Monitor, seconds: float = SOAK_SECONDS) -> power.Reading:
    """Run 8192 x 8192 x 8192 bf16 products until the board has drawn at least 97 % of its enforced
    power limit for 2 s (where NVML reads power), or for ``seconds``; returns the last second's
    reading. Without NVML (nothing to read the power from) it runs for ``min(seconds, 10)``."""
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    limit = monitor.power_limit_w
    start = time.perf_counter()
    at_cap_since = None
    budget = seconds if monitor.available else min(seconds, 10.0)
    with torch.cuda.device(device):
        while time.perf_counter() - start < budget:
            for _ in range(4):
                a @ a
            torch.cuda.synchronize(device)
            now = monitor.sample()
            if now is not None and limit is not None and now[1] >= 0.97 * limit:
                at_cap_since = at_cap_since or time.perf_counter()
                if time.perf_counter() - at_cap_since >= 2.0:
                    break
            else:
                at_cap_since = None
        with monitor.window() as w:
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end:
                for _ in range(4):
                    a @ a
                torch.cuda.synchronize(device)
    return w.reading


def time_sustained(
    calls: dict[str, Sequence[Callable[[], object]]],
    device: torch.device,
    monitor: power.Monitor,
    seconds: float = SUSTAINED_SECONDS,
    flush: torch.Tensor | None = None,
    warmup_calls: int = 10,
) -> dict[str, Timing]:
    """Each method in turn, its calls (one per input set, rotated; CUDA-graph replays) back to back
    for ``seconds`` after ``warmup_calls``, L2 flushed before each call, with CUDA events around the
    call and NVML sampling the SM clock and power meanwhile. Run it on a GPU already at its power
    cap (:func:`heat_soak`, or the previous cell): the methods follow one another without a pause.

    Returns:
        method name -> :class:`Timing` with ``sm_mhz`` and ``power_w`` (None without NVML).
    """
    flush = flush if flush is not None else flush_buffer(device)
    result: dict[str, Timing] = {}
    with torch.cuda.device(device):
        for name, fns in calls.items():
            for i in range(warmup_calls):
                flush.zero_()
                fns[i % len(fns)]()
            events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
            with monitor.window() as w:
                start = time.perf_counter()
                rep = 0
                while True:
                    flush.zero_()
                    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    begin.record()
                    fns[rep % len(fns)]()
                    end.record()
                    events.append((begin, end))
                    rep += 1
                    if rep > AHEAD:
                        events[rep - 1 - AHEAD][1].synchronize()  # the host stays AHEAD calls ahead, the GPU busy
                    if time.perf_counter() - start >= seconds:
                        break
                torch.cuda.synchronize(device)
            t = summarize([b.elapsed_time(e) for b, e in events])
            result[name] = Timing(t.median_ms, t.p10_ms, t.p90_ms, t.reps, w.reading.sm_mhz, w.reading.power_w)
    return result


class CellTimer:
    """Times the cells of one run, each by its protocol (:func:`protocol_for`): an interleaved cell
    by :func:`time_interleaved`, a sustained one by :func:`time_sustained`, the first of those after
    one :func:`heat_soak` (:meth:`order` puts the sustained cells last, back to back)."""

    def __init__(self, device: torch.device, flush: torch.Tensor, protocol: str, cuda_graph: bool, *, reps: int,
                 warmup_ms: float, seconds: float = SUSTAINED_SECONDS, console=None):
        self.device, self.flush, self.protocol, self.cuda_graph = device, flush, protocol, cuda_graph
        self.reps, self.warmup_ms, self.seconds, self.console = reps, warmup_ms, seconds, console
        self.monitor: power.Monitor | None = None  # made at the first sustained cell
        self.soak: power.Reading | None = None  # the heat soak's last second

    def kind(self, M: int) -> str:
        """``"sustained"`` or ``"interleaved"``: the protocol of a cell of M tokens."""
        return protocol_for(self.protocol, M, self.cuda_graph)

    def order(self, cells: Sequence, M_of: Callable[[object], int]) -> list:
        """``cells`` with the interleaved ones first, each kind in its own order."""
        return sorted(cells, key=lambda c: self.kind(M_of(c)) == "sustained")

    def soak_meta(self) -> dict | None:
        """The heat soak's last second for a results file's meta (``sm_mhz``, ``power_w``,
        ``power_limit_w``); None before any sustained cell."""
        if self.soak is None:
            return None
        return {"sm_mhz": self.soak.sm_mhz, "power_w": self.soak.power_w, "power_limit_w": self.monitor.power_limit_w}

    def needs_soak(self, M: int) -> bool:
        """Whether timing a cell of M tokens starts with the run's heat soak."""
        return self.soak is None and self.kind(M) == "sustained"

    def time(self, calls: dict[str, Sequence[Callable[[], object]]], M: int) -> dict[str, Timing]:
        """Time one cell of M tokens by its protocol (eager calls: back to back, interleaved)."""
        if self.kind(M) == "interleaved":
            return time_interleaved(calls, self.device, self.warmup_ms, self.reps, self.flush,
                                    back_to_back=not self.cuda_graph)
        if self.monitor is None:
            self.monitor = power.Monitor(power.nvml_index(self.device))
        if self.soak is None:
            self.soak = heat_soak(self.device, self.monitor)
            if self.console is not None:
                self.console.print(f"heat soak: {power.describe(self.soak)}")
        return time_sustained(calls, self.device, self.monitor, self.seconds, self.flush)


def as_graph_replays(
    calls: dict[str, Sequence[Callable[[], object]]], device: torch.device
) -> dict[str, list[Callable[[], object]]]:
    """Each call captured once into a CUDA graph (after two eager warm-up calls on a side stream,
    as capture requires); returns the graphs' ``replay`` methods. Timing these measures the GPU
    work of a method without its per-call host time (launch overhead, Python), as in a serving
    engine that replays graphs. Each graph holds its call, so the inputs the call reads stay allocated for as
    long as the replay does, whatever the caller keeps."""
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
            graph.fn = fn  # what fn reads outside the graph's pool (its inputs) lives as long as the replay
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


def cell_rows(shape, M: int, timings: dict[str, Timing], over: str, reference: str) -> list[dict]:
    """The rows of one cell of :func:`time_grid` (``shape``: an MlpShape): shape, M, method and its
    times, and ``over``: the ``reference`` method's time / the method's (None where the reference was
    not timed)."""
    ref = timings.get(reference)
    return [{"model": shape.model, "hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
             "tokens": M, "method": method, "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
             over: ref.median_ms / t.median_ms if ref else None}
            for method, t in timings.items()]


def cell_fields(over: str) -> tuple[str, ...]:
    """The fields of :func:`cell_rows`' rows once :func:`time_grid` has added its own."""
    return ("model", "hidden_size", "intermediate_size", "tokens", "method", "median_ms", "p10_ms", "p90_ms", over,
            *GRID_FIELDS)


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
    protocol: str = "auto",
    seconds: float = SUSTAINED_SECONDS,
    capture: bool = True,
    on_cell: Callable[[list[dict], dict | None], None] | None = None,
) -> tuple[list[dict], torch.device, dict | None]:
    """Every shape (an MlpShape, or any object with a ``model`` name) at every M on the current CUDA
    device, each cell by its protocol (:func:`protocol_for`): ``calls_for(shape, M, device, l2_bytes)``
    builds (and may check) the methods' calls of one cell, captured as CUDA graphs with ``cuda_graph``
    (by ``calls_for`` itself where ``capture`` is False, which may leave a method uncaptured); ``rows_of(shape, M,
    timings)`` turns the cell's timings into rows (each with its ``"method"``), which get the cell's
    ``protocol`` and the method's ``sm_mhz`` and ``power_w``, and ``line_of(row)`` each row into its
    part of the cell's printed line. The interleaved cells run first, then one heat soak and the
    sustained cells back to back; the rows come back in shape-then-M order. Dynamo's cache is reset
    per shape (its recompile limit). ``on_cell(rows, soak)``, where given, gets the rows timed so far
    and the heat soak's reading after each cell (to keep a partial result of a run that is cut short).
    Returns the rows, the device and the heat soak's reading (:meth:`CellTimer.soak_meta`; None without
    a sustained cell)."""
    device = torch.device("cuda", torch.cuda.current_device())
    flush = flush_buffer(device)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    warm_gpu(device)
    timer = CellTimer(device, flush, protocol, cuda_graph, reps=reps, warmup_ms=warmup_ms, seconds=seconds,
                      console=console)
    cells = [(i, M) for i in range(len(shapes)) for M in tokens]
    by_cell: dict[tuple[int, int], list[dict]] = {}
    last_shape = None
    for i, M in timer.order(cells, lambda c: c[1]):
        shape = shapes[i]
        if i != last_shape:
            torch._dynamo.reset()
            last_shape = i
        calls = calls_for(shape, M, device, l2)
        if cuda_graph and capture:
            calls = as_graph_replays(calls, device)
        timings = timer.time(calls, M)
        cell = rows_of(shape, M, timings)
        for r in cell:
            t = timings.get(r.get("method"))
            r.update(zip(GRID_FIELDS, (timer.kind(M), t.sm_mhz if t else None, t.power_w if t else None)))
        by_cell[i, M] = cell
        console.print(f"{shape.model} M={M}: " + ", ".join(line_of(r) for r in cell))
        if on_cell is not None:
            on_cell([r for c in cells for r in by_cell.get(c, [])], timer.soak_meta())
        del calls
        torch.cuda.empty_cache()
    return [r for c in cells for r in by_cell.get(c, [])], device, timer.soak_meta()
