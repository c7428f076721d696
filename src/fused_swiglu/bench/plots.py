"""``fused-swiglu report``: PNG plots (matplotlib, Agg backend) and tables (rich) of results files.

A results file is drawn by what it holds (:func:`kind_of`), whichever command wrote it: its plots
beside it as ``<file stem>_<plot>.png``, and as tables what no plot shows; a folder of the committed
results (the file names below) gets the plots named below. Each plot is drawn from one results file
and names, under its title, the GPU, the library and torch versions, the kernel library hash and the
commit recorded in that file's ``meta``:

* ``speedup_vs_eager.png`` (``bench_cuda_graph.json``): eager PyTorch time / fused time by M, one
  panel per model, both kernels (from a ``bench backward`` file: of the training step);
* ``vs_cublas_and_quack.png`` (``bench_cuda_graph.json``): cuBLAS GEMM-only time / fused time, and
  quack's time / fused time where quack was timed, by M, one line per model (the packed kernel);
* ``accuracy.png`` (``accuracy.json``): the share of elements bit-exact with the float64 result
  rounded once, and the largest ulp distance, per method and model;
* ``shapes.png`` (``shapes.json``): cuBLAS time / the chosen config's time by M for every swept shape
  (the packed kernel), with a line at 0.90;
* ``<file stem>_over_floor.png`` (a ``bench moe`` file): each method's time / the floor by T, one
  panel per experts shape; the rows are printed beside it as a table;
* ``e2e.png``, ``e2e_quick.png`` (``e2e.json``, ``e2e_quick.json``): stock time / fused time per mode
  and model, the plot ``bench e2e`` draws beside its JSON (``<file stem>_stock_vs_fused.png`` from a
  file); the accuracy rows beside them are printed as a table.

Printed as tables instead: the files of ``bench fp8`` (each method against the bf16 kernel, by shape
and M), ``bench tp`` and ``bench host-time``; any other file of the form ``{"meta": {...}, "rows":
[{...}, ...]}`` (every row, every field that holds one value); and a file of a kind above none of
whose plots can be drawn from its rows (e.g. a bench run without eager and cuBLAS).
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
    """GPU, versions, kernel library and commit of a results file's ``meta``, one line; what it lacks is
    left out ("no run details" where it has none of them: a CSV)."""
    lib = meta.get("kernel_library") or {}
    parts = [str(meta["gpu"]) if meta.get("gpu") else None,
             f"fused-swiglu {meta['fused_swiglu_version']}" if meta.get("fused_swiglu_version") else None,
             f"torch {meta['torch_version']}" if meta.get("torch_version") else None,
             f"kernel library {lib['sha256_16']}" if lib.get("sha256_16") else None,
             _commits(meta.get("git_commit"))]
    return ", ".join(p for p in parts if p) or "no run details (the JSON beside a CSV has them)"


def _commits(value: object) -> str | None:
    """``commit abc1234`` for a results file's ``git_commit``: one commit, or a list of them (a file merged
    from runs), each once and shortened; None for none."""
    found = value if isinstance(value, list) else [value]
    short = list(dict.fromkeys(str(c)[:7] for c in found if c))
    return f"commit{'s' if len(short) > 1 else ''} {', '.join(short)}" if short else None


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
    dtypes = sorted({str(r.get("dtype", results["meta"].get("dtype", "bf16"))) for r in results["rows"]})
    return f"{how}, {'/'.join(dtypes)}"


def _by(rows: list[dict], *keys: str) -> dict:
    out: dict = {}
    for r in rows:
        out[tuple(r[k] for k in keys)] = r
    return out


def _distinct(rows: list[dict], *keys: str) -> tuple[list, ...]:
    """For each of ``keys``, its values in ``rows``, each once, in the order the rows first hold them."""
    return tuple(list(dict.fromkeys(r[key] for r in rows)) for key in keys)


def _pairs(rows: list[dict], cells: dict, model: str, num: str, den: str) -> list[tuple[int, float]]:
    """(M, ``num`` time / ``den`` time) of ``model``, at each M holding both rows."""
    tokens = sorted({r["tokens"] for r in rows if r["model"] == model})
    return [(M, cells[(model, M, num)]["median_ms"] / cells[(model, M, den)]["median_ms"])
            for M in tokens if (model, M, num) in cells and (model, M, den) in cells]


def _compares(rows: list[dict], cells: dict, num: str, dens: tuple[str, ...]) -> bool:
    """Whether some model has a time of ``num`` and of one of ``dens`` at the same M, so that a plot of
    their ratio has a line to draw (an empty figure is never written)."""
    models = dict.fromkeys(r["model"] for r in rows)
    return any(_pairs(rows, cells, model, num, den) for model in models for den in dens)


def _ratio_line(ax, rows: list[dict], cells: dict, model: str, num: str, den: str, **style) -> None:
    """Plot ``num`` time / ``den`` time of ``model`` by M on ``ax``, at each M holding both rows."""
    pts = _pairs(rows, cells, model, num, den)
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, **style)


def _line_style(plt, i: int) -> dict:
    """The ``i``-th line's colour and dash: 10 colours solid, then dashed, then dotted, so that no two of up to
    30 lines in one panel look alike."""
    return {"color": plt.get_cmap("tab10")(i % 10), "linestyle": ("-", "--", ":")[i // 10 % 3]}


def _tokens_axis(ax, ylabel: str | None = None) -> None:
    ax.axhline(1.0, color="black", linewidth=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens M", fontsize=8)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)


def _panels(plt, count: int, sharey: bool = False):
    """A figure of ``count`` panels, up to 4 a row, the cells past the last one blank: (fig, axes)."""
    cols = min(4, count)
    nrows = -(-count // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False, sharey=sharey)
    for ax in axes.flat[count:]:
        ax.axis("off")
    return fig, axes


def _ratio_plot(results: dict, path: Path, draw: Callable, base: str = "cublas_gemm",
                methods: tuple[str, ...] = ("fused_packed",)) -> Path | None:
    """Where the results compare ``base`` with one of ``methods`` (:func:`_compares`): the figure that
    ``draw(plt, rows, cells, models)`` returns (cells by model, tokens and method; the models in order),
    written to ``path``; None otherwise, with nothing drawn."""
    rows = results["rows"]
    cells = _by(rows, "model", "tokens", "method")
    if not _compares(rows, cells, base, methods):
        return None
    plt = pyplot()
    return save(draw(plt, rows, cells, _distinct(rows, "model")[0]), path, plt)


def speedup_vs_eager(results: dict, path: Path) -> Path | None:
    """Eager / fused by M per model (module docstring); None where no row has both."""

    def draw(plt, rows, cells, models):
        fig, axes = _panels(plt, len(models), sharey=True)
        for ax, model in zip(axes.flat, models):
            for method, label in FUSED:
                _ratio_line(ax, rows, cells, model, "eager", method, label=label)
            _tokens_axis(ax)
            ax.set_title(model, fontsize=9)
        axes[0][0].set_ylabel("eager time / fused time", fontsize=8)
        axes[0][0].legend(fontsize=7)
        step = "Training step of the MLP block (forward + backward): s" if all("eager_over" in r for r in rows) else "S"
        fig.suptitle(f"{step}peed-up over eager PyTorch ({_timed(results)})\n{caption(results['meta'])}", fontsize=9)
        return fig

    return _ratio_plot(results, path, draw, "eager", tuple(method for method, _ in FUSED))


def vs_cublas_and_quack(results: dict, path: Path) -> Path | None:
    """cuBLAS / packed and quack / packed by M, a line per model; None without such rows."""

    def draw(plt, rows, cells, models):
        peers = [p for p in ("cublas_gemm", "quack") if _compares(rows, cells, p, ("fused_packed",))]
        fig, axes = plt.subplots(1, len(peers), figsize=(5.2 * len(peers), 3.6), squeeze=False)
        names = {"cublas_gemm": "cuBLAS GEMM only (same FLOPs, no activation)", "quack": "quack gemm_gated (SwiGLU)"}
        for ax, peer in zip(axes[0], peers):
            for i, model in enumerate(models):
                _ratio_line(ax, rows, cells, model, peer, "fused_packed", label=model, **_line_style(plt, i))
            _tokens_axis(ax, f"{peer} time / packed kernel time")
            ax.set_title(names[peer], fontsize=9)
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.suptitle(f"The packed kernel against its peers (> 1: faster; {_timed(results)})\n"
                     f"{caption(results['meta'])}",
                     fontsize=9)
        return fig

    return _ratio_plot(results, path, draw)


def accuracy(results: dict, path: Path) -> Path | None:
    """Bit-exact share and max ulp per method and model; None without rows."""
    rows = results["rows"]
    if not rows:
        return None
    plt = pyplot()
    models, methods = _distinct(rows, "model", "method")
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
    """cuBLAS / the packed kernel's chosen config by M for each swept shape; None without such rows."""

    def draw(plt, rows, cells, models):
        fig, ax = plt.subplots(figsize=(8, 4.2))
        for model in models:
            _ratio_line(ax, rows, cells, model, "cublas_gemm", "fused_packed", linewidth=0.9, label=model)
        _tokens_axis(ax, "cuBLAS GEMM-only time / packed kernel time")
        ax.axhline(0.9, color="gray", linewidth=0.7, linestyle="--")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.suptitle(f"The config choice on public model shapes (bf16; dashed: 0.90)\n{caption(results['meta'])}",
                     fontsize=9)
        return fig

    return _ratio_plot(results, path, draw)


