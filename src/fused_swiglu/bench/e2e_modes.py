"""The modes of ``fused-swiglu bench e2e``: one model object timed stock and patched.

Every mode runs the same model object both ways: stock (Hugging Face's MLP forward) and patched
(:func:`fused_swiglu.fuse_swiglu_mlps`, undone with :func:`fused_swiglu.unfuse_swiglu_mlps`), and
returns a dict with ``stock_ms`` and ``fused_ms`` (milliseconds; the median over repeats) plus the
mode's own fields. Where it can, a mode alternates the two repeat by repeat (the order flips every
repeat) so that clock and thermal drift fall on both alike.

* ``eager_decode_b1``, ``eager_decode_b8``: greedy ``generate`` of ``new_tokens`` tokens (a random
  prompt of ``prompt_len`` tokens, batch 1 or 8, the default dynamic cache); ms per generated token
  is the synchronised wall time of the whole call (its prefill included) / ``new_tokens``.
* ``captured_decode_step`` (CUDA only): one decode forward (batch 1, one token) on a static KV cache
  prefilled with the prompt, captured in a CUDA graph after warm-up on a side stream; a graph per
  variant, their replays timed alternately with CUDA events.
* ``compiled_decode`` (CUDA only): ``generate`` on a static KV cache, whose decode steps
  ``generate`` itself compiles (``torch.compile`` with ``mode="reduce-overhead"`` through the
  generation ``compile_config``). Compiled code belongs to one variant, so this mode runs stock,
  then patched, with ``torch._dynamo.reset()`` before each; warm-up calls (the compilation and CUDA
  graph recording) are timed apart as ``compile_s``, not in ``*_ms``.
* ``prefill``: one forward of ``prefill_batch`` x ``prefill_len`` tokens without a cache, logits of
  the last position only (``logits_to_keep=1``), timed with CUDA events (wall time on a CPU), an
  untimed forward after each switch of variant.
* ``training``: one training step of ``train_batch`` x ``train_len`` tokens in train mode: forward
  with ``labels`` (the causal-LM loss), ``loss.backward()``, gradients set to None before each; timed
  with CUDA events, an untimed step after each switch of variant; the peak memory allocated during one step of
  each variant (``stock_peak_gib``, ``fused_peak_gib``; CUDA only).

:func:`fused_swiglu.bench.e2e_accuracy.accuracy` compares stock and patched against a float32 copy.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..patch import fuse_swiglu_mlps, unfuse_swiglu_mlps
from .defaults import E2E_MODES as MODES
from .timing import summarize

CUDA_ONLY = ("captured_decode_step", "compiled_decode")


@dataclass
class Settings:
    """What one model's modes run with. Counts are repeats per variant; lengths are tokens."""

    device: torch.device
    backend: str = "auto"
    new_tokens: int = 32
    prompt_len: int = 16
    gen_repeats: int = 3
    compiled_repeats: int = 3
    compiled_warmups: int = 2
    graph_replays: int = 100
    prefill_batch: int = 4
    prefill_len: int = 2048
    prefill_repeats: int = 5
    train_batch: int = 4
    train_len: int = 2048
    train_repeats: int = 5
    accuracy_prompt_len: int = 128
    seed: int = 0


class Skipped(Exception):
    """A mode that cannot run here (e.g. a CUDA-only mode on a CPU); its row says why."""


