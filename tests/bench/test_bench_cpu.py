"""Pure parts of the benchmark: shapes, input-set rotation, statistics, derived columns, files."""

import csv
import io
import functools
import json

import pytest
import torch

from rich.console import Console

import fused_swiglu
from fused_swiglu.bench import methods, report, run, shapes, timing
from fused_swiglu.errors import WrongOutputError


def test_shapes_are_the_qwen25_family():
    assert len(shapes.MODELS) == 7
    by_name = {m.model: (m.hidden_size, m.intermediate_size) for m in shapes.MODELS}
    assert by_name["Qwen2.5-7B"] == (3584, 18944) and by_name["Qwen2.5-72B"] == (8192, 29568)
    assert shapes.TOKENS == (1, 16, 128, 512, 2048, 8192)
    assert [m.model for m in shapes.find(["7b", "Qwen2.5-0.5B"])] == ["Qwen2.5-7B", "Qwen2.5-0.5B"]
    with pytest.raises(ValueError, match="unknown model '8B'"):
        shapes.find(["8B"])


def test_custom_shapes_as_h_x_i():
    found = shapes.find(["4096x14336", "7B", "896X4864"])
    assert [(m.model, m.hidden_size, m.intermediate_size) for m in found] == [
        ("4096x14336", 4096, 14336), ("Qwen2.5-7B", 3584, 18944), ("896x4864", 896, 4864)]
    for bad in ("4096x14335", "900x4864", "0x64", "64x0"):
        with pytest.raises(ValueError, match=f"custom shape '{bad}': hidden size H and intermediate size I "
                                             "must be positive multiples of 8"):
            shapes.find([bad])
    for half in ("4096x", "x64", "x"):
        with pytest.raises(ValueError, match=f"custom shape '{half}': give both sizes as HxI"):
            shapes.find([half])
    for not_a_shape in ("4096x14336x2", "-8x64", "8Bx64", "\u00b2x8", "\u0664096x8"):
        with pytest.raises(ValueError, match="unknown model"):
            shapes.find([not_a_shape])
    # a shape named twice, as a model and as HxI, is listed once
    assert [m.model for m in shapes.find(["7B", "3584x18944", "Qwen2.5-7B", "64x64", "64X64"])] == ["Qwen2.5-7B", "64x64"]


def test_n_input_sets_exceeds_twice_l2_within_limits():
    l2 = 50 * 2**20
    # 0.5B at M = 1: ~17 MB per set -> 6 sets exceed 100 MB
    read = methods.bytes_read(1, 896, 4864, torch.bfloat16)
    n = timing.n_input_sets(read, 2 * read, l2)
    assert n * read > 2 * l2 and (n - 1) * read <= 2 * l2
    assert timing.n_input_sets(10, 10, l2) == timing.MAX_SETS
    assert timing.n_input_sets(10**9, 10**9, l2) == 1  # one 72B-sized set is already > 2x L2
    assert timing.n_input_sets(10, 6 * 10**9, l2) == 3  # memory budget caps at 20 GB


def test_summarize():
    t = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.median_ms, t.reps) == (3.0, 5)
    assert t.p10_ms == pytest.approx(1.4) and t.p90_ms == pytest.approx(4.6)
    with pytest.raises(ValueError, match="at least one sample"):
        timing.summarize([])


def test_derive_and_flops():
    rows = [{"method": "eager", "median_ms": 2.0}, {"method": "cublas_gemm", "median_ms": 1.0},
            {"method": "fused_dual", "median_ms": 0.8}]
    run.derive(rows)
    fused = rows[2]
    assert fused["speedup_vs_eager"] == pytest.approx(2.5) and fused["ratio_to_cublas"] == pytest.approx(0.8)
    lone = [{"method": "fused_packed", "median_ms": 1.0}]
    run.derive(lone)
    assert lone[0]["speedup_vs_eager"] is None and lone[0]["ratio_to_cublas"] is None
    assert report.flops(2, 3, 5) == 120
    assert report.tflops(8192, 3584, 18944, 3.0) == pytest.approx(4 * 8192 * 3584 * 18944 / 3e-3 / 1e12)


