"""Building the kernel libraries: nvcc discovery, CUTLASS headers, one nvcc per unit, the cache.

The core library (``libfused_swiglu.so``: the C ABI and the config registry) builds in seconds; each
kernel config is its own shared object (``libfsw_<name>.so``), compiled on the first call that needs
it (:func:`ensure_config`) or ahead of time by ``fused-swiglu build`` (:func:`ensure_built`).
"""

from ..errors import BuildError
from .cache import cached_library, ensure_built, ensure_config, ensure_core

__all__ = ["BuildError", "cached_library", "ensure_built", "ensure_config", "ensure_core"]
