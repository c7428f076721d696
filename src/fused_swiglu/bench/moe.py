"""``fused-swiglu bench moe``: the routed experts of a mixture-of-experts layer, the ways transformers, quack
and this package run them, against their floor.

For each shape (:class:`~fused_swiglu.bench.shapes.MoeShape`) the experts are transformers' own module
(``Qwen3MoeExperts``: ``gate_up_proj`` ``(E, 2I, H)``, gate rows then up rows; ``down_proj`` ``(E, H, I)``,
the layout transformers 5 gives Qwen2/3-MoE, Mixtral and DeepSeek-V3) with random weights, and for each
token count T the input sets hold x ``(T, H)`` and a uniform random routing: ``top_k_index`` ``(T, k)``,
k distinct experts per token, and ``top_k_weights`` ``(T, k)`` summing to 1 per token. Methods:

* ``hf_eager``, ``hf_batched_mm``, ``hf_grouped_mm``: transformers' experts forwards (the module's own loop
  over the experts hit, ``batched_mm`` and ``grouped_mm`` of its ``ExpertsInterface``): the experts'
  output ``(T, H)``;
* ``quack_varlen``: the same forward with the gate/up projection and SwiGLU from quack-kernels'
  ``gemm_gated`` over the sorted tokens (``cu_seqlens_m``, the rows gathered by ``A_idx``), then
  ``torch._grouped_mm`` for the down projection and the weighted sum (an optional peer: where the
  ``quack-kernels`` package imports);
* ``fused``: this package's experts forward, :func:`fused_swiglu.experts.swiglu_experts` on the module's
  weights (routing, the grouped gate/up + SwiGLU kernel, ``torch._grouped_mm`` for the down projection, the
  weighted sum);
* ``fc1_grouped_mm``, ``fc1_quack_varlen``, ``fc1_fused``: the gate/up projection and SwiGLU alone, routing
  included (sort by expert, counts, offsets, gather), from ``torch._grouped_mm`` and ``silu(g) * u``, from
  quack's ``gemm_gated`` or from :func:`fused_swiglu.experts.routed_swiglu` (the grouped kernel): ``(T k, I)``,
  rows sorted by expert (the three sort alike, stable).

The floor of a cell is the longer of two times taken at rates measured in the same run: the bytes of the weights of
the distinct experts the routing reaches at the copy bandwidth (a 1 GiB device-to-device copy, read
plus write), and the products' FLOPs at cuBLAS's rate (an 8192-cubed bf16 ``torch.mm``): the weights of
gate, up and down for the experts forward, gate and up for the ``fc1_*`` methods.

Every method's output on the first input set is checked against the fp32 experts forward (or its gate/
up part) before it is timed: a mean error under 2 % of the reference's RMS. A peer that fails the
check, raises or runs out of memory (``hf_batched_mm`` at large T) is left out of that cell with the
reason printed. The protocol is the benchmark's (:func:`fused_swiglu.bench.timing.time_grid`): L2
flushed before each call, input sets rotated, interleaved or sustained by T; with ``cuda_graph`` every
method but ``hf_eager`` (its loop reads which experts are hit on the host) is captured once per input
set and its replays are timed. Rows: ``model``, ``hidden_size``, ``intermediate_size``, ``experts``,
``top_k``, ``tokens``, ``method``, ``median_ms``, ``p10_ms``, ``p90_ms``, ``floor_ms``, ``over_floor``
(median / floor) and the protocol's ``protocol``, ``sm_mhz``, ``power_w``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import report, timing
from .defaults import MOE_METHODS as METHODS, MOE_REPS as REPS, MOE_TOKENS as TOKENS
from .defaults import MOE_TILE_METHODS as TILE_METHODS, MOE_WARMUP_MS as WARMUP_MS
from .shapes import MOE_MODELS, MoeShape, find_moe

__all__ = ["METHODS", "MOE_MODELS", "REPS", "TOKENS", "WARMUP_MS", "find_moe", "run_moe"]

FC1 = ("fc1_grouped_mm", "fc1_quack_varlen", "fc1_fused") + tuple(m for m in TILE_METHODS if m.startswith("fc1_"))
PEERS = ("quack_varlen", "fc1_quack_varlen")  # need quack-kernels
EAGER_ONLY = ("hf_eager",)  # host control flow on the routing: never captured in a CUDA graph
N_SETS = 2  # input sets per cell (x and routing; the weights are shared)
CHECK_TOLERANCE = 0.02  # mean error / RMS of the reference


def check_methods(methods: Sequence[str]) -> None:
    """Raises ValueError naming the first of ``methods`` that is not one of :data:`METHODS` or
    :data:`TILE_METHODS`."""
    for method in methods:
        if method not in METHODS and method not in TILE_METHODS:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS + TILE_METHODS)}")


def peer_problem(method: str) -> str | None:
    """Why ``method`` cannot run in this process (a quack method without the quack-kernels package), as
    a sentence, or None."""
    from . import methods as kernel_methods

    return kernel_methods.peer_problem("quack") if method in PEERS else None


def default_methods() -> tuple[list[str], list[str]]:
    """(:data:`METHODS` that can run here, one sentence for each peer left out)."""
    problems = {method: peer_problem(method) for method in METHODS}
    runs = [method for method, problem in problems.items() if problem is None]
    left_out = sorted({f"not run: {problem}" for problem in problems.values() if problem is not None})
    return runs, left_out


def experts_module(shape: MoeShape, dtype: torch.dtype, device: torch.device, seed: int = 0) -> nn.Module:
    """transformers' ``Qwen3MoeExperts`` of ``shape`` in ``dtype`` on ``device``, weights drawn from
    N(0, 1/H) (gate_up_proj) and N(0, 1/I) (down_proj), no gradients."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    config = Qwen3MoeConfig(hidden_size=shape.hidden_size, moe_intermediate_size=shape.intermediate_size,
                            num_experts=shape.experts, num_experts_per_tok=shape.top_k)
    with torch.device("meta"):
        module = Qwen3MoeExperts(config)
    module = module.to(dtype).to_empty(device=device).requires_grad_(False)
    g = torch.Generator(device=device).manual_seed(seed)
    module.gate_up_proj.normal_(0.0, shape.hidden_size ** -0.5, generator=g)
    module.down_proj.normal_(0.0, shape.intermediate_size ** -0.5, generator=g)
    return module


