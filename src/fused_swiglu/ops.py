"""The ``fused_swiglu::swiglu_packed`` and ``fused_swiglu::swiglu_dual`` operators (torch.library).

Both take a 2-D ``x`` (M, H) and return a new contiguous (M, I) tensor of x's dtype.
``config`` is a library config name, optionally with its launch as ``<name>@<raster>:<swizzle>``
(:func:`fused_swiglu.catalog.split_config`: raster 0 the kernel's order, 1 along M, 2 along N; swizzle 1, 2,
4 or 8; without it raster 0, swizzle 1), or ``""`` / ``"promoted"`` to let
:func:`fused_swiglu.configs.select` choose among the fast / promoted-accumulation configs.

CUDA kernel: C++ (``csrc/torch/inference_ops.cpp``, PyTorch's stable ABI), loaded with the kernel
library on the first CUDA call. It checks the operands (ranks, shapes, dtypes bf16/fp16, one CUDA
device, H and I multiples of 8) and raises RuntimeError naming the argument and the rule; operands
that do not meet the TMA rules (unit column stride, row stride a multiple of 8 elements, 16-byte
aligned start) are copied once; M == 0 returns at once without a launch. The launch plan (config,
rasterisation, swizzle, workspace) is chosen once per problem (kernel, config, dtype, M, N, K,
device) by the Python config choice and cached in C++ for the life of the process
(:func:`fused_swiglu.configs.set_config_override` changes the override and forgets it;
``FUSED_SWIGLU_CONFIG`` is read only when a plan is made).

CPU kernel: the same result with fp32 PyTorch matrix products and one rounding
(:func:`fused_swiglu.reference.swiglu_fp32_one_rounding`); float64 operands are computed in
float64 (so ``torch.autograd.gradcheck`` holds on the raw ops). Fake kernel: the output's shape, dtype
and contiguous strides, so the ops trace under torch.compile; the CPU and fake kernels raise
ValueError / TypeError naming the argument (``config`` included:
:func:`fused_swiglu.configs.check_config`).

Both ops are differentiable: their backward (:mod:`fused_swiglu.autograd`) recomputes the gate and
up products with PyTorch GEMMs and returns gradients for x and the weights (none for ``config``).
The autograd kernel is Python; calls that record no graph skip it when made through
:func:`fused_swiglu.functional` (see ``_call`` there).
"""

from __future__ import annotations

import torch

from . import autograd, grouped_ops, routing_ops, training_ops
from .fp8 import ops as fp8_ops
from . import _validate as v
from .configs import check_config
from .op_library import OPS_LIBRARY, cuda_kernels_from_library
from .reference import swiglu_float64, swiglu_fp32_one_rounding
from .weights import unpack_gate_up


def _check_operands(op: str, **named: torch.Tensor) -> None:
    """x 2-D, and every operand floating point, of x's dtype and on x's device. The CUDA kernels take bf16 / fp16
    only (the library refuses other dtypes, naming x); the CPU kernels take any floating dtype
    (:func:`_cpu_swiglu`)."""
    x = named["x"]
    if x.dim() != 2:
        raise ValueError(f"fused_swiglu::{op}: x must be 2-D (M, H); got x of shape {tuple(x.shape)}")
    for arg, t in named.items():
        if not t.is_floating_point():
            raise TypeError(f"fused_swiglu::{op}: {arg} must be a floating-point tensor; got {arg}.dtype={t.dtype}")
        if t.dtype != x.dtype:
            raise TypeError(f"fused_swiglu::{op}: {arg} must have x's dtype {x.dtype}; got {arg}.dtype={t.dtype}")
        if t.device != x.device:
            raise ValueError(f"fused_swiglu::{op}: {arg} must be on x's device {x.device}; got {arg} on {t.device}")


def _check_packed_operands(x: torch.Tensor, w_packed: torch.Tensor, config: str) -> None:
    _check_operands("swiglu_packed", x=x, w_packed=w_packed)
    v.check_packed(x, w_packed)
    check_config("packed", config, x.dtype)


def _check_dual_operands(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, config: str) -> None:
    _check_operands("swiglu_dual", x=x, w_gate=w_gate, w_up=w_up)
    v.check_weight_pair(x, w_gate, w_up)
    check_config("dual", config, x.dtype)


# The operators. Their schemas, CPU and fake kernels and autograd formulas are registered here; their
# CUDA kernels are C++ (csrc/torch/), loaded with the kernel library on the first CUDA call of any
# operator (see _lazy_cuda below); the training operators' schemas are defined in training_ops.
OPS_LIBRARY.define("swiglu_packed(Tensor x, Tensor w_packed, str config) -> Tensor")
OPS_LIBRARY.define("swiglu_dual(Tensor x, Tensor w_gate, Tensor w_up, str config) -> Tensor")

swiglu_packed = torch.ops.fused_swiglu.swiglu_packed.default
swiglu_dual = torch.ops.fused_swiglu.swiglu_dual.default


@torch.library.register_fake("fused_swiglu::swiglu_packed")
def _swiglu_packed_fake(x, w_packed, config):
    _check_packed_operands(x, w_packed, config)
    return x.new_empty((x.shape[0], w_packed.shape[0] // 2))  # contiguous, as the CUDA kernel returns


@torch.library.register_fake("fused_swiglu::swiglu_dual")
def _swiglu_dual_fake(x, w_gate, w_up, config):
    _check_dual_operands(x, w_gate, w_up, config)
    return x.new_empty((x.shape[0], w_gate.shape[0]))


def _cpu_swiglu(x, w_gate, w_up):
    """fp32 products and one rounding to x's dtype; float64 in float64."""
    reference = swiglu_float64 if x.dtype == torch.float64 else swiglu_fp32_one_rounding
    return reference(x, w_gate, w_up).contiguous()


def _swiglu_packed_cpu(x, w_packed, config):
    _check_packed_operands(x, w_packed, config)
    return _cpu_swiglu(x, *unpack_gate_up(w_packed, layout="interleaved"))


def _swiglu_dual_cpu(x, w_gate, w_up, config):
    _check_dual_operands(x, w_gate, w_up, config)
    return _cpu_swiglu(x, w_gate, w_up)


OPS_LIBRARY.impl("swiglu_packed", _swiglu_packed_cpu, "CPU")
OPS_LIBRARY.impl("swiglu_dual", _swiglu_dual_cpu, "CPU")


# every operator whose CUDA kernel the operator library registers (csrc/torch/register.cpp)
CUDA_OPERATORS = ("swiglu_packed", "swiglu_dual", *training_ops.NAMES, *fp8_ops.NAMES, *grouped_ops.NAMES,
                  *routing_ops.NAMES)
cuda_kernels_from_library("swiglu_packed", "swiglu_dual")


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:-1])  # x and the weight(s); config is not a tensor


def _swiglu_packed_backward(ctx, dy):
    x, w_packed = ctx.saved_tensors
    return (*autograd.packed_backward(dy, x, w_packed, ctx.needs_input_grad[:2]), None)


def _swiglu_dual_backward(ctx, dy):
    x, w_gate, w_up = ctx.saved_tensors
    return (*autograd.dual_backward(dy, x, w_gate, w_up, ctx.needs_input_grad[:3]), None)


torch.library.register_autograd("fused_swiglu::swiglu_packed", _swiglu_packed_backward, setup_context=_setup_context)
torch.library.register_autograd("fused_swiglu::swiglu_dual", _swiglu_dual_backward, setup_context=_setup_context)
