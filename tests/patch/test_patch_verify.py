"""fuse_swiglu_mlps replaces a block only when its forward computes down_proj(silu(gate_proj(x)) * up_proj(x)):
known Hugging Face classes by class, anything else by a probe (fused_swiglu.patch.verify)."""

from __future__ import annotations

import copy
import inspect
import re
import types
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fused_swiglu import fuse_swiglu_mlps, unfuse_swiglu_mlps
from fused_swiglu.patch import verify


class MLP(nn.Module):
    """SwiGLU's attribute names; subclasses change only the forward."""

    def __init__(self, H=64, I=96, dtype=torch.bfloat16):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(H, I, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(I, H, bias=False, dtype=dtype)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Residual(MLP):
    def forward(self, x):
        return x + self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Swapped(MLP):
    def forward(self, x):
        return self.down_proj(self.gate_proj(x) * self.act_fn(self.up_proj(x)))


class Scaled(MLP):
    def forward(self, x):
        return 2 * self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Gelu(MLP):
    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x)) * self.up_proj(x))


class AddedBias(MLP):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(96, dtype=torch.bfloat16))

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x) + self.bias) * self.up_proj(x))


class Dropout(MLP):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.down_proj(self.dropout(self.act_fn(self.gate_proj(x)) * self.up_proj(x)))


class EvalOnlyScale(MLP):
    """SwiGLU in training mode, something else in eval mode."""

    def forward(self, x):
        y = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return y if self.training else 0.5 * y


class Upcast(MLP):
    """The same function with fp32 intermediates: other roundings only."""

    def forward(self, x):
        h = F.silu(self.gate_proj(x).float()) * self.up_proj(x).float()
        return self.down_proj(h.to(x.dtype))


OTHER_FORWARDS = [Residual, Swapped, Scaled, Gelu, AddedBias, Dropout, EvalOnlyScale]


