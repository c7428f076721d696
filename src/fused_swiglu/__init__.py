"""fused_swiglu: fused GEMM + SwiGLU for NVIDIA Hopper (sm_90a).

``y = silu(x @ W_gate^T) * (x @ W_up^T)`` in one kernel, fp32 accumulation, one rounding.

The public names are imported on first use (PEP 562), so that ``import fused_swiglu`` and the
``fused-swiglu`` command's argument parsing do not load PyTorch; ``from fused_swiglu import swiglu``
loads it and registers the operators (``torch.ops.fused_swiglu``).
"""

from __future__ import annotations

import importlib

from ._version import __version__

# public name -> the submodule that defines it
_EXPORTS = {
    "swiglu": ".functional", "swiglu_packed": ".functional",
    "swiglu_mlp": ".mlp", "swiglu_mlp_packed": ".mlp",
    "pack_gate_up": ".weights", "unpack_gate_up": ".weights",
    "fuse_swiglu_mlps": ".patch", "unfuse_swiglu_mlps": ".patch",
    "swiglu_packed_fp8": ".fp8", "swiglu_fp8": ".fp8",
    "fused_backend": ".compile_fusion",
    "grouped_swiglu": ".grouped",
    "swiglu_experts": ".experts", "routed_swiglu": ".experts",
    "register_experts_implementation": ".hf_experts",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'fused_swiglu' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names, the submodules imported so far and the module's own dunders; not the names this
    file imports for itself (``annotations``, ``importlib``)."""
    return sorted({*(n for n in globals() if n not in ("annotations", "importlib")), *_EXPORTS})
