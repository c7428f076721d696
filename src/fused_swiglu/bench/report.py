"""Machine description, result rows, rich tables, JSON and CSV files."""

from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from .._version import __version__

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


def check_out_path(path: str | Path, option: str = "--out") -> Path:
    """Check, before a run, that results can be written to ``path`` (JSON) and beside it (CSV).
    Creates no folder (the folder is made when the results are written); to prove that the nearest
    existing folder takes new files, one empty probe file is created there and removed at once.

    Returns:
        ``path`` as a Path.

    Raises:
        ValueError: ``path`` ends in ``.csv`` (the CSV would overwrite the JSON), names a directory
            (or ends in a path separator), or its folder cannot be created or written; the message
            names ``option``.
    """
    text = str(path)
    path = Path(path)
    if path.suffix.lower() == ".csv":
        raise ValueError(f"{option} names the JSON file (its CSV goes beside it as .csv); got {path}")
    if path.is_dir() or text.endswith(("/", os.sep)):
        raise ValueError(f"{option} must be a file path, not a directory; got {text!r}")
    existing = path.parent.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option}: cannot create the folder {path.parent} ({existing} is not a directory)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option}: the folder {existing} is not writable")
    try:  # os.access trusts permission bits: root passes it on read-only and virtual file systems
        fd, probe = tempfile.mkstemp(prefix=".fused-swiglu-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if existing != path.parent.absolute():
            raise ValueError(f"{option}: cannot create the folder {path.parent}: {existing} takes no new files "
                             f"({e.strerror or e})") from e
        raise ValueError(f"{option}: cannot write in the folder {existing} ({e.strerror or e})") from e
    return path


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
