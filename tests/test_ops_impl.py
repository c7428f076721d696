"""The operators' CUDA path without a GPU: the lazy CUDA kernel registered until the C++ one loads,
and the plan callback through which the C++ kernels ask the config choice (called here as the C++
side calls it, with the library's config list stubbed)."""

import ctypes

import pytest
import torch

from fused_swiglu import _lib, _plans, catalog, configs, ops
from fused_swiglu.errors import UnsupportedError

AVAILABLE = sorted(catalog.names())


class _StubLibrary:
    index = {name: i for i, name in enumerate(AVAILABLE)}
    names = frozenset(AVAILABLE)
    loaded: list[str] = []

    @classmethod
    def ensure(cls, name):  # the real one loads (building if needed) the config's library
        if name not in cls.index:
            raise UnsupportedError(f"config {name!r} is not in the kernel library")
        cls.loaded.append(name)
        return cls.index[name]


@pytest.fixture
def stub_library(monkeypatch):
    monkeypatch.setattr(_lib, "library", lambda: _StubLibrary)
    monkeypatch.setattr(_lib, "config_names", lambda: _StubLibrary.names)
    # an H200 and an H100 PCIe
    monkeypatch.setattr(_lib, "target", lambda device: {0: (132, "NVIDIA H200", 232448),
                                                        1: (114, "NVIDIA H100 PCIe", 232448)}[device])
    _StubLibrary.loaded.clear()


def _plan(kind: int, config: bytes, m: int, n: int, k: int, dtype: int, device: int = 0, tile: int = 0):
    index, raster, swizzle = ctypes.c_int32(-1), ctypes.c_int32(-1), ctypes.c_int32(-1)
    message = ctypes.create_string_buffer(256)
    rc = _plans.plan_callback(kind, config, m, n, k, tile, dtype, device, ctypes.pointer(index),
                              ctypes.pointer(raster), ctypes.pointer(swizzle), ctypes.addressof(message), len(message))
    return rc, index.value, raster.value, swizzle.value, message.value.decode()


def test_plan_callback_returns_the_choice_for_the_device(stub_library):
    for args in [(1, 64, 40, 96, 0), (0, 300, 16, 64, 1), (0, 6000, 14336, 4096, 0)]:
        kind, m, n, k, dtype = args
        rc, index, raster, swizzle, _ = _plan(kind, b"", m, n, k, dtype)
        want = configs.select(("packed", "dual")[kind], m, n, k, (torch.bfloat16, torch.float16)[dtype],
                              available=AVAILABLE, gpu="NVIDIA H200", smem_limit=232448)
        assert rc == 0 and (AVAILABLE[index], raster, swizzle) == (want.name, want.raster, want.swizzle)
    rc, index, *_ = _plan(0, b"packed_pingpong_128x192x64_2x1_fp16", 300, 16, 64, 1)
    assert rc == 0 and AVAILABLE[index] == "packed_pingpong_128x192x64_2x1_fp16"
    assert _StubLibrary.loaded[-1] == "packed_pingpong_128x192x64_2x1_fp16"  # each chosen config loaded
    assert len(_StubLibrary.loaded) == 4


def test_plan_callback_takes_the_sm_count_and_name_of_the_problem_s_device(stub_library):
    """Device 1 (114 SMs, no tuned data of its own) gets the model's choice for 114 SMs."""
    from fused_swiglu import tuning

    data = tuning.load("NVIDIA H100 PCIe", "bf16")
    seen = 0
    for m in (256, 333, 1000, 3000):
        rc, index, raster, swizzle, _ = _plan(0, b"", m, 14336, 4096, 0, device=1)
        want = configs.model_config("packed", m, 14336, 4096, "fast", 114, data, 232448)
        assert rc == 0 and (AVAILABLE[index], raster, swizzle) == (want.name(torch.bfloat16), want.raster, want.swizzle)
        rc, index0, *_ = _plan(0, b"", m, 14336, 4096, 0, device=0)
        seen += index0 != index
    assert seen > 0  # the two devices do not always agree


def test_plan_callback_reports_errors_as_text(stub_library):
    rc, *_, message = _plan(1, b"packed_pingpong_128x192x64_2x1_fp16", 300, 16, 64, 1)
    assert rc == 1 and message.startswith("ValueError: config must name a dual kernel")
    rc, *_, message = _plan(1, b"dual_pingpong_64x64x64_9x9_bf16", 300, 16, 64, 0)  # no such config
    assert rc == 1 and message.startswith("ValueError: config must name a dual kernel")
    assert "got config='dual_pingpong_64x64x64_9x9_bf16' (closest: " in message


