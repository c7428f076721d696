"""What the build makes: the core library and one shared object per kernel config.

* ``core``: ``libfused_swiglu.so`` from ``capi/fused_swiglu.cpp`` (the C ABI, the config registry
  and dispatch), ``capi/quantize_e4m3.cu`` (the per-token-group e4m3 quantization kernel) and
  ``capi/moe_layout.cu`` (the grouped kernels' routing layout).
* one per config ``<name>`` of ``capi/registry.inc``: ``libfsw_<name>.so`` from
  ``instantiations/<name>.cu`` and ``capi/driver_entry_points.cu``; the core library loads it on
  first use of that config (``fsw_load_config``).

Each unit is keyed by its own dependencies: its sources and every file under ``csrc/`` they include,
transitively, so that a header edit rebuilds only the units that include it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError

CORE = "core"
CORE_LIBRARY = "libfused_swiglu.so"
CORE_SOURCES = ("capi/fused_swiglu.cpp", "capi/quantize_e4m3.cu", "capi/moe_layout.cu")
CONFIG_SUPPORT_SOURCES = ("capi/driver_entry_points.cu",)
REGISTRY = "capi/registry.inc"
INCLUDE_DIRS = ("include", "capi")  # the -I folders under csrc, in nvcc's search order

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^">]+)[">]', re.M)
_CONFIG = re.compile(r"FSW_CONFIG\((\w+)\)")


@dataclass(frozen=True)
class Unit:
    """One shared object of the build: ``name`` (``"core"`` or a config name), its translation units
    (paths relative to ``csrc/``, POSIX form) and nvcc flags of its own (part of its key)."""

    name: str
    sources: tuple[str, ...]
    flags: tuple[str, ...] = ()

    @property
    def library(self) -> str:
        """The file name of the unit's shared object."""
        return CORE_LIBRARY if self.name == CORE else config_library(self.name)

    @property
    def is_core(self) -> bool:
        return self.name == CORE


def config_library(name: str) -> str:
    """``libfsw_<name>.so``: the file name of config ``name``'s shared object."""
    return f"libfsw_{name}.so"


def core() -> Unit:
    return Unit(CORE, CORE_SOURCES)


def config(name: str) -> Unit:
    return Unit(name, (f"instantiations/{name}.cu", *CONFIG_SUPPORT_SOURCES))


def config_names(csrc: Path) -> list[str]:
    """Every config of ``capi/registry.inc``, in its order (the core library's config indices).

    Raises:
        BuildError: the registry is missing.
    """
    try:
        text = (csrc / REGISTRY).read_text()
    except OSError as e:
        raise BuildError(f"the config registry {csrc / REGISTRY} cannot be read ({e})") from e
    return _CONFIG.findall(text)


def all_units(csrc: Path) -> list[Unit]:
    """The core library, then every config's library."""
    return [core(), *(config(name) for name in config_names(csrc))]


def _resolve(csrc: Path, including: Path, target: str) -> Path | None:
    """The file under ``csrc`` that ``#include`` of ``target`` in ``including`` reads, or None for a
    header from elsewhere (CUTLASS, CUDA, the C++ library)."""
    for base in (including.parent, *(csrc / d for d in INCLUDE_DIRS)):
        candidate = (base / target).resolve()
        if candidate.is_file() and csrc.resolve() in candidate.parents:
            return candidate
    return None


def dependencies(csrc: Path, unit: Unit) -> list[str]:
    """The unit's sources and the ``csrc`` files they include, transitively (sorted, relative, POSIX).

    Raises:
        BuildError: a source of the unit is missing.
    """
    root = csrc.resolve()
    todo = []
    for rel in unit.sources:
        path = root / rel
        if not path.is_file():
            raise BuildError(f"the source {rel} of {unit.name} is missing under {csrc}")
        todo.append(path)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for target in _INCLUDE.findall(path.read_text(errors="replace")):
            found = _resolve(root, path, target)
            if found is not None and found not in seen:
                todo.append(found)
    return sorted(p.relative_to(root).as_posix() for p in seen)
