"""``fused-swiglu bench --fp8``: the e4m3 kernels beside the unfused FP8 path and the bf16 kernels.

For each shape and token count M, x and the gate/up weights are drawn once in bf16 and quantized to
e4m3 with one scale per token and one per weight row (:func:`fused_swiglu.fp8.quantize_e4m3`), and
each method computes y (M, I) in bfloat16 from them:

* ``fp8_fused`` / ``fp8_fused_promoted``: :func:`fused_swiglu.fp8.swiglu_packed_fp8` with fast /
  promoted accumulation;
* ``fp8_unfused``: the path serving stacks run today: ``torch._scaled_mm`` (cuBLAS's FP8 GEMM, row-wise
  scales, fast accumulation) over the concatenated ``[W_gate; W_up]`` into a bf16 ``(M, 2I)``
  intermediate, then ``silu(g) * u`` as one ``torch.compile``'d elementwise kernel, compiled for each
  shape and M (static sizes: the fastest form; with dynamic sizes it ran up to 2x slower);
* ``fused_packed``: the bf16 packed kernel (:func:`fused_swiglu.swiglu_packed`) on the bf16 inputs.

x enters every method already quantized (a model quantizes it once for the gate and up products
alike), so no method is charged for it. The protocol is the kernel benchmark's
(:func:`fused_swiglu.bench.timing.time_interleaved`): warm-up, methods interleaved rep by rep, L2
flushed before each repetition, input sets rotated, CUDA-event medians; with ``cuda_graph`` each call
is captured once per input set and its replays are timed. Rows: ``model``, ``hidden_size``,
``intermediate_size``, ``tokens``, ``method``, ``median_ms``, ``p10_ms``, ``p90_ms`` and ``bf16_over``
(``fused_packed``'s median over the method's: > 1, the method is faster than the bf16 kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import fp8
from ..functional import swiglu_packed
from ..weights import pack_gate_up
from . import report, shapes, timing
from .shapes import MODELS, MlpShape

METHODS = ("fp8_fused", "fp8_fused_promoted", "fp8_unfused", "fused_packed")
TOKENS = (1, 16, 128, 512, 2048, 8192)
# FP8 checkpoints' MLP shapes beside the Qwen2.5 ones (public config.json: hidden_size, intermediate_size)
FP8_MODELS: tuple[MlpShape, ...] = (
    MlpShape("Qwen3-8B", 4096, 12288),
    MlpShape("Qwen3-32B", 5120, 25600),
    MlpShape("Llama-3.1-70B", 8192, 28672),
    MlpShape("DeepSeek-V3-dense", 7168, 18432),
)
SHAPES = MODELS + FP8_MODELS


def find_shapes(names: Sequence[str] | None) -> list[MlpShape]:
    """``--models`` of ``bench --fp8``: names of :data:`FP8_MODELS` (case-insensitive), else as
    :func:`fused_swiglu.bench.shapes.find`; None or empty: :data:`SHAPES`.

    Raises:
        ValueError: an unknown name (as :func:`~fused_swiglu.bench.shapes.find`).
    """
    if not names:
        return list(SHAPES)
    own = {m.model.lower(): m for m in FP8_MODELS}
    return [own[n.lower()] if n.lower() in own else shapes.find([n])[0] for n in names]
REPS = 30
WARMUP_MS = 100.0


@dataclass(frozen=True)
class Fp8Set:
    """One input set: e4m3 operands with their scales, and the bf16 originals."""

    x: torch.Tensor          # (M, H) e4m3
    x_scale: torch.Tensor    # (M,) fp32
    w_packed: torch.Tensor   # (2I, H) e4m3, interleaved
    w_scale: torch.Tensor    # (2I,) fp32, interleaved
    w_cat: torch.Tensor      # (2I, H) e4m3, [W_gate; W_up]
    w_cat_scale: torch.Tensor  # (1, 2I) fp32
    x_bf16: torch.Tensor
    w_packed_bf16: torch.Tensor


def make_sets(M: int, H: int, I: int, device: torch.device, l2_bytes: int) -> list[Fp8Set]:
    """Enough input sets for the protocol (their weights together over 2x L2)."""
    per_set_read = 2 * I * H + M * H  # e4m3 bytes one FP8 call reads
    held = 2 * I * H * (1 + 1 + 2) + M * H * 3 + M * I * 8
    sets = []
    for _ in range(timing.n_input_sets(per_set_read, held, l2_bytes)):
        xb = torch.randn(M, H, device=device).to(torch.bfloat16)
        wg = (torch.randn(I, H, device=device) * H**-0.5).to(torch.bfloat16)
        wu = (torch.randn(I, H, device=device) * H**-0.5).to(torch.bfloat16)
        xq, xs = fp8.quantize_e4m3(xb, per_row=True)
        gq, gs = fp8.quantize_e4m3(wg, per_row=True)
        uq, us = fp8.quantize_e4m3(wu, per_row=True)
        wp, ws = fp8.pack_weights(gq, uq, gs, us)
        w_cat = torch.cat([gq.view(torch.uint8), uq.view(torch.uint8)]).view(fp8.E4M3)
        sets.append(Fp8Set(xq, xs, wp, ws, w_cat, torch.cat([gs, us]).reshape(1, -1), xb, pack_gate_up(wg, wu)))
        del wg, wu
    return sets


def silu_and_mul(gu: torch.Tensor) -> torch.Tensor:
    """``silu(g) * u`` of a ``(M, 2I)`` ``[g, u]`` intermediate, in its dtype."""
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def unfused(s: Fp8Set, elementwise: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The ``fp8_unfused`` method on one set."""
    gu = torch._scaled_mm(s.x, s.w_cat.t(), scale_a=s.x_scale.reshape(-1, 1), scale_b=s.w_cat_scale,
                          out_dtype=torch.bfloat16, use_fast_accum=True)
    return elementwise(gu)