def test_plan_callback_gives_a_grouped_problem_the_config_of_its_token_tile(stub_library, monkeypatch, capsys):
    names = catalog.grouped_names()
    monkeypatch.setattr(_StubLibrary, "index", {name: i for i, name in enumerate(names)})
    for tile in configs.grouped.GROUPED_TOKEN_TILES:
        rc, index, raster, swizzle, message = _plan(9, b"", 4096, 768, 2048, 0, tile=tile)
        assert rc == 0, message
        assert (names[index], raster, swizzle) == (f"{configs.grouped.GROUPED_CONFIGS[tile]}_bf16", 1, 1)
        # the widest tile's token tiles in groups of 8 where an expert's weight tiles, ceil(2 I / 128), outnumber
        # the device's SMs: I = 14336 (224 tiles) on either; I = 8448 (132 tiles) on the 114-SM device only
        for I, device, group in ((14336, 0, 8), (14336, 1, 8), (8448, 0, 1), (8448, 1, 8)):
            rc, index, raster, swizzle, message = _plan(9, b"", 4096, I, 4096, 0, device, tile=tile)
            assert rc == 0, message
            assert (raster, swizzle) == (1, group if tile == 128 else 1), (I, device, tile)
    monkeypatch.setenv("FUSED_SWIGLU_LOG_PLANS", "1")
    capsys.readouterr()
    _plan(9, b"", 4096, 768, 2048, 1, tile=64)
    assert "grouped_dual M=4096 token tile 64 I=768 H=2048 fp16" in capsys.readouterr().err
    rc, *_, message = _plan(9, b"", 4096, 768, 2048, 0, tile=32)
    assert rc == 1 and "token tile must be one of (16, 64, 128) rows" in message
    rc, *_, message = _plan(9, names[0].encode(), 4096, 768, 2048, 0, tile=128)
    assert rc == 1 and "has 16-row token tiles, but the layout's tiles hold 128 rows" in message


def test_plan_callback_message_is_cut_to_the_buffer(stub_library):
    index = raster = swizzle = ctypes.pointer(ctypes.c_int32())
    message = ctypes.create_string_buffer(b"#" * 16)
    rc = _plans.plan_callback(1, b"nonsense", 1, 16, 64, 0, 0, 0, index, raster, swizzle, ctypes.addressof(message), 8)
    assert rc == 1 and len(message.value) == 7 and message.raw[8:16] == b"#" * 8  # NUL-terminated inside 8 bytes


def test_cuda_kernels_are_registered_before_the_libraries_load():
    for name in ("fused_swiglu::swiglu_dual", "fused_swiglu::swiglu_packed"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
    assert ops.swiglu_dual.name() == "fused_swiglu::swiglu_dual"


def test_plan_callback_prints_each_plan_and_its_reason_when_asked(stub_library, monkeypatch, capsys):
    _plan(1, b"", 8192, 18944, 3584, 0)
    assert capsys.readouterr().err == ""  # off by default
    monkeypatch.setenv("FUSED_SWIGLU_LOG_PLANS", "1")
    rc, index, raster, swizzle, _ = _plan(1, b"", 8192, 18944, 3584, 0)
    line = capsys.readouterr().err
    assert rc == 0 and line.count("\n") == 1
    assert line.startswith(f"fused_swiglu plan: dual M=8192 I=18944 H=3584 bf16 on NVIDIA H200 (132 SMs): "
                           f"{AVAILABLE[index]} raster {raster} swizzle {swizzle}; the sustained costs at the power cap")


def test_a_failing_explanation_never_fails_the_plan(stub_library, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setenv("FUSED_SWIGLU_LOG_PLANS", "1")
    monkeypatch.setattr(configs, "explain", broken)
    rc, *_ = _plan(1, b"", 64, 4096, 1024, 0)
    assert rc == 0 and capsys.readouterr().err.rstrip().endswith("; no reason given (ValueError: boom)")


def test_plan_callback_launches_a_named_config_with_the_launch_its_name_gives(stub_library):
    name = "packed_pingpong_128x192x64_2x1_bf16"
    rc, index, raster, swizzle, _ = _plan(0, f"{name}@2:8".encode(), 8192, 4864, 896, 0)
    assert rc == 0 and (AVAILABLE[index], raster, swizzle) == (name, 2, 8)
    rc, *_, message = _plan(0, f"{name}@2:3".encode(), 8192, 4864, 896, 0)
    assert rc == 1 and "swizzle in (1, 2, 4, 8)" in message
