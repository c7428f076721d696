"""``fused-swiglu bench e2e-ab``: a whole model, stock against patched, in alternating rounds, each
variant in its own process.

Compiled code, CUDA graphs and their memory pools belong to one variant, and one process holding both
would evaluate one variant's Dynamo guards before the other's on every call. So two worker processes
build the same model (same seed, same random weights) on the same GPU, one stock and one patched
(:func:`fused_swiglu.fuse_swiglu_mlps`), each prepares the mode (compiles, captures) while the other
does too, and then times it only when asked. The parent asks them in turn, round by round, the order
flipping every round (stock, patched, patched, stock, ...), so that clock, power and host drift fall
on both alike, and reports the median of the per-round ratios stock time / patched time (> 1: the
patched model is faster) with their minimum and maximum.

Modes (each a measurement of ``repeats`` calls per round, their median):

* ``compiled_decode``: ``generate`` of ``new_tokens`` tokens after a ``prompt_len``-token prompt,
  batch 1, on a static KV cache, which ``generate`` compiles (``mode="reduce-overhead"``, CUDA
  graphs), after ``warmups`` untimed calls; ms per generated token (wall time of the call / new
  tokens). Dynamo's count of graphs compiled while timed is recorded (0: no recompilation).
* ``captured_decode_step``: one decode forward (batch 1, one token, a static cache holding the prompt)
  captured in a CUDA graph; ms per replay (CUDA events).
* ``prefill``: one forward of ``prefill_batch`` x ``prefill_len`` tokens (no cache, last position's
  logits) captured in a CUDA graph; ms per replay (CUDA events).

Result: ``{"meta": {...}, "rows": [{"model", "mode", "rounds", "ratio_median", "ratio_min",
"ratio_max", "stock_ms", "fused_ms", "ratios", ...}]}``; ``stock_ms`` / ``fused_ms`` are the medians
of each variant's per-round times.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("compiled_decode", "captured_decode_step", "prefill")


@dataclass
class ABOptions:
    """What to run: models (names of :mod:`fused_swiglu.bench.e2e_models`), modes (:data:`MODES`),
    rounds (at least 1), calls per measurement, the lengths, dtype and device."""

    models: list  # names, or e2e_models.ModelSpec objects
    modes: list[str] = field(default_factory=lambda: list(MODES))
    rounds: int = 10
    repeats: int = 5
    new_tokens: int = 32
    prompt_len: int = 16
    prefill_batch: int = 4
    prefill_len: int = 2048
    warmups: int = 10
    dtype: str = "bf16"
    device: str = "cuda"
    seed: int = 0


def check_options(opts: ABOptions) -> None:
    """Raises ValueError naming the option: an unknown mode or model, a count below 1, an unknown dtype."""
    from . import e2e_models
    from .e2e import DTYPES

    for m in opts.modes:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r} for bench e2e-ab; known: {', '.join(MODES)}")
    e2e_models.find(opts.models)
    for name in ("rounds", "repeats", "new_tokens", "prompt_len", "prefill_batch", "prefill_len", "warmups"):
        value = getattr(opts, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    if opts.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {opts.dtype!r}")


# --- the worker: one variant of one model -------------------------------------------------------


def _prepare(model, mode: str, opts: ABOptions, device):
    """Compile or capture ``mode`` on ``model``; returns the function that times one call (ms). On a
    CPU (for tests) only ``prefill`` runs, uncaptured, timed by wall clock."""
    import torch

    from . import e2e_modes as em

    if device.type != "cuda" and mode != "prefill":
        raise RuntimeError(f"{mode} needs a CUDA device")
    s = em.Settings(device=device, new_tokens=opts.new_tokens, prompt_len=opts.prompt_len, seed=opts.seed)
    if mode == "compiled_decode":
        cache = em.static_cache(model, opts.prompt_len + opts.new_tokens, 1)
        ids = em.prompt(model, 1, opts.prompt_len, opts.seed, device)
        kwargs = {**em.generate_kwargs(model, ids, s), em.cache_keyword(model): cache,
                  "compile_config": em.compile_config()}

        def generate():
            cache.reset()
            model.generate(**kwargs)

        for _ in range(opts.warmups):  # compilation, CUDA-graph recording, then warm calls
            generate()
        if vars(model).get("_compiled_call") is None:
            raise RuntimeError("generate did not compile the model's forward on a static cache")
        return lambda: em.wall_ms(generate, device) / opts.new_tokens
    if mode == "captured_decode_step":
        step = _decode_step(model, opts, device)
    else:
        ids = em.prompt(model, opts.prefill_batch, opts.prefill_len, opts.seed, device)
        keep = {"logits_to_keep": 1} if "logits_to_keep" in em._forward_params(model) else {}

        def step():
            return model(input_ids=ids, use_cache=False, **keep).logits

    if device.type != "cuda":
        return lambda: em.wall_ms(lambda: _no_grad(step), device)
    graph = _capture(step, device)
    return lambda: em._event_ms(graph.replay, device)


def _no_grad(fn):
    import torch

    with torch.no_grad():
        return fn()


def _decode_step(model, opts: ABOptions, device):
    """One decode forward on a static cache prefilled with the prompt, re-run at the same position."""
    import torch

    from . import e2e_modes as em

    P = opts.prompt_len
    cache = em.static_cache(model, P + 1, 1)
    kw = em.cache_keyword(model)
    ids = em.prompt(model, 1, P, opts.seed, device)
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{kw: cache})
    lengths = [layer.cumulative_length for layer in getattr(cache, "layers", [])
               if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]
    token, position = ids[:, -1:].clone(), torch.full((1, 1), P, dtype=torch.long, device=device)
    extra = {"cache_position": position[0]} if "cache_position" in em._forward_params(model) else {}

    def step():
        for n in lengths:
            n.fill_(P)
        return model(input_ids=token, position_ids=position, use_cache=True, **{kw: cache}, **extra).logits

    return step


def _capture(step, device):
    """``step`` captured in a CUDA graph after three warm-up calls on a side stream."""
    import torch

    stream = torch.cuda.Stream(device)
    with torch.no_grad():
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(3):
                step()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            step()
    torch.cuda.synchronize(device)
    return graph


def worker(conn, spec, mode: str, fused: bool, opts: ABOptions) -> None:
    """One variant in its own process: build, patch (``fused``), prepare; then answer each ``"time"``
    with the median of ``opts.repeats`` timed calls (ms) until ``"stop"``. Sends ``("ready", info)``
    or ``("error", text)`` first."""
    try:
        import torch

        from ..modules import fuse_swiglu_mlps
        from . import e2e_models
        from .e2e import DTYPES

        device = torch.device(opts.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        start = time.perf_counter()
        model = e2e_models.build(spec, device, DTYPES[opts.dtype], seed=opts.seed)
        patched = fuse_swiglu_mlps(model) if fused else []
        if fused and len(patched) != spec.num_layers:
            raise RuntimeError(f"fuse_swiglu_mlps patched {len(patched)} of {spec.num_layers} MLP blocks")
        measure = _prepare(model, mode, opts, device)
        measure()
        conn.send(("ready", {"prepare_s": round(time.perf_counter() - start, 1), "patched_blocks": len(patched)}))
    except BaseException:
        conn.send(("error", traceback.format_exc(limit=8)))
        return
    while True:
        what = conn.recv()
        if what == "stop":
            return
        try:
            ms = statistics.median(measure() for _ in range(opts.repeats))
            conn.send(("ms", (ms, _graphs_compiled())))
        except BaseException:
            conn.send(("error", traceback.format_exc(limit=8)))
            return


def _graphs_compiled() -> int:
    import torch

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


# --- the parent ---------------------------------------------------------------------------------


def _receive(conn, who: str):
    kind, value = conn.recv()
    if kind == "error":
        raise RuntimeError(f"the {who} worker failed:\n{value}")
    return value


def run_pair(spec, mode: str, opts: ABOptions) -> dict:
    """One model and mode: both workers started at once, then ``opts.rounds`` alternating rounds.
    Returns the row. Raises RuntimeError with a worker's traceback if one fails."""
    ctx = mp.get_context("spawn")
    procs, conns = {}, {}
    try:
        for fused in (False, True):
            parent, child = ctx.Pipe()
            procs[fused] = ctx.Process(target=worker, args=(child, spec, mode, fused, opts), daemon=True)
            procs[fused].start()
            conns[fused] = parent
        info = {fused: _receive(conns[fused], "patched" if fused else "stock") for fused in (False, True)}
        times: dict[bool, list[float]] = {False: [], True: []}
        graphs: dict[bool, list[int]] = {False: [], True: []}
        for r in range(opts.rounds):
            for fused in ((False, True) if r % 2 == 0 else (True, False)):
                conns[fused].send("time")
                ms, compiled = _receive(conns[fused], "patched" if fused else "stock")
                times[fused].append(ms)
                graphs[fused].append(compiled)
    finally:
        for fused, conn in conns.items():
            try:
                conn.send("stop")
            except (BrokenPipeError, OSError):
                pass
        for p in procs.values():
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    ratios = [s / f for s, f in zip(times[False], times[True])]
    return {"model": spec.name, "mode": mode, "rounds": opts.rounds, "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "stock_ms": statistics.median(times[False]),
            "fused_ms": statistics.median(times[True]), "ratios": ratios, "stock_samples_ms": times[False],
            "fused_samples_ms": times[True], "repeats_per_round": opts.repeats,
            "graphs_compiled_while_timed": {"stock": graphs[False][-1] - graphs[False][0],
                                            "fused": graphs[True][-1] - graphs[True][0]},
            "prepare_s": {"stock": info[False]["prepare_s"], "fused": info[True]["prepare_s"]}}


