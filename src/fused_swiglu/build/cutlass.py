"""CUTLASS headers, from the ``nvidia-cutlass`` wheel (its ``cutlass_library`` package)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from ..errors import BuildError

PACKAGE = "nvidia-cutlass"
_HINT = "install it with `pip install nvidia-cutlass==4.2.0.0`"


def package_dir() -> Path:
    """Directory of the installed ``cutlass_library`` package.

    Raises:
        BuildError: nvidia-cutlass is not installed.
    """
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise BuildError(f"{PACKAGE} is not installed, and its CUTLASS headers are needed to build; {_HINT}.")
    return Path(spec.origin).parent


def include_dirs() -> list[Path]:
    """``<cutlass_library>/source/include`` and ``<cutlass_library>/source/tools/util/include``.

    Raises:
        BuildError: nvidia-cutlass missing or without its headers.
    """
    source = package_dir() / "source"
    dirs = [source / "include", source / "tools" / "util" / "include"]
    if not (dirs[0] / "cutlass" / "cutlass.h").is_file():
        raise BuildError(f"{PACKAGE} at {package_dir()} has no CUTLASS headers under {dirs[0]}; {_HINT}.")
    return dirs


def version() -> str:
    """Installed nvidia-cutlass version (part of the cache key)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError as e:
        raise BuildError(f"{PACKAGE} is not installed; {_HINT}.") from e
