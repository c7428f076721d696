"""``fused-swiglu report``: PNG plots of results files (matplotlib, Agg backend).

A file ``bench``, ``accuracy`` or ``sweep`` wrote is plotted by what it holds, beside it as
``<file stem>_<plot>.png``; a folder of the committed results (the file names below) as the names
below. Each plot is drawn from one results file and names, under its title, the GPU, the library and torch
versions, the kernel library hash and the commit recorded in that file's ``meta``:

* ``speedup_vs_eager.png`` (``bench_cuda_graph.json``): eager PyTorch time / fused time by M, one
  panel per model, both kernels;
* ``vs_cublas_and_quack.png`` (``bench_cuda_graph.json``): cuBLAS GEMM-only time / fused time, and
  quack's time / fused time where quack was timed, by M, one line per model (the packed kernel);
* ``accuracy.png`` (``accuracy.json``): the share of elements bit-exact with the float64 result
  rounded once, and the largest ulp distance, per method and model;
* ``shapes.png`` (``shapes.json``): cuBLAS time / the chosen config's time by M for every swept shape
  (the packed kernel), with a line at 0.90.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

FUSED = (("fused_packed", "packed"), ("fused_dual", "dual"))


def pyplot():
    """matplotlib's pyplot on the Agg backend. Raises ImportError where matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def caption(meta: dict) -> str:
    """GPU, versions, kernel library and commit of a results file's ``meta``, one line."""
    lib = meta.get("kernel_library") or {}
    commit = str(meta.get("git_commit") or "?")[:7]
    return (f"{meta.get('gpu', '?')}, fused-swiglu {meta.get('fused_swiglu_version', '?')}, torch "
            f"{meta.get('torch_version', '?')}, kernel library {lib.get('sha256_16', '?')}, commit {commit}")


def save(fig, path: Path, plt, dpi: int = 110) -> Path:
    """Lay out, write ``fig`` to ``path`` (PNG) and close it; returns ``path``.

    Raises:
        ValueError: the file could not be written (the message names the path).
    """
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    except OSError as e:
        raise ValueError(f"cannot write the plot to {path} ({e})") from e
    finally:
        plt.close(fig)
    return path


def _timed(results: dict) -> str:
    """How a bench file's rows were timed, and their dtypes, for a title."""
    how = "CUDA graphs" if results["meta"].get("cuda_graph", True) else "eager calls"
    dtypes = sorted({str(r.get("dtype", "bf16")) for r in results["rows"]})
    return f"{how}, {'/'.join(dtypes)}"


def _by(rows: list[dict], *keys: str) -> dict:
    out: dict = {}
    for r in rows:
        out[tuple(r[k] for k in keys)] = r
    return out


def _ratio_line(ax, rows: list[dict], cells: dict, model: str, num: str, den: str, **style) -> None:
    """Plot ``num`` time / ``den`` time of ``model`` by M on ``ax``, at each M holding both rows."""
    tokens = sorted({r["tokens"] for r in rows if r["model"] == model})
    pts = [(M, cells[(model, M, num)]["median_ms"] / cells[(model, M, den)]["median_ms"])
           for M in tokens if (model, M, num) in cells and (model, M, den) in cells]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, **style)


