"""fused_swiglu.experts on a Hopper GPU: the experts forward against float64 at mixture-of-experts shapes
(T = 1, 3, 127, 129 tokens), empty experts, one expert taking every token, fp16, the routing on the device, a
captured CUDA graph replayed under new routing, torch.compile(fullgraph=True), and the gradients against
float64 (both layouts: the routing kernel's and, past its pair bound, the sort's)."""

from __future__ import annotations

import functools

import pytest
import torch

from experts_common import check_experts, check_gradients, experts_weights, routing
from fused_swiglu import experts

pytestmark = pytest.mark.gpu

# (hidden size H, expert intermediate size I, experts E, top-k k) of the routed experts
SHAPES = {
    "Qwen3-30B-A3B": (2048, 768, 128, 8),
    "DeepSeek-V3": (7168, 2048, 256, 8),
    "Mixtral-8x7B": (4096, 14336, 8, 2),
}
TOKENS = (1, 3, 127, 129)


@functools.lru_cache(maxsize=1)  # one shape's weights at a time (DeepSeek-V3's take 22 GB in 16 bits)
def _weights(shape: str, dtype: torch.dtype):
    H, I, E, _ = SHAPES[shape]
    return experts_weights(E, H, I, dtype, device="cuda", seed=1)


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_float64(shape, T, seed):
    H, I, E, k = SHAPES[shape]
    gate_up, down = _weights(shape, torch.bfloat16)
    x, index, weights = routing(T, E, k, H, torch.bfloat16, device="cuda", seed=seed)
    out = experts.swiglu_experts(x, index, weights, gate_up, down)
    check_experts(out, x, index, weights, gate_up, down, f"{shape} T={T} seed={seed}")


@pytest.mark.parametrize("expert", [0, 7])
def test_one_expert_takes_every_token(expert, seed):
    H, I, E, _ = SHAPES["Mixtral-8x7B"]
    gate_up, down = _weights("Mixtral-8x7B", torch.bfloat16)
    x, index, weights = routing(1029, E, 1, H, torch.bfloat16, device="cuda", seed=seed, expert=expert)
    check_experts(experts.swiglu_experts(x, index, weights, gate_up, down), x, index, weights, gate_up, down,
                  f"every token to expert {expert} seed={seed}")


def test_empty_experts_and_no_tokens(seed):
    H, I, E, k = SHAPES["Qwen3-30B-A3B"]
    gate_up, down = _weights("Qwen3-30B-A3B", torch.bfloat16)
    x, index, weights = routing(67, E, 4, H, torch.bfloat16, device="cuda", seed=seed, experts=(0, 5, 6, 127))
    check_experts(experts.swiglu_experts(x, index, weights, gate_up, down), x, index, weights, gate_up, down,
                  f"four of 128 experts seed={seed}")
    assert experts.swiglu_experts(x[:0], index[:0], weights[:0], gate_up, down).shape == (0, H)


@pytest.mark.parametrize("T", (1, 129))
def test_fp16(T, seed):
    H, I, E, k = SHAPES["Qwen3-30B-A3B"]
    gate_up, down = _weights("Qwen3-30B-A3B", torch.float16)
    x, index, weights = routing(T, E, k, H, torch.float16, device="cuda", seed=seed)
    check_experts(experts.swiglu_experts(x, index, weights, gate_up, down), x, index, weights, gate_up, down,
                  f"fp16 T={T} seed={seed}")


def test_the_routing_on_the_device_is_the_cpu_s(seed):
    _, _, E, k = SHAPES["Qwen3-30B-A3B"]
    _, index, _ = routing(4097, E, k, 8, torch.bfloat16, device="cuda", seed=seed)
    on_gpu, on_cpu = experts.route_experts(index, E), experts.route_experts(index.cpu(), E)
    for a, b in zip(on_gpu, on_cpu):
        assert a.is_cuda and torch.equal(a.cpu(), b)


def test_cuda_graph_replays_under_new_routing(seed):
    H, I, E, k = SHAPES["Qwen3-30B-A3B"]
    gate_up, down = _weights("Qwen3-30B-A3B", torch.bfloat16)
    T = 64
    x, index, weights = routing(T, E, k, H, torch.bfloat16, device="cuda", seed=seed)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        experts.swiglu_experts(x, index, weights, gate_up, down)  # warm-up: loads the libraries, makes the plans
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = experts.swiglu_experts(x, index, weights, gate_up, down)
    for step, kw in enumerate(({}, {"expert": 3}, {"experts": (1, 2, 3, 4, 5, 6, 7, 8, 9)})):
        new = routing(T, E, k, H, torch.bfloat16, device="cuda", seed=seed + 1 + step, **kw)
        for buffer, value in zip((x, index, weights), new):
            buffer.copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, experts.swiglu_experts(x, index, weights, gate_up, down)), f"replay {step}"
        check_experts(out, x, index, weights, gate_up, down, f"graph replay {step} seed={seed}")


def test_torch_compile_fullgraph(seed):
    H, I, E, k = SHAPES["Qwen3-30B-A3B"]
    gate_up, down = _weights("Qwen3-30B-A3B", torch.bfloat16)
    compiled = torch.compile(experts.swiglu_experts, fullgraph=True)
    for step in range(2):  # new routing, same sizes
        x, index, weights = routing(40, E, k, H, torch.bfloat16, device="cuda", seed=seed + step)
        check_experts(compiled(x, index, weights, gate_up, down), x, index, weights, gate_up, down,
                      f"compiled, routing {step} seed={seed}")


def test_the_checks_on_cuda_name_the_argument_and_the_rule():
    gate_up, down = experts_weights(4, 64, 32, torch.bfloat16, device="cuda")
    x, index, weights = routing(5, 4, 2, 64, torch.bfloat16, device="cuda")
    cases = [
        ((x.float(), index, weights, gate_up.float(), down.float()), TypeError,
         "hidden_states must be torch.bfloat16 or torch.float16 on CUDA"),
        ((x, index, weights, gate_up, down.transpose(1, 2).contiguous().transpose(1, 2)), ValueError,
         r"down_proj must have unit stride along I .*; got strides \(2048, 1, 64\)"),
        ((x, index.cpu(), weights, gate_up, down), ValueError, "top_k_index must be on hidden_states' device cuda"),
        ((x[:, :60], index, weights, gate_up[:, :, :60], down[:, :60]), ValueError,
         "H must be a positive multiple of 8"),
    ]
    for args, error, says in cases:
        with pytest.raises(error, match=says):
            experts.swiglu_experts(*args)


@pytest.mark.parametrize("T", (1, 129, 4097))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gradients_match_float64(T, dtype, seed):
    """Qwen3-30B-A3B's expert sizes over 16 experts (the float64 reference loops over them); 4097 tokens x 8
    experts is past the routing kernel's pair bound (the sort's layout)."""
    H, I, _, k = SHAPES["Qwen3-30B-A3B"]
    gate_up, down = experts_weights(16, H, I, dtype, device="cuda", seed=seed)
    x, index, weights = routing(T, 16, k, H, dtype, device="cuda", seed=seed)
    check_gradients(x, index, weights, gate_up, down, f"T={T} {dtype} seed={seed}", seed=seed)
