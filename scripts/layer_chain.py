#!/usr/bin/env python3
"""GPU time per layer of a chain of decoder-MLP steps captured in one CUDA graph.

Each layer: ``t = rms_norm(x) * w_norm`` (PyTorch), ``y = swiglu(t, W_gate, W_up)`` (fused, or eager
PyTorch for reference), ``x = x + y @ W_down^T`` (cuBLAS). Every layer has its own weights, so a chain
of 8 layers reads more than the 60 MB L2 holds and no L2 flush is needed. Unlike the benchmark's
one-kernel graphs, this shows each kernel next to its neighbours in a stream (launch gaps, and any
overlap with the kernel before it: perf-notes entry 45 measured programmatic dependent launch here).

Usage (Hopper GPU): ``python3 scripts/layer_chain.py [--models 0.5B,1.5B,7B] [--tokens 1,16,128]``;
run it once per kernel library (``FUSED_SWIGLU_LIBRARY``) to compare two builds. Prints one line per
(model, M, path): median µs per layer over the replays, and p10-p90.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from fused_swiglu import pack_gate_up, swiglu, swiglu_packed
from fused_swiglu.bench.shapes import MODELS


def build_chain(H: int, I: int, M: int, layers: int, path: str):
    """The inputs and a ``step()`` running ``layers`` layers on them."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, device="cuda", generator=g) * shape[-1] ** -0.5).bfloat16()

    x = torch.randn(M, H, device="cuda", generator=g).bfloat16()
    params = [dict(norm=torch.ones(H, device="cuda").bfloat16(), gate=w(I, H), up=w(I, H), down=w(H, I))
              for _ in range(layers)]
    for p in params:
        p["packed"] = pack_gate_up(p["gate"], p["up"])

    def mlp(t, p):
        if path == "fused_dual":
            return swiglu(t, p["gate"], p["up"])
        if path == "fused_evt":
            return swiglu_packed(t, p["packed"], layout="interleaved")
        return torch.nn.functional.silu(t @ p["gate"].T) * (t @ p["up"].T)

    def step():
        h = x
        for p in params:
            t = h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(h.dtype) * p["norm"]
            h = h + mlp(t, p) @ p["down"].T
        return h

    return step


def time_graph(step, reps: int) -> list[float]:
    """Milliseconds per replay of ``step`` captured in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(10):
        graph.replay()
    out = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(begin.elapsed_time(end))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="0.5B,1.5B,7B")
    ap.add_argument("--tokens", default="1,16,128")
    ap.add_argument("--paths", default="eager,fused_dual,fused_evt")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    shapes = {m.model.removeprefix("Qwen2.5-"): m for m in MODELS}
    for name in args.models.split(","):
        m = shapes[name]
        for M in (int(t) for t in args.tokens.split(",")):
            for path in args.paths.split(","):
                ms = time_graph(build_chain(m.hidden_size, m.intermediate_size, M, args.layers, path), args.reps)
                per_layer = [t * 1000 / args.layers for t in ms]
                q = statistics.quantiles(per_layer, n=10)
                print(f"{name:5s} M={M:5d} {path:11s} {statistics.median(per_layer):8.2f} us/layer "
                      f"(p10-p90 {q[0]:.2f}-{q[-1]:.2f})", flush=True)


if __name__ == "__main__":
    main()
