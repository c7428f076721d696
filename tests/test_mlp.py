"""fused_swiglu.swiglu_mlp / swiglu_mlp_packed on the CPU: argument errors and the PyTorch fallback."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from fused_swiglu import pack_gate_up, swiglu_mlp, swiglu_mlp_packed
from fused_swiglu.reference import swiglu_fp32_one_rounding


def _args(dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g).to(dtype) for s in ((2, 3, 16), (24, 16), (24, 16), (16, 24))]


def test_torch_backend_is_the_fallback_and_differentiable():
    x, wg, wu, wd = _args()
    wd.requires_grad_()
    z = swiglu_mlp(x, wg, wu, wd, backend="torch")
    assert z.shape == (2, 3, 16) and z.dtype == torch.bfloat16
    assert torch.equal(z, F.linear(swiglu_fp32_one_rounding(x, wg, wu), wd))
    z.float().sum().backward()
    assert wd.grad.shape == wd.shape
    zp = swiglu_mlp_packed(x, pack_gate_up(wg, wu), wd, layout="interleaved", backend="torch")
    assert torch.equal(zp, z)


def test_auto_on_cpu_warns_and_falls_back():
    x, wg, wu, wd = _args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = swiglu_mlp(x, wg, wu, wd)
    assert torch.equal(z, swiglu_mlp(x, wg, wu, wd, backend="torch"))


@pytest.mark.parametrize("change, error, match", [
    (lambda a: a.__setitem__(3, a[3].T.contiguous()), ValueError, r"w_down must be 2-D \(H, I\) = \(16, 24\)"),
    (lambda a: a.__setitem__(3, a[3].half()), TypeError, "w_down must have the same dtype as x"),
    (lambda a: a.__setitem__(3, [1.0]), TypeError, "w_down must be a torch.Tensor"),
    (lambda a: a.__setitem__(1, a[1][:8]), ValueError, "w_gate and w_up must have the same shape"),
])
def test_bad_arguments_are_named(change, error, match):
    args = _args()
    change(args)
    with pytest.raises(error, match=match):
        swiglu_mlp(*args, backend="torch")


def test_recompute_must_be_a_bool_and_layout_is_checked():
    x, wg, wu, wd = _args()
    with pytest.raises(TypeError, match="recompute must be a bool"):
        swiglu_mlp(x, wg, wu, wd, recompute="yes", backend="torch")
    with pytest.raises(ValueError, match="layout must be one of"):
        swiglu_mlp_packed(x, torch.cat([wg, wu]), wd, layout="rows", backend="torch")


def test_cutlass_on_cpu_is_refused():
    with pytest.raises(RuntimeError, match="backend='cutlass' cannot run"):
        swiglu_mlp(*_args(), backend="cutlass")
