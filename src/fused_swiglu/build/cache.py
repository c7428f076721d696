"""The build cache: one directory per unit (the core library, or one kernel config) and key.

Layout::

    <cache_dir>/core-<key16>/libfused_swiglu.so
    <cache_dir>/<config>-<key16>/libfsw_<config>.so
    <cache_dir>/<unit>-<key16>/build.json    key inputs, ptxas resource lines per kernel, timestamp
    <cache_dir>/<unit>-<key16>.lock          held while checking, building and installing

A unit's key is a sha256 over its dependencies (:func:`.units.dependencies`: its sources and the
``csrc`` headers they include), the nvcc flags, the full ``nvcc --version`` text, the nvidia-cutlass
version and the ABI version. A unit builds in a temporary directory inside ``<cache_dir>`` and is
installed with one ``os.replace`` (atomic rename), under its file lock: concurrent processes (e.g.
ranks of one job) wait for the first builder and then load its library; none sees a half-written
one, and a build killed mid-way leaves only a temporary folder that the next build of that unit
removes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from filelock import FileLock, Timeout

from .. import env
from .._abi import ABI_VERSION
from ..errors import BuildError
from . import compile as nvcc_compile
from . import cutlass, sources, toolchain, units

BUILD_INFO = "build.json"
Log = Callable[[str], None]


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


class Inputs:
    """What every unit's key shares (sources folder, nvcc, CUTLASS), gathered once.

    Raises:
        BuildError: sources, nvcc >= 12.3 or nvidia-cutlass missing.
    """

    def __init__(self) -> None:
        self.csrc = sources.csrc_dir()
        self.toolchain = toolchain.find_nvcc()
        self.cutlass_version = cutlass.version()
        self.root = env.cache_dir()
        self.flags = (*nvcc_compile.nvcc_flags(), *nvcc_compile.LINK_FLAGS)

    def plan(self, unit: units.Unit) -> "Planned":
        files = [(rel, (self.csrc / rel).read_bytes()) for rel in units.dependencies(self.csrc, unit)]
        key = compute_key(files, (*self.flags, *unit.flags), self.toolchain.version_text, self.cutlass_version,
                          ABI_VERSION)
        return Planned(self, unit, files, key, self.root / f"{unit.name}-{key[:16]}")


class Planned:
    """One unit with its dependencies' contents, key and cache directory."""

    def __init__(self, inputs: Inputs, unit: units.Unit, files: list[tuple[str, bytes]], key: str, directory: Path):
        self.inputs, self.unit, self.files, self.key, self.dir = inputs, unit, files, key, directory
        self.library = directory / unit.library
        self.tag = directory.name  # <unit>-<key16>: lock and temporary folders are named after it


def cached_library() -> Path | None:
    """Path of the core library for the current inputs if it is already built; None otherwise
    (including when sources, nvcc or nvidia-cutlass are missing)."""
    return cached(units.CORE)


def cached(name: str, inputs: Inputs | None = None) -> Path | None:
    """Path of unit ``name``'s library (``"core"`` or a config name) if the cache holds it for the
    current inputs (``inputs``: gathered now if None); None otherwise."""
    try:
        inputs = inputs or Inputs()
        planned = inputs.plan(units.core() if name == units.CORE else units.config(name))
    except BuildError:
        return None
    return planned.library if planned.library.is_file() else None


def _default_log(log: Log | None) -> Log | None:
    if log is None and env.verbose():
        import sys

        def log(line: str) -> None:
            print(f"fused_swiglu: {line}", file=sys.stderr, flush=True)

    return log


def ensure_config(name: str, log: Log | None = None, inputs: Inputs | None = None) -> Path:
    """Path of config ``name``'s library (``libfsw_<name>.so``), compiling that config alone into the
    cache first if it is missing (``inputs``: gathered now if None).

    Raises:
        BuildError: ``name`` is not in ``capi/registry.inc``; as :func:`ensure_built`.
    """
    nvcc_compile.allow_new_processes()
    inputs = inputs or Inputs()
    known = units.config_names(inputs.csrc)
    if name not in known:
        raise BuildError(f"config {name!r} is not in {units.REGISTRY}; known configs: {', '.join(known)}")
    return _ensure(inputs.plan(units.config(name)), False, _default_log(log), notice=True)


def ensure_core(log: Log | None = None) -> Path:
    """Path of the core library (``libfused_swiglu.so``), building it first if it is missing (seconds)."""
    nvcc_compile.allow_new_processes()
    inputs = Inputs()
    return _ensure(inputs.plan(units.core()), False, _default_log(log), notice=False)


