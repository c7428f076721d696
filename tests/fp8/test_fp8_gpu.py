"""The e4m3 kernels on a Hopper GPU against float64 of the dequantized operands. Fresh random inputs
on every run (the seed is in each failure message); outputs start poisoned (NaN)."""

from __future__ import annotations

import pytest
import torch

from fp8_common import assert_like_peer, row_operands
from fused_swiglu import fp8, unpack_gate_up
from fused_swiglu.bench.shapes import MODELS

pytestmark = pytest.mark.gpu

QWEN = {m.model.removeprefix("Qwen2.5-"): (m.hidden_size, m.intermediate_size) for m in MODELS}
# The tensor cores add e4m3 products into their accumulators with fewer mantissa bits than fp32, so no
# e4m3 GEMM on Hopper comes within 1 bf16 ulp of float64 everywhere (docs/fp8.md: 0.2-0.5 % of the
# counted elements with promotion after every 128-deep k-tile, 1.5-13 % without). The yardstick is
# cuBLAS's FP8 GEMM with the same accumulation (torch._scaled_mm: use_fast_accum for "fast", the
# default for "promoted"), fp32 output, silu * up in fp32 rounded once, as numerics.py's rule for the
# 16-bit kernels: elementwise at most twice its largest error plus one ulp, and at most 1.5 times its
# mismatches plus the 16-bit bound. A wrong scale, layout or tile errs by about the output's RMS.


def _poisoned_run(x, wp, xs, ws, **kw):
    """The operator's output, its fresh allocation first filled with NaN: an unwritten element stays NaN."""
    torch.full((x.shape[0], wp.shape[0] // 2), float("nan"), device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    return fp8.swiglu_packed_fp8(x, wp, xs, ws, **kw)


def _cublas(x, wp, xs, ws, accumulation):
    """cuBLAS's FP8 GEMM over the packed weight (row-wise scales), silu * up in fp32, rounded once."""
    M, rows = x.shape[0], wp.shape[0]
    acc = torch._scaled_mm(x, wp.t(), scale_a=xs.reshape(-1).expand(M).reshape(M, 1).contiguous(),
                           scale_b=ws.reshape(-1).expand(rows).reshape(1, rows).contiguous(),
                           out_dtype=torch.float32, use_fast_accum=accumulation == "fast")
    g, u = (t.T for t in unpack_gate_up(acc.T, layout="interleaved"))
    return (torch.nn.functional.silu(g) * u).to(torch.bfloat16)


def _check(y, x, wp, xs, ws, accumulation, what):
    assert y.dtype == torch.bfloat16 and y.shape == (x.shape[0], wp.shape[0] // 2), what
    assert torch.isfinite(y).all(), f"{what}: {(~torch.isfinite(y)).sum().item()} elements not finite (unwritten?)"
    if y.numel() == 0:
        return
    ref = fp8.dequantized_swiglu(x, wp, xs, ws, torch.float64)
    assert_like_peer(y, ref, _cublas(x, wp, xs, ws, accumulation), what)


@pytest.mark.parametrize("accumulation", fp8.ACCUMULATIONS)
@pytest.mark.parametrize("M", [1, 127, 2048])
@pytest.mark.parametrize("model", list(QWEN))
def test_qwen_shapes(model, M, accumulation, seed):
    H, I = QWEN[model]
    x, wp, xs, ws = row_operands(M, H, I)
    y = _poisoned_run(x, wp, xs, ws, accumulation=accumulation)
    _check(y, x, wp, xs, ws, accumulation, f"{model} M={M} {accumulation} seed={seed}")


@pytest.mark.parametrize("M", [1, 3, 64, 127, 128, 129, 256, 257, 4097])
def test_awkward_token_counts_write_every_element(M, seed):
    H, I = QWEN["0.5B"]
    x, wp, xs, ws = row_operands(M, H, I)
    for accumulation in fp8.ACCUMULATIONS:
        y = _poisoned_run(x, wp, xs, ws, accumulation=accumulation)
        _check(y, x, wp, xs, ws, accumulation, f"M={M} {accumulation} seed={seed}")


@pytest.mark.parametrize("name", fp8.CONFIG_NAMES)
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, False), (True, False), (False, True)])
def test_every_config_and_scale_mode(name, per_token, per_channel, seed):
    H, I = QWEN["7B"]
    x, wp, xs, ws = row_operands(300, H, I, per_token, per_channel)
    y = _poisoned_run(x, wp, xs, ws, config=name)
    acc = "promoted" if "promote" in name else "fast"
    _check(y, x, wp, xs, ws, acc, f"{name} per_token={per_token} per_channel={per_channel} seed={seed}")


