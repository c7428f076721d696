"""bench.shapes_sweep: the summary of a sweep's rows (CPU)."""

from fused_swiglu.bench import shapes_sweep


def _cell(model, M, **ms):
    base = {"model": model, "hidden_size": 64, "intermediate_size": 64, "tokens": M, "config": ""}
    return [{**base, "method": k, "median_ms": v} for k, v in ms.items()]


def test_summary_counts_cells_against_each_yardstick():
    rows = _cell("a", 1, eager=2.0, cublas_gemm=1.0, fused_packed=1.0, best_compiled_packed=1.0, model_packed=1.2,
                 fused_dual=1.2, best_compiled_dual=1.0, model_dual=1.0, best_compiled=1.0)
    rows += _cell("a", 7, eager=1.0, cublas_gemm=1.0, fused_packed=1.2, best_compiled_packed=1.1, model_packed=1.2,
                  fused_dual=0.9, best_compiled_dual=0.9, model_dual=0.9, best_compiled=0.9)
    s = shapes_sweep.summary(rows)
    assert s["fused_packed"]["cells"] == 2
    assert s["fused_packed"]["over_best_above_limit"] == 1  # 1.2 / 1.1 > 1.05
    assert s["fused_packed"]["below_cublas_limit"] == 1 and s["fused_packed"]["slower_than_eager"] == 1
    assert abs(s["fused_packed"]["worst_vs_cublas"] - 1 / 1.2) < 1e-12
    assert s["model_packed"]["over_best_above_limit"] == 2 and s["fused_dual"]["over_best_above_limit"] == 1
    assert s["model_dual"]["slower_than_eager"] == 0