def set_fused(model, fused: bool, backend: str) -> None:
    """Put ``model`` in the stock (``fused=False``) or patched state.

    Raises:
        RuntimeError: the patch left some decoder layer's MLP unpatched.
    """
    unfuse_swiglu_mlps(model)
    if not fused:
        return
    patched = fuse_swiglu_mlps(model, backend=backend)
    layers = model.config.num_hidden_layers
    if len(patched) != layers:
        unfuse_swiglu_mlps(model)
        raise RuntimeError(f"fuse_swiglu_mlps patched {len(patched)} MLP blocks of a model with {layers} decoder layers")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Wall time of ``fn()``, ms, with the device synchronised before and after."""
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return (time.perf_counter() - start) * 1e3


def alternate(measure: Callable[[], float], model, repeats: int, backend: str,
              warmup: Callable[[], object] | None = None) -> tuple[list[float], list[float]]:
    """``measure()`` ``repeats`` times in each state, stock and patched alternating, the order
    flipping every repeat, with an untimed ``warmup()`` after each change of state (a patched
    block's first call checks its weights before it takes its fast path); returns (stock samples,
    patched samples) and leaves the model stock."""
    samples: dict[bool, list[float]] = {False: [], True: []}
    try:
        for r in range(repeats):
            for fused in ((False, True) if r % 2 == 0 else (True, False)):
                set_fused(model, fused, backend)
                if warmup is not None:
                    warmup()
                samples[fused].append(measure())
    finally:
        set_fused(model, False, backend)
    return samples[False], samples[True]


def _medians(stock: list[float], fused: list[float], **extra) -> dict:
    return {"stock_ms": summarize(stock).median_ms, "fused_ms": summarize(fused).median_ms,
            "stock_samples_ms": stock, "fused_samples_ms": fused, **extra}


def prompt(model, batch: int, length: int, seed: int, device: torch.device) -> torch.Tensor:
    """(batch, length) random token ids (int64) below the vocabulary size, the same for a seed."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=gen).to(device)


def forward_params(model) -> set[str]:
    """The parameter names of ``model``'s class ``forward`` (which keyword arguments it takes)."""
    return set(inspect.signature(type(model).forward).parameters)


def cache_keyword(model) -> str:
    """The forward's and ``generate``'s KV-cache keyword: ``cache`` (newer transformers 5 releases)
    or ``past_key_values``."""
    return "cache" if "cache" in forward_params(model) else "past_key_values"


def static_cache(model, max_len: int, batch: int):
    """A transformers ``StaticCache`` of ``max_len`` positions, built with whichever arguments the
    installed release's constructor takes."""
    from transformers import StaticCache

    params = inspect.signature(StaticCache.__init__).parameters
    kwargs = {"config": model.config, "max_cache_len": max_len}
    optional = {"batch_size": batch, "max_batch_size": batch, "device": model.device, "dtype": model.dtype}
    kwargs.update({k: v for k, v in optional.items() if k in params})
    return StaticCache(**kwargs)


def generate_kwargs(model, ids: torch.Tensor, s: Settings) -> dict:
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=s.new_tokens,
                min_new_tokens=s.new_tokens, do_sample=False, pad_token_id=0)


def eager_decode(model, s: Settings, batch: int) -> dict:
    ids = prompt(model, batch, s.prompt_len, s.seed, s.device)
    kwargs = generate_kwargs(model, ids, s)
    for fused in (False, True):  # warm-up: the kernel library's load, cuBLAS handles, allocator
        set_fused(model, fused, s.backend)
        model.generate(**kwargs)
    set_fused(model, False, s.backend)
    stock, fused = alternate(lambda: wall_ms(lambda: model.generate(**kwargs), s.device) / s.new_tokens,
                             model, s.gen_repeats, s.backend)
    return _medians(stock, fused, batch=batch, prompt_tokens=s.prompt_len, new_tokens=s.new_tokens,
                    repeats=s.gen_repeats, unit="ms per generated token (generate wall time / new tokens)")


def _needs_cuda(s: Settings) -> None:
    if s.device.type != "cuda":
        raise Skipped(f"needs a CUDA device; this run is on {s.device.type}")


