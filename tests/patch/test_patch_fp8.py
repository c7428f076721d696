"""fuse_swiglu_mlps on MLP blocks quantized with transformers' fine-grained FP8 (fused_swiglu.patch.fp8),
on the CPU (the block-scaled operator's CPU kernel)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from fused_swiglu import fp8, fuse_swiglu_mlps, unfuse_swiglu_mlps
from fused_swiglu.patch import fp8 as fp8_patch

from fp8_models import FP8Linear, FP8MLP, dequantize_blocks, fp8_linear, reference_forward
from model_copies import COPIES


@pytest.fixture(autouse=True)
def reference_fp8_linear(monkeypatch):
    """FP8Linear's own forward needs kernels from the Hugging Face Hub: the tests run a reference."""
    monkeypatch.setattr(FP8Linear, "forward", reference_forward)


@pytest.fixture
def mlp(seed):
    """The tests' block: an FP8MLP (H = 256, I = 384) that fuse_swiglu_mlps has patched (torch's generators
    seeded first)."""
    mlp = FP8MLP()
    fuse_swiglu_mlps(mlp)
    return mlp


class Model(nn.Module):
    def __init__(self, n=2, **kw):
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleDict({"mlp": FP8MLP(**kw)}) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer["mlp"](x)
        return x


def _expected(mlp: FP8MLP, x: torch.Tensor) -> torch.Tensor:
    """down_proj(y) with y from float64 products of the dequantized operands, rounded once to bf16."""
    H = x.shape[-1]
    xq, xs = fp8.quantize_e4m3_groups(x.reshape(-1, H))
    xd = (xq.double() * xs.double().repeat_interleave(128, 1)[:, :H])
    g = xd @ dequantize_blocks(mlp.gate_proj.weight, mlp.gate_proj.weight_scale_inv).double().T
    u = xd @ dequantize_blocks(mlp.up_proj.weight, mlp.up_proj.weight_scale_inv).double().T
    y = (torch.nn.functional.silu(g) * u).to(torch.bfloat16)
    return mlp.down_proj(y).view(*x.shape[:-1], H)


def _float64_model(model: Model, x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    for layer in model.layers:
        mlp = layer["mlp"]
        w = [dequantize_blocks(p.weight, p.weight_scale_inv).double() for p in (mlp.gate_proj, mlp.up_proj,
                                                                                mlp.down_proj)]
        x = x + (torch.nn.functional.silu(x @ w[0].T) * (x @ w[1].T)) @ w[2].T
    return x


def _calls(monkeypatch):
    """Calls of the fused path: the shape of x as the operator got it."""
    calls = []
    real = fp8_patch.swiglu_packed_fp8_op

    def counting(x, *args):
        calls.append(tuple(x.shape))
        return real(x, *args)

    monkeypatch.setattr(fp8_patch, "swiglu_packed_fp8_op", counting)
    return calls


def test_fp8_blocks_are_patched_and_match_the_fused_reference(monkeypatch):
    torch.manual_seed(0)
    model = Model()
    x = torch.randn(2, 5, 256, dtype=torch.bfloat16)
    stock = model(x)
    calls = _calls(monkeypatch)
    assert fuse_swiglu_mlps(model) == ["layers.0.mlp", "layers.1.mlp"]
    mlp = model.layers[0]["mlp"]
    assert isinstance(vars(mlp)["_fused_swiglu"], fp8_patch.FusedFP8SwiGLUForward)
    torch.testing.assert_close(mlp(x), _expected(mlp, x), rtol=0, atol=0)
    assert calls == [(10, 256)]
    # against the model in float64 (dequantized weights, x not quantized), the patched model errs no
    # more than the unpatched FP8 model does
    ref = _float64_model(model, x)
    err_stock, err_fused = ((out.double() - ref).norm() / ref.norm() for out in (stock, model(x)))
    assert err_fused <= 1.05 * err_stock, (err_fused, err_stock)
    assert unfuse_swiglu_mlps(model) == ["layers.0.mlp", "layers.1.mlp"]
    assert "forward" not in vars(mlp)
    torch.testing.assert_close(model(x), stock, rtol=0, atol=0)


def test_the_packed_copy_holds_the_weights_and_scales():
    torch.manual_seed(1)
    mlp = FP8MLP(H=272, I=136)  # partial last blocks along both I and H
    fuse_swiglu_mlps(mlp)
    patch = vars(mlp)["_fused_swiglu"]
    w, s = fp8.pack_weights_blockwise(mlp.gate_proj.weight, mlp.up_proj.weight, mlp.gate_proj.weight_scale_inv,
                                      mlp.up_proj.weight_scale_inv)
    assert torch.equal(patch.w_packed.view(torch.uint8), w.view(torch.uint8))
    assert torch.equal(patch.w_scale, s)
    x = torch.randn(3, 272, dtype=torch.bfloat16)
    torch.testing.assert_close(mlp(x), _expected(mlp, x), rtol=0, atol=0)


@pytest.mark.parametrize("change", ["in_place", "replaced_weight", "replaced_scale", "replaced_layer"])
def test_weights_changed_after_patching_are_repacked(mlp, change):
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    before = mlp(x)
    other = fp8_linear(torch.randn(384, 256, dtype=torch.bfloat16) / 16)
    if change == "in_place":
        with torch.no_grad():
            mlp.up_proj.weight.copy_(other.weight)
            mlp.up_proj.weight_scale_inv.copy_(other.weight_scale_inv)
    elif change == "replaced_weight":
        mlp.up_proj.weight = other.weight
        mlp.up_proj.weight_scale_inv = other.weight_scale_inv
    elif change == "replaced_scale":
        mlp.up_proj.weight_scale_inv = nn.Parameter(other.weight_scale_inv * 2, requires_grad=False)
    else:
        mlp.up_proj = other
    after = mlp(x)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, _expected(mlp, x), rtol=0, atol=0)


