"""nvcc discovery, ptxas log checks, command construction, and real builds (marker ``build``)."""

import ctypes
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from fused_swiglu.build import compile as nvcc_compile
from fused_swiglu.build import cutlass, sources, toolchain
from fused_swiglu.build.toolchain import Toolchain
from fused_swiglu.errors import BuildError, UnsupportedError

PTXAS_CLEAN = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN7cutlass13device_kernelI4GemmEEvNT_6ParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN7cutlass13device_kernelI4GemmEEvNT_6ParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 0 bytes smem, 592 bytes cmem[0]
ptxas info    : Compile time = 1234.5 ms
"""
PTXAS_C7510 = (
    "ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized "
    "due to the presence of Extern calls in the function '_ZN7cutlass13device_kernelI4GemmEEvNT_6ParamsE'.\n"
)
PTXAS_SPILL = """\
ptxas warning : Registers are spilled to local memory in function '_Z1kPfi', 744 bytes spill stores, 844 bytes spill loads
ptxas info    : Compiling entry function '_Z1kPfi' for 'sm_90a'
ptxas info    : Function properties for _Z1kPfi
    928 bytes stack frame, 744 bytes spill stores, 844 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 928 bytes cumulative stack size
"""


def test_scan_accepts_clean_log():
    assert nvcc_compile.scan_ptxas_log(PTXAS_CLEAN) == []


def test_scan_flags_c7510_and_spills():
    assert nvcc_compile.scan_ptxas_log(PTXAS_CLEAN + PTXAS_C7510) == [PTXAS_C7510.strip()]
    bad = nvcc_compile.scan_ptxas_log(PTXAS_SPILL)
    assert len(bad) == 2 and all("744 bytes spill stores" in b for b in bad)
    only_loads = "    0 bytes stack frame, 0 bytes spill stores, 4 bytes spill loads"
    assert nvcc_compile.scan_ptxas_log(only_loads) == [only_loads.strip()]


def test_parse_resource_usage():
    (k,) = nvcc_compile.parse_resource_usage(PTXAS_CLEAN)
    assert k["function"].startswith("_ZN7cutlass13device_kernel")
    assert k["registers"] == 168 and "0 bytes spill stores" in k["properties"]
    assert k["usage"].startswith("Used 168 registers")


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _fake_tc(nvcc: Path) -> Toolchain:
    return Toolchain(nvcc=nvcc, version=(13, 0), version_text="release 13.0", source="test")


def test_failed_nvcc_shows_command_and_log_tail(tmp_path):
    nvcc = _script(tmp_path / "nvcc", 'for i in $(seq 1 100); do echo "error line $i" >&2; done; exit 2\n')
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "a.cu").write_text("")
    with pytest.raises(BuildError) as e:
        nvcc_compile.build_library(csrc, "a", ["a.cu"], tmp_path / "liba.so", _fake_tc(nvcc), [])
    msg = str(e.value)
    assert "nvcc on a (a.cu) failed with exit status 2" in msg
    assert f"command: {nvcc} -std=c++17 -O3 -DNDEBUG" in msg and "-shared " in msg and "-gencode=arch=compute_90a,code=sm_90a" in msg
    assert "error line 100" in msg and "error line 61" in msg and "error line 60\n" not in msg


class _Stop(BaseException):
    pass


def test_interrupted_build_stops_its_nvcc_processes(tmp_path, monkeypatch, write_tree):
    """SIGTERM (the CLI turns it into an exception in the main thread, as Ctrl-C does) while two
    configs build: ensure_built kills and reaps its nvcc processes instead of waiting for them, and
    installs nothing."""
    import signal
    import threading
    import time

    from fused_swiglu.build import cache

    pids = tmp_path / "pids"
    nvcc = _script(tmp_path / "nvcc", f'case "$*" in *fused_swiglu.cpp*) touch "$(eval echo \\${{$#}})"; exit 0;; esac\n'
                   f'echo $$ >> "{pids}"; exec sleep 60\n')
    csrc = tmp_path / "csrc"
    write_tree(csrc, {"capi/fused_swiglu.cpp": "", "capi/quantize_e4m3.cu": "", "capi/moe_layout.cu": "", "capi/driver_entry_points.cu": "", "instantiations/a.cu": "",
                      "instantiations/b.cu": "", "capi/registry.inc": "FSW_CONFIG(a) FSW_CONFIG(b)"})
    monkeypatch.setattr(sources, "csrc_dir", lambda: csrc)
    monkeypatch.setattr(cache.toolchain, "find_nvcc", lambda: _fake_tc(nvcc))
    monkeypatch.setattr(cache.cutlass, "include_dirs", lambda: [])
    monkeypatch.setattr(cache.cutlass, "version", lambda: "4.2.0.0")
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSED_SWIGLU_JOBS", "2")

    def stop(signum, frame):
        raise _Stop()

    previous = signal.signal(signal.SIGTERM, stop)
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    start = time.monotonic()
    try:
        timer.start()
        with pytest.raises(_Stop):
            cache.ensure_built(log=lambda line: None)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - start < 20, "ensure_built waited for its nvcc processes"
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    for pid in started:
        with pytest.raises(ProcessLookupError):  # killed and reaped
            os.kill(pid, 0)
    assert cache.cached("a") is None and cache.cached("b") is None


def test_ptxas_error_names_the_unit_and_line(tmp_path):
    nvcc = _script(tmp_path / "nvcc", f"cat >&2 <<'EOF'\n{PTXAS_C7510}EOF\ntouch \"$(eval echo \\${{$#}})\"\n")
    csrc = tmp_path / "csrc"
    (csrc / "inst").mkdir(parents=True)
    (csrc / "inst" / "k.cu").write_text("")
    with pytest.raises(BuildError, match=r"ptxas reported a performance error in k \(inst/k.cu; .*:\n  ptxas warning : \(C7510\) Potential"):
        nvcc_compile.build_library(csrc, "k", ["inst/k.cu"], tmp_path / "libk.so", _fake_tc(nvcc), [])


def test_no_sources_is_an_error(tmp_path):
    with pytest.raises(BuildError, match="no CUDA sources"):
        nvcc_compile.build_library(tmp_path, "k", [], tmp_path / "libk.so", _fake_tc(tmp_path / "nvcc"), [])


def test_commands_carry_the_required_flags(tmp_path):
    tc = _fake_tc(tmp_path / "nvcc")
    inc = nvcc_compile.include_flags(tmp_path / "csrc", [Path("/cutlass/include")], tc)
    assert inc[:2] == [f"-I{tmp_path}/csrc/include", f"-I{tmp_path}/csrc/capi"] and "-I/cutlass/include" in inc
    cmd = nvcc_compile.build_command(tc, inc, [Path("a.cu"), Path("b.cu")], Path("liba.so"))
    for flag in ("-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v,--warn-on-spills",
                 "-Xcompiler=-fPIC,-fvisibility=hidden", "--expt-relaxed-constexpr", "--expt-extended-lambda",
                 "-shared", "-Xlinker=--no-undefined"):
        assert flag in cmd
    assert cmd[-4:] == ["a.cu", "b.cu", "-o", "liba.so"]


def test_line_tables_only_when_asked(tmp_path, monkeypatch):
    tc = _fake_tc(tmp_path / "nvcc")
    monkeypatch.delenv("FUSED_SWIGLU_LINEINFO", raising=False)
    assert "-lineinfo" not in nvcc_compile.build_command(tc, [], [Path("a.cu")], Path("liba.so"))
    monkeypatch.setenv("FUSED_SWIGLU_LINEINFO", "1")
    assert "-lineinfo" in nvcc_compile.build_command(tc, [], [Path("a.cu")], Path("liba.so"))
    assert "-lineinfo" in nvcc_compile.nvcc_flags()  # and so in every unit's cache key


def test_parse_version():
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert toolchain.parse_version(text) == (13, 0)
    assert toolchain.parse_version("release 12.3, V12.3.52") == (12, 3)
    assert toolchain.parse_version("garbage") is None


def _isolate(monkeypatch, tmp_path):
    monkeypatch.delenv("FUSED_SWIGLU_NVCC", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(toolchain, "_wheel_roots", lambda: [])


def test_missing_nvcc_says_what_to_install(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    with pytest.raises(BuildError) as e:
        toolchain.find_nvcc()
    msg = str(e.value)
    assert 'pip install "fused-swiglu[cuda]"' in msg and "CUDA toolkit >= 12.3" in msg
    assert msg.count(". ") == 0 and msg.endswith(".")  # one sentence


def test_too_old_nvcc_is_skipped_then_reported(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    old = tmp_path / "old" / "bin"
    old.mkdir(parents=True)
    _script(old / "nvcc", 'echo "Cuda compilation tools, release 12.1, V12.1.105"\n')
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "old"))
    with pytest.raises(BuildError, match=r"nvcc >= 12.3 .* only .*old/bin/nvcc \(12.1\); install one with `pip install \"fused-swiglu\[cuda\]\"`"):
        toolchain.find_nvcc()
    new = tmp_path / "empty"
    new.mkdir()
    _script(new / "nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.88"\n')  # on PATH
    tc = toolchain.find_nvcc()
    assert tc.nvcc == new / "nvcc" and tc.version == (13, 0) and tc.source == "PATH"


def test_explicit_nvcc_that_is_not_a_usable_nvcc_is_an_error(monkeypatch, tmp_path):
    # FUSED_SWIGLU_NVCC is "the nvcc to use": never silently replaced by the one on PATH
    _isolate(monkeypatch, tmp_path)
    new = tmp_path / "empty"
    new.mkdir()
    _script(new / "nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.88"\n')
    old = _script(tmp_path / "nvcc-old", 'echo "Cuda compilation tools, release 12.1, V12.1.105"\n')
    monkeypatch.setenv("FUSED_SWIGLU_NVCC", str(old))
    with pytest.raises(BuildError, match=r"FUSED_SWIGLU_NVCC points at .*nvcc-old, which is not nvcc >= 12.3 \(12.1\)"):
        toolchain.find_nvcc()
    monkeypatch.setenv("FUSED_SWIGLU_NVCC", _script(tmp_path / "true", "exit 0\n").as_posix())
    with pytest.raises(BuildError, match=r"FUSED_SWIGLU_NVCC points at .*true, which is not nvcc >= 12.3 \(unreadable version\)"):
        toolchain.find_nvcc()
    monkeypatch.setenv("FUSED_SWIGLU_NVCC", _script(tmp_path / "false", "exit 3\n").as_posix())
    with pytest.raises(BuildError, match=r"FUSED_SWIGLU_NVCC points at .*false, which does not run as nvcc: .*status 3"):
        toolchain.find_nvcc()
    # a broken nvcc that was only found (not named) is skipped: the one on PATH is used
    monkeypatch.delenv("FUSED_SWIGLU_NVCC")
    broken = tmp_path / "broken" / "bin"
    broken.mkdir(parents=True)
    _script(broken / "nvcc", "exit 1\n")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "broken"))
    assert toolchain.find_nvcc().nvcc == new / "nvcc"


def test_explicit_nvcc_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSED_SWIGLU_NVCC", str(tmp_path / "nope"))
    with pytest.raises(BuildError, match="FUSED_SWIGLU_NVCC points at .*nope, which is not a file"):
        toolchain.find_nvcc()


def test_wheel_layout_is_searched(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    root = tmp_path / "site" / "nvidia"
    (root / "cu13" / "bin").mkdir(parents=True)
    (root / "cu13" / "include").mkdir()
    _script(root / "cu13" / "bin" / "nvcc", 'echo "release 13.5, V13.5.37"\n')
    monkeypatch.setattr(toolchain, "_wheel_roots", lambda: [root])
    tc = toolchain.find_nvcc()
    assert tc.source == "nvidia-cuda-nvcc wheel" and tc.include_dirs == (root / "cu13" / "include",)


def test_cutlass_headers_found():
    inc, util = cutlass.include_dirs()
    assert (inc / "cutlass" / "gemm" / "collective" / "collective_builder.hpp").is_file()
    assert util.name == "include" and util.parent.name == "util"
    assert cutlass.version() == "4.2.0.0"


def test_csrc_is_found_in_the_repository():
    assert (sources.csrc_dir() / "include" / "fused_swiglu.h").is_file()


# --- real nvcc builds (no GPU needed) -------------------------------------------------------------

FIXTURE_CU = r"""
#include "fused_swiglu.h"
__global__ void scale(float* a, float s) { a[threadIdx.x] *= s; }
extern "C" __attribute__((visibility("default"))) int fsw_abi_version(void) { return FSW_ABI_VERSION; }
"""


@pytest.mark.build
def test_pipeline_builds_a_small_library(tmp_path):
    """build_library on a one-file fixture: the .so exports the C symbol and loads without a GPU."""
    tc = toolchain.find_nvcc()
    csrc = tmp_path / "csrc"
    (csrc / "include").mkdir(parents=True)
    shutil.copy(sources.csrc_dir() / "include" / "fused_swiglu.h", csrc / "include")
    (csrc / "k.cu").write_text(FIXTURE_CU)
    result = nvcc_compile.build_library(csrc, "k", ["k.cu"], tmp_path / "libk.so", tc, [])
    (k,) = nvcc_compile.parse_resource_usage(result.log)
    assert k["function"] == "_Z5scalePff"
    from fused_swiglu._lib import ABI_VERSION

    assert ctypes.CDLL(str(result.library)).fsw_abi_version() == ABI_VERSION


def _symbols(lib: Path, which: str) -> str:
    return subprocess.run(["nm", "-D", which, str(lib)], capture_output=True, text=True).stdout


@pytest.mark.build
def test_library_builds_from_csrc(tmp_path):
    """Builds (or reuses from the cache) the core library and every config library from csrc: the
    core exports the C ABI, each config library its entry alone, and all load without a GPU."""
    from fused_swiglu._lib import ABI_VERSION, Library
    from fused_swiglu.build import cache, ensure_built, units

    csrc = sources.csrc_dir()
    lib = ensure_built()
    assert lib.is_file()
    names = units.config_names(csrc)
    libraries = {name: cache.cached(name) for name in names}
    assert all(libraries.values()), [n for n, p in libraries.items() if p is None]
    if shutil.which("nm"):
        symbols = _symbols(lib, "--defined-only")
        for name in ("fsw_abi_version", "fsw_last_error", "fsw_num_configs", "fsw_config_name", "fsw_config_loaded",
                     "fsw_load_config", "fsw_get_config", "fsw_can_implement", "fsw_workspace_size", "fsw_run"):
            assert f" T {name}" in symbols, f"{lib} does not export {name}"
        for name, path in libraries.items():
            exported = [line.split()[-1] for line in _symbols(path, "--defined-only").splitlines() if " T " in line]
            assert exported == ["fsw_config_entry"], (name, exported)
            # the library's own cuTensorMapEncodeTiled (csrc/capi/driver_entry_points.cu) is defined and
            # hidden: CUTLASS's calls bind to it, and it never interposes on libcuda's for the process
            assert "cuTensorMapEncodeTiled" not in _symbols(path, "--undefined-only"), name
    # ctypes load works without a GPU; a copy, since the cached core may hold configs other tests loaded
    shutil.copy(lib, tmp_path / lib.name)
    loaded = Library(tmp_path / lib.name)
    assert ctypes.CDLL(str(lib)).fsw_abi_version() == ABI_VERSION
    assert loaded.ordered_names == names and not any(loaded.is_loaded(n) for n in names)
    assert [c.name for c in loaded.configs] == names  # loads each config library from the cache
    from fused_swiglu import _lib, catalog

    assert {c.kernel for c in loaded.configs} == set(_lib.KERNEL_NAMES.values())  # packed, dual, dswiglu, grouped_dual
    stores = {n for n in catalog.training_names() if "_store_" in n}
    assert {c.name for c in loaded.configs if c.preactivations} == stores
    assert loaded.config_paths == libraries


@pytest.mark.build
def test_core_library_refuses_what_is_not_a_loaded_config(tmp_path):
    """fsw_run on a config not loaded, and fsw_load_config on a missing file, on a library that is not
    a config library, and on one built for another ABI, fail with a sentence naming the rule."""
    from fused_swiglu._lib import Library, Problem, Status
    from fused_swiglu.build import ensure_core

    # a copy: the cached core library may already hold configs that other tests of this process loaded
    shutil.copy(ensure_core(), tmp_path / "libfused_swiglu.so")
    lib = Library(tmp_path / "libfused_swiglu.so")
    dll = lib._dll
    p = Problem(m=16, n=64, k=64, dtype=0, raster=0, swizzle=1, x=0x10000, ldx=64, w=0x20000, ldw=64,
                w_up=0, ldw_up=0, y=0x40000, ldy=64)
    name = lib.ordered_names[0]
    assert dll.fsw_run(0, ctypes.byref(p), None, 0, None) == Status.NOT_SUPPORTED
    assert f"config {name} is not loaded" in lib.last_error()
    out = ctypes.c_int(-1)
    assert dll.fsw_load_config(str(tmp_path / "missing.so").encode(), ctypes.byref(out)) == Status.INVALID_ARGUMENT
    assert "cannot load the config library" in lib.last_error() and out.value == -1
    assert dll.fsw_load_config(str(lib.path).encode(), ctypes.byref(out)) == Status.INVALID_ARGUMENT
    assert "does not export fsw_config_entry: it is not a config library" in lib.last_error()
    other_abi = tmp_path / "libfsw_other.so"
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "e.cu").write_text(
        'extern "C" __attribute__((visibility("default"))) const void* fsw_config_entry(int abi) { return nullptr; }\n')
    nvcc_compile.build_library(csrc, "e", ["e.cu"], other_abi, toolchain.find_nvcc(), [])
    assert dll.fsw_load_config(str(other_abi).encode(), None) == Status.INVALID_ARGUMENT
    assert "was built for another ABI version" in lib.last_error()
    with pytest.raises(UnsupportedError, match="config 'nope' is not in the kernel library"):
        lib.ensure("nope")


@pytest.mark.build
def test_library_serves_every_choosable_config():
    """Every config the choice can return is compiled for bf16 and fp16."""
    import torch

    from fused_swiglu import configs
    from fused_swiglu._lib import Library
    from fused_swiglu.build import ensure_built

    lib = Library(ensure_built())
    wanted = {c.name(d) for c in configs.choosable_configs() for d in (torch.bfloat16, torch.float16)}
    assert wanted <= lib.names, f"choosable configs without a compiled config: {sorted(wanted - lib.names)}"


SM90_SMEM_PER_CTA = 232448  # 227 KiB: the most shared memory one CTA may opt in to on sm_90


@pytest.mark.build
def test_shared_memory_budget():
    """Every config fits one CTA's shared memory, and its mainloop takes all stages that fit; the
    collective epilogue's unused D reservation (ElementD = void) no longer costs the dual kernel a stage:
    dual and packed tiles of one TileShape run the same number of stages,
    unless the dual kernel's own output buffers (its epilogue subtile spans the whole tile width) leave no
    room for the packed kernel's count: then exactly one fewer (dual 64x192: 5 against 6)."""
    from fused_swiglu._lib import Library
    from fused_swiglu.build import ensure_built

    lib = Library(ensure_built())
    by_shape = {}
    for c in lib.configs:
        stage = (c.tile_m + c.tile_n) * c.tile_k * (1 if c.dtype == "e4m3" else 2)  # one A and one B tile
        assert 0 < c.epilogue_smem_bytes < c.smem_bytes <= SM90_SMEM_PER_CTA, c
        assert c.stages * stage + c.epilogue_smem_bytes <= c.smem_bytes, c
        assert SM90_SMEM_PER_CTA - c.smem_bytes < stage, f"{c.name}: room for another mainloop stage"
        key = (c.tile_m, c.tile_n, c.schedule, c.promote_k_tiles, c.dtype, c.preactivations)
        by_shape.setdefault(key, {})[c.kernel] = (c.stages, c.epilogue_smem_bytes, stage)
    pairs = [s for s in by_shape.values() if {"dual", "packed"} <= s.keys()]  # (a grouped config may share a shape)
    assert pairs, "no TileShape is compiled for both kernels"
    for pair in pairs:
        (dual_stages, dual_epilogue, stage), (packed_stages, _, _) = pair["dual"], pair["packed"]
        fits = packed_stages * stage + dual_epilogue <= SM90_SMEM_PER_CTA
        assert dual_stages == (packed_stages if fits else packed_stages - 1), by_shape


