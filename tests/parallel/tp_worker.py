"""One rank of the tensor-parallel tests: ``python tp_worker.py RANK WORLD_SIZE INIT_FILE OUT_DIR BACKEND``.

Builds the same full weights and input on every rank (fixed seed), runs each tensor-parallel variant
and saves this rank's outputs and gradients to ``OUT_DIR/rank<RANK>.pt`` for the test to compare
with the unsharded MLP. BACKEND: ``gloo`` (CPU tensors, PyTorch fallback) or ``nccl`` (one GPU per
rank, the CUDA kernels).
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.distributed as dist
from torch import nn

from fused_swiglu import swiglu, swiglu_mlp, unpack_gate_up
from fused_swiglu.parallel import TensorParallelSwiGLUMLP, shard_swiglu_mlps

SEED = 1234


def problem(H: int, I: int, M: int, dtype: torch.dtype, device: str):
    """The full weights and input every rank (and the test) builds."""
    gen = torch.Generator().manual_seed(SEED)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(device)

    return rand(I, H, scale=H ** -0.5), rand(I, H, scale=H ** -0.5), rand(H, I, scale=I ** -0.5), rand(M, H)


class Mlp(nn.Module):
    """A SwiGLU block written the way Hugging Face writes Qwen2MLP."""

    def __init__(self, w_gate, w_up, w_down):
        super().__init__()
        I, H = w_gate.shape
        like = {"dtype": w_gate.dtype, "device": w_gate.device}
        self.gate_proj = nn.Linear(H, I, bias=False, **like)
        self.up_proj = nn.Linear(H, I, bias=False, **like)
        self.down_proj = nn.Linear(I, H, bias=False, **like)
        with torch.no_grad():
            self.gate_proj.weight.copy_(w_gate)
            self.up_proj.weight.copy_(w_up)
            self.down_proj.weight.copy_(w_down)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def run(rank: int, world_size: int, init_file: str, out_dir: str, backend: str, H: int, I: int, M: int) -> None:
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    warnings.simplefilter("ignore")  # the CPU fallback's one warning
    dtype = torch.bfloat16
    w_gate, w_up, w_down, x = problem(H, I, M, dtype, device)
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, make in {
            "dual": lambda: TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down),
            "packed": lambda: TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down, kernel="packed"),
            "dual_fp32": lambda: TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down, reduce_dtype=torch.float32),
            "concatenated": lambda: TensorParallelSwiGLUMLP.from_state_dict(
                {"mlp.gate_up_proj.weight": torch.cat([w_gate, w_up]), "mlp.down_proj.weight": w_down},
                "mlp.", kernel="packed"),
        }.items():
            mlp = make()
            out[f"z_{name}"] = mlp(x)
            # this rank's up-projection columns and its partial z before the reduce (x's dtype)
            if mlp.w_packed is not None:
                g, u = unpack_gate_up(mlp.w_packed, layout=mlp.layout)
            else:
                g, u = mlp.w_gate, mlp.w_up
            out[f"y_{name}"] = swiglu(x, g, u)
            out[f"partial_{name}"] = swiglu_mlp(x, g, u, mlp.w_down)
    # training: gradients of x and of this rank's shards
    mlp = TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down)
    xg = x.clone().requires_grad_(True)
    dz = problem(H, I, M, dtype, device)[3].flip(0) if M > 1 else torch.ones_like(x)
    mlp(xg).backward(dz)
    out["dx"] = xg.grad
    out["dw_gate"], out["dw_up"], out["dw_down"] = mlp.w_gate.grad, mlp.w_up.grad, mlp.w_down.grad
    # a model's MLP blocks replaced in place
    model = nn.Sequential(Mlp(w_gate, w_up, w_down), Mlp(w_up, w_gate, w_down))
    names = shard_swiglu_mlps(model)
    out["model_blocks"] = torch.tensor(len(names))
    out["model_params"] = torch.tensor(sum(p.numel() for p in model.parameters()))
    with torch.no_grad():
        out["z_model"] = model(x)
    torch.save({k: v.cpu() for k, v in out.items()}, f"{out_dir}/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    r, t, init, out_dir, backend, H, I, M = sys.argv[1:9]
    run(int(r), int(t), init, out_dir, backend, int(H), int(I), int(M))
