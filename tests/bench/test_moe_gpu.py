"""bench moe end to end on a small MoE shape (Hopper GPU): every method checked and timed, eager and
replayed from CUDA graphs, with the floor from the rates measured in the run."""

import json

import pytest
from rich.console import Console

from fused_swiglu.bench import moe
from fused_swiglu.bench.shapes import MoeShape

pytestmark = pytest.mark.gpu


def test_a_small_moe_run_times_every_method_against_its_floor(tmp_path):
    out = tmp_path / "moe.json"
    shape = MoeShape("small", 1024, 512, 16, 4)
    methods = ["hf_eager", "hf_batched_mm", "hf_grouped_mm", "fused", "fc1_grouped_mm", "fc1_fused", "fused_coop",
               "fc1_fused_coop"]
    rows = moe.run_moe([shape], [1, 64], methods, Console(file=None, quiet=True), out=out, reps=5, warmup_ms=5,
                       protocol="interleaved")
    assert {(r["tokens"], r["method"]) for r in rows} == {(T, m) for T in (1, 64) for m in methods}
    for r in rows:
        assert 0 < r["floor_ms"] and 0 < r["median_ms"] and r["over_floor"] == pytest.approx(
            r["median_ms"] / r["floor_ms"])
        assert r["over_floor"] > 0.5, r  # nothing runs far below the floor the same run measured
    meta = json.loads(out.read_text())["meta"]
    assert meta["copy_gbps"] > 100 and meta["mm_tflops"] > 50 and meta["cuda_graph"]
