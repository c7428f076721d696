"""fused_swiglu: fused GEMM + SwiGLU for NVIDIA Hopper (sm_90a).

``y = silu(x @ W_gate^T) * (x @ W_up^T)`` in one kernel, fp32 accumulation, one rounding.
"""

from ._version import __version__
from .fp8 import swiglu_fp8, swiglu_packed_fp8
from .functional import swiglu, swiglu_packed
from .mlp import swiglu_mlp, swiglu_mlp_packed
from .modules import fuse_swiglu_mlps, unfuse_swiglu_mlps
from .weights import pack_gate_up, unpack_gate_up

__all__ = [
    "__version__", "swiglu", "swiglu_packed", "swiglu_mlp", "swiglu_mlp_packed", "pack_gate_up", "unpack_gate_up",
    "fuse_swiglu_mlps", "unfuse_swiglu_mlps", "swiglu_packed_fp8", "swiglu_fp8",
]
