"""``fused_swiglu.fp8.modules``: an import path of the model patch's FP8 body, kept for code that imports
from it. Its names live in :mod:`fused_swiglu.patch.fp8`."""

from __future__ import annotations

from ..patch.fp8 import FusedFP8SwiGLUForward, is_fp8_block, is_fp8_linear, skip_reason

__all__ = ["FusedFP8SwiGLUForward", "is_fp8_block", "is_fp8_linear", "skip_reason"]
