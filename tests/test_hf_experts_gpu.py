"""transformers' experts through the fused forward on a Hopper GPU: tiny random Qwen3-MoE and Mixtral models
in bf16, greedy tokens against stock (transformers' default experts, batched_mm while decoding) for 16 tokens of
a prompt whose stock tokens no rounding decides, with the experts patch and with experts_implementation=
"fused_swiglu", the fused forward running through every decoding step, logits against transformers' eager
experts, an MoE block captured in a CUDA graph and replayed under new routing, and torch.compile(fullgraph=True)
of a block."""

from __future__ import annotations

import warnings

import pytest
import torch

from experts_common import decisive_prompt
from fused_swiglu import fuse_swiglu_mlps, hf_experts, unfuse_swiglu_mlps
from fused_swiglu.patch import experts as experts_body

pytestmark = pytest.mark.gpu

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=512, head_dim=64)
MODELS = {
    "Qwen3-MoE": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(moe_intermediate_size=128, num_experts=16,
                                                                   num_experts_per_tok=4)),
    "Mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=8, num_experts_per_tok=2,
                                                              intermediate_size=384)),
}


@pytest.fixture(scope="module", autouse=True)
def registered():
    return hf_experts.register_experts_implementation()


def _model(name: str):
    config_cls, model_cls, sizes = MODELS[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**{**SMALL, **sizes})
    return getattr(transformers, model_cls)(config).to("cuda", torch.bfloat16).eval()


def _counting(monkeypatch) -> list:
    """The fused calls of both ways in: the experts patch (fused_swiglu.patch.experts) and the experts
    implementation (fused_swiglu.hf_experts), each looking swiglu_experts up in its own module."""
    calls = []
    real = experts_body.swiglu_experts
    counted = lambda *a, **k: calls.append(1) or real(*a, **k)  # noqa: E731
    monkeypatch.setattr(experts_body, "swiglu_experts", counted)
    monkeypatch.setattr(hf_experts, "swiglu_experts", counted)
    return calls


@pytest.mark.parametrize("name", sorted(MODELS))
def test_greedy_tokens_match_stock_for_16_tokens(name, monkeypatch):
    model = _model(name)
    ids, stock = decisive_prompt(model)  # grouped_mm for the prompt, batched_mm while decoding
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=16, min_new_tokens=16, do_sample=False)
    fuse_swiglu_mlps(model)
    calls = _counting(monkeypatch)
    patched = model.generate(ids, **kw)
    assert len(calls) == 2 * 16  # both layers, the prompt and every decoding step: fused under batched_mm
    unfuse_swiglu_mlps(model)
    model.set_experts_implementation("fused_swiglu")
    by_name = model.generate(ids, **kw)
    assert len(calls) == 2 * 16 * 2  # "fused_swiglu" stays selected while decoding
    assert stock.shape == (1, 22) and torch.equal(patched, stock) and torch.equal(by_name, stock)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_logits_match_transformers_eager_experts(name):
    model = _model(name)
    ids = torch.randint(0, 512, (3, 33), device="cuda")
    with torch.no_grad():
        model.set_experts_implementation("eager")
        want = model(ids).logits.float()
        model.set_experts_implementation("fused_swiglu")
        got = model(ids).logits.float()
    torch.testing.assert_close(got, want, rtol=0.02, atol=0.02 * want.abs().max().item())


def test_a_moe_block_captured_in_a_cuda_graph_replays_under_new_routing():
    model = _model("Qwen3-MoE")
    fuse_swiglu_mlps(model)
    block = model.model.layers[0].mlp
    x = torch.randn(4, 1, 256, device="cuda", dtype=torch.bfloat16)  # a decoding step of four sequences
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            block(x)  # warm-up: loads the libraries, makes the plans
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = block(x)
        routings = []
        for step in range(3):  # new hidden states: the router picks other experts
            x.copy_(torch.randn(4, 1, 256, device="cuda", dtype=torch.bfloat16) * (1 + step))
            routings.append(block.gate(x.view(-1, 256))[2].sort(-1).values)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, block(x)), step
        assert not torch.equal(routings[0], routings[1])


def test_torch_compile_fullgraph_of_a_moe_block():
    model = _model("Mixtral")
    fuse_swiglu_mlps(model)
    block = model.model.layers[0].mlp
    x = torch.randn(2, 7, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = block(x)
        got = torch.compile(block, fullgraph=True)(x)
    torch.testing.assert_close(got.float(), want.float(), rtol=0.02, atol=0.02 * want.abs().max().item())
