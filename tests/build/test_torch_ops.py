"""The PyTorch operator library (csrc/torch, fused_swiglu.build.torch_ops): cache key, prebuilt copy,
compiler lookup, and a real build that loads into this PyTorch and registers the CUDA kernels."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fused_swiglu.build import sources, torch_ops
from fused_swiglu.errors import BuildError


def test_key_follows_the_sources_and_the_compiler(tmp_path):
    csrc = sources.csrc_dir()
    base = torch_ops._key(csrc, "g++ 12")
    assert torch_ops._key(csrc, "g++ 12") == base
    assert torch_ops._key(csrc, "g++ 13") != base
    copy = tmp_path / "csrc"
    for rel in torch_ops._KEY_FILES:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_bytes((csrc / rel).read_bytes() + b"\n")
    assert torch_ops._key(copy, "g++ 12") != base


def test_the_kernel_library_key_ignores_the_operator_source():
    assert not any(rel.parts[0] == sources.TORCH_OPS_DIR for rel in sources.all_files(sources.csrc_dir()))


def test_a_copy_beside_fused_swiglu_library_is_used_as_is(tmp_path, monkeypatch):
    (tmp_path / "libfused_swiglu.so").write_bytes(b"")
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(tmp_path / "libfused_swiglu.so"))
    assert torch_ops.prebuilt() is None
    (tmp_path / torch_ops.LIB_NAME).write_bytes(b"")
    assert torch_ops.ensure_built() == tmp_path / torch_ops.LIB_NAME


def test_a_missing_compiler_is_a_build_error(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(torch_ops.shutil, "which", lambda name: None)
    with pytest.raises(BuildError, match=r"no C\+\+ compiler"):
        torch_ops.find_compiler()


def test_a_failing_compile_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(BuildError, match="compiling the operator library failed"):
        torch_ops.ensure_built()
    assert not list(tmp_path.glob("torch-*/" + torch_ops.LIB_NAME))


@pytest.mark.build
def test_builds_loads_and_registers_the_cuda_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    path = torch_ops.ensure_built()
    assert path.is_file() and torch_ops.ensure_built() == path  # cached
    symbols = subprocess.run(["nm", "-D", str(path)], capture_output=True, text=True, check=True).stdout
    for name in ("fsw_torch_bind", "fsw_torch_clear_plans", "fsw_torch_num_plans"):
        assert f" T {name}" in symbols
    # the CUDA stream query is looked up at bind time, so a CPU build of PyTorch loads the library
    assert "aoti_torch_get_current_cuda_stream" not in symbols
    # in a fresh process: the C++ kernels replace the lazy Python ones without an override warning
    code = (
        "import ctypes, warnings, torch; import fused_swiglu.ops as ops; ops._unregister_lazy();"
        "warnings.simplefilter('error');"
        f"dll = ctypes.CDLL({str(path)!r});"
        "ok = all(torch._C._dispatch_has_kernel_for_dispatch_key(n, 'CUDA') for n in"
        " ('fused_swiglu::swiglu_dual', 'fused_swiglu::swiglu_packed'));"
        "print(ok, dll.fsw_torch_bind(None, None, None, None) if not torch.version.cuda else 'cuda')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True"
    assert "Overriding" not in out.stderr and "overriding" not in out.stderr
