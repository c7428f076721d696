"""torch.library custom ops around the kernels, with fake (meta) implementations.

Both ops take a 2-D ``x`` (M, H) and return a new contiguous (M, I) tensor of x's dtype; called
through the dispatcher (``torch.ops.fused_swiglu.*``, fake tensors included), they check their
operands' ranks, shapes and dtypes and raise ValueError / TypeError naming the argument (the
public functions check the same before they call them). ``config``
is a library config name, or ``""`` / ``"promoted"`` to let :func:`fused_swiglu.configs.select`
choose among the fast / promoted-accumulation configs. Inputs that
do not meet the TMA rules (unit column stride, row stride a multiple of 8 elements, 16-byte
aligned start) are copied once inside the op, where real pointers are known (so the ops stay
traceable by torch.compile). M == 0 returns at once without a launch.

The CPU registrations compute the same result with fp32 PyTorch matrix products and one rounding
(:func:`fused_swiglu.reference.swiglu_fp32_one_rounding`), so the ops can be traced and checked
on machines without a GPU.

Both ops are differentiable: their backward (:mod:`fused_swiglu.autograd`) recomputes the gate and
up products with PyTorch GEMMs and returns gradients for x and the weights (none for ``config``).
"""

from __future__ import annotations

import torch

from . import _lib, autograd, configs
from . import _validate as v
from ._validate import tma_ready
from .reference import swiglu_fp32_one_rounding
from .weights import unpack_gate_up


def _check_operands(op: str, **named: torch.Tensor) -> None:
    """x 2-D, and every operand floating point of x's dtype. The CUDA kernels take bf16 / fp16
    only (the library refuses other dtypes, naming x); the CPU kernels compute in fp32 and round
    once to any floating dtype, float64 included, as the autograd tests use them."""
    x = named["x"]
    if x.dim() != 2:
        raise ValueError(f"fused_swiglu::{op}: x must be 2-D (M, H); got x of shape {tuple(x.shape)}")
    for arg, t in named.items():
        if not t.is_floating_point():
            raise TypeError(f"fused_swiglu::{op}: {arg} must be a floating-point tensor; got {arg}.dtype={t.dtype}")
        if t.dtype != x.dtype:
            raise TypeError(f"fused_swiglu::{op}: {arg} must have x's dtype {x.dtype}; got {arg}.dtype={t.dtype}")


def _check_packed_operands(x: torch.Tensor, w_packed: torch.Tensor) -> None:
    _check_operands("swiglu_packed", x=x, w_packed=w_packed)
    v.check_packed(x, w_packed)


def _check_dual_operands(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> None:
    _check_operands("swiglu_dual", x=x, w_gate=w_gate, w_up=w_up)
    v.check_weight_pair(x, w_gate, w_up)


def _swiglu_packed_cuda(x: torch.Tensor, w_packed: torch.Tensor, config: str) -> torch.Tensor:
    """Kernel-2: ``y = swiglu(x @ W_packed^T)`` with W_packed interleaved (see weights.py).

    x: (M, H); w_packed: (2I, H); returns (M, I) contiguous, x.dtype.
    """
    M, H = x.shape
    I = w_packed.shape[0] // 2
    y = torch.empty((M, I), dtype=x.dtype, device=x.device)
    if M == 0 or I == 0:
        return y
    x, w_packed = tma_ready(x), tma_ready(w_packed)
    choice = configs.resolve("packed", config, M, I, H, x.dtype)
    _lib.run(choice.name, x, w_packed, None, y, choice.raster, choice.swizzle)
    return y


def _swiglu_packed_checked(x: torch.Tensor, w_packed: torch.Tensor, config: str) -> torch.Tensor:
    _check_packed_operands(x, w_packed)
    return _swiglu_packed_cuda(x, w_packed, config)


swiglu_packed = torch.library.custom_op("fused_swiglu::swiglu_packed", _swiglu_packed_checked, mutates_args=())


@swiglu_packed.register_fake
def _swiglu_packed_fake(x, w_packed, config):
    _check_packed_operands(x, w_packed)
    return x.new_empty((x.shape[0], w_packed.shape[0] // 2))


@swiglu_packed.register_kernel("cpu")
def _swiglu_packed_cpu(x, w_packed, config):
    _check_packed_operands(x, w_packed)
    w_gate, w_up = unpack_gate_up(w_packed, layout="interleaved")
    return swiglu_fp32_one_rounding(x, w_gate, w_up).contiguous()


def _swiglu_dual_cuda(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, config: str) -> torch.Tensor:
    """Kernel-1: ``y = silu(x @ W_gate^T) * (x @ W_up^T)`` as one dual GEMM.

    x: (M, H); w_gate, w_up: (I, H); returns (M, I) contiguous, x.dtype.
    """
    M, H = x.shape
    I = w_gate.shape[0]
    y = torch.empty((M, I), dtype=x.dtype, device=x.device)
    if M == 0 or I == 0:
        return y
    x, w_gate, w_up = tma_ready(x), tma_ready(w_gate), tma_ready(w_up)
    choice = configs.resolve("dual", config, M, I, H, x.dtype)
    _lib.run(choice.name, x, w_gate, w_up, y, choice.raster, choice.swizzle)
    return y


def _swiglu_dual_checked(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, config: str) -> torch.Tensor:
    _check_dual_operands(x, w_gate, w_up)
    return _swiglu_dual_cuda(x, w_gate, w_up, config)


swiglu_dual = torch.library.custom_op("fused_swiglu::swiglu_dual", _swiglu_dual_checked, mutates_args=())


@swiglu_dual.register_fake
def _swiglu_dual_fake(x, w_gate, w_up, config):
    _check_dual_operands(x, w_gate, w_up)
    return x.new_empty((x.shape[0], w_gate.shape[0]))


@swiglu_dual.register_kernel("cpu")
def _swiglu_dual_cpu(x, w_gate, w_up, config):
    _check_dual_operands(x, w_gate, w_up)
    return swiglu_fp32_one_rounding(x, w_gate, w_up).contiguous()


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:-1])  # x and the weight(s); config is not a tensor


def _swiglu_packed_backward(ctx, dy):
    x, w_packed = ctx.saved_tensors
    return (*autograd.packed_backward(dy, x, w_packed, ctx.needs_input_grad[:2]), None)


def _swiglu_dual_backward(ctx, dy):
    x, w_gate, w_up = ctx.saved_tensors
    return (*autograd.dual_backward(dy, x, w_gate, w_up, ctx.needs_input_grad[:3]), None)


swiglu_packed.register_autograd(_swiglu_packed_backward, setup_context=_setup_context)
swiglu_dual.register_autograd(_swiglu_dual_backward, setup_context=_setup_context)


# The CUDA implementation behind each op, for eager calls that skip the dispatcher
# (fused_swiglu.functional._call), whose operands the public functions have already checked.
IMPLS = {swiglu_packed: _swiglu_packed_cuda, swiglu_dual: _swiglu_dual_cuda}
