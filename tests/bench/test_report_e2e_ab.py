"""``fused-swiglu report`` on a ``bench e2e-ab`` results file: a table of its rows, the per-round ratios'
median, minimum and maximum and each variant's time (CPU, no plot)."""

import json
import shutil
from pathlib import Path

import pytest

from fused_swiglu import cli
from fused_swiglu.bench import plots

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "results" / "h100" / "e2e_compiled_decode_ab.json"
COLUMNS = ("model", "mode", "rounds", "ratio_median", "ratio_min", "ratio_max", "stock_ms", "fused_ms")
LISTS = ("ratios", "stock_samples_ms", "fused_samples_ms")


def _row(model: str, ratios: list[float]) -> dict:
    stock = [2.0 * r for r in ratios]
    return {"model": model, "mode": "compiled_decode", "rounds": len(ratios), "ratio_median": sorted(ratios)[1],
            "ratio_min": min(ratios), "ratio_max": max(ratios), "stock_ms": sorted(stock)[1], "fused_ms": 2.0,
            "ratios": ratios, "stock_samples_ms": stock, "fused_samples_ms": [2.0] * len(ratios),
            "repeats_per_round": 5, "graphs_compiled_while_timed": {"stock": 0, "fused": 0},
            "prepare_s": {"stock": 30.0, "fused": 31.0}, "elapsed_s": 40.0}


def _table(out: str) -> tuple[list[str], list[dict]]:
    """The column names and rows (name -> text) of the one table in ``out``; a row's cells that rich
    wrapped onto further lines joined by spaces."""
    def cells(line: str, bar: str) -> list[str]:
        return [c.strip() for c in line.strip().strip(bar).split(bar)]

    header, *lines = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    names = cells(header, "┃")
    rows: list[list[str]] = []
    for line in lines:
        found = cells(line, "│")
        if found[0] or not rows:
            rows.append(found)
        else:  # a continuation of the row above
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], found)]
    return names, [dict(zip(names, r)) for r in rows]


@pytest.mark.skipif(not COMMITTED.is_file(), reason=f"{COMMITTED.name} is not in this checkout")
def test_report_tabulates_the_committed_e2e_ab_file(tmp_path, capsys):
    path = tmp_path / COMMITTED.name
    shutil.copy(COMMITTED, path)
    rows = json.loads(path.read_text())["rows"]
    assert plots.kind_of({"rows": rows}) == "rows"  # printed whole, no plot
    assert cli.main(["report", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and not list(tmp_path.glob("*.png"))
    assert f"{COMMITTED.name}: {len(rows)} rows" in out
    names, body = _table(out)
    assert names[:len(COLUMNS)] == list(COLUMNS)
    assert len(body) == len(rows)
    for cells, row in zip(body, rows):
        assert [cells["model"], cells["mode"], cells["rounds"]] == [row["model"], row["mode"], str(row["rounds"])]
        for col in COLUMNS[3:]:
            assert float(cells[col]) == pytest.approx(row[col], rel=1e-3), (row["model"], col)
    assert f"not shown: {', '.join(LISTS)}" in out  # the list fields are named, not printed


def test_report_tabulates_an_e2e_ab_file_with_a_failed_pair(tmp_path, capsys):
    failed = {"model": "Llama-3-8B", "mode": "prefill", "rounds": 0, "ratio_median": None, "ratio_min": None,
              "ratio_max": None, "error": "the patched worker failed:\nTraceback ...\nRuntimeError: CUDA error: out "
                                          "of memory", "elapsed_s": 12.0}
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"meta": {"kind": "e2e_ab", "gpu": "NVIDIA H100 80GB HBM3"},
                                "rows": [_row("Qwen2.5-0.5B", [1.01, 0.99, 1.02]), failed]}))
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    names, (ok, bad) = _table(out)
    assert names[:len(COLUMNS)] == list(COLUMNS) and "error" in names
    assert (ok["ratio_median"], ok["ratio_min"], ok["ratio_max"], ok["fused_ms"]) == ("1.01", "0.99", "1.02", "2")
    assert bad["model"] == "Llama-3-8B" and bad["rounds"] == "0"
    assert bad["ratio_median"] == bad["ratio_min"] == bad["ratio_max"] == bad["stock_ms"] == "-"
    assert "CUDA error: out of memory" in bad["error"]
    assert "NVIDIA H100 80GB HBM3" in out


def test_report_tabulates_a_backend_against_patched_file(tmp_path, capsys):
    """A run of --variants backend patched: the times in backend_ms and fused_ms, the pair named."""
    from fused_swiglu.bench import e2e_ab

    opts = e2e_ab.ABOptions(models=["Qwen2.5-0.5B"], modes=["compiled_decode"], variants=["backend", "patched"],
                            rounds=3)
    row = e2e_ab.pair_row("Qwen2.5-0.5B", "compiled_decode", opts,
                          times={"backend": [1.8, 2.0, 2.2], "patched": [2.0, 2.0, 2.0]},
                          graphs={"backend": [4, 4, 4], "patched": [4, 4, 4]},
                          info={"backend": {"prepare_s": 30.0, "fused_mlps": 24}, "patched": {"prepare_s": 31.0}})
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"meta": {"kind": "e2e_ab"}, "rows": [row]}))
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    names, (cells,) = _table(out)
    assert names[:len(COLUMNS)] == [*COLUMNS[:6], "backend_ms", "fused_ms"]
    assert (cells["ratio_median"], cells["ratio_min"], cells["ratio_max"]) == ("1", "0.9", "1.1")
    assert (cells["backend_ms"], cells["fused_ms"]) == ("2", "2")
    assert (cells["variant_a"], cells["variant_b"], cells["backend_fused_mlps"]) == ("backend", "patched", "24")
    assert "not shown: ratios, backend_samples_ms, fused_samples_ms" in out
