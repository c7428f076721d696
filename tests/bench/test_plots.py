"""bench.plots: ``fused-swiglu report`` draws every plot whose results file is present (CPU)."""

import json

import pytest

pytest.importorskip("matplotlib")

from fused_swiglu import cli  # noqa: E402
from fused_swiglu.bench import plots  # noqa: E402

META = {"gpu": "NVIDIA H200", "fused_swiglu_version": "0.1.0", "torch_version": "2.11", "git_commit": "abcdef0123",
        "kernel_library": {"sha256_16": "0123456789abcdef"}}


def _bench_rows():
    rows = []
    for model in ("Qwen2.5-0.5B", "Qwen2.5-7B"):
        for M in (1, 16, 2048):
            for method, ms in (("eager", 2.0), ("cublas_gemm", 1.1), ("fused_packed", 1.0), ("fused_dual", 1.05),
                               ("quack", 1.5)):
                rows.append({"model": model, "tokens": M, "method": method, "median_ms": ms * M})
    return rows


def test_report_writes_the_plots_of_the_files_present(tmp_path, capsys):
    (tmp_path / "bench_cuda_graph.json").write_text(json.dumps({"meta": META, "rows": _bench_rows()}))
    (tmp_path / "accuracy.json").write_text(json.dumps({"meta": META, "rows": [
        {"model": "Qwen2.5-0.5B", "method": m, "exact": e, "max_ulp": u} for m, e, u in
        (("eager", 0.58, 4), ("fused_packed", 0.998, 1))]}))
    written = plots.report([tmp_path], tmp_path / "png")
    assert sorted(p.name for p in written) == ["accuracy.png", "speedup_vs_eager.png", "vs_cublas_and_quack.png"]
    assert all(p.stat().st_size > 10_000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
    assert plots.caption(META) == ("NVIDIA H200, fused-swiglu 0.1.0, torch 2.11, kernel library 0123456789abcdef, "
                                   "commit abcdef0")
    assert plots.caption({"gpu": "NVIDIA H100"}) == "NVIDIA H100"  # what a file lacks is left out
    assert plots.caption({}) == "no run details (the JSON beside a CSV has them)"
    assert cli.main(["report", str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "speedup_vs_eager.png").is_file()


def test_report_says_what_is_missing(tmp_path, capsys):
    with pytest.raises(ValueError, match="holds none of"):
        plots.report([tmp_path])
    assert cli.main(["report", str(tmp_path / "nowhere.json")]) == 1
    assert capsys.readouterr().err == f"fused-swiglu report: {tmp_path / 'nowhere.json'}: not found\n"
    assert cli.main(["report"]) == 1  # no default: nothing is written over the committed plots
    assert "the following arguments are required: results" in capsys.readouterr().err


def test_report_plots_the_file_bench_wrote_beside_it_by_what_it_holds(tmp_path, capsys):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"meta": {**META, "cuda_graph": False}, "rows": _bench_rows()}))
    acc = tmp_path / "sub" / "acc.json"
    acc.parent.mkdir()
    acc.write_text(json.dumps({"meta": META, "rows": [{"model": "Qwen2.5-0.5B", "method": "eager", "exact": 0.5,
                                                       "max_ulp": 3}]}))
    assert cli.main(["report", str(bench), str(acc)]) == 0
    assert sorted(p.name for p in tmp_path.rglob("*.png")) == ["acc_accuracy.png", "bench_speedup_vs_eager.png",
                                                               "bench_vs_cublas_and_quack.png"]
    assert (tmp_path / "sub" / "acc_accuracy.png").is_file()  # beside its input
    assert cli.main(["report", str(bench), "--out-dir", str(tmp_path / "png")]) == 0
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["bench_speedup_vs_eager.png",
                                                                  "bench_vs_cublas_and_quack.png"]
    sweep = {"meta": META, "rows": [{**r, "method": m} for r in _bench_rows()[:2] for m in ("best_compiled_packed",)]}
    assert plots.kind_of(sweep) == "sweep" and plots.kind_of({"rows": _bench_rows()}) == "bench"


def test_report_into_a_file_exits_1_naming_the_option(tmp_path, capsys):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    assert cli.main(["report", "docs/results/h200", "--out-dir", str(not_a_folder)]) == 1
    err = capsys.readouterr().err
    assert "--out-dir: cannot write the plots" in err and "(it is a file, not a directory)" in err


