"""transformers' fine-grained FP8 layers for the tests: FP8Linear built from bf16 weights, and a
reference forward for it.

transformers runs ``FP8Linear.forward`` through kernels it downloads from the Hugging Face Hub, which
neither the CPU test machines nor an offline GPU have; the tests install :func:`reference_forward`
instead: x quantized per 1 x 128 group of each row (the recipe of transformers' ``act_quant``), both
operands dequantized, one fp32 GEMM, rounded to x's dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from fused_swiglu import fp8

finegrained_fp8 = __import__("pytest").importorskip("transformers.integrations.finegrained_fp8")
FP8Linear = finegrained_fp8.FP8Linear


def dequantize_blocks(w: torch.Tensor, scale: torch.Tensor, block: int = 128) -> torch.Tensor:
    """fp32 ``w * scale`` with one scale per ``block`` x ``block`` block."""
    rows, cols = w.shape
    s = scale.float().repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    return w.float() * s


def reference_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What a 128 x 128 block-scaled, dynamic FP8Linear computes, in PyTorch operations."""
    K = x.shape[-1]
    xq, xs = fp8.quantize_e4m3_groups(x.reshape(-1, K))
    xd = xq.float() * xs.repeat_interleave(128, 1)[:, :K]
    out = xd @ dequantize_blocks(self.weight, self.weight_scale_inv).T
    if self.bias is not None:
        out = out + self.bias.float()
    return out.to(x.dtype).view(*x.shape[:-1], out.shape[-1])


def fp8_linear(w: torch.Tensor, block_size=(128, 128), activation_scheme: str = "dynamic") -> nn.Module:
    """An FP8Linear holding ``w`` (out, in) quantized per 128 x 128 block."""
    out_features, in_features = w.shape
    layer = FP8Linear(in_features, out_features, block_size=block_size, activation_scheme=activation_scheme)
    q, s = fp8.quantize_e4m3_blocks(w)
    layer.weight = nn.Parameter(q, requires_grad=False)
    layer.weight_scale_inv = nn.Parameter(s, requires_grad=False)
    return layer.to(w.device)


class FP8MLP(nn.Module):
    """transformers' Qwen3MLP / LlamaMLP with fine-grained FP8 projections."""

    def __init__(self, H: int = 256, I: int = 384, device="cpu", dtype=torch.bfloat16):
        super().__init__()
        w = [torch.randn(o, i, device=device, dtype=dtype) / i**0.5 for o, i in ((I, H), (I, H), (H, I))]
        self.gate_proj, self.up_proj, self.down_proj = (fp8_linear(t) for t in w)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
