"""The methods the benchmark compares, built for one shape over rotated input sets.

* ``eager``: ``silu(x @ Wg.T) * (x @ Wu.T)``, PyTorch's unfused path (3 kernels + 2 GEMMs).
* ``cublas_gemm``: one ``x @ W.T`` GEMM over the (2I, H) gate+up weight, no activation: the
  same FLOPs as the fused kernels, the cuBLAS yardstick.
* ``torch_compile``: ``torch.compile`` of eager (default mode, dynamic=False), compiled once per
  shape before timing.
* ``fused_evt``: :func:`fused_swiglu.swiglu_packed` on pre-packed (interleaved) weights
  (Kernel-2: one GEMM + SwiGLU epilogue).
* ``fused_dual``: :func:`fused_swiglu.swiglu` with ``kernel="dual"`` (Kernel-1: dual GEMM).
* ``fused_evt_promoted``, ``fused_dual_promoted``: the same with ``accumulation="promoted"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..functional import swiglu, swiglu_packed
from ..reference import swiglu_eager
from ..weights import pack_gate_up

METHODS = ("eager", "cublas_gemm", "torch_compile", "fused_evt", "fused_dual", "fused_evt_promoted",
           "fused_dual_promoted")
# fused method -> (kernel, accumulation)
FUSED_KERNEL = {
    "fused_evt": ("packed", "fast"),
    "fused_dual": ("dual", "fast"),
    "fused_evt_promoted": ("packed", "promoted"),
    "fused_dual_promoted": ("dual", "promoted"),
}


@dataclass
class InputSet:
    x: torch.Tensor  # (M, H)
    w_cat: torch.Tensor  # (2I, H) = [W_gate; W_up]
    w_packed: torch.Tensor  # (2I, H) interleaved
    I: int

    @property
    def w_gate(self) -> torch.Tensor:  # (I, H) view
        return self.w_cat[: self.I]

    @property
    def w_up(self) -> torch.Tensor:  # (I, H) view
        return self.w_cat[self.I :]


def make_input_set(M: int, H: int, I: int, dtype: torch.dtype, device: torch.device) -> InputSet:
    """x ~ N(0, 1), weights ~ N(0, 1/H) (unit-variance gate/up pre-activations)."""
    x = torch.randn(M, H, device=device, dtype=torch.float32).to(dtype)
    w_cat = (torch.randn(2 * I, H, device=device, dtype=torch.float32) * H**-0.5).to(dtype)
    w_packed = pack_gate_up(w_cat[:I], w_cat[I:])
    return InputSet(x, w_cat, w_packed, I)


def bytes_read(M: int, H: int, I: int, dtype: torch.dtype) -> int:
    """Bytes one call reads: x and both weights."""
    return (M * H + 2 * I * H) * torch.finfo(dtype).bits // 8


def bytes_held(M: int, H: int, I: int, dtype: torch.dtype) -> int:
    """Bytes one input set keeps on the device: x, both weight layouts and an output."""
    return (M * H + 4 * I * H + 2 * M * I) * torch.finfo(dtype).bits // 8


def fused_call(method: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The public call a fused method times: ``f(x, w_gate, w_up, w_packed) -> y`` (see
    :data:`FUSED_KERNEL`), on the CUDA kernels. Shared by the benchmark and ``accuracy``."""
    kernel, acc = FUSED_KERNEL[method]
    if kernel == "packed":
        return lambda x, wg, wu, wp: swiglu_packed(x, wp, layout="interleaved", backend="cutlass", accumulation=acc)
    return lambda x, wg, wu, wp: swiglu(x, wg, wu, kernel="dual", backend="cutlass", accumulation=acc)


def build_calls(methods: list[str], sets: list[InputSet]) -> dict[str, list[Callable[[], object]]]:
    """Method name -> one zero-argument callable per input set.

    Raises:
        ValueError: an unknown method name.
    """
    calls: dict[str, list[Callable[[], object]]] = {}
    for method in methods:
        if method == "eager":
            calls[method] = [lambda s=s: swiglu_eager(s.x, s.w_gate, s.w_up) for s in sets]
        elif method == "cublas_gemm":
            calls[method] = [lambda s=s: torch.mm(s.x, s.w_cat.t()) for s in sets]
        elif method == "torch_compile":
            torch._dynamo.reset()  # one compile per shape; avoids the recompile limit across shapes
            compiled = torch.compile(swiglu_eager, dynamic=False)
            calls[method] = [lambda s=s: compiled(s.x, s.w_gate, s.w_up) for s in sets]
        elif method in FUSED_KERNEL:
            fn = fused_call(method)
            calls[method] = [lambda s=s, fn=fn: fn(s.x, s.w_gate, s.w_up, s.w_packed) for s in sets]
        else:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    return calls
