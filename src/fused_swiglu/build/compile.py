"""nvcc commands: one process per unit of the build (:mod:`.units`) compiles its sources and links
its shared object, and its ptxas report is checked.

Every shared object links the CUDA runtime statically (nvcc's default), so it needs only the driver
at run time; :mod:`.cache` runs ``FUSED_SWIGLU_JOBS`` units at once.

ptxas reports (``-Xptxas=-v,--warn-on-spills``) are build errors when they show ``C7510`` (wgmma
serialized: the kernel would run several times slower) or non-zero spill stores/loads (local
memory traffic in a mainloop or epilogue).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from .toolchain import Toolchain

# Part of the cache key. Include paths are added per build (they depend on where things live).
NVCC_FLAGS: tuple[str, ...] = (
    "-std=c++17",
    "-O3",
    "-DNDEBUG",  # without it nvcc 13.0 reported C7510 (wgmma serialized) on CUTLASS sm90 GEMMs
    # CUTLASS calls cuTensorMapEncodeTiled by name; csrc/capi/driver_entry_points.cu defines it once
    # per process through the driver entry point, instead of a lookup before every descriptor.
    "-DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-Xcompiler=-fPIC,-fvisibility=hidden",
    "-Xptxas=-v,--warn-on-spills",
)
# Line tables for Nsight Compute's source view, with FUSED_SWIGLU_LINEINFO=1 (part of the key): the same
# machine code, about 6 s more of cicc per config (docs/perf-notes.md, entry 85).
LINEINFO_FLAGS: tuple[str, ...] = ("-lineinfo",)
LINK_FLAGS: tuple[str, ...] = ("-Xlinker=--no-undefined", "-Xlinker=--strip-all")
LOG_TAIL_LINES = 40

_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers")


def scan_ptxas_log(text: str) -> list[str]:
    """Lines of a ptxas log that make the build fail: ``C7510`` or non-zero spills (stripped)."""
    bad = []
    for line in text.splitlines():
        if "C7510" in line:
            bad.append(line.strip())
            continue
        m = _SPILL.search(line)
        if m and (int(m.group(1)) or int(m.group(2))):
            bad.append(line.strip())
    return bad


def parse_resource_usage(text: str) -> list[dict[str, object]]:
    """Per kernel entry: ``{"function", "registers", "properties", "usage"}`` from a ptxas -v log.

    ``properties`` is the stack/spill line, ``usage`` the "Used N registers, ..." line.
    """
    kernels: dict[str, dict[str, object]] = {}
    current: str | None = None
    expect_props_for: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _ENTRY.search(line):
            current = m.group(1)
            kernels.setdefault(current, {"function": current})
        elif m := _PROPS.search(line):
            expect_props_for = m.group(1)
            kernels.setdefault(expect_props_for, {"function": expect_props_for})
            continue
        elif expect_props_for and "bytes stack frame" in line:
            kernels[expect_props_for]["properties"] = line
        elif (m := _USED.search(line)) and current:
            kernels[current]["registers"] = int(m.group(1))
            kernels[current]["usage"] = line.split(":", 1)[1].strip()
        expect_props_for = None
    return [k for k in kernels.values() if "usage" in k or "properties" in k]


@dataclass
class BuildResult:
    """One unit's nvcc run: its shared object, wall seconds and the full nvcc / ptxas log."""

    unit: str
    library: Path
    seconds: float
    log: str


def _tail(text: str, n: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-n:])


# nvcc processes running now, so that an interrupted build stops them (stop_running_processes)
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()


# Set by stop_running_processes: no new nvcc starts, and builds waiting for a lock give up, until the
# next build of this process clears it (allow_new_processes).
STOPPING = threading.Event()


def allow_new_processes() -> None:
    STOPPING.clear()