def _tokens_axis(ax, ylabel: str | None = None) -> None:
    ax.axhline(1.0, color="black", linewidth=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens M", fontsize=8)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)


def speedup_vs_eager(results: dict, path: Path) -> Path | None:
    """Eager / fused by M per model (module docstring); None where no row has both."""
    plt = pyplot()
    rows = results["rows"]
    cells = _by(rows, "model", "tokens", "method")
    models = list(dict.fromkeys(r["model"] for r in rows))
    if not any((m, r["tokens"], "eager") in cells and r["method"] == "fused_packed" for m in models for r in rows):
        return None
    cols = min(4, len(models))
    nrows = -(-len(models) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False, sharey=True)
    for ax, model in zip(axes.flat, models):
        for method, label in FUSED:
            _ratio_line(ax, rows, cells, model, "eager", method, label=label)
        _tokens_axis(ax)
        ax.set_title(model, fontsize=9)
    for ax in axes.flat[len(models):]:
        ax.axis("off")
    axes[0][0].set_ylabel("eager time / fused time", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Speed-up over eager PyTorch ({_timed(results)})\n{caption(results['meta'])}", fontsize=9)
    return save(fig, path, plt)


def vs_cublas_and_quack(results: dict, path: Path) -> Path | None:
    """cuBLAS / packed and quack / packed by M, a line per model; None without such rows."""
    plt = pyplot()
    rows = results["rows"]
    cells = _by(rows, "model", "tokens", "method")
    models = list(dict.fromkeys(r["model"] for r in rows))
    peers = [p for p in ("cublas_gemm", "quack") if any(r["method"] == p for r in rows)]
    if "cublas_gemm" not in peers:
        return None
    fig, axes = plt.subplots(1, len(peers), figsize=(5.2 * len(peers), 3.6), squeeze=False)
    names = {"cublas_gemm": "cuBLAS GEMM only (same FLOPs, no activation)", "quack": "quack gemm_gated (SwiGLU)"}
    for ax, peer in zip(axes[0], peers):
        for model in models:
            _ratio_line(ax, rows, cells, model, peer, "fused_packed", label=model)
        _tokens_axis(ax, f"{peer} time / packed kernel time")
        ax.set_title(names[peer], fontsize=9)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"The packed kernel against its peers (> 1: faster; {_timed(results)})\n"
                 f"{caption(results['meta'])}",
                 fontsize=9)
    return save(fig, path, plt)


def accuracy(results: dict, path: Path) -> Path | None:
    """Bit-exact share and max ulp per method and model; None without rows."""
    plt = pyplot()
    rows = results["rows"]
    if not rows:
        return None
    models = list(dict.fromkeys(r["model"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cells = _by(rows, "model", "method")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    width = 0.8 / len(methods)
    for j, method in enumerate(methods):
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(models))]
        axes[0].bar(xs, [100 * cells[(m, method)]["exact"] if (m, method) in cells else 0 for m in models], width,
                    label=method)
        axes[1].bar(xs, [cells[(m, method)]["max_ulp"] if (m, method) in cells else 0 for m in models], width,
                    label=method)
    for ax, label in zip(axes, ("% of elements bit-exact (float64, rounded once)", "largest distance, ulp")):
        ax.set_xticks(range(len(models)), [m.removeprefix("Qwen2.5-") for m in models], fontsize=7)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    dtype = results["meta"].get("dtype", "bf16")
    fig.suptitle(f"Accuracy against float64 ({dtype}, M = 2048)\n{caption(results['meta'])}", fontsize=9)
    return save(fig, path, plt)


def shapes(results: dict, path: Path) -> Path | None:
    """cuBLAS / the packed kernel's chosen config by M for each swept shape; None without rows."""
    plt = pyplot()
    rows = results["rows"]
    cells = _by(rows, "model", "tokens", "method")
    models = list(dict.fromkeys(r["model"] for r in rows))
    if not models:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for model in models:
        _ratio_line(ax, rows, cells, model, "cublas_gemm", "fused_packed", linewidth=0.9, label=model)
    _tokens_axis(ax, "cuBLAS GEMM-only time / packed kernel time")
    ax.axhline(0.9, color="gray", linewidth=0.7, linestyle="--")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"The config choice on public model shapes (bf16; dashed: 0.90)\n{caption(results['meta'])}",
                 fontsize=9)
    return save(fig, path, plt)


PLOTS: dict[str, tuple[str, Callable[[dict, Path], Path | None]]] = {
    "speedup_vs_eager.png": ("bench_cuda_graph.json", speedup_vs_eager),
    "vs_cublas_and_quack.png": ("bench_cuda_graph.json", vs_cublas_and_quack),
    "accuracy.png": ("accuracy.json", accuracy),
    "shapes.png": ("shapes.json", shapes),
}


# what a results file holds -> its plots (the PNG names a results folder's files get)
KINDS: dict[str, tuple[str, ...]] = {
    "bench": ("speedup_vs_eager.png", "vs_cublas_and_quack.png"),
    "accuracy": ("accuracy.png",),
    "sweep": ("shapes.png",),
}


def kind_of(results: dict) -> str:
    """``"accuracy"`` (rows with ``exact``), ``"sweep"`` (``fused-swiglu sweep``: rows of the
    ``best_compiled_*`` methods) or ``"bench"`` (everything else: timings by model, M and method)."""
    rows = results["rows"]
    if rows and all("exact" in r for r in rows):
        return "accuracy"
    if any(str(r.get("method", "")).startswith("best_compiled_") for r in rows):
        return "sweep"
    return "bench"


def report(paths: list[Path], out_dir: Path | None = None) -> list[Path]:
    """The plots of results files: each path a results JSON file (``bench --out``, ``accuracy --out``,
    ``sweep --out``; its plots by what it holds, :func:`kind_of`, named ``<file stem>_<plot>.png``) or a
    folder (its :data:`PLOTS` files, plots named as there). Written beside each input, or into
    ``out_dir``; returns the paths written.

    Raises:
        ValueError: a path that does not exist, a folder with none of the results files, a file that is
            not JSON or lacks the rows its plot reads (the message names the file), no plot could be
            drawn, or a plot cannot be written. ImportError: matplotlib is missing (pip install matplotlib).
    """
    jobs: list[tuple[Path, Path, Callable[[dict, Path], Path | None]]] = []  # (source, png, draw)
    read: dict[Path, dict] = {}  # each results file parsed once

    def results(source: Path) -> dict:
        if source not in read:
            read[source] = _results(source)
        return read[source]

    for path in paths:
        if path.is_dir():
            sources = sorted({s for s, _ in PLOTS.values()})
            if not any((path / source).is_file() for source in sources):
                raise ValueError(f"{path} holds none of {', '.join(sources)}")
            jobs += [(path / source, (out_dir or path) / png, draw) for png, (source, draw) in PLOTS.items()
                     if (path / source).is_file()]
        elif path.is_file():
            jobs += [(path, (out_dir or path.parent) / f"{path.stem}_{png}", PLOTS[png][1])
                     for png in KINDS[kind_of(results(path))]]
        else:
            raise ValueError(f"{path} is neither a results file nor a folder of them")
    pyplot()  # ImportError here, before anything is drawn
    written = []
    for source, png, draw in jobs:
        png.parent.mkdir(parents=True, exist_ok=True)
        try:
            done = draw(results(source), png)
        except (KeyError, TypeError) as e:  # a row without a field this plot reads, or of another type
            raise ValueError(f"{source}: a row lacks a field {png.name} needs, or holds one of the wrong type "
                             f"({type(e).__name__}: {e})") from None
        if done is not None:
            written.append(done)
    if not written:
        raise ValueError(f"no plot drawn: {', '.join(map(str, paths))} hold no rows of the methods the plots "
                         "compare (e.g. eager and fused_packed)")
    return written


def _results(path: Path) -> dict:
    """A results file's ``{"meta": {...}, "rows": [{...}, ...]}``, each row with the keys every plot
    reads (``model``, ``method``).

    Raises:
        ValueError: not JSON, or not of that form; the message names the file.
    """
    try:
        results = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON results file ({e})") from None
    rows = results.get("rows") if isinstance(results, dict) else None
    if not isinstance(rows, list) or not isinstance(results.get("meta", {}), dict) or not all(
            isinstance(r, dict) and {"model", "method"} <= r.keys() for r in rows):
        raise ValueError(f"{path}: not a results file of fused-swiglu (expected an object with a 'rows' list "
                         "of rows that have 'model' and 'method')")
    results.setdefault("meta", {})
    return results
