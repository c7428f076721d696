"""Cache key and the check-build-install protocol (the compiler is stubbed; no nvcc runs)."""

import json
import threading
import time

import pytest

from fused_swiglu import _lib
from fused_swiglu.build import cache, sources, units
from fused_swiglu.build import compile as nvcc_compile
from fused_swiglu.build.toolchain import Toolchain
from fused_swiglu.errors import BuildError

FILES = [("include/fused_swiglu.h", b"int fsw_abi_version(void);"), ("kernels/a.cu", b"// a")]
ARGS = (nvcc_compile.NVCC_FLAGS, "Cuda compilation tools, release 13.0, V13.0.88", "4.2.0.0", 1)


def test_key_is_stable_and_order_independent():
    assert cache.compute_key(FILES, *ARGS) == cache.compute_key(list(reversed(FILES)), *ARGS)
    assert len(cache.compute_key(FILES, *ARGS)) == 64


@pytest.mark.parametrize(
    "change",
    [
        lambda f, a: ([(f[0][0], f[0][1] + b" "), f[1]], a),  # a source's content
        lambda f, a: ([f[0], ("kernels/b.cu", f[1][1])], a),  # a source's path
        lambda f, a: (f + [("kernels/c.cu", b"")], a),  # a new file
        lambda f, a: (f, (a[0] + ("-G",), *a[1:])),  # flags
        lambda f, a: (f, (a[0], a[1].replace("13.0", "13.1"), *a[2:])),  # nvcc
        lambda f, a: (f, (*a[:2], "4.3.0.0", a[3])),  # CUTLASS
        lambda f, a: (f, (*a[:3], 2)),  # ABI
    ],
)
def test_key_changes_with_each_input(change):
    files, args = change(FILES, ARGS)
    assert cache.compute_key(files, *args) != cache.compute_key(FILES, *ARGS)


def test_key_fields_cannot_run_together():
    # path "ab" + content "c" must differ from path "a" + content "bc"
    assert cache.compute_key([("ab", b"c")], *ARGS) != cache.compute_key([("a", b"bc")], *ARGS)


@pytest.fixture
def fake_build(tmp_path, monkeypatch, write_tree):
    """A csrc tree of two configs in tmp, a cache dir in tmp, and an nvcc stub that records builds."""
    csrc = tmp_path / "csrc"
    files = {
        "include/fused_swiglu.h": "// header\n",
        "capi/fused_swiglu.cpp": '#include "fused_swiglu.h"\n',
        "capi/quantize_e4m3.cu": "// quantize\n",
        "capi/moe_layout.cu": "// routing\n",
        "capi/registry.inc": "#define FSW_CONFIG_LIST FSW_CONFIG(a) FSW_CONFIG(b)\n",
        "capi/driver_entry_points.cu": "// driver\n",
        "include/kernel.hpp": "// kernel\n",
        "instantiations/a.cu": '#include "kernel.hpp"\n',
        "instantiations/b.cu": "// b\n",
        ".hidden.swp": "editor junk, not part of any key\n",
    }
    write_tree(csrc, files)
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSED_SWIGLU_JOBS", "2")
    monkeypatch.setattr(sources, "csrc_dir", lambda: csrc)
    tc = Toolchain(nvcc=tmp_path / "nvcc", version=(13, 0), version_text="release 13.0", source="test")
    monkeypatch.setattr(cache.toolchain, "find_nvcc", lambda: tc)
    monkeypatch.setattr(cache.cutlass, "include_dirs", lambda: [])
    monkeypatch.setattr(cache.cutlass, "version", lambda: "4.2.0.0")
    builds = []

    def build_library(csrc_, unit, srcs, out, tc_, inc, log=None, extra=()):
        builds.append(unit)
        time.sleep(0.2)  # long enough for a concurrent caller to arrive
        out.write_bytes(b"\x7fELF fake")
        text = "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\nptxas info    : Used 90 registers, used 1 barriers\n"
        return nvcc_compile.BuildResult(unit, out, 0.2, text)

    monkeypatch.setattr(nvcc_compile, "build_library", build_library)
    return csrc, tmp_path / "cache", builds


def test_a_first_use_builds_one_config_and_warns_once_what_it_does(fake_build):
    csrc, root, builds = fake_build
    with pytest.warns(UserWarning) as record:
        lib = cache.ensure_config("a")
    notices = [str(w.message) for w in record if "compiling kernel config a" in str(w.message)]
    assert len(notices) == 1 and builds == ["a"]
    assert str(lib.parent) in notices[0] and "`fused-swiglu build` compiles every config" in notices[0]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.ensure_config("a") == lib  # cached: silent
        (csrc / "instantiations" / "a.cu").write_text("// edited\n")
        cache.ensure_config("a", log=lambda line: None)  # a build with a log (the CLI): no warning
    assert builds == ["a", "a"]
    with pytest.raises(BuildError, match="config 'c' is not in capi/registry.inc; known configs: a, b"):
        cache.ensure_config("c")


