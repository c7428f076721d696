"""fuse_swiglu_mlps on fine-grained FP8 blocks and a transformers-quantized Qwen3 model, on the GPU.

transformers runs FP8Linear through kernels from the Hugging Face Hub; here every FP8Linear (the stock
model's gate/up/down, the patched model's down_proj) runs the reference forward of ``fp8_models``,
so stock and patched differ only in the fused gate/up."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import fuse_swiglu_mlps, unfuse_swiglu_mlps

from fp8_models import FP8Linear, FP8MLP, dequantize_blocks, reference_forward

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def reference_fp8_linear(monkeypatch):
    monkeypatch.setattr(FP8Linear, "forward", reference_forward)


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.double() - ref).norm() / ref.norm())


def _mlp_float64(mlp, x):
    w = [dequantize_blocks(p.weight, p.weight_scale_inv).double() for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
    x = x.double()
    return (torch.nn.functional.silu(x @ w[0].T) * (x @ w[1].T)) @ w[2].T


@pytest.mark.parametrize("M", [1, 3, 127, 129, 4097])
def test_qwen_sized_fp8_block_errs_no_more_than_the_stock_block(M):
    torch.manual_seed(M)
    mlp = FP8MLP(H=896, I=4864, device="cuda")
    x = torch.randn(M, 896, device="cuda", dtype=torch.bfloat16)
    ref = _mlp_float64(mlp, x)
    stock = mlp(x)
    assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    fused = torch.full_like(stock, float("nan"))
    fused.copy_(mlp(x))
    assert fused.isfinite().all()
    assert _rel(fused, ref) <= 1.05 * _rel(stock, ref), (_rel(fused, ref), _rel(stock, ref))


def test_a_patched_fp8_block_replays_in_a_cuda_graph():
    torch.manual_seed(0)
    mlp = FP8MLP(H=1024, I=2816, device="cuda")
    fuse_swiglu_mlps(mlp)
    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    want = mlp(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mlp(x)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mlp(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)


def _qwen3_fp8(tmp_path):
    """A 4-layer Qwen3 with random weights, saved in bf16 and loaded with transformers' fine-grained FP8."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers' FP8 loading needs accelerate")
    cfg = transformers.Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=4,
                                   num_attention_heads=16, num_key_value_heads=8, head_dim=64, vocab_size=4096,
                                   tie_word_embeddings=True, max_position_embeddings=512)
    torch.manual_seed(0)
    bf16 = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).cuda().eval()
    bf16.save_pretrained(tmp_path)
    fp8 = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, quantization_config=transformers.FineGrainedFP8Config(), dtype=torch.bfloat16,
        device_map="cuda").eval()
    return bf16, fp8


def test_qwen3_fp8_model_patched_agrees_with_the_unpatched_fp8_model(tmp_path):
    bf16, model = _qwen3_fp8(tmp_path)
    mlp = model.model.layers[0].mlp
    assert isinstance(mlp.gate_proj, FP8Linear) and mlp.gate_proj.weight.dtype == torch.float8_e4m3fn
    ids = torch.randint(0, 4096, (1, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with torch.no_grad():
        ref = bf16(input_ids=ids).logits.double()
        stock = model(input_ids=ids).logits
        stock_tokens = model.generate(ids[:, :16], max_new_tokens=16, do_sample=False)
        assert fuse_swiglu_mlps(model) == [f"model.layers.{i}.mlp" for i in range(4)]
        fused = model(input_ids=ids).logits
        fused_tokens = model.generate(ids[:, :16], max_new_tokens=16, do_sample=False)
    # the FP8 model's own error against its bf16 original bounds the patched one's: in the logits, and in
    # how often the arg-max token is the bf16 model's (random weights put the top logits close together)
    assert _rel(fused, ref) <= 1.05 * _rel(stock, ref), (_rel(fused, ref), _rel(stock, ref))
    top1 = {name: (out.argmax(-1) == ref.argmax(-1)).double().mean().item() for name, out in
            (("stock", stock), ("fused", fused))}
    assert top1["fused"] >= top1["stock"] - 0.05, top1
    print(f"logits rel err vs bf16: stock {_rel(stock, ref):.4f} fused {_rel(fused, ref):.4f}; top-1 = bf16's: {top1};"
          f" top-1 fused = stock {(fused.argmax(-1) == stock.argmax(-1)).double().mean().item():.3f}; greedy tokens"
          f" equal {(stock_tokens == fused_tokens)[0, 16:].double().mean().item():.3f}")
    assert unfuse_swiglu_mlps(model) == [f"model.layers.{i}.mlp" for i in range(4)]


def test_a_patched_fp8_block_compiles_on_the_gpu():
    torch.manual_seed(2)
    mlp = FP8MLP(H=1024, I=2816, device="cuda")
    fuse_swiglu_mlps(mlp)
    x = torch.randn(2, 5, 1024, device="cuda", dtype=torch.bfloat16)
    want = mlp(x)
    torch._dynamo.reset()
    got = torch.compile(mlp)(x)  # the reference down_proj's library call breaks the graph; the fused part is traced
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