@pytest.mark.build
def test_sass_of_every_kernel():
    """The SASS of every config library issues GMMA (HGMMA for 16-bit inputs, QGMMA for e4m3), loads and
    stores through TMA (UTMALDG, UTMASTG) and touches no local memory (no LDL/STL: nothing spilled);
    some GMMA spans each Pingpong config's full tile width."""
    import re

    from fused_swiglu._lib import Library
    from fused_swiglu.build import ensure_built

    beside = toolchain.find_nvcc().nvcc.resolve().parent / "cuobjdump"  # nvcc may be a link on PATH
    cuobjdump = beside if beside.is_file() else shutil.which("cuobjdump")
    if cuobjdump is None:
        pytest.skip(f"no cuobjdump beside nvcc ({beside}) or on PATH")
    lib = Library(ensure_built())
    for c in lib.configs:
        path = lib.find(c.name)
        sass = subprocess.run([str(cuobjdump), "-sass", str(path)], capture_output=True, text=True, check=True).stdout
        kernels = [k for k in re.split(r"\n\s*Function : ", sass)[1:] if "device_kernel" in k.split("\n", 1)[0]]
        assert kernels, f"no GEMM kernel in the SASS of {path}"
        for body in kernels:
            gmma = "QGMMA" if c.dtype == "e4m3" else "HGMMA"
            for op in (gmma, "UTMALDG", "UTMASTG"):
                assert op in body, f"{op} missing from the SASS of {c.name}"
            assert not re.search(r"\b(LDL|STL)\b", body), f"local-memory access in the SASS of {c.name}"
        # one GMMA spans the tile's width (tokens in the swap-AB forms): CuTe's default atom selector
        # would run a 160-wide tile as five N = 32 GMMAs
        widths = {int(n) for n in re.findall(r"[HQ]GMMA\.64x(\d+)x(?:16|32)\b", sass)}  # K 16: 16-bit, 32: e4m3
        if c.schedule == "pingpong":
            assert c.tile_n in widths, f"{c.name}: no GMMA.64x{c.tile_n} in its SASS"


