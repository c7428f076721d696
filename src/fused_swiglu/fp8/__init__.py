"""FP8 (e4m3) GEMM + SwiGLU: x and the packed gate/up weights in ``torch.float8_e4m3fn``, y in bf16 or e4m3.

::

    acc[m, r] = sum_k x[m, k] * W_packed[r, k]                     (FP8 tensor cores, fp32 accumulators)
    g, u      = acc[m, r] * x_scale[m] * w_scale[r]                (fp32: the dequantization scales)
    y[m, j]   = silu(g[m, j]) * u[m, j]                            (fp32, rounded once to bfloat16)

Scales are fp32 and multiply the quantized values back: ``x ~ x_fp8 * x_scale`` (``quantize_e4m3``
returns them so). Layouts, both contiguous on x's device:

* ``x_scale``: ``(1,)`` one scale for all tokens (per tensor), or ``(M,)`` / ``(M, 1)`` one per token.
* ``w_scale``: ``(1,)`` one scale for both weights, or ``(2I,)`` / ``(2I, 1)`` one per row of
  ``W_packed``, i.e. per output channel of W_gate and W_up in the interleaved row order of
  :func:`fused_swiglu.weights.pack_gate_up` (:func:`pack_weights` packs a gate/up pair with its scales).

Block scaling (``scaling="block"``, the DeepSeek-V3 recipe, as transformers' fine-grained FP8): the
scales multiply each 128-deep block kb of K's products while accumulating,
``acc[m, r] = sum_kb x_scale[m, kb] * w_scale[r / 8, kb] * sum_{k in kb} x[m, k] W_packed[r, k]``:

* ``x_scale``: ``(M, ceil(H / 128))``, one per 1 x 128 group of each token
  (:func:`quantize_e4m3_groups`); any strides (the kernel reads them M-major, 16-byte aligned columns:
  ``column_major_scales=True`` gives that layout, others are copied once).
* ``w_scale``: ``(2I / 8, ceil(H / 128))`` from :func:`pack_weights_blockwise`, which takes each weight's
  ``(ceil(I / 128), ceil(H / 128))`` block scales.

e4m3 output (``out_dtype=torch.float8_e4m3fn``, the down projection's FP8 input): the epilogue turns
each fp32 value v of y into ``v * (1 / s)`` for a scale s, rounded once to e4m3 and saturated at +-448:

* dynamic (no ``out_scale``): one scale per 1 x 128 group of each row, ``s = amax / 448`` over the
  group's 128 fp32 values (columns ``[128 g, 128 g + 128)``, the last group possibly shorter), returned
  as a row-major fp32 ``(M, ceil(I / 128))`` tensor, so that ``y ~ y_e4m3 * s``: the layout of the
  activation scales of transformers' fine-grained FP8 linear (``act_quant``) and of vLLM's per-token-
  group quantization (row-major form). An all-zero group gets scale 0 and zeros.
  :func:`quantize_e4m3_groups` is the same quantization of a given tensor.
* static: ``s = out_scale``, a fp32 ``(1,)`` tensor, for every value; it should be positive and finite
  (the kernel does not read it back to check: a zero or NaN scale saturates every nonzero value).

A NaN in y stays NaN (e4m3 NaN) and does not count towards its group's amax. A group whose amax is
below 448 * 2^-126 gets a subnormal scale whose reciprocal is clamped to FLT_MAX, so its values
quantize far below 448 (relative error up to the whole value; absolute error below 2^-118).

Accumulation: ``"fast"`` lets GMMA accumulate all of K (the tensor cores' FP8 accumulation keeps
fewer mantissa bits than fp32); ``"promoted"`` adds each 128-deep k-tile's partial sum into an fp32
accumulator (CUTLASS's FP8 mainloop). Block scaling always does the latter (each k-tile's partial sum
is scaled before it is added). e4m3 y is computed with row scaling and fast accumulation (its 256-wide
tiles leave no registers for a second accumulator). Measured accuracy and speed: ``docs/fp8.md``.

The dual kernel (:func:`swiglu_fp8`) reads W_gate and W_up as stored, ``(I, H)`` each, with their own
scales: ``g = acc_gate[m, i] * x_scale[m] * gate_scale[i]``, ``u = acc_up[m, i] * x_scale[m] * up_scale[i]``,
``gate_scale`` and ``up_scale`` both ``(1,)`` or both ``(I,)`` / ``(I, 1)``; bf16 y, fast accumulation.
The kernel reads the two weight scales as one vector, the gate scales then the up scales
(``fsw_problem.w_scale``); they are concatenated per call unless they already are views of one such
vector (``s[:I]`` and ``s[I:]`` of a 16-byte aligned ``s``, or ``s[:1]``, ``s[1:]`` per tensor).

Operators (schemas and CPU kernels in :mod:`fused_swiglu.fp8.ops`, CUDA kernels in the operator library):
``torch.ops.fused_swiglu.swiglu_packed_fp8(x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, config)
-> (y, y_scale?)``, every form of the packed kernel (``x_scale`` None: x bf16/fp16 quantized per 1 x 128 group
inside, block scaling; ``e4m3_out``: e4m3 y instead of bfloat16; ``y_scale``: the per-group scales of e4m3 y
without ``out_scale``, else None; ``config``: ``""``, ``"promoted"`` or a name of the family's configs,
:data:`catalog.FP8_CONFIGS`, :data:`catalog.FP8_OUT_CONFIGS` or :data:`catalog.FP8_BLOCKWISE_CONFIGS`);
``swiglu_dual_fp8(x, w_gate, w_up, x_scale, gate_scale, up_scale, config) -> y`` (:data:`catalog.FP8_DUAL_CONFIGS`);
``quantize_e4m3_groups(t, column_major_scales) -> (q, scale)``. The operators' CUDA kernels check every rule
at the C boundary (RuntimeError); the public functions below raise the documented TypeError / ValueError,
checking their arguments before the call, or, for an eager call on a CUDA tensor, only where the operator refused
it (:func:`fused_swiglu._dispatch.op_first`). Each operator has a fake kernel (torch.compile, CUDA graphs) and a
CPU kernel (fp32 products of the dequantized operands, one rounding). None is differentiable.
"""

