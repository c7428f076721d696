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



def _cli_on_the_cpu(monkeypatch):
    """``fused-swiglu bench e2e-ab`` as on a GPU machine, but on the CPU: the tiny model found by name,
    the run on the CPU with a short prefill (options the command does not take), no GPU check."""
    import dataclasses

    from fused_swiglu.cli import bench

    run_ab = e2e_ab.run_ab
    monkeypatch.setattr(e2e_models, "EXTRA_MODELS", (*e2e_models.EXTRA_MODELS, e2e_models.TINY_QWEN2))
    monkeypatch.setattr(e2e_ab, "run_ab", lambda opts, out, console: run_ab(
        dataclasses.replace(opts, device="cpu", prefill_batch=1, prefill_len=8), out, console))
    monkeypatch.setattr(bench, "no_hopper", lambda command: None)


def test_the_cli_command_times_the_pair_in_two_processes_and_writes_the_rows(tmp_path, monkeypatch, capsys):
    from fused_swiglu import cli

    _cli_on_the_cpu(monkeypatch)
    out = tmp_path / "runs" / "ab.json"
    assert cli.main(["bench", "e2e-ab", "--models", "tiny-qwen2", "--modes", "prefill", "--rounds", "2",
                     "--repeats", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "tiny-qwen2 prefill: stock/patched" in captured.out and f"wrote {out}" in captured.out
    assert "failed" not in captured.err
    results = json.loads(out.read_text())
    assert results["meta"]["kind"] == "e2e_ab" and results["meta"]["options"]["rounds"] == 2
    (row,) = results["rows"]
    assert row["model"] == "tiny-qwen2" and row["mode"] == "prefill" and "error" not in row
    assert row["rounds"] == len(row["ratios"]) == 2 and row["repeats_per_round"] == 1


def test_the_cli_command_exits_4_naming_each_failed_pair_after_running_the_others(tmp_path, monkeypatch, capsys):
    """As ``bench e2e`` for a failed mode: the row holds the error, the other pairs run, one line on
    stderr per failed pair (which worker, and its exception), exit status 4."""
    from fused_swiglu import cli

    _cli_on_the_cpu(monkeypatch)
    ran = []

    def run_pair(spec, mode, opts):  # a worker's failure as run_pair raises it; the other pair measured
        ran.append(mode)
        if mode == "captured_decode_step":
            raise RuntimeError("the patched worker failed:\nTraceback (most recent call last):\n  File \"x.py\", "
                               "line 1, in worker\nRuntimeError: CUDA error: out of memory\n")
        return {"model": spec.name, "mode": mode, "rounds": opts.rounds, "ratio_median": 1.0, "ratio_min": 1.0,
                "ratio_max": 1.0, "stock_ms": 1.0, "fused_ms": 1.0, "ratios": [1.0] * opts.rounds}

    monkeypatch.setattr(e2e_ab, "run_pair", run_pair)
    out = tmp_path / "ab.json"
    assert cli.main(["bench", "e2e-ab", "--models", "tiny-qwen2", "--modes", "captured_decode_step", "prefill",
                     "--out", str(out)]) == cli.EXIT_MODE_FAILED
    assert ran == ["captured_decode_step", "prefill"]
    assert capsys.readouterr().err.strip() == ("fused-swiglu bench e2e-ab: failed: tiny-qwen2 captured_decode_step: "
                                               "the patched worker failed: RuntimeError: CUDA error: out of memory")
    failed, measured = json.loads(out.read_text())["rows"]
    assert failed["ratio_median"] is None and "CUDA error: out of memory" in failed["error"]
    assert measured["mode"] == "prefill" and measured["ratio_median"] == 1.0
