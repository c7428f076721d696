"""The per-token-group e4m3 quantization kernel (``fsw_quantize_e4m3_groups``, taken by
:func:`fused_swiglu.fp8.quantize_e4m3_groups` for bf16/fp16 tensors on a Hopper GPU) against the
PyTorch path on the CPU, bit for bit (a NaN's sign aside): fresh random inputs with zero groups, NaN, infinities, huge and
subnormal-scale groups, awkward row counts and K not a multiple of 128; outputs start poisoned."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import _lib, fp8

pytestmark = pytest.mark.gpu


def _input(M, K, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(M, K, generator=g) * torch.logspace(-6, 4, M).reshape(M, 1)
    if M > 2 and K > 130:
        t[1, :128] = 0  # an all-zero group
        t[2, 5] = float("nan")
        t[2, 129] = float("inf") if dtype == torch.float16 else 3e38
        t[0, :] *= 1e-30 if dtype == torch.bfloat16 else 1.0  # scales far below 448 * 2^-126
    return t.to(dtype)


def _bits(t):
    """e4m3 bytes with both NaN encodings (0x7F, 0xFF) as one; fp32 with NaN as -1."""
    if t.dtype != fp8.E4M3:
        return t.nan_to_num(nan=-1.0)
    b = t.view(torch.uint8)
    return torch.where(b & 0x7F == 0x7F, 0x7F, b)


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(_bits(a), _bits(b)), (_bits(a) != _bits(b)).nonzero()[:8].tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,K", [(1, 4096), (3, 896), (127, 3584), (129, 1040), (4097, 8192), (5, 16)])
@pytest.mark.parametrize("column_major", [False, True])
def test_kernel_matches_pytorch_path(dtype, M, K, column_major):
    seed = torch.randint(0, 2**31, ()).item()
    t = _input(M, K, dtype, seed)
    torch.cuda.synchronize()
    q, s = fp8.quantize_e4m3_groups(t.cuda(), column_major_scales=column_major)
    qr, sr = fp8.quantize_e4m3_groups(t, column_major_scales=column_major)
    _same(q.cpu(), qr)
    _same(s.cpu(), sr)
    if column_major:  # the block-scaled kernels' layout: M-major, 16-byte aligned columns, zero padding rows
        assert s.stride(0) == 1 and s.stride(1) % 4 == 0 and s.data_ptr() % 16 == 0
        ld = s.stride(1)
        storage = torch.as_strided(s, (ld, s.shape[1]), (1, ld))
        assert torch.all(storage[M:] == 0), f"seed {seed}"
    else:
        assert s.is_contiguous()


def test_kernel_writes_every_element():
    """q and the scales are written in full: the kernel's outputs start as NaN bytes in a reused pool."""
    M, K = 129, 1040
    junk = torch.full((M * K + 4 * M * 9,), 0x7F, dtype=torch.uint8, device="cuda")
    del junk  # the caching allocator hands these bytes to the next allocations
    t = _input(M, K, torch.bfloat16, 7)
    q, s = fp8.quantize_e4m3_groups(t.cuda())
    qr, sr = fp8.quantize_e4m3_groups(t)
    _same(q.cpu(), qr)
    _same(s.cpu(), sr)


def test_strided_input_and_library_checks():
    """Column-major and broadcast inputs are copied to rows the kernel reads; the library names the
    broken rule for overlapping scale strides, too few scale rows and a non-16-bit x."""
    t = _input(64, 512, torch.bfloat16, 3)
    q, s = fp8.quantize_e4m3_groups(t.cuda().T.contiguous().T)  # column-major x: copied
    qr, sr = fp8.quantize_e4m3_groups(t)
    _same(q.cpu(), qr)
    one_row = torch.randn(512, 1, device="cuda", dtype=torch.bfloat16).T  # (1, 512) of strides (1, 1)
    for view in (t.cuda()[:1].expand(5, -1), t.cuda()[:1, 0:1].expand(1, 512), one_row):
        for column_major in (False, True):
            q, s = fp8.quantize_e4m3_groups(view, column_major_scales=column_major)
            qr, sr = fp8.quantize_e4m3_groups(view.cpu().contiguous(), column_major_scales=column_major)
            _same(q.cpu(), qr)
            _same(s.cpu(), sr)
    lib = _lib.library()
    x = t.cuda()
    q = torch.empty(64, 512, dtype=fp8.E4M3, device="cuda")
    bad = torch.empty(64, 4, device="cuda")
    with pytest.raises(ValueError, match="own address"):
        lib.quantize_e4m3_groups(x, q, torch.as_strided(bad, (64, 4), (1, 1)), 64)
    with pytest.raises(ValueError, match="scale_rows >= M"):
        lib.quantize_e4m3_groups(x, q, bad, 63)
    with pytest.raises(TypeError, match="x must be torch.bfloat16 or torch.float16"):
        lib.quantize_e4m3_groups(x.float(), q, bad, 64)