def stock_vs_fused(results: dict, path: Path) -> Path | None:
    """Grouped bars of stock / fused time per mode per model of a ``bench e2e`` file (the plot that run
    draws beside its JSON), a line at 1.0, GPU and versions in the title; None where no row has both
    times."""
    rows = [r for r in results["rows"] if r.get("speedup") is not None]
    if not rows:
        return None
    plt = pyplot()
    models, modes = _distinct(rows, "model", "mode")
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
    return save(fig, path, plt, dpi=120)


def over_floor(results: dict, path: Path) -> Path | None:
    """``bench moe``: each method's time / the hardware floor by tokens T, one panel per experts shape
    (log scales); None without rows."""
    rows = results["rows"]
    if not rows:
        return None
    plt = pyplot()
    models, methods = _distinct(rows, "model", "method")
    fig, axes = _panels(plt, len(models))
    for ax, model in zip(axes.flat, models):
        for i, method in enumerate(methods):
            points = sorted((r["tokens"], r["over_floor"]) for r in rows if r["model"] == model and r["method"] == method)
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, label=method, **_line_style(plt, i))
        _tokens_axis(ax)
        ax.set_xlabel("tokens T", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(model, fontsize=9)
    axes[0][0].set_ylabel("time / floor", fontsize=8)
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels())}
    axes[0][-1].legend(handles.values(), handles.keys(), fontsize=6, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))  # beside the panels, never on a curve
    fig.suptitle(f"Experts layer: time / the floor of its weight bytes or FLOPs ({_timed(results)})\n"
                 f"{caption(results['meta'])}", fontsize=9)
    return save(fig, path, plt)


