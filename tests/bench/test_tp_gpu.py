"""``bench --tp``: one rank's timing loop on one GPU; the whole run on two (skipped with fewer)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from rich.console import Console

from fused_swiglu.bench import shapes, tp

pytestmark = pytest.mark.gpu
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


def test_one_rank_times_both_sides(tmp_path):
    """A rank's timing loop as the only rank of a one-GPU group, in a process of its own: what it
    times is host-bound at 0.5B, so threads and caches that earlier tests left in this process
    would time themselves instead."""
    out = tmp_path / "rows.pt"
    code = ("import sys, torch; from fused_swiglu.bench import shapes, tp; "
            "tp._rank(0, 1, sys.argv[1], shapes.find(['0.5B']), [1, 8192], torch.bfloat16, 10, sys.argv[2])")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "init"), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = torch.load(out)
    assert [r["tokens"] for r in rows] == [1, 8192]
    for r in rows:
        assert r["one_gpu_ms"] > 0 and r["tp_ms"] > 0 and r["allreduce_ms"] >= 0
        assert r["ratio_over_1gpu"] == pytest.approx(r["tp_ms"] / r["one_gpu_ms"])
    # one rank runs the same MLP plus a one-rank all-reduce: where the GEMMs dominate (M = 8192; at
    # 2048 the eager calls are host-bound), about the same time (at M = 1 the collective's fixed cost
    # on its own stream can exceed the MLP's)
    assert 0.7 < rows[1]["ratio_over_1gpu"] < 1.5, rows


@two_gpus
def test_tp_bench_writes_rows(tmp_path):
    out = tmp_path / "tp.json"
    rows = tp.run_tp(shapes.find(["0.5B"]), [1, 128], 2, torch.bfloat16, Console(file=open(tmp_path / "log", "w")),
                     out=out, reps=3)
    assert [r["tokens"] for r in rows] == [1, 128]
    assert all(r["one_gpu_ms"] > 0 and r["tp_ms"] > 0 and r["ratio_2gpu_over_1gpu"] > 0 for r in rows)
    data = json.loads(out.read_text())
    assert data["meta"]["world_size"] == 2 and len(data["rows"]) == 2