from __future__ import annotations

import torch

from .. import catalog
from .._dispatch import PLAIN, call_op, fast_config
from .._validate import check_choice
from ..configs.fp8 import (ACCUMULATIONS, BLOCKWISE_CONFIG_NAMES, CONFIG_NAMES, DUAL_CONFIG_NAMES, OUT_CONFIG_NAMES,
                     SCALINGS, choose_blockwise_config, choose_config, choose_dual_config, choose_out_config)
from .dynamic import swiglu_packed_fp8_dynamic
from .ops import (OUT_DTYPES, check_dual, check_packed, dequantized_swiglu, dequantized_swiglu_dual,
                  quantize_e4m3_groups_op, run_checked, swiglu_dual_fp8_op, swiglu_packed_fp8_op)
from .quantize import (E4M3, E4M3_MAX, GROUP, K_BLOCK, column_major, pack_weights, pack_weights_blockwise,
                       quantize_e4m3, quantize_e4m3_blocks, quantize_e4m3_groups)

__all__ = [
    "swiglu_packed_fp8", "quantize_e4m3", "quantize_e4m3_groups", "quantize_e4m3_blocks", "pack_weights",
    "pack_weights_blockwise", "dequantized_swiglu", "choose_config", "choose_out_config", "choose_blockwise_config",
    "column_major",
    "E4M3", "E4M3_MAX", "GROUP", "K_BLOCK", "ACCUMULATIONS", "SCALINGS", "CONFIG_NAMES", "OUT_CONFIG_NAMES",
    "BLOCKWISE_CONFIG_NAMES", "swiglu_packed_fp8_op", "swiglu_dual_fp8_op", "quantize_e4m3_groups_op",
    "swiglu_fp8", "swiglu_packed_fp8_dynamic", "dequantized_swiglu_dual", "choose_dual_config", "DUAL_CONFIG_NAMES",
]