def _png_name(source: Path, plot: str) -> str:
    """The PNG of ``plot`` drawn from results file ``source``: ``<stem>_<plot>.png``, or ``<plot>.png`` where the
    stem is the plot's name (accuracy.json's accuracy plot: accuracy.png)."""
    return f"{plot}.png" if source.stem == plot else f"{source.stem}_{plot}.png"


# a plot's name -> its drawing function (which returns None, writing nothing, where the rows hold nothing to draw)
PLOTS: dict[str, Callable[[dict, Path], Path | None]] = {
    "speedup_vs_eager": speedup_vs_eager,
    "vs_cublas_and_quack": vs_cublas_and_quack,
    "accuracy": accuracy,
    "shapes": shapes,
    "stock_vs_fused": stock_vs_fused,
    "over_floor": over_floor,
}

# a results folder's PNGs: name -> (the results file drawn, the plot)
FOLDER: dict[str, tuple[str, str]] = {
    "speedup_vs_eager.png": ("bench_cuda_graph.json", "speedup_vs_eager"),
    "vs_cublas_and_quack.png": ("bench_cuda_graph.json", "vs_cublas_and_quack"),
    "accuracy.png": ("accuracy.json", "accuracy"),
    "shapes.png": ("shapes.json", "shapes"),
    "e2e.png": ("e2e.json", "stock_vs_fused"),
    "e2e_quick.png": ("e2e_quick.json", "stock_vs_fused"),
}

# what a results file holds (kind_of) -> its plots; a kind without one is printed as a table
KINDS: dict[str, tuple[str, ...]] = {
    "bench": ("speedup_vs_eager", "vs_cublas_and_quack"),
    "backward": ("speedup_vs_eager",),
    "accuracy": ("accuracy",),
    "sweep": ("shapes",),
    "e2e": ("stock_vs_fused",),
    "fp8": (),
    "moe": ("over_floor",),
    "tp": (),
    "host-time": (),
    "rows": (),
}