def test_write_results_json_and_csv(tmp_path):
    rows = [dict(zip(report.BENCH_FIELDS, ["Qwen2.5-7B", 3584, 18944, 16, "bf16", "eager",
                                           0.1, 0.09, 0.12, 50.0, 1.0, 1.2, ""]))]
    meta = report.machine_meta()
    for key in ("gpu", "sm_count", "driver_version", "torch_version", "cuda_version",
                "fused_swiglu_version", "git_commit", "timestamp", "nvcc_version"):
        assert key in meta
    j, c = report.write_results(tmp_path / "r" / "bench.json", meta, rows, report.BENCH_FIELDS)
    data = json.loads(j.read_text())
    assert data["rows"] == rows and data["meta"]["fused_swiglu_version"] == fused_swiglu.__version__
    with c.open() as f:
        got = list(csv.DictReader(f))
    assert c.name == "bench.csv" and got[0]["method"] == "eager" and list(got[0]) == list(report.BENCH_FIELDS)


def test_build_calls_cpu_methods_and_rejects_unknown():
    s = methods.make_input_set(4, 16, 8, torch.bfloat16, torch.device("cpu"))
    assert s.w_gate.shape == (8, 16) and s.w_up.data_ptr() == s.w_cat[8:].data_ptr()
    calls = methods.build_calls(["eager", "cublas_gemm"], [s])
    assert calls["eager"][0]().shape == (4, 8) and calls["cublas_gemm"][0]().shape == (4, 16)
    with pytest.raises(ValueError, match="unknown method 'triton'"):
        methods.build_calls(["triton"], [s])


def test_meta_names_the_loaded_kernel_library(tmp_path, monkeypatch):
    import hashlib
    import types

    from fused_swiglu import _lib
    from fused_swiglu.bench import report

    monkeypatch.setattr(_lib, "_library", None)
    assert report.kernel_library() is None
    so = tmp_path / "libfused_swiglu.so"
    so.write_bytes(b"not really a library")
    # the count comes from the registry's names: reading ``configs`` would load every config library
    monkeypatch.setattr(_lib, "_library", types.SimpleNamespace(path=so, ordered_names=["a", "b", "c"]))
    assert report.kernel_library() == {
        "path": str(so), "sha256_16": hashlib.sha256(so.read_bytes()).hexdigest()[:16], "configs": 3}
    assert report.machine_meta()["kernel_library"]["configs"] == 3


def _fake_run(monkeypatch, fail_at: int | None, error: BaseException | None = None, each=None,
              time_cells: bool = False):
    """run_bench with the GPU parts replaced: shape number ``fail_at`` (0-based) raises ``error``;
    ``each(shape, M, opts, optional, on_left_out)``, if given, runs first for every shape; with
    ``time_cells`` each shape is first passed to the run's timer (no calls to time)."""
    from fused_swiglu.bench import report, run

    calls = []

    def measure(shape, M, opts, dtype, device, timer, l2, optional=frozenset(), on_left_out=None):
        if time_cells:
            timer.time({}, M)
        if each is not None:
            each(shape, M, opts, optional, on_left_out)
        if len(calls) == fail_at:
            raise error
        calls.append((shape.model, M))
        row = {"model": shape.model, "hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
               "tokens": M, "dtype": opts.dtype, "method": "eager", "median_ms": 1.0, "p10_ms": 0.9,
               "p90_ms": 1.1, "tflops": 1.0, "config": ""}
        run.derive([row])
        return [row]

    monkeypatch.setattr(run, "_gpu_setup", lambda: (torch.device("cpu"), None, 0))
    monkeypatch.setattr(run, "_measure_shape", measure)
    monkeypatch.setattr(report, "machine_meta", lambda device=None: {"gpu": "fake"})
    return run


@pytest.mark.parametrize("fail_at, error, reason", [
    (2, WrongOutputError("fused_packed on 1.5B M=1: 3 NaN; not timed"), "WrongOutputError: fused_packed on 1.5B M=1"),
    (1, KeyboardInterrupt(), "interrupted"),
])
def test_a_stopped_bench_writes_the_rows_measured_before(tmp_path, monkeypatch, fail_at, error, reason):
    run = _fake_run(monkeypatch, fail_at, error)
    out = tmp_path / "bench.json"
    opts = run.BenchOptions(models=["0.5B", "1.5B"], tokens=[1, 16], methods=["eager"], out=out)
    with pytest.raises(type(error)):
        run.run_bench(opts, Console(file=open(tmp_path / "log.txt", "w")))
    data = json.loads(out.read_text())
    assert data["meta"]["complete"] is False and data["meta"]["stopped_by"].startswith(reason)
    assert [(r["model"], r["tokens"]) for r in data["rows"]] == [("Qwen2.5-0.5B", 1), ("Qwen2.5-0.5B", 16)][:fail_at]
    assert len(out.with_suffix(".csv").read_text().splitlines()) == 1 + fail_at
    assert "stopped after" in (tmp_path / "log.txt").read_text()


