"""fused_backend on a Hopper GPU: ``torch.compile(model, backend=fused_swiglu.fused_backend())`` of a
hand-written bf16 MLP and of small Hugging Face Qwen2 and Llama models (random weights, two layers)
against the uncompiled models.

* inference: results within the patched model's tolerances, every MLP fused (the backend's records),
  and the kernels of one call (torch.profiler): the fused operator's kernel once per MLP, no silu
  kernel, and for the hand-written MLP no elementwise multiply either;
* training: one ``loss.backward()`` through the compiled model gives eager's gradients within the
  dense tolerances of tests/test_mlp_gpu.py, through the operator's registered backward;
* ``mode="reduce-overhead"``: the rewritten graphs are captured in CUDA graphs and replayed.

Kernel names: the operator's kernel is the library's CUTLASS kernel, ``cutlass::device_kernel<...>``
over the library's own mainloop and epilogue types, so its name holds ``cutlass`` and ``fused_swiglu``. Inductor names
its Triton kernels after the operations fused into them (``triton_poi_fused_mul_silu_0``) and eager
PyTorch's elementwise kernels name their functors (``silu_kernel``, ``MulFunctor``): a silu left in a
graph shows as a kernel whose name holds ``silu``. The same model compiled by Inductor without the
backend is the control that shows one.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fused_swiglu import fused_backend
from fused_swiglu.accuracy import ulp_at
from fused_swiglu.bench import e2e_models
from fused_swiglu.reference import swiglu_float64
from compile_fusion_common import backward_calls, fresh_dynamo  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
H, I = 896, 4864  # Qwen2.5-0.5B's MLP
MODELS = {  # two decoder layers of real widths, a small vocabulary
    "qwen2": e2e_models.ModelSpec("qwen2-2l", "qwen2", H, I, 2, 14, 2, 1024, 1e6),
    "llama": e2e_models.ModelSpec("llama-2l", "llama", 1024, 3584, 2, 8, 2, 1024, 500000.0),
}
# the patched Hugging Face model's tolerance against the stock one (tests/test_mlp_gpu.py: relative
# Frobenius difference of each gradient) and the compiled model's largest logit difference against the
# uncompiled one, as a share of the largest logit (tests/test_compile_fusion.py)
REL = 3e-2


class MLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``: three bias-free bf16 linears on the GPU."""

    def __init__(self, h: int = H, i: int = I):
        super().__init__()
        self.gate = nn.Linear(h, i, bias=False, dtype=BF16, device="cuda")
        self.up = nn.Linear(h, i, bias=False, dtype=BF16, device="cuda")
        self.down = nn.Linear(i, h, bias=False, dtype=BF16, device="cuda")

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _model(name: str):
    return e2e_models.build(MODELS[name], torch.device("cuda"), BF16, seed=0)


def _ids(seed: int = 1, shape=(2, 64)) -> torch.Tensor:
    return torch.randint(0, 1024, shape, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))


@contextlib.contextmanager
def _no_caches():
    """No compiled artifact from an earlier run: the backward is traced here, so its calls are counted."""
    with torch._functorch.config.patch(enable_autograd_cache=False):
        with torch._inductor.config.patch(fx_graph_cache=False):
            yield


# --- what the profiler shows -----------------------------------------------------------------------------