def kind_of(results: dict) -> str:
    """Which command's rows a results file holds, by their fields: ``"accuracy"`` (``exact``; accuracy
    in any dtype), ``"e2e"`` (``mode``, ``stock_ms``, ``fused_ms``, ``speedup``), ``"host-time"``
    (``us_per_call``),
    ``"tp"`` (``world_size``, ``one_gpu_ms``, ``tp_ms``), ``"moe"`` (``bench moe``: ``experts``,
    ``over_floor``), and of timings by model, M and method:
    ``"sweep"`` (``fused-swiglu sweep``: the ``best_compiled_*`` methods), ``"fp8"`` (``bf16_over``),
    ``"backward"`` (``eager_over``) or ``"bench"``; ``"rows"`` for anything else, and for no rows."""
    rows = results["rows"]

    def every(*keys: str) -> bool:
        return bool(rows) and all(set(keys) <= r.keys() for r in rows)

    if every("exact"):
        return "accuracy"
    if every("model", "mode", "stock_ms", "fused_ms", "speedup"):
        return "e2e"
    if every("method", "us_per_call"):
        return "host-time"
    if every("model", "tokens", "world_size", "one_gpu_ms", "tp_ms"):
        return "tp"
    if not every("model", "tokens", "method", "median_ms"):
        return "rows"
    if every("experts", "over_floor"):
        return "moe"
    if any(str(r["method"]).startswith("best_compiled_") for r in rows):
        return "sweep"
    if every("bf16_over"):
        return "fp8"
    return "backward" if every("eager_over") else "bench"


def tables(results: dict, plotted: bool) -> list:
    """The rich tables of a results file: what its plots do not show (``plotted``: whether one was drawn).
    A kind without a plot, or whose plots had nothing to draw, is printed whole; of ``bench e2e``, the
    accuracy rows beside the timings are printed in any case.

    Raises:
        KeyError, TypeError: a row lacks a field the table reads, or holds one of another type.
    """
    from . import report

    kind, rows = kind_of(results), results["rows"]
    if kind == "e2e":
        timings = [] if plotted else [report.e2e_table(rows)]
        return timings + ([report.e2e_accuracy_table(results["accuracy"])] if results.get("accuracy") else [])
    if kind == "moe" and rows:
        return report.moe_tables(rows)
    if plotted or not rows:
        return []
    if kind == "fp8":
        return [report.fp8_table(rows)]
    if kind == "tp":
        return [report.tp_table(rows)]
    if kind == "host-time":
        return [_host_time_table(results)]
    return [report.rows_table(rows)]


def _host_time_table(results: dict):
    """``bench host-time``'s table (:func:`fused_swiglu.bench.host_time.table`) of the shape its meta
    names, with the ratios it printed under it."""
    from . import host_time

    meta = results["meta"]
    shape = tuple(meta.get(k) for k in ("tokens", "hidden_size", "intermediate_size"))
    table = host_time.table(results["rows"], *([shape] if all(isinstance(v, int) for v in shape) else []))
    ratios = results.get("ratios")
    if isinstance(ratios, dict) and ratios:
        line = "ratios: " + ", ".join(f"{name} {'-' if value is None else f'{value:.2f}'}"
                                      for name, value in ratios.items())
        table.caption = f"{table.caption}\n{line}" if table.caption else line
    return table


def report(paths: list[Path], out_dir: Path | None = None) -> list:
    """What ``fused-swiglu report`` shows of results files, in the order given: each path a results
    file (its plots by what it holds, :func:`kind_of`, named ``<file stem>_<plot>.png``) or a folder
    (the plots of its :data:`FOLDER` files, named as there; a folder with none of them: each JSON results
    file in it, as if named); with each file read, the tables of what no
    plot shows (:func:`tables`). The PNGs are written beside each input, or into ``out_dir``.

    Returns:
        The PNGs written (Paths) and the tables to print (rich Tables, titled with their file's name).

    Raises:
        ValueError: a path that is not found, a folder with no results file, a file
            that is not JSON or not of the form ``{"rows": [{...}, ...]}``, or that lacks a field its
            plot or table reads (the message names the file), rows in none of the files, or a plot
            cannot be written. ImportError: matplotlib is missing where a plot is to be drawn (pip
            install matplotlib).
    """
    jobs: list[tuple[Path, list[tuple[Path, str]]]] = []  # (results file, [(png, plot)])
    read: dict[Path, dict] = {}  # each results file parsed once

    def results(source: Path) -> dict:
        if source not in read:
            read[source] = _results(source)
        return read[source]

    for path in paths:
        if path.is_dir():
            found: dict[Path, list[tuple[Path, str]]] = {}
            for png, (source, plot) in FOLDER.items():
                if (path / source).is_file():
                    found.setdefault(path / source, []).append(((out_dir or path) / png, plot))
            if not found:  # any other folder of results: each JSON results file in it, as if named
                for source in sorted(path.glob("*.json")):
                    try:
                        kind = kind_of(results(source))
                    except ValueError:  # not a results file
                        read.pop(source, None)
                        continue
                    found[source] = [((out_dir or path) / _png_name(source, plot), plot) for plot in KINDS[kind]]
            if not found:
                raise ValueError(f"{path} holds none of {', '.join(sorted({s for s, _ in FOLDER.values()}))} and no "
                                 "other results file")
            jobs += found.items()
        elif path.is_file():
            jobs.append((path, [((out_dir or path.parent) / _png_name(path, plot), plot)
                                for plot in KINDS[kind_of(results(path))]]))
        elif path.exists():
            raise ValueError(f"{path}: neither a results file nor a folder of them")
        else:
            raise ValueError(f"{path}: not found")
    writers: dict[Path, Path] = {}
    for source, pngs in jobs:
        for png, _ in pngs:
            if writers.setdefault(png, source) != source:
                raise ValueError(f"{writers[png]} and {source} would both write {png}; report them one at a time "
                                 "or into separate --out-dir folders")
    if any(pngs for _, pngs in jobs):
        pyplot()  # ImportError here, before anything is drawn
    shown: list = []
    for source, pngs in jobs:
        drawn = [p for p in (_draw(source, png, plot, results(source)) for png, plot in pngs) if p is not None]
        try:
            found_tables = tables(results(source), plotted=bool(drawn))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{source}: a row lacks a field its table needs, or holds one of the wrong type "
                             f"({type(e).__name__}: {e})") from None
        shown += drawn + [_titled(t, source, results(source)["meta"]) for t in found_tables]
    if not shown:
        raise ValueError(f"nothing to plot or print: {', '.join(map(str, read))} "
                         f"{'holds' if len(read) == 1 else 'hold'} no rows")
    return shown


