"""``fused-swiglu bench tp --gpus N``: the tensor-parallel MLP on N GPUs against the same MLP on one.

For each shape and token count M, the inference forward of the whole MLP block (fused up-projection,
down projection, and on N GPUs the all-reduce of the partial outputs):

* ``1gpu``: :func:`fused_swiglu.swiglu_mlp` with the full weights on GPU 0 (the other ranks wait);
* ``tp``: :class:`fused_swiglu.parallel.TensorParallelSwiGLUMLP` on every rank (one process per GPU,
  NCCL), x replicated, reduce in x's dtype; the slowest rank's median is reported;
* ``allreduce``: the all-reduce of one ``(M, H)`` output alone, for scale.

Protocol: :func:`fused_swiglu.bench.timing.time_interleaved` on each rank with a fixed number of
warm-up calls (every rank runs the same collectives), L2 flushed before each call, input sets
rotated, CUDA-event medians; each call is enqueued behind the flush, so its time is the GPU's (on N
GPUs including the wait for the slowest rank inside the all-reduce). Rows: ``model``,
``hidden_size``, ``intermediate_size``, ``tokens``, ``world_size``, ``one_gpu_ms``, ``tp_ms``,
``allreduce_ms``, ``ratio_2gpu_over_1gpu`` (for N = 2; ``ratio_over_1gpu`` in general, tp / 1gpu:
0.5 is perfect scaling) and ``scaling_efficiency`` (one_gpu / (N tp)).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from . import report, timing
from .defaults import TP_MODELS as MODELS, TP_REPS as REPS, TP_TOKENS as TOKENS
from .shapes import MlpShape

WARMUP_CALLS = 10
FIELDS = ("model", "hidden_size", "intermediate_size", "tokens", "world_size", "one_gpu_ms", "tp_ms", "allreduce_ms",
          "ratio_over_1gpu", "ratio_2gpu_over_1gpu", "scaling_efficiency")


def check_world_size(world_size: int) -> None:
    """Raises ValueError unless ``2 <= world_size <= torch.cuda.device_count()``."""
    if world_size < 2:
        raise ValueError(f"--gpus: tensor parallel needs a world size of at least 2; got {world_size}")
    have = torch.cuda.device_count()
    if world_size > have:
        raise ValueError(f"--gpus {world_size} needs {world_size} GPUs; this machine has {have}")


def _weights(shape: MlpShape, dtype: torch.dtype, device: torch.device, seed: int):
    gen = torch.Generator(device=device).manual_seed(seed)
    H, I = shape.hidden_size, shape.intermediate_size

    def rand(*size, scale):
        return (torch.randn(*size, device=device, generator=gen) * scale).to(dtype)

    return rand(I, H, scale=H ** -0.5), rand(I, H, scale=H ** -0.5), rand(H, I, scale=I ** -0.5)


def _n_sets(shape: MlpShape, M: int, world_size: int, itemsize: int, l2: int) -> int:
    read = (3 * shape.intermediate_size * shape.hidden_size // world_size + M * shape.hidden_size) * itemsize
    return timing.n_input_sets(read, 3 * shape.intermediate_size * shape.hidden_size * itemsize, l2, max_sets=4)


def _rank(rank: int, world_size: int, init: str, shapes: Sequence[MlpShape], tokens: Sequence[int],
          dtype: torch.dtype, reps: int, out: str) -> None:
    import torch.distributed as dist

    from ..mlp import swiglu_mlp
    from ..parallel import TensorParallelSwiGLUMLP

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=rank, world_size=world_size,
                            device_id=device)
    flush = timing.flush_buffer(device)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    timing.warm_gpu(device)
    rows = []
    with torch.no_grad():
        for shape in shapes:
            n = _n_sets(shape, max(tokens), world_size, dtype.itemsize, l2)
            full = [_weights(shape, dtype, device, seed) for seed in range(n)]
            mlps = [TensorParallelSwiGLUMLP.from_full(*w) for w in full]
            if rank != 0:
                full = None  # only rank 0 times the one-GPU MLP
            torch.cuda.empty_cache()
            for M in tokens:
                xs = [torch.randn(M, shape.hidden_size, device=device).to(dtype) for _ in range(n)]
                zs = [torch.empty(M, shape.hidden_size, device=device, dtype=dtype) for _ in range(n)]
                one = None
                if rank == 0:
                    calls = {"1gpu": [lambda x=x, w=w: swiglu_mlp(x, *w) for x, w in zip(xs, full)]}
                    one = timing.time_interleaved(calls, device, reps=reps, flush=flush, warmup_calls=WARMUP_CALLS)
                dist.barrier()
                calls = {"tp": [lambda x=x, m=m: m(x) for x, m in zip(xs, mlps)],
                         "allreduce": [lambda z=z: dist.all_reduce(z) for z in zs]}
                t = timing.time_interleaved(calls, device, reps=reps, flush=flush, warmup_calls=WARMUP_CALLS)
                medians = torch.tensor([t["tp"].median_ms, t["allreduce"].median_ms], device=device)
                dist.all_reduce(medians, op=dist.ReduceOp.MAX)  # the slowest rank's
                if rank == 0:
                    tp_ms, ar_ms = medians.tolist()
                    ratio = tp_ms / one["1gpu"].median_ms
                    rows.append({"model": shape.model, "hidden_size": shape.hidden_size,
                                 "intermediate_size": shape.intermediate_size, "tokens": M, "world_size": world_size,
                                 "one_gpu_ms": one["1gpu"].median_ms, "tp_ms": tp_ms, "allreduce_ms": ar_ms,
                                 "ratio_over_1gpu": ratio,
                                 "ratio_2gpu_over_1gpu": ratio if world_size == 2 else None,
                                 "scaling_efficiency": 1 / (world_size * ratio)})
                    print(f"{shape.model} M={M}: 1 GPU {one['1gpu'].median_ms:.3f} ms, {world_size} GPUs "
                          f"{tp_ms:.3f} ms ({ratio:.3f}x; all-reduce {ar_ms:.3f} ms)", flush=True)
                del xs, zs
            del mlps, full
            torch.cuda.empty_cache()
    if rank == 0:
        torch.save(rows, out)
    dist.barrier()
    dist.destroy_process_group()


def run_tp(shapes: Sequence[MlpShape], tokens: Sequence[int], world_size: int, dtype: torch.dtype, console,
           out: Path | None = None, reps: int = REPS) -> list[dict]:
    """Time every shape at every M on ``world_size`` GPUs (one spawned process per GPU) and on
    GPU 0 alone; print a line per cell and with ``out`` write ``{"meta", "rows"}`` as JSON there and
    the rows as CSV beside it.

    Raises:
        ValueError: fewer than 2 or more GPUs than the machine has; ``out`` cannot be written; an
            MLP's intermediate size not a multiple of 8 * world_size.
    """
    import torch.multiprocessing as mp

    from ..parallel import local_size

    check_world_size(world_size)
    for shape in shapes:
        local_size(shape.intermediate_size, world_size)
    if out is not None:
        out = report.check_out_path(out)
    with tempfile.TemporaryDirectory(prefix="fused-swiglu-tp-") as tmp:
        result = os.path.join(tmp, "rows.pt")
        mp.spawn(_rank, args=(world_size, os.path.join(tmp, "init"), list(shapes), list(tokens), dtype, reps, result),
                 nprocs=world_size, join=True)
        rows = torch.load(result)
    if out is not None:
        device = torch.device("cuda", 0)
        meta = report.machine_meta(device)
        meta.update({"dtype": str(dtype).removeprefix("torch."), "reps": reps, "warmup_calls": WARMUP_CALLS,
                     "world_size": world_size, "gpus": [torch.cuda.get_device_name(i) for i in range(world_size)],
                     "protocol": "inference forward of the MLP block; 1 GPU: swiglu_mlp on GPU 0; tp: "
                                 "TensorParallelSwiGLUMLP per rank, NCCL all-reduce in the input dtype, slowest "
                                 "rank's median; time_interleaved, L2 flushed, input sets rotated, CUDA-event "
                                 "medians"})
        paths = report.write_results(out, meta, rows, FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
