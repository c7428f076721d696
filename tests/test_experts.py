"""fused_swiglu.experts on the CPU (the grouped operator's PyTorch kernel): the routing against a loop, the
experts forward and routed_swiglu against float64 (empty experts, one expert taking every token, T = 1, 3,
127, 129, 4097; every token tile of the layout), torch.compile(fullgraph=True) under new routing without
recompiling, the gradients (gradcheck in float64; bf16 and fp32 against float64) and the argument checks."""

from __future__ import annotations

import pytest
import torch

from experts_common import check_experts, check_gradients, experts_weights, routing
from fused_swiglu import experts, grouped, routing_ops
from fused_swiglu.accuracy import ulp_at
from fused_swiglu.reference import swiglu_float64

H, I = 32, 24


def _route_by_loop(index: torch.Tensor, E: int):
    """(order, token, offsets) one expert at a time: each expert's pairs in (token, slot) order."""
    T, k = index.shape
    flat = index.reshape(-1).tolist()
    order = [p for e in range(E) for p, pe in enumerate(flat) if pe == e]
    ends, n = [], 0
    for e in range(E):
        n += flat.count(e)
        ends.append(n)
    return order, [p // k for p in order], ends


ROUTINGS = {  # name: (T, E, k, routing keywords)
    "T=1": (1, 8, 2, {}),
    "T=3": (3, 8, 2, {}),
    "T=127": (127, 16, 4, {}),
    "T=129": (129, 16, 4, {}),
    "one expert takes every token": (129, 8, 1, {"expert": 5}),
    "empty experts (two of 32 used)": (40, 32, 2, {"experts": (3, 30)}),
    "top-8 of 128 at decode": (1, 128, 8, {}),
    "T=4097 (128-row token tiles)": (4097, 8, 2, {}),
}
# the layout's token tile each routing takes (fused_swiglu.configs.grouped.grouped_token_tile): every tile is covered
TILES = {"T=1": 16, "T=127": 64, "one expert takes every token": 64, "T=4097 (128-row token tiles)": 128}


@pytest.mark.parametrize("name", sorted(ROUTINGS))
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_the_routing_sorts_the_pairs_by_expert_stably_with_int32_end_offsets(name, index_dtype):
    T, E, k, kw = ROUTINGS[name]
    _, index, _ = routing(T, E, k, H, torch.bfloat16, **kw)
    index = index.to(index_dtype)
    r = experts.route_experts(index, E)
    order, token, ends = _route_by_loop(index, E)
    assert r.order.dtype == torch.int64 and r.token.dtype == torch.int64 and r.expert_offsets.dtype == torch.int32
    assert r.order.tolist() == order and r.token.tolist() == token and r.expert_offsets.tolist() == ends


def test_the_sort_places_ids_past_the_last_expert_in_none():
    """What an unchecked id does where it is not checked (CUDA): past the last offset, no expert's."""
    index = torch.tensor([[0, 9], [2, 0]])  # 9 >= E = 3
    order, offsets = routing_ops.sort_pairs(index, 3)
    assert offsets.tolist() == [2, 2, 3] and order.tolist() == [0, 3, 2, 1]


def test_the_sort_takes_ids_below_0_as_expert_0_s_in_pair_order():
    index = torch.tensor([[0, 2], [-4, 1], [0, -1]])  # pairs 2 and 5 below 0: expert 0's, after pair 0
    order, offsets = routing_ops.sort_pairs(index, 3)
    assert offsets.tolist() == [4, 5, 6] and order.tolist() == [0, 2, 4, 5, 3, 1]


@pytest.mark.parametrize("bad", [9, 3, -1])
def test_an_expert_id_outside_the_experts_is_refused_on_the_cpu(bad):
    E, H, I, T = 3, 16, 8, 4
    index = torch.tensor([[0, 1], [2, bad], [1, 0], [2, 2]])
    x, w, down = torch.randn(T, H), torch.randn(E, 2 * I, H), torch.randn(E, H, I)
    says = rf"top_k_index must hold expert ids in \[0, 3\) \({{}}\); got ids from {min(bad, 0)} to {max(bad, 2)}"
    with pytest.raises(ValueError, match="route_experts: " + says.format("the experts argument")):
        experts.route_experts(index, E)
    for call, op in ((lambda: experts.routed_swiglu(x, index, w), "routed_swiglu"),
                     (lambda: experts.swiglu_experts(x, index, torch.ones(T, 2), w, down), "swiglu_experts")):
        with pytest.raises(ValueError, match=f"{op}: " + says.format(r"E = gate_up_proj.shape\[0\]")):
            call()
    rows = grouped.padded_rows(index.numel(), E, 16)
    with pytest.raises(ValueError, match=r"fused_swiglu::moe_layout: " + says.format("the experts argument")):
        routing_ops.moe_layout(index, E, 16, rows)


def test_the_routing_names_the_argument_and_the_rule():
    index = torch.zeros(3, 2, dtype=torch.int64)
    cases = [
        ((index.float(), 4), TypeError, "route_experts: top_k_index must be torch.int64 or torch.int32"),
        ((index[0], 4), ValueError, r"top_k_index must be 2-D \(T, k\) with k >= 1 experts per token; got shape \(2,\)"),
        ((index[:, :0], 4), ValueError, r"with k >= 1 experts per token; got shape \(3, 0\)"),
        ((index, 0), ValueError, "experts must be >= 1; got experts=0"),
        ((index, 4.0), TypeError, "experts must be an int"),
        (([[0, 1]], 4), TypeError, "top_k_index must be a dense"),
    ]
    for args, error, says in cases:
        with pytest.raises(error, match=says):
            experts.route_experts(*args)


def test_the_routings_cover_every_token_tile():
    from fused_swiglu import configs

    for name, tile in TILES.items():
        T, E, k, _ = ROUTINGS[name]
        assert configs.grouped.grouped_token_tile(T * k, E)[0] == tile, name
    assert set(TILES.values()) == set(configs.grouped.GROUPED_TOKEN_TILES)


@pytest.mark.parametrize("name", sorted(ROUTINGS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_the_experts_forward_matches_float64(name, dtype):
    T, E, k, kw = ROUTINGS[name]
    gate_up, down = experts_weights(E, H, I, dtype)
    x, index, weights = routing(T, E, k, H, dtype, **kw)
    out = experts.swiglu_experts(x, index, weights, gate_up, down)
    assert out.is_contiguous()
    check_experts(out, x, index, weights, gate_up, down, f"{name} {dtype}")


@pytest.mark.parametrize("weights_dtype", [torch.bfloat16, torch.float32])
def test_the_weighted_sum_promotes_as_transformers_grouped_mm_does(weights_dtype):
    """bf16 routing weights: bf16 products summed; fp32 ones (Mixtral's, DeepSeek-V3's routers): fp32, rounded
    once at the end. Both against the unfused forward at float64's distance."""
    gate_up, down = experts_weights(8, H, I, torch.bfloat16)
    x, index, weights = routing(33, 8, 2, H, torch.bfloat16, weights_dtype=weights_dtype)
    check_experts(experts.swiglu_experts(x, index, weights, gate_up, down), x, index, weights, gate_up, down)


def test_a_token_may_pick_one_expert_twice_and_the_order_of_its_slots_does_not_matter():
    gate_up, down = experts_weights(4, H, I, torch.float64)
    x, _, weights = routing(5, 4, 3, H, torch.float64)
    index = torch.tensor([[1, 1, 3], [0, 2, 3], [3, 2, 0], [2, 2, 2], [0, 1, 2]])
    out = experts.swiglu_experts(x, index, weights, gate_up, down)
    check_experts(out, x, index, weights, gate_up, down)
    flipped = experts.swiglu_experts(x, index.flip(1), weights.flip(1), gate_up, down)
    torch.testing.assert_close(flipped, out, rtol=1e-13, atol=1e-13)


def test_no_tokens():
    gate_up, down = experts_weights(4, H, I, torch.bfloat16)
    x, index, weights = routing(0, 4, 2, H, torch.bfloat16)
    out = experts.swiglu_experts(x, index, weights, gate_up, down)
    assert out.shape == (0, H) and out.dtype == torch.bfloat16
    y, r = experts.routed_swiglu(x, index, gate_up)
    assert y.shape == (0, I) and r.expert_offsets.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("name", ["T=3", "T=129", "one expert takes every token", "empty experts (two of 32 used)",
                                  "T=4097 (128-row token tiles)"])
def test_routed_swiglu_is_each_sorted_pair_s_swiglu(name):
    T, E, k, kw = ROUTINGS[name]
    gate_up, _ = experts_weights(E, H, I, torch.bfloat16)
    x, index, _ = routing(T, E, k, H, torch.bfloat16, **kw)
    y, r = experts.routed_swiglu(x, index, gate_up)
    assert y.shape == (T * k, I) and y.dtype == torch.bfloat16 and y.is_contiguous()
    assert torch.equal(r.order, experts.route_experts(index, E).order)
    expert_of_row = index.reshape(-1)[r.order]
    for e in torch.unique(expert_of_row).tolist():
        rows = (expert_of_row == e).nonzero().squeeze(1)
        ref = swiglu_float64(x[r.token[rows]], gate_up[e, :I], gate_up[e, I:])
        # the row of each pair is its expert's SwiGLU: within 2 ulp (fp32 products; a cancellation leaves a
        # rare element past 1 ulp, one of 196,608 at T = 4097; the accuracy bar is the GPU tests')
        assert ((y[rows].double() - ref).abs() <= 2 * ulp_at(ref, torch.bfloat16)).all(), (name, e)


def test_routed_swiglu_and_a_grouped_down_projection_make_the_experts_forward():
    """What a serving engine does with routed_swiglu: its own grouped down projection and weighted sum."""
    gate_up, down = experts_weights(8, H, I, torch.bfloat16)
    x, index, weights = routing(19, 8, 2, H, torch.bfloat16)
    y, r = experts.routed_swiglu(x, index, gate_up)
    rows = torch._grouped_mm(y, down.transpose(1, 2), offs=r.expert_offsets)
    out = torch.zeros(19, 2, H, dtype=torch.bfloat16)
    out.view(-1, H)[r.order] = rows
    mine = (out * weights.unsqueeze(-1)).sum(1).to(torch.bfloat16)
    assert torch.equal(mine, experts.swiglu_experts(x, index, weights, gate_up, down))


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_fullgraph_compile_traces_it_and_new_routing_needs_no_recompilation(dtype, fresh_dynamo):
    gate_up, down = experts_weights(8, H, I, dtype)
    x, index, weights = routing(13, 8, 2, H, dtype, seed=1)
    compiled = torch.compile(experts.swiglu_experts, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x, index, weights, gate_up, down), experts.swiglu_experts(x, index, weights, gate_up, down))
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed, kw in ((2, {}), (3, {"expert": 7}), (4, {"experts": (0, 1)})):  # the routing's values, same sizes
            x, index, weights = routing(13, 8, 2, H, dtype, seed=seed, **kw)
            assert torch.equal(compiled(x, index, weights, gate_up, down),
                               experts.swiglu_experts(x, index, weights, gate_up, down)), seed


def test_routed_swiglu_traces_under_fullgraph_compile(fresh_dynamo):
    gate_up, _ = experts_weights(8, H, I, torch.bfloat16)
    x, index, _ = routing(13, 8, 2, H, torch.bfloat16)
    compiled = torch.compile(experts.routed_swiglu, backend="aot_eager", fullgraph=True)
    (y, r), (y0, r0) = compiled(x, index, gate_up), experts.routed_swiglu(x, index, gate_up)
    assert torch.equal(y, y0) and all(torch.equal(a, b) for a, b in zip(r, r0))


def test_gradcheck_in_float64():
    """Every gradient of the experts forward and of routed_swiglu against finite differences (gradcheck's fast
    mode: along random directions; an expert with no token included)."""
    gate_up, down = experts_weights(4, 8, 8, torch.float64)
    x, index, weights = routing(5, 4, 2, 8, torch.float64, experts=(0, 2, 3), weights_dtype=torch.float64)
    args = [t.clone().requires_grad_() for t in (x, weights, gate_up, down)]
    assert torch.autograd.gradcheck(lambda x, w, gu, d: experts.swiglu_experts(x, index, w, gu, d), args,
                                    fast_mode=True)
    assert torch.autograd.gradcheck(lambda x, gu: experts.routed_swiglu(x, index, gu)[0], (args[0], args[2]),
                                    fast_mode=True)


@pytest.mark.parametrize("name", ["T=129", "one expert takes every token", "empty experts (two of 32 used)",
                                  "T=4097 (128-row token tiles)"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gradients_match_float64(name, dtype):
    T, E, k, kw = ROUTINGS[name]
    gate_up, down = experts_weights(E, H, I, dtype)
    x, index, weights = routing(T, E, k, H, dtype, **kw)
    check_gradients(x, index, weights, gate_up, down, f"{name} {dtype}")


def test_without_grad_mode_nothing_is_recorded():
    gate_up, down = experts_weights(4, H, I, torch.bfloat16)
    x, index, weights = routing(5, 4, 2, H, torch.bfloat16)
    gate_up.requires_grad_()
    with torch.no_grad():
        out = experts.swiglu_experts(x, index, weights, gate_up, down)
    assert out.grad_fn is None
    with torch.inference_mode():
        assert torch.equal(experts.swiglu_experts(x, index, weights, gate_up, down), out)


def test_bad_arguments_name_the_argument_and_the_rule():
    gate_up, down = experts_weights(4, H, I, torch.bfloat16)
    x, index, weights = routing(5, 4, 2, H, torch.bfloat16)
    cases = [
        ((x.int(), index, weights, gate_up, down), TypeError, "swiglu_experts: hidden_states must be a floating-point"),
        ((x[None], index, weights, gate_up, down), ValueError, r"hidden_states must be 2-D \(T, H\)"),
        ((x[:, :16], index, weights, gate_up, down), ValueError, "hidden_states must have H = gate_up_proj.shape"),
        ((x, index, weights, gate_up.half(), down), TypeError, "gate_up_proj must have hidden_states' dtype"),
        ((x, index, weights, gate_up[:, :47], down), ValueError, "an even number of rows per expert"),
        ((x, index.float(), weights, gate_up, down), TypeError, "top_k_index must be torch.int64 or torch.int32"),
        ((x, index[:4], weights, gate_up, down), ValueError,
         r"top_k_index must have one row per token, T = hidden_states.shape\[0\] = 5; got shape \(4, 2\)"),
        ((x, index.to("meta"), weights, gate_up, down), ValueError, "top_k_index must be on hidden_states' device"),
        ((x, index, weights.long(), gate_up, down), TypeError, "top_k_weights must be a floating-point tensor"),
        ((x, index, weights.to(torch.float8_e5m2), gate_up, down), TypeError,
         "top_k_weights must be a floating-point tensor of 16 bits or more"),
        ((x.to(torch.float8_e4m3fn), index, weights, gate_up.to(torch.float8_e4m3fn), down.to(torch.float8_e4m3fn)),
         TypeError, "hidden_states must be a floating-point tensor of 16 bits or more"),
        ((x, index, weights[:, :1], gate_up, down), ValueError,
         r"top_k_weights must have top_k_index's shape \(T, k\) = \(5, 2\); got shape \(5, 1\)"),
        ((x, index, weights.to("meta"), gate_up, down), ValueError, "top_k_weights must be on hidden_states' device"),
        ((x, index, weights, gate_up, down.half()), TypeError, "down_proj must have hidden_states' dtype"),
        ((x, index, weights, gate_up, down.to("meta")), ValueError, "down_proj must be on hidden_states' device"),
        ((x, index, weights, gate_up, down.transpose(1, 2)), ValueError,
         r"down_proj must be \(E, H, I\) = \(4, 32, 24\) for gate_up_proj of shape \(4, 48, 32\); got shape \(4, 24, 32\)"),
        ((x, index, weights, gate_up, down[:3]), ValueError, r"down_proj must be \(E, H, I\) = \(4, 32, 24\)"),
        ((x, index, weights, gate_up, "down"), TypeError, "down_proj must be a dense"),
        ((x.to("meta"), index.to("meta"), weights.to("meta"), gate_up.to("meta"), down.to("meta")), ValueError,
         "hidden_states must be on a CUDA device .* or the CPU; got meta"),
    ]
    for args, error, says in cases:
        with pytest.raises(error, match=says):
            experts.swiglu_experts(*args)
    with pytest.raises(ValueError, match="config must name a grouped kernel .* got config='fast'"):
        experts.swiglu_experts(x, index, weights, gate_up, down, config="fast")
    with pytest.raises(ValueError, match=r"routed_swiglu: top_k_index must be 2-D \(T, k\)"):
        experts.routed_swiglu(x, index[:, 0], gate_up)