@pytest.mark.build
def test_c_abi_checks_every_dual_operand():
    """fsw_can_implement refuses a misaligned or too-short W_up with a sentence naming it, before any
    CUDA call (so it runs without a GPU); the packed kernels ignore w_up."""
    from fused_swiglu._lib import Library, Problem, Status
    from fused_swiglu.build import ensure_built

    lib = Library(ensure_built())
    dual = lib.ensure("dual_swapab_pingpong_128x16x64_1x1_bf16")
    base = dict(m=16, n=64, k=64, dtype=0, raster=0, swizzle=1,
                x=0x10000, ldx=64, w=0x20000, ldw=64, w_up=0x30000, ldw_up=64, y=0x40000, ldy=64)
    for bad, needle in [(dict(w_up=0x30002), "w_up must be 16-byte aligned"),
                        (dict(ldw_up=32), "row stride of w_up"),
                        (dict(w_up=None), "w_up must not be NULL")]:
        p = Problem(**{**base, **bad})
        status = lib._dll.fsw_can_implement(dual, ctypes.byref(p))
        assert status == Status.INVALID_ARGUMENT, (bad, status)
        assert needle in lib._dll.fsw_last_error().decode(), (bad, lib._dll.fsw_last_error())
    packed = lib.ensure("packed_swapab_pingpong_128x16x64_1x1_bf16")
    p = Problem(**{**base, "w_up": None, "ldw_up": 0})
    status = lib._dll.fsw_can_implement(packed, ctypes.byref(p))
    if status != Status.SUCCESS:  # without a GPU: the device query fails after the operand checks
        assert "w_up" not in lib._dll.fsw_last_error().decode()


