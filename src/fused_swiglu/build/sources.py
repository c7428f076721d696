"""Where the sources (csrc/) are: the repository (editable install) or the wheel's package data.

``csrc/torch/`` holds the PyTorch operator library's source (built by :mod:`.torch_ops` against
PyTorch's stable ABI); everything else under ``csrc/`` is the kernel library's, and only that is part
of the kernel library's cache key.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BuildError

_MARKER = Path("include") / "fused_swiglu.h"
_HERE = Path(__file__).resolve()
REPO_CSRC = _HERE.parents[3] / "csrc"  # <repo>/src/fused_swiglu/build/sources.py -> <repo>/csrc
PACKAGE_CSRC = _HERE.parents[1] / "_csrc"  # copied into the wheel by setup.py


def csrc_dir() -> Path:
    """The csrc/ directory to build from: ``<repo>/csrc`` first, then ``fused_swiglu/_csrc``.

    Raises:
        BuildError: neither holds ``include/fused_swiglu.h``.
    """
    for candidate in (REPO_CSRC, PACKAGE_CSRC):
        if (candidate / _MARKER).is_file():
            return candidate
    raise BuildError(
        f"the CUDA sources were not found (looked for {REPO_CSRC / _MARKER} and "
        f"{PACKAGE_CSRC / _MARKER}); install fused-swiglu from its repository (`pip install -e .`) "
        "or from a wheel or sdist that includes csrc/."
    )


TORCH_OPS_DIR = "torch"  # csrc/torch: the operator library, not the kernel library


def all_files(root: Path) -> list[Path]:
    """Every regular file of the kernel library under ``root`` (sorted, relative), skipping hidden
    and cache entries and the operator library's ``torch/`` folder."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if rel.parts[0] == TORCH_OPS_DIR:
            continue
        if p.is_file():
            out.append(rel)
    return out


def cuda_sources(root: Path) -> list[Path]:
    """The translation units: every ``*.cu`` under ``root`` (sorted, relative)."""
    return [rel for rel in all_files(root) if rel.suffix == ".cu"]
