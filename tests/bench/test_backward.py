"""bench --backward: the training-step calls, rows and options (CPU); a short run on the GPU."""

import json
import warnings

import pytest
import torch

from fused_swiglu import cli, pack_gate_up
from fused_swiglu.bench import backward, timing
from fused_swiglu.bench.shapes import MlpShape


def test_every_method_computes_the_same_gradients_on_cpu():
    M, H, I = 5, 64, 48
    sets = backward.make_sets(M, H, I, torch.bfloat16, torch.device("cpu"), l2_bytes=1)
    assert len(sets) == 1 and sets[0].w_down.shape == (H, I) and sets[0].dz.shape == (M, H)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the PyTorch fallback's one warning off a GPU
        grads = {m: fns[0]() for m, fns in backward.step_calls(sets, list(backward.METHODS)).items()}
    # bf16: the fallback's forward rounds y once where eager also rounds g, u and silu(g), so the
    # gradients agree to bf16 rounding, not bit for bit (norm-wise: a wrong gradient is off by O(1))
    def check(got, want, name):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        err = (got.float() - want.float()).norm() / want.float().norm()
        assert err < 0.02, (name, err.item())

    dx, dwg, dwu, dwd = grads["eager"]
    for name, got, want in zip(("dx", "dw_gate", "dw_up", "dw_down"), grads["fused_dual"], (dx, dwg, dwu, dwd)):
        check(got, want, f"dual {name}")
    for name, got, want in zip(("dx", "dw_gate", "dw_up", "dw_down"), grads["recompute_dual"], (dx, dwg, dwu, dwd)):
        check(got, want, f"recompute {name}")
    for name, got, want in zip(("dx", "dw_gate", "dw_up", "dw_down"), grads["compiled"], (dx, dwg, dwu, dwd)):
        check(got, want, f"compiled {name}")
    dx_p, dwp, dwd_p = grads["fused_packed"]
    check(dx_p, dx, "packed dx")
    check(dwd_p, dwd, "packed dw_down")
    check(dwp, pack_gate_up(dwg, dwu), "packed dw_packed")


def test_rows_carry_eager_over_the_method():
    shape = MlpShape("s", 64, 48)
    t = {"eager": timing.Timing(2.0, 1.9, 2.1, 5), "fused_packed": timing.Timing(1.6, 1.5, 1.7, 5)}
    rows = backward.rows_of(shape, 7, t)
    assert [r["method"] for r in rows] == ["eager", "fused_packed"]
    assert rows[1]["eager_over"] == pytest.approx(1.25) and rows[0]["eager_over"] == pytest.approx(1.0)
    assert set(rows[0]) | set(timing.GRID_FIELDS) == set(backward.FIELDS)  # time_grid adds those
    assert backward.rows_of(shape, 7, {"fused_packed": t["fused_packed"]})[0]["eager_over"] is None


@pytest.mark.parametrize("argv, needle", [
    (["--quick"], "unrecognized arguments: --quick"),
    (["--config", "packed_pingpong_128x192x64_2x1_bf16"], "unrecognized arguments: --config"),
    (["--methods", "eager,fused_mystery"], "unknown method 'fused_mystery'"),
    (["--e2e"], "separate runs"),
    (["--rep", "0"], "--rep must be a positive integer"),
    (["--tokens", "0"], "--tokens"),
])
def test_bad_options_name_the_option(argv, needle, capsys):
    assert cli.main(["bench", "--backward", *argv]) == 1
    assert needle in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_a_short_run_on_the_gpu(tmp_path, cuda_graph):
    from rich.console import Console

    out = tmp_path / "backward.json"
    rows = backward.run_backward([MlpShape("tiny", 256, 512)], [64], ["eager", "fused_dual", "fused_packed"],
                                 torch.bfloat16, Console(quiet=True), out=out, reps=3, warmup_ms=1.0,
                                 cuda_graph=cuda_graph)
    assert [r["method"] for r in rows] == ["eager", "fused_dual", "fused_packed"]
    assert all(r["median_ms"] > 0 for r in rows)
    data = json.loads(out.read_text())
    assert data["meta"]["gpu"] and data["rows"] == rows and out.with_suffix(".csv").is_file()
