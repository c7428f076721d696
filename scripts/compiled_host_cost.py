"""Host cost of compiled decode (reduce-overhead) per step, stock against patched, and of replaying a
CUDA graph of the fused operator against one of the unfused MLP up-projection.

Usage: compiled_host_cost.py [MODEL]   (a model of bench --e2e; default Qwen3-1.7B)

Per variant: ms per token of ``generate`` (static cache, compiled decode steps), and from one profiled
``generate`` the host µs per step of Dynamo's guard check ("TorchDynamo Cache Lookup") and of
``cudaGraphLaunch``. Variants: ``stock``; ``fused`` (fuse_swiglu_mlps); ``fused_traced_lean``: the
patched forward reduced, while Dynamo traces it, to the operator and ``down_proj`` (what the guards
cost). Then graphs of one layer count of up-projections at M = 1: host µs per ``replay()`` and GPU µs.
"""
import statistics
import sys
import time

import torch

from fused_swiglu import modules, ops
from fused_swiglu.bench import e2e_models, e2e_modes
from fused_swiglu.functional import _run_op

name = sys.argv[1] if len(sys.argv) > 1 else "Qwen3-1.7B"
dev = torch.device("cuda")
spec = e2e_models.find([name])[0]
model = e2e_models.build(spec, dev, torch.bfloat16)
s = e2e_modes.Settings(device=dev)
cache = e2e_modes.static_cache(model, s.prompt_len + s.new_tokens, 1)
ids = e2e_modes.prompt(model, 1, s.prompt_len, s.seed, dev)
kwargs = {**e2e_modes.generate_kwargs(model, ids, s), e2e_modes.cache_keyword(model): cache,
          "compile_config": e2e_modes.compile_config()}
original_call = modules.FusedSwiGLUForward.__call__


def lean_call(self, x):
    if torch.compiler.is_compiling():
        m = self.module
        return m.down_proj(_run_op(ops.swiglu_dual, x, m.gate_proj.weight, m.up_proj.weight, self.config))
    return original_call(self, x)


def generate():
    cache.reset()
    model.generate(**kwargs)


for variant in ("stock", "fused", "fused_traced_lean", "stock", "fused"):
    modules.FusedSwiGLUForward.__call__ = lean_call if variant == "fused_traced_lean" else original_call
    e2e_modes.reset_compiled(model)
    e2e_modes.set_fused(model, variant != "stock", "auto")
    for _ in range(s.compiled_warmups):
        generate()
    torch.cuda.synchronize()
    ms = [e2e_modes.wall_ms(generate, dev) / s.new_tokens for _ in range(5)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        generate()
        torch.cuda.synchronize()
    host = {e.key: (e.cpu_time_total / max(e.count, 1), e.count) for e in prof.key_averages()
            if e.key in ("TorchDynamo Cache Lookup", "cudaGraphLaunch")}
    print(f"{variant:18s} ms/token median {statistics.median(ms):.3f} all {[round(m, 3) for m in ms]}  "
          + "  ".join(f"{k}: {v[0]:.0f} us x{v[1]}" for k, v in host.items()), flush=True)
modules.FusedSwiGLUForward.__call__ = original_call
e2e_modes.reset_compiled(model)
e2e_modes.set_fused(model, False, "auto")

H, I, layers = model.config.hidden_size, model.config.intermediate_size, model.config.num_hidden_layers
x = torch.randn(1, H, device=dev, dtype=torch.bfloat16)
wg = torch.randn(I, H, device=dev, dtype=torch.bfloat16) / H**0.5
wu = torch.randn(I, H, device=dev, dtype=torch.bfloat16) / H**0.5
bodies = {
    "fused op": lambda: ops.swiglu_dual(x, wg, wu, ""),
    "mm, mm, silu*mul": lambda: torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t()),
}
for label, body in bodies.items():
    body()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            body()
        stream.synchronize()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(layers):
                body()
    torch.cuda.synchronize()
    host = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(200):
        t = time.perf_counter()
        g.replay()
        host.append((time.perf_counter() - t) * 1e6)
    end.record()
    torch.cuda.synchronize()
    print(f"graph of {layers} x {label}: host {statistics.median(host):.1f} us per replay, "
          f"GPU {start.elapsed_time(end) / 200 * 1e3:.1f} us per replay", flush=True)
