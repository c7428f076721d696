"""The methods the benchmark compares, built for one shape over rotated input sets.

* ``eager``: ``silu(x @ Wg.T) * (x @ Wu.T)``, PyTorch's unfused path (3 kernels + 2 GEMMs).
* ``cublas_gemm``: one ``x @ W.T`` GEMM over the (2I, H) gate+up weight, no activation: the
  same FLOPs as the fused kernels, the cuBLAS yardstick.
* ``torch_compile``: ``torch.compile`` of eager (default mode, dynamic=False), compiled once per
  shape before timing.
* ``fused_packed``: :func:`fused_swiglu.swiglu_packed` on pre-packed (interleaved) weights
  (the packed kernel: one GEMM + SwiGLU epilogue).
* ``fused_dual``: :func:`fused_swiglu.swiglu` with ``kernel="dual"`` (the dual kernel: dual GEMM).
* ``fused_packed_promoted``, ``fused_dual_promoted``: the same with ``accumulation="promoted"``.
* ``quack``: quack-kernels' ``gemm_gated(x, B, activation="swiglu", store_preact=False,
  tuned=False)`` (a CuTe DSL GEMM with a SwiGLU epilogue; B = (H, 2I) with gate and up columns
  interleaved one by one), an optional peer: it runs only where the ``quack-kernels`` package
  imports (:func:`peer_problem`), and its first call on a shape compiles its kernel (done in the
  output check, before timing).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..functional import swiglu, swiglu_packed
from ..reference import swiglu_eager
from ..weights import pack_gate_up
from .defaults import KERNEL_METHODS as METHODS

# Peers from other packages: method -> (module the call imports, distribution to install)
OPTIONAL_PEERS = {"quack": ("quack.gemm_interface", "quack-kernels")}
# fused method -> (kernel, accumulation)
FUSED_KERNEL = {
    "fused_packed": ("packed", "fast"),
    "fused_dual": ("dual", "fast"),
    "fused_packed_promoted": ("packed", "promoted"),
    "fused_dual_promoted": ("dual", "promoted"),
}


@dataclass
class InputSet:
    x: torch.Tensor  # (M, H)
    w_cat: torch.Tensor  # (2I, H) = [W_gate; W_up]
    w_packed: torch.Tensor  # (2I, H) interleaved
    I: int
    w_alternating: torch.Tensor | None = None  # (2I, H): gate row i at 2i, up row i at 2i + 1 (quack)

    @property
    def w_gate(self) -> torch.Tensor:  # (I, H) view
        return self.w_cat[: self.I]

    @property
    def w_up(self) -> torch.Tensor:  # (I, H) view
        return self.w_cat[self.I :]


def make_input_set(M: int, H: int, I: int, dtype: torch.dtype, device: torch.device,
                   alternating: bool = False) -> InputSet:
    """x ~ N(0, 1), weights ~ N(0, 1/H) (unit-variance gate/up pre-activations); ``alternating``
    also keeps the weights with gate and up rows alternating one by one (the ``quack`` method)."""
    x = torch.randn(M, H, device=device, dtype=torch.float32).to(dtype)
    w_cat = (torch.randn(2 * I, H, device=device, dtype=torch.float32) * H**-0.5).to(dtype)
    w_packed = pack_gate_up(w_cat[:I], w_cat[I:])
    w_alt = alternate_rows(w_cat[:I], w_cat[I:]) if alternating else None
    return InputSet(x, w_cat, w_packed, I, w_alt)


def bytes_read(M: int, H: int, I: int, dtype: torch.dtype) -> int:
    """Bytes one call reads: x and both weights."""
    return (M * H + 2 * I * H) * torch.finfo(dtype).bits // 8


def bytes_held(M: int, H: int, I: int, dtype: torch.dtype, alternating: bool = False) -> int:
    """Bytes one input set keeps on the device: x, both weight layouts (three with
    ``alternating``) and an output."""
    layouts = 3 if alternating else 2
    return (M * H + 2 * layouts * I * H + 2 * M * I) * torch.finfo(dtype).bits // 8


@functools.lru_cache(maxsize=None)
def peer_problem(method: str) -> str | None:
    """Why the optional peer ``method`` (:data:`OPTIONAL_PEERS`) cannot run in this process, as a
    sentence, or None if it can (and for every method that is not an optional peer). The import is
    tried once per process: the CLI, the benchmark's defaults and its checks ask again."""
    if method not in OPTIONAL_PEERS:
        return None
    module, dist = OPTIONAL_PEERS[method]
    try:
        importlib.import_module(module)
    except Exception as e:  # ImportError, or whatever the package's import raises on this machine
        return (f"{method} needs the {dist} package (pip install {dist}, or this package's [peers] extra); "
                f"importing {module} failed: {type(e).__name__}: {e}")
    return None


def default_methods() -> list[str]:
    """Every method of :data:`METHODS` that can run here: the optional peers only where their
    package imports."""
    return [method for method in METHODS if peer_problem(method) is None]


def alternate_rows(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """(I, H) gate and up weights -> (2I, H) with gate row i at row 2i and up row i at 2i + 1."""
    return torch.stack((w_gate, w_up), dim=1).reshape(2 * w_gate.shape[0], w_gate.shape[1])


def quack_swiglu(x: torch.Tensor, w_alternating: torch.Tensor) -> torch.Tensor:
    """The ``quack`` method: (M, H) x and :func:`alternate_rows` weights -> (M, I) in x's dtype."""
    from quack.gemm_interface import gemm_gated

    # B = (H, 2I): column 2i gate i, column 2i + 1 up i, the pairing gemm_gated's SwiGLU expects
    return gemm_gated(x, w_alternating.t(), activation="swiglu", store_preact=False, tuned=False)[1]


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
        elif method == "quack":
            if any(s.w_alternating is None for s in sets):
                raise ValueError("quack: the input sets need make_input_set(..., alternating=True)")
            calls[method] = [lambda s=s: quack_swiglu(s.x, s.w_alternating) for s in sets]
        else:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    return calls
