"""Building the PyTorch operator library ``libfused_swiglu_torch.so`` from ``csrc/torch/``.

It registers the CUDA kernels of the ``fused_swiglu::*`` operators and launches the kernel library
through its C ABI. It is compiled by the host C++ compiler (``CXX``, else ``c++``, ``g++``) against
PyTorch's stable C ABI with ``TORCH_TARGET_VERSION`` = :data:`TARGET_VERSION`, so one binary loads
into every PyTorch release from that one on; it takes seconds and needs no nvcc and no GPU.

Cache layout, beside the kernel library's (same locking and atomic install)::

    <cache_dir>/torch-<key[:16]>/libfused_swiglu_torch.so

The key covers the sources (``csrc/torch/`` and the kernel library's C headers,
``csrc/include/fused_swiglu.h`` and ``fused_swiglu/moe_layout.h``), the flags and the compiler's
``--version`` text. A prebuilt copy (:mod:`.prebuilt`) is loaded as is.

The library must use the process's shared C++ runtime (``libstdc++.so.6``, as PyTorch does): a
runtime linked into it (some toolchains link ``libstdc++`` statically, e.g. a GCC installed without a
shared ``libstdc++``) keeps locale and exception state of its own beside PyTorch's, and mixing the two
has ended processes on an error path. The link names the shared runtime explicitly and the built file
is checked (:func:`check_runtime`) before it is installed; a compiler whose library fails the check
is passed over for the next one (``$CXX``, then ``c++``, ``g++``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from .. import env
from ..errors import BuildError
from . import elf, sources

LIB_NAME = "libfused_swiglu_torch.so"
TARGET_VERSION = (2, 10)  # oldest PyTorch whose stable ABI has what the operators use (str arguments)
FLAGS: tuple[str, ...] = (
    "-std=c++17",
    "-O2",
    "-shared",
    "-fPIC",
    "-fvisibility=hidden",
    "-DUSE_CUDA",  # declares the shim's CUDA stream query (looked up at run time, see the source)
    "-DTORCH_TARGET_VERSION=0x%02x%02x000000000000" % TARGET_VERSION,
)
# after the sources, so ahead of the runtime the compiler driver adds by itself
LINK_FLAGS: tuple[str, ...] = ("-Wl,--push-state,-Bdynamic", "-lstdc++", "-Wl,--pop-state")
CXX_RUNTIME = "libstdc++.so.6"
TORCH_OPS = Path(sources.TORCH_OPS_DIR)
INCLUDE = Path("include")  # the kernel library's public headers: the operators include its C ABI from there
HEADER = INCLUDE / "fused_swiglu.h"  # the kernel library's C ABI, which the operators call
HEADERS = (HEADER, INCLUDE / "fused_swiglu" / "moe_layout.h")  # and the routing kernel's


def source_files(csrc: Path) -> list[Path]:
    """The operator library's translation units, ``csrc/torch/*.cpp``, relative to ``csrc``, sorted.

    Raises:
        BuildError: the folder holds none.
    """
    found = sorted(p.relative_to(csrc) for p in (csrc / TORCH_OPS).glob("*.cpp"))
    if not found:
        raise BuildError(f"the operator library's sources ({csrc / TORCH_OPS}/*.cpp) are missing")
    return found


def _key_files(csrc: Path) -> list[Path]:
    """Every file of ``csrc/torch`` (sources and headers) and the C ABI headers, relative to ``csrc``."""
    return [*sorted(p.relative_to(csrc) for p in (csrc / TORCH_OPS).iterdir() if p.is_file()), *HEADERS]


def compilers() -> list[str]:
    """The host C++ compilers to try, in order: ``$CXX``, then ``c++`` and ``g++`` on PATH (each once).

    Raises:
        BuildError: none found.
    """
    found = []
    cxx = os.environ.get("CXX")
    if cxx:
        found.append(cxx)
    for name in ("c++", "g++"):
        path = shutil.which(name)
        if path and all(os.path.realpath(path) != os.path.realpath(shutil.which(f) or f) for f in found):
            found.append(path)
    if not found:
        raise BuildError("no C++ compiler found for the operator library (set CXX, or install g++)")
    return found


def find_compiler() -> str:
    """The first of :func:`compilers`.

    Raises:
        BuildError: none found.
    """
    return compilers()[0]


def _torch_dirs() -> tuple[Path, Path]:
    import torch

    root = Path(torch.__file__).resolve().parent
    return root / "include", root / "lib"


def _compiler_version(cxx: str) -> str:
    try:
        proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"the C++ compiler {cxx} cannot be run: {e}") from e
    return proc.stdout


def _key(csrc: Path, cxx_version: str) -> str:
    h = hashlib.sha256()
    for rel in _key_files(csrc):
        data = (csrc / rel).read_bytes()
        h.update(f"{rel.as_posix()}:{len(data)}:".encode() + data)
    for part in (*FLAGS, *LINK_FLAGS, cxx_version):
        h.update(f"{len(part)}:{part}".encode())
    return h.hexdigest()


def prebuilt() -> Path | None:
    """``libfused_swiglu_torch.so`` in the prebuilt folder (beside ``FUSED_SWIGLU_LIBRARY``, or the
    wheel's ``_prebuilt/``), if there is one and it holds it."""
    from . import prebuilt as prebuilt_libraries

    folder = prebuilt_libraries.directory()
    if folder is None:
        return None
    candidate = folder / LIB_NAME
    return candidate if candidate.is_file() else None


def command(cxx: str, csrc: Path, out: Path) -> list[str]:
    """The compile-and-link command line (every source of :func:`source_files`)."""
    include, lib = _torch_dirs()
    units = [str(csrc / rel) for rel in source_files(csrc)]
    return [cxx, *FLAGS, f"-I{include}", f"-I{csrc / INCLUDE}", *units, "-o", str(out), f"-L{lib}", "-ltorch_cpu",
            *LINK_FLAGS]


def check_runtime(path: Path, cxx: str = "the C++ compiler") -> None:
    """Refuse an operator library that carries a C++ runtime of its own instead of linking
    ``libstdc++.so.6``.

    Raises:
        BuildError: ``path`` defines the C++ runtime's exception entry points, or does not name
            ``libstdc++.so.6`` among its needed libraries, or is not an ELF64 file.
    """
    try:
        needed, defined = elf.dynamic_info(path)
    except (OSError, ValueError) as e:
        raise BuildError(f"cannot read the operator library {path}: {e}") from e
    embedded = sorted(defined & {"__cxa_throw", "__cxa_allocate_exception", "__gxx_personality_v0"})
    if embedded or CXX_RUNTIME not in needed:
        what = f"defines {', '.join(embedded)}" if embedded else f"does not link {CXX_RUNTIME}"
        raise BuildError(
            f"the operator library {path} built by {cxx} {what}: it must use the shared C++ runtime "
            f"{CXX_RUNTIME}, as PyTorch does (a second, static copy beside PyTorch's breaks error "
            "messages and exceptions). Set CXX to a g++ or clang++ that links libstdc++ dynamically."
        )


def cache_path(cxx: str | None = None) -> Path:
    """Where the cache keeps the operator library of these sources and compiler ``cxx`` (default: the
    first of :func:`compilers`), built or not.

    Raises:
        BuildError: sources or compiler missing.
    """
    csrc = sources.csrc_dir()
    source_files(csrc)  # raises when they are missing
    key = _key(csrc, _compiler_version(cxx or find_compiler()))
    return env.cache_dir() / f"torch-{key[:16]}" / LIB_NAME


def ensure_built(force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Path of the operator library for these sources, built into the cache first if missing (or if
    ``force``) by the first of :func:`compilers` whose library uses the shared C++ runtime
    (:func:`check_runtime`; a compiler that links its own copy is passed over, with one warning); a
    prebuilt copy (:mod:`.prebuilt`) wins, checked the same way.

    Raises:
        BuildError: sources or compiler missing, a compile failed, every compiler's library carries its
            own C++ runtime, or the cache is not writable.
    """
    if not force and (found := prebuilt()) is not None:
        check_runtime(found)
        return found
    refused = []
    for cxx in compilers():
        try:
            return _ensure_built_with(cxx, force, log)
        except RuntimeMismatch as e:
            refused.append(str(e))
    raise BuildError("no C++ compiler here builds an operator library on the shared C++ runtime:\n" + "\n".join(refused))


class RuntimeMismatch(BuildError):
    """A compiler's operator library carries its own C++ runtime (:func:`check_runtime`)."""


def _ensure_built_with(cxx: str, force: bool, log: Callable[[str], None] | None) -> Path:
    target = cache_path(cxx)
    refused = target.parent.with_name(target.parent.name + ".refused")  # this compiler's check failed before
    if target.is_file() and not force:
        return target
    if refused.is_file() and not force:
        raise RuntimeMismatch(refused.read_text())
    csrc, root = sources.csrc_dir(), target.parent.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target.parent) + ".lock"):
            if target.is_file() and not force:
                return target
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.parent.name}-", dir=root))
            try:
                cmd = command(cxx, csrc, tmp / LIB_NAME)
                if log:
                    log(f"c++ {TORCH_OPS.as_posix()}/*.cpp" + (f": {shlex.join(cmd)}" if env.verbose() else ""))
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-30:])
                    raise BuildError(f"compiling the operator library failed ({shlex.join(cmd)}):\n{tail}")
                try:
                    check_runtime(tmp / LIB_NAME, cxx)
                except BuildError as e:
                    warnings.warn(f"fused_swiglu: {e} Trying the next compiler.", stacklevel=4)
                    refused.write_text(str(e))  # later processes go to the next compiler at once
                    raise RuntimeMismatch(str(e)) from None
                refused.unlink(missing_ok=True)
                os.chmod(tmp, 0o755)
                if target.parent.exists():
                    shutil.rmtree(target.parent)
                os.replace(tmp, target.parent)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise BuildError(
            f"the build cache directory {root} cannot be used ({e}); set FUSED_SWIGLU_CACHE_DIR to a "
            "writable directory."
        ) from e
    if log:
        log(f"installed {target}")
    return target
