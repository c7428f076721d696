"""fused_backend: torch.compile with the SwiGLU products rewritten into fused_swiglu::swiglu_dual
(fused_swiglu.compile_fusion).

The graphs are compiled by AOTAutograd with capturing compilers (the forward and backward graphs it
builds are kept and searched for the operator), by Inductor in the tests that say so. On the CPU the
rewrite runs only with force=True (the operator's CPU kernel); the default leaves the graph as it is.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fused_swiglu
from fused_swiglu import compile_fusion
from fused_swiglu.compile_fusion import FusedSwiGLUBackend, fuse_graph, fused_backend
from compile_fusion_common import backward_calls, fresh_dynamo  # noqa: F401 (fixtures)

OP = torch.ops.fused_swiglu.swiglu_dual.default
SILU = torch.ops.aten.silu.default
H, I = 64, 128
BF16 = torch.bfloat16


class Capture:
    """An AOTAutograd backend that keeps the forward (or inference) and backward graphs it compiles
    and runs them as they are."""

    def __init__(self):
        self.fw: list[torch.fx.GraphModule] = []
        self.bw: list[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func

        def keep(graphs):
            def compiler(g, _inputs):
                graphs.append(g)
                return make_boxed_func(g.forward)

            return compiler

        return aot_autograd(fw_compiler=keep(self.fw), bw_compiler=keep(self.bw))(gm, example_inputs)

    def count(self, target, graphs=None) -> int:
        graphs = self.fw if graphs is None else graphs
        return sum(n.op == "call_function" and n.target is target for g in graphs for n in g.graph.nodes)


def compiled(model, force=True, **kwargs):
    """(compiled model, backend, capture)."""
    capture = Capture()
    backend = fused_backend(capture, force=force, **kwargs)
    return torch.compile(model, backend=backend), backend, capture


def assert_close_bf16(actual, expected, rel=2e-2):
    """Within bf16 rounding: the largest difference at most ``rel`` of the largest magnitude."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = expected.detach().float().abs().max().item()
    diff = (actual.detach().float() - expected.detach().float()).abs().max().item()
    assert diff <= rel * scale + 1e-6, f"max difference {diff} against max magnitude {scale}"


def params_like(*shapes, dtype=BF16):
    return [nn.Parameter(torch.randn(*s, dtype=torch.float32).div(s[-1] ** 0.5).to(dtype)) for s in shapes]


# --- models ----------------------------------------------------------------------------------------


class TwoLinear(nn.Module):
    """Hugging Face's layout: gate_proj, up_proj, an nn.SiLU act_fn."""

    def __init__(self, h=H, i=I, dtype=BF16, bias=False, act=None):
        super().__init__()
        self.gate_proj = nn.Linear(h, i, bias=bias, dtype=dtype)
        self.up_proj = nn.Linear(h, i, bias=bias, dtype=dtype)
        self.act_fn = act if act is not None else nn.SiLU()

    def forward(self, x):
        return self.act_fn(self.gate_proj(x)) * self.up_proj(x)


class GateUpParams(nn.Module):
    """W_gate and W_up as bare parameters (``w_gate``, ``w_up``) of ``shape``: (I, H) as nn.Linear stores
    them, or another; the subclasses' forward multiplies by them."""

    def __init__(self, shape=(I, H)):
        super().__init__()
        self.w_gate, self.w_up = params_like(shape, shape)


class MatmulT(GateUpParams):
    """``x @ W.T`` and ``torch.matmul(x, W.t())``, the product's operands in the other order."""

    def forward(self, x):
        return torch.matmul(x, self.w_up.t()) * F.silu(x @ self.w_gate.T)


