"""The PyTorch operator library (csrc/torch, fused_swiglu.build.torch_ops): cache key, prebuilt copy,
compiler lookup, and a real build that loads into this PyTorch and registers the CUDA kernels."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from fused_swiglu.build import sources, torch_ops
from fused_swiglu.errors import BuildError


def test_key_follows_the_sources_and_the_compiler(tmp_path):
    csrc = sources.csrc_dir()
    base = torch_ops._key(csrc, "g++ 12")
    assert torch_ops._key(csrc, "g++ 12") == base
    assert torch_ops._key(csrc, "g++ 13") != base
    files = torch_ops._key_files(csrc)
    assert {rel.suffix for rel in files} >= {".cpp", ".hpp", ".h"}  # the headers count as the sources do
    for changed in files:
        copy = tmp_path / changed.stem / "csrc"
        for rel in files:
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy / rel).write_bytes((csrc / rel).read_bytes() + (b"\n" if rel == changed else b""))
        assert torch_ops._key(copy, "g++ 12") != base, changed


def test_every_source_of_the_operator_library_is_compiled():
    csrc = sources.csrc_dir()
    cmd = torch_ops.command("c++", csrc, csrc / "out.so")
    cpp = sorted(p for p in (csrc / sources.TORCH_OPS_DIR).iterdir() if p.suffix == ".cpp")
    assert len(cpp) >= 2 and all(str(p) in cmd for p in cpp)


def test_the_kernel_library_key_ignores_the_operator_source():
    assert not any(rel.parts[0] == sources.TORCH_OPS_DIR for rel in sources.all_files(sources.csrc_dir()))


def test_a_copy_beside_fused_swiglu_library_is_used_as_is(tmp_path, monkeypatch):
    (tmp_path / "libfused_swiglu.so").write_bytes(b"")
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(tmp_path / "libfused_swiglu.so"))
    assert torch_ops.prebuilt() is None
    _shared_object(tmp_path / torch_ops.LIB_NAME)
    assert torch_ops.ensure_built() == tmp_path / torch_ops.LIB_NAME


def test_a_copy_beside_fused_swiglu_library_must_link_the_shared_cxx_runtime(tmp_path, monkeypatch):
    (tmp_path / "libfused_swiglu.so").write_bytes(b"")
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(tmp_path / "libfused_swiglu.so"))
    (tmp_path / torch_ops.LIB_NAME).write_bytes(b"not a library")
    with pytest.raises(BuildError, match="cannot read the operator library"):
        torch_ops.ensure_built()
    _shared_object(tmp_path / torch_ops.LIB_NAME, "-static-libstdc++")
    with pytest.raises(BuildError, match=r"defines __cxa_.*shared C\+\+ runtime libstdc\+\+\.so\.6"):
        torch_ops.ensure_built()


_THROWS = "#include <stdexcept>\nextern \"C\" int f(int v) { if (v) throw std::runtime_error(\"x\"); return v; }\n"


def _shared_object(out, *flags: str):
    """A small C++ shared object that throws (so it needs the C++ runtime), built with ``flags``."""
    source = out.parent / "throws.cpp"
    source.write_text(_THROWS)
    cxx = torch_ops.find_compiler()
    proc = subprocess.run([cxx, "-shared", "-fPIC", *flags, str(source), "-o", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{cxx} cannot build a C++ shared object {' '.join(flags)}: {proc.stderr[-300:]}")
    return out


def _static_runtime_compiler(tmp_path):
    """A CXX that links libstdc++ statically by default, as some toolchains do."""
    _shared_object(tmp_path / "probe.so", "-static-libstdc++")  # skips where libstdc++.a is missing
    wrapper = tmp_path / "static-cxx"
    wrapper.write_text(f'#!/bin/sh\nexec {torch_ops.find_compiler()} -static-libstdc++ "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_check_runtime_tells_a_shared_runtime_from_a_linked_in_one(tmp_path):
    torch_ops.check_runtime(_shared_object(tmp_path / "shared.so"))
    with pytest.raises(BuildError, match="defines __cxa_allocate_exception, __cxa_throw"):
        torch_ops.check_runtime(_shared_object(tmp_path / "static.so", "-static-libstdc++"), "g++")


def test_a_compiler_that_links_libstdcxx_statically_still_gives_a_shared_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", str(_static_runtime_compiler(tmp_path)))
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path / "cache"))
    path = torch_ops.ensure_built()
    torch_ops.check_runtime(path)
    # without the explicit link of the shared runtime the same compiler's library is refused, not
    # installed, and the next compiler builds it
    monkeypatch.setattr(torch_ops, "LINK_FLAGS", ())
    with pytest.warns(UserWarning, match="static-cxx defines __cxa_.*Trying the next compiler"):
        other = torch_ops.ensure_built(force=True)
    assert other != path and not list((tmp_path / "cache").glob(".torch-*"))
    torch_ops.check_runtime(other)
    assert path.is_file()  # the first compiler's good library stays in its own cache folder
    # the refusal is remembered: a later call goes to the next compiler without compiling again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(torch_ops, "command", None)  # no compile may start
        assert torch_ops.ensure_built() == other
    monkeypatch.undo()
    monkeypatch.setenv("CXX", str(tmp_path / "static-cxx"))
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch_ops, "LINK_FLAGS", ())
    # with no other compiler to try, a clear error
    monkeypatch.setattr(torch_ops, "compilers", lambda: [str(tmp_path / "static-cxx")])
    with pytest.warns(UserWarning), pytest.raises(BuildError, match="no C\\+\\+ compiler here builds an operator "
                                                                      "library on the shared C\\+\\+ runtime"):
        torch_ops.ensure_built(force=True)


def test_compilers_are_cxx_then_the_path_s_each_once(monkeypatch):
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    found = torch_ops.compilers()
    assert found[0] == "/opt/gcc/bin/g++" and len(found) == len({__import__("os").path.realpath(f) for f in found})


# Calls the C++ CUDA kernels of the operators with bad operands (below the dispatcher's device
# choice, so a CPU build of PyTorch reaches them) and prints each error's type and message.
_BAD_CALLS = """
import ctypes, sys, torch
import fused_swiglu.ops as ops
from fused_swiglu import op_library
op_library.drop_loaders()
ctypes.CDLL(sys.argv[1])
cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
x, w = torch.randn(3, 904), torch.randn(16, 904)
calls = [
    (torch.ops.fused_swiglu.swiglu_dual, (torch.randn(5), w, w, "")),
    (torch.ops.fused_swiglu.swiglu_dual, (x[:, :900], w, w, "")),
    (torch.ops.fused_swiglu.swiglu_packed, (x, torch.randn(17, 904), "")),
    (torch.ops.fused_swiglu.swiglu_dual_store, (torch.randn(5), w, w, "")),
    (torch.ops.fused_swiglu.swiglu_packed_store, (x, torch.randn(17, 904), "")),
    (torch.ops.fused_swiglu.dswiglu, (x, torch.randn(900, 16), torch.randn(3, 32), "")),
    (torch.ops.fused_swiglu.dswiglu, (x, torch.randn(904, 16), torch.randn(3, 30), "")),
]
for op, args in calls * 2:
    try:
        op.default.redispatch(cuda, *args)
        print("no error")
    except Exception as e:
        print(type(e).__name__, e)
