"""``fused-swiglu bench e2e``: whole Hugging Face models, stock against patched MLPs.

For each model of :mod:`fused_swiglu.bench.e2e_models` (built with random weights on the device,
one at a time, freed before the next), every mode of :mod:`fused_swiglu.bench.e2e_modes` times the
same model object stock and patched (:func:`fused_swiglu.fuse_swiglu_mlps`), and an accuracy step
compares both with a float32 copy (:mod:`fused_swiglu.bench.e2e_accuracy`). A mode that fails on a model gets a row with its error and null
times, and the run goes on; a mode that cannot run on the device (CUDA-only modes on a CPU) gets a
row saying why (``skipped``).

Result: ``{"meta": {...}, "rows": [{"model", "mode", "stock_ms", "fused_ms", "speedup", ...}],
"accuracy": [{"model", ...}]}``; ``speedup`` is stock_ms / fused_ms (> 1: the patched model is
faster). :mod:`fused_swiglu.bench.e2e_report` prints and writes it.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

from .. import configs
from . import e2e_accuracy, e2e_models, e2e_modes, e2e_report
from .defaults import E2E_ACCURACY as ACCURACY, E2E_STEPS as STEPS  # the modes, and the accuracy step
from .e2e_modes import Settings, Skipped

DTYPES = configs.DTYPE_OF_SUFFIX
# Repeats and lengths: the full run, and what --quick changes (Qwen2.5-0.5B only, fewer repeats)
FULL = dict(new_tokens=32, prompt_len=16, gen_repeats=11, compiled_repeats=3, compiled_warmups=2, graph_replays=100,
            prefill_batch=4, prefill_len=2048, prefill_repeats=5, train_batch=4, train_len=2048, train_repeats=15,
            accuracy_prompt_len=128)
QUICK = dict(FULL, gen_repeats=3, compiled_repeats=2, graph_replays=30, prefill_repeats=3, train_repeats=3)


@dataclass
class E2EOptions:
    """What to run. ``models``: names of :data:`fused_swiglu.bench.e2e_models.MODELS` or ModelSpecs
    (None: all four, or Qwen2.5-0.5B with ``quick``). ``modes``: a subset of :data:`STEPS` (None:
    all). ``settings``: overrides of :data:`FULL` / :data:`QUICK` (keys of
    :class:`fused_swiglu.bench.e2e_modes.Settings`). ``device`` and ``backend`` (passed to
    ``fuse_swiglu_mlps``) let the run go on a CPU with ``backend="torch"``."""

    models: list | None = None
    modes: list[str] | None = None
    quick: bool = False
    out: Path | None = None
    device: str = "cuda"
    backend: str = "auto"
    dtype: str = "bf16"
    seed: int = 0
    settings: dict = field(default_factory=dict)


def check_modes(modes: list[str] | None) -> list[str]:
    """The steps to run, in :data:`STEPS` order.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if modes is None:
        return list(STEPS)
    for m in modes:
        if m not in STEPS:
            raise ValueError(f"unknown mode {m!r}; known: {', '.join(STEPS)}")
    return [m for m in STEPS if m in modes]


def resolve_settings(opts: E2EOptions, device: torch.device) -> Settings:
    """:class:`Settings` from :data:`FULL` or :data:`QUICK` and ``opts.settings``.

    Raises:
        ValueError: an unknown settings key, or a count or length below 1.
    """
    known = {f.name for f in fields(Settings)} - {"device", "backend", "seed"}
    unknown = sorted(set(opts.settings) - known)
    if unknown:
        raise ValueError(f"settings: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values = {**(QUICK if opts.quick else FULL), **opts.settings}
    for key, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"settings: {key} must be an integer >= 1; got {value!r}")
    return Settings(device=device, backend=opts.backend, seed=opts.seed, **values)


def _error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return text if len(text) <= 2000 else text[:2000] + " ..."


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        try:
            torch.cuda.synchronize(device)
        except Exception:  # a CUDA error from a failed mode; the next model reports it
            pass
        torch.cuda.empty_cache()


