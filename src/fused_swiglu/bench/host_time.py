"""``fused-swiglu bench host-time``: host time per call at decode size (Qwen2.5-0.5B's MLP, M = 1).

At M = 1 the GPU work of one call is short, so the host's time per call (Python, dispatcher, checks,
allocation and launch) is what a stream of such calls mostly pays; where a method's GPU time is longer,
the stream's throughput shows it and the row says so (below). Methods:

* ``swiglu``: :func:`fused_swiglu.swiglu` (the dual kernel, the weights as they are).
* ``swiglu_packed``: :func:`fused_swiglu.swiglu_packed` on a weight packed once beforehand
  (``layout="interleaved"``, the packed kernel).
* ``torch_mm``: ``torch.mm(x, w_cat.t())`` over the (2I, H) gate+up weight: the same FLOPs, one
  cuBLAS call, no activation.
* ``eager``: ``F.silu(x @ wg.T) * (x @ wu.T)``.
* ``fp8_packed``, ``fp8_dual``, ``fp8_dynamic``: :func:`fused_swiglu.fp8.swiglu_packed_fp8` (row scales per
  token and weight row), :func:`~fused_swiglu.fp8.swiglu_fp8` and
  :func:`~fused_swiglu.fp8.swiglu_packed_fp8_dynamic` (x in ``dtype``, quantized by the operator; 128 x 128
  weight block scales) on e4m3 copies of the same operands.
* ``dual_store``, ``dswiglu``: the training operators ``torch.ops.fused_swiglu.swiglu_dual_store`` (the
  forward that also writes g and u) and ``dswiglu`` (the backward's data-gradient GEMM with the dSwiGLU
  epilogue, through a (H, I) down weight), called directly.
* ``mlp_stock``: a transformers ``Qwen2MLP`` of that shape (down projection included), stock forward.
* ``mlp_fused``: the same module object after :func:`fused_swiglu.fuse_swiglu_mlps` (patched and
  unpatched around its turn in each repeat). Both MLP methods need transformers; without it their
  rows say so (``us_per_call`` None).

Protocol, all under ``torch.no_grad()``: per method ``warmup`` calls and a synchronize; then, per
repeat, for each method (the order rotating every repeat):

* host time: one untimed call, then after a synchronize ``queued`` calls back to back, timed until
  the last call returns (before any synchronize), us/call = that wall time / ``queued``. This is the
  CPU's time per call (Python, dispatcher, checks, allocation and launch) whether or not the GPU keeps
  up, as long as nothing makes the host wait: the launch queue must not fill (``queued`` = 100 calls
  of at most five kernels each stay below its depth of about a thousand launches) and the call must
  not synchronize (none of the methods does). A short window (about 1.5 ms) is exposed to the
  host's jitter; the median over repeats takes it out.
* throughput: ``n`` calls back to back, one synchronize at the end, us/call = wall time / ``n``:
  the larger of the host time and the GPU time per call.

Reported: the medians over ``repeats`` (``host_us``, ``us_per_call``). Where the throughput exceeds
the host time by more than 10 %, the GPU bounds a stream of calls (``bound`` = ``"gpu"``), and the
ratios, taken on host time, say nothing about that method's GPU time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import configs, fp8
from ..functional import swiglu, swiglu_packed
from ..patch import fuse_swiglu_mlps, unfuse_swiglu_mlps
from ..weights import pack_gate_up
from . import report

METHODS = ("swiglu", "swiglu_packed", "torch_mm", "eager", "fp8_packed", "fp8_dual", "fp8_dynamic", "dual_store",
           "dswiglu", "mlp_stock", "mlp_fused")
RATIOS = (("swiglu", "torch_mm"), ("swiglu_packed", "torch_mm"), ("fp8_packed", "torch_mm"), ("fp8_dual", "torch_mm"),
          ("fp8_dynamic", "torch_mm"), ("dual_store", "torch_mm"), ("dswiglu", "torch_mm"), ("mlp_fused", "mlp_stock"))
DTYPES = configs.DTYPE_OF_SUFFIX
SHAPE = (1, 896, 4864)  # M, H, I: one token through Qwen2.5-0.5B's MLP
GPU_BOUND = 1.1  # throughput / host time above which a stream of calls is bound by the GPU


def _qwen2_mlp(H: int, I: int, dtype: torch.dtype, device: torch.device):
    """A transformers Qwen2MLP (gate/up/down projections, SiLU) with random weights, or the reason
    it cannot be built here (a string)."""
    try:
        from transformers import Qwen2Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP
    except ImportError as e:
        return f"needs transformers (pip install transformers): {e}"
    cfg = Qwen2Config(hidden_size=H, intermediate_size=I, hidden_act="silu")
    with torch.device(device):
        mlp = Qwen2MLP(cfg)
    return mlp.to(dtype).eval()


def build_calls(M: int, H: int, I: int, dtype: torch.dtype, device: torch.device, backend: str
                ) -> tuple[dict[str, Callable[[], object]], dict[str, Callable[[], None]], dict[str, str]]:
    """(method -> zero-argument call, method -> set-up before its turn, method -> why it cannot run).

    Raises:
        ValueError: ``backend`` is not one :func:`fused_swiglu.swiglu` takes.
    """
    x = torch.randn(M, H, device=device, dtype=torch.float32).to(dtype)
    w_cat = (torch.randn(2 * I, H, device=device, dtype=torch.float32) * H**-0.5).to(dtype)
    wg, wu = w_cat[:I], w_cat[I:]
    wp = pack_gate_up(wg, wu)
    calls: dict[str, Callable[[], object]] = {
        "swiglu": lambda: swiglu(x, wg, wu, backend=backend),
        "swiglu_packed": lambda: swiglu_packed(x, wp, layout="interleaved", backend=backend),
        "torch_mm": lambda: torch.mm(x, w_cat.t()),
        "eager": lambda: F.silu(x @ wg.T) * (x @ wu.T),
        **_fp8_and_training_calls(x, wg, wu),
    }
    setup: dict[str, Callable[[], None]] = {}
    skipped: dict[str, str] = {}
    mlp = _qwen2_mlp(H, I, dtype, device)
    if isinstance(mlp, str):
        skipped = {"mlp_stock": mlp, "mlp_fused": mlp}
    else:
        calls["mlp_stock"] = calls["mlp_fused"] = lambda: mlp(x)
        setup["mlp_stock"] = lambda: unfuse_swiglu_mlps(mlp)

        def fuse() -> None:
            unfuse_swiglu_mlps(mlp)
            if not fuse_swiglu_mlps(mlp, backend=backend):
                raise RuntimeError("fuse_swiglu_mlps did not patch the Qwen2MLP")
        setup["mlp_fused"] = fuse
    return calls, setup, skipped


def _fp8_and_training_calls(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The FP8 and training methods' calls (module docstring) on copies of x, wg and wu."""
    xq, xs = fp8.quantize_e4m3(x.float(), per_row=True)
    gq, gs = fp8.quantize_e4m3(wg.float(), per_row=True)
    uq, us = fp8.quantize_e4m3(wu.float(), per_row=True)
    wq, ws = fp8.pack_weights(gq, uq, gs, us)
    wb, wbs = _blockwise(wg, wu)
    M, I = x.shape[0], wg.shape[0]
    w_down = torch.randn(x.shape[1], I, device=x.device, dtype=torch.float32).mul(I**-0.5).to(x.dtype)
    gu = torch.randn(M, 2 * I, device=x.device, dtype=torch.float32).to(x.dtype)
    store, dswiglu = torch.ops.fused_swiglu.swiglu_dual_store.default, torch.ops.fused_swiglu.dswiglu.default
    return {
        "fp8_packed": lambda: fp8.swiglu_packed_fp8(xq, wq, xs, ws),
        "fp8_dual": lambda: fp8.swiglu_fp8(xq, gq, uq, xs, gs, us),
        "fp8_dynamic": lambda: fp8.swiglu_packed_fp8_dynamic(x, wb, wbs),
        "dual_store": lambda: store(x, wg, wu, ""),
        "dswiglu": lambda: dswiglu(x, w_down, gu, ""),
    }


