"""Decode-size kernel times of the fused dual kernel against cuBLAS and PyTorch on one GPU.

For each shape (Llama-3-8B, Qwen3-1.7B, Qwen2.5-0.5B, Qwen2.5-7B MLPs) and M = 1, 4, 16 tokens: the library's
choice (fused_swiglu.swiglu), the two cuBLAS GEMMs alone, eager silu(x W_g^T) * (x W_u^T), the same compiled
by torch.compile, and named dual configs launched directly (with several rasterisations and swizzles).
Each time is the median over 25 replays of a CUDA graph of 20 calls (CUDA events), in microseconds per call;
the weights rotate over copies totalling more than 400 MB, so every call reads its weights from HBM.

    python tools/decode_probe.py [OUT.json]
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
import fused_swiglu
from fused_swiglu import _lib, weights
dev = torch.device("cuda")
torch.manual_seed(0)
SHAPES = {"Llama-3-8B": (14336, 4096), "Qwen3-1.7B": (6144, 2048), "Qwen2.5-0.5B": (4864, 896), "Qwen2.5-7B": (18944, 3584)}
CONFIGS = ["dual_swapab_pingpong_128x16x64_1x1_bf16", "dual_swapab_pingpong_128x112x64_1x1_bf16",
           "dual_pingpong_64x64x64_1x1_bf16", "dual_pingpong_64x128x64_1x1_bf16"]
def timed(fn, reps=20, trials=25):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3): fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for r in range(reps): fn(r)
    ts = []
    for _ in range(trials):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(ts)
out = []
print(torch.cuda.get_device_name(), flush=True)
for name, (I, H) in SHAPES.items():
    nsets = max(2, int(400e6 // (4 * I * H)) + 1)
    ws = [(torch.randn(I, H, device=dev, dtype=torch.bfloat16) * 0.02, torch.randn(I, H, device=dev, dtype=torch.bfloat16) * 0.02) for _ in range(nsets)]
    for M in (1, 4, 16):
        x = torch.randn(M, H, device=dev, dtype=torch.bfloat16)
        y = torch.empty(M, I, device=dev, dtype=torch.bfloat16)
        row = {"model": name, "M": M, "I": I, "H": H}
        row["fused_choice"] = timed(lambda r: fused_swiglu.swiglu(x, *ws[r % nsets]))
        row["cublas_2gemm"] = timed(lambda r: (F.linear(x, ws[r % nsets][0]), F.linear(x, ws[r % nsets][1])))
        row["eager"] = timed(lambda r: F.silu(F.linear(x, ws[r % nsets][0])) * F.linear(x, ws[r % nsets][1]))
        torch._dynamo.reset()  # one compiled function per shape, never the recompile limit
        cf = torch.compile(lambda x, a, b: F.silu(F.linear(x, a)) * F.linear(x, b), dynamic=False)
        row["compiled"] = timed(lambda r: cf(x, *ws[r % nsets]))
        for c in CONFIGS:
            try:
                row[c] = timed(lambda r: _lib.run(c, x, ws[r % nsets][0], ws[r % nsets][1], y))
            except Exception as e:
                row[c] = str(e)[:80]
        for rs in ((1, 1), (2, 1), (1, 2), (2, 4)):
            try:
                row[f"swap16_r{rs[0]}s{rs[1]}"] = timed(lambda r: _lib.run(CONFIGS[0], x, ws[r % nsets][0], ws[r % nsets][1], y, rs[0], rs[1]))
            except Exception as e:
                row[f"swap16_r{rs[0]}s{rs[1]}"] = str(e)[:80]
        floor = 2 * I * H * 2 / 3.35e12 * 1e6
        row["floor_us_3.35TBs"] = floor
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
        out.append(row)
    del ws
meta = {"gpu": torch.cuda.get_device_name(), "torch_version": torch.__version__, "unit": "microseconds per call",
        "protocol": "median of 25 replays of a CUDA graph of 20 calls, weights rotated beyond L2"}
with open(sys.argv[1] if len(sys.argv) > 1 else "decode_probe.json", "w") as f:
    json.dump({"meta": meta, "rows": out}, f, indent=1)
