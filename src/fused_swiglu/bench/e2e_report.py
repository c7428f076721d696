"""Meta, tables, JSON and the PNG plot of ``fused-swiglu bench e2e``."""

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


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def e2e_table(rows: Sequence[dict]):
    from rich.table import Table

    table = Table(title="End to end: stock vs fused SwiGLU MLPs (same model; ms, median)")
    for col in ("model", "mode", "shape", "stock ms", "fused ms", "stock / fused", "note"):
        table.add_column(col, justify="left" if col in ("model", "mode", "shape", "note") else "right")
    for r in rows:
        if "tokens" in r:
            shape = f"{r['batch']} x {r['tokens']}"
        elif "new_tokens" in r:
            shape = f"b{r['batch']}, {r['new_tokens']} tokens"
        elif "batch" in r:
            shape = f"b{r['batch']}, 1 token"
        else:
            shape = ""
        note = r.get("error") or r.get("skipped") or ""
        table.add_row(r["model"], r["mode"], shape, _ms(r["stock_ms"]), _ms(r["fused_ms"]),
                      "-" if r.get("speedup") is None else f"{r['speedup']:.3f}", note[:120])
    return table


def accuracy_table(rows: Sequence[dict]):
    from rich.table import Table

    table = Table(title="End to end: accuracy (greedy agreement, batch 1; logits of one prompt vs a float32 copy)")
    cols = ("model", "tokens equal", "first mismatch", "stock rel err", "fused rel err", "stock top-1 = fp32",
            "fused top-1 = fp32", "note")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "note") else "right")
    for r in rows:
        if r.get("error"):
            table.add_row(r["model"], *["-"] * (len(cols) - 2), r["error"][:120])
            continue
        first = r["first_mismatch"]
        table.add_row(r["model"], f"{r['token_agreement']:.3f} of {r['new_tokens']}",
                      "-" if first is None else str(first),
                      f"{r['stock_logits_rel_err']:.3e}", f"{r['fused_logits_rel_err']:.3e}",
                      f"{r['stock_top1_vs_fp32']:.3f}", f"{r['fused_top1_vs_fp32']:.3f}", "")
    return table


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


def plot(results: dict, path: Path) -> Path | None:
    """Grouped bars of stock / fused per mode per model, a line at 1.0, GPU and versions in the
    title, written to ``path`` (PNG). Returns None, writing nothing, where matplotlib is missing or
    no row has both times.

    Raises:
        ValueError: the file could not be written.
    """
    try:
        plt = plots.pyplot()
    except ImportError:
        return None
    rows = [r for r in results["rows"] if r.get("speedup") is not None]
    if not rows:
        return None
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    width = 0.8 / len(modes)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(models) + 2), 4.5))
    for j, mode in enumerate(modes):
        by_model = {r["model"]: r["speedup"] for r in rows if r["mode"] == mode}
        xs = [i + (j - (len(modes) - 1) / 2) * width for i, m in enumerate(models) if m in by_model]
        ax.bar(xs, [by_model[m] for m in models if m in by_model], width, label=mode)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("stock time / fused time (> 1: fused faster)")
    m = results["meta"]
    ax.set_title(f"fused-swiglu {m.get('fused_swiglu_version')} end to end on {m.get('gpu') or m.get('device')}\n"
                 f"torch {m.get('torch_version')}, transformers {m.get('transformers_version')}, {m.get('dtype')}",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never on them
    try:
        return plots.save(fig, path, plt, dpi=120)
    except ValueError as e:
        raise ValueError(f"--out: {e}") from e


def print_and_write(results: dict, out: Path | None, console) -> None:
    """Print the tables and the run's time; with ``out``, write the JSON there and the plot beside
    it (same name, ``.png``)."""
    console.print(e2e_table(results["rows"]))
    if results["accuracy"]:
        console.print(accuracy_table(results["accuracy"]))
    m = results["meta"]
    console.print(f"elapsed {m.get('elapsed_s', 0):.1f} s" + ("" if m.get("complete", True) else " (stopped early)"))
    if out is None:
        return
    path = write_json(out, results)
    png = plot(results, path.with_suffix(".png"))
    if png is None:
        try:
            import matplotlib  # noqa: F401
            why = "no row has both times"
        except ImportError:
            why = "matplotlib is not installed (pip install matplotlib)"
        console.print(f"wrote {path}; no plot: {why}")
    else:
        console.print(f"wrote {path} and {png}")