@pytest.mark.parametrize("H", [1040, 4112])  # K = H not a multiple of the 128-deep k-tile
def test_k_not_a_multiple_of_the_k_tile(H, seed):
    x, wp, xs, ws = row_operands(200, H, 1024)
    for accumulation in fp8.ACCUMULATIONS:
        y = _poisoned_run(x, wp, xs, ws, accumulation=accumulation)
        _check(y, x, wp, xs, ws, accumulation, f"H={H} {accumulation} seed={seed}")


@pytest.mark.parametrize("M", [1, 64])  # one row: PyTorch calls the misaligned view contiguous
def test_strided_operands_and_unaligned_scales_are_copied(M, seed):
    H, I = 512, 1024
    x, wp, xs, ws = row_operands(M, H, I)
    wide = torch.empty(M, H + 16, device="cuda", dtype=torch.uint8).view(fp8.E4M3)[:, 8:H + 8]
    wide.copy_(x)  # rows 8 bytes off 16-byte alignment
    xs_off = torch.empty(M + 1, device="cuda")[1:]
    xs_off.copy_(xs)  # 4 bytes off
    y = fp8.swiglu_packed_fp8(wide, wp, xs_off, ws)
    base = fp8.swiglu_packed_fp8(x, wp, xs, ws)
    assert torch.equal(y, base), f"seed={seed}"
    # strided and expanded 1-D scales, and (n, 1) views of a wider matrix: read as the values they hold
    xs_strided = torch.stack([xs.reshape(-1), torch.full_like(xs.reshape(-1), 7.0)], 1)[:, 0]
    ws_strided = torch.stack([ws.reshape(-1), torch.zeros_like(ws.reshape(-1))], 1)[:, :1]
    assert torch.equal(fp8.swiglu_packed_fp8(x, wp, xs_strided, ws_strided), base), f"seed={seed}"
    one = xs.reshape(-1)[:1]
    assert torch.equal(fp8.swiglu_packed_fp8(x, wp, one.expand(M), ws),
                       fp8.swiglu_packed_fp8(x, wp, one.expand(M).contiguous(), ws)), f"seed={seed}"


def test_m_zero_still_checks_the_config():
    x, wp, xs, ws = row_operands(4, 256, 256)
    with pytest.raises(ValueError, match="config must be"):
        fp8.swiglu_packed_fp8(x[:0], wp, xs[:0], ws, config="bogus")


def test_m_zero_and_cpu_scales_on_cuda():
    x, wp, xs, ws = row_operands(0, 256, 256)
    assert fp8.swiglu_packed_fp8(x, wp, torch.ones(1, device="cuda"), ws).shape == (0, 256)
    x, wp, xs, ws = row_operands(4, 256, 256)
    with pytest.raises(ValueError, match="x_scale must be on x's device"):
        fp8.swiglu_packed_fp8(x, wp, xs.cpu(), ws)


def test_cuda_graph_and_torch_compile(seed):
    x, wp, xs, ws = row_operands(200, 896, 4864)
    eager = fp8.swiglu_packed_fp8(x, wp, xs, ws)
    graph = torch.cuda.CUDAGraph()
    fp8.swiglu_packed_fp8(x, wp, xs, ws)  # loads the config before capture
    with torch.cuda.graph(graph):
        captured = fp8.swiglu_packed_fp8(x, wp, xs, ws)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager), f"seed={seed}"
    compiled = torch.compile(lambda a: fp8.swiglu_packed_fp8(a, wp, xs, ws), fullgraph=True)
    assert torch.equal(compiled(x), eager), f"seed={seed}"


def test_the_common_call_names_each_bad_argument_with_its_typed_error():
    # row scales, bf16 y, the choice: the operator runs before the Python checks (the eager fast path)
    x, wp, xs, ws = row_operands(4, 256, 256)
    cases = (
        (TypeError, "x must be torch.float8_e4m3fn", (x.to(torch.bfloat16), wp, xs, ws), {}),
        (TypeError, "w_scale must be torch.float32", (x, wp, xs, ws.double()), {}),
        (ValueError, "w_scale must have shape", (x, wp, xs, ws[:3]), {}),
        (ValueError, "w_packed must have x's H=256 columns", (x, wp[:, :128], xs, ws), {}),
        (ValueError, "out_scale is for e4m3 y", (x, wp, xs, ws), {"out_scale": torch.ones(1, device="cuda")}),
    )
    for error, message, args, kwargs in cases:
        with pytest.raises(error, match=message):
            fp8.swiglu_packed_fp8(*args, **kwargs)
    assert fp8.swiglu_packed_fp8(x, wp, xs, ws).shape == (4, 256)