@pytest.mark.parametrize("body, words", [
    ("{nope", "not a JSON results file"),
    ("[]", "not a results file of fused-swiglu"),
    ("{}", "not a results file of fused-swiglu"),
    ('{"rows": [1, 2]}', "not a results file of fused-swiglu"),
    ('{"meta": [], "rows": []}', "not a results file of fused-swiglu"),
    ('{"rows": [{"model": "m", "tokens": 1, "method": "eager", "median_ms": "x"}, '
     '{"model": "m", "tokens": 1, "method": "fused_packed", "median_ms": 1.0}]}', "lacks a field"),
    ('{"rows": []}', "nothing to plot or print"),
])
def test_report_names_a_malformed_results_file(tmp_path, capsys, body, words):
    (tmp_path / "bench_cuda_graph.json").write_text(body)
    with pytest.raises(ValueError, match=words):
        plots.report([tmp_path], tmp_path / "png")
    assert cli.main(["report", str(tmp_path), "--out-dir", str(tmp_path / "png")]) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err.replace("\n", " ")
    assert "bench_cuda_graph.json" in err


def test_a_file_whose_plots_have_nothing_to_draw_is_printed_as_a_table(tmp_path, capsys):
    rows = [r for r in _bench_rows() if r["method"] in ("fused_packed", "fused_dual")]  # no eager, no cuBLAS
    (tmp_path / "ab.json").write_text(json.dumps({"meta": META, "rows": rows}))
    assert cli.main(["report", str(tmp_path / "ab.json")]) == 0
    out = capsys.readouterr().out
    assert "ab.json: 12 rows" in out and "wrote" not in out and not list(tmp_path.glob("*.png"))
    assert "NVIDIA H200, fused-swiglu 0.1.0" in out  # the file's meta under the table, as under a plot


def test_a_folder_of_other_results_files_reports_each_of_them(tmp_path):
    rows = [{"model": "Qwen2.5-0.5B", "mode": "compiled_decode", "rounds": 10, "ratio_median": 1.01,
             "ratio_min": 0.99, "ratio_max": 1.02}]
    (tmp_path / "e2e_ab_x.json").write_text(json.dumps({"meta": META, "rows": rows}))
    (tmp_path / "notes.json").write_text(json.dumps({"not": "results"}))  # passed over
    shown = plots.report([tmp_path], tmp_path / "png")
    assert shown and all(not hasattr(s, "suffix") or s.parent == tmp_path / "png" for s in shown)
    (tmp_path / "e2e_ab_x.json").unlink()
    with pytest.raises(ValueError, match="holds none of .* and no other results file"):
        plots.report([tmp_path])


def test_a_bench_moe_file_gets_its_time_over_floor_plot_and_table(tmp_path, capsys):
    rows = [{"model": model, "hidden_size": 2048, "intermediate_size": 768, "experts": 128, "top_k": 8,
             "tokens": T, "method": method, "median_ms": 0.1 * T ** 0.5 * k, "p10_ms": 0.1, "p90_ms": 0.2,
             "floor_ms": 0.05, "over_floor": 2.0 * T ** 0.5 * k}
            for model in ("Qwen3-30B-A3B", "Mixtral-8x7B") for T in (1, 16, 256)
            for k, method in ((1.0, "hf_grouped_mm"), (1.5, "fc1_quack_varlen"))]
    (tmp_path / "moe.json").write_text(json.dumps({"meta": META, "rows": rows}))
    assert plots.kind_of({"rows": rows}) == "moe"
    assert cli.main(["report", str(tmp_path / "moe.json")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "moe_over_floor.png").is_file() and "wrote" in out and "Experts forward" in out
    from rich.console import Console

    console = Console(width=100, record=True)  # a terminal of 100 columns: every header whole
    forward, fc1 = plots.tables({"meta": META, "rows": rows}, plotted=True)
    for table in (forward, fc1):
        console.print(table)
    text = console.export_text()
    assert "Experts forward" in text and "Gate/up projection alone" in text and "…" not in text
    assert " 2.00 " in text and " 12.00 " in text  # T = 1 hf_grouped_mm; T = 16 fc1: 2 x 4 x 1.5
    assert "0.0500" in text  # the floor, ms
    assert text.count("Qwen3-30B-A3B") == 6 and "hf_grouped_mm" in text and "quack_varlen" in text