class Concatenated(nn.Module):
    """One linear over [W_gate; W_up], then chunk, split or slices."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.gate_up_proj = nn.Linear(H, 2 * I, bias=False, dtype=BF16)

    def forward(self, x):
        gu = self.gate_up_proj(x)
        if self.how == "chunk":
            g, u = gu.chunk(2, dim=-1)
        elif self.how == "split":
            g, u = torch.split(gu, I, dim=-1)
        elif self.how == "split-list":
            g, u = gu.split([I, I], dim=-1)
        elif self.how == "slice":
            g, u = gu[..., :I], gu[..., I:]
        else:  # Phi-3's order: up_states * act(gate)
            g, u = gu.narrow(-1, 0, I), gu.narrow(-1, I, I)
            return u * F.silu(g)
        return F.silu(g) * u


class ViewsAround(GateUpParams):
    """x viewed to 2-D, the products viewed back to 3-D before silu and the product."""

    def forward(self, x):
        b, s, _ = x.shape
        x2 = x.view(-1, H)
        g = (x2 @ self.w_gate.T).view(b, s, I)
        u = torch.matmul(x2, self.w_up.T).view(b, s, I)
        return (F.silu(g) * u).reshape(b * s, I)


class Swapped(nn.Module):
    """silu applied to the product named "up": that weight is the operator's gate."""

    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False, dtype=BF16)
        self.up_proj = nn.Linear(H, I, bias=False, dtype=BF16)

    def forward(self, x):
        return F.silu(self.up_proj(x)) * self.gate_proj(x)


class ExtraUse(TwoLinear):
    """An intermediate of the pattern is also returned."""

    def __init__(self, which):
        super().__init__()
        self.which = which

    def forward(self, x):
        g, u = self.gate_proj(x), self.up_proj(x)
        s = F.silu(g)
        return s * u, {"gate": g, "up": u, "silu": s}[self.which]


class SpelledOutSilu(TwoLinear):
    def forward(self, x):
        g = self.gate_proj(x)
        return g * torch.sigmoid(g) * self.up_proj(x)


class OtherInput(TwoLinear):
    def forward(self, x, x2):
        return F.silu(self.gate_proj(x)) * self.up_proj(x2)


class Untransposed(GateUpParams):
    """``x @ W`` with the weights stored (H, I)."""

    def __init__(self):
        super().__init__((H, I))

    def forward(self, x):
        return F.silu(x @ self.w_gate) * (x @ self.w_up)


def tiny_config(name):
    transformers = pytest.importorskip("transformers")
    config_class = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}[name]
    return config_class(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=128)


def tiny_model(name):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(tiny_config(name)).to(BF16)


# --- (a, b) found, replaced, and equal to eager --------------------------------------------------------


CASES = {
    "two-linear": (TwoLinear, (2, 5, H)),
    "two-linear-2d": (TwoLinear, (7, H)),
    "matmul-t": (MatmulT, (2, 5, H)),
    "views-around": (ViewsAround, (2, 5, H)),
    "spelled-out-silu": (SpelledOutSilu, (3, H)),
    **{f"concatenated-{how}": ((lambda how=how: Concatenated(how)), (2, 5, H))
       for how in ("chunk", "split", "split-list", "slice", "narrow")},
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_swiglu_product_is_replaced_and_equals_eager(case):
    make, shape = CASES[case]
    torch.manual_seed(0)
    model = make()
    x = torch.randn(*shape, dtype=BF16)
    f, backend, capture = compiled(model)
    with torch.no_grad():
        y, expected = f(x), model(x)
    assert len(backend.fused) == 1 and backend.unfused == [], backend
    assert capture.count(OP) == 1
    assert capture.count(SILU) == 0  # the unfused silu is gone
    assert_close_bf16(y, expected)
    layout = "concatenated" if case.startswith("concatenated") else "separate"
    assert backend.fused[0].layout == layout and backend.fused[0].shape == (I, H)


def test_the_operand_under_silu_is_the_gate():
    """silu(x @ W_up.T) * (x @ W_gate.T): the operator gets W_up as its gate, so the result and both
    weights' gradients equal eager's (with the weights in the other order they would not)."""
    torch.manual_seed(0)
    model = Swapped()
    x = torch.randn(2, 5, H, dtype=BF16)
    f, backend, capture = compiled(model)
    y = f(x)
    assert capture.count(OP) == 1
    record = backend.fused[0]
    assert "up_proj" in record.gate and "gate_proj" in record.up, record
    y.float().square().sum().backward()
    grads = [p.grad.clone() for p in (model.gate_proj.weight, model.up_proj.weight)]
    model.zero_grad()
    expected = model(x)
    expected.float().square().sum().backward()
    assert_close_bf16(y, expected)
    for got, want in zip(grads, (model.gate_proj.weight.grad, model.up_proj.weight.grad)):
        assert_close_bf16(got, want, rel=3e-2)


def test_dynamic_shapes():
    """Symbolic batch and sequence sizes: one graph serves both calls, each with the operator."""
    torch.manual_seed(0)
    model = Concatenated("chunk")
    capture = Capture()
    backend = fused_backend(capture, force=True)
    f = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for shape in ((2, 3, H), (4, 7, H)):
            x = torch.randn(*shape, dtype=BF16)
            assert_close_bf16(f(x), model(x))
    assert backend.graphs == 1 and capture.count(OP) == 1


def test_promoted_accumulation_reaches_the_operator():
    f, backend, capture = compiled(TwoLinear(), accumulation="promoted")
    with torch.no_grad():
        f(torch.randn(3, H, dtype=BF16))
    (node,) = [n for g in capture.fw for n in g.graph.nodes if n.target is OP]
    assert node.args[-1] == "promoted"


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_transformers_models_inference(name):
    model = tiny_model(name).eval()
    ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))
    f, backend, capture = compiled(model)
    with torch.no_grad():
        logits = f(ids).logits
        expected = model(ids).logits
    layers = model.config.num_hidden_layers
    assert len(backend.fused) == layers and backend.unfused == [], backend
    assert capture.count(OP) == layers
    assert capture.count(SILU) == 0
    assert all("mlp_modules_gate_proj" in r.gate and "mlp_modules_up_proj" in r.up for r in backend.fused)
    assert_close_bf16(logits, expected, rel=3e-2)