"""
_BAD_CALL_MESSAGES = [
    "RuntimeError fused_swiglu::swiglu_dual: x must be 2-D (M, H); got 1-D",
    "RuntimeError fused_swiglu::swiglu_dual: x must be (M, H) with H = w_gate.shape[1] = 904; got H=900",
    "RuntimeError fused_swiglu::swiglu_packed: w_packed must have an even number of rows (2I); got 17",
    "RuntimeError fused_swiglu::swiglu_dual_store: x must be 2-D (M, H); got 1-D",
    "RuntimeError fused_swiglu::swiglu_packed_store: w_packed must have an even number of rows (2I); got 17",
    "RuntimeError fused_swiglu::dswiglu: w_down must be (H, I) with H = dz.shape[1] = 904; got w_down of shape "
    "(900, 16)",
    "RuntimeError fused_swiglu::dswiglu: gu must be (M, 2I) = (3, 32); got gu of shape (3, 30)",
] * 2


def _bad_calls(library) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _BAD_CALLS, str(library)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(cache folder, library)``: the operator library built once, from csrc, into a cache of its own,
    for the tests that load it."""
    cache = tmp_path_factory.mktemp("torch-ops-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUSED_SWIGLU_CACHE_DIR", str(cache))
        return cache, torch_ops.ensure_built()


