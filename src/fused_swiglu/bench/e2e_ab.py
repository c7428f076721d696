"""``fused-swiglu bench e2e-ab``: a whole model in two variants (by default stock against patched), in
alternating rounds, each variant in its own process.

The variants (:data:`VARIANTS`): ``stock`` (Hugging Face's MLPs), ``patched``
(:func:`fused_swiglu.fuse_swiglu_mlps`) and ``backend`` (the stock model compiled with
:func:`fused_swiglu.fused_backend`, which rewrites the MLPs' SwiGLU products in the captured graphs; only
in the modes that compile the model, :data:`COMPILED_MODES`). A run times two of them, A against B
(:attr:`ABOptions.variants`).

Compiled code, CUDA graphs and their memory pools belong to one variant, and one process holding both
would evaluate one variant's Dynamo guards before the other's on every call. So two worker processes
build the same model (same seed, same random weights) on the same GPU, one per variant, each prepares
the mode (patches, compiles, captures) while the other does too, and then times it only when asked.
A model that fits the GPU once but not twice (Qwen3-30B-A3B's 61 GB on an 80 GB H100) runs with
``one_process``: one worker builds the model once, captures the stock variant's CUDA graph, patches the
model and captures the patched one, then replays either when asked. No guards are involved there (the
captured modes do not compile), and both graphs read the same weights; stock and patched variants and
captured modes only.
The parent asks them in turn, round by round, the order flipping every round (A, B, B, A, ...), so
that clock, power and host drift fall on both alike, and reports the median of the per-round ratios
A time / B time (> 1: B is faster) with their minimum and maximum.

Modes (each a measurement of ``repeats`` calls per round, their median):

* ``compiled_decode``: ``generate`` of ``new_tokens`` tokens after a ``prompt_len``-token prompt,
  batch 1, on a static KV cache, which ``generate`` compiles (``mode="reduce-overhead"``, CUDA
  graphs; with ``fused_backend()`` as the backend for the ``backend`` variant), after ``warmups``
  untimed calls; ms per generated token (wall time of the call / new tokens). Dynamo's count of
  graphs compiled while timed is recorded (0: no recompilation). The ``backend`` worker fails unless
  the backend fused the MLP of every decoder layer and left no candidate unfused.
* ``captured_decode_step``: one decode forward (``decode_batch`` sequences of one new token each, a static
  cache holding their prompts) captured in a CUDA graph; ms per replay (CUDA events).
* ``prefill``: one forward of ``prefill_batch`` x ``prefill_len`` tokens (no cache, last position's
  logits) captured in a CUDA graph; ms per replay (CUDA events).
* ``training`` (only when named): one training step of ``train_batch`` x ``train_len`` tokens in train
  mode, forward with ``labels`` (the causal-LM loss) and ``loss.backward()``, gradients set to None before
  each, run eagerly (autograd is not captured); ms per step (CUDA events), an untimed step after each switch
  of variant in one process. A 7B model's bf16 weights and gradients alone take 30 GB, so on an 80 GB GPU
  it runs with ``one_process``, where the model is unpatched and patched again between the variants' turns.

Result: ``{"meta": {...}, "rows": [{"model", "mode", "rounds", "ratio_median", "ratio_min",
"ratio_max", "stock_ms", "fused_ms", "ratios", ..., "variant_a", "variant_b"}]}``. Each variant's
fields are named by its key (:data:`KEYS`: ``stock``, ``fused`` for the patched model, ``backend``):
``<key>_ms`` (the median of its per-round times), ``<key>_samples_ms`` (the per-round times), and its
entries in ``graphs_compiled_while_timed`` and ``prepare_s``; ``variant_a`` and ``variant_b`` name the
pair (the ratios are A / B). A run with the ``backend`` variant adds ``backend_fused_mlps`` (the
decoder MLPs the backend fused).
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .defaults import E2E_AB_COMPILED_MODES as COMPILED_MODES
from .defaults import E2E_AB_DEFAULT_MODES as DEFAULT_MODES
from .defaults import E2E_AB_DEFAULT_VARIANTS as DEFAULT_VARIANTS
from .defaults import E2E_AB_MODES as MODES
from .defaults import E2E_AB_VARIANTS as VARIANTS

# the prefix of a variant's fields in a row: the patched model's is "fused", as in bench e2e's rows
KEYS = {"stock": "stock", "patched": "fused", "backend": "backend"}
ONE_PROCESS_MODES = tuple(m for m in MODES if m not in COMPILED_MODES)  # captured or (on a CPU) plain calls
EAGER_MODES = ("training",)  # not captured on a GPU either: one process switches the model's variant


@dataclass
class ABOptions:
    """What to run: models (names of :mod:`fused_swiglu.bench.e2e_models`), modes (:data:`MODES`),
    the two variants timed, A then B (:data:`VARIANTS`), rounds (at least 1), calls per measurement,
    the lengths, dtype and device."""

    models: list  # names, or e2e_models.ModelSpec objects
    modes: list[str] = field(default_factory=lambda: list(DEFAULT_MODES))
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    rounds: int = 10
    repeats: int = 5
    new_tokens: int = 32
    prompt_len: int = 16
    prefill_batch: int = 4
    decode_batch: int = 1
    prefill_len: int = 2048
    train_batch: int = 1
    train_len: int = 2048
    warmups: int = 10
    dtype: str = "bf16"
    device: str = "cuda"
    seed: int = 0
    one_process: bool = False  # both variants in one worker, on the same weights (module docstring)


def default_modes(variants) -> list[str]:
    """The modes a run of ``variants`` times when none are named: every mode but ``training``
    (:data:`DEFAULT_MODES`), or with the ``backend`` variant the modes that compile the model
    (:data:`COMPILED_MODES`)."""
    return [m for m in DEFAULT_MODES if "backend" not in variants or m in COMPILED_MODES]


def check_options(opts: ABOptions) -> None:
    """Raises ValueError naming the option: an unknown mode or model, variants that are not two
    different names of :data:`VARIANTS`, the ``backend`` variant with a mode that does not compile the
    model, a count below 1, an unknown dtype. Modes and variants are checked without importing torch."""
    from . import e2e_models

    for m in opts.modes:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r} for bench e2e-ab; known: {', '.join(MODES)}")
    variants = list(opts.variants)
    if len(variants) != 2 or variants[0] == variants[1] or not set(variants) <= set(VARIANTS):
        raise ValueError(f"variants must be two different ones of {', '.join(VARIANTS)}; got "
                         f"{' '.join(map(str, variants)) or 'none'}")
    if "backend" in variants and (plain := [m for m in opts.modes if m not in COMPILED_MODES]):
        raise ValueError(f"variants backend (the model compiled with fused_backend()) needs modes that compile the "
                         f"model ({', '.join(COMPILED_MODES)}); {', '.join(plain)} "
                         f"{'does' if len(plain) == 1 else 'do'} not")
    if opts.one_process:
        if set(variants) != {"stock", "patched"}:
            raise ValueError(f"one_process times the stock and patched variants of one model; got variants "
                             f"{' '.join(variants)}")
        if compiled := [m for m in opts.modes if m in COMPILED_MODES]:
            raise ValueError(f"one_process needs modes that do not compile the model ({', '.join(ONE_PROCESS_MODES)}); "
                             f"{', '.join(compiled)} compiles the model")
    e2e_models.find(opts.models)
    for name in ("rounds", "repeats", "new_tokens", "prompt_len", "prefill_batch", "prefill_len", "decode_batch",
                 "train_batch", "train_len", "warmups"):
        value = getattr(opts, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    from .e2e import DTYPES

    if opts.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {opts.dtype!r}")


# --- the worker: one variant of one model -------------------------------------------------------


def _prepare(model, mode: str, opts: ABOptions, device, backend=None):
    """Compile or capture ``mode`` on ``model``, compiling with ``backend`` where given (compiled
    modes only); returns the function that times one call (ms). ``training`` runs eagerly. On a CPU
    (for tests) only ``prefill`` and ``training`` run, uncaptured, timed by wall clock."""
    import torch

    from . import e2e_modes as em

    if backend is not None and mode not in COMPILED_MODES:
        raise RuntimeError(f"{mode} does not compile the model: the backend variant does not apply")
    if device.type != "cuda" and mode not in ("prefill", "training"):
        raise RuntimeError(f"{mode} needs a CUDA device")
    if mode == "training":
        return _training_step(model, opts, device)
    s = em.Settings(device=device, new_tokens=opts.new_tokens, prompt_len=opts.prompt_len, seed=opts.seed)
    if mode == "compiled_decode":
        cache = em.static_cache(model, opts.prompt_len + opts.new_tokens, 1)
        ids = em.prompt(model, 1, opts.prompt_len, opts.seed, device)
        kwargs = {**em.generate_kwargs(model, ids, s), em.cache_keyword(model): cache,
                  "compile_config": em.compile_config(backend)}

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
        keep = {"logits_to_keep": 1} if "logits_to_keep" in em.forward_params(model) else {}

        def step():
            return model(input_ids=ids, use_cache=False, **keep).logits

    if device.type != "cuda":
        return lambda: em.wall_ms(lambda: _no_grad(step), device)
    graph = _capture(step, device)
    return lambda: em.event_ms(graph.replay, device)


def _training_step(model, opts: ABOptions, device):
    """The timer of one training step of ``model`` (module docstring), after one untimed step; the model is
    left in train mode."""
    from . import e2e_modes as em

    step, params = em.training_step(model, em.prompt(model, opts.train_batch, opts.train_len, opts.seed, device))
    if not params:
        raise RuntimeError("training: the model has no parameter that requires grad")
    model.train()
    step()
    measure = lambda: em.event_ms(step, device)  # noqa: E731 (wall time on a CPU)
    measure.step = step  # the untimed step after a switch of variant
    return measure


def _no_grad(fn):
    import torch

    with torch.no_grad():
        return fn()


def _decode_step(model, opts: ABOptions, device):
    """One decode forward of ``opts.decode_batch`` sequences on a static cache prefilled with their prompts,
    re-run at the same position."""
    import torch

    from . import e2e_modes as em

    P, B = opts.prompt_len, opts.decode_batch
    cache = em.static_cache(model, P + 1, B)
    kw = em.cache_keyword(model)
    ids = em.prompt(model, B, P, opts.seed, device)
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{kw: cache})
    lengths = [layer.cumulative_length for layer in getattr(cache, "layers", [])
               if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]
    token, position = ids[:, -1:].clone(), torch.full((B, 1), P, dtype=torch.long, device=device)
    extra = {"cache_position": position[0]} if "cache_position" in em.forward_params(model) else {}

    def step():
        for n in lengths:
            n.fill_(P)
        return model(input_ids=token, position_ids=position, use_cache=True, **{kw: cache}, **extra).logits

    return step


def _capture(step, device):
    """``step`` captured in a CUDA graph after three warm-up calls on a side stream. The graph holds ``step``
    (``graph.step``): the tensors it reads that were allocated before the capture (inputs, a static cache) are
    not in the graph's memory pool and must live as long as it replays them, past later allocations in the
    same process (the other variant's, with ``--one-process``)."""
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
    graph.step = step
    return graph


def _build(spec, opts: ABOptions):
    """The model of ``spec`` on ``opts.device`` (a CUDA device without an index: the current one), and
    that device."""
    import torch

    from . import e2e_models
    from .e2e import DTYPES

    device = torch.device(opts.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return e2e_models.build(spec, device, DTYPES[opts.dtype], seed=opts.seed), device


def _patch(model, spec) -> int:
    """``fuse_swiglu_mlps(model)``; the number of blocks patched. Raises RuntimeError unless it patched
    one block per layer."""
    from ..patch import fuse_swiglu_mlps

    patched = fuse_swiglu_mlps(model)
    if len(patched) != spec.num_layers:
        raise RuntimeError(f"fuse_swiglu_mlps patched {len(patched)} of {spec.num_layers} MLP blocks")
    return len(patched)


def _serve(conn, opts: ABOptions, measure_for) -> None:
    """Answer the parent until ``"stop"``: each request, ``"time"`` or ``("time", variant)``, with
    ``("ms", (median of opts.repeats calls of measure_for(request), Dynamo's graph count))``, or
    ``("error", text)`` and return."""
    while True:
        what = conn.recv()
        if what == "stop":
            return
        try:
            measure = measure_for(what)
            ms = statistics.median(measure() for _ in range(opts.repeats))
            conn.send(("ms", (ms, _graphs_compiled())))
        except BaseException:
            conn.send(("error", traceback.format_exc(limit=8)))
            return


def worker(conn, spec, mode: str, variant: str, opts: ABOptions) -> None:
    """One variant (:data:`VARIANTS`) in its own process: build; patch (``patched``) or compile with
    ``fused_backend()`` (``backend``); prepare; then answer each ``"time"`` with the median of
    ``opts.repeats`` timed calls (ms) until ``"stop"``. Sends ``("ready", info)`` or
    ``("error", text)`` first."""
    try:
        from ..compile_fusion import fused_backend

        start = time.perf_counter()
        model, device = _build(spec, opts)
        blocks = _patch(model, spec) if variant == "patched" else 0
        backend = fused_backend() if variant == "backend" else None
        measure = _prepare(model, mode, opts, device, backend)
        measure()
        info = {"prepare_s": round(time.perf_counter() - start, 1), "patched_blocks": blocks}
        if backend is not None:
            info["fused_mlps"] = fused_mlps(backend, spec.num_layers)
        conn.send(("ready", info))
    except BaseException:
        conn.send(("error", traceback.format_exc(limit=8)))
        return
    _serve(conn, opts, lambda what: measure)


def worker_both(conn, spec, mode: str, opts: ABOptions) -> None:
    """The stock and patched variants of one model in one process (``opts.one_process``): build once;
    prepare ``mode`` on the stock model; patch; prepare it again; then answer each ``("time", variant)``
    with the median of ``opts.repeats`` timed calls of that variant (ms) until ``"stop"``. On a CUDA
    device each variant is its own captured graph; elsewhere (tests) the model is patched or unpatched
    to the variant before its calls, outside the timing. Sends ``("ready", {variant: info})`` or
    ``("error", text)`` first."""
    try:
        from ..patch import unfuse_swiglu_mlps

        start = time.perf_counter()
        model, device = _build(spec, opts)
        measure = {"stock": _prepare(model, mode, opts, device)}
        measure["stock"]()
        info = {"stock": {"prepare_s": round(time.perf_counter() - start, 1), "patched_blocks": 0}}
        start = time.perf_counter()
        blocks = _patch(model, spec)
        measure["patched"] = _prepare(model, mode, opts, device)
        measure["patched"]()
        info["patched"] = {"prepare_s": round(time.perf_counter() - start, 1), "patched_blocks": blocks}
        conn.send(("ready", info))
    except BaseException:
        conn.send(("error", traceback.format_exc(limit=8)))
        return
    state = ["patched"]

    def measure_for(what):
        variant = what[1]
        uncaptured = device.type != "cuda" or mode in EAGER_MODES  # these calls run the model as it is now
        if uncaptured and variant != state[0]:
            unfuse_swiglu_mlps(model) if variant == "stock" else _patch(model, spec)
            state[0] = variant
            if hasattr(measure[variant], "step"):  # a patched block's first call checks its weights
                measure[variant].step()
        return measure[variant]

    _serve(conn, opts, measure_for)


def fused_mlps(backend, layers: int) -> int:
    """How many decoder MLPs ``backend`` (a :class:`fused_swiglu.compile_fusion.FusedSwiGLUBackend`)
    fused, counted by their gate weights (a layer compiled in several graphs counts once).

    Raises:
        RuntimeError: some candidate product was left unfused, or fewer or more than ``layers`` MLPs
            were fused (the message holds the backend's records).
    """
    gates = {r.gate for r in backend.fused}
    if backend.unfused or len(gates) != layers:
        unfused = "; ".join(f"{r.node}: {r.reason}" for r in backend.unfused) or "none"
        raise RuntimeError(f"fused_backend fused the MLPs of {len(gates)} of {layers} decoder layers ({backend!r}); "
                           f"unfused: {unfused}")
    return len(gates)


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
    """One model and mode: both workers (``opts.variants``, A and B) started at once, then
    ``opts.rounds`` alternating rounds. Returns the row (:func:`pair_row`). Raises RuntimeError with
    a worker's traceback if one fails."""
    ctx = mp.get_context("spawn")
    a, b = opts.variants
    procs, conns = {}, {}
    try:
        if opts.one_process:  # one worker answers for both variants
            parent, child = ctx.Pipe()
            procs["both"] = ctx.Process(target=worker_both, args=(child, spec, mode, opts), daemon=True)
            procs["both"].start()
            conns = {a: parent, b: parent}
            info = _receive(parent, f"{a} and {b}")
            ask = {a: ("time", a), b: ("time", b)}
        else:
            for variant in (a, b):
                parent, child = ctx.Pipe()
                procs[variant] = ctx.Process(target=worker, args=(child, spec, mode, variant, opts), daemon=True)
                procs[variant].start()
                conns[variant] = parent
            info = {variant: _receive(conns[variant], variant) for variant in (a, b)}
            ask = {a: "time", b: "time"}
        times: dict[str, list[float]] = {a: [], b: []}
        graphs: dict[str, list[int]] = {a: [], b: []}
        for r in range(opts.rounds):
            for variant in ((a, b) if r % 2 == 0 else (b, a)):
                conns[variant].send(ask[variant])
                ms, compiled = _receive(conns[variant], variant)
                times[variant].append(ms)
                graphs[variant].append(compiled)
    finally:
        for conn in {id(c): c for c in conns.values()}.values():  # one pipe per worker
            try:
                conn.send("stop")
            except (BrokenPipeError, OSError):
                pass
        for p in procs.values():
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return pair_row(spec.name, mode, opts, times, graphs, info)


def pair_row(model: str, mode: str, opts: ABOptions, times: dict, graphs: dict, info: dict) -> dict:
    """The row of one model and mode from each variant's per-round times (ms), Dynamo graph counts and
    worker info (dicts by variant name, A and B of ``opts.variants``); fields named by :data:`KEYS`.

    Raises:
        KeyError: a variant of ``opts.variants`` missing from ``times``, ``graphs`` or ``info``.
    """
    a, b = opts.variants
    ka, kb = KEYS[a], KEYS[b]
    ratios = [x / y for x, y in zip(times[a], times[b])]
    row = {"model": model, "mode": mode, "rounds": opts.rounds, "ratio_median": statistics.median(ratios),
           "ratio_min": min(ratios), "ratio_max": max(ratios), f"{ka}_ms": statistics.median(times[a]),
           f"{kb}_ms": statistics.median(times[b]), "ratios": ratios, f"{ka}_samples_ms": times[a],
           f"{kb}_samples_ms": times[b], "repeats_per_round": opts.repeats,
           "graphs_compiled_while_timed": {ka: graphs[a][-1] - graphs[a][0], kb: graphs[b][-1] - graphs[b][0]},
           "prepare_s": {ka: info[a]["prepare_s"], kb: info[b]["prepare_s"]}, "variant_a": a, "variant_b": b}
    for v in (a, b):
        if "fused_mlps" in info[v]:
            row[f"{KEYS[v]}_fused_mlps"] = info[v]["fused_mlps"]
    return row


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
    a, b = opts.variants
    meta = {**machine_meta(), "kind": "e2e_ab", "options": {**vars(opts), "models": [getattr(m, "name", m) for m in opts.models]},
            "unit": f"ratio = {a} ms / {b} ms, per round; > 1: the {b} model is faster",
            "protocol": (f"one process, {a} and {b} captured on the same weights (training: the model unpatched "
                         "and patched between turns)" if opts.one_process else f"two processes ({a}, {b})")
                        + ", rounds alternating ABBA, each round's time the median of repeats_per_round calls"}
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
                       "ratio_max": None, "error": str(e)[-2000:], "variant_a": a, "variant_b": b}
            row["elapsed_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            console.print(_line(row, a, b))
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


def _line(row: dict, a: str, b: str) -> str:
    """One row as a line: the ratio of variant ``a`` to ``b`` and their times, or the error."""
    if row.get("error"):
        return f"{row['model']} {row['mode']}: failed: {row['error'].strip().splitlines()[-1]}"
    return (f"{row['model']} {row['mode']}: {a}/{b} {row['ratio_median']:.3f} "
            f"[{row['ratio_min']:.3f}, {row['ratio_max']:.3f}] over {row['rounds']} rounds "
            f"({a} {row[KEYS[a] + '_ms']:.3f} ms, {b} {row[KEYS[b] + '_ms']:.3f} ms)")

