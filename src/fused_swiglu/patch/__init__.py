"""The model patch (:func:`fuse_swiglu_mlps`, :func:`unfuse_swiglu_mlps`): SwiGLU MLP blocks of a loaded
model run a fused forward in place.

* :mod:`.base`: what both bodies rely on: recognising SiLU, the hooks a fused forward would skip,
  recognising mixture-of-experts experts, the patched class a block takes (:func:`~.base.install`) and
  :class:`~.base.BlockPatch`, the base of both bodies.
* :mod:`.dense`: the 16-bit body (:class:`~.dense.FusedSwiGLUForward`), bf16 / fp16 blocks.
* :mod:`.fp8`: the FP8 body (:class:`~.fp8.FusedFP8SwiGLUForward`), transformers' fine-grained FP8 blocks.
* :mod:`.verify`: whether a block's own forward computes SwiGLU (by its class, else by a probe).
"""

from __future__ import annotations

from .dense import (ROOT_NAME, FusedSwiGLUForward, ProbedSwiGLUForward, block_reason, forward_reason,
                    fuse_swiglu_mlps, readable, skip_reason, unfuse_swiglu_mlps)
from .fp8 import FusedFP8SwiGLUForward

__all__ = ["fuse_swiglu_mlps", "unfuse_swiglu_mlps", "block_reason", "forward_reason", "skip_reason", "readable",
           "ROOT_NAME", "FusedSwiGLUForward", "ProbedSwiGLUForward", "FusedFP8SwiGLUForward"]
