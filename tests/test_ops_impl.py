"""The GPU implementation of the ops, run on CPU tensors with the library call stubbed: checks
what reaches ``_lib.run`` (operands made TMA-ready, config chosen, output shape, no launch for
M == 0)."""

import pytest
import torch

from fused_swiglu import _lib, configs, ops
from fused_swiglu.reference import swiglu_fp32_one_rounding
from fused_swiglu.weights import pack_gate_up, unpack_gate_up

AVAILABLE = frozenset(r.config.name(d) for r in configs.TABLE for d in (torch.bfloat16, torch.float16))


@pytest.fixture
def launches(monkeypatch):
    calls = []

    def fake_run(name, x, w, w_up, y, raster=0, swizzle=1):
        calls.append(dict(name=name, x=x, w=w, w_up=w_up, y=y, raster=raster, swizzle=swizzle))
        wg, wu = (w, w_up) if w_up is not None else unpack_gate_up(w, layout="interleaved")
        y.copy_(swiglu_fp32_one_rounding(x, wg, wu))

    monkeypatch.setattr(_lib, "run", fake_run)
    monkeypatch.setattr(_lib, "config_names", lambda: AVAILABLE)
    monkeypatch.setattr(_lib, "library", _no_library)
    return calls


def _no_library():
    raise AssertionError("these tests must not load the kernel library")


def test_dual_impl_passes_tma_ready_operands(launches):
    base = torch.randn(64, 2 * 96, dtype=torch.bfloat16)
    x = base[:, ::2]  # (64, 96), column stride 2 -> copied
    w = torch.randn(2 * 40, 96, dtype=torch.bfloat16)
    wg, wu = w[:40], w[40:]  # aligned row slices -> not copied
    y = ops.IMPLS[ops.swiglu_dual](x, wg, wu, "")
    (call,) = launches
    assert call["x"].is_contiguous() and call["x"].data_ptr() != x.data_ptr()
    assert call["w"].data_ptr() == wg.data_ptr() and call["w_up"].data_ptr() == wu.data_ptr()
    # a shape outside the measured Qwen2.5 ones at 32 < M <= 64: the 64x64 rule (configs.wave_config)
    assert call["name"] == "dual_pingpong_64x64x64_1x1_bf16" and call["y"] is y
    assert y.shape == (64, 40) and y.is_contiguous()
    assert torch.equal(y, swiglu_fp32_one_rounding(x, wg, wu))


def test_packed_impl_and_explicit_config(launches):
    x = torch.randn(300, 64, dtype=torch.float16)
    wg, wu = torch.randn(16, 64, dtype=torch.float16), torch.randn(16, 64, dtype=torch.float16)
    y = ops.IMPLS[ops.swiglu_packed](x, pack_gate_up(wg, wu), "")
    # M = 300 on a tiny weight: the small-weight row of the table
    assert launches[0]["name"] == "packed_pingpong_64x128x64_1x1_fp16" and launches[0]["w_up"] is None
    assert torch.equal(y, swiglu_fp32_one_rounding(x, wg, wu))
    ops.IMPLS[ops.swiglu_packed](x, pack_gate_up(wg, wu), "packed_pingpong_128x192x64_2x1_fp16")
    assert launches[1]["name"] == "packed_pingpong_128x192x64_2x1_fp16"


def test_empty_inputs_do_not_launch(launches):
    w = torch.randn(16, 64, dtype=torch.bfloat16)
    assert ops.IMPLS[ops.swiglu_dual](torch.zeros(0, 64, dtype=torch.bfloat16), w, w, "").shape == (0, 16)
    assert ops.IMPLS[ops.swiglu_packed](torch.zeros(0, 64, dtype=torch.bfloat16), torch.cat([w, w]), "").shape == (0, 16)
    assert launches == []