def test_a_bench_stopped_before_any_row_writes_nothing(tmp_path, monkeypatch):
    run = _fake_run(monkeypatch, 0, WrongOutputError("eager on 0.5B M=1: wrong shape; not timed"))
    out = tmp_path / "bench.json"
    with pytest.raises(WrongOutputError):
        run.run_bench(run.BenchOptions(models=["0.5B"], tokens=[1], methods=["eager"], out=out),
                      Console(file=open(tmp_path / "log.txt", "w")))
    assert not out.exists()


def test_a_complete_bench_says_so(tmp_path, monkeypatch):
    run = _fake_run(monkeypatch, None)
    out = tmp_path / "bench.json"
    rows = run.run_bench(run.BenchOptions(models=["0.5B"], tokens=[1, 16], methods=["eager"], out=out),
                         Console(file=open(tmp_path / "log.txt", "w")))
    data = json.loads(out.read_text())
    assert len(rows) == 2 and data["rows"] == rows
    assert data["meta"]["complete"] is True and "stopped_by" not in data["meta"]


def _peer_import(monkeypatch, importable: bool):
    """Make the optional peers' modules import (or fail to import) regardless of this machine."""
    real = methods.importlib.import_module
    # peer_problem caches its answer per process: a fresh cache for this test, the real one after it
    monkeypatch.setattr(methods, "peer_problem", functools.lru_cache(maxsize=None)(methods.peer_problem.__wrapped__))

    def fake(name, *args):
        if name in {module for module, _ in methods.OPTIONAL_PEERS.values()}:
            if not importable:
                raise ImportError(f"No module named {name.split('.')[0]!r}")
            return object()
        return real(name, *args)

    monkeypatch.setattr(methods.importlib, "import_module", fake)


def test_an_optional_peer_runs_only_where_its_package_imports(monkeypatch):
    assert set(methods.OPTIONAL_PEERS) <= set(methods.METHODS)
    _peer_import(monkeypatch, importable=False)
    why = methods.peer_problem("quack")
    assert why.startswith("quack needs the quack-kernels package (pip install quack-kernels, or this package's "
                          "[peers] extra)") and "ImportError" in why
    assert methods.default_methods() == [m for m in methods.METHODS if m != "quack"]
    assert methods.peer_problem("fused_packed") is None
    _peer_import(monkeypatch, importable=True)
    assert methods.peer_problem("quack") is None and methods.default_methods() == list(methods.METHODS)


def test_a_default_bench_without_the_peer_package_says_why_in_its_file(tmp_path, monkeypatch):
    run = _fake_run(monkeypatch, None)
    _peer_import(monkeypatch, importable=False)
    out = tmp_path / "bench.json"
    opts = run.BenchOptions(models=["0.5B"], tokens=[1], out=out)  # methods: the defaults
    run.run_bench(opts, Console(file=open(tmp_path / "log.txt", "w")))
    assert "quack" not in opts.methods and "fused_packed" in opts.methods
    meta = json.loads(out.read_text())["meta"]
    assert meta["peers_not_run"]["quack"].startswith("quack needs the quack-kernels package")
    assert "not run: quack needs" in (tmp_path / "log.txt").read_text()


def test_asking_for_a_peer_whose_package_is_missing_is_refused(tmp_path, monkeypatch):
    run = _fake_run(monkeypatch, None)
    _peer_import(monkeypatch, importable=False)
    opts = run.BenchOptions(models=["0.5B"], tokens=[1], methods=["cublas_gemm", "quack"], out=tmp_path / "b.json")
    with pytest.raises(ValueError, match=r"--methods: quack needs the quack-kernels package \(pip install quack-kernels"):
        run.run_bench(opts, Console(file=open(tmp_path / "log.txt", "w")))
    assert not (tmp_path / "b.json").exists()


def test_the_peer_weight_layout_alternates_gate_and_up_rows():
    s = methods.make_input_set(3, 16, 8, torch.float32, torch.device("cpu"), alternating=True)
    assert s.w_alternating.shape == (16, 16)
    assert torch.equal(s.w_alternating[0::2], s.w_gate) and torch.equal(s.w_alternating[1::2], s.w_up)
    assert methods.make_input_set(3, 16, 8, torch.float32, torch.device("cpu")).w_alternating is None
    assert (methods.bytes_held(3, 16, 8, torch.bfloat16, alternating=True)
            - methods.bytes_held(3, 16, 8, torch.bfloat16)) == 2 * 8 * 16 * 2  # one more (2I, H) layout
    with pytest.raises(ValueError, match="alternating=True"):
        methods.build_calls(["quack"], [methods.make_input_set(3, 16, 8, torch.float32, torch.device("cpu"))])