def test_the_cuda_kernels_errors_reach_python_whole(built):
    assert _bad_calls(built[1]) == _BAD_CALL_MESSAGES


def test_error_messages_stay_whole_even_beside_a_linked_in_cxx_runtime(tmp_path, monkeypatch):
    # the library a static-runtime toolchain made before the build checked it: its messages are
    # still joined without iostreams (whose number formatting broke there)
    monkeypatch.setattr(torch_ops, "LINK_FLAGS", ())
    library = tmp_path / torch_ops.LIB_NAME
    cmd = torch_ops.command(str(_static_runtime_compiler(tmp_path)), sources.csrc_dir(), library)
    subprocess.run(cmd, check=True, capture_output=True)
    with pytest.raises(BuildError):
        torch_ops.check_runtime(library)
    assert _bad_calls(library) == _BAD_CALL_MESSAGES


def test_a_missing_compiler_is_a_build_error(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(torch_ops.shutil, "which", lambda name: None)
    with pytest.raises(BuildError, match=r"no C\+\+ compiler"):
        torch_ops.find_compiler()
    with pytest.raises(BuildError, match=r"no C\+\+ compiler"):
        torch_ops.ensure_built()


def test_a_failing_compile_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(BuildError, match="compiling the operator library failed"):
        torch_ops.ensure_built()
    assert not list(tmp_path.glob("torch-*/" + torch_ops.LIB_NAME))


@pytest.mark.build
def test_builds_loads_and_registers_the_cuda_kernels(built, monkeypatch):
    cache, path = built
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(cache))
    assert path.is_file() and path.is_relative_to(cache) and torch_ops.ensure_built() == path  # cached
    symbols = subprocess.run(["nm", "-D", str(path)], capture_output=True, text=True, check=True).stdout
    for name in ("fsw_torch_bind", "fsw_torch_clear_plans", "fsw_torch_num_plans"):
        assert f" T {name}" in symbols
    # the CUDA stream query is looked up at bind time, so a CPU build of PyTorch loads the library
    assert "aoti_torch_get_current_cuda_stream" not in symbols
    # in a fresh process: the C++ kernels replace the lazy Python ones without an override warning
    code = (
        "import ctypes, warnings, torch; import fused_swiglu.ops as ops; from fused_swiglu import op_library;"
        " op_library.drop_loaders();"
        "warnings.simplefilter('error');"
        f"dll = ctypes.CDLL({str(path)!r});"
        "ok = all(torch._C._dispatch_has_kernel_for_dispatch_key('fused_swiglu::' + n, 'CUDA')"
        " for n in ops.CUDA_OPERATORS) and len(ops.CUDA_OPERATORS) == 10;"
        "print(ok, dll.fsw_torch_bind(None, None, None, None, None, None) if not torch.version.cuda else 'cuda')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True"
    assert "Overriding" not in out.stderr and "overriding" not in out.stderr
    # loaded before any module defined its operators (the first CUDA call of one module's operator): the
    # kernels of the others wait for their schemas, and those modules register no loader over them
    code = (
        "import ctypes, warnings, torch; warnings.simplefilter('error');"
        "from fused_swiglu import op_library; op_library.drop_loaders();"
        f"ctypes.CDLL({str(path)!r});"
        "import fused_swiglu.ops as ops;"
        "x, w = torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(16, 16, dtype=torch.bfloat16);"
        "print(all(torch._C._dispatch_has_kernel_for_dispatch_key('fused_swiglu::' + n, 'CUDA')"
        " for n in ops.CUDA_OPERATORS), tuple(torch.ops.fused_swiglu.swiglu_dual(x, w, w, '').shape))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(maxsplit=1) == ["True", "(4, 16)\n"]
