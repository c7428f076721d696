"""``bench --e2e`` and ``--host-time`` on a Hopper GPU: every mode on tiny models, the kernels' backend."""

import json

import pytest
import torch
from rich.console import Console

pytest.importorskip("transformers")

from fused_swiglu.bench import e2e, e2e_models, e2e_modes, host_time  # noqa: E402

pytestmark = pytest.mark.gpu

SMALL = dict(new_tokens=8, prompt_len=16, gen_repeats=2, compiled_repeats=2, compiled_warmups=2, graph_replays=20,
             prefill_batch=2, prefill_len=64, prefill_repeats=2, accuracy_prompt_len=32)


def test_every_mode_runs_on_the_gpu(tmp_path):
    opts = e2e.E2EOptions(models=[e2e_models.TINY_QWEN2], quick=True, backend="cutlass", out=tmp_path / "e2e.json",
                          settings=dict(SMALL))
    with (tmp_path / "log.txt").open("w") as f:
        results = e2e.run_e2e(opts, Console(file=f, width=200))
    assert e2e.failures(results) == []
    assert [r["mode"] for r in results["rows"]] == list(e2e_modes.MODES)
    for r in results["rows"]:
        assert "skipped" not in r and r["stock_ms"] > 0 and r["fused_ms"] > 0, r
    by = {r["mode"]: r for r in results["rows"]}
    captured = by["captured_decode_step"]
    assert max(captured["graph_vs_eager_max_abs_logit_diff"].values()) < 0.1
    compiled = by["compiled_decode"]
    assert compiled["compile_s"]["stock"] > 0 and compiled["compile_s"]["fused"] > 0
    assert compiled["graphs_compiled_while_timed"] == {"stock": 0, "fused": 0}
    (acc,) = results["accuracy"]
    assert 0 < acc["stock_logits_rel_err"] < 0.05 and 0 < acc["fused_logits_rel_err"] < 0.05
    data = json.loads((tmp_path / "e2e.json").read_text())
    assert data["meta"]["gpu"] and data["meta"]["complete"] is True
    assert (tmp_path / "e2e.png").is_file() or "matplotlib is not installed" in (tmp_path / "log.txt").read_text()


def test_host_time_on_the_gpu():
    rows = host_time.measure("cuda", n=50, repeats=2)
    assert all(r["us_per_call"] > 0 for r in rows), rows