def ensure_built(force: bool = False, log: Log | None = None, names: Sequence[str] | None = None) -> Path:
    """Build the core library and every config's library (or those of ``names``) that the cache
    lacks, ``FUSED_SWIGLU_JOBS`` nvcc processes at once; returns the core library's path.

    Args:
        force: rebuild even what the cache holds.
        log: called with one line per build step (None: silent unless FUSED_SWIGLU_VERBOSE).
        names: config names to build (None: all of ``capi/registry.inc``).

    Raises:
        BuildError: sources, nvcc >= 12.3 or nvidia-cutlass missing; an unknown config name; a compile
            or link failed; ptxas reported C7510 or spills; the cache directory cannot be used.
    """
    log = _default_log(log)
    nvcc_compile.allow_new_processes()
    inputs = Inputs()
    known = units.config_names(inputs.csrc)
    wanted = known if names is None else list(names)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise BuildError(f"unknown config name(s) {', '.join(unknown)}; known configs: {', '.join(known)}")
    core = inputs.plan(units.core())
    todo = [inputs.plan(units.config(n)) for n in wanted]
    if not force:
        todo = [p for p in todo if not p.library.is_file()]
    if todo and log is None:
        warnings.warn(f"fused_swiglu: {_build_notice(inputs, len(todo))}", stacklevel=2)
    _ensure(core, force, log, notice=False)
    done = [0]

    def one(planned: Planned) -> Path:
        path = _ensure(planned, force, log, notice=False)
        done[0] += 1
        if log:
            log(f"[{done[0]}/{len(todo)}] {planned.unit.name}")
        return path

    pool = ThreadPoolExecutor(max_workers=max(1, env.jobs()))
    futures = [pool.submit(one, p) for p in todo]
    try:
        for f in futures:
            f.result()
    except BaseException:  # a failed build, or the main thread interrupted (Ctrl-C, SIGTERM)
        # no new nvcc starts and lock waits give up, the running ones are killed; return at once
        nvcc_compile.stop_running_processes()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    if log and not todo:
        log(f"up to date: the cache holds all {len(wanted)} config libraries of these sources and this toolchain")
    return core.library


def _ensure(planned: Planned, force: bool, log: Log | None, notice: bool) -> Path:
    """Build and install one unit unless the cache holds it (``force``: rebuild), under its lock."""
    if planned.library.is_file() and not force:
        return planned.library
    root = planned.dir.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(root / f"{planned.tag}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:  # another process is building this unit: say so, then wait for it
            message = (f"waiting for another process to finish building {planned.unit.name} "
                       f"(lock {lock.lock_file})")
            if log:
                log(message)
            else:
                warnings.warn(f"fused_swiglu: {message}", stacklevel=3)
            _wait_for(lock, planned.unit.name)
        try:
            if planned.library.is_file() and not force:
                return planned.library  # another process built it while we waited
            if notice and log is None:  # a first use that builds: say why the call takes a while
                warnings.warn(f"fused_swiglu: {_config_notice(planned)}", stacklevel=3)
            _remove_stale_build_dirs(root, planned.tag)
            _build_and_install(planned, log)
        finally:
            lock.release()
    except OSError as e:
        raise BuildError(
            f"the build cache directory {root} cannot be used ({e}); set FUSED_SWIGLU_CACHE_DIR to a "
            "writable directory."
        ) from e
    return planned.library


def _wait_for(lock: FileLock, unit: str) -> None:
    """Acquire ``lock``, giving up when this process's build is being stopped (SIGTERM, Ctrl-C, a
    failed unit)."""
    while not nvcc_compile.STOPPING.is_set():
        try:
            lock.acquire(timeout=0.2)
        except Timeout:
            continue
        if not nvcc_compile.STOPPING.is_set():
            return
        lock.release()
    raise BuildError(f"stopped while waiting for another process to build {unit}")


def _remove_stale_build_dirs(root: Path, tag: str) -> None:
    """Remove the temporary folders of earlier builds of this unit and key that were killed before
    they could clean up (SIGKILL, or SIGTERM with Python's default handler). Called with the unit's
    lock held, so no live build owns them."""
    for stale in root.glob(f".{tag}-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def _build_notice(inputs: Inputs, count: int) -> str:
    """The one warning of an ahead-of-time build that no log follows."""
    return (
        f"compiling {count} kernel config libraries ({env.jobs()} parallel nvcc jobs) into {inputs.root}; "
        "each takes about a minute of one CPU core and is kept for this version and toolchain. "
        "FUSED_SWIGLU_VERBOSE=1 shows each step."
    )


def _config_notice(planned: Planned) -> str:
    """The one warning of a first use that compiles a config (no log follows)."""
    return (
        f"compiling kernel config {planned.unit.name} (one CUDA source) into {planned.dir}; this happens "
        "once per config, version and toolchain and takes about a minute. `fused-swiglu build` compiles "
        "every config ahead of time; FUSED_SWIGLU_VERBOSE=1 shows each step."
    )


def _build_and_install(planned: Planned, log: Log | None) -> None:
    root = planned.dir.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{planned.tag}-", dir=root))
    try:
        inputs_csrc, tc = planned.inputs.csrc, planned.inputs.toolchain
        result = nvcc_compile.build_library(
            inputs_csrc, planned.unit.name, list(planned.unit.sources), tmp / planned.unit.library, tc,
            cutlass.include_dirs(), log, planned.unit.flags,
        )
        info = {
            "unit": planned.unit.name,
            "key": planned.key,
            "abi_version": ABI_VERSION,
            "csrc": str(inputs_csrc),
            "sources": list(planned.unit.sources),
            "files": {rel: hashlib.sha256(content).hexdigest() for rel, content in planned.files},
            "flags": [*planned.inputs.flags, *planned.unit.flags],
            "nvcc": str(tc.nvcc),
            "nvcc_version": tc.version_text.strip().splitlines()[-1:],
            "nvidia_cutlass": planned.inputs.cutlass_version,
            "build_seconds": round(result.seconds, 1),
            "ptxas": nvcc_compile.parse_resource_usage(result.log),
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
        if planned.dir.exists():  # forced rebuild: move the old one aside, then drop it
            old = Path(tempfile.mkdtemp(prefix=f".{planned.tag}-old-", dir=root))
            os.replace(planned.dir, old / "lib")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, planned.dir)
        if log:
            log(f"installed {planned.library} ({result.seconds:.1f} s)")
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
