"""Cache key and the check-build-install protocol (the compiler is stubbed; no nvcc runs)."""

import json
import threading
import time

import pytest

from fused_swiglu import _lib
from fused_swiglu.build import cache, sources
from fused_swiglu.build import compile as nvcc_compile
from fused_swiglu.build.toolchain import Toolchain
from fused_swiglu.errors import BuildError

FILES = [("capi/fused_swiglu.h", b"int fsw_abi_version(void);"), ("kernels/a.cu", b"// a")]
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
def fake_build(tmp_path, monkeypatch):
    """A csrc tree in tmp, a cache dir in tmp, and a compiler stub that counts builds."""
    csrc = tmp_path / "csrc"
    (csrc / "capi").mkdir(parents=True)
    (csrc / "capi" / "fused_swiglu.h").write_text("// header\n")
    (csrc / "k.cu").write_text("// kernel\n")
    (csrc / ".hidden.swp").write_text("editor junk, not part of the key\n")
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sources, "csrc_dir", lambda: csrc)
    tc = Toolchain(nvcc=tmp_path / "nvcc", version=(13, 0), version_text="release 13.0", source="test")
    monkeypatch.setattr(cache.toolchain, "find_nvcc", lambda: tc)
    monkeypatch.setattr(cache.cutlass, "include_dirs", lambda: [])
    builds = []

    def compile_all(csrc_, srcs, obj_dir, tc_, inc, jobs, log):
        builds.append([s.as_posix() for s in srcs])
        time.sleep(0.2)  # long enough for a concurrent caller to arrive
        obj_dir.mkdir(parents=True)
        log_text = "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\nptxas info    : Used 90 registers, used 1 barriers\n"
        return [nvcc_compile.CompileResult(srcs[0], obj_dir / "k.o", 0.1, log_text)]

    def link(tc_, objs, out, log=None):
        out.write_bytes(b"\x7fELF fake")
        return out

    monkeypatch.setattr(nvcc_compile, "compile_all", compile_all)
    monkeypatch.setattr(nvcc_compile, "link", link)
    return csrc, tmp_path / "cache", builds


def test_a_build_without_a_log_warns_once_what_it_does(fake_build):
    csrc, root, builds = fake_build
    with pytest.warns(UserWarning) as record:
        lib = cache.ensure_built()
    notices = [str(w.message) for w in record if "compiling the kernel library" in str(w.message)]
    assert len(notices) == 1 and len(builds) == 1
    assert "(1 CUDA sources, " in notices[0] and str(lib.parent) in notices[0]
    assert "`fused-swiglu build` does it ahead of time" in notices[0]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.ensure_built() == lib  # cached: silent
        (csrc / "k.cu").write_text("// edited\n")
        cache.ensure_built(log=lambda line: None)  # a build with a log (the CLI): no warning
    assert len(builds) == 2


@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling the kernel library")
def test_ensure_built_layout_and_reuse(fake_build):
    csrc, root, builds = fake_build
    lib = cache.ensure_built()
    assert lib.name == "libfused_swiglu.so" and lib.is_file()
    key16 = lib.parent.name
    assert len(key16) == 16 and lib.parent.parent == root
    info = json.loads((lib.parent / "build.json").read_text())
    assert info["key"].startswith(key16) and info["abi_version"] == _lib.ABI_VERSION
    assert set(info["files"]) == {"capi/fused_swiglu.h", "k.cu"}
    assert info["ptxas"]["k.cu"][0]["registers"] == 90
    assert (root / f"{key16}.lock").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temp dirs left
    assert cache.ensure_built() == lib and len(builds) == 1
    lines = []
    assert cache.ensure_built(log=lines.append) == lib and len(builds) == 1
    assert lines == [f"up to date: the cache holds the library of these sources and this toolchain (key {key16})"]
    assert cache.cached_library() == lib
    (csrc / "k.cu").write_text("// kernel, edited\n")
    assert cache.cached_library() is None
    lib2 = cache.ensure_built()
    assert lib2 != lib and lib.is_file() and len(builds) == 2
    assert cache.ensure_built(force=True) == lib2 and len(builds) == 3


@pytest.mark.filterwarnings("ignore:fused_swiglu. waiting for another process")
@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling the kernel library")
def test_concurrent_callers_build_once(fake_build):
    _, _, builds = fake_build
    results, errors = [], []

    def call():
        try:
            results.append(cache.ensure_built())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1 and len(builds) == 1


def test_a_caller_that_waits_for_another_build_says_so(fake_build):
    from filelock import FileLock

    _, root, builds = fake_build
    key16 = cache._Inputs().key[:16]
    root.mkdir(parents=True, exist_ok=True)
    lines, results = [], []
    with FileLock(str(root / f"{key16}.lock")):  # another process's build holds the lock
        t = threading.Thread(target=lambda: results.append(cache.ensure_built(log=lines.append)))
        t.start()
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines and lines[0].startswith("waiting for another process to finish building"), lines
        assert not results  # still waiting
    t.join(10)
    assert results and results[0].is_file() and len(builds) == 1


@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling the kernel library")
def test_a_killed_build_s_temporary_folder_is_removed_by_the_next_build(fake_build):
    _, root, builds = fake_build
    key16 = cache._Inputs().key[:16]
    stale = root / f".{key16}-abc123" / "obj"  # what a build killed by SIGKILL leaves behind
    stale.mkdir(parents=True)
    (stale / "k.o").write_bytes(b"partial")
    other = root / ".0123456789abcdef-xyz"  # another key's build may be running: left alone
    other.mkdir()
    lib = cache.ensure_built()
    assert lib.is_file() and len(builds) == 1
    assert not (root / f".{key16}-abc123").exists() and other.is_dir()


@pytest.mark.filterwarnings("ignore:fused_swiglu. compiling the kernel library")
def test_failed_build_leaves_no_partial_install(fake_build, monkeypatch):
    _, root, _ = fake_build

    def broken(*a, **k):
        raise nvcc_compile.BuildError("nvcc on k.cu failed")

    monkeypatch.setattr(nvcc_compile, "link", broken)
    with pytest.raises(nvcc_compile.BuildError, match="nvcc on k.cu failed"):
        cache.ensure_built()
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []


def test_unusable_cache_directory_is_a_build_error(fake_build, monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(blocker))
    with pytest.raises(BuildError, match=r"the build cache directory .*a_file cannot be used .*set FUSED_SWIGLU_CACHE_DIR"):
        cache.ensure_built()