def calls_for(sets: Sequence[Fp8Set], methods: Sequence[str]) -> dict[str, list[Callable[[], object]]]:
    """method -> one callable per input set."""
    compiled = torch.compile(silu_and_mul, dynamic=False) if "fp8_unfused" in methods else None
    make = {
        "fp8_fused": lambda s: lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale),
        "fp8_fused_promoted": lambda s: lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale,
                                                                      accumulation="promoted"),
        "fp8_unfused": lambda s: lambda: unfused(s, compiled),
        "fused_packed": lambda s: lambda: swiglu_packed(s.x_bf16, s.w_packed_bf16, layout="interleaved",
                                                        backend="cutlass"),
    }
    return {m: [make[m](s) for s in sets] for m in methods}


def check_methods(methods: Sequence[str]) -> None:
    """Raises ValueError naming the first of ``methods`` that is not one of :data:`METHODS`."""
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


def check_outputs(sets: Sequence[Fp8Set], calls: dict[str, list[Callable[[], object]]]) -> None:
    """Every FP8 method's output on the first set agrees with the dequantized fp32 reference within
    what e4m3 accumulation allows: a mean error under 2 % of the output's RMS (e4m3 paths: about
    0.05 %; a wrong layout or scale: about 100 %). A wrong method would be timed otherwise."""
    s = sets[0]
    ref = fp8.dequantized_swiglu(s.x, s.w_packed, s.x_scale, s.w_scale)
    rms = ref.pow(2).mean().sqrt().item() or 1.0
    for method, fns in calls.items():
        if not method.startswith("fp8"):
            continue
        err = (fns[0]().float() - ref).abs().mean().item() / rms
        if not err < 0.02:
            raise RuntimeError(f"{method}: output differs from the dequantized reference by {err:.3g} x RMS on average")


def rows_of(shape: MlpShape, M: int, timings: dict[str, timing.Timing]) -> list[dict]:
    bf16 = timings.get("fused_packed")
    return [{"model": shape.model, "hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
             "tokens": M, "method": method, "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
             "bf16_over": bf16.median_ms / t.median_ms if bf16 else None}
            for method, t in timings.items()]


FIELDS = ("model", "hidden_size", "intermediate_size", "tokens", "method", "median_ms", "p10_ms", "p90_ms",
          "bf16_over")


def run_fp8(shapes: Sequence[MlpShape], tokens: Sequence[int], methods: Sequence[str], console,
            out: Path | None = None, reps: int = REPS, warmup_ms: float = WARMUP_MS,
            cuda_graph: bool = True) -> list[dict]:
    """Time every shape at every M on the current CUDA device, print a line per cell, and with ``out``
    write ``{"meta", "rows"}`` as JSON there and the rows as CSV beside it.

    Raises:
        ValueError: an unknown method, or ``out`` cannot be written.
        RuntimeError: an FP8 method's output is wrong (checked before timing).
    """
    check_methods(methods)
    if out is not None:
        out = report.check_out_path(out)
    def checked_calls(shape: MlpShape, M: int, device: torch.device, l2: int):
        sets = make_sets(M, shape.hidden_size, shape.intermediate_size, device, l2)
        calls = calls_for(sets, methods)
        check_outputs(sets, calls)
        return calls

    rows, device = timing.time_grid(
        shapes, tokens, checked_calls, rows_of,
        lambda r: f"{r['method']} {r['median_ms']:.4f} ms" + (f" ({r['bf16_over']:.2f}x)" if r["bf16_over"] else ""),
        console, reps=reps, warmup_ms=warmup_ms, cuda_graph=cuda_graph)
    if out is not None:
        meta = report.machine_meta(device)
        meta.update({"reps": reps, "warmup_ms": warmup_ms, "cuda_graph": cuda_graph,
                     "scales": "x per token, weights per row (output channel); fp32",
                     "protocol": "one call per input set"
                                 + (", captured in a CUDA graph per input set and replayed" if cuda_graph else "")
                                 + "; time_interleaved, L2 flushed, input sets rotated, CUDA-event medians"})
        paths = report.write_results(out, meta, rows, FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
