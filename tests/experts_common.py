"""What the tests of the experts forward share (tests/test_experts.py, tests/test_hf_experts.py and their GPU
halves): random experts and routings, the float64 experts forward, the same computation unfused in the
kernels' precision, and the criterion an output is held to."""

from __future__ import annotations

import torch

from fused_swiglu.accuracy import ulp_at
from fused_swiglu.reference import swiglu_float64, swiglu_fp32_one_rounding


def experts_weights(E: int, H: int, I: int, dtype: torch.dtype, device="cpu", seed: int = 0):
    """gate_up_proj ``(E, 2I, H)`` from N(0, 1/H) and down_proj ``(E, H, I)`` from N(0, 1/I)."""
    g = torch.Generator(device=device).manual_seed(seed)
    gate_up = torch.randn(E, 2 * I, H, device=device, generator=g).mul_(H**-0.5).to(dtype)
    down = torch.randn(E, H, I, device=device, generator=g).mul_(I**-0.5).to(dtype)
    return gate_up, down


def routing(T: int, E: int, k: int, H: int, dtype: torch.dtype, device="cpu", seed: int = 0,
            expert: int | None = None, experts: tuple[int, ...] | None = None, weights_dtype=torch.float32):
    """x ``(T, H)``, top_k_index ``(T, k)`` int64 (k distinct experts per token, uniform; or every slot
    ``expert``; or drawn from ``experts`` alone) and top_k_weights ``(T, k)`` (a softmax, ``weights_dtype``)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(T, H, device=device, generator=g).to(dtype)
    if expert is not None:
        index = torch.full((T, k), expert, device=device, dtype=torch.int64)
    else:
        pool = torch.arange(E, device=device) if experts is None else torch.tensor(experts, device=device)
        scores = torch.rand(T, pool.numel(), device=device, generator=g)
        index = pool[scores.topk(k, dim=-1).indices]
    weights = torch.softmax(torch.randn(T, k, device=device, generator=g), dim=-1).to(weights_dtype)
    return x, index, weights


def forward_float64(x, index, weights, gate_up, down) -> torch.Tensor:
    """The experts forward in float64 from the same (rounded) inputs: ``(T, H)``."""
    I = gate_up.shape[1] // 2
    T, k = index.shape
    out = torch.zeros(T, x.shape[1], dtype=torch.float64, device=x.device)
    for e in torch.unique(index).tolist():
        tokens, slots = (index == e).nonzero(as_tuple=True)
        y = swiglu_float64(x[tokens], gate_up[e, :I], gate_up[e, I:])
        out.index_add_(0, tokens, (y @ down[e].double().T) * weights[tokens, slots, None].double())
    return out


def forward_unfused(x, index, weights, gate_up, down) -> torch.Tensor:
    """The experts forward in the kernels' precision, unfused (PyTorch, fp32 products, one rounding of the
    gate/up SwiGLU and of the down product, the weighted sum in the promoted dtype): ``(T, H)`` in x's
    dtype."""
    I = gate_up.shape[1] // 2
    T, k = index.shape
    rows = torch.zeros(T, k, x.shape[1], dtype=x.dtype, device=x.device)
    for e in torch.unique(index).tolist():
        tokens, slots = (index == e).nonzero(as_tuple=True)
        y = swiglu_fp32_one_rounding(x[tokens], gate_up[e, :I], gate_up[e, I:]).to(x.dtype)
        rows[tokens, slots] = (y.float() @ down[e].float().T).to(x.dtype)
    return (rows * weights.unsqueeze(-1)).sum(dim=1).to(x.dtype)


def check_experts(out, x, index, weights, gate_up, down, what: str = "") -> None:
    """``out`` against the float64 forward: the shape and dtype, every element finite, and within twice the
    unfused computation's largest error plus one ulp at the element (the dense tests' rule; float64 and
    float32 inputs: within 1e-12 and 1e-5 of the float64 forward's largest element)."""
    ref = forward_float64(x, index, weights, gate_up, down)
    assert out.shape == ref.shape and out.dtype == x.dtype, f"{what}: {tuple(out.shape)} {out.dtype}"
    if not out.numel():
        return
    assert torch.isfinite(out).all(), f"{what}: not finite"
    err = (out.double() - ref).abs()
    if x.dtype in (torch.float64, torch.float32):
        scale = {torch.float64: 1e-12, torch.float32: 1e-5}[x.dtype]
        assert err.max() <= scale * max(ref.abs().max().item(), 1.0), f"{what}: {err.max()}"
        return
    unfused = forward_unfused(x, index, weights, gate_up, down)
    bad = err > 2 * (unfused.double() - ref).abs().max() + ulp_at(ref, x.dtype)
    assert not bad.any(), (f"{what}: {bad.sum().item()} of {out.numel()} elements past the bound, worst "
                           f"{err.max().item():.3g}")


def decisive_prompt(model, batch: int = 1, length: int = 6, new_tokens: int = 16, margin: float = 0.02,
                    tries: int = 200):
    """(prompt, stock tokens): the first seeded random prompt whose greedy continuation by ``model`` as it is
    never hangs on a rounding: at every generated position the top logit leads the next by at least
    ``margin`` of the largest logit (bf16 logits of a tiny random model sit an ulp apart often enough that two
    correct paths, differing in rounding alone, would pick different tokens there)."""
    device, vocab = model.device, model.config.vocab_size
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    for seed in range(tries):
        ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed)).to(device)
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        with torch.no_grad():
            logits = model(tokens).logits[:, length - 1:-1].float()
        top = logits.topk(2, dim=-1).values
        if ((top[..., 0] - top[..., 1]) >= margin * logits.abs().max()).all():
            return ids, tokens
    raise AssertionError(f"no prompt of {tries} gives a greedy continuation {margin:.0%} clear of a tie")


def check_gradients(x, index, weights, gate_up, down, what: str = "", seed: int = 0) -> None:
    """The gradients of :func:`fused_swiglu.experts.swiglu_experts` with respect to x, weights, gate_up and down
    against those of the float64 forward (from the same rounded inputs, for one random output gradient): each
    within ``rel`` of the largest reference element (float64 1e-12, float32 1e-5, bf16 2e-2, fp16 4e-3:
    the gate and up products recomputed and [dg | du] rounded to x's dtype before its two products)."""
    from fused_swiglu import experts

    inputs = [t.detach().clone().requires_grad_() for t in (x, weights, gate_up, down)]
    out = experts.swiglu_experts(inputs[0], index, inputs[1], inputs[2], inputs[3])
    g = torch.Generator(device=x.device).manual_seed(seed)
    grad_out = torch.randn(out.shape, device=x.device, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad(out, inputs, grad_out.to(out.dtype))
    ref_inputs = [t.detach().double().requires_grad_() for t in (x, weights, gate_up, down)]
    ref = forward_float64(ref_inputs[0], index, ref_inputs[1], ref_inputs[2], ref_inputs[3])
    ref_grads = torch.autograd.grad(ref, ref_inputs, grad_out)
    rel = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[x.dtype]
    for name, a, b in zip(("hidden_states", "top_k_weights", "gate_up_proj", "down_proj"), grads, ref_grads):
        assert a.shape == b.shape and a.dtype == (x.dtype if name != "top_k_weights" else weights.dtype), (what, name)
        assert torch.isfinite(a).all(), f"{what}: {name} gradient not finite"
        err = (a.double() - b).abs().max().item()
        assert err <= rel * max(b.abs().max().item(), 1e-3), f"{what}: {name} gradient off by {err:.3g}"
