"""``fused-swiglu report`` reads the file of every command that writes one: plots where a plot of its
kind exists, tables otherwise (CPU)."""

import importlib.util
import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from fused_swiglu import cli
from fused_swiglu.bench import plots

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "results" / "h200"
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="draws plots")
META = {"gpu": "NVIDIA H200", "fused_swiglu_version": "0.1.0", "torch_version": "2.11", "git_commit": "abcdef0123"}


def _report(tmp_path, capsys, name: str, body: dict | None = None) -> tuple[int, str, str]:
    """Run ``fused-swiglu report`` on a copy of the committed file ``name`` (or on ``body``) in
    ``tmp_path``; returns the status, stdout and stderr."""
    path = tmp_path / name
    if body is None:
        shutil.copy(COMMITTED / name, path)
    else:
        path.write_text(json.dumps(body))
    code = cli.main(["report", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


@needs_matplotlib
@pytest.mark.parametrize("name, pngs, titles", [
    ("e2e.json", ["e2e_stock_vs_fused.png"], ["e2e.json: End to end: accuracy"]),
    ("e2e_quick.json", ["e2e_quick_stock_vs_fused.png"], ["e2e_quick.json: End to end: accuracy"]),
    ("host_time.json", [], ["host_time.json: Host time per call (M = 1, H = 896, I = 4864)",
                            "ratios: swiglu/torch_mm 1.12"]),
    ("bench_fp8.json", [], ["bench_fp8.json: e4m3 methods: the bf16 packed kernel's time / the method's"]),
    ("fp8_sustained.json", [], ["fp8_sustained.json: e4m3 methods"]),
    ("backward.json", ["backward_speedup_vs_eager.png"], []),
    ("backward_cuda_graph.json", ["backward_cuda_graph_speedup_vs_eager.png"], []),
    ("accuracy_fp8.json", ["accuracy_fp8_accuracy.png"], []),
    ("bench.json", ["bench_speedup_vs_eager.png", "bench_vs_cublas_and_quack.png"], []),
    ("choice_ab.json", [], ["choice_ab.json: 168 rows"]),
    ("cooperative_ab.json", [], ["cooperative_ab.json: 405 rows"]),  # no packed kernel: no empty plot
])
def test_report_reads_the_committed_results_files(tmp_path, capsys, name, pngs, titles):
    code, out, err = _report(tmp_path, capsys, name)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(pngs)
    for png in pngs:
        assert f"wrote {tmp_path / png}" in out
    for title in titles:
        assert title in out


def test_a_tp_file_is_a_table(tmp_path, capsys):
    rows = [{"model": "Qwen2.5-72B", "hidden_size": 8192, "intermediate_size": 29568, "tokens": M, "world_size": 2,
             "one_gpu_ms": 1.0 * M, "tp_ms": 0.55 * M, "allreduce_ms": 0.01, "ratio_over_1gpu": 0.55,
             "ratio_2gpu_over_1gpu": 0.55, "scaling_efficiency": 0.909} for M in (1, 8192)]
    assert plots.kind_of({"rows": rows}) == "tp"
    code, out, _ = _report(tmp_path, capsys, "tp.json", {"meta": META, "rows": rows})
    assert code == 0 and "tp.json: Tensor parallel" in out
    line = next(line for line in out.splitlines() if "8192 " in line)
    assert "Qwen2.5-72B" in line and "4505.6000" in line and "0.550" in line and "0.909" in line


def test_an_unknown_but_well_formed_file_is_tabulated(tmp_path, capsys):
    rows = [{"model": "Qwen2.5-7B", "mode": "prefill", "rounds": 5, "ratio_median": 1.0234, "ratio_min": 0.99,
             "ratio_max": 1.07, "stock_ms": 10.0, "fused_ms": 9.77, "ratios": [1.0, 1.1]},
            {"model": "Qwen2.5-7B", "mode": "compiled_decode", "rounds": 0, "ratio_median": None, "ratio_min": None,
             "ratio_max": None, "error": "Traceback:\n" + "x" * 2000}]
    assert plots.kind_of({"rows": rows}) == "rows"  # the times of an A/B file do not make it an e2e file
    code, out, _ = _report(tmp_path, capsys, "e2e_compiled_decode_ab.json", {"meta": META, "rows": rows})
    assert code == 0 and "e2e_compiled_decode_ab.json: 2 rows" in out and "wrote" not in out
    header = next(line for line in out.splitlines() if "ratio_median" in line)
    assert [c for c in ("model", "mode", "rounds", "ratio_median", "ratio_min", "ratio_max") if c not in header] == []
    assert "1.023" in out and "not shown: ratios (lists or objects)" in out
    console = Console(file=io.StringIO(), width=1000)
    console.print(*plots.report([tmp_path / "e2e_compiled_decode_ab.json"]))
    wide = console.file.getvalue()
    assert f"Traceback: {'x' * 106}... " in wide and "x" * 200 not in wide  # an error cut short, on one line


def test_an_fp8_file_without_the_bf16_kernel_shows_times(tmp_path, capsys):
    rows = [{"model": "Qwen3-8B", "tokens": 16, "method": m, "median_ms": ms, "bf16_over": None}
            for m, ms in (("fp8_fused", 0.0123), ("fp8_unfused", 0.0456))]
    code, out, _ = _report(tmp_path, capsys, "fp8.json", {"meta": META, "rows": rows})
    assert code == 0 and "fp8.json: e4m3 methods: ms, median" in out
    assert "0.0123" in out and "0.0456" in out


@pytest.mark.parametrize("name", ["e2e.json", "host_time.json", "bench_fp8.json"])
def test_kinds_of_the_files_once_refused(name):
    kinds = {"e2e.json": "e2e", "host_time.json": "host-time", "bench_fp8.json": "fp8"}
    assert plots.kind_of(json.loads((COMMITTED / name).read_text())) == kinds[name]


def test_tables_need_no_matplotlib_and_plots_name_it(tmp_path, capsys, monkeypatch):
    def no_matplotlib():
        raise ImportError("No module named 'matplotlib'", name="matplotlib")

    monkeypatch.setattr(plots, "pyplot", no_matplotlib)
    code, out, _ = _report(tmp_path, capsys, "host_time.json")
    assert code == 0 and "Host time per call" in out
    code, _, err = _report(tmp_path, capsys, "backward.json")
    assert code == cli.EXIT_BAD_OPTION
    assert err == "fused-swiglu report: report needs matplotlib for its plots (pip install matplotlib)\n"


def test_a_missing_path_is_not_found_and_a_bad_file_exits_with_the_listed_status(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "e2e.json")]) == cli.EXIT_BAD_OPTION
    assert capsys.readouterr().err == f"fused-swiglu report: {tmp_path / 'e2e.json'}: not found\n"
    (tmp_path / "x.json").write_text('{"rows": 3}')
    assert cli.main(["report", str(tmp_path / "x.json")]) == cli.EXIT_BAD_OPTION
    assert "not a results file of fused-swiglu" in capsys.readouterr().err
    assert f"{cli.EXIT_BAD_OPTION} bad input: " in cli.EXIT_STATUS and "a results file that report cannot read" \
        in cli.EXIT_STATUS


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "docs" / "results").rglob("*.json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_results_file_is_one_report_reads(path):
    results = plots._results(path)  # raises, naming the file, for anything else
    assert results["rows"] and plots.kind_of(results) is not None


@needs_matplotlib
def test_the_csv_a_command_writes_beside_its_json_is_read_as_it(tmp_path, capsys):
    code, out, err = _report(tmp_path, capsys, "sustained.csv")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["sustained_speedup_vs_eager.png",
                                                               "sustained_vs_cublas_and_quack.png"]
    code, out, err = _report(tmp_path, capsys, "bench_fp8.csv")
    assert code == 0 and "bench_fp8.csv: e4m3 methods" in out, err


@pytest.mark.parametrize("text", ["model,tokens\n", ""])
def test_a_csv_without_rows_is_named(tmp_path, capsys, text):
    (tmp_path / "empty.csv").write_text(text)
    code, out, err = cli.main(["report", str(tmp_path / "empty.csv")]), *capsys.readouterr()
    assert code == 1 and "empty.csv: not a results file of fused-swiglu (a CSV needs a header and rows)" in err


def test_a_ragged_csv_is_named_with_its_line(tmp_path, capsys):
    (tmp_path / "cut.csv").write_text("model,tokens,median_ms\nQwen2.5-7B,8192,3.3\nQwen2.5-7B,2048\n")
    code, out, err = cli.main(["report", str(tmp_path / "cut.csv")]), *capsys.readouterr()
    assert code == 1 and "cut.csv: line 3 has 2 cells where the header names 3" in err


def test_two_files_whose_plots_share_a_name_in_one_out_dir_are_refused(tmp_path, capsys):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(COMMITTED / "sustained.json", tmp_path / folder / "sustained.json")
    code = cli.main(["report", str(tmp_path / "a" / "sustained.json"), str(tmp_path / "b" / "sustained.json"),
                     "--out-dir", str(tmp_path / "png")])
    err = capsys.readouterr().err
    assert code == 1 and "would both write" in err and not (tmp_path / "png").exists()