@dataclass(frozen=True)
class MoeSet:
    """One input set: the tokens and their routing."""

    x: torch.Tensor  # (T, H)
    top_k_index: torch.Tensor  # (T, k) int64, k distinct experts per token
    top_k_weights: torch.Tensor  # (T, k) in x's dtype, each row summing to 1


def make_sets(shape: MoeShape, T: int, dtype: torch.dtype, device: torch.device, n: int = N_SETS,
              seed: int = 0) -> list[MoeSet]:
    """``n`` input sets of T tokens: x from N(0, 1), each token's k experts uniform among the
    subsets of k (the top k of uniform scores), its weights a softmax of N(0, 1) draws."""
    g = torch.Generator().manual_seed(seed)
    sets = []
    for _ in range(n):
        x = torch.randn(T, shape.hidden_size, generator=g)
        index = torch.rand(T, shape.experts, generator=g).topk(shape.top_k, dim=-1).indices
        weights = torch.softmax(torch.randn(T, shape.top_k, generator=g), dim=-1)
        sets.append(MoeSet(x.to(device, dtype), index.to(device), weights.to(device, dtype)))
    return sets


def route(top_k_index: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (token, slot) pairs sorted by expert, as transformers' ``grouped_mm`` path sorts them (stable,
    so that every method sees one order): ``(perm, offsets)``, perm ``(T k,)`` the pairs' flat indices
    in expert order, offsets ``(E,)`` int32 cumulative ends of each expert's rows (the
    ``torch._grouped_mm`` convention). No host synchronisation."""
    ids, perm = torch.sort(top_k_index.reshape(-1), stable=True)
    counts = torch.histc(ids.float() if ids.device.type == "cpu" else ids.int(), bins=experts, min=0,
                         max=experts - 1)
    return perm, torch.cumsum(counts, dim=0, dtype=torch.int32)


def _gate_up_grouped_mm(module: nn.Module, x: torch.Tensor, perm: torch.Tensor, offsets: torch.Tensor,
                        k: int) -> torch.Tensor:
    gu = torch._grouped_mm(x[perm // k], module.gate_up_proj.transpose(1, 2), offs=offsets)
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def _gate_up_quack(module: nn.Module, x: torch.Tensor, perm: torch.Tensor, offsets: torch.Tensor,
                   k: int) -> torch.Tensor:
    from quack.gemm_interface import gemm_gated

    cu_seqlens = torch.cat([offsets.new_zeros(1), offsets])
    _, y = gemm_gated(x, module.gate_up_proj.transpose(1, 2), activation="swiglu", cu_seqlens_m=cu_seqlens,
                      A_idx=(perm // k).int(), store_preact=False, concat_layout=("B",))
    return y


def fc1(gate_up: Callable, module: nn.Module, s: MoeSet) -> torch.Tensor:
    """The gate/up projection and SwiGLU of the sorted pairs, routing included: ``(T k, I)``."""
    k = s.top_k_index.shape[1]
    perm, offsets = route(s.top_k_index, module.num_experts)
    return gate_up(module, s.x, perm, offsets, k)


def experts_forward(gate_up: Callable, module: nn.Module, s: MoeSet) -> torch.Tensor:
    """The experts forward with ``gate_up`` for the gate/up projection: route, gate/up and SwiGLU, the
    down projection by ``torch._grouped_mm``, each pair weighted, the k pairs of a token summed:
    ``(T, H)``."""
    T, k = s.top_k_index.shape
    perm, offsets = route(s.top_k_index, module.num_experts)
    y = gate_up(module, s.x, perm, offsets, k)
    out = torch._grouped_mm(y, module.down_proj.transpose(1, 2), offs=offsets)
    out = out * s.top_k_weights.reshape(-1)[perm, None]
    unsorted = torch.empty_like(out)
    unsorted[perm] = out
    return unsorted.view(T, k, out.shape[-1]).sum(dim=1)


def hf_forward(name: str) -> Callable[[nn.Module, MoeSet], torch.Tensor]:
    """transformers' experts forward ``name`` ("eager": the module's own; else one of its
    ``ExpertsInterface``) as a method."""
    if name == "eager":
        def call(module, s):
            return type(module).forward.__wrapped__(module, s.x, s.top_k_index, s.top_k_weights)
        return call
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    forward = ALL_EXPERTS_FUNCTIONS[name]
    return lambda module, s: forward(module, s.x, s.top_k_index, s.top_k_weights)


def fused_forward(module: nn.Module, s: MoeSet) -> torch.Tensor:
    """``fused``: :func:`fused_swiglu.experts.swiglu_experts` on the module's weights, ``(T, H)``."""
    from ..experts import swiglu_experts

    return swiglu_experts(s.x, s.top_k_index, s.top_k_weights, module.gate_up_proj, module.down_proj)


