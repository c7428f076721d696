#!/usr/bin/env python3
"""A/B of kernel configs against the config choice, cuBLAS and quack on the Qwen2.5 cells of M >= 512.

For each Qwen2.5 shape and token count this times, in one turn rep by rep (the benchmark's protocol:
L2 flushed before each call, input sets rotated, CUDA-event medians of GPU time, launches through
the kernel library as ``fused-swiglu tune`` makes them):

* ``cublas_gemm`` (one GEMM of the same FLOPs, ``x @ [W_gate; W_up]^T``), ``eager`` (PyTorch's two
  GEMMs and ``silu(g) * u``) and ``quack`` (quack-kernels' ``gemm_gated`` SwiGLU, where the package
  imports);
* the config choice of each kernel (``choice_packed`` / ``choice_dual``, with its raster and swizzle);
* every launch the choice would consider (:func:`fused_swiglu.configs.launch_options`) of the catalog
  configs named by ``--configs`` (none: the choices and the peers only) (library names without the dtype suffix), or with ``--launches
  RASTER:SWIZZLE ...`` each of those launches, legal for the choice or not (the library still checks
  what it can run).

``--protocol sustained`` times by the benchmark's sustained protocol instead
(:func:`fused_swiglu.bench.timing.time_sustained`: one heat soak to the power cap, then each method
back to back for ``--seconds``, SM clock and power from NVML, recorded per row).

Writes rows ``model, hidden_size, intermediate_size, tokens, method, median_ms`` (method: one of the
above or a variant key ``name@raster:swizzle``) and prints, per cell, each kernel's choice and best
candidate over cuBLAS and quack.

Usage (on a Hopper GPU): ``python3 tools/schedule_ab.py --configs packed_pingpong_128x192x64_2x1 --out
schedule_ab.json [--models 7B 72B] [--tokens 512 2048 8192]``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from fused_swiglu import _lib, configs
from fused_swiglu.reference import swiglu_eager
from fused_swiglu.bench import methods, power, timing, tune
from fused_swiglu.bench.shapes import MODELS, find


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--tokens", nargs="+", type=int, default=[512, 2048, 8192])
    ap.add_argument("--configs", nargs="*", default=[], choices=sorted(configs.BY_BASE_NAME), metavar="NAME",
                    help="catalog config names without the dtype suffix")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--launches", nargs="+", default=None, metavar="RASTER:SWIZZLE",
                    help="launches of the --configs to time (default: those the choice considers)")
    ap.add_argument("--protocol", choices=("interleaved", "sustained"), default="interleaved")
    ap.add_argument("--seconds", type=float, default=timing.SUSTAINED_SECONDS)
    a = ap.parse_args()
    launches = [tuple(int(v) for v in t.split(":")) for t in a.launches] if a.launches else None
    dtype = torch.bfloat16
    device = torch.device("cuda", torch.cuda.current_device())
    num_sms, gpu, smem = _lib.target(device.index)
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    with_quack = methods.peer_problem("quack") is None
    monitor = power.Monitor(power.nvml_index(device)) if a.protocol == "sustained" else None
    if monitor is not None:
        print(f"heat soak: {power.describe(timing.heat_soak(device, monitor))}", flush=True)
    pool = [configs.BY_BASE_NAME[n] for n in a.configs]
    meta = {"gpu": gpu, "num_sms": num_sms, "reps": a.reps, "protocol": a.protocol, "seconds": a.seconds,
            "torch": torch.__version__, "dtype": "bf16",
            "quack": with_quack, "ratios_printed_against": "quack" if with_quack else "cublas_gemm"}
    rows = []
    for shape in find(a.models, default=MODELS):
        K, N = shape.hidden_size, shape.intermediate_size
        for M in a.tokens:
            sets = tune.make_operands(M, N, K, dtype, device)
            extra = {"cublas_gemm": [lambda s=s, w=torch.cat([s.w_gate, s.w_up]): torch.mm(s.x, w.t()) for s in sets],
                     "eager": [lambda s=s: swiglu_eager(s.x, s.w_gate, s.w_up) for s in sets]}
            if with_quack:
                extra["quack"] = [lambda s=s, w=methods.alternate_rows(s.w_gate, s.w_up): methods.quack_swiglu(s.x, w)
                                  for s in sets]
            chosen = {}
            for kernel in configs.KERNELS:
                c = configs.choose_config(kernel, M, N, K, "fast", num_sms, gpu, dtype, smem)
                chosen[kernel] = tune.Variant(c, c.raster, c.swizzle)
            found = {v.key: v for v in chosen.values()}
            if launches is None:
                pool_launches = [v for config in pool for v in configs.launch_options(config, M, N)]
            else:
                pool_launches = [dataclasses.replace(config, raster=r, swizzle=sw) for config in pool for r, sw in launches]
            for launch in pool_launches:
                variant = tune.Variant(launch, launch.raster, launch.swizzle)
                found.setdefault(variant.key, variant)
            timed = tune.variant_timings(list(found.values()), M, N, K, dtype, device, a.reps, flush, extra=extra,
                                         sets=sets, monitor=monitor, seconds=a.seconds)
            times = {k: t.median_ms for k, t in timed.items()}
            base = {"model": shape.model, "hidden_size": K, "intermediate_size": N, "tokens": M, "protocol": a.protocol}
            rows += [{**base, "method": m, "median_ms": t.median_ms, "sm_mhz": t.sm_mhz, "power_w": t.power_w}
                     for m, t in timed.items()]
            for kernel, v in chosen.items():
                t = timed[v.key]
                rows.append({**base, "method": f"choice_{kernel}", "median_ms": t.median_ms, "config": v.key,
                             "sm_mhz": t.sm_mhz, "power_w": t.power_w})
            line = [f"{shape.model:13s} M={M:5d} cublas {times['cublas_gemm']:.4f}"]
            if with_quack:
                line.append(f"quack {times['quack']:.4f}")
            for kernel, v in chosen.items():
                mine = {k: t for k, t in times.items() if "@" in k and configs.BY_BASE_NAME[k.split("@")[0]].kernel == kernel
                        and k != v.key}
                best = min(mine, key=mine.get) if mine else None
                ref = times.get("quack", times["cublas_gemm"])
                line.append(f"{kernel}: choice {ref / times[v.key]:.3f}"
                            + (f" best-new {ref / mine[best]:.3f} {best}" if best else ""))
            print(" | ".join(line), flush=True)
            # after every cell, so that a run cut short keeps what it timed
            Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
