"""Block-scaled FP8 SwiGLU from bf16/fp16 activations: x quantized per 1 x 128 group at run time (the
``activation_scheme="dynamic"`` of fine-grained FP8 checkpoints), then the block-scaled packed kernel, in
one call of ``torch.ops.fused_swiglu.swiglu_packed_fp8`` with ``x_scale=None`` (so that torch.compile and
CUDA graphs see the quantization and the GEMM as one opaque call).
"""

from __future__ import annotations

import torch

from .ops import check_packed, run_checked, swiglu_packed_fp8_op


def swiglu_packed_fp8_dynamic(x: torch.Tensor, w_packed: torch.Tensor, w_scale: torch.Tensor, *,
                              config: str | None = None) -> torch.Tensor:
    """``silu(x W_gate^T) * (x W_up^T)`` for 16-bit activations and block-scaled e4m3 weights.

    x is quantized per 1 x 128 group of each row (as :func:`~fused_swiglu.fp8.quantize_e4m3_groups`: one
    kernel on a Hopper GPU), then multiplied as in ``swiglu_packed_fp8(..., scaling="block")``.

    Args:
        x: ``(M, H)`` ``torch.bfloat16`` or ``torch.float16``, H a multiple of 16, any strides.
        w_packed, w_scale: ``(2I, H)`` e4m3 and fp32 ``(2I / 8, ceil(H / 128))`` from
            :func:`~fused_swiglu.fp8.pack_weights_blockwise`, on x's device.
        config: a name of :data:`~fused_swiglu.catalog.FP8_BLOCKWISE_CONFIGS` (optionally
            ``<name>@<raster>:<swizzle>``) to run instead of the
            choice by M.

    Returns:
        ``(M, I)`` contiguous ``torch.bfloat16`` on x's device.

    Raises:
        TypeError: x not bf16/fp16, w_packed not e4m3, w_scale not fp32. ValueError: ranks, shapes,
            devices or an unknown config, as ``swiglu_packed_fp8``. BuildError, RuntimeError: as
            ``swiglu_packed_fp8``.
    """
    config = config if config is not None else ""
    return run_checked(lambda: check_packed(x, w_packed, None, w_scale, None, "block", False, config),
                       swiglu_packed_fp8_op, x, w_packed, None, w_scale, None, "block", False, config)[0]