def test_ensure_built_layout_and_reuse(fake_build):
    csrc, root, builds = fake_build
    lines = []
    core = cache.ensure_built(log=lines.append)
    assert core.name == "libfused_swiglu.so" and core.is_file()
    assert sorted(builds) == ["a", "b", "core"]
    assert core.parent.name == f"core-{core.parent.name[5:]}" and len(core.parent.name) == 21
    a = cache.cached("a")
    assert a.name == "libfsw_a.so" and a.parent.parent == root == core.parent.parent
    info = json.loads((a.parent / "build.json").read_text())
    assert info["unit"] == "a" and info["key"].startswith(a.parent.name[2:]) and info["abi_version"] == _lib.ABI_VERSION
    assert set(info["files"]) == {"instantiations/a.cu", "include/kernel.hpp", "capi/driver_entry_points.cu"}
    assert info["ptxas"][0]["registers"] == 90
    assert (root / f"{a.parent.name}.lock").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temp dirs left
    lines.clear()
    assert cache.ensure_built(log=lines.append) == core and len(builds) == 3
    assert lines == ["up to date: the cache holds all 2 config libraries of these sources and this toolchain"]
    assert cache.cached_library() == core
    assert cache.ensure_built(force=True, log=lines.append) == core and len(builds) == 6
    with pytest.raises(BuildError, match="unknown config name"):
        cache.ensure_built(names=["a", "zz"], log=lines.append)


def test_a_header_edit_rebuilds_only_the_units_that_include_it(fake_build):
    csrc, root, builds = fake_build
    cache.ensure_built(log=lambda line: None)
    a, b, core = cache.cached("a"), cache.cached("b"), cache.cached_library()
    builds.clear()
    (csrc / "include" / "kernel.hpp").write_text("// kernel, edited\n")
    assert cache.cached("a") is None and cache.cached("b") == b and cache.cached_library() == core
    cache.ensure_built(log=lambda line: None)
    assert builds == ["a"] and cache.cached("a") != a and a.is_file()  # the old build stays until cleaned
    builds.clear()
    (csrc / "include" / "fused_swiglu.h").write_text("// header, edited\n")
    cache.ensure_built(log=lambda line: None)
    assert builds == ["core"]  # the configs' sources do not include the C ABI header in this tree
    builds.clear()
    cache.ensure_built(names=["b"], force=True, log=lambda line: None)
    assert sorted(builds) == ["b", "core"]


@pytest.mark.filterwarnings("ignore:fused_swiglu. waiting for another process")
@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling kernel config")
def test_concurrent_callers_build_once(fake_build):
    _, _, builds = fake_build
    results, errors = [], []

    def call():
        try:
            results.append(cache.ensure_config("a"))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1 and builds == ["a"]


def test_a_caller_that_waits_for_another_build_says_so(fake_build):
    from filelock import FileLock

    _, root, builds = fake_build
    tag = cache.Inputs().plan(units.config("a")).tag
    root.mkdir(parents=True, exist_ok=True)
    lines, results = [], []
    with FileLock(str(root / f"{tag}.lock")):  # another process's build holds the lock
        t = threading.Thread(target=lambda: results.append(cache.ensure_config("a", log=lines.append)))
        t.start()
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines and lines[0].startswith("waiting for another process to finish building a"), lines
        assert not results  # still waiting
    t.join(10)
    assert results and results[0].is_file() and builds == ["a"]


@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling kernel config")
def test_a_killed_build_s_temporary_folder_is_removed_by_the_next_build(fake_build):
    _, root, builds = fake_build
    tag = cache.Inputs().plan(units.config("a")).tag
    stale = root / f".{tag}-abc123"  # what a build killed by SIGKILL leaves behind
    stale.mkdir(parents=True)
    (stale / "libfsw_a.so").write_bytes(b"partial")
    other = root / ".b-0123456789abcdef-xyz"  # another unit's build may be running: left alone
    other.mkdir()
    lib = cache.ensure_config("a")
    assert lib.is_file() and builds == ["a"]
    assert not stale.exists() and other.is_dir()


@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling kernel config")
def test_failed_build_leaves_no_partial_install(fake_build, monkeypatch):
    _, root, _ = fake_build

    def broken(csrc_, unit, srcs, out, *a, **k):
        out.write_bytes(b"half a library")
        raise nvcc_compile.BuildError("nvcc on a failed")

    monkeypatch.setattr(nvcc_compile, "build_library", broken)
    with pytest.raises(nvcc_compile.BuildError, match="nvcc on a failed"):
        cache.ensure_config("a")
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []
    assert cache.cached("a") is None


def test_unusable_cache_directory_is_a_build_error(fake_build, monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(blocker))
    with pytest.raises(BuildError, match=r"the build cache directory .*a_file cannot be used .*set FUSED_SWIGLU_CACHE_DIR"):
        cache.ensure_config("a")


class _Stop(BaseException):
    pass


def test_a_build_stopped_while_it_waits_for_another_process_returns_at_once(fake_build):
    """SIGTERM (the CLI raises it in the main thread) while a unit waits for another process's lock:
    ensure_built returns within a moment, and the waiting unit is not built later."""
    import os
    import signal

    from filelock import FileLock

    _, root, builds = fake_build
    cache.ensure_core(log=lambda line: None)
    builds.clear()
    tag = cache.Inputs().plan(units.config("a")).tag
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(_Stop()))
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        with FileLock(str(root / f"{tag}.lock")):  # another process's build of a holds its lock
            start = time.monotonic()
            timer.start()
            with pytest.raises(_Stop):
                cache.ensure_built(names=["a"], log=lambda line: None)
            assert time.monotonic() - start < 3
        time.sleep(0.6)  # the lock is free now: a worker still waiting would take it and build
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert builds == [] and cache.cached("a") is None