def fused_fc1(module: nn.Module, s: MoeSet) -> torch.Tensor:
    """``fc1_fused``: :func:`fused_swiglu.experts.routed_swiglu` (routing included), ``(T k, I)`` sorted by
    expert."""
    from ..experts import routed_swiglu

    return routed_swiglu(s.x, s.top_k_index, module.gate_up_proj)[0]


def tile_config(method: str, dtype: torch.dtype, I: int, num_sms: int) -> str:
    """The grouped config a :data:`TILE_METHODS` method names for experts of intermediate size ``I`` on
    ``num_sms`` SMs: ``fused_t64``, the 64-row token tile's (its launch 1:1); ``fused_coop``, the Cooperative
    config with the token-tile group :func:`fused_swiglu.configs.grouped.token_group` gives its weight tiles."""
    from .. import configs

    grouped = configs.grouped
    if method.endswith("_coop"):
        name = f"{grouped.GROUPED_COOPERATIVE_CONFIGS[grouped.GROUPED_WIDEST_TILE]}_{configs.DTYPE_SUFFIX[dtype]}"
        group, _ = grouped.token_group(grouped.GROUPED_WIDEST_TILE, I, num_sms, name)
        return f"{name}@1:{group}"
    tile = int(method.rsplit("_t", 1)[1])
    return f"{grouped.GROUPED_CONFIGS[tile]}_{configs.DTYPE_SUFFIX[dtype]}"


