"""transformers' experts through the fused forward on the CPU (the grouped operator's PyTorch kernel): the
experts implementation "fused_swiglu" and the experts patch of fuse_swiglu_mlps on tiny random Qwen3-MoE,
Mixtral, Qwen2-MoE and DeepSeek-V3 models against transformers' eager experts, greedy tokens against stock,
generate()'s decode switch, the fallbacks (autograd, dtypes, layouts, hooks), unpatching and pickling,
torch.compile(fullgraph=True)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from experts_common import check_experts, decisive_prompt, forward_float64
from fused_swiglu import fuse_swiglu_mlps, hf_experts, unfuse_swiglu_mlps
from fused_swiglu.accuracy import ulp_at
from fused_swiglu.patch import experts as experts_body
from model_copies import saved_and_loaded

transformers = pytest.importorskip("transformers")
moe = pytest.importorskip("transformers.integrations.moe")

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=128, head_dim=16)
MODELS = {  # name: (config class, model class, MoE sizes)
    "Qwen3-MoE": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(moe_intermediate_size=32, num_experts=8,
                                                                   num_experts_per_tok=2)),
    "Mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=8, num_experts_per_tok=2)),
    "Qwen2-MoE": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(moe_intermediate_size=32, num_experts=8,
                                                                   num_experts_per_tok=2,
                                                                   shared_expert_intermediate_size=64)),
    "DeepSeek-V3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        first_k_dense_replace=1, n_group=2, topk_group=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
        v_head_dim=16, qk_nope_head_dim=8, head_dim=8)),
}


def _model(name: str, dtype=torch.bfloat16, **extra):
    config_cls, model_cls, sizes = MODELS[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**{**SMALL, **sizes, **extra})
    return getattr(transformers, model_cls)(config).to(dtype).eval()


def _experts(model):
    return [m for m in model.modules() if type(m).__name__.endswith("Experts") and hasattr(m, "gate_up_proj")]


@pytest.fixture(autouse=True)
def quiet_cpu_fallback(monkeypatch):
    """Every test's once-per-process warnings given afresh, the CPU fallback's kept out of the way."""
    monkeypatch.setattr(hf_experts.v, "_warned", set())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="fused_swiglu: backend='auto' runs the PyTorch fallback")
        yield


@pytest.fixture(scope="module", autouse=True)
def registered():
    return hf_experts.register_experts_implementation()


def test_the_implementation_is_registered_under_its_name_once_and_again():
    assert hf_experts.register_experts_implementation() == "fused_swiglu" == hf_experts.IMPLEMENTATION
    assert moe.ALL_EXPERTS_FUNCTIONS["fused_swiglu"] is hf_experts.experts_forward
    model = _model("Qwen3-MoE", experts_implementation="fused_swiglu")
    assert model.get_experts_implementation() == {"": "fused_swiglu"}


def test_fp8_experts_selected_by_that_name_run_transformers_fp8_grouped_mm(monkeypatch):
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    assert fp8.ALL_FP8_EXPERTS_FUNCTIONS["fused_swiglu"] is hf_experts.fp8_experts_forward
    monkeypatch.setitem(fp8.FP8ExpertsInterface._global_mapping, "grouped_mm", lambda self, *args: ("fp8", args))
    with pytest.warns(RuntimeWarning, match="runs transformers' FP8 grouped_mm for the fine-grained FP8 experts"):
        assert hf_experts.fp8_experts_forward(torch.nn.Module(), 1, 2, 3) == ("fp8", (1, 2, 3))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_experts_module_matches_float64_and_transformers_eager_within_its_rounding(name):
    model = _model(name)
    experts = _experts(model)[0]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(37, 64, generator=g).to(torch.bfloat16)
    index = torch.rand(37, 8, generator=g).topk(2, dim=-1).indices
    weights = torch.softmax(torch.randn(37, 2, generator=g), dim=-1)  # fp32, as Mixtral's router gives
    with torch.no_grad():
        model.set_experts_implementation("eager")
        eager = experts(x, index, weights)
        model.set_experts_implementation("fused_swiglu")
        fused = experts(x, index, weights)
    args = (x, index, weights, experts.gate_up_proj, experts.down_proj)
    check_experts(fused, *args, name)
    ref = forward_float64(*args)
    eager_error = (eager.double() - ref).abs().max()
    assert ((fused.double() - eager.double()).abs() <= 2 * eager_error + ulp_at(ref, torch.bfloat16)).all()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_model_s_logits_match_with_either_way_in(name):
    model = _model(name)
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        model.set_experts_implementation("eager")
        want = model(ids).logits.float()
        model.set_experts_implementation("fused_swiglu")
        by_name = model(ids).logits.float()
        model.set_experts_implementation("grouped_mm")
        patched_names = fuse_swiglu_mlps(model)
        patched = model(ids).logits.float()
    assert [n for n in patched_names if n.endswith(".experts")] == [
        f"model.layers.{i}.mlp.experts" for i in range(2) if not (name == "DeepSeek-V3" and i == 0)]
    for got in (by_name, patched):
        torch.testing.assert_close(got, want, rtol=0.02, atol=0.02 * want.abs().max().item())


def test_shared_experts_and_dense_layers_go_through_the_dense_patch():
    for name, dense in (("Qwen2-MoE", ["model.layers.0.mlp.shared_expert", "model.layers.1.mlp.shared_expert"]),
                        ("DeepSeek-V3", ["model.layers.0.mlp", "model.layers.1.mlp.shared_experts"])):
        model = _model(name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing left unfused: no warning
            names = fuse_swiglu_mlps(model)
        assert sorted(set(names) - {n for n in names if n.endswith(".experts")}) == dense, name
        kinds = {n: type(vars(model.get_submodule(n))["_fused_swiglu"]).__name__ for n in names}
        assert {kinds[n] for n in dense} == {"FusedSwiGLUForward"}
        assert {k for n, k in kinds.items() if n.endswith(".experts")} == {"FusedExpertsForward"}


@pytest.mark.parametrize("name", ["Qwen3-MoE", "Mixtral"])
def test_greedy_tokens_match_stock_for_16_tokens(name):
    model = _model(name)
    ids, stock = decisive_prompt(model)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=16, min_new_tokens=16, do_sample=False)
    fuse_swiglu_mlps(model)
    patched = model.generate(ids, **kw)
    unfuse_swiglu_mlps(model)
    model.set_experts_implementation("fused_swiglu")
    by_name = model.generate(ids, **kw)
    assert stock.shape == (1, 22) and torch.equal(patched, stock) and torch.equal(by_name, stock)


def _counting(monkeypatch) -> list:
    """The fused calls of patched experts modules (the experts patch looks swiglu_experts up in its module)."""
    calls = []
    real = experts_body.swiglu_experts
    monkeypatch.setattr(experts_body, "swiglu_experts", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_generate_s_decode_switch_leaves_fused_swiglu_selected_and_the_patch_fused(monkeypatch):
    """generate() swaps grouped_mm for batched_mm while decoding on a GPU (simulated here: the model says it is
    on CUDA): "fused_swiglu" stays; a patched module runs fused whatever the config selects."""
    model = _model("Qwen3-MoE")
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))
    with model._optimize_model_for_decode():
        assert model.get_experts_implementation() == {"": "batched_mm"}  # the switch this test simulates
    model.set_experts_implementation("fused_swiglu")
    with model._optimize_model_for_decode():
        assert model.get_experts_implementation() == {"": "fused_swiglu"}
    model.set_experts_implementation("grouped_mm")
    fuse_swiglu_mlps(model)
    calls = _counting(monkeypatch)
    ids = torch.randint(0, 128, (1, 5))
    with model._optimize_model_for_decode(), torch.no_grad():
        assert model.get_experts_implementation() == {"": "batched_mm"}
        model(ids)
    assert len(calls) == 2  # both layers' experts, fused under batched_mm


def test_a_call_autograd_records_runs_transformers_path_and_trains():
    model = _model("Qwen3-MoE")
    experts = _experts(model)[0]
    x = torch.randn(9, 64).to(torch.bfloat16).requires_grad_()
    index = torch.rand(9, 8).topk(2, dim=-1).indices
    weights = torch.softmax(torch.randn(9, 2), dim=-1)
    model.set_experts_implementation("grouped_mm")
    want = experts(x, index, weights)
    model.set_experts_implementation("fused_swiglu")
    with pytest.warns(RuntimeWarning, match="runs transformers' grouped_mm for this Qwen3MoeExperts call: autograd "
                                            "records the call"):
        got = experts(x, index, weights)
    assert torch.equal(got, want)
    got.float().sum().backward()
    assert x.grad is not None and experts.gate_up_proj.grad is not None
    model.set_experts_implementation("grouped_mm")
    fuse_swiglu_mlps(model)
    x.grad = None
    patched = experts(x, index, weights)  # the module's own forward: grouped_mm
    assert torch.equal(patched, want)
    patched.float().sum().backward()
    assert x.grad is not None


def test_the_implementation_falls_back_where_the_kernels_cannot_run():
    model = _model("Qwen3-MoE", dtype=torch.float32)
    model.set_experts_implementation("fused_swiglu")
    ids = torch.randint(0, 128, (1, 4))
    with pytest.warns(RuntimeWarning, match="the kernels take one of torch.bfloat16 and torch.float16"), torch.no_grad():
        got = model(ids).logits
    model.set_experts_implementation("grouped_mm")
    with torch.no_grad():
        assert torch.equal(got, model(ids).logits)
    experts = _experts(model)[0]
    experts._is_expert_parallel = True
    assert hf_experts.call_reason(experts, torch.zeros(1, 64), torch.zeros(1, 2, dtype=torch.long),
                                  torch.ones(1, 2)) == "its experts are split over ranks (expert parallelism)"


def test_gpt_oss_experts_keep_their_own_code_with_the_reasons():
    config = transformers.GptOssConfig(hidden_size=64, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
                                       num_key_value_heads=2, vocab_size=128, head_dim=16, num_local_experts=4,
                                       num_experts_per_tok=2)
    model = transformers.GptOssForCausalLM(config).to(torch.bfloat16).eval()
    with pytest.warns(UserWarning) as caught:
        assert fuse_swiglu_mlps(model) == []
    message = " ".join(str(w.message) for w in caught)
    assert ("'model.layers.0.mlp.experts': routed experts, gate_up_proj (4, 64, 64): its projections have biases; "
            "its weights are stored transposed ((E, H, 2I)); its gate and up rows are interleaved, not gate rows then "
            "up rows; its gate is its own _apply_gate, not act_fn(gate) * up") in message


def test_promoted_accumulation_patches_the_experts_with_the_promoted_grouped_config(monkeypatch):
    model = _model("Qwen3-MoE")
    ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        stock = model(ids).logits.float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no experts module left unpatched
        names = fuse_swiglu_mlps(model, accumulation="promoted")
    assert names == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    assert {vars(m)["_fused_swiglu"].config for m in _experts(model)} == {"promoted"}
    seen = []
    real = experts_body.swiglu_experts
    monkeypatch.setattr(experts_body, "swiglu_experts", lambda *a, **k: seen.append(k.get("config")) or real(*a, **k))
    with torch.no_grad():
        patched = model(ids).logits.float()
    assert seen == ["promoted", "promoted"]
    torch.testing.assert_close(patched, stock, rtol=0.02, atol=0.02 * stock.abs().max().item())
    copied = saved_and_loaded(model)  # the accumulation travels with the patch
    assert {vars(m)["_fused_swiglu"].config for m in _experts(copied)} == {"promoted"}


def test_experts_the_patch_leaves_say_why():
    cases = [
        (dict(dtype=torch.float32), {}, "its weights are torch.float32 and torch.float32; the kernels take"),
        ({}, dict(backend="torch"), "backend='torch': routed experts keep transformers' own experts code"),
        (dict(hidden_act="gelu"), {}, "act_fn is GELUActivation, not SiLU"),
        (dict(moe_intermediate_size=12), {}, "gate_up_proj is (8, 24, 64); the kernels need I and H to be multiples"),
    ]
    for build, patch, says in cases:
        dtype = build.pop("dtype", torch.bfloat16)
        model = _model("Qwen3-MoE", dtype=dtype, **build)
        with pytest.warns(UserWarning) as caught:
            names = fuse_swiglu_mlps(model, **patch)
        assert not [n for n in names if n.endswith(".experts")]
        message = " ".join(str(w.message) for w in caught)
        assert "2 mixture-of-experts experts module(s) left unfused" in message and says in message, (says, message)
    model = _model("Qwen3-MoE")
    _experts(model)[0].act_fn.register_forward_hook(lambda *a: None)
    with pytest.warns(UserWarning, match="'model.layers.0.mlp.experts': routed experts, gate_up_proj "
                                         r"\(8, 64, 64\): act_fn has hooks"):
        fuse_swiglu_mlps(model)


def test_experts_false_leaves_every_experts_module_as_it_is():
    model = _model("Qwen3-MoE")
    with pytest.warns(UserWarning, match="2 mixture-of-experts experts module\\(s\\) left unfused: "
                                         "'model.layers.0.mlp.experts', 'model.layers.1.mlp.experts': routed experts, "
                                         r"gate_up_proj \(8, 64, 64\)\. Routed experts left unfused run"):
        assert fuse_swiglu_mlps(model, experts=False) == []
    with pytest.raises(TypeError, match="experts must be a bool"):
        fuse_swiglu_mlps(model, experts=1)


def test_unfuse_restores_the_class_and_a_patched_model_survives_copies(monkeypatch):
    model = _model("Mixtral")
    ids = torch.randint(0, 128, (2, 6))
    with torch.no_grad():
        stock = model(ids).logits
    names = fuse_swiglu_mlps(model)
    assert names == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    assert fuse_swiglu_mlps(model) == []  # already patched: left as they are
    with torch.no_grad():
        patched = model(ids).logits
    for other in (copy.deepcopy(model), saved_and_loaded(model)):
        assert [type(vars(m).get("_fused_swiglu")).__name__ for m in _experts(other)] == ["FusedExpertsForward"] * 2
        calls = _counting(monkeypatch)
        with torch.no_grad():
            assert torch.equal(other(ids).logits, patched) and len(calls) == 2
    assert unfuse_swiglu_mlps(model) == names
    assert all("_fused_swiglu" not in vars(m) and type(m) is transformers.models.mixtral.modeling_mixtral.MixtralExperts
               for m in _experts(model))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, stock)


def test_the_patch_runs_the_module_s_own_forward_for_other_calls_and_hooks(monkeypatch):
    model = _model("Qwen3-MoE")
    fuse_swiglu_mlps(model)
    experts = _experts(model)[0]
    calls = _counting(monkeypatch)
    x, index, weights = torch.randn(3, 64).to(torch.bfloat16), torch.tensor([[0, 1], [2, 3], [1, 7]]), torch.ones(3, 2)
    with torch.no_grad():
        fused = experts(x, index, weights)
        assert len(calls) == 1
        own = vars(experts)["_fused_swiglu"].original(x, index, weights)  # the class's forward: grouped_mm
        assert torch.equal(experts(x, top_k_index=index, top_k_weights=weights), own) and len(calls) == 1
        seen = []
        handle = experts.act_fn.register_forward_hook(lambda *a: seen.append(1))
        experts(x, index, weights)
        assert len(calls) == 1 and seen  # the hook ran: transformers' path
        handle.remove()
        assert torch.equal(experts(x, index, weights), fused) and len(calls) == 2
        with pytest.raises(TypeError):  # one argument: the module's own forward refuses it, as unpatched
            experts(x)
    fuse_swiglu_mlps(model := _model("Qwen3-MoE"), backend="cutlass")
    with pytest.raises(RuntimeError, match="backend='cutlass' cannot run: tensors are on cpu"), torch.no_grad():
        _experts(model)[0](x, index, weights)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("way", ["patched", "by name"])
def test_a_moe_block_compiles_fullgraph(way, fresh_dynamo):
    model = _model("Mixtral")
    if way == "patched":
        fuse_swiglu_mlps(model)
    else:
        model.set_experts_implementation("fused_swiglu")
    block = model.model.layers[0].mlp
    x = torch.randn(2, 5, 64).to(torch.bfloat16)
    with torch.no_grad():
        want = block(x)
        got = torch.compile(block, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(got, want)
