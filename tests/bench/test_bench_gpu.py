"""The benchmark and accuracy commands end to end on a small slice (Hopper GPU)."""

import json
import time

import pytest
import torch
from rich.console import Console

from fused_swiglu.bench import accuracy_run, methods, timing
from fused_swiglu.bench.run import BenchOptions, run_bench
from fused_swiglu.errors import WrongOutputError

pytestmark = pytest.mark.gpu


def test_timing_protocol_measures_positive_times():
    s = methods.make_input_set(128, 896, 4864, torch.bfloat16, torch.device("cuda"))
    calls = methods.build_calls(["eager", "cublas_gemm", "fused_dual"], [s, s])
    t = timing.time_interleaved(calls, torch.device("cuda"), warmup_ms=1, reps=5)
    assert set(t) == {"eager", "cublas_gemm", "fused_dual"}
    assert all(0 < v.p10_ms <= v.median_ms <= v.p90_ms for v in t.values())


def test_back_to_back_timing_counts_the_host_time_the_gpu_waits_for():
    """A call that spends 30 us on the host before a tiny kernel: back to back, each call takes at
    least that; one call enqueued behind the flush (a 256 MB write, longer than 30 us) hides it."""
    import time

    x = torch.zeros(16, device="cuda")

    def host_heavy():
        end = time.perf_counter() + 3e-5
        while time.perf_counter() < end:
            pass
        x.add_(1)
    calls = {"host_heavy": [host_heavy] * 4}
    b2b = timing.time_interleaved(calls, torch.device("cuda"), warmup_ms=1, reps=5, back_to_back=True)
    behind = timing.time_interleaved(calls, torch.device("cuda"), warmup_ms=1, reps=5)
    assert b2b["host_heavy"].median_ms >= 0.028
    assert behind["host_heavy"].median_ms < 0.015


def test_graph_replays_are_timed():
    s = methods.make_input_set(16, 896, 4864, torch.bfloat16, torch.device("cuda"))
    calls = methods.build_calls(["cublas_gemm", "fused_packed", "fused_dual"], [s])
    replays = timing.as_graph_replays(calls, torch.device("cuda"))
    t = timing.time_interleaved(replays, torch.device("cuda"), warmup_ms=1, reps=5)
    assert set(t) == {"cublas_gemm", "fused_packed", "fused_dual"}
    assert all(0 < v.p10_ms <= v.median_ms <= v.p90_ms for v in t.values())


def test_sustained_timing_runs_each_method_for_its_seconds_and_reads_clock_and_power():
    from fused_swiglu.bench import power

    device = torch.device("cuda")
    s = methods.make_input_set(2048, 896, 4864, torch.bfloat16, device)
    replays = timing.as_graph_replays(methods.build_calls(["cublas_gemm", "fused_dual"], [s, s]), device)
    monitor = power.Monitor(power.nvml_index(device))
    start = time.perf_counter()
    t = timing.time_sustained(replays, device, monitor, seconds=0.3)
    assert time.perf_counter() - start >= 0.6  # each method its 0.3 s
    assert set(t) == {"cublas_gemm", "fused_dual"}
    for v in t.values():
        assert 0 < v.p10_ms <= v.median_ms <= v.p90_ms and v.reps > 100
        if monitor.available:  # nvidia-ml-py is there on the GPU machines this runs on
            assert 300 < v.sm_mhz < 2500 and 50 < v.power_w < 1500


def test_bench_writes_json_and_csv(tmp_path):
    out = tmp_path / "bench.json"
    opts = BenchOptions(models=["0.5B"], tokens=[16], out=out, warmup_ms=1, reps=3)  # the default methods
    rows = run_bench(opts, Console(file=open(tmp_path / "log.txt", "w")))
    assert len(rows) == len(methods.default_methods()) >= len(methods.METHODS) - len(methods.OPTIONAL_PEERS)
    data = json.loads(out.read_text())
    assert data["meta"]["gpu"] and data["meta"]["sm_count"] > 0 and data["meta"]["complete"] is True
    fused = [r for r in data["rows"] if r["method"] == "fused_packed"][0]
    assert fused["config"].startswith("packed_") and fused["tflops"] > 0 and fused["ratio_to_cublas"] > 0
    assert out.with_suffix(".csv").is_file()


@pytest.mark.skipif(methods.peer_problem("quack") is not None, reason="the quack-kernels package does not import here")
def test_the_quack_peer_is_checked_and_timed_beside_the_kernels(tmp_path):
    out = tmp_path / "bench.json"
    opts = BenchOptions(models=["0.5B"], tokens=[129], methods=["cublas_gemm", "fused_packed", "quack"], out=out,
                        warmup_ms=1, reps=3, cuda_graph=True)
    rows = run_bench(opts, Console(file=open(tmp_path / "log.txt", "w")))
    quack = [r for r in rows if r["method"] == "quack"][0]
    assert quack["median_ms"] > 0 and quack["config"] == "" and quack["ratio_to_cublas"] > 0
    assert "peers_not_run" not in json.loads(out.read_text())["meta"]


