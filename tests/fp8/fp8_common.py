"""What the e4m3 kernels' GPU tests share: row-scaled operands, the comparison with a cuBLAS yardstick,
and the spacing of e4m3 values."""

from __future__ import annotations

import torch

from fused_swiglu import fp8
from fused_swiglu.accuracy import compare, ulp_at
from numerics import allowed_mismatches


def row_operands(M, H, I, per_token=True, per_channel=True):
    """x ~ N(0, 1) (M, H) and gate / up weights ~ N(0, 1/H) (I, H) on the GPU, quantized to e4m3 per
    token / per weight row (or per tensor), the weights packed: ``(x, w_packed, x_scale, w_scale)``."""
    x, xs = fp8.quantize_e4m3(torch.randn(M, H, device="cuda"), per_row=per_token)
    gq, gs = fp8.quantize_e4m3(torch.randn(I, H, device="cuda") * H**-0.5, per_row=per_channel)
    uq, us = fp8.quantize_e4m3(torch.randn(I, H, device="cuda") * H**-0.5, per_row=per_channel)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    return x, wp, xs, ws


def assert_like_peer(y, ref, peer, what):
    """bf16 ``y`` against float64 ``ref`` held to the yardstick ``peer`` (cuBLAS with the same
    accumulation): elementwise at most twice its largest error plus one ulp, and at most 1.5 times
    its mismatches plus the 16-bit bound."""
    ours, theirs = compare(y, ref), compare(peer, ref)
    bound = 2 * (peer.double() - ref).abs().max() + ulp_at(ref, torch.bfloat16)
    bad = ((y.double() - ref).abs() > bound).sum().item()
    mismatches = round(ours.mismatch * ours.counted)
    allowed = 1.5 * round(theirs.mismatch * theirs.counted) + allowed_mismatches(ours.counted)
    assert bad == 0 and mismatches <= allowed, f"{what}: {bad} elements over the bound; ours {ours}, cuBLAS {theirs}"


def e4m3_ulp(a: torch.Tensor) -> torch.Tensor:
    """Spacing of e4m3 values at |a|: 2^(floor(log2|a|) - 3), and 2^-9 below 2^-6 (subnormals)."""
    _, e = torch.frexp(a.abs().clamp(min=2.0**-6))
    return torch.ldexp(torch.ones_like(a), e - 4)
