"""``bench --tp 2`` end to end on a small shape (two Hopper GPUs)."""

from __future__ import annotations

import json

import pytest
import torch
from rich.console import Console

from fused_swiglu.bench import shapes, tp

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]


def test_tp_bench_writes_rows(tmp_path):
    out = tmp_path / "tp.json"
    rows = tp.run_tp(shapes.find(["0.5B"]), [1, 128], 2, torch.bfloat16, Console(file=open(tmp_path / "log", "w")),
                     out=out, reps=3)
    assert [r["tokens"] for r in rows] == [1, 128]
    assert all(r["one_gpu_ms"] > 0 and r["tp_ms"] > 0 and r["ratio_2gpu_over_1gpu"] > 0 for r in rows)
    data = json.loads(out.read_text())
    assert data["meta"]["world_size"] == 2 and len(data["rows"]) == 2
