#!/usr/bin/env python3
"""Host time per call of each layer of a fused-swiglu launch (small problem, so the GPU is idle).

Prints microseconds per call for: the C library call alone, the op implementation, the public
function, and cuBLAS / eager for reference, then a cProfile of the public function.
Usage (on a Hopper GPU): ``python3 scripts/host_overhead.py``.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
import torch.nn.functional as F

from fused_swiglu import _lib, ops, pack_gate_up, swiglu, swiglu_packed


def per_call_us(fn, n: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    H, I, M = 896, 4864, 1
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    wg = torch.randn(I, H, device="cuda", dtype=torch.bfloat16)
    wu = torch.randn(I, H, device="cuda", dtype=torch.bfloat16)
    wp = pack_gate_up(wg, wu)
    wcat = torch.cat([wg, wu])
    y = torch.empty(M, I, device="cuda", dtype=torch.bfloat16)
    lib = _lib.library()
    name = "packed_pingpong_64x128x64_1x1_bf16"
    rows = {
        "torch.mm (cuBLAS)": lambda: torch.mm(x, wcat.t()),
        "eager": lambda: F.silu(x @ wg.T) * (x @ wu.T),
        "Library.run (ctypes + C)": lambda: lib.run(name, x, wp, None, y, 0, 1),
        "ops impl": lambda: ops.IMPLS[ops.swiglu_packed](x, wp, ""),
        "registered op": lambda: ops.swiglu_packed(x, wp, ""),
        "swiglu_packed()": lambda: swiglu_packed(x, wp, layout="interleaved"),
        "swiglu() dual": lambda: swiglu(x, wg, wu),
    }
    for label, fn in rows.items():
        print(f"{label:28s} {per_call_us(fn):8.1f} us/call")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        swiglu_packed(x, wp, layout="interleaved")
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
