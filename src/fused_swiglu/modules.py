"""``fused_swiglu.modules``: an import path of the model patch, kept for code that imports from it. Its
names live in the patch package, :mod:`fused_swiglu.patch`."""

from __future__ import annotations

from .patch import (EXPERTS_NOTE, ROOT_NAME, FusedSwiGLUForward, ProbedSwiGLUForward, block_reason, forward_reason,
                    fuse_swiglu_mlps, readable, skip_reason, unfuse_swiglu_mlps)

__all__ = ["fuse_swiglu_mlps", "unfuse_swiglu_mlps", "block_reason", "forward_reason", "skip_reason", "readable",
           "ROOT_NAME", "EXPERTS_NOTE", "FusedSwiGLUForward", "ProbedSwiGLUForward"]