def _draw(source: Path, png: Path, plot: str, results: dict) -> Path | None:
    """Draw ``plot`` of ``results`` (read from ``source``) into ``png``; None where it has nothing to draw.

    Raises:
        ValueError: a row lacks a field the plot reads (the message names ``source``), or the PNG
            cannot be written.
    """
    png.parent.mkdir(parents=True, exist_ok=True)
    try:
        return PLOTS[plot](results, png)
    except (KeyError, TypeError) as e:  # a row without a field this plot reads, or of another type
        raise ValueError(f"{source}: a row lacks a field {png.name} needs, or holds one of the wrong type "
                         f"({type(e).__name__}: {e})") from None


def _titled(table, source: Path, meta: dict):
    """``table`` with ``source``'s name before its title and, where the file records them, the GPU and
    versions of its ``meta`` (:func:`caption`) under it, as the plots carry them."""
    table.title = f"{source.name}: {table.title}" if table.title else source.name
    if any(key in meta for key in ("gpu", "fused_swiglu_version", "git_commit")):
        table.caption = f"{table.caption}\n{caption(meta)}" if table.caption else caption(meta)
    return table


def _csv_value(text: str) -> object:
    """A CSV cell as the JSON file beside it holds it: int, float, None for an empty cell, else the text."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _csv_results(path: Path) -> dict:
    """The ``{"meta": {}, "rows": [...]}`` of a CSV that ``bench`` writes beside its JSON (one row per line
    under a header; numbers as numbers).

    Raises:
        ValueError: not a CSV with a header and rows; the message names the file.
    """
    import csv

    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            raw = list(reader)
            header = reader.fieldnames
    except (csv.Error, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a CSV results file ({e})") from None
    for line, row in enumerate(raw, start=2):
        if None in row or None in row.values():  # more or fewer cells than the header names
            raise ValueError(f"{path}: line {line} has {len(row) - (None in row) - list(row.values()).count(None)}"
                             f" cells where the header names {len(header)}: not a results file of fused-swiglu")
    rows = [{k: _csv_value(v) for k, v in row.items()} for row in raw]
    if not header or not rows:
        raise ValueError(f"{path}: not a results file of fused-swiglu (a CSV needs a header and rows)")
    return {"meta": {}, "rows": rows}


def _results(path: Path) -> dict:
    """A results file's ``{"meta": {...}, "rows": [{...}, ...]}`` (``meta`` empty where the file has none):
    the JSON files the commands write, or the CSV beside one (no meta).

    Raises:
        ValueError: not JSON (or CSV), or not of that form; the message names the file.
    """
    if path.suffix.lower() == ".csv":
        return _csv_results(path)
    try:
        results = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON results file ({e})") from None
    rows = results.get("rows") if isinstance(results, dict) else None
    if not isinstance(rows, list) or not isinstance(results.get("meta", {}), dict) or not all(
            isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: not a results file of fused-swiglu (expected an object with a 'rows' list "
                         "of objects, and a 'meta' object if any)")
    results.setdefault("meta", {})
    return results
