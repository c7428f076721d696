"""The e4m3-output kernels on a Hopper GPU: y quantized in the epilogue per 1 x 128 group (or with a
static scale), against float64 of the dequantized operands. Fresh random inputs on every run (the seed
is in each failure message); outputs and scales start poisoned (NaN).

What is checked, with E the GEMM's own error (twice the largest error of cuBLAS's FP8 GEMM with the
same fast accumulation, over the whole output, as in test_fp8_gpu.py): every group scale is within
E / 448 of float64's group amax / 448; every element is within one e4m3 ulp (plus E / scale) of
float64's value divided by the kernel's scale, or +-448 where that quotient exceeds 448; every nonzero
group reaches the top of the e4m3 range (its largest element quantizes to 416 or 448); nothing is NaN.
A wrong group, row, scale or tile errs by far more.
"""

from __future__ import annotations

import pytest
import torch

from fp8_common import e4m3_ulp, row_operands
from fused_swiglu import fp8, unpack_gate_up

pytestmark = pytest.mark.gpu

QWEN = {"0.5B": (896, 4864), "7B": (3584, 18944), "72B": (8192, 29568)}


def _poison(M, I):
    """Fill the allocator's next blocks of y's and y_scale's sizes with NaN, so that an element the
    kernel does not write stays NaN (both held until both are filled, so neither reuses the other's)."""
    y = torch.full((M, I), 0x7F, device="cuda", dtype=torch.uint8)  # 0x7F: e4m3 NaN
    scale = torch.full((M, -(-I // fp8.GROUP)), float("nan"), device="cuda")
    torch.cuda.synchronize()
    del y, scale


def _gemm_error(x, wp, xs, ws, ref):
    """E: twice the largest error of cuBLAS's fast-accumulation FP8 GEMM (fp32 out, silu * up in fp32)."""
    M, rows = x.shape[0], wp.shape[0]
    acc = torch._scaled_mm(x, wp.t(), scale_a=xs.reshape(-1).expand(M).reshape(M, 1).contiguous(),
                           scale_b=ws.reshape(-1).expand(rows).reshape(1, rows).contiguous(),
                           out_dtype=torch.float32, use_fast_accum=True)
    g, u = (t.T for t in unpack_gate_up(acc.T, layout="interleaved"))
    peer = torch.nn.functional.silu(g.double()) * u.double()
    return 2 * (peer - ref).abs().max().item() + 1e-30


def _groups(t: torch.Tensor) -> torch.Tensor:
    """(M, I) -> (M, ceil(I / 128), 128), zero-padded."""
    M, I = t.shape
    G = -(-I // fp8.GROUP)
    return torch.nn.functional.pad(t, (0, G * fp8.GROUP - I)).reshape(M, G, fp8.GROUP)


def _check_values(q, scale, ref, E, what):
    """q (M, I) e4m3 against ref / scale, scale broadcast over its groups (M, G) or one value."""
    assert q.dtype == fp8.E4M3 and q.shape == ref.shape and q.is_contiguous(), what
    qd = q.double()
    assert not torch.isnan(qd).any(), f"{what}: {torch.isnan(qd).sum().item()} NaN elements (unwritten?)"
    M, I = ref.shape
    s = scale.double().reshape(M, -1, 1) if scale.numel() > 1 else scale.double().reshape(1, 1, 1)
    s = s.expand(M, -(-I // fp8.GROUP), fp8.GROUP).reshape(M, -1)[:, :I]
    zero = s == 0  # an all-zero group: zeros
    s = torch.where(zero, torch.ones_like(s), s)
    exact = torch.where(zero, torch.zeros_like(ref), ref / s)
    slack = torch.where(zero, torch.zeros_like(s), E / s)
    ok = (qd - exact).abs() <= torch.where(zero, torch.zeros_like(s), e4m3_ulp(exact)) + slack
    saturated = (exact.abs() > fp8.E4M3_MAX - slack) & (qd.abs() == fp8.E4M3_MAX) & (qd.sign() == exact.sign())
    bad = ~(ok | saturated)
    assert not bad.any(), (f"{what}: {bad.sum().item()} elements more than one e4m3 ulp off, e.g. at "
                           f"{bad.nonzero()[0].tolist()}: {qd[bad][0].item()} vs {exact[bad][0].item()}")


def _check_dynamic(q, scale, x, wp, xs, ws, what):
    M, I = x.shape[0], wp.shape[0] // 2
    assert scale.dtype == torch.float32 and scale.shape == (M, -(-I // fp8.GROUP)) and scale.is_contiguous(), what
    assert torch.isfinite(scale).all(), f"{what}: {(~torch.isfinite(scale)).sum().item()} scales not finite"
    if M == 0:
        return
    ref = fp8.dequantized_swiglu(x, wp, xs, ws, torch.float64)
    E = _gemm_error(x, wp, xs, ws, ref)
    ref_scale = _groups(ref).abs().amax(dim=2) / fp8.E4M3_MAX
    off = (scale.double() - ref_scale).abs() > E / fp8.E4M3_MAX + 2**-23 * ref_scale
    assert not off.any(), (f"{what}: {off.sum().item()} group scales off, e.g. at {off.nonzero()[0].tolist()}: "
                           f"{scale[off][0].item()} vs {ref_scale[off][0].item()}")
    _check_values(q, scale, ref, E, what)
    top = _groups(q.double()).abs().amax(dim=2)
    low = (top < 416) & (scale > 0)
    assert not low.any(), f"{what}: {low.sum().item()} groups whose largest element is below 416"


@pytest.mark.parametrize("M", [1, 127, 2048])
@pytest.mark.parametrize("model", list(QWEN))
def test_qwen_shapes(model, M, seed):
    H, I = QWEN[model]
    x, wp, xs, ws = row_operands(M, H, I)
    _poison(M, I)
    q, scale = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3)
    _check_dynamic(q, scale, x, wp, xs, ws, f"{model} M={M} seed={seed}")


@pytest.mark.parametrize("M", [1, 3, 64, 127, 129, 513, 4097])
def test_awkward_token_counts_write_every_element_and_scale(M, seed):
    H, I = QWEN["0.5B"]
    x, wp, xs, ws = row_operands(M, H, I)
    for name in fp8.OUT_CONFIG_NAMES:
        _poison(M, I)
        q, scale = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3, config=name)
        _check_dynamic(q, scale, x, wp, xs, ws, f"{name} M={M} seed={seed}")


@pytest.mark.parametrize("name", fp8.OUT_CONFIG_NAMES)
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, False), (True, False), (False, True)])
def test_every_config_and_input_scale_mode(name, per_token, per_channel, seed):
    x, wp, xs, ws = row_operands(300, 3584, 2048, per_token, per_channel)
    _poison(300, 2048)
    q, scale = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3, config=name)
    _check_dynamic(q, scale, x, wp, xs, ws, f"{name} per_token={per_token} per_channel={per_channel} seed={seed}")


@pytest.mark.parametrize("H,I", [(1040, 1040), (4112, 4880), (512, 16)])  # K % 128 != 0; I % 128 != 0
def test_partial_k_tiles_and_partial_last_group(H, I, seed):
    x, wp, xs, ws = row_operands(200, H, I)
    for name in fp8.OUT_CONFIG_NAMES:
        _poison(200, I)
        q, scale = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3, config=name)
        _check_dynamic(q, scale, x, wp, xs, ws, f"{name} H={H} I={I} seed={seed}")


def test_zero_groups_get_scale_zero_and_zeros(seed):
    x, wp, xs, ws = row_operands(70, 512, 512)
    wp = wp.clone()
    wp.view(torch.uint8)[256:512] = 0  # weight rows 256..511: output columns 128..255 (group 1) are 0
    q, scale = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3)
    assert (scale[:, 1] == 0).all() and (q[:, 128:256].float() == 0).all(), f"seed={seed}"
    _check_dynamic(q, scale, x, wp, xs, ws, f"zero group seed={seed}")