def _pinned_config(method: str, module: nn.Module, x: torch.Tensor) -> str:
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 132
    return tile_config(method, x.dtype, module.down_proj.shape[2], sms)


def method_fn(method: str) -> Callable[[nn.Module, MoeSet], torch.Tensor]:
    """The function a method calls on the experts module and one input set."""
    if method in TILE_METHODS:
        from ..experts import routed_swiglu, swiglu_experts

        if method.startswith("fc1_"):
            return lambda module, s: routed_swiglu(s.x, s.top_k_index, module.gate_up_proj,
                                                   config=_pinned_config(method, module, s.x))[0]
        return lambda module, s: swiglu_experts(s.x, s.top_k_index, s.top_k_weights, module.gate_up_proj,
                                                module.down_proj, config=_pinned_config(method, module, s.x))
    if method.startswith("hf_"):
        return hf_forward(method.removeprefix("hf_"))
    if method == "fused":
        return fused_forward
    if method == "fc1_fused":
        return fused_fc1
    gate_up = _gate_up_quack if "quack" in method else _gate_up_grouped_mm
    if method in FC1:
        return lambda module, s: fc1(gate_up, module, s)
    return lambda module, s: experts_forward(gate_up, module, s)


def reference(module: nn.Module, s: MoeSet, gate_up_only: bool = False) -> torch.Tensor:
    """The fp32 experts forward of one set, ``(T, H)``; with ``gate_up_only`` its gate/up part in the
    sorted order of :func:`route`, ``(T k, I)``. One product per expert hit (a host loop)."""
    T, k = s.top_k_index.shape
    x = s.x.float()
    perm, _ = route(s.top_k_index, module.num_experts)
    pairs = s.top_k_index.reshape(-1)[perm]  # each sorted pair's expert
    I = module.down_proj.shape[2]
    fc1_out = torch.zeros(T * k, I, device=x.device)
    out = torch.zeros(T, x.shape[1], device=x.device)
    for e in torch.unique(pairs).tolist():
        rows = (pairs == e).nonzero().squeeze(1)
        g, u = (x[perm[rows] // k] @ module.gate_up_proj[e].float().T).chunk(2, dim=-1)
        fc1_out[rows] = F.silu(g) * u
        if not gate_up_only:
            y = fc1_out[rows] @ module.down_proj[e].float().T
            out.index_add_(0, perm[rows] // k, y * s.top_k_weights.reshape(-1)[perm[rows], None].float())
    return fc1_out if gate_up_only else out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Mean absolute error over the reference's RMS (0 for empty outputs of the right shape)."""
    if ref.numel() == 0:
        return 0.0 if out.shape == ref.shape else float("inf")
    rms = ref.pow(2).mean().sqrt().item() or 1.0
    return (out.float() - ref).abs().mean().item() / rms


def checked_calls(module: nn.Module, sets: Sequence[MoeSet], methods: Sequence[str],
                  dropped: Callable[[str, str], None]) -> dict[str, list[Callable[[], object]]]:
    """method -> one call per set, for the methods whose output on the first set passes the check;
    ``dropped(method, why)`` is told of each other one (every method here is a peer).

    Raises:
        ValueError: an unknown method (:func:`check_methods`).
    """
    check_methods(methods)
    refs: dict[bool, torch.Tensor] = {}
    calls = {}
    for method in methods:
        fn = method_fn(method)
        try:
            out = fn(module, sets[0])
        except (RuntimeError, ValueError, TypeError, AssertionError, ImportError) as e:
            # torch.cuda.OutOfMemoryError is a RuntimeError
            dropped(method, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
            continue
        only = method in FC1
        if only not in refs:
            refs[only] = reference(module, sets[0], gate_up_only=only)
        err = relative_error(out, refs[only])
        del out
        if not err < CHECK_TOLERANCE:
            dropped(method, f"its output differs from the fp32 reference by {err:.3g} x RMS on average")
            continue
        calls[method] = [lambda fn=fn, s=s: fn(module, s) for s in sets]
    return calls


def graph_replays(calls: dict[str, list[Callable[[], object]]], device: torch.device,
                  dropped: Callable[[str, str], None]) -> dict[str, list[Callable[[], object]]]:
    """``calls`` with every method but :data:`EAGER_ONLY` captured into CUDA graphs, one method at a
    time; a method whose graphs do not fit in the device's memory (one graph per input set, each with
    its own memory) is left out, and ``dropped(method, why)`` told."""
    out = {}
    for method, fns in calls.items():
        if method in EAGER_ONLY:
            out[method] = fns
            continue
        try:
            out[method] = timing.as_graph_replays({method: fns}, device)[method]
        except torch.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            dropped(method, f"out of memory in CUDA-graph capture: {str(e).splitlines()[0][:120]}")
    return out


@dataclass(frozen=True)
class Ceilings:
    """The rates the floor is taken at, measured on the device: copy bandwidth (read plus write) and
    cuBLAS's bf16 matrix rate."""

    copy_gbps: float
    mm_tflops: float


def _median_ms(fn: Callable[[], object], device: torch.device, reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def measure_ceilings(device: torch.device) -> Ceilings:
    """:class:`Ceilings` of ``device``: a 1 GiB copy and an 8192-cubed bf16 product, medians of 20."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    copy_ms = _median_ms(lambda: dst.copy_(src), device)
    del src, dst
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    torch.mm(a, b)
    mm_ms = _median_ms(lambda: torch.mm(a, b), device)
    return Ceilings(2 * n / (copy_ms * 1e-3) / 1e9, 2 * 8192**3 / (mm_ms * 1e-3) / 1e12)


def active_experts(sets: Sequence[MoeSet]) -> float:
    """The distinct experts the routing reaches, the mean over the sets."""
    return sum(torch.unique(s.top_k_index).numel() for s in sets) / len(sets)


def floor_ms(shape: MoeShape, T: int, active: float, ceilings: Ceilings, gate_up_only: bool,
             element_bytes: int = 2) -> float:
    """The longer of the active experts' weight bytes at the copy bandwidth and the products' FLOPs at
    the matrix rate: gate and up (``gate_up_only``), else gate, up and down."""
    H, I = shape.hidden_size, shape.intermediate_size
    matrices = 2 if gate_up_only else 3
    weight_bytes = active * matrices * I * H * element_bytes
    flops = 2 * T * shape.top_k * matrices * I * H
    return max(weight_bytes / (ceilings.copy_gbps * 1e9), flops / (ceilings.mm_tflops * 1e12)) * 1e3


FIELDS = ("model", "hidden_size", "intermediate_size", "experts", "top_k", "tokens", "method", "median_ms",
          "p10_ms", "p90_ms", "floor_ms", "over_floor", *timing.GRID_FIELDS)


def rows_of(shape: MoeShape, T: int, timings: dict[str, timing.Timing], active: float,
            ceilings: Ceilings) -> list[dict]:
    """The rows of one cell."""
    rows = []
    for method, t in timings.items():
        floor = floor_ms(shape, T, active, ceilings, method in FC1)
        rows.append({"model": shape.model, "hidden_size": shape.hidden_size,
                     "intermediate_size": shape.intermediate_size, "experts": shape.experts, "top_k": shape.top_k,
                     "tokens": T, "method": method, "median_ms": t.median_ms, "p10_ms": t.p10_ms,
                     "p90_ms": t.p90_ms, "floor_ms": floor, "over_floor": t.median_ms / floor})
    return rows


def run_moe(shapes: Sequence[MoeShape], tokens: Sequence[int], methods: Sequence[str], console,
            out: Path | None = None, reps: int = REPS, warmup_ms: float = WARMUP_MS, cuda_graph: bool = True,
            protocol: str = "auto", seconds: float = timing.SUSTAINED_SECONDS,
            dtype: torch.dtype = torch.bfloat16) -> list[dict]:
    """Time every shape at every T on the current CUDA device, print a line per cell, and with ``out``
    write ``{"meta", "rows"}`` as JSON there and the rows as CSV beside it: after every cell (meta
    ``complete`` false, so a run cut short keeps what it timed), then once more at the end (true).
    Methods left out of a cell (wrong output, an error, CUDA graphs out of memory) are listed in meta
    ``not_timed``.

    Raises:
        ValueError: an unknown method, or ``out`` cannot be written.
    """
    check_methods(methods)
    if out is not None:
        out = report.check_out_path(out)
    device = torch.device("cuda", torch.cuda.current_device())
    ceilings = measure_ceilings(device)
    console.print(f"floor rates: copy {ceilings.copy_gbps:.0f} GB/s, bf16 products {ceilings.mm_tflops:.0f} TFLOP/s")
    held: dict[str, object] = {}  # the experts module of the shape being timed (one at a time)
    active: dict[tuple[str, int], float] = {}
    not_timed: list[dict] = []

    def calls_for(shape: MoeShape, T: int, device: torch.device, l2: int):
        if held.get("shape") != shape:
            held.clear()
            torch.cuda.empty_cache()
            held.update(shape=shape, module=experts_module(shape, dtype, device))
        sets = make_sets(shape, T, dtype, device)
        active[shape.model, T] = active_experts(sets)

        def dropped(method: str, why: str) -> None:
            console.print(f"{shape.model} T={T}: {method} not timed: {why}")
            not_timed.append({"model": shape.model, "tokens": T, "method": method, "why": why})

        calls = checked_calls(held["module"], sets, methods, dropped)
        if cuda_graph:
            calls = graph_replays(calls, device, dropped)
        return calls

    def write(rows: list[dict], soak: dict | None, complete: bool) -> tuple[Path, Path]:
        meta = report.machine_meta(device)
        meta.update({"reps": reps, "warmup_ms": warmup_ms, "cuda_graph": cuda_graph, "dtype": str(dtype),
                     "copy_gbps": ceilings.copy_gbps, "mm_tflops": ceilings.mm_tflops,
                     "routing": "uniform: each token's k experts the top k of uniform scores, weights a softmax",
                     "protocol": "L2 flushed before each call, input sets rotated, CUDA-event medians"
                                 + ("; every method but hf_eager captured in a CUDA graph per input set and replayed"
                                    if cuda_graph else "")
                                 + "; each row's protocol: 'interleaved' (methods alternated rep by rep) or "
                                   f"'sustained' (after a heat soak, each method back to back for {seconds:g} s)",
                     "complete": complete, "not_timed": not_timed})
        if soak is not None:
            meta["heat_soak"] = soak
        return report.write_results(out, meta, rows, FIELDS)

    rows, _, soak = timing.time_grid(
        shapes, tokens, calls_for, lambda shape, T, t: rows_of(shape, T, t, active[shape.model, T], ceilings),
        lambda r: f"{r['method']} {r['median_ms']:.4f} ms ({r['over_floor']:.2f}x floor)",
        console, reps=reps, warmup_ms=warmup_ms, cuda_graph=cuda_graph, protocol=protocol, seconds=seconds,
        capture=False, on_cell=None if out is None else lambda rows, soak: write(rows, soak, complete=False))
    if out is not None:
        paths = write(rows, soak, complete=True)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
