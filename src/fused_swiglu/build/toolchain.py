"""Finding nvcc and reading its version.

Search order: ``FUSED_SWIGLU_NVCC``, ``$CUDA_HOME/bin/nvcc``, ``nvcc`` on PATH, then the PyPI
``nvidia-cuda-nvcc`` wheel (``nvidia/cu13/bin/nvcc`` or ``nvidia/cuda_nvcc/bin/nvcc`` in
site-packages). The first nvcc >= 12.3 wins: sm_90a ``wgmma`` needs CUDA 12.3 or newer.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .. import env
from ..errors import BuildError

MIN_VERSION = (12, 3)
INSTALL_HINT = ('install one with `pip install "fused-swiglu[cuda]"` (`pip install -e ".[cuda]"` in a checkout) or a '
                'CUDA toolkit >= 12.3')
_WHEEL_NVCC = ("cu13/bin/nvcc", "cu12/bin/nvcc", "cuda_nvcc/bin/nvcc")
_WHEEL_INCLUDE = ("cu13/include", "cu12/include", "cuda_runtime/include", "cuda_cccl/include")
_WHEEL_LIB = ("cu13/lib", "cu13/lib64", "cu12/lib", "cuda_runtime/lib")


@dataclass(frozen=True)
class Toolchain:
    """An nvcc found on this machine.

    nvcc: path; version: (major, minor); version_text: full ``nvcc --version`` output (part of the
    cache key); source: how it was found; include_dirs / lib_dirs: extra ``-I`` / ``-L`` for
    toolchains from PyPI wheels, whose headers and libraries live beside nvcc's own tree.
    """

    nvcc: Path
    version: tuple[int, int]
    version_text: str
    source: str
    include_dirs: tuple[Path, ...] = field(default=())
    lib_dirs: tuple[Path, ...] = field(default=())


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from ``nvcc --version`` output (``... release 13.0, V13.0.88``), or None."""
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _wheel_roots() -> list[Path]:
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def candidates() -> list[tuple[str, Path]]:
    """(how found, path) of every nvcc to try, in search order; paths may not exist."""
    out: list[tuple[str, Path]] = []
    explicit = env.nvcc()
    if explicit:
        out.append(("FUSED_SWIGLU_NVCC", Path(explicit)))
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        out.append(("CUDA_HOME", Path(cuda_home) / "bin" / "nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        out.append(("PATH", Path(on_path)))
    for root in _wheel_roots():
        for rel in _WHEEL_NVCC:
            out.append(("nvidia-cuda-nvcc wheel", root / rel))
    return out


def _wheel_dirs(rels: tuple[str, ...]) -> tuple[Path, ...]:
    return tuple(root / rel for root in _wheel_roots() for rel in rels if (root / rel).is_dir())


def version_text(nvcc: Path) -> str:
    """Output of ``nvcc --version``. Raises BuildError if it cannot run."""
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot run {nvcc} --version: {e}") from e
    if proc.returncode != 0:
        raise BuildError(f"{nvcc} --version exited with status {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def find_nvcc() -> Toolchain:
    """The first nvcc >= 12.3 in the search order.

    Raises:
        BuildError: ``FUSED_SWIGLU_NVCC`` names a missing file or anything but nvcc >= 12.3, or
            no nvcc >= 12.3 was found (one sentence saying what to install).
    """
    too_old: list[str] = []
    for source, path in candidates():
        if not path.is_file():
            if source == "FUSED_SWIGLU_NVCC":
                raise BuildError(f"FUSED_SWIGLU_NVCC points at {path}, which is not a file.")
            continue
        try:
            text = version_text(path)
        except BuildError as e:
            if source == "FUSED_SWIGLU_NVCC":
                raise BuildError(f"FUSED_SWIGLU_NVCC points at {path}, which does not run as nvcc: {e}") from e
            too_old.append(f"{path} (does not run)")
            continue
        version = parse_version(text)
        if version is None or version < MIN_VERSION:
            found = "unreadable version" if version is None else f"{version[0]}.{version[1]}"
            if source == "FUSED_SWIGLU_NVCC":  # named explicitly: never silently replaced by another nvcc
                raise BuildError(
                    f"FUSED_SWIGLU_NVCC points at {path}, which is not nvcc >= 12.3 ({found}); "
                    f"unset it or {INSTALL_HINT}."
                )
            too_old.append(f"{path} ({found})")
            continue
        wheel = source.endswith("wheel")
        return Toolchain(
            nvcc=path,
            version=version,
            version_text=text,
            source=source,
            include_dirs=_wheel_dirs(_WHEEL_INCLUDE) if wheel else (),
            lib_dirs=_wheel_dirs(_WHEEL_LIB) if wheel else (),
        )
    if too_old:
        raise BuildError(
            f"nvcc >= 12.3 (needed for sm_90a wgmma) was not found, only {', '.join(too_old)}; {INSTALL_HINT}."
        )
    raise BuildError(
        "nvcc was not found (searched FUSED_SWIGLU_NVCC, $CUDA_HOME/bin, PATH and the "
        f"nvidia-cuda-nvcc wheel); {INSTALL_HINT}."
    )
