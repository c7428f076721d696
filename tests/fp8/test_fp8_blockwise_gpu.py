"""The block-scaled e4m3 kernels (1 x 128 token-group and 128 x 128 weight-block scales) on a Hopper GPU,
against float64 of the dequantized operands. Fresh random inputs on every run (the seed is in each
failure message); outputs start poisoned (NaN).

The yardstick is the same computation by cuBLAS: per 128-deep K block, ``torch._scaled_mm`` over the
block's columns with that block's scales as row-wise scales (promoting accumulation, fp32 output), the
blocks summed in float64, silu * up, rounded once to bf16. As in test_fp8_gpu.py: every element within
twice its largest error plus one ulp, and at most 1.5 times its mismatches plus the 16-bit bound. A
wrong scale, block or layout errs by about the output's RMS.
"""

from __future__ import annotations

import pytest
import torch

from fp8_common import assert_like_peer
from fused_swiglu import fp8, unpack_gate_up

pytestmark = pytest.mark.gpu

QWEN = {"0.5B": (896, 4864), "7B": (3584, 18944), "72B": (8192, 29568)}


def _operands(M, H, I, column_major=True):
    x, xs = fp8.quantize_e4m3_groups(torch.randn(M, H, device="cuda"), column_major_scales=column_major)
    # weight blocks of different magnitudes, so that a block's scale matters
    spread = torch.rand(-(-I // 128), -(-H // 128), device="cuda").add(0.25).repeat_interleave(128, 0)
    spread = spread.repeat_interleave(128, 1)[:I, :H]
    gq, gs = fp8.quantize_e4m3_blocks(torch.randn(I, H, device="cuda") * H**-0.5 * spread)
    uq, us = fp8.quantize_e4m3_blocks(torch.randn(I, H, device="cuda") * H**-0.5 * spread.flip(0))
    wp, ws = fp8.pack_weights_blockwise(gq, uq, gs, us)
    return x, wp, xs, ws


def _poisoned_run(x, wp, xs, ws, **kw):
    torch.full((x.shape[0], wp.shape[0] // 2), float("nan"), device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    return fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block", **kw)


def _cublas(x, wp, xs, ws):
    """cuBLAS per K block (row-wise scaled FP8 GEMMs), the blocks summed in float64."""
    M, H = x.shape
    rows = wp.shape[0]
    acc = torch.zeros(M, rows, dtype=torch.float64, device="cuda")
    for kb in range(-(-H // 128)):
        cols = slice(128 * kb, min(128 * kb + 128, H))
        sa = xs[:, kb].contiguous().reshape(M, 1)
        sb = ws[:, kb].repeat_interleave(8).reshape(1, rows).contiguous()
        acc += torch._scaled_mm(x[:, cols].contiguous(), wp[:, cols].contiguous().t(), scale_a=sa, scale_b=sb,
                                out_dtype=torch.float32, use_fast_accum=False).double()
    g, u = (t.T for t in unpack_gate_up(acc.T, layout="interleaved"))
    return (torch.nn.functional.silu(g) * u).to(torch.bfloat16)


def _check(y, x, wp, xs, ws, what):
    assert y.dtype == torch.bfloat16 and y.shape == (x.shape[0], wp.shape[0] // 2), what
    assert torch.isfinite(y).all(), f"{what}: {(~torch.isfinite(y)).sum().item()} elements not finite (unwritten?)"
    if y.numel() == 0:
        return
    ref = fp8.dequantized_swiglu(x, wp, xs, ws, torch.float64, scaling="block")
    assert_like_peer(y, ref, _cublas(x, wp, xs, ws), what)


@pytest.mark.parametrize("M", [1, 127, 2048])
@pytest.mark.parametrize("model", list(QWEN))
def test_qwen_shapes(model, M, seed):
    H, I = QWEN[model]
    x, wp, xs, ws = _operands(M, H, I)
    _check(_poisoned_run(x, wp, xs, ws), x, wp, xs, ws, f"{model} M={M} seed={seed}")


@pytest.mark.parametrize("M", [1, 3, 64, 127, 129, 257, 4097])
def test_awkward_token_counts_write_every_element(M, seed):
    H, I = QWEN["0.5B"]
    x, wp, xs, ws = _operands(M, H, I)
    for name in fp8.BLOCKWISE_CONFIG_NAMES:
        _check(_poisoned_run(x, wp, xs, ws, config=name), x, wp, xs, ws, f"{name} M={M} seed={seed}")


@pytest.mark.parametrize("H,I", [(1040, 1040), (4112, 4880), (256, 136)])  # K and I not multiples of 128
def test_partial_k_blocks_and_partial_weight_blocks(H, I, seed):
    x, wp, xs, ws = _operands(200, H, I)
    for name in fp8.BLOCKWISE_CONFIG_NAMES:
        _check(_poisoned_run(x, wp, xs, ws, config=name), x, wp, xs, ws, f"{name} H={H} I={I} seed={seed}")


def test_row_major_token_scales_are_read_alike(seed):
    x, wp, xs, ws = _operands(300, 3584, 2048, column_major=False)
    assert xs.stride(1) == 1
    y = fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block")
    assert torch.equal(y, fp8.swiglu_packed_fp8(x, wp, fp8.column_major(xs), ws, scaling="block")), f"seed={seed}"
    _check(y, x, wp, xs, ws, f"row-major x_scale seed={seed}")


def test_cuda_graph_torch_compile_and_m_zero(seed):
    x, wp, xs, ws = _operands(200, 896, 4864)
    eager = fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fp8.swiglu_packed_fp8(x, wp, xs, ws, scaling="block")
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager), f"seed={seed}"
    compiled = torch.compile(lambda a: fp8.swiglu_packed_fp8(a, wp, xs, ws, scaling="block"), fullgraph=True)
    assert torch.equal(compiled(x), eager), f"seed={seed}"
    assert fp8.swiglu_packed_fp8(x[:0], wp, xs[:0], ws, scaling="block").shape == (0, 4864)


@pytest.mark.parametrize("M", [1, 3, 129])
def test_x_quantized_inside_equals_quantize_then_the_block_scaled_kernel(M, seed):
    """``swiglu_packed_fp8_dynamic`` (the packed operator with x_scale None) gives the bits of quantizing x
    first; a one-row x whose row stride is below H (a transposed column) is read as its values."""
    H, I = 512, 256
    _, wp, _, ws = _operands(M, H, I)
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    xq, xs = fp8.quantize_e4m3_groups(x, column_major_scales=True)
    want = fp8.swiglu_packed_fp8(xq, wp, xs, ws, scaling="block")
    assert torch.equal(fp8.swiglu_packed_fp8_dynamic(x, wp, ws), want), f"M={M} seed={seed}"
    if M == 1:
        column = x.T.contiguous().as_strided((1, H), (1, 1))  # x's values, row stride 1 (a transposed column)
        assert torch.equal(fp8.swiglu_packed_fp8_dynamic(column, wp, ws), want), f"seed={seed}"
