#!/usr/bin/env python3
"""Times every compiled kernel configuration on the Qwen2.5 MLP shapes, next to cuBLAS and eager.

The data behind the per-shape table in ``src/fused_swiglu/configs.py`` (see docs/perf-notes.md).
Each configuration is first checked for correctness on the shape (output poisoned with NaN, compared
with the fp32 one-rounding reference), then timed: CUDA events, L2 flushed before every repetition, median of ``--reps``
after warm-up, alternating rep by rep with the cuBLAS GEMM of the same FLOPs; ``cublas_over_config``
is cuBLAS's median time over the config's (> 1: the config is faster; the benchmark's
``ratio_to_cublas`` is the inverse).

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
from fused_swiglu.bench import timing
from fused_swiglu.bench.shapes import find as find_models
from fused_swiglu.weights import pack_gate_up


def flush_buffer() -> torch.Tensor:
    """The benchmark's L2 flush buffer (``fused_swiglu.bench.timing.flush_buffer``) on the current GPU."""
    return timing.flush_buffer(torch.device("cuda"))


def random_weights(H: int, I: int, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """W_gate, W_up (I, H) ~ N(0, 1/H) on the GPU: unit-variance gate and up pre-activations."""
    wg = torch.randn(I, H, device="cuda", dtype=dtype) / H**0.5
    wu = torch.randn(I, H, device="cuda", dtype=dtype) / H**0.5
    return wg, wu


def kernel_operands(H: int, I: int) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor | None]]]:
    """bf16 weights from :func:`random_weights` as the peers and the kernels read them:
    ``(W_cat (2I, H) = [W_gate; W_up] for the cuBLAS GEMM, {"packed": (W_packed, None),
    "dual": (W_gate, W_up)})`` (the ``w, w_up`` arguments of ``Library.run``)."""
    wg, wu = random_weights(H, I)
    return torch.cat([wg, wu]), {"packed": (pack_gate_up(wg, wu), None), "dual": (wg, wu)}


REL_ERR_MAX = 8e-3  # a config's output passes with a relative L2 error below this and no NaN left


def output_error(y: torch.Tensor, ref: torch.Tensor) -> tuple[float, int]:
    """``(relative L2 error of y against ref, NaN count of y)`` for an output ``y`` that was poisoned
    with NaN before the launch; the error is computed in ``ref``'s dtype."""
    err = ((y.to(ref.dtype) - ref).norm() / ref.norm()).item()
    return err, int(torch.isnan(y).sum().item())


def output_passes(err: float, nan: int) -> bool:
    """Whether :func:`output_error`'s ``(err, nan)`` pass: no NaN left, error below :data:`REL_ERR_MAX`."""
    return nan == 0 and err < REL_ERR_MAX


def output_ok(y: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether a NaN-poisoned output ``y`` was fully written and matches ``ref`` (:func:`output_passes`)."""
    return output_passes(*output_error(y, ref))


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


def in_turn_ms(fns, flush: torch.Tensor, reps: int, warmup: int = 3) -> list[list[float]]:
    """Times ``fns`` in turn, rep by rep, each after an L2 flush, so that all see the same clocks
    (timing cuBLAS once per shape and then many configs in a row biased the ratios by up to 15 % as the
    GPU warmed up); rep i starts with ``fns[i % len(fns)]``, so no function always runs first. Returns
    each function's times in ms, in the order of ``fns``."""
    n = len(fns)
    for _ in range(warmup):
        for fn in fns:
            fn()
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(2 * n)] for _ in range(reps)]
    for i, e in enumerate(ev):
        for j in (*range(i % n, n), *range(i % n)):
            flush.zero_()
            e[2 * j].record()
            fns[j]()
            e[2 * j + 1].record()
    torch.cuda.synchronize()
    return [[e[2 * j].elapsed_time(e[2 * j + 1]) for e in ev] for j in range(n)]


def paired_ms(fa, fb, flush: torch.Tensor, reps: int, warmup: int = 3) -> tuple[list[float], list[float]]:
    """:func:`in_turn_ms` of two functions: ``fa`` first on even reps, ``fb`` first on odd ones."""
    ta, tb = in_turn_ms([fa, fb], flush, reps, warmup)
    return ta, tb


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
    flush = flush_buffer()
    rasters = [tuple(int(v) for v in r.split(":")) for r in args.rasters]
    rows, failures = [], []
    t0 = time.time()
    for shape in find_models(args.models):
        model, H, I = shape.model, shape.hidden_size, shape.intermediate_size
        wg, wu = random_weights(H, I, dtype)
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
                    err, nan = output_error(y, ref)
                    ok = output_passes(err, nan)
                    if not ok:
                        failures.append(dict(model=model, M=M, config=c.name, rel_err=err, nan=nan))
                    t_cub, t_cfg = paired_ms(
                        peers["cublas_gemm"], lambda: lib.run(c.name, x, w, w_up, y, raster, swizzle),
                        flush, args.reps,
                    )
                    t, cub_here = statistics.median(t_cfg), statistics.median(t_cub)
                    acc = accuracy_of(y)
                    rows.append(dict(model=model, H=H, I=I, M=M, method=c.name, raster=raster, swizzle=swizzle,
                                     ms=t, tflops=flops / t / 1e9, cublas_ms=cub_here,
                                     cublas_over_config=cub_here / t, rel_err=err, nan=nan, ok=ok, **acc))
                    if acc:
                        print(f"{model:13s} M={M:5d} {c.name} exact={acc['exact']:.5f} "
                              f"mismatch={acc['mismatch']:.2e} max_ulp={acc['max_ulp']} "
                              f"{cub_here / t:.3f}x cub", flush=True)
            # per kernel, the config and launch parameters with the best paired ratio to cuBLAS
            best = {}
            for r in rows:
                if r["model"] == model and r["M"] == M and r.get("ok") and "cublas_over_config" in r:
                    key = r["method"].split("_")[0]
                    if key not in best or r["cublas_over_config"] > best[key]["cublas_over_config"]:
                        best[key] = r
            line = " ".join(
                f"{k}={v['cublas_over_config']:.3f}x cub [{v['method']} {v['raster']}:{v['swizzle']}]"
                for k, v in best.items()
            )
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
