"""The whole-MLP operators on the CPU (their CPU kernels stand in for the CUDA ones): the autograd
formulas by gradcheck in float64, the fake kernels, mixed requires_grad, create_graph and a
compiled training step."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import mlp_ops, pack_gate_up
from fused_swiglu.reference import swiglu_float64


def _leaves(M=5, H=16, I=24, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_() for s in ((M, H), (I, H), (I, H), (H, I))]


def test_dual_forward_values_and_gradcheck():
    x, wg, wu, wd = _leaves()
    z, y, gu = mlp_ops.mlp_forward(x, wg, wu, wd)
    assert torch.equal(y, swiglu_float64(x, wg, wu)) and torch.equal(gu, torch.cat([x @ wg.T, x @ wu.T], 1))
    assert torch.allclose(z, y @ wd.T) and not y.requires_grad and not gu.requires_grad
    assert torch.autograd.gradcheck(lambda *a: mlp_ops.mlp_forward(*a)[0], (x, wg, wu, wd))


def test_eager_function_is_the_operator():
    x, wg, wu, wd = _leaves()
    assert torch.autograd.gradcheck(mlp_ops.mlp, (x, wg, wu, wd))
    assert torch.equal(mlp_ops.mlp(x, wg, wu, wd), mlp_ops.mlp_forward(x, wg, wu, wd)[0])
    wp = pack_gate_up(wg.detach(), wu.detach()).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, d: mlp_ops.mlp_packed(x, w, d, "interleaved"), (x, wp, wd))


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_packed_gradcheck_in_the_weight_layout(layout):
    x, wg, wu, wd = _leaves()
    wp = (pack_gate_up(wg.detach(), wu.detach()) if layout == "interleaved" else torch.cat([wg, wu]).detach())
    wp.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, d: mlp_ops.mlp_forward_packed(x, w, d, layout)[0], (x, wp, wd))
    z = mlp_ops.mlp_forward_packed(x, wp, wd, layout)[0]
    assert torch.allclose(z, mlp_ops.mlp_forward(x, wg, wu, wd)[0])


def test_packed_refuses_an_unknown_layout():
    x, wg, wu, wd = _leaves()
    with pytest.raises(ValueError, match="layout must be one of"):
        mlp_ops.mlp_forward_packed(x, torch.cat([wg, wu]), wd, "rows")


def test_dswiglu_is_the_swiglu_gradient():
    dz, _, _, wd = _leaves()
    gu = torch.randn(5, 48, dtype=torch.float64, requires_grad=True)
    g, u = gu[:, :24], gu[:, 24:]
    (torch.nn.functional.silu(g) * u).backward(dz @ wd)
    assert torch.allclose(mlp_ops.dswiglu(dz, wd, gu.detach()), gu.grad)


@pytest.mark.parametrize("needs", [(True, False, False, False), (False, True, True, True), (False, True, False, False),
                                   (False, False, True, False), (False, False, False, True)])
def test_only_the_needed_gradients(needs):
    full = _leaves()
    mlp_ops.mlp_forward(*full)[0].sum().backward()
    part = [t.detach().requires_grad_(n) for t, n in zip(full, needs)]
    mlp_ops.mlp_forward(*part)[0].sum().backward()
    for t, n, f in zip(part, needs, full):
        assert (t.grad is not None) == n and (not n or torch.allclose(t.grad, f.grad))


def test_create_graph_is_refused_by_name():
    x, wg, wu, wd = _leaves()
    z = mlp_ops.mlp_forward(x, wg, wu, wd)[0]
    with pytest.raises(RuntimeError, match="create_graph=True.*recompute=True"):
        torch.autograd.grad(z.sum(), x, create_graph=True)


def test_fake_kernels_give_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, wg, wd = torch.empty(7, 64), torch.empty(96, 64), torch.empty(64, 96)
        z, y, gu = mlp_ops.mlp_forward(x, wg, wg, wd)
        assert (z.shape, y.shape, gu.shape) == ((7, 64), (7, 96), (7, 192))
        assert mlp_ops.mlp_forward_packed(x, torch.empty(192, 64), wd, "interleaved")[2].shape == (7, 192)
        assert mlp_ops.dswiglu(z, wd, gu).shape == (7, 192)


def test_opcheck():
    x, wg, wu, wd = (t.detach().to(torch.float32) for t in _leaves())
    torch.library.opcheck(mlp_ops.mlp_forward, (x, wg, wu, wd))
    torch.library.opcheck(mlp_ops.dswiglu, (x, wd, torch.randn(5, 48)))


def test_compiled_training_step_matches_eager():
    leaves = _leaves(dtype=torch.float32)

    def step(*a):
        return mlp_ops.mlp_forward(*a)[0].square().sum()

    step(*leaves).backward()
    want = [t.grad for t in leaves]
    again = [t.detach().requires_grad_() for t in leaves]
    torch.compile(step, fullgraph=True, backend="aot_eager")(*again).backward()
    for t, w in zip(again, want):
        assert torch.allclose(t.grad, w, rtol=1e-5, atol=1e-5)


def _bad_forward_calls():
    x, wg, wu, wd = (t.detach() for t in _leaves())
    wp = pack_gate_up(wg, wu)
    M, H = x.shape
    I = wg.shape[0]
    gu = torch.zeros(M, 2 * I, dtype=x.dtype)
    return [
        (mlp_ops.mlp_forward, (x, wg, wu, wd[:, :8]), ValueError, r"mlp_forward: w_down must be 2-D \(16, 24\)"),
        (mlp_ops.mlp_forward, (x, wg, wu[:16], wd), ValueError, r"mlp_forward: w_up must be 2-D \(24, 16\)"),
        (mlp_ops.mlp_forward, (x[:, :8], wg, wu, wd), ValueError, r"mlp_forward: w_gate must be 2-D \(\?, 8\)"),
        (mlp_ops.mlp_forward, (x[0], wg, wu, wd), ValueError, r"mlp_forward: x must be 2-D \(\?, \?\)"),
        (mlp_ops.mlp_forward, (x, wg.float(), wu, wd), TypeError, "w_gate must be a floating-point tensor of x's dtype"),
        (mlp_ops.mlp_forward_packed, (x, wp[:40], wd, "interleaved"), ValueError,
         r"mlp_forward_packed: w_packed must be 2-D \(48, 16\)"),
        (mlp_ops.mlp_forward_packed, (x, wp, wd, "stacked"), ValueError, "layout must be one of"),
        (mlp_ops.dswiglu, (x, wd, gu[:, :40]), ValueError, r"dswiglu: gu must be 2-D \(5, 48\)"),
        (mlp_ops.dswiglu, (x, wd.T, gu), ValueError, r"dswiglu: w_down must be 2-D \(16, \?\)"),
        (mlp_ops.dswiglu, (x.long(), wd, gu), TypeError, "dz must be a floating-point tensor"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_forward_calls())))
def test_the_operators_check_their_own_operands(case):
    """A direct call of an operator (not through swiglu_mlp) cannot reach a kernel with operands whose
    shapes disagree: the op and its fake kernel both refuse, naming the operand and the shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op, args, error, message = _bad_forward_calls()[case]
    with pytest.raises(error, match=message):
        op(*args)
    with FakeTensorMode() as mode, pytest.raises(error, match=message):
        op(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
