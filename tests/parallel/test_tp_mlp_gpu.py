"""The tensor-parallel MLP over NCCL with the CUDA kernels against the one-GPU MLP (Qwen2.5-0.5B
dimensions, an awkward M)."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import pack_gate_up, swiglu, swiglu_mlp, swiglu_mlp_packed
from fused_swiglu.accuracy import ulp_distance

from tp_worker import problem

pytestmark = pytest.mark.gpu

H, I, M = 896, 4864, 129


def one_gpu():
    w_gate, w_up, w_down, x = problem(H, I, M, torch.bfloat16, "cuda:0")
    with torch.no_grad():
        return {
            "y": swiglu(x, w_gate, w_up).cpu(),
            "z_dual": swiglu_mlp(x, w_gate, w_up, w_down).cpu(),
            "z_packed": swiglu_mlp_packed(x, pack_gate_up(w_gate, w_up), w_down, layout="interleaved").cpu(),
        }


def test_one_rank_is_the_one_gpu_mlp(run_ranks):
    (rank,) = run_ranks(1, "nccl", H, I, M)
    want = one_gpu()
    assert torch.equal(rank["z_dual"], want["z_dual"])
    assert torch.equal(rank["z_packed"], want["z_packed"])
    assert torch.equal(rank["y_dual"], want["y"])
    assert ulp_distance(rank["z_dual_fp32"], want["z_dual"]).max().item() <= 1
    assert rank["dx"].isfinite().all() and rank["model_blocks"].item() == 2


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_ranks_within_one_ulp(run_ranks):
    ranks = run_ranks(2, "nccl", H, I, M)
    want = one_gpu()
    for name in ("dual", "packed", "concatenated"):
        assert torch.equal(ranks[0][f"z_{name}"], ranks[1][f"z_{name}"]), name
        y = torch.cat([rk[f"y_{name}"] for rk in ranks], dim=-1)
        assert ulp_distance(y, want["y"]).max().item() <= 1, name
    # fp32 partials reduced and rounded once: within 1 ulp of the one-GPU product
    assert ulp_distance(ranks[0]["z_dual_fp32"], want["z_dual"]).max().item() <= 1
    # bf16 partials: one rounding of their sum (one addition on two ranks)
    parts = [rk["partial_dual"].double() for rk in ranks]
    assert torch.equal(ranks[0]["z_dual"], (parts[0] + parts[1]).to(torch.bfloat16))
