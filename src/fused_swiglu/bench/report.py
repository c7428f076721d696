"""Machine description, result rows, rich tables, JSON and CSV files."""

from __future__ import annotations

import csv
import datetime
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import torch

from .._version import __version__
from .paths import check_out_path

BENCH_FIELDS = (
    "model", "hidden_size", "intermediate_size", "tokens", "dtype", "method",
    "median_ms", "p10_ms", "p90_ms", "tflops", "speedup_vs_eager", "ratio_to_cublas", "config",
    "protocol", "sm_mhz", "power_w",
)
ACCURACY_FIELDS = ("model", "method", "exact", "mismatch", "max_ulp", "counted", "n")


def flops(M: int, H: int, I: int) -> int:
    """FLOPs of one SwiGLU MLP up-projection: two (M x H) @ (H x I) GEMMs = 4 M H I."""
    return 4 * M * H * I


def tflops(M: int, H: int, I: int, ms: float) -> float:
    return flops(M, H, I) / (ms * 1e-3) / 1e12 if ms > 0 else float("nan")


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def git_commit() -> str | None:
    """HEAD of the repository this package runs from, if it runs from one."""
    repo = Path(__file__).resolve().parents[3]
    if not (repo / ".git").exists():
        return None
    commit = _run(["git", "rev-parse", "HEAD"], cwd=repo)
    if commit and _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo):
        commit += "-dirty"
    return commit


def kernel_library() -> dict[str, object] | None:
    """The kernel library this process loaded: path, the first 16 hex digits of its SHA-256 and its
    config count (None if none is loaded). It names the kernels that ran even where ``git_commit``
    cannot, e.g. on a machine that received the sources without their repository history."""
    import hashlib

    from .. import _lib

    if not _lib.is_loaded():
        return None
    lib = _lib.library()
    digest = hashlib.sha256(lib.path.read_bytes()).hexdigest()[:16]
    return {"path": str(lib.path), "sha256_16": digest, "configs": len(lib.ordered_names)}  # loads no config


def nvcc_version() -> str:
    from ..build import toolchain
    from ..errors import BuildError

    try:
        tc = toolchain.find_nvcc()
    except BuildError as e:
        return f"unavailable: {e}"
    return f"{tc.version[0]}.{tc.version[1]} ({tc.nvcc})"


def timed_meta(device: torch.device | None, per_call: str, cuda_graph: bool, seconds: float, soak: dict | None,
               **fields: object) -> dict[str, object]:
    """:func:`machine_meta` with ``fields`` and the protocol of a timed mode (``per_call``: what one timed
    call does), its CUDA-graph flag and the heat soak (``soak``, when one ran)."""
    meta = machine_meta(device)
    meta.update(fields)
    meta.update({"cuda_graph": cuda_graph,
                 "protocol": per_call
                             + (", captured in a CUDA graph per input set and replayed" if cuda_graph else "")
                             + "; L2 flushed, input sets rotated, CUDA-event medians; each row's protocol: 'interleaved' "
                               "(methods alternated rep by rep) or 'sustained' (after a heat soak, each method "
                               f"back to back for {seconds:g} s, SM clock and power from NVML)"})
    if soak is not None:
        meta["heat_soak"] = soak
    return meta


def machine_meta(device: torch.device | None = None) -> dict[str, object]:
    """GPU, driver, versions, commit and time, recorded with every result file."""
    meta: dict[str, object] = {
        "gpu": None,
        "sm_count": None,
        "compute_capability": None,
        "driver_version": None,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "fused_swiglu_version": __version__,
        "git_commit": git_commit(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "nvcc_version": nvcc_version(),
        "kernel_library": kernel_library(),
    }
    if torch.cuda.is_available():
        device = device or torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(device)
        meta["gpu"] = props.name
        meta["sm_count"] = props.multi_processor_count
        meta["compute_capability"] = f"{props.major}.{props.minor}"
        meta["l2_bytes"] = getattr(props, "L2_cache_size", None)
        smi = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        meta["driver_version"] = smi.splitlines()[0] if smi else None
    return meta


def write_results(path: Path, meta: dict, rows: Sequence[dict], fields: Sequence[str]) -> tuple[Path, Path]:
    """Write ``{"meta": ..., "rows": [...]}`` to ``path`` and the rows as CSV beside it
    (same name, ``.csv``). Returns both paths.

    Raises:
        ValueError: see :func:`check_out_path`; or writing a file failed (the OS error is quoted).
    """
    path = check_out_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out: cannot create the folder {path.parent} ({e})") from e
    csv_path = path.with_suffix(".csv")
    try:
        path.write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=2) + "\n")
        with csv_path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
            w.writeheader()
            for row in rows:
                w.writerow(row)
    except OSError as e:
        raise ValueError(f"--out: cannot write the results to {path} or {csv_path} ({e})") from e
    return path, csv_path


