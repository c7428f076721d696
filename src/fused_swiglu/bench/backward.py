"""``fused-swiglu bench backward``: forward + backward of a whole SwiGLU MLP (gate, up, down).

For each shape and token count M, one training step of the MLP block
``z = down(silu(x W_gate^T) * (x W_up^T))``: the forward and ``torch.autograd.grad(z, inputs, dz)``
with respect to x and every weight, for

* ``eager``: PyTorch's ops (``F.linear``, ``F.silu``), as a stock Hugging Face MLP runs them;
* ``compiled``: ``torch.compile`` of the same function (default mode; compiled once per shape
  during the warm-up, Dynamo's caches reset between shapes);
* ``fused_dual`` / ``fused_packed``: :func:`fused_swiglu.swiglu_mlp` (dual kernel) or
  :func:`fused_swiglu.swiglu_mlp_packed` (packed kernel, interleaved weight): the forward stores the
  gate and up pre-activations and the backward runs the dSwiGLU GEMM (``fused_swiglu/mlp_ops.py``);
  the path ``fuse_swiglu_mlps`` patches in when autograd records;
* ``recompute_dual``: ``swiglu_mlp(..., recompute=True)``, the dual kernel's up-projection and
  ``F.linear``, whose backward recomputes the gate and up products (``fused_swiglu/autograd.py``).

The kernel benchmark's protocol (:func:`fused_swiglu.bench.timing.time_interleaved`): warm-up,
methods interleaved rep by rep, L2 flushed before each repetition, input sets rotated, CUDA-event
medians. A step is enqueued behind the flush, so its time is the GPU's, plus whatever part of the
host's autograd work the GPU waits for; with ``cuda_graph`` each step (forward and backward) is
captured once per input set and its replays are timed: the GPU's time alone. Rows: ``model``, ``hidden_size``, ``intermediate_size``,
``tokens``, ``method``, ``median_ms``, ``p10_ms``, ``p90_ms``, and ``eager_over`` (eager's median
over the method's: > 1, the method is faster).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..mlp import swiglu_mlp, swiglu_mlp_packed
from ..weights import pack_gate_up
from . import report, timing
from .defaults import BACKWARD_METHODS as METHODS, BACKWARD_REPS as REPS, BACKWARD_TOKENS as TOKENS
from .defaults import BACKWARD_WARMUP_MS as WARMUP_MS
from .shapes import MlpShape


def mlp_eager(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """``down(silu(x W_gate^T) * (x W_up^T))``: x (M, H); w_gate, w_up (I, H); w_down (H, I)."""
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def mlp_packed(x, w_packed, w_down):
    """:func:`fused_swiglu.swiglu_mlp_packed` on ``w_packed`` (2I, H) in the interleaved layout."""
    return swiglu_mlp_packed(x, w_packed, w_down, layout="interleaved")


def mlp_recompute(x, w_gate, w_up, w_down):
    """:func:`fused_swiglu.swiglu_mlp` with ``recompute=True``."""
    return swiglu_mlp(x, w_gate, w_up, w_down, recompute=True)


@dataclass(frozen=True)
class StepSet:
    """One input set of a training step: leaves that need gradients, and the output gradient."""

    x: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_packed: torch.Tensor
    w_down: torch.Tensor
    dz: torch.Tensor


def make_sets(M: int, H: int, I: int, dtype: torch.dtype, device: torch.device, l2_bytes: int) -> list[StepSet]:
    """Enough input sets for the timing protocol (their weights together over 2x L2), weights
    scaled by ``fan_in ** -0.5`` so that activations keep unit scale."""
    itemsize = dtype.itemsize
    weights = 5 * I * H * itemsize  # gate, up, down and the packed copy of gate + up
    activations = (2 * M * H + 4 * M * I) * itemsize
    n = timing.n_input_sets(3 * I * H * itemsize + M * H * itemsize, 2 * weights + 4 * activations, l2_bytes)
    sets = []
    for _ in range(n):
        def leaf(*shape, scale=1.0):
            return (torch.randn(*shape, device=device) * scale).to(dtype).requires_grad_()

        wg, wu = leaf(I, H, scale=H**-0.5), leaf(I, H, scale=H**-0.5)
        wp = pack_gate_up(wg.detach(), wu.detach()).requires_grad_()
        sets.append(StepSet(leaf(M, H), wg, wu, wp, leaf(H, I, scale=I**-0.5),
                            torch.randn(M, H, device=device).to(dtype)))
    return sets


def check_methods(methods: Sequence[str]) -> None:
    """Raises ValueError naming the first of ``methods`` that is not one of :data:`METHODS`."""
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


def _step(mlp: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], dz: torch.Tensor):
    return lambda: torch.autograd.grad(mlp(*inputs), inputs, dz)


def step_calls(sets: Sequence[StepSet], methods: Sequence[str]) -> dict[str, list[Callable[[], object]]]:
    """method -> one training-step callable per input set (module docstring): the gradients of
    every input of its MLP function."""
    mlps = {"eager": mlp_eager, "compiled": torch.compile(mlp_eager) if "compiled" in methods else None,
            "fused_dual": swiglu_mlp, "fused_packed": mlp_packed, "recompute_dual": mlp_recompute}

    def inputs(method: str, s: StepSet) -> tuple[torch.Tensor, ...]:
        return (s.x, s.w_packed, s.w_down) if method == "fused_packed" else (s.x, s.w_gate, s.w_up, s.w_down)

    return {m: [_step(mlps[m], inputs(m, s), s.dz) for s in sets] for m in methods}


def rows_of(shape: MlpShape, M: int, timings: dict[str, timing.Timing]) -> list[dict]:
    """The rows of one cell; ``eager_over`` is None where eager was not timed."""
    return timing.cell_rows(shape, M, timings, "eager_over", "eager")


FIELDS = timing.cell_fields("eager_over")


def run_backward(shapes: Sequence[MlpShape], tokens: Sequence[int], methods: Sequence[str], dtype: torch.dtype,
                 console, out: Path | None = None, reps: int = REPS, warmup_ms: float = WARMUP_MS,
                 cuda_graph: bool = False, protocol: str = "auto",
                 seconds: float = timing.SUSTAINED_SECONDS) -> list[dict]:
    """Time every shape at every M on the current CUDA device, print a line per cell, and with
    ``out`` write ``{"meta", "rows"}`` as JSON there and the rows as CSV beside it.

    Raises:
        ValueError: an unknown method, or ``out`` cannot be written.
    """
    check_methods(methods)
    if out is not None:
        out = report.check_out_path(out)
    rows, device, soak = timing.time_grid(
        shapes, tokens,
        lambda shape, M, device, l2: step_calls(
            make_sets(M, shape.hidden_size, shape.intermediate_size, dtype, device, l2), methods),
        rows_of,
        lambda r: f"{r['method']} {r['median_ms']:.3f} ms" + (f" ({r['eager_over']:.3f}x)" if r["eager_over"] else ""),
        console, reps=reps, warmup_ms=warmup_ms, cuda_graph=cuda_graph, protocol=protocol, seconds=seconds)
    if out is not None:
        meta = report.timed_meta(device, "forward + autograd.grad of the MLP block per call", cuda_graph, seconds, soak,
                                 dtype=str(dtype).removeprefix("torch."), reps=reps, warmup_ms=warmup_ms)
        paths = report.write_results(out, meta, rows, FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