@pytest.mark.parametrize("M", [1, 300])
def test_static_scale_saturates_where_the_value_exceeds_448(M, seed):
    x, wp, xs, ws = row_operands(M, 896, 4864)
    ref = fp8.dequantized_swiglu(x, wp, xs, ws, torch.float64)
    out_scale = (ref.abs().max() / fp8.E4M3_MAX / 4).float().reshape(1)  # the top quarter saturates
    for name in fp8.OUT_CONFIG_NAMES:
        _poison(M, 4864)
        q, s = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3, out_scale=out_scale, config=name)
        assert s is out_scale
        assert (q.float().abs() == fp8.E4M3_MAX).any(), f"{name}: nothing saturated"
        _check_values(q, out_scale, ref, _gemm_error(x, wp, xs, ws, ref), f"{name} static M={M} seed={seed}")


def test_cuda_graph_torch_compile_and_m_zero(seed):
    x, wp, xs, ws = row_operands(200, 896, 4864)
    eager = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3)
    graph.replay()
    torch.cuda.synchronize()
    for got in (captured, torch.compile(lambda a: fp8.swiglu_packed_fp8(a, wp, xs, ws, out_dtype=fp8.E4M3),
                                        fullgraph=True)(x)):
        assert torch.equal(got[0].view(torch.uint8), eager[0].view(torch.uint8)), f"seed={seed}"
        assert torch.equal(got[1], eager[1]), f"seed={seed}"
    q, scale = fp8.swiglu_packed_fp8(x[:0], wp, xs[:0], ws, out_dtype=fp8.E4M3)
    assert q.shape == (0, 4864) and scale.shape == (0, 38)


@pytest.mark.parametrize("name", fp8.OUT_CONFIG_NAMES)
@pytest.mark.parametrize("M,H,I", [(4096, 512, 896), (2048, 512, 29568)])  # 7 and 231 groups: no swizzle divides
def test_every_launch_writes_what_the_default_launch_writes(name, M, H, I, seed):
    # A swizzled grid is padded to whole swizzle groups, and its padding tiles (past Y's last group) run the
    # epilogue: they must write no scale (one past a row's last group is the next row's first). Several waves
    # of tiles, so that padding tiles run after the tiles whose scales they would overwrite.
    x, wp, xs, ws = row_operands(M, H, I)
    _poison(M, I)
    q0, scale0 = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3, config=f"{name}@0:1")
    _check_dynamic(q0, scale0, x, wp, xs, ws, f"{name}@0:1 M={M} I={I} seed={seed}")
    for raster in (0, 1, 2):
        for swizzle in (1, 2, 4, 8):
            _poison(M, I)
            q, scale = fp8.swiglu_packed_fp8(x, wp, xs, ws, out_dtype=fp8.E4M3, config=f"{name}@{raster}:{swizzle}")
            what = f"{name}@{raster}:{swizzle} M={M} I={I} seed={seed}"
            assert torch.equal(q.view(torch.uint8), q0.view(torch.uint8)), what
            off = scale.view(torch.int32) != scale0.view(torch.int32)
            assert not off.any(), f"{what}: {off.sum().item()} scales differ, e.g. at {off.nonzero()[0].tolist()}"