def _fmt(value: object, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def bench_table(rows: Sequence[dict]):
    from rich.table import Table

    table = Table(title="SwiGLU MLP up-projection (median of L2-flushed CUDA-event timings)")
    for col in ("model", "tokens", "method", "ms", "p10-p90", "TFLOP/s", "vs eager", "/ cuBLAS", "config"):
        table.add_column(col, justify="left" if col in ("model", "method", "config") else "right")
    for r in rows:
        table.add_row(
            r["model"].removeprefix("Qwen2.5-"),
            str(r["tokens"]),
            r["method"],
            _fmt(r["median_ms"]),
            f"{_fmt(r['p10_ms'])}-{_fmt(r['p90_ms'])}",
            _fmt(r["tflops"], 1),
            _fmt(r["speedup_vs_eager"], 2) + "x" if r["speedup_vs_eager"] is not None else "-",
            _fmt(r["ratio_to_cublas"], 2) if r["ratio_to_cublas"] is not None else "-",
            r.get("config") or "",
        )
    return table


def accuracy_table(rows: Sequence[dict], dtype: str):
    from rich.table import Table

    table = Table(title=f"Accuracy vs float64 rounded once to {dtype} (M = 2048)")
    for col in ("model", "method", "exact %", "mismatch %", "max ulp", "counted", "n"):
        table.add_column(col, justify="left" if col in ("model", "method") else "right")
    for r in rows:
        table.add_row(
            r["model"].removeprefix("Qwen2.5-"),
            r["method"],
            f"{100 * r['exact']:.2f}",
            f"{100 * r['mismatch']:.4f}",
            str(r["max_ulp"]),
            str(r["counted"]),
            str(r["n"]),
        )
    return table


def e2e_table(rows: Sequence[dict]):
    """``bench e2e``'s timing rows: stock and fused ms per model and mode, and their ratio."""
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
        table.add_row(r["model"], r["mode"], shape, _fmt(r["stock_ms"], 3), _fmt(r["fused_ms"], 3),
                      "-" if r.get("speedup") is None else f"{r['speedup']:.3f}", note[:120])
    return table


def e2e_accuracy_table(rows: Sequence[dict]):
    """``bench e2e``'s accuracy rows: greedy agreement and logits errors per model."""
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
        table.add_row(r["model"], f"{round(r['token_agreement'] * r['new_tokens'])} of {r['new_tokens']}",
                      "-" if first is None else str(first),
                      f"{r['stock_logits_rel_err']:.3e}", f"{r['fused_logits_rel_err']:.3e}",
                      f"{r['stock_top1_vs_fp32']:.3f}", f"{r['fused_top1_vs_fp32']:.3f}", "")
    return table


def fp8_table(rows: Sequence[dict]):
    """``bench fp8``'s rows, a line per shape and M: the bf16 packed kernel's time, and for each e4m3
    method its ``bf16_over`` (the bf16 kernel's time / the method's: > 1, faster than bf16), the number
    the run is for; each method's time where the bf16 kernel was not timed."""
    from rich.table import Table

    against_bf16 = any(r["method"] == "fused_packed" for r in rows)
    methods = list(dict.fromkeys(r["method"] for r in rows if r["method"] != "fused_packed" or not against_bf16))
    cells: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        cells.setdefault((r["model"], r["tokens"]), {})[r["method"]] = r
    title = ("e4m3 methods: the bf16 packed kernel's time / the method's (> 1: faster than bf16)" if against_bf16
             else "e4m3 methods: ms, median")
    table = Table(title=title)
    for col in ("model", "M", *(["bf16 ms"] if against_bf16 else []), *(m.removeprefix("fp8_") for m in methods)):
        table.add_column(col, justify="left" if col == "model" else "right")
    for (model, M), by in cells.items():
        bf16 = [_fmt(by["fused_packed"]["median_ms"]) if "fused_packed" in by else "-"] if against_bf16 else []
        if against_bf16:
            values = ["-" if by.get(m, {}).get("bf16_over") is None else _fmt(by[m]["bf16_over"], 2) + "x"
                      for m in methods]
        else:
            values = [_fmt(by[m]["median_ms"]) if m in by else "-" for m in methods]
        table.add_row(str(model), str(M), *bf16, *values)
    return table


def moe_tables(rows: Sequence[dict]) -> list:
    """``bench moe``'s rows as two tables, the experts forward and the gate/up projection alone (the ``fc1_``
    methods): a line per experts shape and T, its floor in ms and each method's time / floor (1 is the
    hardware's limit; the method's time is floor x ratio, its ms in the results file)."""
    from rich.table import Table

    tables = []
    for fc1, title in ((False, "Experts forward"), (True, "Gate/up projection alone (fc1_)")):
        mine = [r for r in rows if r["method"].startswith("fc1_") == fc1]
        if not mine:
            continue
        methods = list(dict.fromkeys(r["method"] for r in mine))
        cells: dict[tuple, dict[str, dict]] = {}
        for r in mine:
            cells.setdefault((r["model"], r["tokens"]), {})[r["method"]] = r
        table = Table(title=f"{title}: time / floor (median)")
        for col in ("shape", "T", "floor ms", *(m.removeprefix("fc1_") if fc1 else m for m in methods)):
            table.add_column(col, justify="left" if col == "shape" else "right", overflow="fold")
        for (model, T), by in cells.items():
            floor = next(iter(by.values()))["floor_ms"]
            values = [f"{by[m]['over_floor']:.2f}" if m in by else "-" for m in methods]
            table.add_row(str(model), str(T), _fmt(floor), *values)
        tables.append(table)
    tables[-1].caption = ("floor: the active experts' weight bytes at the copy bandwidth, or their FLOPs at the bf16 "
                          "rate, whichever takes longer (gate and up only for the fc1_ methods)")
    return tables


def tp_table(rows: Sequence[dict]):
    """``bench tp``'s rows: one GPU's time, the tensor-parallel time and its all-reduce, and the ratio
    and scaling efficiency the run reports."""
    from rich.table import Table

    table = Table(title="Tensor parallel: the MLP block on N GPUs against one (ms, median)")
    cols = ("model", "M", "GPUs", "1 GPU ms", "TP ms", "all-reduce ms", "TP / 1 GPU", "scaling efficiency")
    for col in cols:
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(str(r["model"]), str(r["tokens"]), str(r["world_size"]), _fmt(r["one_gpu_ms"]), _fmt(r["tp_ms"]),
                      _fmt(r.get("allreduce_ms")), _fmt(r.get("ratio_over_1gpu"), 3),
                      _fmt(r.get("scaling_efficiency"), 3))
    return table


def rows_table(rows: Sequence[dict]):
    """Any results file's rows, its fields as columns in the order first seen: a file no plot or table
    of its own reads (e.g. the A/B runs of tools/) is shown whole rather than refused. A field holding a
    list or an object (e.g. the samples behind a median) is left out, and named in the caption."""
    from rich.table import Table

    columns = list(dict.fromkeys(key for r in rows for key in r))
    nested = [c for c in columns if any(isinstance(r.get(c), (list, dict)) for r in rows)]
    shown = [c for c in columns if c not in nested]
    table = Table(title=f"{len(rows)} rows",
                  caption=f"not shown: {', '.join(nested)} (lists or objects)" if nested else None)
    for col in shown:
        numbers = all(isinstance(r.get(col), (int, float, type(None))) for r in rows)
        table.add_column(col, justify="right" if numbers else "left")
    for r in rows:
        table.add_row(*(_cell(r.get(col)) for col in shown))
    return table


def _cell(value: object, width: int = 120) -> str:
    """One value of :func:`rows_table`: None as ``-``, a float to 4 significant digits (whole above
    10^4, where that would turn to an exponent), text cut to ``width`` characters (an error's
    traceback would fill the screen; the file holds it whole)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[:width - 3] + "..."