def test_a_default_peer_that_fails_on_a_shape_is_left_out_and_the_run_completes(tmp_path, monkeypatch):
    seen = []

    def each(shape, M, opts, optional, on_left_out):
        seen.append((M, list(opts.methods), optional))
        if M == 16 and "quack" in opts.methods:  # as _measure_shape does when the peer's check fails
            opts.methods.remove("quack")
            on_left_out("quack", f"quack on {shape.model} M={M}: its call raised TypeError: boom")

    run = _fake_run(monkeypatch, None, each=each)
    _peer_import(monkeypatch, importable=True)
    out = tmp_path / "bench.json"
    run.run_bench(run.BenchOptions(models=["0.5B"], tokens=[1, 16, 128], out=out),  # the default methods
                  Console(file=open(tmp_path / "log.txt", "w")))
    assert [("quack" in methods_, optional) for _, methods_, optional in seen] == [
        (True, frozenset({"quack"})), (True, frozenset({"quack"})), (False, frozenset({"quack"}))]
    meta = json.loads(out.read_text())["meta"]
    assert meta["complete"] is True
    assert meta["peers_not_run"] == {
        "quack": "quack on Qwen2.5-0.5B M=16: its call raised TypeError: boom; left out from there on"}
    assert "not run: quack on Qwen2.5-0.5B M=16: its call raised TypeError: boom" in (tmp_path / "log.txt").read_text()


def test_a_peer_asked_for_by_name_is_not_optional(tmp_path, monkeypatch):
    seen = []
    run = _fake_run(monkeypatch, None, each=lambda shape, M, opts, optional, on_left_out: seen.append(optional))
    _peer_import(monkeypatch, importable=True)
    run.run_bench(run.BenchOptions(models=["0.5B"], tokens=[1], methods=["eager", "quack"], out=tmp_path / "b.json"),
                  Console(file=open(tmp_path / "log.txt", "w")))
    assert seen == [frozenset()]


def test_the_protocol_of_a_cell():
    from fused_swiglu.bench import timing

    assert timing.protocol_for("auto", timing.SUSTAINED_FROM_M, True) == "sustained"
    assert timing.protocol_for("auto", timing.SUSTAINED_FROM_M - 1, True) == "interleaved"
    assert timing.protocol_for("auto", 8192, False) == "interleaved"  # eager timing asks about host time
    assert timing.protocol_for("interleaved", 8192, True) == "interleaved"
    assert timing.protocol_for("sustained", 1, True) == "sustained"
    with pytest.raises(ValueError, match="protocol must be one of 'auto', 'sustained', 'interleaved'"):
        timing.protocol_for("fast", 1, True)
    with pytest.raises(ValueError, match="sustained protocol times CUDA-graph replays"):
        timing.protocol_for("sustained", 1, False)


def test_sustained_cells_run_last_after_one_heat_soak_and_rows_keep_their_order(monkeypatch):
    from fused_swiglu.bench import power, timing
    from fused_swiglu.bench.run import BenchOptions

    seen = []

    def each(shape, M, opts, optional, on_left_out):
        seen.append((shape.model, M))

    run = _fake_run(monkeypatch, None, None, each, time_cells=True)
    soaks = []
    monkeypatch.setattr(timing, "heat_soak", lambda device, monitor: soaks.append(seen[:]) or power.Reading(1.0, 2.0, 1))
    monkeypatch.setattr(timing, "time_interleaved", lambda *a, **k: {})
    monkeypatch.setattr(timing, "time_sustained", lambda *a, **k: {})
    monkeypatch.setattr(power, "nvml_index", lambda device: 0)
    opts = BenchOptions(models=["0.5B", "1.5B"], tokens=[1, 2048], cuda_graph=True)
    rows = run.run_bench(opts, Console(file=io.StringIO()))
    a, b = "Qwen2.5-0.5B", "Qwen2.5-1.5B"
    assert seen == [(a, 1), (b, 1), (a, 2048), (b, 2048)]
    assert soaks == [[(a, 1), (b, 1)]]  # once, before the first sustained cell
    assert [(r["model"], r["tokens"]) for r in rows] == [(a, 1), (a, 2048), (b, 1), (b, 2048)]
