"""tools/library_ab.py on the CPU: its cells name compiled configs, every family's call runs through this version's
API (the operators' CPU kernels), and the summary's ratio and bar."""

import pytest
import torch

from fused_swiglu import catalog


@pytest.fixture(scope="module")
def ab(load_tool):
    return load_tool("library_ab")


def test_every_named_config_is_compiled(ab):
    compiled = set(catalog.names() + catalog.fp8_names() + catalog.fp8_blockwise_names() + catalog.fp8_dual_names())
    assert ab.config_names() and set(ab.config_names()) <= compiled
    assert set(ab.CELLS) == {"dual", "packed", "fp8_row", "fp8_dual", "fp8_block", "train_step"}
    assert all(set(by_m) == set(ab.TOKENS) for by_m in ab.CELLS.values())


@pytest.mark.parametrize("family", ["dual", "packed", "fp8_row", "fp8_dual", "fp8_block", "train_step"])
def test_each_familys_call_runs_and_computes_swiglu(ab, family):
    torch.manual_seed(0)
    M, H, I = 3, 128, 128
    fn, cublas = ab.make_call(family, ab.CELLS[family][1], M, H, I, torch.device("cpu"))
    out = fn()
    assert cublas().shape == (M, 2 * I)
    if family == "train_step":
        assert [tuple(g.shape) for g in out] == [(M, H), (I, H), (I, H), (H, I)]
        return
    g = torch.Generator(device="cpu").manual_seed(0)  # make_call's operands, again
    x = torch.randn(M, H, generator=g).to(torch.bfloat16).float()
    wg, wu = ((torch.randn(I, H, generator=g) * H**-0.5).to(torch.bfloat16).float() for _ in range(2))
    want = torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)
    y = out[0] if isinstance(out, tuple) else out
    tolerance = 0.15 if family.startswith("fp8") else 0.02  # e4m3 operands
    assert (y.float() - want).norm() <= tolerance * want.norm()


def _run(side, scale, cublas=1.0):
    rows = [{"family": f, "model": "Qwen2.5-7B", "tokens": t, "median_ms": scale * (2.0 if f == "dual" else 1.0),
             "cublas_ms": cublas} for f in ("dual", "packed") for t in (1, 512)]
    return {"meta": {"side": side}, "rows": rows}


def test_the_summary_pairs_rounds_and_cancels_each_processs_clock(ab):
    # round 1: B 0.5 % slower; round 2: B's whole process at a 10 % lower clock (cuBLAS too): the ratio holds
    result = ab.summarize([_run("old", 1.0), _run("new", 1.005), _run("old", 1.0), _run("new", 1.1 * 1.005, 1.1)])
    assert result["meta"]["a"] == "old" and result["meta"]["b"] == "new"
    assert all(r["b_over_a"] == pytest.approx(1.005) and r["within"] and r["rounds"] == 2 for r in result["rows"])
    assert result["families"]["dual"]["geomean"] == pytest.approx(1.005) and result["families"]["dual"]["within"] == 2
    slower = ab.summarize([_run("old", 1.0), _run("new", 1.02)])
    assert not any(r["within"] for r in slower["rows"])
    with pytest.raises(ValueError, match="two sides"):
        ab.summarize([_run("old", 1.0), _run("new", 1.0), _run("other", 1.0)])
    with pytest.raises(ValueError, match="same number of files"):
        ab.summarize([_run("old", 1.0), _run("new", 1.0), _run("new", 1.0)])
