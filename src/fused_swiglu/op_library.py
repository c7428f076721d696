"""The ``fused_swiglu`` operator namespace (torch.library): the one ``DEF`` library on which every
operator's schema is defined (:mod:`fused_swiglu.ops`, :mod:`fused_swiglu.training_ops`,
:mod:`fused_swiglu.fp8`), kept for the life of the process, and the loader of their C++ CUDA kernels.

Until the operator library (``libfused_swiglu_torch.so``, ``csrc/torch/``) is loaded, the CUDA key of
each operator it implements holds a Python kernel that loads it (building the libraries on first use),
drops every such Python kernel and calls the operator again; the C++ registration then stands alone,
so a warm call never runs Python. Each module that defines such operators gives them that kernel
(:func:`cuda_kernels_from_library`) when it is imported, so the first CUDA call of any operator, in any
import order, reaches its C++ kernel.
"""

from __future__ import annotations

import torch

OPS_LIBRARY = torch.library.Library("fused_swiglu", "DEF")  # noqa: TOR901

_loaders: torch.library.Library | None = torch.library.Library("fused_swiglu", "IMPL")  # noqa: TOR901


def cuda_kernels_from_library(*names: str) -> None:
    """Give the operators ``names`` (defined on :data:`OPS_LIBRARY`, CUDA kernels in ``csrc/torch/``)
    the CUDA kernel that loads the operator library on first call. Nothing once it is loaded (its
    registration covers them)."""
    if _loaders is None:
        return
    for name in names:
        _loaders.impl(name, _load_and_call(name), "CUDA")


def _load_and_call(name: str):
    def load_and_call(*args):
        load()
        return getattr(torch.ops.fused_swiglu, name).default(*args)

    return load_and_call


def load() -> None:
    """Load and bind the operator library, once per process (:func:`fused_swiglu._lib.load_torch_ops`).
    Its registration covers every operator it implements, including those whose schema a module defines
    only later (PyTorch's dispatcher keeps a kernel registered before its schema); such a module then
    registers no loading kernel (:func:`cuda_kernels_from_library`).

    Raises:
        BuildError: a library could not be built or loaded; this PyTorch has no CUDA.
    """
    from . import _lib, _plans

    _lib.load_torch_ops(_plans.PLAN, drop_loaders)


def drop_loaders() -> None:
    """Unregister the loading CUDA kernels (just before the C++ registration replaces them)."""
    global _loaders
    if _loaders is not None:
        _loaders._destroy()
        _loaders = None