# --- (c) training --------------------------------------------------------------------------------------


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_transformers_models_training(name, backward_calls):
    """A backward through the compiled model runs the operator's backward and gives eager's gradients."""
    model = tiny_model(name).train()
    ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))
    f, backend, capture = compiled(model)
    loss = f(ids, labels=ids).loss
    loss.backward()
    got = _grads(model)
    model.zero_grad()
    expected_loss = model(ids, labels=ids).loss
    expected_loss.backward()
    expected = _grads(model)
    layers = model.config.num_hidden_layers
    assert capture.count(OP) == layers and len(capture.bw) == 1
    assert len(backward_calls) == layers  # the operator's backward, once per MLP
    assert abs(loss.item() - expected_loss.item()) <= 1e-2 * abs(expected_loss.item())
    assert got.keys() == expected.keys() and any("mlp" in n for n in got)
    for n in expected:
        assert_close_bf16(got[n], expected[n], rel=5e-2)


def test_training_hand_written_mlp_gradients(backward_calls):
    """x, both weights and the down projection get eager's gradients; the operator's backward ran."""
    torch.manual_seed(0)
    model = nn.Sequential(Concatenated("chunk"), nn.Linear(I, H, bias=False, dtype=BF16))
    x = torch.randn(2, 5, H, dtype=BF16, requires_grad=True)
    f, backend, capture = compiled(model)
    f(x).float().square().sum().backward()
    got = [x.grad.clone(), *(p.grad.clone() for p in model.parameters())]
    x.grad = None
    model.zero_grad()
    model(x).float().square().sum().backward()
    expected = [x.grad, *(p.grad for p in model.parameters())]
    assert capture.count(OP) == 1 and backward_calls == [1]
    for a, b in zip(got, expected):
        assert_close_bf16(a, b, rel=3e-2)


def test_inductor_compiles_the_rewritten_graph_for_training(backward_calls):
    """The default inner backend: Inductor compiles the forward with the operator and the backward
    traced from the operator's registered one."""
    torch.manual_seed(0)
    model = nn.Sequential(TwoLinear(), nn.Linear(I, H, bias=False, dtype=BF16))
    x = torch.randn(2, 5, H, dtype=BF16, requires_grad=True)
    backend = fused_backend(force=True)
    # no cached artifact from an earlier run: the backward must be traced here to be counted
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False):
        torch.compile(model, backend=backend)(x).float().square().sum().backward()
    got = [x.grad.clone(), *(p.grad.clone() for p in model.parameters())]
    x.grad = None
    model.zero_grad()
    model(x).float().square().sum().backward()
    assert len(backend.fused) == 1 and backward_calls == [1]
    for a, b in zip(got, [x.grad, *(p.grad for p in model.parameters())]):
        assert_close_bf16(a, b, rel=3e-2)