FIELDS = ("model", "mode", "rounds", "ratio_median", "ratio_min", "ratio_max", "stock_ms", "fused_ms")


def run_ab(opts: ABOptions, out: Path | None, console) -> dict:
    """Every model and mode of ``opts`` (a failing pair gets a row with its error and the run goes on);
    prints a table and, with ``out``, writes the JSON there. Returns ``{"meta", "rows"}``.

    Raises:
        ValueError: bad options (:func:`check_options`).
    """
    from . import e2e_models
    from .report import machine_meta

    check_options(opts)
    meta = {**machine_meta(), "kind": "e2e_ab", "options": {**vars(opts), "models": [getattr(m, "name", m) for m in opts.models]},
            "unit": "ratio = stock ms / patched ms, per round; > 1: the patched model is faster",
            "protocol": "two processes (stock, patched), rounds alternating ABBA, each round's time the median of "
                        "repeats_per_round calls"}
    rows = []
    start = time.perf_counter()
    for spec in e2e_models.find(opts.models):
        name = spec.name
        for mode in opts.modes:
            t0 = time.perf_counter()
            try:
                row = run_pair(spec, mode, opts)
            except Exception as e:  # this pair failed: record it and go on
                row = {"model": name, "mode": mode, "rounds": 0, "ratio_median": None, "ratio_min": None,
                       "ratio_max": None, "error": str(e)[-2000:]}
            row["elapsed_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            console.print(_line(row))
            meta["elapsed_s"] = round(time.perf_counter() - start, 1)
            _write(out, {"meta": meta, "rows": rows})  # after every row: a stopped run keeps what it measured
    if out is not None:
        console.print(f"wrote {out}")
    return {"meta": meta, "rows": rows}


def _write(out: Path | None, results: dict) -> None:
    import json

    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


def _line(row: dict) -> str:
    if row.get("error"):
        return f"{row['model']} {row['mode']}: failed: {row['error'].strip().splitlines()[-1]}"
    return (f"{row['model']} {row['mode']}: stock/patched {row['ratio_median']:.3f} "
            f"[{row['ratio_min']:.3f}, {row['ratio_max']:.3f}] over {row['rounds']} rounds "
            f"(stock {row['stock_ms']:.3f} ms, patched {row['fused_ms']:.3f} ms)")

