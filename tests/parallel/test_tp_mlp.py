"""The tensor-parallel MLP on CPU processes (gloo, PyTorch fallback) against the unsharded MLP."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from fused_swiglu.accuracy import ulp_distance
from fused_swiglu.reference import swiglu_fp32_one_rounding

from tp_worker import problem

H, I, M = 64, 96, 5  # I / t a multiple of 8 for t = 2 and 4


def reference(x, w_gate, w_up, w_down, grad_of=None):
    """The unsharded MLP's y and z (and, with grad_of = dz, the gradients) by the PyTorch fallback."""
    leaves = [t.clone().requires_grad_(grad_of is not None) for t in (x, w_gate, w_up, w_down)]
    y = swiglu_fp32_one_rounding(*leaves[:3])
    z = F.linear(y, leaves[3])
    grads = None
    if grad_of is not None:
        z.backward(grad_of)
        grads = [t.grad for t in leaves]
    return y.detach(), z.detach(), grads


def sum_in_fp64(parts):
    return torch.stack([p.double() for p in parts]).sum(0)


@pytest.mark.parametrize("world_size", [2, 4])
def test_tp_mlp_equals_unsharded(run_ranks, world_size):
    ranks = run_ranks(world_size, "gloo", H, I, M)
    w_gate, w_up, w_down, x = problem(H, I, M, torch.bfloat16, "cpu")
    y, z, _ = reference(x, w_gate, w_up, w_down)
    for name in ("dual", "packed", "dual_fp32", "concatenated"):
        # every rank returns the same full z
        for r in range(1, world_size):
            assert torch.equal(ranks[r][f"z_{name}"], ranks[0][f"z_{name}"]), (name, r)
        # the shards' up-projection columns, concatenated, are the unsharded y
        assert torch.equal(torch.cat([rk[f"y_{name}"] for rk in ranks], dim=-1), y), name
    # the reduce in fp32: one rounding of the fp32 sum, so at most 1 ulp from the unsharded z
    assert ulp_distance(ranks[0]["z_dual_fp32"], z).max().item() <= 1
    # the reduce in bf16: the ranks' rounded partials summed with one rounding per addition
    for name in ("dual", "packed", "concatenated"):
        parts = [rk[f"partial_{name}"] for rk in ranks]
        exact = sum_in_fp64(parts)
        got = ranks[0][f"z_{name}"]
        if world_size == 2:  # one addition: the correctly rounded sum of the two partials
            assert torch.equal(got, exact.to(torch.bfloat16)), name
        else:
            bound = (world_size - 1) * exact.abs().add(sum_in_fp64([p.abs() for p in parts])).to(torch.bfloat16)
            ulp = torch.finfo(torch.bfloat16).eps
            assert ((got.double() - exact).abs() <= bound.double() * ulp).all(), name


@pytest.mark.parametrize("world_size", [2])
def test_tp_mlp_gradients_and_model(run_ranks, world_size):
    ranks = run_ranks(world_size, "gloo", H, I, M)
    w_gate, w_up, w_down, x = problem(H, I, M, torch.bfloat16, "cpu")
    dz = x.flip(0)
    _, _, (dx, dw_gate, dw_up, dw_down) = reference(x, w_gate, w_up, w_down, grad_of=dz)
    n = I // world_size
    for r, rk in enumerate(ranks):
        cols = slice(r * n, (r + 1) * n)
        # the shards' gradients are the unsharded gradients' rows and columns
        torch.testing.assert_close(rk["dw_gate"], dw_gate[cols])
        torch.testing.assert_close(rk["dw_up"], dw_up[cols])
        torch.testing.assert_close(rk["dw_down"], dw_down[:, cols])
        # x's gradient is the all-reduced sum of the ranks' rounded partials: near elements that
        # cancel, off by up to one ulp of the largest element
        torch.testing.assert_close(rk["dx"], dx, rtol=1.6e-2, atol=dx.abs().max().item() * 2 ** -8)
        assert torch.equal(rk["dx"], ranks[0]["dx"])
        # both blocks of the model replaced, each rank keeping 1 / t of the MLP weights
        assert rk["model_blocks"].item() == 2
        assert rk["model_params"].item() == 2 * 3 * n * H
    # the model: block 2 has gate and up swapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = F.linear(swiglu_fp32_one_rounding(x, w_gate, w_up), w_down)
        want = F.linear(swiglu_fp32_one_rounding(h, w_up, w_gate), w_down)
    torch.testing.assert_close(ranks[0]["z_model"], want, rtol=2e-2, atol=2e-2)