def test_a_default_peer_whose_call_raises_is_left_out_and_the_kernels_are_timed(monkeypatch):
    """A peer that imports but fails at its first call (here a stand-in for quack that raises) is
    removed from the shape's methods and reported; the other methods are checked and timed."""
    from fused_swiglu.bench import run

    def broken(x, w_alternating):
        raise TypeError("epilogue fn depends on a ContextVar")

    monkeypatch.setattr(methods, "quack_swiglu", broken)
    opts = BenchOptions(models=["0.5B"], tokens=[64], methods=["cublas_gemm", "fused_dual", "quack"],
                        warmup_ms=1, reps=3)
    reported = {}
    device, flush, l2 = run._gpu_setup()
    timer = timing.CellTimer(device, flush, opts.protocol, opts.cuda_graph, reps=opts.reps, warmup_ms=opts.warmup_ms)
    (shape,) = run.shapes.find(["0.5B"])
    rows = run._measure_shape(shape, 64, opts, torch.bfloat16, device, timer, l2, frozenset({"quack"}),
                              lambda method, why: reported.setdefault(method, why))
    assert sorted(r["method"] for r in rows) == ["cublas_gemm", "fused_dual"]
    assert opts.methods == ["cublas_gemm", "fused_dual"]
    assert reported == {"quack": "quack on Qwen2.5-0.5B M=64: its call raised TypeError: epilogue fn depends on "
                                 "a ContextVar"}


def test_a_wrong_kernel_result_stops_the_bench_after_the_rows_before(tmp_path, monkeypatch):
    """The second shape's fused_packed output has one element off: the check refuses it, the first
    shape's rows are written, marked incomplete."""
    build_calls = methods.build_calls
    shapes_seen = []

    def corrupt_second_shape(names, sets):
        calls = build_calls(names, sets)
        shapes_seen.append(sets[0].x.shape[0])
        if len(shapes_seen) == 2:
            good = calls["fused_packed"]

            def bad(fn):
                def call():
                    y = fn()
                    y[-1, -1] = 1000.0  # outputs are O(1): far off, counted or not
                    return y
                return call
            calls["fused_packed"] = [bad(fn) for fn in good]
        return calls

    monkeypatch.setattr(methods, "build_calls", corrupt_second_shape)
    out = tmp_path / "bench.json"
    opts = BenchOptions(models=["0.5B"], tokens=[16, 128], methods=["cublas_gemm", "fused_packed"], out=out,
                        warmup_ms=1, reps=3)
    with pytest.raises(WrongOutputError, match="fused_packed on Qwen2.5-0.5B M=128"):
        run_bench(opts, Console(file=open(tmp_path / "log.txt", "w")))
    data = json.loads(out.read_text())
    assert data["meta"]["complete"] is False and "fused_packed" in data["meta"]["stopped_by"]
    assert sorted((r["tokens"], r["method"]) for r in data["rows"]) == [(16, "cublas_gemm"), (16, "fused_packed")]


def test_accuracy_command_meets_the_anchor(tmp_path):
    rows = accuracy_run.run_accuracy(Console(file=open(tmp_path / "log.txt", "w")), out=tmp_path / "a.json",
                                     models=["0.5B"])
    by = {r["method"]: r for r in rows}
    assert by["fused_packed"]["mismatch"] == 0 and by["fused_dual"]["mismatch"] == 0
    assert by["torch_fp32_one_rounding"]["mismatch"] == 0
    assert by["eager"]["mismatch"] > 0  # three roundings (ANCHORS: ~1.4 %)


def test_accuracy_leaves_out_a_peer_whose_call_raises(tmp_path, monkeypatch):
    def broken(x, w_alternating):
        raise TypeError("epilogue fn depends on a ContextVar")

    monkeypatch.setattr(accuracy_run, "peer_problem", lambda method: None)  # as if quack imported here
    monkeypatch.setattr(accuracy_run, "quack_swiglu", broken)
    out = tmp_path / "a.json"
    rows = accuracy_run.run_accuracy(Console(file=open(tmp_path / "log.txt", "w")), out=out, models=["0.5B"])
    assert "quack" not in {r["method"] for r in rows} and {"fused_packed", "fused_dual"} <= {r["method"] for r in rows}
    meta = json.loads(out.read_text())["meta"]
    assert meta["peers_not_run"] == {"quack": "quack on Qwen2.5-0.5B: its call raised TypeError: epilogue fn "
                                              "depends on a ContextVar; left out from there on"}
    assert "not measured: quack on Qwen2.5-0.5B" in (tmp_path / "log.txt").read_text()