class Block(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return self.mlp(x) + x


@pytest.mark.parametrize("cls", OTHER_FORWARDS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_blocks_computing_something_else_are_left_unpatched_and_bit_identical(cls, training):
    torch.manual_seed(0)
    model = nn.Sequential(Block(cls()), Block(MLP())).train(training)
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    torch.manual_seed(1)
    want = model[0](x)
    with pytest.warns(UserWarning, match=r"'0\.mlp': (its forward (differs|is not deterministic|scales)|it has "
                                         r"parameters, buffers or tensor attributes beyond)"):
        assert fuse_swiglu_mlps(model) == ["1.mlp"]
    assert "forward" not in vars(model[0].mlp) and type(model[0].mlp) is cls
    torch.manual_seed(1)
    assert torch.equal(model[0](x), want)


def test_the_same_function_with_other_roundings_is_patched():
    assert fuse_swiglu_mlps(Block(Upcast())) == ["mlp"]


def test_the_probe_leaves_random_state_and_modes_as_they_were():
    mlp = Dropout().eval()
    mlp.dropout.train()  # mixed flags are restored one by one
    state = torch.get_rng_state()
    with pytest.warns(UserWarning, match="in training mode"):
        fuse_swiglu_mlps(mlp)
    assert torch.equal(torch.get_rng_state(), state)
    assert not mlp.training and mlp.dropout.training and not mlp.gate_proj.training


def test_a_block_with_a_buffer_of_its_own_is_refused_before_any_probe():
    class Counting(MLP):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls += 1
            return super().forward(x)

    mlp = Counting()
    with pytest.warns(UserWarning, match=r"beyond gate_proj, up_proj and down_proj \(calls\)"):
        assert fuse_swiglu_mlps(mlp) == []
    assert mlp.calls.item() == 0


def test_a_forward_that_raises_is_named_not_raised():
    class Needs2d(MLP):
        def forward(self, x):
            if x.dim() != 2:
                raise ValueError("2-D only")
            return super().forward(x)

    with pytest.warns(UserWarning, match=r"its forward raised ValueError on a probe input \(2-D only\)"):
        assert fuse_swiglu_mlps(Needs2d()) == []


def test_zero_and_meta_weights_cannot_be_probed_and_say_so():
    zero = MLP()
    nn.init.zeros_(zero.down_proj.weight)
    with pytest.warns(UserWarning, match="all-zero output"):
        assert fuse_swiglu_mlps(zero) == []
    with torch.device("meta"):
        meta = MLP()
    with pytest.warns(UserWarning, match="meta device"):
        assert fuse_swiglu_mlps(meta) == []


def test_an_instance_forward_is_what_is_probed():
    mlp = MLP()
    mlp.forward = lambda x: 3 * MLP.forward(mlp, x)
    with pytest.warns(UserWarning, match="differs"):
        assert fuse_swiglu_mlps(mlp) == []


def test_the_root_module_is_named_readably():
    mlp = MLP()
    assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    assert unfuse_swiglu_mlps(mlp) == ["(the model itself)"]


transformers = pytest.importorskip("transformers")

CANONICAL = {
    "returnself.down_proj(self.act_fn(self.gate_proj(x))*self.up_proj(x))",
    "down_proj=self.down_proj(self.act_fn(self.gate_proj(x))*self.up_proj(x))returndown_proj",
}


def _listed_classes():
    import importlib

    for module_name, names in verify.KNOWN_FORWARDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            yield getattr(module, name)


def test_the_listed_classes_forwards_are_the_swiglu_mlp_in_the_installed_transformers():
    classes = list(_listed_classes())
    assert len(classes) >= 6  # Llama, Mistral, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE at least
    for cls in classes:
        body = inspect.getsource(cls.forward).split(":", 1)[1]  # after "def forward(self, x)"
        code = re.sub(r"#.*", "", body)
        assert re.sub(r"\s+", "", code) in CANONICAL, cls.__qualname__


def test_a_subclass_overriding_a_listed_forward_is_probed():
    from transformers.models.llama.modeling_llama import LlamaMLP

    class Mine(LlamaMLP):
        def forward(self, x):
            return 2 * super().forward(x)

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96)
    assert verify.known_forward(LlamaMLP(config))
    assert not verify.known_forward(Mine(config))
    mlp = Mine(config).to(torch.bfloat16)
    with pytest.warns(UserWarning, match="differs"):
        assert fuse_swiglu_mlps(mlp) == []


SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=128, head_dim=16)


def _model(config_cls, model_cls, **extra):
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**{**SMALL, **extra})
    return getattr(transformers, model_cls)(config).to(torch.bfloat16).eval()


DENSE = [("Qwen2Config", "Qwen2ForCausalLM"), ("LlamaConfig", "LlamaForCausalLM"),
         ("MistralConfig", "MistralForCausalLM"), ("Qwen3Config", "Qwen3ForCausalLM")]


