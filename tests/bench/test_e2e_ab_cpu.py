"""bench e2e-ab on the CPU: two worker processes, alternating rounds, the row's ratios."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

pytest.importorskip("transformers")

from fused_swiglu.bench import e2e_ab, e2e_models  # noqa: E402


def _opts(**kw):
    base = dict(models=[e2e_models.TINY_QWEN2], modes=["prefill"], rounds=3, repeats=1, prefill_batch=1,
                prefill_len=8, device="cpu")
    return e2e_ab.ABOptions(**{**base, **kw})


def test_rounds_alternate_between_two_processes_and_ratios_are_per_round(tmp_path):
    out = tmp_path / "ab.json"
    results = e2e_ab.run_ab(_opts(), out, Console(quiet=True))
    (row,) = results["rows"]
    assert "error" not in row, row.get("error")
    assert row["model"] == "tiny-qwen2" and row["mode"] == "prefill" and row["rounds"] == 3
    assert len(row["ratios"]) == len(row["stock_samples_ms"]) == len(row["fused_samples_ms"]) == 3
    for r, s, f in zip(row["ratios"], row["stock_samples_ms"], row["fused_samples_ms"]):
        assert r == pytest.approx(s / f)
    assert row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]
    assert json.loads(out.read_text())["rows"][0]["ratio_median"] == row["ratio_median"]


def test_a_mode_that_cannot_run_is_a_row_with_its_error():
    results = e2e_ab.run_ab(_opts(modes=["compiled_decode"], rounds=1), None, Console(quiet=True))
    (row,) = results["rows"]
    assert row["ratio_median"] is None and "compiled_decode needs a CUDA device" in row["error"]


@pytest.mark.parametrize("kw,says", [({"modes": ["decode"]}, "unknown mode 'decode'"),
                                     ({"rounds": 0}, "rounds must be an integer >= 1"),
                                     ({"models": ["Qwen9"]}, "unknown model 'Qwen9'")])
def test_bad_options_are_named(kw, says):
    with pytest.raises(ValueError, match=says):
        e2e_ab.check_options(_opts(**kw))