# --- (d) graphs left as they are -------------------------------------------------------------------------


def _untouched(model, *inputs, reason=None):
    """Compile with force=True; assert nothing was replaced, the result equals eager, and the reason
    recorded (None: not even a candidate)."""
    f, backend, capture = compiled(model)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = f(*inputs)
        expected = model(*inputs)
    assert capture.count(OP) == 0 and backend.fused == []
    for a, b in zip(torch.utils._pytree.tree_leaves(y), torch.utils._pytree.tree_leaves(expected)):
        torch.testing.assert_close(a, b)
    if reason is None:
        assert backend.unfused == [] and not [w for w in caught if "fused_backend" in str(w.message)]
    else:
        assert len(backend.unfused) == 1 and reason in backend.unfused[0].reason, backend.unfused
        assert [w for w in caught if "fused_backend" in str(w.message) and reason in str(w.message)]
    return backend


def test_fp32_weights_are_left():
    _untouched(TwoLinear(dtype=torch.float32), torch.randn(3, H), reason="torch.float32")


@pytest.mark.parametrize("h, i", [(H, 12), (60, I)], ids=["I=12", "H=60"])
def test_sizes_not_multiples_of_8_are_left(h, i):
    _untouched(TwoLinear(h=h, i=i), torch.randn(3, h, dtype=BF16), reason="multiples of 8")


def test_gelu_is_not_a_candidate():
    _untouched(TwoLinear(act=nn.GELU()), torch.randn(3, H, dtype=BF16))


def test_biases_are_left():
    _untouched(TwoLinear(bias=True), torch.randn(3, H, dtype=BF16), reason="bias")


@pytest.mark.parametrize("which", ["gate", "up", "silu"])
def test_an_intermediate_read_elsewhere_is_left(which):
    _untouched(ExtraUse(which), torch.randn(3, H, dtype=BF16), reason="is also read by")


def test_the_concatenated_product_read_elsewhere_is_left():
    class Leaky(Concatenated):
        def forward(self, x):
            gu = self.gate_up_proj(x)
            g, u = gu.chunk(2, dim=-1)
            return F.silu(g) * u, gu.sum()

    _untouched(Leaky("chunk"), torch.randn(3, H, dtype=BF16), reason="is also read by")


def test_different_inputs_are_left():
    x, x2 = torch.randn(2, 3, H, dtype=BF16).unbind(0)
    _untouched(OtherInput(), x, x2, reason="different activation tensors")


def test_untransposed_weights_are_left():
    torch.manual_seed(0)
    _untouched(Untransposed(), torch.randn(3, H, dtype=BF16), reason="(I, H) row-major")


def test_autocast_to_another_dtype_is_left():
    """A bf16 model under fp16 autocast: the products are fp16, which the operator on bf16 x is not."""
    model = TwoLinear()
    with torch.autocast("cpu", dtype=torch.float16):
        _untouched(model, torch.randn(3, H, dtype=BF16), reason="autocast")


def test_autocast_to_the_models_dtype_is_replaced():
    torch.manual_seed(0)
    model = TwoLinear()
    x = torch.randn(3, H, dtype=BF16)
    f, backend, capture = compiled(model)
    with torch.no_grad(), torch.autocast("cpu", dtype=BF16):
        y, expected = f(x), model(x)
    assert capture.count(OP) == 1 and len(backend.fused) == 1
    assert_close_bf16(y, expected)


# --- (e) no global state -------------------------------------------------------------------------------


