"""The build cache: one directory per (sources, flags, nvcc, CUTLASS, ABI) key.

Layout::

    <cache_dir>/<key[:16]>/libfused_swiglu.so
    <cache_dir>/<key[:16]>/build.json      key inputs, ptxas resource lines per kernel, timestamp
    <cache_dir>/<key[:16]>.lock            held while checking, building and installing

A build runs in a temporary directory inside ``<cache_dir>`` and is installed with one
``os.replace`` (atomic rename), under a file lock: concurrent processes (e.g. ranks of one job)
wait for the first builder and then load its library; none sees a half-written one.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from filelock import FileLock, Timeout

from .. import env
from .._lib import ABI_VERSION
from ..errors import BuildError
from . import compile as nvcc_compile
from . import cutlass, sources, toolchain

BUILD_INFO = "build.json"


def compute_key(
    files: Iterable[tuple[str, bytes]],
    flags: Sequence[str],
    nvcc_version_text: str,
    cutlass_version: str,
    abi_version: int,
) -> str:
    """sha256 hex digest over every (relative path, content) pair, the flags, the full
    ``nvcc --version`` text, the nvidia-cutlass version and the ABI version.

    Each field is length-prefixed so that no two different inputs hash the same stream.
    """
    h = hashlib.sha256()

    def put(tag: str, data: bytes) -> None:
        h.update(f"{tag}:{len(data)}:".encode())
        h.update(data)

    for rel, content in sorted(files):
        put("path", rel.encode())
        put("file", content)
    for flag in flags:
        put("flag", flag.encode())
    put("nvcc", nvcc_version_text.encode())
    put("cutlass", cutlass_version.encode())
    put("abi", str(abi_version).encode())
    return h.hexdigest()


def read_files(root: Path) -> list[tuple[str, bytes]]:
    return [(rel.as_posix(), (root / rel).read_bytes()) for rel in sources.all_files(root)]


class _Inputs:
    """Everything the key is computed from, gathered once."""

    def __init__(self) -> None:
        self.csrc = sources.csrc_dir()
        self.files = read_files(self.csrc)
        self.toolchain = toolchain.find_nvcc()
        self.cutlass_version = cutlass.version()
        self.key = compute_key(
            self.files, nvcc_compile.NVCC_FLAGS, self.toolchain.version_text, self.cutlass_version, ABI_VERSION
        )
        self.dir = env.cache_dir() / self.key[:16]
        self.library = self.dir / nvcc_compile.LIB_NAME


def cached_library() -> Path | None:
    """Path of the library for the current inputs if it is already built; None otherwise
    (including when sources, nvcc or nvidia-cutlass are missing)."""
    try:
        inputs = _Inputs()
    except BuildError:
        return None
    return inputs.library if inputs.library.is_file() else None


def ensure_built(force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Path of ``libfused_swiglu.so`` for the current sources, nvcc, flags, CUTLASS and ABI;
    builds it into the cache first if missing (or if ``force``).

    Args:
        force: rebuild even if a cached library exists.
        log: called with one line per build step (None: silent unless FUSED_SWIGLU_VERBOSE).

    Raises:
        BuildError: sources, nvcc >= 12.3 or nvidia-cutlass missing; a compile or link failed;
            ptxas reported C7510 or spills; the cache directory cannot be created or written.
    """
    if log is None and env.verbose():
        import sys

        def log(line: str) -> None:
            print(f"fused_swiglu: {line}", file=sys.stderr, flush=True)

    inputs = _Inputs()
    if inputs.library.is_file() and not force:
        if log:
            log(f"up to date: the cache holds the library of these sources and this toolchain (key {inputs.key[:16]})")
        return inputs.library
    root = inputs.dir.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(root / f"{inputs.key[:16]}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:  # another process is building this library: say so, then wait for it
            message = (f"waiting for another process to finish building the kernel library (lock "
                       f"{lock.lock_file}); a full build takes 15-40 minutes on 2 CPU cores")
            if log:
                log(message)
            else:
                warnings.warn(f"fused_swiglu: {message}", stacklevel=2)
            lock.acquire()
        try:
            if inputs.library.is_file() and not force:
                return inputs.library  # another process built it while we waited
            if log is None:  # a first use that builds: say why the call takes minutes
                warnings.warn(f"fused_swiglu: {_build_notice(inputs)}", stacklevel=2)
            _remove_stale_build_dirs(root, inputs.key[:16])
            _build_and_install(inputs, log)
        finally:
            lock.release()
    except OSError as e:
        raise BuildError(
            f"the build cache directory {root} cannot be used ({e}); set FUSED_SWIGLU_CACHE_DIR to a "
            "writable directory."
        ) from e
    return inputs.library


def _remove_stale_build_dirs(root: Path, key16: str) -> None:
    """Remove the temporary folders of earlier builds of this key that were killed before they could
    clean up (SIGKILL, or SIGTERM with Python's default handler). Called with the key's lock held,
    so no live build owns them."""
    for stale in root.glob(f".{key16}-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def _build_notice(inputs: _Inputs) -> str:
    """The one warning of a build that no log follows (a first use from Python, not the CLI)."""
    count = len(sources.cuda_sources(inputs.csrc))
    return (
        f"compiling the kernel library ({count} CUDA sources, {env.jobs()} parallel nvcc jobs) into "
        f"{inputs.dir}; this happens once per version and toolchain and takes minutes (15-40 on 2 CPU "
        "cores). `fused-swiglu build` does it ahead of time; FUSED_SWIGLU_VERBOSE=1 shows each step."
    )


def _build_and_install(inputs: _Inputs, log: Callable[[str], None] | None) -> None:
    root = inputs.dir.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{inputs.key[:16]}-", dir=root))
    try:
        start = time.monotonic()
        srcs = sources.cuda_sources(inputs.csrc)
        results = nvcc_compile.compile_all(
            inputs.csrc,
            srcs,
            tmp / "obj",
            inputs.toolchain,
            cutlass.include_dirs(),
            env.jobs(),
            log,
        )
        nvcc_compile.link(inputs.toolchain, [r.obj for r in results], tmp / nvcc_compile.LIB_NAME, log)
        shutil.rmtree(tmp / "obj")
        info = {
            "key": inputs.key,
            "abi_version": ABI_VERSION,
            "csrc": str(inputs.csrc),
            "files": {
                rel: hashlib.sha256(content).hexdigest() for rel, content in inputs.files
            },
            "flags": list(nvcc_compile.NVCC_FLAGS),
            "nvcc": str(inputs.toolchain.nvcc),
            "nvcc_version": inputs.toolchain.version_text.strip().splitlines()[-1:],
            "nvidia_cutlass": inputs.cutlass_version,
            "build_seconds": round(time.monotonic() - start, 1),
            "compile_seconds": {r.source.as_posix(): round(r.seconds, 1) for r in results},
            "ptxas": {
                r.source.as_posix(): nvcc_compile.parse_resource_usage(r.log) for r in results
            },
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
        if inputs.dir.exists():  # forced rebuild: move the old one aside, then drop it
            old = Path(tempfile.mkdtemp(prefix=f".{inputs.key[:16]}-old-", dir=root))
            os.replace(inputs.dir, old / "lib")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, inputs.dir)
        if log:
            log(f"installed {inputs.library}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_build_info(library: Path) -> dict | None:
    """The build.json beside a cached library, or None."""
    path = library.parent / BUILD_INFO
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