@pytest.mark.parametrize("change, says", [
    ("per_tensor", "block_size is None"),
    ("static", "activation_scheme is 'static'"),
    ("bias", "gate_proj has a bias"),
    ("gelu", "act_fn is GELU"),
    ("odd_H", "H of 16"),
    ("hook", "hooks"),
    ("act_hook", "act_fn has hooks"),
])
def test_blocks_the_kernel_cannot_run_are_left_with_the_reason(change, says):
    torch.manual_seed(3)
    H = 264 if change == "odd_H" else 256
    mlp = FP8MLP(H=H)
    if change == "per_tensor":
        mlp.gate_proj = fp8_linear(torch.randn(384, 256), block_size=None)
        mlp.gate_proj.weight_scale_inv = nn.Parameter(torch.ones(()), requires_grad=False)
    elif change == "static":
        mlp.up_proj = fp8_linear(torch.randn(384, 256), activation_scheme="static")
    elif change == "bias":
        mlp.gate_proj.bias = nn.Parameter(torch.zeros(384))
    elif change == "gelu":
        mlp.act_fn = nn.GELU()
    elif change == "hook":
        mlp.up_proj.register_forward_hook(lambda *a: None)
    elif change == "act_hook":
        mlp.act_fn.register_forward_pre_hook(lambda *a: None)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert fuse_swiglu_mlps(mlp) == []
    assert says in str(w[0].message)


def test_a_block_changed_after_patching_runs_its_original_forward(mlp, monkeypatch):
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    calls = _calls(monkeypatch)
    mlp(x)
    assert len(calls) == 1
    mlp.act_fn = nn.GELU()
    stock = FP8MLP.forward(mlp, x)
    torch.testing.assert_close(mlp(x), stock, rtol=0, atol=0)
    assert len(calls) == 1
    mlp.act_fn = nn.SiLU()
    mlp.gate_proj.register_forward_pre_hook(lambda *a: None)
    mlp(x)
    assert len(calls) == 1


@pytest.mark.parametrize("make", [
    lambda x: x.half(),                        # the FP8 kernel writes bf16 y
    lambda x: x.requires_grad_(),              # autograd records: the kernel has no backward
])
def test_inputs_the_fused_path_does_not_take_run_the_original_forward(mlp, make, monkeypatch):
    calls = _calls(monkeypatch)
    x = make(torch.randn(4, 256, dtype=torch.bfloat16))
    torch.testing.assert_close(mlp(x), FP8MLP.forward(mlp, x), rtol=0, atol=0)
    assert calls == []


def test_backend_cutlass_off_hopper_raises_as_swiglu_does():
    mlp = FP8MLP()
    fuse_swiglu_mlps(mlp, backend="cutlass")
    with pytest.raises(RuntimeError, match="backend='cutlass' cannot run"):
        mlp(torch.randn(2, 256, dtype=torch.bfloat16))


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_patched_fp8_model_stays_patched_with_its_packed_copy(how):
    torch.manual_seed(6)
    model = Model(n=1)
    fuse_swiglu_mlps(model)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    want = model(x)
    copied = COPIES[how](model)
    mlp = copied.layers[0]["mlp"]
    patch = vars(mlp)["_fused_swiglu"]
    assert isinstance(patch, fp8_patch.FusedFP8SwiGLUForward) and patch.module is mlp
    assert patch._source[0] is mlp.gate_proj and patch.w_packed is not None
    # the first call may be compiled: nothing is packed inside the graph
    compiled = torch.compile(copied, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), want, rtol=0, atol=0)
    torch.testing.assert_close(copied(x), want, rtol=0, atol=0)


