"""Backward of the ops (fused_swiglu.autograd) on the CPU: the formulas against float64 autograd of
the reference, and the registration through the ops' CPU kernels. Fresh random inputs every run."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import autograd, ops, pack_gate_up, unpack_gate_up
from fused_swiglu.reference import swiglu_eager, swiglu_float64

SHAPES = [(1, 8, 16), (5, 24, 40), (33, 64, 32)]  # (M, I, H); I a multiple of 8 for the packed layout


def _inputs(M, I, H, dtype=torch.float64, scale=1.0):
    x = torch.randn(M, H, dtype=torch.float64) * scale
    wg = torch.randn(I, H, dtype=torch.float64) * H**-0.5
    wu = torch.randn(I, H, dtype=torch.float64) * H**-0.5
    dy = torch.randn(M, I, dtype=torch.float64)
    return [t.to(dtype) for t in (x, wg, wu, dy)]


def _float64_grads(x, wg, wu, dy):
    """(dx, dw_gate, dw_up) of swiglu_float64 by autograd, in float64."""
    leaves = [t.detach().double().requires_grad_() for t in (x, wg, wu)]
    swiglu_float64(*leaves).backward(dy.double())
    return [t.grad for t in leaves]


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("M,I,H", SHAPES)
def test_dual_backward_is_the_derivative(M, I, H):
    x, wg, wu, dy = _inputs(M, I, H, scale=3.0)  # |g| up to ~10: both tails of sigmoid
    got = autograd.dual_backward(dy, x, wg, wu, (True, True, True))
    for name, a, b in zip(("dx", "dw_gate", "dw_up"), got, _float64_grads(x, wg, wu, dy)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("M,I,H", SHAPES)
def test_packed_backward_is_the_derivative_in_the_interleaved_layout(M, I, H):
    x, wg, wu, dy = _inputs(M, I, H, scale=3.0)
    dx, dw_packed = autograd.packed_backward(dy, x, pack_gate_up(wg, wu), (True, True))
    want_dx, want_dg, want_du = _float64_grads(x, wg, wu, dy)
    torch.testing.assert_close(dx, want_dx, rtol=1e-12, atol=1e-12)
    dg, du = unpack_gate_up(dw_packed, layout="interleaved")
    torch.testing.assert_close(dg, want_dg, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(du, want_du, rtol=1e-12, atol=1e-12)


def test_only_the_needed_gradients_are_computed():
    x, wg, wu, dy = _inputs(4, 16, 24)
    dx, dg, du = autograd.dual_backward(dy, x, wg, wu, (False, True, False))
    assert dx is None and du is None and dg.shape == wg.shape
    assert autograd.dual_backward(dy, x, wg, wu, (False, False, False)) == (None, None, None)
    dx, dwp = autograd.packed_backward(dy, x, pack_gate_up(wg, wu), (True, False))
    assert dwp is None and dx.shape == x.shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ops_backward_is_as_close_to_float64_as_eager_autograd(dtype):
    """Through the registered ops (CPU kernels): gradients of 16-bit inputs, compared with the
    float64 gradients, are no further off than PyTorch's eager autograd of the same inputs."""
    x, wg, wu, dy = _inputs(48, 64, 96, dtype)
    want = _float64_grads(x, wg, wu, dy)

    leaves = [t.clone().requires_grad_() for t in (x, wg, wu)]
    swiglu_eager(*leaves).backward(dy)
    eager = [t.grad for t in leaves]

    leaves = [t.clone().requires_grad_() for t in (x, wg, wu)]
    ops.swiglu_dual(*leaves, "").backward(dy)
    dual = [t.grad for t in leaves]

    xp, wp = x.clone().requires_grad_(), pack_gate_up(wg, wu).requires_grad_()
    ops.swiglu_packed(xp, wp, "").backward(dy)
    packed = [xp.grad, *unpack_gate_up(wp.grad, layout="interleaved")]

    for name, w, e, d, p in zip(("dx", "dw_gate", "dw_up"), want, eager, dual, packed):
        assert d.dtype == dtype and p.dtype == dtype
        bound = 1.25 * _rel(e, w) + 1e-3
        assert _rel(d, w) <= bound, f"dual {name}: {_rel(d, w):.2e} vs eager {_rel(e, w):.2e}"
        assert _rel(p, w) <= bound, f"packed {name}: {_rel(p, w):.2e} vs eager {_rel(e, w):.2e}"


def test_empty_batch_gives_zero_weight_gradients():
    x = torch.randn(0, 32, dtype=torch.bfloat16, requires_grad=True)
    wg = torch.randn(16, 32, dtype=torch.bfloat16, requires_grad=True)
    wu = torch.randn(16, 32, dtype=torch.bfloat16, requires_grad=True)
    y = ops.swiglu_dual(x, wg, wu, "")
    assert y.shape == (0, 16)
    y.sum().backward()
    assert x.grad.shape == (0, 32)
    assert torch.count_nonzero(wg.grad) == 0 and torch.count_nonzero(wu.grad) == 0


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
def test_opcheck_with_gradients(contiguous):
    """torch.library.opcheck, including its autograd-registration and AOT-dispatch checks."""
    x = torch.randn(21, 2 * 64, dtype=torch.bfloat16)
    x = x[:, :64] if contiguous else x[:, ::2]
    wg = (torch.randn(32, 64) * 0.125).to(torch.bfloat16)
    wu = (torch.randn(32, 64) * 0.125).to(torch.bfloat16)
    args = [t.clone().requires_grad_() for t in (x, wg, wu)]
    torch.library.opcheck(torch.ops.fused_swiglu.swiglu_dual.default, (*args, ""))
    xp, wp = x.clone().requires_grad_(), pack_gate_up(wg, wu).requires_grad_()
    torch.library.opcheck(torch.ops.fused_swiglu.swiglu_packed.default, (xp, wp, ""))


@pytest.mark.parametrize("op", ["dual", "packed"])
def test_backward_under_torch_compile_matches_eager(op):
    x, wg, wu, dy = _inputs(8, 16, 32, torch.bfloat16)
    if op == "dual":
        weights = (wg, wu)
        fn = ops.swiglu_dual
    else:
        weights = (pack_gate_up(wg, wu),)
        fn = ops.swiglu_packed

    def loss(x, *w):
        return (fn(x, *w, "").float() * dy.float()).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    grads = []
    for f in (loss, compiled):
        leaves = [t.clone().requires_grad_() for t in (x, *weights)]
        f(*leaves).backward()
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["dual", "packed"])
def test_second_derivatives(op):
    """create_graph=True: the backward is itself differentiable (a gradient penalty, say)."""
    x, wg, wu, _ = _inputs(6, 16, 24, torch.float64)
    want = []
    for fn in (swiglu_float64, "op"):
        leaves = [t.clone().requires_grad_() for t in (x, wg, wu)]
        if fn == "op" and op == "dual":
            y = ops.swiglu_dual(*leaves, "")
        elif fn == "op":
            y = ops.swiglu_packed(leaves[0], pack_gate_up(leaves[1], leaves[2]), "")
        else:
            y = fn(*leaves)
        (gx,) = torch.autograd.grad(y.square().sum(), leaves[0], create_graph=True)
        gx.square().sum().backward()
        want.append([t.grad for t in leaves])
    # the ops' CPU kernels round the forward to fp32 precision: compare at that level
    for a, b in zip(*want):
        assert _rel(b, a) < 1e-5, _rel(b, a)
