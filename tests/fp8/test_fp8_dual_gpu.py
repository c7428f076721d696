"""The dual kernel in e4m3 (fused_swiglu.fp8.swiglu_fp8) on a Hopper GPU against float64 of the dequantized
operands, with the yardstick of the packed e4m3 kernel's tests (tests/test_fp8_gpu.py): cuBLAS's FP8 GEMM with
fast accumulation. Every config is forced by name; outputs start poisoned (NaN), so an unwritten element
fails; the seed is in each failure message."""

from __future__ import annotations

import pytest
import torch

from fp8_common import assert_like_peer
from fused_swiglu import fp8
from fused_swiglu.bench.shapes import QWEN2_5_BY_SIZE as QWEN

pytestmark = pytest.mark.gpu

SCALE_KINDS = [(True, True), (False, False), (True, False), (False, True)]  # (per token, per channel)


def _operands(M, H, I, per_token=True, per_channel=True):
    """x ~ N(0, 1) (M, H), W_gate ~ N(0, 1/H) and W_up ~ N(0, 9/H) (I, H) on the GPU, quantized to e4m3 per
    token / per output channel (or per tensor): ``(x, w_gate, w_up, x_scale, gate_scale, up_scale)``. The up
    weights' larger range gives them other scales than the gate's, so a gate/up mix-up of the scales shows."""
    x, xs = fp8.quantize_e4m3(torch.randn(M, H, device="cuda"), per_row=per_token)
    gq, gs = fp8.quantize_e4m3(torch.randn(I, H, device="cuda") * H**-0.5, per_row=per_channel)
    uq, us = fp8.quantize_e4m3(torch.randn(I, H, device="cuda") * 3 * H**-0.5, per_row=per_channel)
    return x, gq, uq, xs, gs, us


