"""Status mapping of the ctypes binding, with a stand-in for the loaded library."""

import ctypes

import pytest

from fused_swiglu import _lib
from fused_swiglu.errors import BuildError, UnsupportedError


class _FakeDll:
    def fsw_last_error(self):
        return b"N must be a multiple of 8; got N=4860"


def _library():
    lib = _lib.Library.__new__(_lib.Library)
    lib._dll = _FakeDll()
    return lib


def test_status_mapping_includes_last_error():
    lib = _library()
    lib.check(0, "ok")
    with pytest.raises(ValueError, match="fsw_run failed: N must be a multiple of 8; got N=4860"):
        lib.check(1, "fsw_run")
    with pytest.raises(UnsupportedError) as e:
        lib.check(2, "fsw_run")
    assert isinstance(e.value, NotImplementedError)
    with pytest.raises(RuntimeError, match=r"\(CUDA\)"):
        lib.check(3, "fsw_run")
    with pytest.raises(RuntimeError, match=r"\(INTERNAL\)"):
        lib.check(4, "fsw_run")
    with pytest.raises(RuntimeError, match=r"status 9"):
        lib.check(9, "fsw_run")


def test_struct_layouts_match_the_header():
    # fsw_problem: 3 int64, 3 int32 and 4 bytes of padding, 4 (pointer, int64) pairs, 2 (pointer,
    # pointer, int64) triples, 2 pointers and 2 int32, then a pointer, 2 int64, an int32 and 4 bytes of
    # padding, then 2 int64 and a pointer = 24 + 16 + 64 + 48 + 24 + 32 + 24 bytes
    assert ctypes.sizeof(_lib.Problem) == 232
    assert _lib.Problem.x.offset == 40 and _lib.Problem.ldy.offset == 96
    assert _lib.Problem.g.offset == 104 and _lib.Problem.lddgu.offset == 144
    assert _lib.Problem.x_scale.offset == 152 and _lib.Problem.w_scale_stride.offset == 172
    assert _lib.Problem.y_scale.offset == 176 and _lib.Problem.y_scale_mode.offset == 200
    assert _lib.Problem.experts.offset == 208 and _lib.Problem.tile_expert.offset == 224
    # the per-launch packing writes every field at the C offset
    names = [name for name, _ in _lib.Problem._fields_]
    buf = bytearray(_lib._PROBLEM.size)
    _lib._PROBLEM.pack_into(buf, 0, *range(1, len(names) + 1))
    for value, name in enumerate(names, 1):
        field = getattr(_lib.Problem, name)
        assert int.from_bytes(buf[field.offset:field.offset + field.size], "little") == value, name
    # fsw_config_info: a pointer then 16 int32
    assert ctypes.sizeof(_lib._ConfigInfo) == 72
    assert _lib._ConfigInfo.out_dtype.offset == 16 and _lib._ConfigInfo.smem_bytes.offset == 52
    assert _lib._ConfigInfo.swap_ab.offset == 60 and _lib._ConfigInfo.preactivations.offset == 64
    assert _lib._ConfigInfo.block_scaled.offset == 68


def test_missing_or_bad_library_is_a_build_error(tmp_path, monkeypatch):
    bogus = tmp_path / "libfused_swiglu.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(BuildError, match="cannot load the kernel library"):
        _lib.Library(bogus)
    monkeypatch.setattr(_lib, "_library", None)
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(BuildError, match="FUSED_SWIGLU_LIBRARY points at .*missing.so, which is not a file"):
        _lib.library()


@pytest.mark.build
def test_a_config_missing_from_the_prebuilt_folder_names_it_and_why(tmp_path, monkeypatch):
    """A prebuilt folder without the config's library, and no nvcc to build it: a BuildError naming
    the config and the folder; nothing is loaded."""
    import shutil

    from fused_swiglu.build import ensure_core

    shutil.copy(ensure_core(), tmp_path / "libfused_swiglu.so")
    lib = _lib.Library(tmp_path / "libfused_swiglu.so", config_dirs=(tmp_path,))
    name = lib.ordered_names[0]
    monkeypatch.setenv("FUSED_SWIGLU_NVCC", str(tmp_path / "no-nvcc"))
    assert lib.find(name) is None
    with pytest.raises(BuildError, match=f"config {name} is not among the prebuilt libraries in {tmp_path}, and "
                                         "building it failed: .*FUSED_SWIGLU_NVCC"):
        lib.ensure(name)
    assert not lib.is_loaded(name) and lib.config_paths == {}


@pytest.mark.build
@pytest.mark.parametrize("entry", ["fsw_can_implement", "fsw_workspace_size", "fsw_run"])
def test_the_core_checks_every_problem_before_the_config_sees_it(entry):
    """Each entry point of the core library applies the problem's rules itself (capi/problem_rules.hpp), so a
    bad problem is refused with the rule whichever entry it reaches; a good one goes on to the config's
    launcher, which on a machine without a CUDA device stops at the device query."""
    if _lib.torch.cuda.is_available():
        pytest.skip("on a GPU machine a good problem would reach the kernel; the GPU tests cover that path")
    lib = _lib.library()
    config = lib.ensure("dual_pingpong_128x128x64_1x1_bf16")
    p = _lib.Problem()
    p.m, p.n, p.k, p.dtype = 64, 12, 64, _lib.DTYPE_CODES[_lib.torch.bfloat16]
    p.x = p.w = p.w_up = p.y = 0x1000
    p.ldx = p.ldw = p.ldw_up = 64
    p.ldy = 16
    size = ctypes.c_size_t(0)

    def call() -> int:
        fn = getattr(lib._dll, entry)
        if entry == "fsw_can_implement":
            return fn(config, ctypes.addressof(p))
        if entry == "fsw_workspace_size":
            return fn(config, ctypes.addressof(p), ctypes.byref(size))
        return fn(config, ctypes.addressof(p), None, 0, None)

    assert call() == _lib.Status.INVALID_ARGUMENT
    assert lib.last_error() == "N (intermediate size I) must be a positive multiple of 8 for 16-byte TMA rows; got N=12"
    p.n, p.x = 16, 0
    assert call() == _lib.Status.INVALID_ARGUMENT and lib.last_error() == "x must not be NULL"
    p.x, p.dtype = 0x1000, _lib.DTYPE_CODES[_lib.torch.float16]
    assert call() == _lib.Status.INVALID_ARGUMENT
    assert lib.last_error().startswith("problem dtype") and "dual_pingpong_128x128x64_1x1_bf16" in lib.last_error()
    p.dtype = _lib.DTYPE_CODES[_lib.torch.bfloat16]
    assert call() == _lib.Status.CUDA and lib.last_error() == "could not query the current CUDA device"