def _run_step(model, spec, step: str, s: Settings) -> dict:
    """One mode or the accuracy step on one model: its row (errors and skips caught and recorded)."""
    base = {"model": spec.name, "mode": step} if step != ACCURACY else {"model": spec.name}
    try:
        if step == ACCURACY:
            return {**base, **e2e_accuracy.accuracy(model, s)}
        result = e2e_modes.RUNNERS[step](model, s)
    except Skipped as e:
        return {**base, "stock_ms": None, "fused_ms": None, "speedup": None, "skipped": str(e)}
    except Exception as e:  # this mode failed on this model: record it and go on
        try:
            e2e_modes.set_fused(model, False, s.backend)
            if step == "compiled_decode":
                e2e_modes.reset_compiled(model)
        except Exception:
            pass
        null = {} if step == ACCURACY else {"stock_ms": None, "fused_ms": None, "speedup": None}
        return {**base, **null, "error": _error(e)}
    finally:
        _free(s.device)
    stock, fused = result["stock_ms"], result["fused_ms"]
    return {**base, "stock_ms": stock, "fused_ms": fused, "speedup": stock / fused if fused else None,
            **{k: v for k, v in result.items() if k not in ("stock_ms", "fused_ms")}}


def failures(results: dict) -> list[str]:
    """``"model mode: error"`` for every row and accuracy row that holds an error."""
    out = [f"{r['model']} {r['mode']}: {r['error']}" for r in results["rows"] if r.get("error")]
    return out + [f"{r['model']} accuracy: {r['error']}" for r in results["accuracy"] if r.get("error")]


def run_e2e(opts: E2EOptions, console) -> dict:
    """Run the end-to-end benchmark; prints a progress bar, the elapsed time per model and the
    tables to ``console``; with ``opts.out``, writes the JSON there and a PNG plot beside it.
    Returns ``{"meta", "rows", "accuracy"}``; a stopped run (Ctrl-C) still prints and writes the
    rows so far, with ``meta["complete"] = False``, and the exception is raised again.

    Raises:
        ValueError: an unknown model, mode, dtype or settings key.
        ImportError: transformers is not installed.
    """
    import transformers  # noqa: F401  (refuse early, before any model is named in the progress bar)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if opts.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {opts.dtype!r}")
    specs = e2e_models.find(opts.models if opts.models is not None
                            else (list(e2e_models.QUICK_MODELS) if opts.quick else None))
    steps = check_modes(opts.modes)
    device = torch.device(opts.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    s = resolve_settings(opts, device)
    results = {"meta": e2e_report.meta(opts, s, device, specs, steps), "rows": [], "accuracy": []}
    start, stopped = time.perf_counter(), None
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task("e2e", total=len(specs) * len(steps))
            for spec in specs:
                results["meta"]["models"][spec.name] = _run_model(spec, steps, s, opts, results, progress, task, console)
    except BaseException as e:  # keep what was measured, then stop as asked
        stopped = e
        raise
    finally:
        results["meta"]["elapsed_s"] = round(time.perf_counter() - start, 1)
        results["meta"]["complete"] = stopped is None
        if stopped is not None:
            results["meta"]["stopped_by"] = "interrupted" if isinstance(stopped, KeyboardInterrupt) else _error(stopped)
        e2e_report.print_and_write(results, opts.out, console)
    return results


def _run_model(spec, steps, s: Settings, opts: E2EOptions, results: dict, progress, task, console) -> dict:
    """Build ``spec``'s model, run ``steps`` on it into ``results``, free it; returns its meta entry."""
    progress.update(task, description=f"{spec.name}: building")
    start, entry, model = time.perf_counter(), {"spec": asdict(spec)}, None
    try:
        model = e2e_models.build(spec, s.device, DTYPES[opts.dtype], seed=s.seed)
        entry["parameters"] = e2e_models.n_params(model)
    except Exception as e:  # e.g. out of memory: every step of this model fails with this reason
        why = f"building the model failed: {_error(e)}"
        for step in steps:
            if step == ACCURACY:
                results["accuracy"].append({"model": spec.name, "error": why})
            else:
                results["rows"].append({"model": spec.name, "mode": step, "stock_ms": None, "fused_ms": None,
                                        "speedup": None, "error": why})
        progress.advance(task, len(steps))
    entry["build_s"] = round(time.perf_counter() - start, 1)
    if model is not None:
        try:
            for step in steps:
                progress.update(task, description=f"{spec.name}: {step}")
                t0 = time.perf_counter()
                row = _run_step(model, spec, step, replace(s))
                row["elapsed_s"] = round(time.perf_counter() - t0, 1)
                results["accuracy" if step == ACCURACY else "rows"].append(row)
                progress.advance(task)
        finally:
            e2e_modes.reset_compiled(model)
            del model
            _free(s.device)
    entry["elapsed_s"] = round(time.perf_counter() - start, 1)
    console.print(f"{spec.name}: {entry['elapsed_s']:.1f} s (model built in {entry['build_s']:.1f} s)")
    return entry