def _poisoned_run(*ops, **kw):
    """The operator's output, its fresh allocation first filled with NaN: an unwritten element stays NaN."""
    torch.full((ops[0].shape[0], ops[1].shape[0]), float("nan"), device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    return fp8.swiglu_fp8(*ops, **kw)


def _cublas(x, gq, uq, xs, gs, us):
    """cuBLAS's FP8 GEMM over [W_gate; W_up] (row-wise scales, fast accumulation), silu * up in fp32, rounded once."""
    M, I = x.shape[0], gq.shape[0]
    w_cat = torch.cat([gq.view(torch.uint8), uq.view(torch.uint8)]).view(fp8.E4M3)
    w_scale = torch.cat([gs.reshape(-1).expand(I), us.reshape(-1).expand(I)]).reshape(1, 2 * I)
    acc = torch._scaled_mm(x, w_cat.t(), scale_a=xs.reshape(-1).expand(M).reshape(M, 1).contiguous(),
                           scale_b=w_scale.contiguous(), out_dtype=torch.float32, use_fast_accum=True)
    return (torch.nn.functional.silu(acc[:, :I]) * acc[:, I:]).to(torch.bfloat16)


def _check(y, ops, what):
    x, gq = ops[0], ops[1]
    assert y.dtype == torch.bfloat16 and y.shape == (x.shape[0], gq.shape[0]) and y.is_contiguous(), what
    assert torch.isfinite(y).all(), f"{what}: {(~torch.isfinite(y)).sum().item()} elements not finite (unwritten?)"
    if y.numel() == 0:
        return
    ref = fp8.dequantized_swiglu_dual(*ops, dtype=torch.float64)
    assert_like_peer(y, ref, _cublas(*ops), what)


@pytest.mark.parametrize("name", fp8.DUAL_CONFIG_NAMES)
@pytest.mark.parametrize("M", [1, 3, 127, 129, 4097])
def test_every_config_scale_kind_and_token_count(name, M, seed):
    """Qwen2.5-0.5B's MLP (H 896, I 4864): the shifted last token tile (M = 127, 129, 4097 over 64- and
    128-token tiles), partial clusters, and token tiles of the swap-AB form past M."""
    H, I = QWEN["0.5B"]
    for per_token, per_channel in SCALE_KINDS:
        ops = _operands(M, H, I, per_token, per_channel)
        y = _poisoned_run(*ops, config=name)
        _check(y, ops, f"{name} M={M} per_token={per_token} per_channel={per_channel} seed={seed}")


@pytest.mark.parametrize("name", fp8.DUAL_CONFIG_NAMES)
@pytest.mark.parametrize("H,I", [(1040, 1024), (4112, 1000), (896, 8)])
def test_k_and_i_not_multiples_of_the_tile(name, H, I, seed):
    """K = H not a multiple of the 128-deep k-tile; I not a multiple of a tile's 64 gate rows (1000), or
    less than one tile (8): the last tile's gate and up halves reach past I."""
    for M in (5, 200):
        ops = _operands(M, H, I)
        y = _poisoned_run(*ops, config=name)
        _check(y, ops, f"{name} H={H} I={I} M={M} seed={seed}")


@pytest.mark.parametrize("M", [1, 16, 17, 127, 2048])
@pytest.mark.parametrize("model", list(QWEN))
def test_the_choice_on_qwen_shapes(model, M, seed):
    H, I = QWEN[model]
    ops = _operands(M, H, I)
    _check(_poisoned_run(*ops), ops, f"{model} M={M} seed={seed}")


@pytest.mark.parametrize("M", [1, 3, 129, 2048])
@pytest.mark.parametrize("per_token,per_channel", SCALE_KINDS)
def test_agrees_with_the_packed_kernel(M, per_token, per_channel, seed):
    """The dual and the packed e4m3 kernels (both fast accumulation) on the same operands, each held to the
    yardstick with the other as the peer: the same function, the same class of error."""
    H, I = QWEN["7B"]
    x, gq, uq, xs, gs, us = ops = _operands(M, H, I, per_token, per_channel)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    dual = _poisoned_run(*ops)
    packed = fp8.swiglu_packed_fp8(x, wp, xs, ws)
    what = f"M={M} per_token={per_token} per_channel={per_channel} seed={seed}"
    _check(dual, ops, what)
    ref = fp8.dequantized_swiglu_dual(*ops, dtype=torch.float64)
    assert_like_peer(dual, ref, packed, f"dual against packed, {what}")
    assert_like_peer(packed, ref, dual, f"packed against dual, {what}")


@pytest.mark.parametrize("M", [1, 64, 300])
def test_strided_operands_and_scale_layouts_give_the_same_result(M, seed):
    """Operands TMA cannot read are copied; the weight scales are read in place when they are views of one
    vector and concatenated otherwise; (n, 1) scales and unaligned ones give the same bits."""
    H, I = 512, 1024
    x, gq, uq, xs, gs, us = _operands(M, H, I)
    base = fp8.swiglu_fp8(x, gq, uq, xs, gs, us)
    wide = torch.empty(M, H + 16, device="cuda", dtype=torch.uint8).view(fp8.E4M3)[:, 8:H + 8]
    wide.copy_(x)  # rows 8 bytes off 16-byte alignment
    up_wide = torch.empty(I, H + 16, device="cuda", dtype=torch.uint8).view(fp8.E4M3)[:, :H]
    up_wide.copy_(uq)  # row stride H + 16: TMA-ready, read in place
    xs_off = torch.empty(M + 1, device="cuda")[1:]
    xs_off.copy_(xs)  # 4 bytes off
    one = torch.cat([gs, us])  # gate scales then up scales: read in place
    off = torch.cat([xs[:1], one])[1:]  # the same, 4 bytes off 16-byte alignment: concatenated
    for what, args in (
        ("strided x, w_up", (wide, gq, up_wide, xs, gs, us)),
        ("unaligned x_scale", (x, gq, uq, xs_off, gs, us)),
        ("(n, 1) scales", (x, gq, uq, xs.reshape(-1, 1), gs.reshape(-1, 1), us.reshape(-1, 1))),
        ("views of one scale vector", (x, gq, uq, xs, one[:I], one[I:])),
        ("unaligned views", (x, gq, uq, xs, off[:I], off[I:])),
        ("up before gate in one vector", (x, gq, uq, xs, *reversed(torch.cat([us, gs]).split(I)))),
        ("strided scales", (x, gq, uq, torch.stack([xs, 7 * xs], 1)[:, 0], torch.stack([gs, 0 * gs], 1)[:, 0],
                            torch.stack([us, 3 * us], 1)[:, :1])),
    ):
        assert torch.equal(fp8.swiglu_fp8(*args), base), f"{what}, M={M} seed={seed}"


def test_m_zero_and_cpu_scales_on_cuda():
    x, gq, uq, xs, gs, us = _operands(0, 256, 256)
    assert fp8.swiglu_fp8(x, gq, uq, torch.ones(1, device="cuda"), gs, us).shape == (0, 256)
    x, gq, uq, xs, gs, us = _operands(4, 256, 256)
    with pytest.raises(ValueError, match="up_scale must be on x's device"):
        fp8.swiglu_fp8(x, gq, uq, xs, gs, us.cpu())


def test_cuda_graph_and_torch_compile(seed):
    x, gq, uq, xs, gs, us = _operands(200, 896, 4864)
    eager = fp8.swiglu_fp8(x, gq, uq, xs, gs, us)
    graph = torch.cuda.CUDAGraph()
    fp8.swiglu_fp8(x, gq, uq, xs, gs, us)  # loads the config before capture
    with torch.cuda.graph(graph):
        captured = fp8.swiglu_fp8(x, gq, uq, xs, gs, us)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager), f"seed={seed}"
    compiled = torch.compile(lambda a: fp8.swiglu_fp8(a, gq, uq, xs, gs, us), fullgraph=True)
    assert torch.equal(compiled(x), eager), f"seed={seed}"


def test_the_common_call_names_each_bad_argument_with_its_typed_error():
    # the choice: the operator runs before the Python checks (the eager fast path)
    x, gq, uq, xs, gs, us = _operands(4, 256, 256)
    cases = (
        (TypeError, "gate_scale must be torch.float32", (x, gq, uq, xs, gs.double(), us)),
        (ValueError, "w_up must have w_gate's I=256 rows", (x, gq, uq[:128], xs, gs, us)),
        (ValueError, "gate_scale and up_scale must be of one kind", (x, gq, uq, xs, gs, us[:1])),
    )
    for error, message, args in cases:
        with pytest.raises(error, match=message):
            fp8.swiglu_fp8(*args)