@pytest.mark.parametrize("change", ["bias", "static", "block_size", "act_fn_hook"])
def test_a_layer_changed_after_patching_runs_the_original_forward(mlp, change, monkeypatch):
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    mlp(x)
    if change == "bias":
        mlp.gate_proj.bias = nn.Parameter(torch.ones(384, dtype=torch.bfloat16))
    elif change == "static":
        mlp.up_proj.activation_scheme = "static"
    elif change == "block_size":
        mlp.up_proj.block_size = None
    else:
        mlp.act_fn.register_forward_hook(lambda *a: None)
    calls = _calls(monkeypatch)
    assert torch.equal(mlp(x), FP8MLP.forward(mlp, x))
    assert calls == []


def test_load_state_dict_repacks_at_once_so_a_compiled_first_call_is_current(mlp):
    other = FP8MLP()
    mlp.load_state_dict(other.state_dict())
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    got = torch.compile(mlp, fullgraph=True, backend="aot_eager")(x)
    torch.testing.assert_close(got, _expected(mlp, x), rtol=0, atol=0)
    unfuse_swiglu_mlps(mlp)
    assert not mlp._load_state_dict_post_hooks  # unfuse removes the hook


def test_writes_through_data_need_repack(mlp):
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    mlp(x)
    mlp.up_proj.weight_scale_inv.data.mul_(2)  # bypasses the version counter: documented as unseen
    assert vars(mlp)["_fused_swiglu"].repack()
    torch.testing.assert_close(mlp(x), _expected(mlp, x), rtol=0, atol=0)


def _meta_fp8_block(cls):
    with torch.device("meta"):
        mlp = cls.__new__(cls)
        nn.Module.__init__(mlp)
        mlp.gate_proj, mlp.up_proj = FP8Linear(256, 384, (128, 128)), FP8Linear(256, 384, (128, 128))
        mlp.down_proj, mlp.act_fn = FP8Linear(384, 256, (128, 128)), nn.SiLU()
    return mlp


def test_a_block_of_unknown_class_on_the_meta_device_is_left_unfused():
    # its forward cannot be probed without weights: only the listed classes are trusted by class
    mlp = _meta_fp8_block(FP8MLP)
    with pytest.warns(UserWarning, match="meta device"):
        assert fuse_swiglu_mlps(mlp) == []


def test_a_block_patched_on_the_meta_device_packs_at_its_first_call():
    torch.manual_seed(11)
    real = FP8MLP()
    Qwen3MLP = pytest.importorskip("transformers.models.qwen3.modeling_qwen3").Qwen3MLP
    with torch.device("meta"):
        mlp = Qwen3MLP.__new__(Qwen3MLP)  # a class whose forward is known: no probe needed
        nn.Module.__init__(mlp)
        mlp.gate_proj, mlp.up_proj = FP8Linear(256, 384, (128, 128)), FP8Linear(256, 384, (128, 128))
        mlp.down_proj, mlp.act_fn = FP8Linear(384, 256, (128, 128)), nn.SiLU()
    assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    assert vars(mlp)["_fused_swiglu"].w_packed is None
    mlp.to_empty(device="cpu")
    mlp.load_state_dict(real.state_dict())
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    torch.testing.assert_close(mlp(x), _expected(real, x), rtol=0, atol=0)


def test_x_of_the_wrong_width_is_named(mlp):
    with pytest.raises(ValueError, match="x must have gate_proj.in_features = 256"):
        mlp(torch.randn(3, 128, dtype=torch.bfloat16))


def test_a_patched_fp8_block_compiles_fullgraph(mlp):
    x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
    want = mlp(x)
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), want, rtol=0, atol=0)


def test_a_patched_fp8_block_on_the_cpu_says_once_that_it_runs_the_cpu_kernel(monkeypatch):
    from fused_swiglu import _validate

    monkeypatch.setattr(_validate, "_warned", set())
    model = Model()
    fuse_swiglu_mlps(model)
    x = torch.randn(2, 5, 256, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="on the CPU runs the operator's CPU kernel.*not speed") as caught:
        model(x)
    said = [w for w in caught if "CPU kernel" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__  # the model's caller, not a library frame
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x)  # once per process

