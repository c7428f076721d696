"""A patched block under torch.compile (patch.dense._traced): no more guards per block than the stock block,
nothing written per call, and the same decisions as the eager full check."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from fused_swiglu import fuse_swiglu_mlps
from fused_swiglu.patch.dense import FusedSwiGLUForward

transformers = pytest.importorskip("transformers")
from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU fallback's warning
        yield
    torch._dynamo.reset()


class Stack(nn.Module):
    """``n`` Qwen2 MLP blocks in a row, as a decoder's MLPs are called."""

    def __init__(self, n: int):
        super().__init__()
        config = transformers.Qwen2Config(hidden_size=64, intermediate_size=128)
        self.mlps = nn.ModuleList(Qwen2MLP(config) for _ in range(n))

    def forward(self, x):
        for mlp in self.mlps:
            x = mlp(x)
        return x


def _guards(n: int, patched: bool, grad: bool) -> int:
    torch.manual_seed(0)
    model = Stack(n).to(torch.bfloat16)
    if patched:
        assert len(fuse_swiglu_mlps(model)) == n
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        explained = torch._dynamo.explain(model)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    return len(explained.out_guards)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_a_patched_block_adds_no_guard_beyond_the_stock_blocks(grad):
    per_block = {p: _guards(2, p, grad) - _guards(1, p, grad) for p in (False, True)}
    assert per_block[True] <= per_block[False], per_block


def test_a_patched_decoder_has_no_more_guards_than_the_stock_one():
    config = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (1, 6))
    counts = {}
    for patched in (False, True):
        if patched:
            assert len(fuse_swiglu_mlps(model)) == 8
        torch._dynamo.reset()
        with torch.no_grad():
            counts[patched] = len(torch._dynamo.explain(model)(ids).out_guards)
    assert counts[True] <= counts[False], counts


def test_traced_calls_write_nothing_and_match_the_eager_patch():
    torch.manual_seed(0)
    model = Stack(2).to(torch.bfloat16)
    fuse_swiglu_mlps(model)
    patch = vars(model.mlps[0])["_fused_swiglu"]
    before = dict(vars(patch))
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        got = [compiled(x) for _ in range(3)]
    assert vars(patch) == before  # no arming state set under tracing (it would be replayed every call)
    with torch.no_grad():
        want = model(x)  # the eager patched forward (fast path)
    for y in got:
        assert torch.equal(y, want)


@torch._dynamo.config.patch(skip_nnmodule_hook_guards=False)
def test_a_hook_added_after_compiling_runs_where_dynamo_guards_hooks():
    # Dynamo guards module hooks only with skip_nnmodule_hook_guards off (for stock blocks too); then a
    # hook on gate_proj re-traces the patched block into its original forward
    torch.manual_seed(0)
    model = Stack(1).to(torch.bfloat16)
    fuse_swiglu_mlps(model)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        assert compiled(x).abs().max() > 0
        model.mlps[0].gate_proj.register_forward_hook(lambda mod, args, out: out * 0)
        got = compiled(x)  # the gate is zeroed by the hook: silu(0) * up = 0
    assert torch.equal(got, torch.zeros_like(got))


@pytest.mark.parametrize("change", ["act_fn", "bias"])
def test_a_block_changed_after_compiling_runs_its_original_forward_compiled(change):
    torch.manual_seed(0)
    model = Stack(1).to(torch.bfloat16)
    fuse_swiglu_mlps(model)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="eager")
    mlp = model.mlps[0]
    with torch.no_grad():
        compiled(x)
        if change == "act_fn":
            mlp.act_fn = nn.GELU()
        else:
            mlp.gate_proj.bias = nn.Parameter(torch.randn(128, dtype=torch.bfloat16))
        got = compiled(x)
        want = Qwen2MLP.forward(mlp, x)
    assert torch.equal(got, want)


def test_the_patch_object_is_guarded_on_its_module_and_config_only():
    # reading the eager arming state under tracing would add guards (and setting it, per-call work)
    torch.manual_seed(0)
    model = Stack(1).to(torch.bfloat16)
    fuse_swiglu_mlps(model)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        guards = torch._dynamo.explain(model)(x).out_guards
    read = {g.name.split("._fused_swiglu.", 1)[1].split(".")[0] for g in guards if "._fused_swiglu." in g.name}
    assert read <= {"module", "config", "direct_cpu", "direct_cuda"}, read
    assert "module" in read


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_compiled_patched_block_on_the_gpu_runs_the_kernel_and_matches_eager(backend):
    torch.manual_seed(0)
    model = Stack(2).to("cuda", torch.bfloat16)
    fuse_swiglu_mlps(model)
    x = torch.randn(3, 5, 64, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend=backend, fullgraph=True)(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.compile(model, backend=backend, fullgraph=True)(x)
    assert torch.equal(got, want)
    assert any("fused_swiglu::swiglu_dual" in e.name for e in prof.events())


@pytest.mark.gpu
def test_a_patched_block_on_the_gpu_adds_no_guard_beyond_the_stock_blocks():
    def guards(n, patched):
        torch.manual_seed(0)
        model = Stack(n).to("cuda", torch.bfloat16)
        if patched:
            fuse_swiglu_mlps(model)
        torch._dynamo.reset()
        with torch.no_grad():
            return len(torch._dynamo.explain(model)(torch.randn(2, 3, 64, device="cuda",
                                                                 dtype=torch.bfloat16)).out_guards)

    per_block = {p: guards(2, p) - guards(1, p) for p in (False, True)}
    assert per_block[True] <= per_block[False], per_block