def swiglu_packed_fp8(x: torch.Tensor, w_packed: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor, *,
                      accumulation: str = "fast", config: str | None = None, out_dtype: torch.dtype = torch.bfloat16,
                      out_scale: torch.Tensor | None = None,
                      scaling: str = "row") -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``silu(x W_gate^T) * (x W_up^T)`` from e4m3 operands and their fp32 scales, in bfloat16 or e4m3.

    Args:
        x: ``(M, H)`` ``float8_e4m3fn``, H a multiple of 16 (any strides; copied once where the
            rows are not 16-byte aligned with unit column stride).
        w_packed: ``(2I, H)`` ``float8_e4m3fn`` in the interleaved layout (:func:`pack_weights`).
        x_scale: fp32 ``(1,)`` or ``(M,)`` / ``(M, 1)``; block scaling: ``(M, ceil(H / 128))`` (module
            docstring).
        w_scale: fp32 ``(1,)`` or ``(2I,)`` / ``(2I, 1)`` in the packed row order; block scaling:
            ``(2I / 8, ceil(H / 128))`` (:func:`pack_weights_blockwise`).
        accumulation: ``"fast"`` or ``"promoted"`` (module docstring); e4m3 y: ``"fast"`` only; block
            scaling promotes every k-tile whichever is given.
        config: an e4m3 config name to run instead of the choice by M (benchmarks, tests), optionally with
            its launch as ``<name>@<raster>:<swizzle>`` (:func:`fused_swiglu.catalog.split_config`).
        out_dtype: ``torch.bfloat16``, or ``torch.float8_e4m3fn`` (I then a multiple of 16).
        out_scale: e4m3 y only: fp32 ``(1,)`` static scale; None: one scale per 1 x 128 group.
        scaling: ``"row"`` (per tensor, token or weight row, in the epilogue) or ``"block"`` (1 x 128 /
            128 x 128 blocks, in the mainloop; bfloat16 y).

    Returns:
        bfloat16 y: ``(M, I)`` contiguous tensor on x's device. e4m3 y: ``(y, y_scale)``, y ``(M, I)``
        contiguous ``float8_e4m3fn`` and y_scale fp32, row-major ``(M, ceil(I / 128))`` (dynamic) or
        ``out_scale`` itself (static), with ``y ~ y * y_scale`` (module docstring).

    Raises:
        TypeError: x or w_packed not e4m3, x_scale or w_scale not fp32, an argument not a dense tensor, or
            config not a str.
        ValueError: ranks, H mismatch or not a multiple of 16, I not a multiple of 8 (16 for e4m3 y), a
            scale's shape, an ``out_scale`` that is not one fp32 value, devices, an unknown
            accumulation, scaling, out_dtype or config.
        BuildError: the kernel or operator library cannot be built or loaded (the first CUDA call).
        RuntimeError: on CUDA, the kernel library's own checks, a config library that cannot be built or
            loaded, or the kernel library lacking the config (the message names the Python error:
            ``BuildError: ...``, ``UnsupportedError: ...``), or a CUDA error at launch.
    """
    if config is None and type(x) in PLAIN and x.is_cuda and x.dim() == 2 and x.shape[0] > 0 \
            and not torch.compiler.is_compiling() and (fast := fast_config(_FAST, accumulation, scaling, out_dtype)):
        # run_checked's eager rule written inline for the common calls: no closure or extra frame per call
        try:
            y, y_scale = call_op(swiglu_packed_fp8_op, x, w_packed, x_scale, w_scale, out_scale, scaling, *fast)
        except Exception:
            check_packed(x, w_packed, x_scale, w_scale, out_scale, scaling, *fast)
            raise
        if not fast[0]:
            return y
        return y, (out_scale if out_scale is not None else y_scale)
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    check_choice("scaling", scaling, SCALINGS)  # before any comparison with it (arrays have no truth value)
    if not (isinstance(out_dtype, torch.dtype) and out_dtype in OUT_DTYPES):
        raise ValueError(f"out_dtype must be torch.bfloat16 or torch.float8_e4m3fn; got out_dtype={out_dtype!r}")
    e4m3_out = out_dtype == E4M3
    chosen = _config_for(config, accumulation, scaling)
    if e4m3_out and scaling == "row" and accumulation != "fast":
        raise ValueError("e4m3 y is computed with accumulation='fast' only (its 256-column tiles leave no "
                         f"registers for a second accumulator); got accumulation={accumulation!r}")
    y, y_scale = run_checked(lambda: check_packed(x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, chosen),
                             swiglu_packed_fp8_op, x, w_packed, x_scale, w_scale, out_scale, scaling, e4m3_out, chosen)
    if not e4m3_out:
        return y
    return y, (out_scale if out_scale is not None else y_scale)


# (accumulation, scaling, out_dtype) of the calls that take swiglu_packed_fp8's eager fast path (config None) ->
# the operator's (e4m3_out, config): the choice, as _config_for gives it
_FAST = {(a, sc, dt): (dt == E4M3, "promoted" if a == "promoted" else "")
         for a in ACCUMULATIONS for sc in SCALINGS for dt in OUT_DTYPES
         if not (dt == E4M3 and (sc == "block" or a != "fast"))}


def _config_for(config: str | None, accumulation: str, scaling: str) -> str:
    """The operator's config argument: the choice for ``accumulation`` where ``config`` is None or ``""``,
    else ``config`` (a config name fixes the accumulation it runs), which must not be a fast one where
    ``accumulation="promoted"`` was asked for (block scaling promotes either way).

    Raises:
        TypeError: ``config`` not a str.
        ValueError: ``config`` names a fast config (or ``"fast"``) while ``accumulation="promoted"``.
    """
    if config is None or config == "":
        return "promoted" if accumulation == "promoted" else ""
    _check_config_type(config)
    if scaling != "block" and accumulation == "promoted":
        name = catalog.split_config(config)[0]
        if not (name == "promoted" or "_promote" in name):
            raise ValueError(f"config={config!r} runs fast accumulation; got accumulation='promoted' (give the "
                             "config alone, or a promoted one)")
    return config


def _check_config_type(config: object) -> None:
    """TypeError unless ``config`` is a str (a config name)."""
    if not isinstance(config, str):
        raise TypeError(f"config must be a str (a config name, or '' for the choice); got {type(config).__name__}")


def swiglu_fp8(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, x_scale: torch.Tensor,
               gate_scale: torch.Tensor, up_scale: torch.Tensor, *, config: str | None = None) -> torch.Tensor:
    """``silu(x W_gate^T) * (x W_up^T)`` from e4m3 operands and their fp32 scales, in bfloat16: the dual
    kernel, which reads W_gate and W_up as stored (no packing), with fast accumulation.

    Args:
        x: ``(M, H)`` ``float8_e4m3fn``, H a multiple of 16 (any strides; copied once where the rows
            are not 16-byte aligned with unit column stride, as the weights).
        w_gate, w_up: ``(I, H)`` ``float8_e4m3fn`` each (e.g. a checkpoint's ``gate_proj`` /
            ``up_proj`` weights), I a multiple of 8.
        x_scale: fp32 ``(1,)`` (per tensor) or ``(M,)`` / ``(M, 1)`` (per token).
        gate_scale, up_scale: fp32, both ``(1,)`` (per tensor) or both ``(I,)`` / ``(I, 1)`` (per
            output channel), so that ``W_gate ~ w_gate * gate_scale`` row by row (likewise W_up).
            Concatenated into the kernel's one weight-scale vector per call unless they are views
            ``s[:I]``, ``s[I:]`` of one 16-byte aligned fp32 vector (module docstring).
        config: None or ``""`` (the choice by M, :func:`choose_dual_config`; as :func:`swiglu_packed_fp8`) or a
            name of :data:`DUAL_CONFIG_NAMES` (benchmarks, tests), optionally ``<name>@<raster>:<swizzle>``.

    Returns:
        y ``(M, I)`` contiguous bfloat16 on x's device: ``silu(g) * u`` in fp32, rounded once, with
        ``g = (x @ w_gate^T)[m, i] * x_scale[m] * gate_scale[i]`` and ``u`` alike.

    Raises:
        TypeError: x, w_gate or w_up not e4m3, a scale not fp32, an argument not a dense tensor, or config not
            a str.
        ValueError: ranks, H mismatch or not a multiple of 16, I not a multiple of 8, w_up's shape
            not w_gate's, a scale's shape, gate_scale and up_scale of different kinds (one per tensor,
            one per channel), devices, an unknown config.
        BuildError: the kernel or operator library cannot be built or loaded (the first CUDA call).
        RuntimeError: on CUDA, the kernel library's own checks, a config library that cannot be built or
            loaded, or the kernel library lacking the config (the message names the Python error:
            ``BuildError: ...``, ``UnsupportedError: ...``), or a CUDA error at launch.
    """
    config = "" if config is None else config
    _check_config_type(config)
    return run_checked(lambda: check_dual(x, w_gate, w_up, x_scale, gate_scale, up_scale, config),
                       swiglu_dual_fp8_op, x, w_gate, w_up, x_scale, gate_scale, up_scale, config)
