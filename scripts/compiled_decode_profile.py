"""Profile compiled decode (reduce-overhead), stock against patched, for one model of bench --e2e:
ms per token, CUDA runtime call counts, kernels by device time. Usage: compiled_decode_profile.py [MODEL]."""
import sys

import torch

from fused_swiglu.bench import e2e_models, e2e_modes
name = sys.argv[1] if len(sys.argv) > 1 else "Qwen3-1.7B"
dev = torch.device("cuda")
spec = e2e_models.find([name])[0]
model = e2e_models.build(spec, dev, torch.bfloat16)
s = e2e_modes.Settings(device=dev)
config = e2e_modes.compile_config()
cache = e2e_modes.static_cache(model, s.prompt_len + s.new_tokens, 1)
ids = e2e_modes.prompt(model, 1, s.prompt_len, s.seed, dev)
kwargs = {**e2e_modes.generate_kwargs(model, ids, s), e2e_modes.cache_keyword(model): cache, "compile_config": config}


def generate():
    cache.reset()
    model.generate(**kwargs)


for fused in (False, True):
    tag = "fused" if fused else "stock"
    e2e_modes.reset_compiled(model)
    e2e_modes.set_fused(model, fused, "auto")
    for _ in range(s.compiled_warmups):
        generate()
    torch.cuda.synchronize()
    ms = [e2e_modes.wall_ms(generate, dev) / s.new_tokens for _ in range(s.compiled_repeats)]
    print(tag, "ms/token", [round(m, 3) for m in ms], flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        generate()
        torch.cuda.synchronize()
    ka = prof.key_averages()
    rt = {e.key: e.count for e in ka if e.key.startswith("cuda") or e.key.startswith("cu")}
    print(tag, "runtime calls", sorted(rt.items(), key=lambda kv: -kv[1])[:12], flush=True)
    print(tag, "by device time\n", ka.table(sort_by="self_device_time_total", row_limit=22)[:6000], flush=True)
    print(tag, "by cpu time\n", ka.table(sort_by="self_cpu_time_total", row_limit=15)[:4000], flush=True)
e2e_modes.reset_compiled(model)