def test_the_backend_changes_no_global_state():
    """Inductor with options compiles the rewritten graph; afterwards Inductor's config is as before
    and a plain torch.compile is not rewritten."""
    before = torch._inductor.config.get_config_copy()
    hooks = ("pre_grad_custom_pass", "joint_custom_pre_pass", "post_grad_custom_pre_pass", "post_grad_custom_post_pass")
    torch.manual_seed(0)
    model = TwoLinear()
    x = torch.randn(2, 5, H, dtype=BF16)
    backend = fused_backend(force=True)
    f = torch.compile(model, backend=backend, options={"fallback_random": True})
    with torch.no_grad():
        assert_close_bf16(f(x), model(x))
    assert len(backend.fused) == 1
    assert torch._inductor.config.get_config_copy() == before
    assert all(getattr(torch._inductor.config, h) is None for h in hooks)
    torch._dynamo.reset()
    capture = Capture()
    with torch.no_grad():
        torch.compile(model, backend=capture)(x)
    assert capture.count(OP) == 0 and capture.count(SILU) == 1


# --- (f) the default on a CPU ----------------------------------------------------------------------------


def test_the_default_leaves_cpu_graphs_with_one_warning():
    torch.manual_seed(0)
    model = TwoLinear()
    f, backend, capture = compiled(model, force=False)
    with torch.no_grad(), pytest.warns(UserWarning, match="tensors are on the CPU.*force=True") as caught:
        y = f(torch.randn(3, H, dtype=BF16))
    assert [w.filename for w in caught if "left unfused" in str(w.message)] == [__file__]  # the user's call
    assert capture.count(OP) == 0 and capture.count(SILU) == 1
    assert backend.fused == [] and len(backend.unfused) == 1
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # once per backend
        f(torch.randn(3, 5, H, dtype=BF16))  # a second graph (another rank)
    assert backend.graphs == 2 and len(backend.unfused) == 2
    assert y.shape == (3, I)


def test_a_gpu_other_than_hopper_is_never_rewritten(monkeypatch):
    monkeypatch.setattr(compile_fusion.v, "hopper_status", lambda device: "device cuda:0 has compute capability 8.0")
    reason = compile_fusion._device_reason(torch.device("cuda", 0), force=True)
    assert reason is not None and "compute capability 8.0" in reason
    assert compile_fusion._device_reason(torch.device("cpu"), force=True) is None
    assert "force=True" in compile_fusion._device_reason(torch.device("cpu"), force=False)


# --- arguments -----------------------------------------------------------------------------------------


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="force must be a bool"):
        fused_backend(force=1)
    with pytest.raises(ValueError, match="accumulation"):
        fused_backend(accumulation="exact")
    with pytest.raises(ValueError, match="inner must name a torch.compile backend"):
        fused_backend("no-such-backend")
    with pytest.raises(TypeError, match="inner must be a backend name or a callable"):
        fused_backend(3)
    with pytest.raises(TypeError, match="torch.fx.GraphModule"):
        fuse_graph(nn.Linear(2, 2))


def test_the_package_exports_the_backend():
    assert fused_swiglu.fused_backend is fused_backend
    assert isinstance(fused_swiglu.fused_backend("eager"), FusedSwiGLUBackend)


# --- on a Hopper GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_hopper_default_rewrites_a_transformers_model(grad, backward_calls):
    model = tiny_model("qwen2").cuda().train(grad)
    ids = torch.randint(0, 128, (2, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    f, backend, capture = compiled(model, force=False)
    with torch.set_grad_enabled(grad):
        out = f(ids, labels=ids)
        expected = model(ids, labels=ids)
    assert capture.count(OP) == 2 and backend.unfused == []
    assert_close_bf16(out.logits, expected.logits, rel=3e-2)
    if grad:
        out.loss.backward()
        got = _grads(model)
        model.zero_grad()
        expected.loss.backward()
        assert len(backward_calls) == 2
        for n, g in _grads(model).items():
            assert_close_bf16(got[n], g, rel=5e-2)


def test_a_copy_of_the_backend_is_the_backend_so_its_records_stay_readable():
    import copy

    backend = fused_swiglu.fused_backend()
    assert copy.deepcopy(backend) is backend and copy.copy(backend) is backend
    assert copy.deepcopy({"backend": backend})["backend"] is backend  # as a deep-copied config holds it
