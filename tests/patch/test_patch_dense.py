"""fuse_swiglu_mlps / unfuse_swiglu_mlps on toy models written like Hugging Face's SwiGLU MLPs."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from fused_swiglu import fuse_swiglu_mlps, unfuse_swiglu_mlps
from fused_swiglu.patch import dense
from fused_swiglu.reference import swiglu_float64
from model_copies import COPIES, saved_and_loaded


class MLP(nn.Module):
    """The shape of transformers' Qwen2MLP / LlamaMLP / MistralMLP (bf16: the kernels' dtypes)."""

    def __init__(self, H=64, I=96, bias=False, act=None, dtype=torch.bfloat16):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=bias, dtype=dtype)
        self.up_proj = nn.Linear(H, I, bias=bias, dtype=dtype)
        self.down_proj = nn.Linear(I, H, bias=bias, dtype=dtype)
        self.act_fn = act if act is not None else nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.mlp = MLP(**kw)

    def forward(self, x):
        return x + self.mlp(x)


def _model():
    return nn.Sequential(Block(), Block(), Block(bias=True), Block(act=nn.GELU()))


def _count_calls(monkeypatch):
    """Calls of the fused paths: ("swiglu", its keywords) for the public function, ("op", config)
    for the patched forward's direct operator call, ("block", "") for the whole-block operator
    (autograd records the call)."""
    calls = []
    real, real_run_op, real_block = dense.swiglu, dense.run_op, dense.mlp_ops.mlp

    def counting(*args, **kw):
        calls.append(("swiglu", kw))
        return real(*args, **kw)

    def counting_run_op(op, *args):
        calls.append(("op", args[-1]))
        return real_run_op(op, *args)

    def counting_block(*args):
        calls.append(("block", ""))
        return real_block(*args)

    monkeypatch.setattr(dense, "swiglu", counting)
    monkeypatch.setattr(dense.mlp_ops, "mlp", counting_block)
    monkeypatch.setattr(dense, "run_op", counting_run_op)
    return calls


def test_patches_only_swiglu_blocks_and_undoes():
    model = _model()
    with pytest.warns(UserWarning, match="patched 2 block.* and left 2 unfused .*'2.mlp': its projections have a "
                                         "bias; '3.mlp': act_fn is GELU"):
        assert fuse_swiglu_mlps(model) == ["0.mlp", "1.mlp"]  # bias and GELU blocks are not SwiGLU MLPs
    with pytest.warns(UserWarning, match=r"patched 0 block\(s\) \(2 patched already\) and left 2 unfused"):
        assert fuse_swiglu_mlps(model) == []  # already patched
    assert sorted(unfuse_swiglu_mlps(model)) == ["0.mlp", "1.mlp"]
    assert "forward" not in vars(model[0].mlp)  # the class's forward again
    assert unfuse_swiglu_mlps(model) == []


def test_an_fp32_model_is_left_unfused_and_the_warning_says_why(monkeypatch):
    model = nn.Sequential(*(Block(dtype=torch.float32) for _ in range(5)))
    x = torch.randn(3, 5, 64)
    want = model(x)
    calls = _count_calls(monkeypatch)
    with pytest.warns(UserWarning) as record:
        assert fuse_swiglu_mlps(model) == []
    assert len(record) == 1
    assert str(record[0].message) == (
        "fuse_swiglu_mlps patched no block: 5 block(s) have gate_proj, up_proj and down_proj, none of which "
        "could be patched; '0.mlp', '1.mlp', '2.mlp' and 2 more: its weights are torch.float32; the kernels take "
        "torch.bfloat16 or torch.float16 (convert the model before patching)")
    torch.testing.assert_close(model(x), want, rtol=0, atol=0)
    assert calls == []


def test_blocks_with_I_or_H_not_a_multiple_of_8_are_left_unfused_and_named():
    model = nn.Sequential(Block(), Block(I=100), Block(H=60, I=96))
    with pytest.warns(UserWarning) as record:
        assert fuse_swiglu_mlps(model) == ["0.mlp"]
    assert len(record) == 1
    assert str(record[0].message) == (
        "fuse_swiglu_mlps patched 1 block(s) and left 2 unfused (they run their original forward); "
        "'1.mlp': gate_proj.weight is (100, 64); the kernels need I and H to be multiples of 8; "
        "'2.mlp': gate_proj.weight is (96, 60); the kernels need I and H to be multiples of 8")


def test_bf16_model_calls_swiglu_and_matches_float64(monkeypatch):
    torch.manual_seed(0)
    mlp = MLP(H=64, I=96).to(torch.bfloat16)
    x = torch.randn(4, 7, 64, dtype=torch.bfloat16, requires_grad=True)
    calls = _count_calls(monkeypatch)
    fuse_swiglu_mlps(mlp, backend="torch", accumulation="promoted")
    y = mlp(x)
    assert calls == [("op", "promoted")]  # the operator's CPU kernel: the torch backend's fp32 products
    hidden = swiglu_float64(x.detach(), mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach())
    want = hidden @ mlp.down_proj.weight.detach().double().T
    assert ((y.double() - want).norm() / want.norm()).item() < 1e-2
    y.sum().backward()
    assert x.grad is not None and mlp.gate_proj.weight.grad is not None and mlp.up_proj.weight.grad is not None


@pytest.mark.parametrize("change", ["bias", "act_fn", "hook"])
def test_a_block_changed_after_patching_runs_its_original_forward(change, monkeypatch):
    torch.manual_seed(0)
    mlp = MLP(H=32, I=24).to(torch.bfloat16)
    fuse_swiglu_mlps(mlp, backend="torch")
    seen = []
    if change == "bias":
        mlp.gate_proj = nn.Linear(32, 24, bias=True).to(torch.bfloat16)
        nn.init.constant_(mlp.gate_proj.bias, 5.0)
    elif change == "act_fn":
        mlp.act_fn = nn.GELU()
    else:
        mlp.up_proj.register_forward_hook(lambda *args: seen.append(1))
    calls = _count_calls(monkeypatch)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    from fused_swiglu import _validate

    monkeypatch.setattr(_validate, "_warned", set())  # the notice comes once per process: this test's own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(mlp(x), MLP.forward(mlp, x), rtol=0, atol=0)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    # a replaced act_fn is a plain attribute the patch watches, and says so; the other changes it sees silently
    assert (said != []) == (change == "act_fn") and all("a plain attribute of a patched MLP block changed" in m
                                                        for m in said)
    assert calls == []
    if change == "hook":
        assert seen  # the hook ran: the original forward calls up_proj


def test_an_instance_forward_from_before_is_restored():
    mlp = MLP()
    sentinel = lambda x: MLP.forward(mlp, x)  # noqa: E731  (the SwiGLU MLP: the probe passes it)
    mlp.forward = sentinel
    assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    assert mlp.forward is not sentinel
    unfuse_swiglu_mlps(mlp)
    assert mlp.forward is sentinel


def test_blocks_with_accelerate_hooks_are_left_alone():
    mlp = MLP()
    mlp._hf_hook = object()
    with pytest.warns(UserWarning, match=r"'\(the model itself\)': it carries an accelerate hook"):
        assert fuse_swiglu_mlps(mlp) == []


def test_bad_arguments_are_named():
    for fn in (fuse_swiglu_mlps, unfuse_swiglu_mlps):
        with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
            fn(42)
    for kw, arg in (({"kernel": "auto2"}, "kernel"), ({"accumulation": "exact"}, "accumulation"),
                    ({"backend": "cuda"}, "backend")):
        with pytest.raises(ValueError, match=arg):
            fuse_swiglu_mlps(MLP(), **kw)
    assert fuse_swiglu_mlps(MLP(), kernel="auto") == ["(the model itself)"]


def test_blocks_whose_gate_or_up_have_hooks_are_left_alone():
    mlp = MLP()
    mlp.up_proj.register_forward_pre_hook(lambda module, args: None)
    with pytest.warns(UserWarning, match="gate_proj or up_proj has hooks"):
        assert fuse_swiglu_mlps(mlp) == []


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_patched_model_stays_patched_through_save_load_and_deepcopy(how, monkeypatch):
    model = nn.Sequential(Block(), Block()).to(torch.bfloat16)
    fuse_swiglu_mlps(model, backend="torch")
    copied = COPIES[how](model)
    calls = _count_calls(monkeypatch)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    torch.testing.assert_close(copied(x), model(x), rtol=0, atol=0)
    assert len(calls) == 4  # both blocks of both models ran fused
    assert copied[0].mlp._fused_swiglu.module is copied[0].mlp  # bound to the copy, not the original
    assert sorted(unfuse_swiglu_mlps(copied)) == ["0.mlp", "1.mlp"]
    assert fuse_swiglu_mlps(copied, backend="torch") == ["0.mlp", "1.mlp"]


def test_patched_model_compiles_fullgraph_and_backpropagates():
    model = nn.Sequential(Block(), Block()).to(torch.bfloat16)
    fuse_swiglu_mlps(model, backend="torch")
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
    compiled(x).float().sum().backward()
    assert model[0].mlp.gate_proj.weight.grad is not None


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["dual", "packed"])
def test_qwen_sized_block_on_the_gpu(kernel, monkeypatch):
    mlp = MLP(H=896, I=4864).to("cuda", torch.bfloat16)
    x = torch.randn(2, 33, 896, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        original = mlp(x)
    calls = _count_calls(monkeypatch)
    fuse_swiglu_mlps(mlp, kernel=kernel, backend="cutlass")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the kernels ran
        with torch.no_grad():
            fused = mlp(x)
        y = mlp(x)
    y.float().square().mean().backward()
    assert len(calls) == 2 and mlp.gate_proj.weight.grad is not None
    hidden = swiglu_float64(x, mlp.gate_proj.weight, mlp.up_proj.weight)
    want = hidden @ mlp.down_proj.weight.double().T
    err = lambda t: ((t.double() - want).norm() / want.norm()).item()  # noqa: E731
    assert err(fused) <= err(original) * 1.05 + 1e-4, (err(fused), err(original))


class GatedButNotSwiGLU(nn.Module):
    """Gemma's MLP layout: SwiGLU's attributes with a tanh-approximated GELU."""

    def __init__(self):
        super().__init__()
        self.mlp = MLP(act=nn.GELU(approximate="tanh"))


class NoActFn(nn.Module):
    """SwiGLU's projections and no act_fn attribute (the patch's probe stops there; forward never runs)."""

    def __init__(self):
        super().__init__()
        self.mlp = MLP()
        del self.mlp.act_fn


@pytest.mark.parametrize(
    "model, says",
    [
        (GatedButNotSwiGLU(), "1 block(s) have gate_proj, up_proj and down_proj, none of which could be patched; "
                              "'mlp': act_fn is GELU, not SiLU"),
        (NoActFn(), "'mlp': it has no act_fn attribute"),
        (Block(bias=True), "'mlp': its projections have a bias"),
        (nn.Sequential(nn.Linear(8, 8)), "no submodule has gate_proj, up_proj and down_proj"),
    ],
)
def test_a_call_that_patches_nothing_warns_why(model, says):
    with pytest.warns(UserWarning, match="patched no block") as record:
        assert fuse_swiglu_mlps(model) == []
    assert says in str(record[0].message)


def test_hooked_block_is_named_in_the_warning():
    block = Block()
    block.mlp.gate_proj.register_forward_hook(lambda *a: None)
    with pytest.warns(UserWarning, match="'mlp': gate_proj or up_proj has hooks"):
        assert fuse_swiglu_mlps(block) == []


def test_each_call_warns_once_naming_the_blocks_it_left_unfused():
    model = _model()
    for patched, head in ((["0.mlp", "1.mlp"], "patched 2 block(s) and left 2 unfused"),
                          ([], "patched 0 block(s) (2 patched already) and left 2 unfused")):
        with pytest.warns(UserWarning) as record:
            assert fuse_swiglu_mlps(model) == patched
        assert len(record) == 1
        assert str(record[0].message) == (
            f"fuse_swiglu_mlps {head} (they run their original forward); '2.mlp': its projections have a bias; "
            "'3.mlp': act_fn is GELU, not SiLU (torch.nn.SiLU or transformers' SiLUActivation)")


def test_no_warning_when_every_block_is_or_was_patched():
    model = nn.Sequential(Block(), Block())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fuse_swiglu_mlps(model) == ["0.mlp", "1.mlp"]
        assert fuse_swiglu_mlps(model) == []  # already patched: nothing new to say


class SiLU(nn.Module):
    """A user's own class that is named SiLU and computes something else."""

    def forward(self, x):
        return torch.relu(x)


