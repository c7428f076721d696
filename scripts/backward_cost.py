#!/usr/bin/env python3
"""Forward + backward time of the fused ops against PyTorch's eager autograd (Hopper GPU).

For each Qwen2.5 shape and token count, times ``torch.autograd.grad`` of the output with respect to
x and the weights, for: eager PyTorch (``F.silu(x @ Wg.T) * (x @ Wu.T)``), ``swiglu`` (Kernel-1
forward) and ``swiglu_packed`` (Kernel-2 forward). The fused ops' backward recomputes the gate and
up products with PyTorch GEMMs (fused_swiglu/autograd.py). Protocol of ``fused-swiglu bench``:
CUDA-event medians after warm-up, L2 flushed before each repetition, two input sets alternated,
methods interleaved. Prints milliseconds and eager / fused ratios (> 1: fused faster).

Usage: ``python3 scripts/backward_cost.py [--models 0.5B 7B] [--tokens 2048 8192] [--reps 20]``
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from fused_swiglu import pack_gate_up, swiglu, swiglu_packed
from fused_swiglu.bench.shapes import find
from fused_swiglu.bench.timing import time_interleaved


def _calls(M: int, H: int, I: int) -> dict[str, list]:
    calls: dict[str, list] = {"eager": [], "fused_dual": [], "fused_evt": []}
    for _ in range(2):  # two input sets, alternated
        x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        wg = (torch.randn(I, H, device="cuda") * H**-0.5).to(torch.bfloat16).requires_grad_()
        wu = (torch.randn(I, H, device="cuda") * H**-0.5).to(torch.bfloat16).requires_grad_()
        wp = pack_gate_up(wg.detach(), wu.detach()).requires_grad_()
        dy = torch.randn(M, I, device="cuda", dtype=torch.bfloat16)
        calls["eager"].append(
            lambda x=x, wg=wg, wu=wu, dy=dy: torch.autograd.grad(F.silu(x @ wg.T) * (x @ wu.T), (x, wg, wu), dy))
        calls["fused_dual"].append(
            lambda x=x, wg=wg, wu=wu, dy=dy: torch.autograd.grad(swiglu(x, wg, wu), (x, wg, wu), dy))
        calls["fused_evt"].append(
            lambda x=x, wp=wp, dy=dy: torch.autograd.grad(
                swiglu_packed(x, wp, layout="interleaved"), (x, wp), dy))
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["0.5B", "7B", "72B"])
    ap.add_argument("--tokens", nargs="*", type=int, default=[2048, 8192])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    device = torch.device("cuda")
    print(f"{'model':14s} {'M':>5s} {'eager ms':>9s} {'dual ms':>9s} {'evt ms':>9s} {'eager/dual':>10s} {'eager/evt':>9s}")
    for shape in find(a.models):
        for M in a.tokens:
            t = time_interleaved(_calls(M, shape.hidden_size, shape.intermediate_size), device, reps=a.reps)
            e, d, p = (t[k].median_ms for k in ("eager", "fused_dual", "fused_evt"))
            print(f"{shape.model:14s} {M:5d} {e:9.3f} {d:9.3f} {p:9.3f} {e / d:10.2f} {e / p:9.2f}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