def _blockwise(wg: torch.Tensor, wu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """wg and wu quantized per 128 x 128 block and packed for block scaling."""
    gb, gbs = fp8.quantize_e4m3_blocks(wg.float())
    ub, ubs = fp8.quantize_e4m3_blocks(wu.float())
    return fp8.pack_weights_blockwise(gb, ub, gbs, ubs)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_us(fn: Callable[[], object], queued: int, device: torch.device) -> float:
    """``queued`` calls of ``fn`` back to back after a synchronize, timed until the last returns (no
    synchronize inside the timing): the host's microseconds per call."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(queued):
        fn()
    elapsed = time.perf_counter() - start
    _sync(device)
    return elapsed / queued * 1e6


def per_call_us(fn: Callable[[], object], n: int, device: torch.device) -> float:
    """``n`` calls of ``fn`` back to back, one synchronize at the end: microseconds per call."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(n):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / n * 1e6


def measure(device: str | torch.device = "cuda", backend: str = "auto", dtype: str = "bf16", n: int = 2000,
            repeats: int = 5, warmup: int = 50, shape: tuple[int, int, int] = SHAPE, queued: int = 100) -> list[dict]:
    """Rows ``{"method", "host_us", "us_per_call", "bound", "samples_us", "host_samples_us", ...}`` in
    :data:`METHODS` order, by the protocol above (microseconds per call); a method that cannot run
    here has ``host_us`` and ``us_per_call`` None and ``skipped``.

    Raises:
        ValueError: ``n``, ``queued``, ``repeats`` or a size below 1, ``warmup`` below 0, or an unknown
            dtype.
    """
    M, H, I = shape
    for name, value, low in (("n", n, 1), ("queued", queued, 1), ("repeats", repeats, 1), ("warmup", warmup, 0),
                             ("M", M, 1), ("H", H, 1), ("I", I, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    device = torch.device(device)
    samples: dict[str, list[float]] = {}
    host_samples: dict[str, list[float]] = {}
    with torch.no_grad():
        calls, setup, skipped = build_calls(M, H, I, DTYPES[dtype], device, backend)
        names = [m for m in METHODS if m in calls]
        for name in names:
            setup.get(name, lambda: None)()
            for _ in range(warmup):
                calls[name]()
            _sync(device)
            samples[name], host_samples[name] = [], []
        for rep in range(repeats):
            for name in names[rep % len(names):] + names[: rep % len(names)]:
                setup.get(name, lambda: None)()
                calls[name]()  # untimed: a first call after set-up (a re-patched MLP's checks) is no sample's
                host_samples[name].append(host_us(calls[name], queued, device))
                samples[name].append(per_call_us(calls[name], n, device))
        setup.get("mlp_stock", lambda: None)()
    rows = []
    for method in METHODS:
        if method in samples:
            host, through = statistics.median(host_samples[method]), statistics.median(samples[method])
            rows.append({"method": method, "host_us": host, "us_per_call": through,
                         "bound": "gpu" if through > GPU_BOUND * host else "host",
                         "host_samples_us": host_samples[method], "samples_us": samples[method],
                         "n": n, "queued": queued, "repeats": repeats})
        else:
            rows.append({"method": method, "host_us": None, "us_per_call": None, "skipped": skipped[method]})
    return rows


def ratios(rows: list[dict]) -> dict[str, float | None]:
    """``"a/b"`` -> a's host time per call / b's for :data:`RATIOS` (None where one is missing). Rows of
    files written before host time was taken apart (no ``host_us``) give their throughput's ratios."""
    us = {r["method"]: r.get("host_us", r["us_per_call"]) for r in rows}
    return {f"{a}/{b}": (us[a] / us[b] if us.get(a) and us.get(b) else None) for a, b in RATIOS}


def table(rows: list[dict], shape: tuple[int, int, int] = SHAPE):
    from rich.table import Table

    M, H, I = shape
    t = Table(title=f"Host time per call (M = {M}, H = {H}, I = {I})", min_width=64,
              caption="median of repeats; host: calls queued, timed until the last returns; "
                      "throughput: n calls back to back, one synchronize")
    for col in ("method", "host us / call", "throughput us / call", "bound", "note"):
        t.add_column(col, justify="right" if "us" in col else "left")
    for r in rows:
        def cell(key: str) -> str:
            return "-" if r.get(key) is None else f"{r[key]:.1f}"
        t.add_row(r["method"], cell("host_us"), cell("us_per_call"), r.get("bound", ""), r.get("skipped", ""))
    return t


def run_host_time(console, out: Path | None = None, device: str | torch.device = "cuda", backend: str = "auto",
                  dtype: str = "bf16", n: int = 2000, repeats: int = 5, shape: tuple[int, int, int] = SHAPE,
                  queued: int = 100) -> dict:
    """Measure (:func:`measure`), print the table and the ratios, and with ``out`` write
    ``{"meta", "rows", "ratios"}`` as JSON there. Returns that dict.

    Raises:
        ValueError: see :func:`measure`; or ``out`` cannot be written.
    """
    import json

    if out is not None:
        out = report.check_out_path(out)
    device = torch.device(device)
    rows = measure(device, backend, dtype, n, repeats, shape=shape, queued=queued)
    r = ratios(rows)
    console.print(table(rows, shape))
    for name, value in r.items():
        console.print(f"{name} (host time): {'-' if value is None else f'{value:.2f}'}")
    meta = report.machine_meta(device if device.type == "cuda" else None)
    try:
        import transformers

        meta["transformers_version"] = transformers.__version__
    except ImportError:
        meta["transformers_version"] = None
    meta.update({"device": str(device), "backend": backend, "dtype": dtype, "n": n, "repeats": repeats,
                 "tokens": shape[0], "hidden_size": shape[1], "intermediate_size": shape[2],
                 "queued": queued,
                 "protocol": "host_us: `queued` calls after a synchronize, timed until the last returns, "
                             "us/call = wall / queued; us_per_call: n calls back to back, one synchronize, "
                             "us/call = wall / n; medians of repeats; methods rotating between repeats; "
                             "ratios on host_us; torch.no_grad()"})
    results = {"meta": meta, "rows": rows, "ratios": r}
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=2) + "\n")
        except OSError as e:
            raise ValueError(f"--out: cannot write the results to {out} ({e})") from e
        console.print(f"wrote {out}")
    return results