def _profile(call) -> tuple[list[str], list[str]]:
    """(the CUDA kernels ``call()`` ran, the host-side events), by name."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    events = prof.events()
    cuda = torch.autograd.DeviceType.CUDA
    return [e.name for e in events if e.device_type == cuda], [e.name for e in events if e.device_type != cuda]


def _is_fused(kernel: str) -> bool:
    """The operator's kernel: CUTLASS's, over the library's types (a Triton kernel named after the
    operator would say ``swiglu_dual``, not ``cutlass``)."""
    return "cutlass" in kernel and "fused_swiglu" in kernel


def _fused(kernels: list[str]) -> list[str]:
    return [k for k in kernels if _is_fused(k)]


def _silu(kernels: list[str]) -> list[str]:
    return [k for k in kernels if "silu" in k.lower() and not _is_fused(k)]


def _elementwise_mul(kernels: list[str]) -> list[str]:
    """Triton and eager elementwise kernels that multiply (GEMM kernels' names may hold ``multiplies``)."""
    return [k for k in kernels if ("triton" in k or "elementwise" in k) and "mul" in k.lower() and not _is_fused(k)]


def _stock_compiled_kernels(model, *args, **kwargs) -> list[str]:
    """The kernels of one call of ``model`` compiled by Inductor without the backend (the control)."""
    torch._dynamo.reset()
    try:
        f = torch.compile(model)
        with torch.no_grad():
            f(*args, **kwargs)
            return _profile(lambda: f(*args, **kwargs))[0]
    finally:
        torch._dynamo.reset()


# --- numerics -----------------------------------------------------------------------------------------


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _assert_close_to_uncompiled(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert torch.isfinite(got).all(), f"{what}: not finite"
    scale = want.float().abs().max().item()
    diff = (got.float() - want.float()).abs().max().item()
    assert diff <= REL * scale, f"{what}: max difference {diff:.3e} against max magnitude {scale:.3e}"
    assert _rel(got, want) < REL, f"{what}: relative difference {_rel(got, want):.3e}"


def _mlp_truth(model: MLP, x: torch.Tensor) -> torch.Tensor:
    return swiglu_float64(x, model.gate.weight, model.up.weight) @ model.down.weight.double().T


def _assert_as_close_to_float64_as_eager(got, eager, want, what: str) -> None:
    """tests/test_mlp_gpu.py's rule: no further from float64 than 2x eager PyTorch's error + 1 ulp in max
    norm (at the largest reference magnitude), and than 2x eager's relative Frobenius error + 1e-6."""
    want = want.double()
    err, err_eager = (got.double() - want).abs().max(), (eager.double() - want).abs().max()
    one_ulp = ulp_at(want.abs().max().reshape(1), got.dtype)[0]
    assert err <= 2 * err_eager + one_ulp, f"{what}: max err {err:.3e}, eager {err_eager:.3e}"
    rel, rel_eager = _rel(got, want), _rel(eager, want)
    assert rel <= 2 * rel_eager + 1e-6, f"{what}: rel err {rel:.3e}, eager {rel_eager:.3e}"


def _gates(backend) -> set[str]:
    return {r.gate for r in backend.fused}


# --- (a) inference ------------------------------------------------------------------------------------------


def test_hand_written_mlp_inference_runs_the_fused_kernel():
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 64, H, device="cuda", dtype=BF16)
    stock = _stock_compiled_kernels(model, x)
    assert _silu(stock) and _elementwise_mul(stock), f"the control shows no silu or mul kernel: {stock}"
    backend = fused_backend()
    f = torch.compile(model, backend=backend)
    with torch.no_grad():
        want = model(x)
        got = f(x)
        kernels, _ = _profile(lambda: f(x))
    (record,) = backend.fused
    assert backend.unfused == [] and record.shape == (I, H), backend
    assert "gate" in record.gate and "up" in record.up, record
    assert len(_fused(kernels)) == 1, kernels
    assert _silu(kernels) == [] and _elementwise_mul(kernels) == [], kernels
    truth = _mlp_truth(model, x)
    err = lambda t: _rel(t, truth)  # noqa: E731
    assert err(got) <= err(want) * 1.05 + 1e-4, (err(got), err(want))  # tests/patch/test_patch_dense.py's rule


@pytest.mark.parametrize("name", list(MODELS))
def test_transformers_model_inference_runs_the_fused_kernel(name):
    pytest.importorskip("transformers")
    model = _model(name)
    layers = model.config.num_hidden_layers
    ids = _ids()
    stock = _stock_compiled_kernels(model, ids, use_cache=False)
    assert _silu(stock), f"the control shows no silu kernel: {stock}"
    backend = fused_backend()
    f = torch.compile(model, backend=backend)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        got = f(ids, use_cache=False).logits
        kernels, _ = _profile(lambda: f(ids, use_cache=False))
    assert backend.unfused == [] and len(_gates(backend)) == layers, backend
    assert all("mlp_modules_gate_proj" in r.gate and "mlp_modules_up_proj" in r.up for r in backend.fused)
    assert len(_fused(kernels)) == layers, _fused(kernels)
    assert _silu(kernels) == [], _silu(kernels)
    _assert_close_to_uncompiled(got, want, f"{name} logits")


# --- (b) training --------------------------------------------------------------------------------------------


def test_hand_written_mlp_training_gradients(backward_calls):
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 64, H, device="cuda", dtype=BF16)
    dz = torch.randn(4, 64, H, device="cuda", dtype=BF16)
    model64 = copy.deepcopy(model).double()

    def grads(fn, m, dtype):
        m.zero_grad(set_to_none=True)
        leaf = x.detach().to(dtype).clone().requires_grad_()
        out = fn(leaf)
        out.backward(dz.to(dtype))
        return [out.detach(), leaf.grad, m.gate.weight.grad, m.up.weight.grad, m.down.weight.grad]

    backend = fused_backend()
    f = torch.compile(model, backend=backend)
    with _no_caches():
        got = grads(f, model, BF16)
    eager = grads(model, model, BF16)
    want = grads(model64, model64, torch.float64)
    assert len(backend.fused) == 1 and backend.unfused == [] and backward_calls == [1], backend
    for name, g, e, w in zip(("z", "dx", "dw_gate", "dw_up", "dw_down"), got, eager, want):
        assert g.dtype == BF16 and g.shape == e.shape, name
        assert _rel(g, e) < REL, f"{name}: relative difference from eager {_rel(g, e):.3e}"
        _assert_as_close_to_float64_as_eager(g, e, w, name)