def captured_decode_step(model, s: Settings) -> dict:
    _needs_cuda(s)
    P = s.prompt_len
    # P + 1 positions: after the prefill every slot the decode step attends to holds a real token,
    # so masked and unmasked attention (capture builds a mask, eager calls may skip it) agree
    cache = static_cache(model, P + 1, 1)
    kw = cache_keyword(model)
    ids = prompt(model, 1, P, s.seed, s.device)
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{kw: cache})
    # the static layers count positions written in a device tensor; each step writes position P again
    lengths = [layer.cumulative_length for layer in getattr(cache, "layers", [])
               if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]
    token = ids[:, -1:].clone()
    position = torch.full((1, 1), P, dtype=torch.long, device=s.device)
    extra = {"cache_position": position[0]} if "cache_position" in forward_params(model) else {}

    def step():
        for n in lengths:
            n.fill_(P)
        return model(input_ids=token, position_ids=position, use_cache=True, **{kw: cache}, **extra).logits

    graphs, outputs, eager = {}, {}, {}
    stream = torch.cuda.Stream(s.device)
    try:
        with torch.no_grad():
            for fused in (False, True):
                set_fused(model, fused, s.backend)
                stream.wait_stream(torch.cuda.current_stream(s.device))
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        eager[fused] = step().float()
                torch.cuda.current_stream(s.device).wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    outputs[fused] = step()
                graphs[fused] = graph
    finally:
        set_fused(model, False, s.backend)
    torch.cuda.synchronize(s.device)
    check = {}
    for fused, graph in graphs.items():
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize(s.device)
        check["fused" if fused else "stock"] = (outputs[fused].float() - eager[fused]).abs().max().item()
    samples: dict[bool, list] = {False: [], True: []}
    for r in range(s.graph_replays):
        for fused in ((False, True) if r % 2 == 0 else (True, False)):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            graphs[fused].replay()
            end.record()
            samples[fused].append((begin, end))
    torch.cuda.synchronize(s.device)
    stock, fused = ([b.elapsed_time(e) for b, e in samples[f]] for f in (False, True))
    del graphs, outputs, cache
    return {"stock_ms": summarize(stock).median_ms, "fused_ms": summarize(fused).median_ms,
            "batch": 1, "context_tokens": P, "replays": s.graph_replays,
            "graph_vs_eager_max_abs_logit_diff": check, "unit": "ms per decode step (CUDA-graph replay)"}


def reset_compiled(model) -> None:
    """Drop compiled code: dynamo's caches (and with them CUDA-graph trees) and the compiled call
    that ``generate`` keeps on the model."""
    torch._dynamo.reset()
    if torch.cuda.is_initialized():
        from torch._inductor import cudagraph_trees

        cudagraph_trees.reset_cudagraph_trees()
    for attr in ("_compiled_call", "_last_compile_config"):
        if attr in vars(model):
            delattr(model, attr)