def stop_running_processes() -> None:
    """Kill and reap every nvcc this process started that is still running, and start no new one."""
    with _RUNNING_LOCK:
        STOPPING.set()
        procs = list(_RUNNING)
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def _run(cmd: list[str], what: str) -> tuple[str, float]:
    start = time.monotonic()
    with _RUNNING_LOCK:  # under the lock, so that a stop either sees this process or prevents it
        if STOPPING.is_set():
            raise BuildError(f"{what} was not started: the build is stopping")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise BuildError(f"{what} could not start: {e}\ncommand: {shlex.join(cmd)}") from e
        _RUNNING.add(proc)
    try:
        stdout, stderr = proc.communicate()
    except BaseException:  # interrupted in this thread (the link runs in the main thread)
        proc.kill()
        proc.wait()
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    log = stdout + stderr
    if proc.returncode != 0:
        raise BuildError(
            f"{what} failed with exit status {proc.returncode}.\ncommand: {shlex.join(cmd)}\n"
            f"last {LOG_TAIL_LINES} lines of its output:\n{_tail(log)}"
        )
    return log, time.monotonic() - start


def include_flags(csrc: Path, cutlass_includes: Sequence[Path], toolchain: Toolchain) -> list[str]:
    dirs = [csrc / "include", csrc / "capi", *cutlass_includes, *toolchain.include_dirs]
    return [f"-I{d}" for d in dirs]


def nvcc_flags() -> tuple[str, ...]:
    """:data:`NVCC_FLAGS`, and :data:`LINEINFO_FLAGS` where ``FUSED_SWIGLU_LINEINFO`` asks for them."""
    from .. import env

    return (*NVCC_FLAGS, *LINEINFO_FLAGS) if env.lineinfo() else NVCC_FLAGS


def build_command(
    toolchain: Toolchain, includes: Sequence[str], srcs: Sequence[Path], out: Path, extra: Sequence[str] = ()
) -> list[str]:
    """One nvcc process: compile ``srcs`` and link them into the shared object ``out`` (``extra``: the
    unit's own flags)."""
    lib_dirs = [f"-L{d}" for d in toolchain.lib_dirs]
    # --no-undefined: a missing definition fails the link, not the load; --strip-all drops the static
    # symbol table (the exported entry points are dynamic symbols and stay)
    return [str(toolchain.nvcc), *nvcc_flags(), *extra, *includes, "-shared", *LINK_FLAGS, *lib_dirs,
            *map(str, srcs), "-o", str(out)]


def build_library(
    csrc: Path,
    unit: str,
    srcs: Sequence[str],
    out: Path,
    toolchain: Toolchain,
    cutlass_includes: Sequence[Path],
    log: Callable[[str], None] | None = None,
    extra: Sequence[str] = (),
) -> BuildResult:
    """Compile the sources ``srcs`` (relative to ``csrc``) of ``unit`` into the shared object ``out``
    (``extra``: the unit's own nvcc flags).

    Raises:
        BuildError: nvcc failed (command + last 40 lines of its output); the ptxas report shows C7510
            or spills (unit and line quoted).
    """
    if not srcs:
        raise BuildError(f"{unit} has no CUDA sources (*.cu) under {csrc}; nothing to build.")
    includes = include_flags(csrc, cutlass_includes, toolchain)
    cmd = build_command(toolchain, includes, [csrc / s for s in srcs], out, extra)
    if log:
        log(f"nvcc {unit}" + (f"\n  {shlex.join(cmd)}" if _verbose() else ""))
    text, seconds = _run(cmd, f"nvcc on {unit} ({', '.join(srcs)})")
    bad = scan_ptxas_log(text)
    if bad:
        more = f"\n  (and {len(bad) - 1} more such lines)" if len(bad) > 1 else ""
        raise BuildError(
            f"ptxas reported a performance error in {unit} ({srcs[0]}; C7510 wgmma serialization and "
            f"register spills are build errors):\n  {bad[0]}{more}"
        )
    return BuildResult(unit, out, seconds, text)


def _verbose() -> bool:
    from .. import env

    return env.verbose()
