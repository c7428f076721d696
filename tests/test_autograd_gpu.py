"""Backward through the CUDA kernels on a Hopper GPU: gradients against float64 autograd of the
reference, no further off than PyTorch's eager autograd. Fresh random inputs; seeds in messages."""

from __future__ import annotations


import pytest
import torch

from fused_swiglu import pack_gate_up, swiglu, swiglu_packed, unpack_gate_up
from fused_swiglu.reference import swiglu_eager, swiglu_float64

# the deprecated layout="concatenated" is still tested until its removal; its warning: test_functional_cpu
pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:swiglu.*layout='concatenated'.*deprecated:FutureWarning")]


def _inputs(lead, H, I, dtype):
    x = torch.randn(*lead, H, device="cuda").to(dtype)
    wg = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    wu = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    dy = torch.randn(*lead, I, device="cuda").to(dtype)
    return x, wg, wu, dy


def _grads(fn, x, wg, wu, dy):
    """(y, dx, dw_gate, dw_up) of fn(x, wg, wu) for output gradient dy."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, wg, wu)]
    y = fn(*leaves)
    y.backward(dy)
    return (y.detach(), *(t.grad for t in leaves))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


PATHS = {
    "dual": lambda x, wg, wu: swiglu(x, wg, wu, kernel="dual", backend="cutlass"),
    "packed": lambda x, wg, wu: swiglu(x, wg, wu, kernel="packed", backend="cutlass"),
    "dual promoted": lambda x, wg, wu: swiglu(x, wg, wu, backend="cutlass", accumulation="promoted"),
    "concatenated": lambda x, wg, wu: swiglu_packed(
        x, torch.cat([wg, wu]), layout="concatenated", backend="cutlass"),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lead", [(129,), (2, 65)], ids=["M129", "3d"])
def test_gradients_match_float64_as_well_as_eager(path, dtype, lead, seed):
    H, I = 896, 4864  # Qwen2.5-0.5B
    x, wg, wu, dy = _inputs(lead, H, I, dtype)
    _, *want = _grads(swiglu_float64, x, wg, wu, dy.double())
    _, *eager = _grads(swiglu_eager, x, wg, wu, dy)
    y, *got = _grads(PATHS[path], x, wg, wu, dy)
    with torch.no_grad():
        assert torch.equal(y, PATHS[path](x, wg, wu)), f"{path}: forward differs with autograd, seed={seed}"
    for name, w, e, g in zip(("dx", "dw_gate", "dw_up"), want, eager, got):
        assert g.dtype == dtype and g.shape == e.shape
        assert _rel(g, w) <= 1.25 * _rel(e, w) + 1e-4, (
            f"{path} {name}: {_rel(g, w):.3e} from float64, eager {_rel(e, w):.3e}, seed={seed}")


def test_prepacked_weight_gradient_is_interleaved(seed):
    H, I = 896, 4864
    x, wg, wu, dy = _inputs((64,), H, I, torch.bfloat16)
    _, want_dx, want_dg, want_du = _grads(swiglu_float64, x, wg, wu, dy.double())
    xp, wp = x.clone().requires_grad_(), pack_gate_up(wg, wu).requires_grad_()
    swiglu_packed(xp, wp, layout="interleaved", backend="cutlass").backward(dy)
    dg, du = unpack_gate_up(wp.grad, layout="interleaved")
    for name, got, want in (("dx", xp.grad, want_dx), ("dw_gate", dg, want_dg), ("dw_up", du, want_du)):
        assert _rel(got, want) < 1e-2, f"{name}: {_rel(got, want):.3e}, seed={seed}"


def test_parameters_under_inference_mode_take_the_direct_path(seed, direct_calls):
    """nn.Parameter weights under inference_mode / no_grad: the op is called below the Autograd key
    (its Python autograd kernel skipped), no graph, same bits as plain tensors."""
    H, I = 896, 4864
    x, wg, wu, _ = _inputs((16,), H, I, torch.bfloat16)
    pg, pu = torch.nn.Parameter(wg), torch.nn.Parameter(wu)
    plain = swiglu(x, wg, wu, backend="cutlass")
    with torch.inference_mode():
        y1 = swiglu(x, pg, pu, backend="cutlass")
    with torch.no_grad():
        y2 = swiglu(x, pg, pu, backend="cutlass")
    assert len(direct_calls) == 3
    assert y1.grad_fn is None and y2.grad_fn is None
    assert torch.equal(y1, plain) and torch.equal(y2, plain)


def test_weight_only_gradients_and_empty_batch(seed):
    H, I = 896, 4864
    x, wg, wu, dy = _inputs((33,), H, I, torch.bfloat16)
    pg, pu = torch.nn.Parameter(wg.clone()), torch.nn.Parameter(wu.clone())
    swiglu(x, pg, pu, backend="cutlass").backward(dy)
    _, _, want_dg, want_du = _grads(swiglu_float64, x, wg, wu, dy.double())
    assert _rel(pg.grad, want_dg) < 1e-2 and _rel(pu.grad, want_du) < 1e-2, f"seed={seed}"

    pg.grad = pu.grad = None
    y = swiglu(x[:0], pg, pu, backend="cutlass")
    assert y.shape == (0, I) and y.requires_grad
    y.sum().backward()
    assert torch.count_nonzero(pg.grad) == 0 and torch.count_nonzero(pu.grad) == 0
    torch.mm(wg, wu.T)  # CUDA still healthy after the empty launch-free call
    torch.cuda.synchronize()


def test_training_step_under_torch_compile_fullgraph(seed):
    H, I = 896, 4864
    x, wg, wu, dy = _inputs((2, 64), H, I, torch.bfloat16)

    def step(x, wg, wu):
        return (swiglu(x, wg, wu, backend="cutlass").float() * dy.float()).sum()

    compiled = torch.compile(step, fullgraph=True)
    results = []
    for fn in (step, compiled):
        leaves = [t.clone().requires_grad_() for t in (x, wg, wu)]
        fn(*leaves).backward()
        results.append([t.grad for t in leaves])
    for name, a, b in zip(("dx", "dw_gate", "dw_up"), *results):
        assert _rel(b, a) < 1e-2, f"compiled {name} differs from eager: {_rel(b, a):.3e}, seed={seed}"