@pytest.mark.parametrize("config_cls,model_cls", DENSE, ids=[d[1] for d in DENSE])
def test_dense_hugging_face_blocks_are_patched_by_class_and_match_stock(config_cls, model_cls, monkeypatch):
    model = _model(config_cls, model_cls)
    ids = torch.randint(0, 128, (2, 7))
    with torch.no_grad():
        want = model(ids).logits
    probed = []
    monkeypatch.setattr(verify, "probe", lambda *a: probed.append(a) or "probed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU fallback's warning
        names = fuse_swiglu_mlps(model)
    assert names == ["model.layers.0.mlp", "model.layers.1.mlp"] and not probed
    with torch.no_grad():
        got = model(ids).logits
    torch.testing.assert_close(got.float(), want.float(), rtol=0.05, atol=0.05)


def _moe_warning(model, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = fuse_swiglu_mlps(model, **kwargs)
    messages = [str(w.message) for w in caught if "fuse_swiglu_mlps" in str(w.message)]
    assert len(messages) == 1, messages
    return names, messages[0]


def test_qwen2_moe_shared_experts_are_patched_and_routed_experts_named_with_experts_false():
    model = _model("Qwen2MoeConfig", "Qwen2MoeForCausalLM", moe_intermediate_size=32,
                   shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2)
    ids = torch.randint(0, 128, (2, 7))
    with torch.no_grad():
        want = model(ids).logits
    names, message = _moe_warning(model, experts=False)
    assert names == ["model.layers.0.mlp.shared_expert", "model.layers.1.mlp.shared_expert"]
    assert "2 mixture-of-experts experts module(s) left unfused: 'model.layers.0.mlp.experts'" in message
    assert "Routed experts left unfused run the model's own experts code" in message
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits.float(), want.float(), rtol=0.05, atol=0.05)


def test_qwen3_moe_experts_and_its_dense_layer():
    model = _model("Qwen3MoeConfig", "Qwen3MoeForCausalLM", moe_intermediate_size=32, num_experts=4,
                   num_experts_per_tok=2, mlp_only_layers=[1])
    names, message = _moe_warning(copy.deepcopy(model), experts=False)
    assert names == ["model.layers.1.mlp"]
    assert "1 mixture-of-experts experts module(s) left unfused: 'model.layers.0.mlp.experts': routed experts" in message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU fallback's warning
        assert fuse_swiglu_mlps(model) == ["model.layers.0.mlp.experts", "model.layers.1.mlp"]


def test_mixtral_experts_are_named_when_nothing_is_patched():
    model = _model("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2)
    names, message = _moe_warning(model, experts=False)
    assert names == []
    assert message.startswith("fuse_swiglu_mlps patched 0 block(s). 2 mixture-of-experts experts module(s)")
    assert "'model.layers.0.mlp.experts', 'model.layers.1.mlp.experts': routed experts, gate_up_proj (4, " in message


class Scaled101(MLP):
    def forward(self, x):
        return 1.01 * super().forward(x)


class Clamped(MLP):
    def forward(self, x):
        return super().forward(x.clamp(-6, 6))


class ResidualPastFourTokens(MLP):
    def forward(self, x):
        y = super().forward(x)
        return y + x if x.shape[-2] > 4 else y


class HalfFor2d(MLP):
    def forward(self, x):
        y = super().forward(x)
        return 0.5 * y if x.dim() == 2 else y


@pytest.mark.parametrize("cls", [Scaled101, Clamped, ResidualPastFourTokens, HalfFor2d], ids=lambda c: c.__name__)
def test_small_scales_and_input_dependent_forwards_are_caught(cls):
    with pytest.warns(UserWarning, match=r"its forward (differs|scales)"):
        assert fuse_swiglu_mlps(cls()) == []


class LayerScale(MLP):
    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(64, dtype=torch.bfloat16))  # 1 now, anything after loading

    def forward(self, x):
        return super().forward(x) * self.gamma


def test_a_probed_block_with_state_beyond_its_projections_is_left_alone():
    mlp = LayerScale()
    with pytest.warns(UserWarning, match=r"parameters, buffers or tensor attributes beyond gate_proj, up_proj and down_proj \(gamma\)"):
        assert fuse_swiglu_mlps(mlp) == []


class WithOption(MLP):
    def forward(self, x, scale=1.0):
        return scale * super().forward(x)


def test_calls_other_than_one_tensor_run_the_original_forward():
    mlp = WithOption()
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    want = {"scaled": WithOption.forward(mlp, x, scale=2.0), "keyword": WithOption.forward(mlp, x=x)}
    assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    assert torch.equal(mlp(x, scale=2.0), want["scaled"]) and torch.equal(mlp(x, 2.0), want["scaled"])
    assert torch.equal(mlp(x=x), want["keyword"])
    with pytest.raises(TypeError):
        mlp(x, bogus=1)


class Flagged(MLP):
    """A block whose forward reads plain attributes: SwiGLU as patched, something else once changed."""

    def __init__(self):
        super().__init__()
        self.scale = 1.0
        self.residual = False

    def forward(self, x):
        y = self.scale * self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return x + y if self.residual else y


@pytest.mark.parametrize("change", [("scale", 2.0), ("residual", True)])
def test_a_probed_blocks_plain_attribute_changed_after_patching_gives_the_stock_result(monkeypatch, change):
    from fused_swiglu import _validate

    monkeypatch.setattr(_validate, "_warned", set())
    torch.manual_seed(0)
    block = Flagged()
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    assert fuse_swiglu_mlps(block) == ["(the model itself)"]
    assert vars(block)["_fused_swiglu"].plain[:3] == (("scale", 1.0), ("residual", False), ("gate_proj.in_features", 64))
    fused = block(x)
    setattr(block, *change)
    want = Flagged.forward(block, x)  # the class's own forward with the changed attribute
    with pytest.warns(RuntimeWarning, match="a plain attribute of a patched Flagged block changed") as caught:
        torch.testing.assert_close(block(x), want, rtol=0, atol=0)
    assert [w.filename for w in caught] == [__file__]
    assert not torch.equal(want, fused)
    # an attribute added after patching is a change too; an equal value set again is not
    setattr(block, change[0], 1.0 if change[0] == "scale" else False)
    torch.testing.assert_close(block(x), fused, rtol=0, atol=0)
    block.extra = 3
    assert not verify.same_attributes(block, vars(block)["_fused_swiglu"].plain)
    del block.extra
    assert verify.same_attributes(block, vars(block)["_fused_swiglu"].plain)


def test_under_compile_a_changed_plain_attribute_re_traces_to_the_stock_forward():
    torch.manual_seed(0)
    block = Flagged()
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    fuse_swiglu_mlps(block)
    torch._dynamo.reset()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        fused = compiled(x)
        block.scale = 2.0
        want = Flagged.forward(block, x)
        torch.testing.assert_close(compiled(x), want, rtol=0, atol=0)
        block.scale = 1.0
        torch.testing.assert_close(compiled(x), fused, rtol=0, atol=0)


def test_a_known_class_carries_no_attribute_check_and_a_tensor_attribute_refuses_the_probe():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP

    config = transformers.Qwen2Config(hidden_size=64, intermediate_size=96)
    block = Qwen2MLP(config).to(torch.bfloat16)
    fuse_swiglu_mlps(block)
    assert not hasattr(vars(block)["_fused_swiglu"], "plain")  # vouched for by its class
    holder = MLP()
    holder.gamma = torch.ones(64, dtype=torch.bfloat16)  # a tensor attribute, not a buffer
    assert "tensor attributes beyond gate_proj, up_proj and down_proj (gamma)" in verify.probe(
        holder, holder.forward, torch.bfloat16)


class ReadsState(MLP):
    """A forward reading a dict, a list, a flag on gate_proj and a tensor in a dict: SwiGLU as patched."""

    def __init__(self):
        super().__init__()
        self.cfg = {"scale": 1.0, "t": torch.ones(())}
        self.signs = [1.0]
        self.gate_proj.flip = False

    def forward(self, x):
        g = self.gate_proj(x)
        g = -g if self.gate_proj.flip else g
        y = self.down_proj(self.act_fn(g) * self.up_proj(x))
        return y * self.cfg["scale"] * self.signs[0] * self.cfg["t"].to(y.dtype)


class Counter(MLP):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        self.gate_proj.seen = True
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Logger(MLP):
    def __init__(self):
        super().__init__()
        self.log, self.stats = [], {"calls": 0}

    def forward(self, x):
        self.log.append(x.shape)
        self.stats["calls"] += 1
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("cls", [Counter, Logger])
def test_a_forward_that_changes_its_own_state_is_refused_and_the_probe_puts_it_back(cls):
    block = cls()
    with pytest.warns(UserWarning, match=r"its forward changes its own attributes \((calls|log|gate_proj\.seen)"):
        assert fuse_swiglu_mlps(block) == []
    if cls is Counter:
        assert block.calls == 0 and not hasattr(block.gate_proj, "seen")
    else:
        assert block.log == [] and block.stats == {"calls": 0}


class Nested(MLP):
    def __init__(self, t=None):
        super().__init__()
        self.opts = {"inner": {"scale": 1.0}, "t": torch.ones(()) if t is None else t}
        self.post = nn.Identity()

    def forward(self, x):
        y = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return self.post(y * self.opts["inner"]["scale"] * self.opts["t"].to(y.dtype))


def _set(obj, key, value):
    obj[key] = value


# what a test changes after patching, on a block of which class
CHANGES = {
    "dict": (ReadsState, lambda b: _set(b.cfg, "scale", 2.0)),
    "list": (ReadsState, lambda b: _set(b.signs, 0, -1.0)),
    "child flag": (ReadsState, lambda b: setattr(b.gate_proj, "flip", True)),
    "tensor in a dict": (ReadsState, lambda b: b.cfg["t"].fill_(2.0)),
    "nested dict": (Nested, lambda b: _set(b.opts["inner"], "scale", 2.0)),
    "submodule": (Nested, lambda b: setattr(b, "post", nn.Tanh())),
    "data bypass": (Nested, lambda b: b.opts["t"].data.fill_(2.0)),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_state_in_containers_on_the_layers_and_in_submodules_is_watched(change):
    cls, apply = CHANGES[change]
    torch.manual_seed(0)
    block = cls()
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fuse_swiglu_mlps(block) == ["(the model itself)"]
        fused = block(x)
        apply(block)
        got = block(x)
    torch.testing.assert_close(got, cls.forward(block, x), rtol=0, atol=0)
    assert not torch.equal(got, fused)


def test_state_beyond_plain_values_runs_the_own_forward_under_compile_and_copies_stay_fused():
    import copy

    torch.manual_seed(0)
    with torch.inference_mode():
        t = torch.ones(())  # an inference tensor: read by value, no version counter needed
    block = Nested(t)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse_swiglu_mlps(block)
        fused = block(x)
    patch = vars(block)["_fused_swiglu"]
    assert patch.checks is None  # containers: its own forward under torch.compile
    torch._dynamo.reset()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        block.opts["inner"]["scale"] = 2.0
        torch.testing.assert_close(compiled(x), Nested.forward(block, x), rtol=0, atol=0)
    block.opts["inner"]["scale"] = 1.0
    twin = copy.deepcopy(block)  # unchanged state: the copy stays fused
    torch.testing.assert_close(twin(x), fused, rtol=0, atol=0)
    assert vars(twin)["_fused_swiglu"].watch


def test_a_large_tensor_in_a_container_refuses_the_probe():
    block = Nested(torch.ones(64))
    assert "opts" in verify.probe(block, block.forward, torch.bfloat16)


def test_fx_traces_a_patched_block_that_is_the_root_module():
    torch.manual_seed(0)
    block = MLP()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse_swiglu_mlps(block)
    graph = torch.fx.symbolic_trace(block)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    assert "down_proj" in graph.code and "fused_swiglu" not in graph.code  # the block's own forward
    torch.testing.assert_close(graph(x), MLP.forward(block, x), rtol=0, atol=0)


class WithConfig(MLP):
    """A forward reading an object attribute (a config): compared by identity, also under torch.compile."""

    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(scale=1.0)

    def forward(self, x):
        return self.config.scale * self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_an_object_attribute_is_compared_by_identity_eager_and_compiled():
    torch.manual_seed(0)
    block = WithConfig()
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse_swiglu_mlps(block)
        fused = block(x)
    assert vars(block)["_fused_swiglu"].checks[0][:2] == ("config", block.config)
    torch._dynamo.reset()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(compiled(x), fused, rtol=0, atol=0)  # fused under compile
        block.config = types.SimpleNamespace(scale=2.0)  # another object: the block's own forward
        torch.testing.assert_close(compiled(x), WithConfig.forward(block, x), rtol=0, atol=0)
        torch.testing.assert_close(block(x), WithConfig.forward(block, x), rtol=0, atol=0)
