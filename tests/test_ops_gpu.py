"""The operators' C++ CUDA kernels on a Hopper GPU: the C boundary's checks, TMA-ready copies, the
launch-plan cache, every output element written, autograd, torch.compile and CUDA-graph capture
through the same registered operator."""

from __future__ import annotations


import pytest
import torch

from fused_swiglu import _lib, configs, ops, pack_gate_up
from numerics import assert_matches_float64

pytestmark = pytest.mark.gpu


def _inputs(M, H=896, I=4864, dtype=torch.bfloat16):
    x = torch.randn(M, H, device="cuda").to(dtype)
    wg = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    wu = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    return x, wg, wu


def _poison_next_allocation(M, I, dtype):
    """Leave a NaN-filled block of the output's size in the caching allocator, so the operator's
    fresh output most likely starts as NaN: an element the kernel does not write stays NaN."""
    torch.full((M, I), float("nan"), device="cuda", dtype=dtype)
    torch.cuda.synchronize()


@pytest.mark.parametrize("M", [1, 3, 127, 129, 4097])
def test_both_operators_write_every_element(M, seed):
    x, wg, wu = _inputs(M)
    _poison_next_allocation(M, 4864, torch.bfloat16)
    y = ops.swiglu_dual(x, wg, wu, "")
    assert not y.isnan().any(), f"unwritten elements, dual M={M} seed={seed}"
    assert_matches_float64(y, x, wg, wu, f"dual M={M} seed={seed}")
    w_packed = pack_gate_up(wg, wu)
    _poison_next_allocation(M, 4864, torch.bfloat16)
    y = ops.swiglu_packed(x, w_packed, "")
    assert not y.isnan().any(), f"unwritten elements, packed M={M} seed={seed}"
    assert_matches_float64(y, x, wg, wu, f"packed M={M} seed={seed}")


def test_the_c_boundary_names_the_argument_and_the_rule():
    x, wg, wu = _inputs(4, 64, 64)
    cases = [
        ((x.float(), wg.float(), wu.float()), "x must be torch.bfloat16 or torch.float16"),
        ((x, wg.half(), wu), "w_gate must have x's dtype"),
        ((x, wg.cpu(), wu), "w_gate must be a CUDA tensor"),
        ((x, wg[:32], wu), "w_gate and w_up must have the same shape"),
        ((x[:, :32], wg, wu), "x must be \\(M, H\\) with H = w_gate.shape\\[1\\] = 64; got H=32"),
        ((x[0], wg, wu), "x must be 2-D"),
        ((x, wg[:60], wu[:60]), "I must be a multiple of 8 for 16-byte TMA rows; got I=60"),
    ]
    for args, says in cases:
        with pytest.raises(RuntimeError, match=says):
            ops.swiglu_dual(*args, "")
    with pytest.raises(RuntimeError, match="w_packed must have an even number of rows"):
        ops.swiglu_packed(x, torch.cat([wg, wu])[:127], "")
    with pytest.raises(RuntimeError, match="ValueError: config must name a dual kernel"):
        ops.swiglu_dual(x, wg, wu, "packed_pingpong_64x128x64_1x1_bf16")


def test_operands_that_break_the_tma_rules_are_copied(seed):
    buf = torch.randn(40, 1808, device="cuda").to(torch.bfloat16)
    _, wg, wu = _inputs(1)
    cases = {
        "misaligned x": (buf[:, 1:897], wg),  # start 2 bytes past a 16-byte boundary
        "column-strided x": (buf[:, :1792:2], wg),  # column stride 2
        "column-major w_gate": (buf[:, :896], wg.t().contiguous().t()),  # strides (1, I)
        "row stride 900": (buf.flatten()[:4 * 900].as_strided((4, 896), (900, 1)), wg),  # not a multiple of 8
        "one row, strides (1, 3)": (buf.flatten()[:3 * 896].view(896, 3).t()[:1], wg),
    }
    for what, (x, w_gate) in cases.items():
        assert_matches_float64(ops.swiglu_dual(x, w_gate, wu, ""), x, w_gate, wu, f"{what} seed={seed}")


def test_a_plan_is_made_once_per_problem(seed):
    x, wg, wu = _inputs(23, H=256, I=136)  # a shape no other test uses
    ops.swiglu_dual(x, wg, wu, "")
    before = _lib.num_plans()
    ops.swiglu_dual(x, wg, wu, "")
    assert _lib.num_plans() == before  # a warm call asks the table nothing
    ops.swiglu_dual(x[:17], wg, wu, "")
    ops.swiglu_dual(x, wg, wu, "promoted")
    assert _lib.num_plans() == before + 2
    _lib.clear_plans()
    assert _lib.num_plans() == 0
    assert_matches_float64(ops.swiglu_dual(x, wg, wu, ""), x, wg, wu, f"after clear_plans seed={seed}")


def test_a_changed_config_override_drops_the_plans_made_before_it(seed, monkeypatch):
    x, wg, wu = _inputs(29, H=256, I=136)  # a shape no other test uses
    monkeypatch.delenv("FUSED_SWIGLU_CONFIG", raising=False)
    ops.swiglu_dual(x, wg, wu, "")
    ops.swiglu_dual(x[:5], wg, wu, "")
    assert _lib.num_plans() >= 2
    forced = "dual_pingpong_64x64x64_1x1_bf16"
    try:
        configs.set_config_override(forced)
        assert _lib.num_plans() == 0  # the plans made before are dropped
        assert_matches_float64(ops.swiglu_dual(x, wg, wu, ""), x, wg, wu, f"forced config seed={seed}")
        assert _lib.num_plans() == 1 and _lib.library().is_loaded(forced)
        assert configs.explain("dual", "", 29, 136, 256, torch.bfloat16)[1] == "fused_swiglu.configs.set_config_override names it"
    finally:
        configs.set_config_override(None)
    assert _lib.num_plans() == 0
    ops.swiglu_dual(x, wg, wu, "")
    assert _lib.num_plans() == 1


def test_zero_tokens_return_an_empty_result():
    _, wg, wu = _inputs(1)
    x = torch.empty(0, 896, device="cuda", dtype=torch.bfloat16)
    assert ops.swiglu_dual(x, wg, wu, "").shape == (0, 4864)
    assert ops.swiglu_packed(x, pack_gate_up(wg, wu), "").shape == (0, 4864)


def test_autograd_compile_and_graph_capture_run_the_same_operator(seed):
    x, wg, wu = _inputs(33)
    eager = ops.swiglu_dual(x, wg, wu, "")
    # autograd: the registered backward
    xg = x.clone().requires_grad_()
    ops.swiglu_dual(xg, wg, wu, "").float().sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape
    # torch.compile: the fake kernel traces, the C++ kernel runs
    compiled = torch.compile(lambda a, b, c: ops.swiglu_dual(a, b, c, "") * 2, fullgraph=True)
    assert torch.equal(compiled(x, wg, wu), eager * 2)
    # CUDA-graph capture and replay on fresh inputs
    static_x = x.clone()
    ops.swiglu_dual(static_x, wg, wu, "")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.swiglu_dual(static_x, wg, wu, "")
    fresh = torch.randn_like(static_x)
    static_x.copy_(fresh)
    graph.replay()
    assert torch.equal(out, ops.swiglu_dual(fresh, wg, wu, ""))