def test_qwen2_training_gradients(backward_calls):
    pytest.importorskip("transformers")
    model = _model("qwen2").train()
    layers = model.config.num_hidden_layers
    ids = _ids(shape=(2, 128))

    def step(fn):
        model.zero_grad(set_to_none=True)
        loss = fn(ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}

    backend = fused_backend()
    f = torch.compile(model, backend=backend)
    with _no_caches():
        loss, got = step(f)
    expected_loss, expected = step(model)
    assert backend.unfused == [] and len(_gates(backend)) == layers, backend
    assert len(backward_calls) == layers  # the operator's backward, once per MLP
    assert abs(loss - expected_loss) <= 1e-2 * abs(expected_loss), (loss, expected_loss)
    assert got.keys() == expected.keys() and any("mlp" in n for n in got)
    for n, g in expected.items():
        assert _rel(got[n], g) < REL, f"{n}: relative gradient difference {_rel(got[n], g):.3e}"


# --- (c) mode="reduce-overhead" ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp", "qwen2"])
def test_reduce_overhead_compiles_and_replays(name):
    """Calls one to three warm up, record and replay the CUDA graphs; a fourth, on a new input, is
    profiled: a graph launch, the uncompiled model's result. A graph that Inductor would leave
    uncaptured fails the compilation with its reason (``cudagraph_or_error``)."""
    if name == "mlp":
        torch.manual_seed(0)
        model = MLP()
        inputs = [torch.randn(4, 64, H, device="cuda", dtype=BF16) for _ in range(2)]
        call = lambda fn, x: fn(x)  # noqa: E731
    else:
        pytest.importorskip("transformers")
        model = _model(name)
        inputs = [_ids(1), _ids(2)]
        call = lambda fn, x: fn(x, use_cache=False).logits  # noqa: E731
    backend = fused_backend()
    f = torch.compile(model, backend=backend, mode="reduce-overhead")
    outs = []

    def step(x):
        torch.compiler.cudagraph_mark_step_begin()
        outs.append(call(f, x).clone())  # a replay overwrites the graph's outputs

    with torch.no_grad(), torch._inductor.config.patch({"triton.cudagraph_or_error": True}):
        for _ in range(3):
            step(inputs[0])
        _, host = _profile(lambda: step(inputs[1]))
        want = [call(model, x) for x in inputs]
    assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0
    assert any("cudaGraphLaunch" in e for e in host), "no CUDA graph was launched"
    layers = 1 if name == "mlp" else model.config.num_hidden_layers
    assert backend.unfused == [] and len(_gates(backend)) == layers, backend
    for i, (out, x) in enumerate(zip(outs, (0, 0, 0, 1))):
        _assert_close_to_uncompiled(out, want[x], f"{name} call {i + 1}")
