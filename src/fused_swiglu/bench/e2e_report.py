"""Meta, JSON and printed output of ``fused-swiglu bench e2e`` (its tables are
:func:`fused_swiglu.bench.report.e2e_table` and ``e2e_accuracy_table``, its plot
:func:`fused_swiglu.bench.plots.stock_vs_fused`, which ``fused-swiglu report`` draws too)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from . import plots, report


def meta(opts, settings, device: torch.device, specs, steps: Sequence[str]) -> dict:
    """Machine, versions, commit, date (:func:`fused_swiglu.bench.report.machine_meta`) and this
    run's options and settings. ``models`` is filled per model as the run goes."""
    import transformers

    m = report.machine_meta(device if device.type == "cuda" else None)
    s = asdict(settings)
    s["device"] = str(device)
    m.update({
        "transformers_version": transformers.__version__,
        "date": m["timestamp"],
        "quick": opts.quick,
        "device": str(device),
        "backend": opts.backend,
        "dtype": opts.dtype,
        "modes": list(steps),
        "settings": s,
        "notes": {
            "stock_vs_fused": "the same model object, stock and after fuse_swiglu_mlps (unfuse_swiglu_mlps to go back)",
            "eager_decode": "generate wall time / new tokens (prefill of the prompt included); median of repeats",
            "captured_decode_step": "CUDA-graph replay of one decode forward on a static cache; CUDA-event median",
            "compiled_decode": "generate on a static cache with compile_config mode reduce-overhead; compilation "
                               "and CUDA-graph recording in warm-up calls (compile_s), excluded from the times",
            "prefill": "one forward without a cache, logits_to_keep=1 (the vocabulary projection of the last "
                       "position only); CUDA-event median",
            "speedup": "stock_ms / fused_ms",
        },
        "models": {},
    })
    return m


def write_json(path: Path, results: dict) -> Path:
    """Write ``results`` as JSON (indented) to ``path``.

    Raises:
        ValueError: see :func:`fused_swiglu.bench.report.check_out_path`, or the write failed.
    """
    path = report.check_out_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
    except OSError as e:
        raise ValueError(f"--out: cannot write the results to {path} ({e})") from e
    return path


def print_and_write(results: dict, out: Path | None, console) -> None:
    """Print the tables and the run's time; with ``out``, write the JSON there and the plot beside
    it (same name, ``.png``)."""
    console.print(report.e2e_table(results["rows"]))
    if results["accuracy"]:
        console.print(report.e2e_accuracy_table(results["accuracy"]))
    m = results["meta"]
    console.print(f"elapsed {m.get('elapsed_s', 0):.1f} s" + ("" if m.get("complete", True) else " (stopped early)"))
    if out is None:
        return
    path = write_json(out, results)
    why = "no row has both times"
    try:
        png = plots.stock_vs_fused(results, path.with_suffix(".png"))
    except ImportError:
        png, why = None, "matplotlib is not installed (pip install matplotlib)"
    except ValueError as e:  # the PNG beside --out
        raise ValueError(f"--out: {e}") from e
    if png is None:
        console.print(f"wrote {path}; no plot: {why}")
    else:
        console.print(f"wrote {path} and {png}")