class KeepsSiLU(nn.SiLU):
    """A subclass of torch.nn.SiLU that keeps its forward."""


class OverridesSiLU(nn.SiLU):
    def forward(self, x):
        return torch.relu(x)


def _transformers_silu():
    """A stand-in for transformers.activations.SiLUActivation (a plain nn.Module in transformers 5)."""
    cls = type("SiLUActivation", (nn.Module,), {"forward": lambda self, x: nn.functional.silu(x)})
    cls.__module__ = "transformers.activations"
    return cls()


@pytest.mark.parametrize("act, fused", [
    (nn.SiLU(), True), (nn.SiLU(inplace=True), True), (KeepsSiLU(), True), (_transformers_silu(), True),
    (SiLU(), False), (OverridesSiLU(), False), (nn.ReLU(), False),
])
def test_act_fn_is_recognised_by_what_it_is_not_by_its_name(act, fused):
    torch.manual_seed(0)
    model = nn.Sequential(Block(act=act)).to(torch.bfloat16)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    before = model(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = fuse_swiglu_mlps(model, backend="torch")
    assert names == (["0.mlp"] if fused else [])
    assert [str(w.message) for w in caught if "patched no block" in str(w.message)] == ([] if fused else [
        "fuse_swiglu_mlps patched no block: 1 block(s) have gate_proj, up_proj and down_proj, none of which could be "
        f"patched; '0.mlp': {dense.skip_reason(model[0].mlp)}"])
    if fused:  # the fused block computes what the block computed, to bf16 rounding
        torch.testing.assert_close(model(x), before, rtol=2e-2, atol=2e-2)
    else:
        assert torch.equal(model(x), before)
        reason = dense.skip_reason(model[0].mlp)
        assert reason.startswith("act_fn is ") and reason.endswith(", not SiLU (torch.nn.SiLU or transformers' "
                                                                   "SiLUActivation)")
        if isinstance(act, SiLU):  # a name that reads as SiLU is qualified with its module
            assert reason.startswith(f"act_fn is {SiLU.__module__}.SiLU, not SiLU")


# --- the one-branch forward: what it notices after the first call --------------------------------


def _patched_bf16_mlp(H=32, I=24):
    torch.manual_seed(0)
    mlp = MLP(H=H, I=I).to(torch.bfloat16)
    fuse_swiglu_mlps(mlp, backend="torch")
    x = torch.randn(3, H, dtype=torch.bfloat16)
    mlp(x)  # the first call arms the fast path
    return mlp, x


@pytest.mark.parametrize("change", ["hook", "pre_hook", "bias", "act_fn", "layer"])
def test_a_change_after_the_first_call_runs_the_original_forward(change, monkeypatch):
    mlp, x = _patched_bf16_mlp()
    seen = []
    if change == "hook":
        mlp.gate_proj.register_forward_hook(lambda *a: seen.append(1))
    elif change == "pre_hook":
        mlp.up_proj.register_forward_pre_hook(lambda *a: seen.append(1))
    elif change == "bias":
        mlp.up_proj.bias = nn.Parameter(torch.full((24,), 3.0, dtype=torch.bfloat16))
    elif change == "act_fn":
        mlp.act_fn = nn.GELU()
    else:  # a layer that is no nn.Linear any more (a wrapper, as adapters install)
        mlp.gate_proj = nn.Sequential(mlp.gate_proj)
        mlp.gate_proj.weight = mlp.gate_proj[0].weight
    calls = _count_calls(monkeypatch)
    torch.testing.assert_close(mlp(x), MLP.forward(mlp, x), rtol=0, atol=0)
    assert calls == []
    if "hook" in change:
        assert seen == [1, 1]  # run by the patched call and by the reference call


def test_weights_replaced_or_updated_after_the_first_call_are_used(monkeypatch):
    mlp, x = _patched_bf16_mlp()
    calls = _count_calls(monkeypatch)
    with torch.no_grad():
        mlp.gate_proj.weight.mul_(-2)  # in place: same Parameter, read at the call
    got = mlp(x)
    assert calls == [("block", "")]  # the weights require grad: the whole-block operator
    want = swiglu_float64(x, mlp.gate_proj.weight, mlp.up_proj.weight) @ mlp.down_proj.weight.double().T
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-2
    mlp.up_proj.weight = nn.Parameter(torch.randn(24, 32, dtype=torch.bfloat16))  # a new Parameter
    got = mlp(x)
    want = swiglu_float64(x, mlp.gate_proj.weight, mlp.up_proj.weight) @ mlp.down_proj.weight.double().T
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-2
    assert calls == [("block", ""), ("block", "")]  # the full check re-armed the fast path on the new weight
    mlp.gate_proj = nn.Linear(32, 24, bias=False).to(torch.bfloat16)  # a new layer that still qualifies
    got = mlp(x)
    want = swiglu_float64(x, mlp.gate_proj.weight, mlp.up_proj.weight) @ mlp.down_proj.weight.double().T
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-2 and len(calls) == 3


def test_a_dtype_change_after_the_first_call_runs_the_original_forward(monkeypatch):
    mlp, x = _patched_bf16_mlp()
    mlp.float()  # the same Parameters, now fp32
    calls = _count_calls(monkeypatch)
    torch.testing.assert_close(mlp(x.float()), MLP.forward(mlp, x.float()), rtol=0, atol=0)
    assert calls == []


def test_a_deep_copy_after_the_first_call_uses_its_own_weights():
    import copy

    mlp, x = _patched_bf16_mlp()
    twin = copy.deepcopy(mlp)
    with torch.no_grad():
        twin.gate_proj.weight.zero_()  # silu(0) = 0: the copy's output is zero, the original's is not
    assert torch.count_nonzero(twin(x)) == 0 and torch.count_nonzero(mlp(x)) > 0


class Doubling(nn.Linear):
    """An nn.Linear subclass with a forward of its own (the shape of adapter and quantized wrappers)."""

    def forward(self, x):
        return super().forward(x) * 2


def test_linear_subclasses_with_their_own_forward_are_not_fused(monkeypatch):
    mlp = MLP(H=32, I=24).to(torch.bfloat16)
    wrapped = Doubling(32, 24, bias=False).to(torch.bfloat16)
    wrapped.weight = mlp.up_proj.weight
    mlp.up_proj = wrapped
    with pytest.warns(UserWarning, match="gate_proj or up_proj overrides nn.Linear.forward"):
        assert fuse_swiglu_mlps(mlp, backend="torch") == []
    mlp, x = _patched_bf16_mlp()  # and swapped in after the first call
    wrapped = Doubling(32, 24, bias=False).to(torch.bfloat16)
    wrapped.weight = mlp.gate_proj.weight
    mlp.gate_proj = wrapped
    calls = _count_calls(monkeypatch)
    torch.testing.assert_close(mlp(x), MLP.forward(mlp, x), rtol=0, atol=0)
    assert calls == []


@pytest.mark.parametrize("kind", ["forward", "forward_pre", "full_backward"])
def test_global_module_hooks_run_the_original_forward(kind, monkeypatch):
    from torch.nn.modules import module as torch_module

    mlp, x = _patched_bf16_mlp()
    seen = []
    register = getattr(torch_module, f"register_module_{kind}_hook")
    handle = register(lambda *args: seen.append(type(args[0]).__name__))
    try:
        calls = _count_calls(monkeypatch)
        y = mlp(x.clone().requires_grad_(kind == "full_backward"))
        if kind == "full_backward":
            y.float().sum().backward()
        assert calls == [] and seen.count("Linear") == 3  # gate_proj, up_proj and down_proj ran
    finally:
        handle.remove()
    calls = _count_calls(monkeypatch)
    mlp(x)
    assert calls == [("block", "")]  # hooks gone: the fused path again (the weights require grad)


@pytest.mark.parametrize("kind", ["full_backward", "full_backward_pre"])
def test_backward_hooks_on_gate_or_up_run_the_original_forward(kind, monkeypatch):
    mlp, x = _patched_bf16_mlp()
    seen = []
    getattr(mlp.gate_proj, f"register_{kind}_hook")(lambda *args: seen.append(1))
    calls = _count_calls(monkeypatch)
    mlp(x.clone().requires_grad_()).float().sum().backward()
    assert calls == [] and seen == [1]


def test_disarm_leaves_exactly_the_unarmed_state():
    """_disarm (attribute by attribute, for Dynamo) and _UNARMED (used when pickling) name the same state."""
    from fused_swiglu.patch.dense import FusedSwiGLUForward

    mlp = MLP()
    fuse_swiglu_mlps(mlp, backend="torch")
    forward = vars(mlp)["_fused_swiglu"]
    assert isinstance(forward, FusedSwiGLUForward)
    mlp(torch.randn(2, mlp.gate_proj.in_features, dtype=torch.bfloat16))  # the first call arms the fast path
    forward._disarm()
    assert {k: getattr(forward, k) for k in FusedSwiGLUForward._UNARMED} == FusedSwiGLUForward._UNARMED
    assert forward.__getstate__().keys() == vars(forward).keys()


def test_training_runs_the_whole_block_and_inference_the_up_projection(monkeypatch):
    mlp, x = _patched_bf16_mlp()
    stock = MLP(H=32, I=24).to(torch.bfloat16)
    stock.load_state_dict(mlp.state_dict())
    calls = _count_calls(monkeypatch)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    mlp(xs[0]).float().sum().backward()
    MLP.forward(stock, xs[1]).float().sum().backward()
    assert calls == [("block", "")]
    for p, q in zip(mlp.parameters(), stock.parameters()):
        assert ((p.grad.double() - q.grad.double()).norm() / q.grad.double().norm()).item() < 2e-2
    with torch.no_grad():
        mlp(x)
    assert calls[-1] == ("op", "")


@pytest.mark.parametrize("change, want", [("recompute", [("op", "")]), ("down_hook", [("op", "")]),
                                          ("down_bias", [])])  # a bias: not a SwiGLU block any more
def test_the_whole_block_needs_a_plain_down_proj(change, want, monkeypatch):
    mlp = MLP(H=32, I=24).to(torch.bfloat16)
    fuse_swiglu_mlps(mlp, backend="torch", recompute=change == "recompute")
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    if change == "down_bias":
        mlp.down_proj.bias = nn.Parameter(torch.zeros(32, dtype=torch.bfloat16))
    if change == "down_hook":
        mlp(x)  # armed with the plain layer; the hook comes after
        mlp.down_proj.register_forward_hook(lambda *a: None)
    calls = _count_calls(monkeypatch)
    mlp(x).float().sum().backward()
    assert calls == want


def test_hooks_on_act_fn_run_the_original_forward(monkeypatch):
    model = nn.Sequential(Block())
    model.to(torch.bfloat16)
    seen = []
    model[0].mlp.act_fn.register_forward_hook(lambda *a: seen.append(1))
    with pytest.warns(UserWarning, match="act_fn has hooks"):
        assert fuse_swiglu_mlps(model, backend="torch") == []
    model[0].mlp.act_fn._forward_hooks.clear()
    assert fuse_swiglu_mlps(model, backend="torch") == ["0.mlp"]
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    model(x)  # arms the fast path
    model[0].mlp.act_fn.register_forward_hook(lambda *a: seen.append(1))
    model(x)
    assert seen == [1]


def test_x_of_another_width_after_a_good_call_is_named_not_run(monkeypatch):
    mlp = MLP(H=64, I=96)
    fuse_swiglu_mlps(mlp, backend="torch")
    mlp(torch.randn(3, 64, dtype=torch.bfloat16))  # arms the fast path
    calls = _count_calls(monkeypatch)
    for grad in (True, False):
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=r"x must have shape \(\.\.\., H\) with H"):
            mlp(torch.randn(3, 72, dtype=torch.bfloat16))
    assert all(c[0] == "swiglu" for c in calls)  # never the armed operators


