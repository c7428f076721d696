"""``bench --host-time`` on a CPU (the fused path's PyTorch backend), a small shape and few calls."""

import json

import pytest
import torch
from rich.console import Console

from fused_swiglu import cli
from fused_swiglu.bench import host_time

SHAPE = (1, 64, 128)


def test_every_method_is_timed_and_the_json_written(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "h" / "host.json"
    with (tmp_path / "log.txt").open("w") as f:
        results = host_time.run_host_time(Console(file=f, width=200), out=out, device="cpu", backend="torch",
                                          n=5, repeats=3, shape=SHAPE, queued=4)
    assert [r["method"] for r in results["rows"]] == list(host_time.METHODS)
    for r in results["rows"]:
        assert r["us_per_call"] > 0 and len(r["samples_us"]) == 3 and r["n"] == 5
        assert r["host_us"] > 0 and len(r["host_samples_us"]) == 3 and r["queued"] == 4
        assert sorted(r["samples_us"])[1] == r["us_per_call"]  # the median of 3
        assert sorted(r["host_samples_us"])[1] == r["host_us"]
        assert r["bound"] in ("gpu", "host")
    assert set(results["ratios"]) == {f"{a}/{b}" for a, b in host_time.RATIOS}
    assert {"fp8_packed/torch_mm", "dswiglu/torch_mm", "mlp_fused/mlp_stock"} <= set(results["ratios"])
    us = {r["method"]: r["host_us"] for r in results["rows"]}
    assert results["ratios"]["mlp_fused/mlp_stock"] == pytest.approx(us["mlp_fused"] / us["mlp_stock"])
    data = json.loads(out.read_text())
    assert data["rows"] == results["rows"] and data["meta"]["n"] == 5 and data["meta"]["hidden_size"] == 64
    assert data["meta"]["queued"] == 4
    assert data["meta"]["backend"] == "torch" and "torch_version" in data["meta"]
    log = (tmp_path / "log.txt").read_text()
    assert "Host time per call (M = 1, H = 64, I = 128)" in log and "mlp_fused/mlp_stock (host time):" in log


def test_the_mlp_is_left_stock_and_matches_the_fused_one():
    pytest.importorskip("transformers")
    with torch.no_grad():
        calls, setup, skipped = host_time.build_calls(2, 64, 128, torch.bfloat16, torch.device("cpu"), "torch")
        assert skipped == {} and set(calls) == set(host_time.METHODS)
        setup["mlp_fused"]()
        fused = calls["mlp_fused"]()
        setup["mlp_stock"]()
        stock = calls["mlp_stock"]()
    assert fused.shape == stock.shape == (2, 64)
    torch.testing.assert_close(fused.float(), stock.float(), atol=2e-2, rtol=2e-2)


def test_without_transformers_the_mlp_rows_say_why(monkeypatch):
    monkeypatch.setattr(host_time, "_qwen2_mlp", lambda H, I, dtype, device: "needs transformers (pip install transformers)")
    rows = host_time.measure("cpu", "torch", n=2, repeats=1, warmup=1, shape=SHAPE)
    by = {r["method"]: r for r in rows}
    assert by["mlp_stock"]["us_per_call"] is None and by["mlp_stock"]["host_us"] is None
    assert by["mlp_fused"]["skipped"].startswith("needs transformers")
    assert by["torch_mm"]["us_per_call"] > 0
    assert host_time.ratios(rows)["mlp_fused/mlp_stock"] is None


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be an integer >= 1; got 0"),
    ({"repeats": 0}, "repeats must be an integer >= 1; got 0"),
    ({"queued": 0}, "queued must be an integer >= 1; got 0"),
    ({"dtype": "fp8"}, "dtype must be one of bf16, fp16; got 'fp8'"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        host_time.measure("cpu", "torch", **{"shape": SHAPE, **kwargs})


@pytest.mark.parametrize("argv, message", [
    (["--host-time", "--models", "7B"], "unrecognized arguments: --models 7B"),
    (["--host-time", "--methods", "eager"], "unrecognized arguments: --methods eager"),
    (["--host-time", "--e2e-modes", "prefill"], "unrecognized arguments: --e2e-modes prefill"),
])
def test_bad_host_time_options_exit_1(argv, message, capsys):
    assert cli.main(["bench", *argv]) == cli.EXIT_BAD_OPTION
    assert message in capsys.readouterr().err



def test_host_time_stops_at_the_last_return_and_throughput_waits_for_the_device(monkeypatch):
    """The host sample is taken before the synchronize; the throughput sample after it."""
    import types

    clock = iter(range(0, 1000, 1))
    monkeypatch.setattr(host_time, "time", types.SimpleNamespace(perf_counter=lambda: next(clock) * 1e-3))
    synced = []
    monkeypatch.setattr(host_time, "_sync", lambda device: synced.append(next(clock)))
    # host: perf_counter at 1 (after sync 0), 2 after the calls, then sync 3 -> 1 ms over 4 calls
    assert host_time.host_us(lambda: None, 4, torch.device("cpu")) == pytest.approx(250.0)
    # throughput: sync 4, perf_counter 5, sync 6, perf_counter 7 -> 2 ms over 4 calls
    assert host_time.per_call_us(lambda: None, 4, torch.device("cpu")) == pytest.approx(500.0)
    assert synced == [0, 3, 4, 6]


def test_rows_of_older_files_give_their_throughput_ratios():
    old = [{"method": "fp8_packed", "us_per_call": 18.0}, {"method": "torch_mm", "us_per_call": 12.0}]
    new = [{"method": "fp8_packed", "us_per_call": 18.0, "host_us": 9.0},
           {"method": "torch_mm", "us_per_call": 12.0, "host_us": 12.0}]
    assert host_time.ratios(old)["fp8_packed/torch_mm"] == pytest.approx(1.5)
    assert host_time.ratios(new)["fp8_packed/torch_mm"] == pytest.approx(0.75)


def test_a_method_whose_stream_outlasts_its_host_time_is_gpu_bound(monkeypatch):
    """bound: "gpu" where the throughput per call exceeds the host time by more than GPU_BOUND, else "host"."""
    samples = {"torch_mm": (10.0, 10.5), "swiglu": (10.0, 12.0)}  # (host, throughput) per call, us
    monkeypatch.setattr(host_time, "host_us", lambda fn, queued, device: samples[fn()][0])
    monkeypatch.setattr(host_time, "per_call_us", lambda fn, n, device: samples[fn()][1])
    monkeypatch.setattr(host_time, "build_calls", lambda *a: ({m: (lambda m=m: m) for m in samples}, {}, {
        m: "not timed here" for m in host_time.METHODS if m not in samples}))
    rows = {r["method"]: r for r in host_time.measure("cpu", "torch", n=3, repeats=1, warmup=0, shape=SHAPE)}
    assert rows["torch_mm"]["bound"] == "host" and rows["swiglu"]["bound"] == "gpu"
    assert rows["swiglu"]["host_us"] == 10.0 and rows["swiglu"]["us_per_call"] == 12.0
