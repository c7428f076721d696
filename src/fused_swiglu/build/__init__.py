"""Building the kernel library: nvcc discovery, CUTLASS headers, compile + link, cache.

``ensure_built()`` returns the path of ``libfused_swiglu.so`` for the current sources, toolchain and
flags, compiling it into the cache on first use. ``fused-swiglu build`` calls it ahead of time.
"""

from ..errors import BuildError
from .cache import cached_library, ensure_built

__all__ = ["BuildError", "cached_library", "ensure_built"]