@pytest.mark.build
def test_c_abi_checks_every_e4m3_scale():
    """fsw_can_implement refuses an e4m3 problem without a scale, with a misaligned one or a stride other
    than 0 / 1, naming the scale, and a 16-bit problem that passes scales; all before any CUDA call."""
    from fused_swiglu._lib import Library, Problem, Status
    from fused_swiglu.build import ensure_built

    lib = Library(ensure_built())
    e4m3 = lib.ensure("packed_fp8_swapab_pingpong_64x16x128_1x1_e4m3")
    base = dict(m=16, n=64, k=128, dtype=2, raster=0, swizzle=1, x=0x10000, ldx=128, w=0x20000, ldw=128,
                y=0x40000, ldy=64, x_scale=0x50000, w_scale=0x60000, x_scale_stride=1, w_scale_stride=1)
    for bad, needle in [(dict(x_scale=None), "x_scale must not be NULL"),
                        (dict(w_scale=None), "w_scale must not be NULL"),
                        (dict(w_scale=0x60004), "w_scale must be 16-byte aligned"),
                        (dict(x_scale_stride=2), "x_scale_stride must be 0 (one scale) or 1"),
                        (dict(k=120, ldx=120, ldw=120), "multiple of 16"),
                        (dict(ldx=136), "row stride of x must be >= 128 and a multiple of 16")]:
        p = Problem(**{**base, **bad})
        status = lib._dll.fsw_can_implement(e4m3, ctypes.byref(p))
        assert status == Status.INVALID_ARGUMENT, (bad, status)
        assert needle in lib._dll.fsw_last_error().decode(), (bad, lib._dll.fsw_last_error())
    bf16 = lib.ensure("packed_swapab_pingpong_128x16x64_1x1_bf16")
    p = Problem(**{**base, "dtype": 0, "k": 64, "ldx": 64, "ldw": 64})
    assert lib._dll.fsw_can_implement(bf16, ctypes.byref(p)) == Status.INVALID_ARGUMENT
    assert "takes 16-bit inputs: x_scale and w_scale must be NULL" in lib._dll.fsw_last_error().decode()