def _graphs_compiled() -> int:
    """Dynamo's count of graphs compiled in this process (after a reset too)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def compile_config(backend=None):
    """The generation ``CompileConfig`` the variants compile with: ``reduce-overhead`` (CUDA graphs),
    graph breaks allowed, with Inductor, or with ``backend`` where given (a ``torch.compile`` backend,
    e.g. a :class:`fused_swiglu.compile_fusion.FusedSwiGLUBackend`, which ``generate``'s deep copy of
    the config leaves as itself, so its ``fused`` and ``unfused`` records can be read afterwards).

    Raises:
        ImportError: transformers is not installed.
    """
    from transformers.generation import CompileConfig

    return CompileConfig(mode="reduce-overhead", fullgraph=False, backend="inductor" if backend is None else backend)


def compiled_decode(model, s: Settings) -> dict:
    _needs_cuda(s)
    config = compile_config()
    # one cache for every call, reset before each: fresh caches would move the CUDA graphs' static inputs
    cache = static_cache(model, s.prompt_len + s.new_tokens, 1)
    ids = prompt(model, 1, s.prompt_len, s.seed, s.device)
    kwargs = {**generate_kwargs(model, ids, s), cache_keyword(model): cache, "compile_config": config}

    def generate():
        cache.reset()
        model.generate(**kwargs)

    times, compile_s, recompiled = {}, {}, {}
    try:
        for fused in (False, True):
            reset_compiled(model)
            set_fused(model, fused, s.backend)
            start = time.perf_counter()
            for _ in range(s.compiled_warmups):
                generate()
            _sync(s.device)
            compile_s["fused" if fused else "stock"] = time.perf_counter() - start
            if vars(model).get("_compiled_call") is None:
                raise RuntimeError("generate did not compile the model's forward on a static cache (transformers "
                                   "found its auto-compile criteria unmet)")
            before = _graphs_compiled()
            times[fused] = [wall_ms(generate, s.device) / s.new_tokens for _ in range(s.compiled_repeats)]
            recompiled["fused" if fused else "stock"] = _graphs_compiled() - before
    finally:
        reset_compiled(model)
        set_fused(model, False, s.backend)
    return _medians(times[False], times[True], batch=1, prompt_tokens=s.prompt_len, new_tokens=s.new_tokens,
                    repeats=s.compiled_repeats, warmup_calls=s.compiled_warmups, compile_s=compile_s,
                    graphs_compiled_while_timed=recompiled,
                    compile_config={"mode": config.mode, "fullgraph": config.fullgraph, "dynamic": config.dynamic},
                    interleaved=False, unit="ms per generated token (generate wall time / new tokens)")


def event_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one call of ``fn`` between two CUDA events on ``device`` (wall time elsewhere)."""
    if device.type != "cuda":
        return wall_ms(fn, device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def prefill(model, s: Settings) -> dict:
    ids = prompt(model, s.prefill_batch, s.prefill_len, s.seed, s.device)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in forward_params(model) else {}

    def forward():
        with torch.no_grad():
            model(input_ids=ids, use_cache=False, **keep)

    for fused in (False, True):
        set_fused(model, fused, s.backend)
        forward()
    set_fused(model, False, s.backend)
    stock, fused = alternate(lambda: event_ms(forward, s.device), model, s.prefill_repeats, s.backend, warmup=forward)
    return _medians(stock, fused, batch=s.prefill_batch, tokens=s.prefill_len, repeats=s.prefill_repeats,
                    logits_to_keep=keep.get("logits_to_keep"), use_cache=False,
                    unit="ms per forward" + (" (CUDA events)" if s.device.type == "cuda" else " (wall time)"))


def _peak_gib(fn: Callable[[], object], device: torch.device) -> float | None:
    if device.type != "cuda":
        fn()
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**30


def training_step(model, ids: torch.Tensor) -> tuple[Callable[[], None], list[torch.nn.Parameter]]:
    """One training step of ``model`` on token ids ``ids`` (forward with ``labels`` = ids, the causal-LM loss,
    then ``loss.backward()``, every gradient set to None first), and the parameters it sets gradients of."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        for p in params:
            p.grad = None
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    return step, params


def training(model, s: Settings) -> dict:
    step, params = training_step(model, prompt(model, s.train_batch, s.train_len, s.seed, s.device))
    was_training = model.training
    model.train()
    try:
        peaks = {}
        for fused in (False, True):
            set_fused(model, fused, s.backend)
            step()  # warm-up (the patched forward's first call arms its fast path)
            peaks[fused] = _peak_gib(step, s.device)
        set_fused(model, False, s.backend)
        stock, fused = alternate(lambda: event_ms(step, s.device), model, s.train_repeats, s.backend, warmup=step)
    finally:
        for p in params:
            p.grad = None
        model.train(was_training)
    return _medians(stock, fused, batch=s.train_batch, tokens=s.train_len, repeats=s.train_repeats,
                    stock_peak_gib=peaks[False], fused_peak_gib=peaks[True], layers=model.config.num_hidden_layers,
                    unit="ms per training step (forward with labels + backward)"
                    + (" (CUDA events)" if s.device.type == "cuda" else " (wall time)"))


RUNNERS: dict[str, Callable[..., dict]] = {
    "eager_decode_b1": lambda model, s: eager_decode(model, s, 1),
    "eager_decode_b8": lambda model, s: eager_decode(model, s, 8),
    "captured_decode_step": captured_decode_step,
    "compiled_decode": compiled_decode,
    "prefill": prefill,
    "training": training,
}