def test_a_patched_block_keeps_its_class_name_and_isinstance_and_gets_its_class_back():
    mlp = MLP()
    fuse_swiglu_mlps(mlp)
    assert isinstance(mlp, MLP) and type(mlp) is not MLP and type(mlp).__name__ == "MLP"
    assert repr(mlp).startswith("MLP(") and "forward" not in vars(mlp)
    assert type(MLP()) is MLP  # other instances keep the class
    unfuse_swiglu_mlps(mlp)
    assert type(mlp) is MLP and "_fused_swiglu" not in vars(mlp)


def test_a_patched_model_pickles_by_its_original_classes():
    import pickle

    model = nn.Sequential(Block(), Block())
    fuse_swiglu_mlps(model)
    data = pickle.dumps(model)
    loaded = pickle.loads(data)
    assert type(loaded[0].mlp) is type(model[0].mlp) and loaded[0].mlp._fused_swiglu.module is loaded[0].mlp
    again = saved_and_loaded(model)
    assert unfuse_swiglu_mlps(again) == ["0.mlp", "1.mlp"] and type(again[1].mlp) is MLP


def test_the_fallback_warning_of_a_patched_block_points_at_the_callers_line(monkeypatch):
    from fused_swiglu import _validate

    monkeypatch.setattr(_validate, "_warned", set())
    mlp = MLP()
    fuse_swiglu_mlps(mlp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mlp(torch.randn(2, 3, 64, dtype=torch.bfloat16))
    fallback = [w for w in caught if "PyTorch fallback" in str(w.message)]
    assert len(fallback) == 1 and fallback[0].filename == __file__


def _patched_and_stock_blocks():
    torch.manual_seed(0)
    stock = nn.Sequential(nn.LayerNorm(64, dtype=torch.bfloat16), MLP())
    patched = nn.Sequential(nn.LayerNorm(64, dtype=torch.bfloat16), MLP())
    patched.load_state_dict(stock.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fuse_swiglu_mlps(patched) == ["1"]
    return patched, stock, torch.randn(5, 64, dtype=torch.bfloat16)


def test_fx_and_jit_tracing_record_the_block_s_own_forward():
    patched, stock, x = _patched_and_stock_blocks()
    assert torch.equal(torch.fx.symbolic_trace(patched)(x), stock(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(patched, x)
    assert torch.equal(traced(x), stock(x))


def test_an_autocast_to_another_dtype_runs_the_block_s_own_forward(monkeypatch):
    patched, stock, x = _patched_and_stock_blocks()
    calls = _count_calls(monkeypatch)
    with torch.autocast("cpu", dtype=torch.float16):
        out, want = patched(x), stock(x)
    assert out.dtype == torch.float16 and torch.equal(out, want) and not calls
    with torch.autocast("cpu", dtype=torch.bfloat16):  # x's own dtype: the patch serves it
        patched(x)
    assert calls


def test_a_call_without_a_tensor_is_the_block_s_own_error():
    patched, stock, _ = _patched_and_stock_blocks()
    with pytest.raises(TypeError) as got:
        patched[1]([1.0] * 64)
    with pytest.raises(TypeError) as want:
        stock[1]([1.0] * 64)
    assert str(got.value) == str(want.value)


def test_where_the_unfused_path_is_predicted_faster_a_patched_block_runs_its_own_forward(monkeypatch):
    from fused_swiglu import _dispatch

    torch.manual_seed(0)
    mlp = MLP()
    stock = MLP()
    stock.load_state_dict(mlp.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse_swiglu_mlps(mlp)
    asked = []

    def faster(self, x):
        asked.append(x.numel() // x.shape[-1])
        return True

    monkeypatch.setattr(dense.FusedSwiGLUForward, "_unfused_faster", faster)
    calls = []
    real = dense.run_op
    monkeypatch.setattr(dense, "run_op", lambda *a, **k: calls.append(1) or real(*a, **k))
    big = torch.randn(2, _dispatch.UNFUSED_CHECK_FROM // 2, 64, dtype=torch.bfloat16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp(big)  # arms the fast path
        calls.clear()
        torch.testing.assert_close(mlp(big), stock(big), rtol=0, atol=0)  # the block's own forward
        assert calls == [] and asked[-1] == _dispatch.UNFUSED_CHECK_FROM
        small = torch.randn(3, 64, dtype=torch.bfloat16)
        n = len(asked)
        mlp(small)  # decode sizes never ask
        assert len(asked) == n and calls == [1]


def test_where_the_data_measured_the_fused_training_step_slower_a_patched_block_trains_unfused(monkeypatch):
    torch.manual_seed(0)
    mlp, stock = MLP(), MLP()
    stock.load_state_dict(mlp.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse_swiglu_mlps(mlp)
    measured = []
    monkeypatch.setattr(dense, "training_unfused_measured", lambda x: measured.append(tuple(x.shape)) or True)
    whole = []
    monkeypatch.setattr(dense.FusedSwiGLUForward, "_whole_block", lambda self, x: whole.append(1))
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp(x)  # arms the fast path
        measured.clear()
        y = mlp(x)  # the parameters require grad: a training call
        assert measured == [(2, 3, 64)] and whole == []
        torch.testing.assert_close(y, stock(x), rtol=0, atol=0)  # the block's own forward
        y.float().sum().backward()
        assert mlp.gate_proj.weight.grad is not None
        with torch.no_grad():
            mlp(x)  # inference: never asked
        assert measured == [(2, 3, 64)]
        monkeypatch.setattr(dense, "training_unfused_measured", lambda x: False)
        mlp(x)
        assert whole == [1]  # else the whole-block operator


def test_the_patch_is_a_block_patch_that_sees_hooks_and_is_detached_on_unfuse(monkeypatch):
    from fused_swiglu.patch.base import BlockPatch, installed

    mlp = MLP()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fuse_swiglu_mlps(mlp)
    patch = installed(mlp)
    assert isinstance(patch, BlockPatch) and patch.base is MLP and patch.backend == "auto"
    assert not patch.hooks_run()
    handle = mlp.act_fn.register_forward_hook(lambda *a: None)
    assert patch.hooks_run()
    handle.remove()
    detached = []
    monkeypatch.setattr(type(patch), "detach", lambda self: detached.append(self))
    unfuse_swiglu_mlps(mlp)
    assert detached == [patch] and type(mlp) is MLP and installed(mlp) is None


def test_a_class_forward_reassigned_after_patching_runs_unfused_until_it_is_back(monkeypatch):
    """A patch is verified against the block's forward at patch time: a class whose forward is
    reassigned later (here to GELU) gets that forward, with one warning, and the patch again once the
    verified forward is back."""

    class Local(MLP):  # a class of this test alone: its forward is reassigned below
        pass

    torch.manual_seed(0)
    mlp = Local()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    served = []
    real = dense.FusedSwiGLUForward.__call__
    monkeypatch.setattr(dense.FusedSwiGLUForward, "__call__", lambda self, x: served.append(1) or real(self, x))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    verified = MLP.forward

    def gelu_forward(self, x):
        return self.down_proj(torch.nn.functional.gelu(self.gate_proj(x)) * self.up_proj(x))

    with torch.no_grad():
        mlp(x)
        assert served == [1]
        monkeypatch.setattr(MLP, "forward", gelu_forward)  # inherited by Local
        with pytest.warns(RuntimeWarning, match=r"Local.forward is no longer the forward fuse_swiglu_mlps checked"):
            got = mlp(x)
        assert served == [1] and torch.equal(got, gelu_forward(mlp, x))
        monkeypatch.setattr(MLP, "forward", verified)
        mlp(x)
        assert served == [1, 1]