@pytest.mark.build
def test_c_abi_checks_e4m3_output_and_block_scales():
    """fsw_can_implement refuses, naming the rule: an e4m3-output problem without y_scale or with another
    mode, group strides that do not give every scale its own address (and accepts row-major, column-major
    and unit-dimension strides) or e4m3 rows not 16-byte aligned; y_scale on a 16-bit-output config; a
    block-scaled problem whose scale strides are shorter than the rows or (x_scale) not a multiple of 4."""
    from fused_swiglu import catalog
    from fused_swiglu._lib import Library, Problem, Status
    from fused_swiglu.build import ensure_built

    lib = Library(ensure_built())

    def refused(config, problem, needle):
        status = lib._dll.fsw_can_implement(lib.ensure(config), ctypes.byref(Problem(**problem)))
        assert status == Status.INVALID_ARGUMENT, (problem, status)
        assert needle in lib._dll.fsw_last_error().decode(), (problem, lib._dll.fsw_last_error())

    base = dict(m=16, n=256, k=128, dtype=2, raster=0, swizzle=1, x=0x10000, ldx=128, w=0x20000, ldw=128,
                y=0x40000, ldy=256, x_scale=0x50000, w_scale=0x60000, x_scale_stride=1, w_scale_stride=1,
                y_scale=0x70000, y_scale_stride_m=2, y_scale_stride_g=1, y_scale_mode=2)
    out = catalog.fp8_out_names()[0]
    for bad, needle in [(dict(y_scale=None), "y_scale must be a 4-byte aligned fp32 pointer"),
                        (dict(y_scale=0x70002), "y_scale must be a 4-byte aligned fp32 pointer"),
                        (dict(y_scale_mode=0), "y_scale_mode must be 1 (static) or 2 (per 1x128 group)"),
                        (dict(y_scale_stride_g=-1), "must give every (row, group) scale its own address"),
                        (dict(y_scale_stride_g=0), "must give every (row, group) scale its own address"),
                        (dict(y_scale_stride_m=1), "must give every (row, group) scale its own address"),
                        (dict(y_scale_stride_m=1, y_scale_stride_g=15), "must give every (row, group) scale"),
                        (dict(ldy=264), "row stride of y must be >= 256 and a multiple of 16")]:
        refused(out, {**base, **bad}, needle)
    for good in [dict(), dict(y_scale_stride_m=1, y_scale_stride_g=16), dict(m=1, y_scale_stride_m=0),
                 dict(n=128, ldy=128, y_scale_stride_g=0)]:  # row-major, column-major, a unit dimension
        status = lib._dll.fsw_can_implement(lib.ensure(out), ctypes.byref(Problem(**{**base, **good})))
        assert status != Status.INVALID_ARGUMENT, (good, lib._dll.fsw_last_error())
    refused("packed_fp8_swapab_pingpong_64x16x128_1x1_e4m3", base, "writes 16-bit y: y_scale must be NULL")
    block = catalog.fp8_blockwise_names()[0]
    blocked = {**base, "y_scale": None, "y_scale_mode": 0, "x_scale_stride": 16, "w_scale_stride": 64}
    for bad, needle in [(dict(x_scale_stride=18), "x_scale_stride (between K blocks) must be >= 16 and a multiple of 4"),
                        (dict(x_scale_stride=12), "x_scale_stride (between K blocks) must be >= 16"),
                        (dict(w_scale_stride=63), "w_scale_stride (between K blocks) must be >= 64")]:
        refused(block, {**blocked, **bad}, needle)
    status = lib._dll.fsw_can_implement(lib.ensure(block), ctypes.byref(Problem(**blocked)))
    assert status != Status.INVALID_ARGUMENT, lib._dll.fsw_last_error()  # the strides above are the minimum
