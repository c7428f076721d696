"""The custom ops under fake tensors and opcheck (CPU registrations stand in for the kernels)."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fused_swiglu.ops  # noqa: F401  (registers the ops)
from fused_swiglu import pack_gate_up
from fused_swiglu.reference import swiglu_fp32_one_rounding


def test_fake_shapes_and_strides():
    with FakeTensorMode():
        x = torch.empty(21, 896, dtype=torch.bfloat16)
        wp = torch.empty(2 * 4864, 896, dtype=torch.bfloat16)
        y = torch.ops.fused_swiglu.swiglu_packed(x, wp, "")
        assert y.shape == (21, 4864) and y.stride() == (4864, 1) and y.dtype == torch.bfloat16
        wg = torch.empty(4864, 896, dtype=torch.float16)
        y = torch.ops.fused_swiglu.swiglu_dual(x.half(), wg, wg, "")
        assert y.shape == (21, 4864) and y.stride() == (4864, 1) and y.dtype == torch.float16
        # non-contiguous x still gives a contiguous output
        xt = torch.empty(896, 21, dtype=torch.bfloat16).t()
        y = torch.ops.fused_swiglu.swiglu_packed(xt, wp, "")
        assert y.stride() == (4864, 1)


def _args(contiguous):
    x = torch.randn(21, 64, dtype=torch.bfloat16)
    if not contiguous:
        x = torch.randn(64, 21, dtype=torch.bfloat16).t()
    wg = (torch.randn(32, 64) / 8).to(torch.bfloat16)
    wu = (torch.randn(32, 64) / 8).to(torch.bfloat16)
    return x, wg, wu


@pytest.mark.parametrize("contiguous", [True, False])
def test_opcheck_cpu(contiguous):
    x, wg, wu = _args(contiguous)
    torch.library.opcheck(torch.ops.fused_swiglu.swiglu_dual.default, (x, wg, wu, ""))
    torch.library.opcheck(torch.ops.fused_swiglu.swiglu_packed.default, (x, pack_gate_up(wg, wu), ""))


def test_cpu_registrations_match_reference():
    x, wg, wu = _args(True)
    expected = swiglu_fp32_one_rounding(x, wg, wu)
    assert torch.equal(torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, ""), expected)
    assert torch.equal(torch.ops.fused_swiglu.swiglu_packed(x, pack_gate_up(wg, wu), ""), expected)


def test_gradcheck_holds_on_the_raw_cpu_ops_in_float64():
    x = torch.randn(5, 16, dtype=torch.float64, requires_grad=True)
    wg = (torch.randn(8, 16, dtype=torch.float64) / 4).requires_grad_()
    wu = (torch.randn(8, 16, dtype=torch.float64) / 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda *t: torch.ops.fused_swiglu.swiglu_dual(*t, ""), (x, wg, wu))
    wp = pack_gate_up(wg.detach(), wu.detach()).requires_grad_()
    assert torch.autograd.gradcheck(lambda *t: torch.ops.fused_swiglu.swiglu_packed(*t, ""), (x, wp))


def test_ops_trace_under_torch_compile_fullgraph():
    x, wg, wu = _args(True)
    wp = pack_gate_up(wg, wu)

    def f(x):
        return torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "") + torch.ops.fused_swiglu.swiglu_packed(x, wp, "")

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), f(x))


@pytest.mark.parametrize("fake", [False, True])
def test_the_ops_check_their_operands_on_cpu_and_under_fake_tensors(fake):
    """Called directly through the dispatcher, the ops refuse what the public functions refuse, and
    their fake implementation agrees with the real one (no shape it would report for a 3-D x)."""
    def run():
        x, wg, wu = _args(True)
        wp = pack_gate_up(wg, wu)
        with pytest.raises(ValueError, match=r"fused_swiglu::swiglu_dual: x must be 2-D \(M, H\); got x of shape "
                                             r"\(1, 21, 64\)"):
            torch.ops.fused_swiglu.swiglu_dual(x[None], wg, wu, "")
        with pytest.raises(ValueError, match=r"fused_swiglu::swiglu_packed: x must be 2-D"):
            torch.ops.fused_swiglu.swiglu_packed(x[None], wp, "")
        with pytest.raises(TypeError, match=r"fused_swiglu::swiglu_dual: x must be a floating-point tensor; "
                                            r"got x.dtype=torch.int32"):
            torch.ops.fused_swiglu.swiglu_dual(x.to(torch.int32), wg, wu, "")
        with pytest.raises(TypeError, match=r"fused_swiglu::swiglu_packed: w_packed must have x's dtype "
                                            r"torch.bfloat16; got w_packed.dtype=torch.float16"):
            torch.ops.fused_swiglu.swiglu_packed(x, wp.half(), "")
        with pytest.raises(ValueError, match=r"w_gate and w_up must have the same shape"):
            torch.ops.fused_swiglu.swiglu_dual(x, wg, wu[:16], "")
        with pytest.raises(ValueError, match=r"w_packed must have an even number of rows"):
            torch.ops.fused_swiglu.swiglu_packed(x, wp[:-1], "")
        with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., H\)"):
            torch.ops.fused_swiglu.swiglu_dual(x[:, :32], wg, wu, "")
        with pytest.raises(ValueError, match=r"config must name a dual kernel for torch.bfloat16 .*; "
                                             r"got config='promote'"):
            torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "promote")
        with pytest.raises(ValueError, match=r"config must name a packed kernel .*got config='dual_pingpong"):
            torch.ops.fused_swiglu.swiglu_packed(x, wp, "dual_pingpong_128x128x64_1x2_bf16")
        torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "promoted")  # accepted
        torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "dual_pingpong_128x128x64_1x2_bf16")  # accepted
    if fake:
        with FakeTensorMode():
            run()
    else:
        run()


def test_operands_on_another_device_than_x_are_refused():
    x, wg, wu = _args(True)
    with pytest.raises(ValueError, match="w_gate must be on x's device meta; got w_gate on cpu"):
        torch.ops.fused_swiglu.swiglu_dual(x.to("meta"), wg, wu.to("meta"), "")
    with pytest.raises(ValueError, match="w_packed must be on x's device meta"):
        torch.ops.fused_swiglu.swiglu_packed(x.to("meta"), pack_gate_up(wg, wu), "")
