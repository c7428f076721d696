#!/usr/bin/env python3
"""Times every compiled kernel configuration on the Qwen2.5 MLP shapes, next to cuBLAS and eager.

The data behind the per-shape table in ``src/fused_swiglu/configs.py`` (see docs/perf-notes.md).
Each configuration is first checked for correctness on the shape (output poisoned with NaN, compared
with the fp32 one-rounding reference), then timed: CUDA events, L2 flushed before every repetition,
median of ``--reps`` after warm-up.

With ``--accuracy-tokens``, at those M each configuration (and the fp32 one-rounding path) is also
measured against float64 with ``fused_swiglu.accuracy.compare``: exact, mismatch, max ulp.

Usage (on a Hopper GPU): ``python3 scripts/tune_configs.py --out tune.json [--tokens 512 2048]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from fused_swiglu import _lib
from fused_swiglu.accuracy import compare
from fused_swiglu.reference import swiglu_float64, swiglu_fp32_one_rounding
from fused_swiglu.bench.shapes import find as find_models
from fused_swiglu.weights import pack_gate_up

def time_ms(fn, flush: torch.Tensor, reps: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tune.json")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--tokens", nargs="*", type=int, default=[1, 16, 128, 512, 2048, 8192])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--rasters", nargs="*", default=["0:1"], help="raster:swizzle pairs")
    ap.add_argument("--configs", nargs="*", default=None, help="keep configs whose name contains one of these")
    ap.add_argument("--accuracy-tokens", nargs="*", type=int, default=[],
                    help="M values at which each config is also compared with float64")
    args = ap.parse_args()

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    lib = _lib.library()
    configs = [c for c in lib.configs if c.dtype == args.dtype
               and (not args.configs or any(pat in c.name for pat in args.configs))]
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    rasters = [tuple(int(v) for v in r.split(":")) for r in args.rasters]
    rows, failures = [], []
    t0 = time.time()
    for shape in find_models(args.models):
        model, H, I = shape.model, shape.hidden_size, shape.intermediate_size
        wg = torch.randn(I, H, device="cuda", dtype=dtype) / H**0.5
        wu = torch.randn(I, H, device="cuda", dtype=dtype) / H**0.5
        wp = pack_gate_up(wg, wu)
        wcat = torch.cat([wg, wu])
        for M in args.tokens:
            x = torch.randn(M, H, device="cuda", dtype=dtype)
            ref = (F.silu(x.float() @ wg.float().T) * (x.float() @ wu.float().T))
            ref64 = swiglu_float64(x, wg, wu) if M in args.accuracy_tokens else None

            def accuracy_of(out: torch.Tensor) -> dict:
                if ref64 is None:
                    return {}
                r = compare(out, ref64)
                return dict(exact=r.exact, mismatch=r.mismatch, max_ulp=r.max_ulp)

            if ref64 is not None:
                acc = accuracy_of(swiglu_fp32_one_rounding(x, wg, wu))
                rows.append(dict(model=model, H=H, I=I, M=M, method="fp32_one_rounding", **acc))
                print(f"{model:13s} M={M:5d} fp32_one_rounding exact={acc['exact']:.5f}", flush=True)
            y = torch.empty(M, I, device="cuda", dtype=dtype)
            flops = 4.0 * M * H * I
            peers = {
                "eager": lambda: F.silu(x @ wg.T) * (x @ wu.T),
                "cublas_gemm": lambda: x @ wcat.T,
            }
            for name, fn in peers.items():
                t = statistics.median(time_ms(fn, flush, args.reps))
                rows.append(dict(model=model, H=H, I=I, M=M, method=name, ms=t, tflops=flops / t / 1e9))
            cub_ms = rows[-1]["ms"]
            for c in configs:
                w, w_up = (wp, None) if c.kernel == "packed" else (wg, wu)
                for raster, swizzle in rasters:
                    y.fill_(float("nan"))
                    try:
                        lib.run(c.name, x, w, w_up, y, raster, swizzle)
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001 - record and continue the sweep
                        failures.append(dict(model=model, M=M, config=c.name, error=str(e)))
                        continue
                    err = ((y.float() - ref).norm() / ref.norm()).item()
                    nan = int(torch.isnan(y).sum().item())
                    ok = nan == 0 and err < 8e-3
                    if not ok:
                        failures.append(dict(model=model, M=M, config=c.name, rel_err=err, nan=nan))
                    t = statistics.median(
                        time_ms(lambda: lib.run(c.name, x, w, w_up, y, raster, swizzle), flush, args.reps)
                    )
                    acc = accuracy_of(y)
                    rows.append(dict(model=model, H=H, I=I, M=M, method=c.name, raster=raster, swizzle=swizzle,
                                     ms=t, tflops=flops / t / 1e9, rel_err=err, nan=nan, ok=ok, **acc))
                    if acc:
                        print(f"{model:13s} M={M:5d} {c.name} exact={acc['exact']:.5f} "
                              f"mismatch={acc['mismatch']:.2e} max_ulp={acc['max_ulp']} "
                              f"{cub_ms / t:.3f}x cub", flush=True)
            best = {}
            for r in rows:
                if r["model"] == model and r["M"] == M and "ms" in r:
                    key = r["method"].split("_")[0] if r["method"] not in peers else r["method"]
                    if r.get("ok", True) and (key not in best or r["ms"] < best[key]["ms"]):
                        best[key] = r
            cub = best["cublas_gemm"]["ms"]
            line = " ".join(f"{k}={v['ms']:.4f}({cub / v['ms']:.2f}x cub)[{v['method'][-28:]}]" for k, v in best.items())
            print(f"{model:13s} M={M:5d} {line}", flush=True)
        del wg, wu, wp, wcat
        torch.cuda.empty_cache()
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, seconds=time.time() - t0)
    with open(args.out, "w") as f:
        json.dump(dict(meta=meta, rows=rows, failures=failures), f, indent=1)
    print(f"{len(failures)} failures")
    for fl in failures[:40]:
        print("FAIL", fl)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
