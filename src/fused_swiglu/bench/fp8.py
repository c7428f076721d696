"""``fused-swiglu bench fp8``: the e4m3 kernels beside the unfused FP8 path and the bf16 kernels.

For each shape and token count M, x and the gate/up weights are drawn once in bf16 and quantized to
e4m3 with one scale per token and one per weight row (:func:`fused_swiglu.fp8.quantize_e4m3`), and
each method computes y (M, I) in bfloat16 from them:

* ``fp8_fused`` / ``fp8_fused_promoted``: :func:`fused_swiglu.fp8.swiglu_packed_fp8` with fast /
  promoted accumulation;
* ``fp8_fused_dual``: :func:`fused_swiglu.fp8.swiglu_fp8`, the dual kernel on the same operands with
  W_gate and W_up as stored (fast accumulation; the weight scales passed as views of one vector, so no
  per-call concatenation);
* ``fp8_unfused``: the path serving stacks run today: ``torch._scaled_mm`` (cuBLAS's FP8 GEMM, row-wise
  scales, fast accumulation) over the concatenated ``[W_gate; W_up]`` into a bf16 ``(M, 2I)``
  intermediate, then ``silu(g) * u`` as one ``torch.compile``'d elementwise kernel, compiled for each
  shape and M (static sizes: the fastest form; with dynamic sizes it ran up to 2x slower);
* ``fp8_fused_e4m3out``: :func:`fused_swiglu.fp8.swiglu_packed_fp8` with ``out_dtype=float8_e4m3fn``:
  y in e4m3 with one fp32 scale per 1 x 128 group of each row (the down projection's FP8 input);
* ``fp8_unfused_e4m3out``: the same output the unfused way: the ``fp8_unfused`` GEMM, then ``silu(g) * u``
  in fp32 and the per-token-group quantization (amax / 448 per 128 columns) as one ``torch.compile``'d
  kernel, compiled per shape and M;
* ``fp8_fused_blockwise``: :func:`fused_swiglu.fp8.swiglu_packed_fp8` with ``scaling="block"`` on the same
  bf16 inputs quantized the DeepSeek-V3 way (1 x 128 token groups, 128 x 128 weight blocks);
* ``fp8_unfused_blockwise``: the same from ``torch._scaled_mm`` with block scales (cuBLAS's blockwise-
  scaled FP8 GEMM) over ``[W_gate; W_up]``, then the compiled ``silu(g) * u``;
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
from . import report, timing
from .defaults import FP8_METHODS as METHODS, FP8_REPS as REPS, FP8_TOKENS as TOKENS
from .defaults import FP8_WARMUP_MS as WARMUP_MS
from .shapes import MlpShape

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
    block: BlockSet | None = None  # the blockwise methods' operands


@dataclass(frozen=True)
class BlockSet:
    """The same inputs quantized per 1 x 128 token group and per 128 x 128 weight block."""

    x: torch.Tensor          # (M, H) e4m3
    x_scale: torch.Tensor    # (M, ceil(H / 128)) fp32, M-major
    w_packed: torch.Tensor   # (2I, H) e4m3, interleaved
    w_scale: torch.Tensor    # (2I / 8, ceil(H / 128)) fp32, one per 8 packed rows
    w_cat: torch.Tensor      # (2I, H) e4m3, [W_gate; W_up]
    w_cat_scale: torch.Tensor  # (ceil(H / 128), 2I / 128) fp32: the (2I / 128, ceil(H / 128)) block scales, transposed
    x_scale_mm: torch.Tensor   # x_scale M-major with row stride M, as torch._scaled_mm takes it


def block_set(xb: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor) -> BlockSet:
    xq, xs = fp8.quantize_e4m3_groups(xb, column_major_scales=True)
    gq, gs = fp8.quantize_e4m3_blocks(wg)
    uq, us = fp8.quantize_e4m3_blocks(wu)
    wp, ws = fp8.pack_weights_blockwise(gq, uq, gs, us)
    w_cat = torch.cat([gq.view(torch.uint8), uq.view(torch.uint8)]).view(fp8.E4M3)
    return BlockSet(xq, xs, wp, ws, w_cat, torch.cat([gs, us]).t(), xs.t().contiguous().t())


def make_sets(M: int, H: int, I: int, device: torch.device, l2_bytes: int, blockwise: bool = False) -> list[Fp8Set]:
    """Enough input sets for the protocol (their weights together over 2x L2); with ``blockwise`` each
    also holds the block-quantized operands."""
    per_set_read = 2 * I * H + M * H  # e4m3 bytes one FP8 call reads
    held = 2 * I * H * (1 + 1 + 2 + (2 if blockwise else 0)) + M * H * (4 if blockwise else 3) + M * I * 8
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
        sets.append(Fp8Set(xq, xs, wp, ws, w_cat, torch.cat([gs, us]).reshape(1, -1), xb, pack_gate_up(wg, wu),
                           block_set(xb, wg, wu) if blockwise else None))
        del wg, wu
    return sets


def dual_operands(s: Fp8Set) -> tuple[torch.Tensor, ...]:
    """The ``fp8_fused_dual`` method's arguments from one set: ``(x, w_gate, w_up, x_scale, gate_scale,
    up_scale)``, the weights and their scales as views of ``[W_gate; W_up]`` and its scale vector (the
    per-channel scales of one vector, which the kernel reads in place)."""
    I = s.w_cat.shape[0] // 2
    scales = s.w_cat_scale.reshape(-1)
    return s.x, s.w_cat[:I], s.w_cat[I:], s.x_scale, scales[:I], scales[I:]


def silu_and_mul(gu: torch.Tensor) -> torch.Tensor:
    """``silu(g) * u`` of a ``(M, 2I)`` ``[g, u]`` intermediate, in its dtype."""
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def silu_and_mul_quantize(gu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``silu(g) * u`` of a ``(M, 2I)`` ``[g, u]`` intermediate in fp32, quantized to e4m3 per 1 x 128
    group as the e4m3-output kernels do (:func:`fused_swiglu.fp8.quantize_e4m3_groups`, I % 128 == 0):
    ``(y, scale)`` with scale ``(M, I / 128)``."""
    g, u = gu.chunk(2, dim=-1)
    v = F.silu(g.float()) * u.float()
    M, I = v.shape
    groups = v.reshape(M, I // fp8.GROUP, fp8.GROUP)
    scale = groups.abs().amax(dim=2, keepdim=True) / fp8.E4M3_MAX
    inv = torch.reciprocal(scale).clamp(max=torch.finfo(torch.float32).max)
    q = (groups * inv).clamp(-fp8.E4M3_MAX, fp8.E4M3_MAX).to(fp8.E4M3)
    return q.reshape(M, I), scale.reshape(M, I // fp8.GROUP)


def unfused_blockwise(b: BlockSet, elementwise: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The ``fp8_unfused_blockwise`` method on one set's block-quantized operands."""
    gu = torch._scaled_mm(b.x, b.w_cat.t(), scale_a=b.x_scale_mm, scale_b=b.w_cat_scale, out_dtype=torch.bfloat16)
    return elementwise(gu)


def unfused(s: Fp8Set, elementwise: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The ``fp8_unfused`` method on one set."""
    gu = torch._scaled_mm(s.x, s.w_cat.t(), scale_a=s.x_scale.reshape(-1, 1), scale_b=s.w_cat_scale,
                          out_dtype=torch.bfloat16, use_fast_accum=True)
    return elementwise(gu)


def calls_for(sets: Sequence[Fp8Set], methods: Sequence[str]) -> dict[str, list[Callable[[], object]]]:
    """method -> one callable per input set."""
    compiled = (torch.compile(silu_and_mul, dynamic=False)
                if {"fp8_unfused", "fp8_unfused_blockwise"} & set(methods) else None)
    quantizing = torch.compile(silu_and_mul_quantize, dynamic=False) if "fp8_unfused_e4m3out" in methods else None
    make = {
        "fp8_fused": lambda s: lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale),
        "fp8_fused_dual": lambda s: (lambda args: lambda: fp8.swiglu_fp8(*args))(dual_operands(s)),
        "fp8_fused_promoted": lambda s: lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale,
                                                                      accumulation="promoted"),
        "fp8_unfused": lambda s: lambda: unfused(s, compiled),
        "fp8_fused_e4m3out": lambda s: lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale,
                                                                     out_dtype=fp8.E4M3),
        "fp8_unfused_e4m3out": lambda s: lambda: unfused(s, quantizing),
        "fp8_fused_blockwise": lambda s: lambda: fp8.swiglu_packed_fp8(s.block.x, s.block.w_packed, s.block.x_scale,
                                                                       s.block.w_scale, scaling="block"),
        "fp8_unfused_blockwise": lambda s: lambda: unfused_blockwise(s.block, compiled),
        "fused_packed": lambda s: lambda: swiglu_packed(s.x_bf16, s.w_packed_bf16, layout="interleaved",
                                                        backend="cutlass"),
    }
    return {m: [make[m](s) for s in sets] for m in methods}


def check_methods(methods: Sequence[str]) -> None:
    """Raises ValueError naming the first of ``methods`` that is not one of :data:`METHODS`."""
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


def dequantized_output(out) -> torch.Tensor:
    """A method's y in fp32: bf16 as is, an e4m3 ``(y, scale)`` pair times its per-group scales."""
    if not isinstance(out, tuple):
        return out.float()
    q, scale = out
    return (q.float().reshape(q.shape[0], -1, fp8.GROUP) * scale[:, :, None]).reshape(q.shape)


def check_outputs(sets: Sequence[Fp8Set], calls: dict[str, list[Callable[[], object]]]) -> dict[str, float]:
    """Every FP8 method's output on the first set agrees with the dequantized fp32 reference within
    what e4m3 accumulation allows: a mean error under 2 % of the output's RMS (e4m3 paths: about
    0.05 %; a wrong layout or scale: about 100 %), 5 % for e4m3 y (its own rounding: about 1.5 %).
    A wrong method would be timed otherwise. Returns the unfused (peer) methods that fail, with their
    error; raises for one of ours."""
    wrong = {}
    s = sets[0]
    row_ref = fp8.dequantized_swiglu(s.x, s.w_packed, s.x_scale, s.w_scale)
    block_ref = (fp8.dequantized_swiglu(s.block.x, s.block.w_packed, s.block.x_scale, s.block.w_scale, scaling="block")
                 if s.block is not None else None)
    for method, fns in calls.items():
        if not method.startswith("fp8"):
            continue
        ref = block_ref if method.endswith("blockwise") else row_ref
        rms = ref.pow(2).mean().sqrt().item() or 1.0
        err = (dequantized_output(fns[0]()) - ref).abs().mean().item() / rms
        if not err < (0.05 if method.endswith("e4m3out") else 0.02):
            if method.startswith("fp8_unfused"):
                wrong[method] = err
                continue
            raise RuntimeError(f"{method}: output differs from the dequantized reference by {err:.3g} x RMS on average")
    return wrong


def rows_of(shape: MlpShape, M: int, timings: dict[str, timing.Timing]) -> list[dict]:
    """The rows of one cell; ``bf16_over`` (the bf16 packed kernel's time / the method's) is None where
    the bf16 kernel was not timed."""
    return timing.cell_rows(shape, M, timings, "bf16_over", "fused_packed")


FIELDS = timing.cell_fields("bf16_over")


def run_fp8(shapes: Sequence[MlpShape], tokens: Sequence[int], methods: Sequence[str], console,
            out: Path | None = None, reps: int = REPS, warmup_ms: float = WARMUP_MS,
            cuda_graph: bool = True, protocol: str = "auto", seconds: float = timing.SUSTAINED_SECONDS) -> list[dict]:
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
        sets = make_sets(M, shape.hidden_size, shape.intermediate_size, device, l2,
                         blockwise=any(m.endswith("blockwise") for m in methods))
        calls = calls_for(sets, methods)
        for method in [m for m in calls if m.startswith("fp8_unfused")]:  # a peer may refuse a size
            try:
                calls[method][0]()
            except RuntimeError as e:
                console.print(f"{shape.model} M={M}: {method} not timed: {str(e).splitlines()[0][:160]}")
                del calls[method]
        for method, err in check_outputs(sets, calls).items():
            console.print(f"{shape.model} M={M}: {method} not timed: its output differs from the dequantized "
                          f"reference by {err:.3g} x RMS on average")
            del calls[method]
        return calls

    rows, device, soak = timing.time_grid(
        shapes, tokens, checked_calls, rows_of,
        lambda r: f"{r['method']} {r['median_ms']:.4f} ms" + (f" ({r['bf16_over']:.2f}x)" if r["bf16_over"] else ""),
        console, reps=reps, warmup_ms=warmup_ms, cuda_graph=cuda_graph, protocol=protocol, seconds=seconds)
    if out is not None:
        meta = report.timed_meta(device, "one call per input set", cuda_graph, seconds, soak, reps=reps,
                                 warmup_ms=warmup_ms,
                                 scales="x per token, weights per row (output channel); blockwise methods: x per "
                                        "1 x 128 token group, weights per 128 x 128 block; fp32")
        paths = report.write_results(out, meta, rows, FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
