"""Prebuilt libraries: a folder holding the core library, config libraries and the operator library.

Two places hold one: the folder of ``FUSED_SWIGLU_LIBRARY`` (a core library named by path, with
whatever ``libfsw_<name>.so`` and ``libfused_swiglu_torch.so`` lie beside it), and ``_prebuilt/``
inside the installed package, which a wheel built with ``FUSED_SWIGLU_PREBUILT=1`` carries (see
setup.py). A config that the folder lacks is compiled into the cache as usual, when nvcc is there.
"""

from __future__ import annotations

from pathlib import Path

from .. import env
from .units import CORE_LIBRARY

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "_prebuilt"


def core_library() -> Path | None:
    """``FUSED_SWIGLU_LIBRARY`` if set (whether or not it exists), else the package's prebuilt core
    library if the wheel carries one, else None."""
    explicit = env.library_path()
    if explicit is not None:
        return explicit
    bundled = PACKAGE_DIR / CORE_LIBRARY
    return bundled if bundled.is_file() else None


def directory() -> Path | None:
    """The folder of the prebuilt core library, or None when the cache serves everything."""
    core = core_library()
    return core.parent if core is not None else None
