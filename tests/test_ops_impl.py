"""The operators' CUDA path without a GPU: the lazy CUDA kernel registered until the C++ one loads,
and the plan callback through which the C++ kernels ask the config table (called here as the C++
side calls it, with the library's config list stubbed)."""

import ctypes

import pytest
import torch

from fused_swiglu import _lib, configs, ops
from fused_swiglu.errors import UnsupportedError

AVAILABLE = sorted(r.config.name(d) for r in configs.TABLE for d in (torch.bfloat16, torch.float16))


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
    monkeypatch.setattr(_lib, "sm_count", lambda device: {0: 132, 1: 114}[device])  # an H200, an H100 PCIe
    _StubLibrary.loaded.clear()


def _plan(kind: int, config: bytes, m: int, n: int, k: int, dtype: int, device: int = 0):
    index, raster, swizzle = ctypes.c_int32(-1), ctypes.c_int32(-1), ctypes.c_int32(-1)
    message = ctypes.create_string_buffer(256)
    rc = _lib._plan_callback(kind, config, m, n, k, dtype, device, ctypes.pointer(index), ctypes.pointer(raster),
                             ctypes.pointer(swizzle), ctypes.addressof(message), len(message))
    return rc, index.value, raster.value, swizzle.value, message.value.decode()


def test_plan_callback_returns_the_tables_choice(stub_library):
    # a shape outside the measured Qwen2.5 ones at 32 < M <= 64: the 64x64 rule (configs.wave_config)
    rc, index, raster, swizzle, _ = _plan(1, b"", 64, 40, 96, 0)
    assert rc == 0 and AVAILABLE[index] == "dual_pingpong_64x64x64_1x1_bf16"
    want = configs.select("dual", 64, 40, 96, torch.bfloat16, available=AVAILABLE)
    assert (raster, swizzle) == (want.raster, want.swizzle)
    rc, index, *_ = _plan(0, b"", 300, 16, 64, 1)  # M = 300 on a tiny weight: the small-weight row
    assert rc == 0 and AVAILABLE[index] == "packed_pingpong_64x128x64_1x1_fp16"
    rc, index, *_ = _plan(0, b"packed_pingpong_128x192x64_2x1_fp16", 300, 16, 64, 1)
    assert rc == 0 and AVAILABLE[index] == "packed_pingpong_128x192x64_2x1_fp16"
    assert _StubLibrary.loaded == ["dual_pingpong_64x64x64_1x1_bf16", "packed_pingpong_64x128x64_1x1_fp16",
                                   "packed_pingpong_128x192x64_2x1_fp16"]  # each chosen config loaded


def test_plan_callback_takes_the_sm_count_of_the_problem_s_device(stub_library):
    # Llama-3-8B's MLP at M = 256 (the wave rule): 360 tiles of 128x160 fill 3 rounds of 132 SMs but
    # 4 of 114, where 448 tiles of 128x128 also take 4 rounds at less width per round
    rc, index, *_ = _plan(0, b"", 256, 14336, 4096, 0, device=0)
    assert rc == 0 and AVAILABLE[index] == "packed_pingpong_128x160x64_2x1_bf16"
    rc, index, *_ = _plan(0, b"", 256, 14336, 4096, 0, device=1)
    assert rc == 0 and AVAILABLE[index] == "packed_pingpong_128x128x64_2x1_bf16"


def test_plan_callback_reports_errors_as_text(stub_library):
    rc, *_, message = _plan(1, b"packed_pingpong_128x192x64_2x1_fp16", 300, 16, 64, 1)
    assert rc == 1 and message.startswith("ValueError: config must name a dual kernel")
    rc, *_, message = _plan(1, b"dual_pingpong_64x64x64_9x9_bf16", 300, 16, 64, 0)
    assert rc == 1 and "UnsupportedError" in message and "not in the kernel library" in message


def test_plan_callback_message_is_cut_to_the_buffer(stub_library):
    index = raster = swizzle = ctypes.pointer(ctypes.c_int32())
    message = ctypes.create_string_buffer(b"#" * 16)
    rc = _lib._plan_callback(1, b"nonsense", 1, 16, 64, 0, 0, index, raster, swizzle, ctypes.addressof(message), 8)
    assert rc == 1 and len(message.value) == 7 and message.raw[8:16] == b"#" * 8  # NUL-terminated inside 8 bytes


def test_cuda_kernels_are_registered_before_the_libraries_load():
    for name in ("fused_swiglu::swiglu_dual", "fused_swiglu::swiglu_packed"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
    assert ops.swiglu_dual.name() == "fused_swiglu::swiglu_dual"
