"""tools/launch_transfer.py on made-up sweeps: launches grouped by config, the fastest of repeated timings,
cells below --from-m and cells one GPU did not time left out."""

import json
import math

import pytest


def _sweep(path, rows, gpu="GPU A"):
    path.write_text(json.dumps({"meta": {"gpu": gpu}, "rows": [
        {"model": m, "hidden_size": 8, "intermediate_size": 16, "tokens": t, "method": meth, "median_ms": ms}
        for m, t, meth, ms in rows]}))
    return path


def test_ratios_group_launches_by_config_and_skip_what_is_not_shared(load_tool, tmp_path):
    tool = load_tool("launch_transfer")
    a = _sweep(tmp_path / "a.json", [("A", 2048, "cfg@1:1", 2.0), ("A", 2048, "cfg@1:1", 1.5), ("A", 8192, "cfg@2:4", 4.0),
                                    ("A", 1024, "cfg@1:1", 9.0), ("A", 2048, "cublas_gemm", 1.0),
                                    ("B", 2048, "cfg@1:1", 3.0)])
    b = _sweep(tmp_path / "b.json", [("A", 2048, "cfg@1:1", 1.0), ("A", 8192, "cfg@2:4", 4.0), ("A", 1024, "cfg@1:1", 1.0),
                                    ("A", 2048, "cublas_gemm", 2.0)])
    (_, fa), (_, fb) = tool.fastest([a]), tool.fastest([b])
    got = tool.ratios(fa, fb, 2048, by_model=False)
    assert sorted(got[("cfg",)]) == [1.0, 1.5] and got[("cublas_gemm",)] == [0.5]
    by_model = tool.ratios(fa, fb, 1024, by_model=True)
    assert sorted(by_model[("cfg", "A")]) == [1.0, 1.5, 9.0] and ("cfg", "B") not in by_model
    assert math.isclose(min(fa.values()), 1.0)


def test_one_side_of_two_gpus_is_refused(load_tool, tmp_path):
    tool = load_tool("launch_transfer")
    one = _sweep(tmp_path / "a.json", [("A", 2048, "cfg@1:1", 1.0)], gpu="GPU A")
    other = _sweep(tmp_path / "b.json", [("A", 2048, "cfg@1:1", 1.0)], gpu="GPU B")
    with pytest.raises(SystemExit, match="from one GPU"):
        tool.fastest([one, other])
