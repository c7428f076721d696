"""Block-scaled FP8 SwiGLU from bf16/fp16 activations: x quantized per 1 x 128 group at run time (the
``activation_scheme="dynamic"`` of fine-grained FP8 checkpoints), then the block-scaled packed kernel.

One operator, ``torch.ops.fused_swiglu.swiglu_packed_fp8_dynamic(x, w_packed, w_scale, config)``, so that
torch.compile and CUDA graphs see the quantization and the GEMM as one opaque call (the quantization
kernel is launched through the kernel library, which Dynamo cannot trace).
"""

from __future__ import annotations

import torch

from .._validate import check_tensors
from ..ops import OPS_LIBRARY
from .ops import check_operands, not_differentiable, run_block, run_block_cpu
from .quantize import E4M3, K_BLOCK, quantize_e4m3_groups

_OP = "fused_swiglu::swiglu_packed_fp8_dynamic"
OPS_LIBRARY.define("swiglu_packed_fp8_dynamic(Tensor x, Tensor w_packed, Tensor w_scale, str config) -> Tensor")
swiglu_packed_fp8_dynamic_op = torch.ops.fused_swiglu.swiglu_packed_fp8_dynamic.default


def _check_x(x: torch.Tensor) -> None:
    """x bf16/fp16 and 2-D (the rest is checked as the block-scaled operator checks it)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{_OP}: x must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"{_OP}: x must be torch.bfloat16 or torch.float16 (quantized here per 1 x 128 group); "
                        f"got x.dtype={x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{_OP}: x must be 2-D (M, H); got shape {tuple(x.shape)}")


@torch.library.register_fake(_OP)
def _fake(x, w_packed, w_scale, config):
    _check_x(x)
    M, H = x.shape  # x's quantized stand-ins (fake tensors: no data)
    check_operands(x.new_empty((M, H), dtype=E4M3), w_packed, x.new_empty((M, -(-H // K_BLOCK)), dtype=torch.float32),
           w_scale, config, op=_OP, block=True)
    return x.new_empty((M, w_packed.shape[0] // 2), dtype=torch.bfloat16)


# The CUDA and CPU kernels check the rest once, on the quantized x.
def _cuda(x, w_packed, w_scale, config):
    _check_x(x)
    xq, x_scale = quantize_e4m3_groups(x, column_major_scales=True)
    check_operands(xq, w_packed, x_scale, w_scale, config, op=_OP, block=True)
    return run_block(xq, w_packed, x_scale, w_scale, config)


def _cpu(x, w_packed, w_scale, config):
    _check_x(x)
    xq, x_scale = quantize_e4m3_groups(x)
    check_operands(xq, w_packed, x_scale, w_scale, config, op=_OP, block=True)
    return run_block_cpu(xq, w_packed, x_scale, w_scale)


OPS_LIBRARY.impl("swiglu_packed_fp8_dynamic", _cuda, "CUDA")
OPS_LIBRARY.impl("swiglu_packed_fp8_dynamic", _cpu, "CPU")
not_differentiable(_OP)


def swiglu_packed_fp8_dynamic(x: torch.Tensor, w_packed: torch.Tensor, w_scale: torch.Tensor, *,
                              config: str | None = None) -> torch.Tensor:
    """``silu(x W_gate^T) * (x W_up^T)`` for 16-bit activations and block-scaled e4m3 weights.

    x is quantized per 1 x 128 group of each row (:func:`~fused_swiglu.fp8.quantize_e4m3_groups`: one
    kernel on a Hopper GPU), then multiplied as in ``swiglu_packed_fp8(..., scaling="block")``.

    Args:
        x: ``(M, H)`` ``torch.bfloat16`` or ``torch.float16``, H a multiple of 16, any strides.
        w_packed, w_scale: ``(2I, H)`` e4m3 and fp32 ``(2I / 8, ceil(H / 128))`` from
            :func:`~fused_swiglu.fp8.pack_weights_blockwise`, on x's device.
        config: a name of :data:`~fused_swiglu.catalog.FP8_BLOCKWISE_CONFIGS` to run instead of the
            choice by M.

    Returns:
        ``(M, I)`` contiguous ``torch.bfloat16`` on x's device.

    Raises:
        TypeError: x not bf16/fp16, w_packed not e4m3, w_scale not fp32. ValueError: ranks, shapes,
            devices or an unknown config, as ``swiglu_packed_fp8``. RuntimeError: a CUDA error at launch.
    """
    check_tensors(x=x, w_packed=w_packed, w_scale=w_scale)
    return swiglu_packed_fp8_dynamic_op(x, w_packed, w_scale, config if config is not None else "")
