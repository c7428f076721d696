"""The whole-MLP training path on a Hopper GPU (fused_swiglu.mlp, fused_swiglu.mlp_ops): the store and
dSwiGLU kernels against float64 on poisoned outputs, gradients against float64 autograd no further
off than eager PyTorch's, and the training-step features (torch.compile, CUDA graphs, mixed
requires_grad, create_graph, the Hugging Face patch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fused_swiglu import _lib, configs, fuse_swiglu_mlps, pack_gate_up, swiglu_mlp, swiglu_mlp_packed, training_ops
from fused_swiglu.accuracy import compare, count_threshold_for, ulp_at
from fused_swiglu.bench.shapes import QWEN2_5_BY_SIZE as SHAPES
from fused_swiglu import mlp_ops
from fused_swiglu.mlp_ops import dswiglu, mlp_forward
from numerics import allowed_mismatches

# the deprecated layout="concatenated" is still tested until its removal; its warning: test_functional_cpu
pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:swiglu.*layout='concatenated'.*deprecated:FutureWarning")]
DTYPES = [torch.bfloat16, torch.float16]
DTYPE_IDS = ["bf16", "fp16"]


def _weights(H, I, dtype):
    wg = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    wu = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    wd = (torch.randn(H, I, device="cuda") * I**-0.5).to(dtype)
    return wg, wu, wd


def _assert_close_to(out: torch.Tensor, ref64: torch.Tensor, what: str) -> None:
    """At most the allowed mismatches (> 1 ulp among the counted elements: >= 1 % of the RMS in bf16,
    8 % in fp16, as tests/numerics.py), none over 2 ulp, every element finite (outputs start poisoned)."""
    assert torch.isfinite(out).all(), f"{what}: {(~torch.isfinite(out)).sum().item()} elements not written"
    report = compare(out, ref64, count_threshold_for(out.dtype))
    assert report.max_ulp <= 2 and round(report.mismatch * report.counted) <= allowed_mismatches(report.counted), (
        f"{what}: {report}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", ["dual_store", "packed_store"])
@pytest.mark.parametrize("model", ["0.5B", "7B"])  # both tile choices (configs.TRAINING_TILES)
@pytest.mark.parametrize("M", [1, 3, 127, 129, 4097])
def test_store_kernels_write_y_g_u(kernel, model, M, dtype, seed):
    H, I = SHAPES[model]
    x = torch.randn(M, H, device="cuda").to(dtype)
    wg, wu, _ = _weights(H, I, dtype)
    y = torch.full((M, I), float("nan"), device="cuda", dtype=dtype)
    gu = torch.full((M, 2 * I), float("nan"), device="cuda", dtype=dtype)
    w = (wg, wu) if kernel == "dual_store" else (pack_gate_up(wg, wu), None)
    _lib.run(configs.training_choice(kernel, H, dtype).name, x, *w, y, g=gu[:, :I], u=gu[:, I:])
    g64, u64 = x.double() @ wg.double().T, x.double() @ wu.double().T
    _assert_close_to(gu[:, :I], g64, f"{kernel} g, seed={seed}")
    _assert_close_to(gu[:, I:], u64, f"{kernel} u, seed={seed}")
    _assert_close_to(y, F.silu(g64) * u64, f"{kernel} y, seed={seed}")
    op = training_ops.swiglu_dual_store if kernel == "dual_store" else training_ops.swiglu_packed_store
    y_op, gu_op = op(x, *(t for t in w if t is not None))
    assert torch.equal(y_op, y) and torch.equal(gu_op, gu), "the operator runs the same kernel"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", ["0.5B", "7B", "72B"])
@pytest.mark.parametrize("M", [1, 3, 127, 129, 4097])
def test_dswiglu_kernel_matches_float64(model, M, dtype, seed):
    H, I = SHAPES[model]
    _, _, wd = _weights(H, I, dtype)
    dz = torch.randn(M, H, device="cuda").to(dtype)
    gu = torch.randn(M, 2 * I, device="cuda").to(dtype)
    dgu = torch.full((M, 2 * I), float("nan"), device="cuda", dtype=dtype)
    _lib.run(configs.training_choice("dswiglu", H, dtype).name, dz, wd, None, None, g=gu[:, :I], u=gu[:, I:], dg=dgu[:, :I],
             du=dgu[:, I:])
    dy = dz.double() @ wd.double()
    g, u = gu[:, :I].double(), gu[:, I:].double()
    s = torch.sigmoid(g)
    _assert_close_to(dgu[:, :I], dy * u * s * (1 + g * (1 - s)), f"dg {model} M={M}, seed={seed}")
    _assert_close_to(dgu[:, I:], dy * g * s, f"du {model} M={M}, seed={seed}")
    assert torch.equal(dgu, dswiglu(dz, wd, gu)), "the operator runs the same kernel"


def _grads(fn, leaves, dz):
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    z = fn(*leaves)
    z.backward(dz)
    return [z.detach(), *(t.grad for t in leaves)]


def _eager(x, wg, wu, wd):
    return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)


def _float64(x, wg, wu, wd):
    x, wg, wu, wd = (t.double() for t in (x, wg, wu, wd))
    return _eager(x, wg, wu, wd)


def _check_grads(names, got, eager, want, dtype, what):
    """Each result no further from float64 than 2x eager PyTorch's error + 1 ulp: elementwise in max
    norm (at the largest reference magnitude) and in relative Frobenius norm."""
    for name, g, e, w in zip(names, got, eager, want):
        assert g.dtype == dtype and g.shape == e.shape, f"{what} {name}: {g.dtype} {tuple(g.shape)}"
        w = w.double()
        err, err_eager = (g.double() - w).abs().max(), (e.double() - w).abs().max()
        one_ulp = ulp_at(w.abs().max().reshape(1), dtype)[0]
        assert err <= 2 * err_eager + one_ulp, f"{what} {name}: max err {err:.3e}, eager {err_eager:.3e}"
        rel, rel_eager = (g.double() - w).norm() / w.norm(), (e.double() - w).norm() / w.norm()
        assert rel <= 2 * rel_eager + 1e-6, f"{what} {name}: rel err {rel:.3e}, eager {rel_eager:.3e}"


PATHS = {
    "dual": lambda x, wg, wu, wd: swiglu_mlp(x, wg, wu, wd, backend="cutlass"),
    "interleaved": lambda x, wg, wu, wd: swiglu_mlp_packed(x, pack_gate_up(wg, wu), wd, layout="interleaved"),
    "concatenated": lambda x, wg, wu, wd: swiglu_mlp_packed(x, torch.cat([wg, wu]), wd, layout="concatenated"),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", list(SHAPES))
def test_gradients_on_qwen_shapes(model, dtype, seed):
    H, I = SHAPES[model]
    x = torch.randn(256, H, device="cuda").to(dtype)
    wg, wu, wd = _weights(H, I, dtype)
    dz = torch.randn(256, H, device="cuda").to(dtype)
    leaves = (x, wg, wu, wd)
    want, eager = _grads(_float64, leaves, dz.double()), _grads(_eager, leaves, dz)
    got = _grads(PATHS["dual"], leaves, dz)
    _check_grads(("z", "dx", "dw_gate", "dw_up", "dw_down"), got, eager, want, dtype, f"{model} seed={seed}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("lead", [(1,), (127,), (4097,), (2, 65)], ids=["M1", "M127", "M4097", "3d"])
def test_gradients_at_awkward_m(path, lead, dtype, seed):
    H, I = SHAPES["0.5B"]
    x = torch.randn(*lead, H, device="cuda").to(dtype)
    wg, wu, wd = _weights(H, I, dtype)
    dz = torch.randn(*lead, H, device="cuda").to(dtype)
    leaves = (x, wg, wu, wd)
    want, eager = _grads(_float64, leaves, dz.double()), _grads(_eager, leaves, dz)
    got = _grads(PATHS[path], leaves, dz)
    _check_grads(("z", "dx", "dw_gate", "dw_up", "dw_down"), got, eager, want, dtype, f"{path} seed={seed}")


def _leaves(M=512, model="0.5B", dtype=torch.bfloat16):
    H, I = SHAPES[model]
    x = torch.randn(M, H, device="cuda").to(dtype)
    return (x, *_weights(H, I, dtype)), torch.randn(M, H, device="cuda").to(dtype)


@pytest.mark.parametrize("needs", [(True, False, False, False), (False, True, True, True), (False, False, False, True),
                                   (False, True, False, False)], ids=["x", "weights", "w_down", "w_gate"])
def test_mixed_requires_grad(needs):
    leaves, dz = _leaves()
    full = _grads(PATHS["dual"], leaves, dz)[1:]
    parts = [t.detach().clone().requires_grad_(n) for t, n in zip(leaves, needs)]
    swiglu_mlp(*parts).backward(dz)
    for t, n, want in zip(parts, needs, full):
        assert (t.grad is not None) == n
        if n:
            assert torch.equal(t.grad, want)


def test_no_grad_writes_no_preactivations(monkeypatch):
    leaves, _ = _leaves()
    calls = []
    monkeypatch.setattr(_lib, "run", lambda *a, **k: calls.append(k))
    with torch.no_grad():
        swiglu_mlp(*leaves)
    assert not any("g" in k for k in calls), "inference never runs the store kernel"


def test_create_graph_raises_clearly():
    leaves, dz = _leaves()
    x, *w = [t.detach().clone().requires_grad_() for t in leaves]
    z = swiglu_mlp(x, *w)
    with pytest.raises(RuntimeError, match="create_graph=True.*recompute=True"):
        torch.autograd.grad(z, x, dz, create_graph=True)
    z = swiglu_mlp(x, *w, recompute=True)  # the recomputing path supports it
    (dx,) = torch.autograd.grad(z, x, dz, create_graph=True)
    dx.float().square().sum().backward()
    assert w[0].grad is not None


def test_eager_path_and_operator_give_the_same_gradients():
    leaves, dz = _leaves()
    eager = _grads(mlp_ops.mlp, leaves, dz)
    op = _grads(lambda *a: mlp_forward(*a)[0], leaves, dz)
    for e, o in zip(eager, op):
        assert torch.equal(e, o)


def test_compiled_training_step_fullgraph():
    leaves, dz = _leaves()

    def step(x, wg, wu, wd):
        return (mlp_forward(x, wg, wu, wd)[0].float() * dz.float()).sum()

    want = _grads(PATHS["dual"], leaves, dz)[1:]
    params = [t.detach().clone().requires_grad_() for t in leaves]
    torch.compile(step, fullgraph=True)(*params).backward()
    for t, w in zip(params, want):
        assert torch.allclose(t.grad.float(), w.float(), rtol=1e-2, atol=1e-2)


def test_cuda_graph_captures_forward_and_backward():
    leaves, dz = _leaves()
    params = [t.detach().clone().requires_grad_() for t in leaves]
    static_dz = dz.clone()

    def step():
        for p in params:
            p.grad = None
        swiglu_mlp(*params).backward(static_dz)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for p in params:
        p.grad = None
    with torch.cuda.graph(graph):
        swiglu_mlp(*params).backward(static_dz)
    graph.replay()
    torch.cuda.synchronize()
    want = _grads(PATHS["dual"], leaves, dz)[1:]
    for p, w in zip(params, want):
        assert torch.equal(p.grad, w)


def test_hf_patch_trains_through_whole_block(monkeypatch):
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                                      num_attention_heads=14, num_key_value_heads=2, vocab_size=1024)
    torch.manual_seed(0)
    stock = transformers.Qwen2ForCausalLM(config).to("cuda", torch.bfloat16)
    fused = transformers.Qwen2ForCausalLM(config).to("cuda", torch.bfloat16)
    fused.load_state_dict(stock.state_dict())
    assert len(fuse_swiglu_mlps(fused)) == 2
    calls = []
    real = mlp_ops.mlp
    monkeypatch.setattr(mlp_ops, "mlp", lambda *a: calls.append(1) or real(*a))
    ids = torch.randint(0, 1024, (2, 256), device="cuda")
    for model in (stock, fused):
        model(ids, labels=ids).loss.backward()
    assert len(calls) == 2, "both blocks ran the whole-block operator"
    for (name, p), q in zip(stock.named_parameters(), fused.parameters()):
        rel = ((p.grad.double() - q.grad.double()).norm() / p.grad.double().norm()).item()
        assert rel < 3e-2, f"{name}: relative gradient difference {rel:.3e}"
