"""The training kernels as operators (torch.library), called by :mod:`fused_swiglu.mlp_ops`.

``fused_swiglu::swiglu_dual_store(x, w_gate, w_up, config="") -> (y, gu)``
    x ``(M, H)``, w_gate and w_up ``(I, H)``; y ``(M, I)`` = ``silu(g) * u`` and gu ``(M, 2I)`` =
    ``[g | u]``, the pre-activations ``g = x w_gate^T`` and ``u = x w_up^T`` rounded once to x's dtype.
    CUDA: one launch of the dual kernel's store variant writes y, g and u from the same fp32 accumulators.
``fused_swiglu::swiglu_packed_store(x, w_packed, config="") -> (y, gu)``
    The same over the interleaved packed ``(2I, H)`` weight (:func:`fused_swiglu.weights.pack_gate_up`);
    the packed kernel's store variant.
``fused_swiglu::dswiglu(dz, w_down, gu, config="") -> dgu``
    dz ``(M, H)``, w_down ``(H, I)``, gu ``(M, 2I)`` = ``[g | u]``; dgu ``(M, 2I)`` = ``[dg | du]``, the
    gradients of ``y = silu(g) * u`` at ``dY = dz w_down``, computed from the fp32 dY and rounded once.
    CUDA: one GEMM with a dSwiGLU epilogue, so dY is never written.

Every output is new and contiguous, of the first operand's dtype. ``config``: ``""`` lets the config
choice pick (:func:`fused_swiglu.configs.resolve`), else a config name of that kernel and dtype
(``dual_store_*``, ``packed_store_*``, ``dswiglu_*``), optionally with its launch as
``<name>@<raster>:<swizzle>`` (:func:`fused_swiglu.catalog.split_config`). No autograd formula: the MLP operators of
:mod:`fused_swiglu.mlp_ops` differentiate through them.

CUDA kernels: C++ (``csrc/torch/training_ops.cpp``), as the inference operators' (:mod:`fused_swiglu.ops`):
bf16 / fp16, one CUDA device, H and I multiples of 8; operands TMA cannot read are copied once; M = 0
returns at once. CPU kernels: the same quantities with fp32 (float64 for float64 operands) PyTorch products
and the same roundings. Fake kernels: shapes, dtypes and contiguous strides (torch.compile). The CPU and
fake kernels raise ValueError / TypeError naming the argument; the CUDA kernels RuntimeError.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .configs import check_config
from .op_library import OPS_LIBRARY, cuda_kernels_from_library
from .reference import ieee_fp32_matmul
from .weights import unpack_gate_up

NAMES = ("swiglu_dual_store", "swiglu_packed_store", "dswiglu")  # operators whose CUDA kernels are C++
OPS_LIBRARY.define("swiglu_dual_store(Tensor x, Tensor w_gate, Tensor w_up, str config=\"\") -> (Tensor, Tensor)")
OPS_LIBRARY.define("swiglu_packed_store(Tensor x, Tensor w_packed, str config=\"\") -> (Tensor, Tensor)")
OPS_LIBRARY.define("dswiglu(Tensor dz, Tensor w_down, Tensor gu, str config=\"\") -> Tensor")
cuda_kernels_from_library(*NAMES)

swiglu_dual_store = torch.ops.fused_swiglu.swiglu_dual_store.default
swiglu_packed_store = torch.ops.fused_swiglu.swiglu_packed_store.default
dswiglu = torch.ops.fused_swiglu.dswiglu.default


def check_operands(op: str, H: int | None, I: int | None, shapes: dict[str, tuple[int | None, ...]],
                    **named: Tensor) -> None:
    """The checks of the training operators (``op`` names one in errors): every operand 2-D of
    ``shapes[arg]`` (None: any size), floating point, of the first operand's dtype
    and device; on CUDA bf16 / fp16 with H and I multiples of 8 (16-byte TMA rows).

    Raises:
        TypeError: a dtype (not floating point, not bf16 / fp16 on CUDA, or not the first operand's).
        ValueError: a rank or shape, a device, H or I not a multiple of 8 on CUDA.
    """
    first_arg, first = next(iter(named.items()))
    for arg, t in named.items():
        want = shapes[arg]
        if t.dim() != 2 or any(w is not None and w != n for w, n in zip(want, t.shape)):
            desc = ", ".join("?" if w is None else str(w) for w in want)
            raise ValueError(f"fused_swiglu::{op}: {arg} must be 2-D ({desc}); got {arg} of shape {tuple(t.shape)}")
        if not t.is_floating_point() or t.dtype != first.dtype:
            raise TypeError(f"fused_swiglu::{op}: {arg} must be a floating-point tensor of {first_arg}'s dtype "
                            f"{first.dtype}; got {arg}.dtype={t.dtype}")
        if t.device != first.device:
            raise ValueError(f"fused_swiglu::{op}: {arg} must be on {first_arg}'s device {first.device}; got {arg} "
                             f"on {t.device}")
    if first.is_cuda:
        if first.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"fused_swiglu::{op}: the CUDA kernels take torch.bfloat16 or torch.float16; got "
                            f"{first_arg}.dtype={first.dtype}")
        if H % 8 or H == 0 or I % 8:
            raise ValueError(f"fused_swiglu::{op}: H and I must be multiples of 8 (H > 0) for 16-byte TMA rows; got "
                             f"H={H}, I={I}")


def _dim(t: Tensor, d: int) -> int | None:
    return t.shape[d] if t.dim() == 2 else None


def check_dual_store(x: Tensor, w_gate: Tensor, w_up: Tensor, config: str = "", op: str = "swiglu_dual_store") -> None:
    """The operands of ``swiglu_dual_store`` (``op`` names the operator in errors); raises as the module says."""
    H, I = _dim(x, 1), _dim(w_gate, 0)
    check_operands(op, H, I, {"x": (None, None), "w_gate": (None, H), "w_up": (I, H)}, x=x, w_gate=w_gate, w_up=w_up)
    check_config("dual_store", config, x.dtype)


def check_packed_store(x: Tensor, w_packed: Tensor, config: str = "") -> None:
    """The operands of ``swiglu_packed_store``; raises as the module says."""
    H, rows = _dim(x, 1), _dim(w_packed, 0)
    if rows is not None and rows % 2:
        raise ValueError(f"fused_swiglu::swiglu_packed_store: w_packed must have an even number of rows (2I); got "
                         f"w_packed of shape {tuple(w_packed.shape)}")
    I = None if rows is None else rows // 2
    check_operands("swiglu_packed_store", H, I, {"x": (None, None), "w_packed": (None, H)}, x=x, w_packed=w_packed)
    check_config("packed_store", config, x.dtype)


def check_dswiglu(dz: Tensor, w_down: Tensor, gu: Tensor, config: str = "") -> None:
    """The operands of ``dswiglu``; raises as the module says."""
    M, H, I = _dim(dz, 0), _dim(dz, 1), _dim(w_down, 1)
    cols = None if I is None else 2 * I
    check_operands("dswiglu", H, I, {"dz": (None, None), "w_down": (H, None), "gu": (M, cols)},
                    dz=dz, w_down=w_down, gu=gu)
    check_config("dswiglu", config, dz.dtype)


def _accumulate(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _store_cpu(x: Tensor, w_gate: Tensor, w_up: Tensor) -> tuple[Tensor, Tensor]:
    acc = _accumulate(x.dtype)
    with ieee_fp32_matmul():
        g, u = x.to(acc) @ w_gate.to(acc).T, x.to(acc) @ w_up.to(acc).T
    return (F.silu(g) * u).to(x.dtype), torch.cat([g, u], dim=1).to(x.dtype)


def _dual_store_cpu(x, w_gate, w_up, config=""):
    check_dual_store(x, w_gate, w_up, config)
    return _store_cpu(x, w_gate, w_up)


def _packed_store_cpu(x, w_packed, config=""):
    check_packed_store(x, w_packed, config)
    return _store_cpu(x, *unpack_gate_up(w_packed, layout="interleaved"))


def _dswiglu_cpu(dz, w_down, gu, config=""):
    check_dswiglu(dz, w_down, gu, config)
    acc = _accumulate(dz.dtype)
    with ieee_fp32_matmul():
        dy = dz.to(acc) @ w_down.to(acc)
    I = w_down.shape[1]
    g, u = gu[:, :I].to(acc), gu[:, I:].to(acc)
    s = torch.sigmoid(g)
    return torch.cat([dy * u * (s * (1 + g * (1 - s))), dy * (g * s)], dim=1).to(dz.dtype)


OPS_LIBRARY.impl("swiglu_dual_store", _dual_store_cpu, "CPU")
OPS_LIBRARY.impl("swiglu_packed_store", _packed_store_cpu, "CPU")
OPS_LIBRARY.impl("dswiglu", _dswiglu_cpu, "CPU")


@torch.library.register_fake("fused_swiglu::swiglu_dual_store")
def _dual_store_fake(x, w_gate, w_up, config=""):
    check_dual_store(x, w_gate, w_up, config)
    M, I = x.shape[0], w_gate.shape[0]
    return x.new_empty((M, I)), x.new_empty((M, 2 * I))


@torch.library.register_fake("fused_swiglu::swiglu_packed_store")
def _packed_store_fake(x, w_packed, config=""):
    check_packed_store(x, w_packed, config)
    M, I = x.shape[0], w_packed.shape[0] // 2
    return x.new_empty((M, I)), x.new_empty((M, 2 * I))


@torch.library.register_fake("fused_swiglu::dswiglu")
def _dswiglu_fake(dz, w_down, gu, config=""):
    check_dswiglu(dz, w_down, gu, config)
    return dz.new_empty((dz.shape[0], 2 * w_down.shape[1]))
