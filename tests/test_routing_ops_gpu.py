"""The routing operator's CUDA kernel (fused_swiglu::moe_layout, one launch) on a Hopper GPU: the same layout as
its CPU kernel, element for element, over decode and prefill routings of the MoE shapes (T = 1, 3, 127, 129,
4097), every token tile, int32 and int64 ids, empty experts, one expert taking every pair, ids below 0 and
past the last expert, the most experts it takes, pairs spread over many blocks; the C boundary's checks; a captured CUDA graph replayed under
new routing."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import grouped, routing_ops

pytestmark = pytest.mark.gpu

EXPERTS = {"Qwen3-30B-A3B": (128, 8), "DeepSeek-V3": (256, 8), "Mixtral-8x7B": (8, 2)}  # (E, k)
TOKENS = (1, 3, 127, 129, 4097)


def _routing(T: int, E: int, k: int, seed: int, device="cuda") -> torch.Tensor:
    """(T, k) int64: k distinct uniform experts per token."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.rand(T, E, device=device, generator=g).topk(k, dim=-1).indices


def _both(index: torch.Tensor, E: int, tile: int):
    """The CUDA kernel's layout and the CPU kernel's algorithm (``layout_by_sorting``, which the CPU operator
    runs after refusing ids outside [0, E): the CUDA kernel does not read ids on the host)."""
    rows = grouped.padded_rows(index.numel(), E, tile)
    on_gpu = routing_ops.moe_layout(index, E, tile, rows)
    on_cpu = routing_ops.layout_by_sorting(index.cpu(), E, tile)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= E):
        with pytest.raises(ValueError, match=r"top_k_index must hold expert ids in \[0, "):
            routing_ops.moe_layout(index.cpu(), E, tile, rows)
    else:
        for a, b in zip(on_cpu, routing_ops.moe_layout(index.cpu(), E, tile, rows)):
            assert torch.equal(a, b)
    return on_gpu, on_cpu


def _assert_same(index, E, tile, what):
    on_gpu, on_cpu = _both(index, E, tile)
    for name, a, b in zip(("source", "tile_expert", "pair_row", "padded_offsets", "order", "expert_offsets"), on_gpu,
                          on_cpu, strict=True):
        assert a.device.type == "cuda" and a.dtype == b.dtype and a.is_contiguous(), (what, name)
        assert torch.equal(a.cpu(), b), f"{what}: {name} differs from the CPU kernel's"


@pytest.mark.parametrize("tile", [16, 64, 128])
@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("shape", sorted(EXPERTS))
def test_matches_the_cpu_kernel(shape, T, tile, seed):
    E, k = EXPERTS[shape]
    index = _routing(T, E, k, seed)
    _assert_same(index, E, tile, f"{shape} T={T} tile={tile} seed={seed}")
    _assert_same(index.to(torch.int32), E, tile, f"{shape} T={T} tile={tile} int32 seed={seed}")


def test_edge_routings(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    cases = {
        "one expert takes every pair": (torch.full((4097, 2), 5, device="cuda"), 8),
        "two of 256 experts used": (torch.randint(0, 2, (129, 8), device="cuda", generator=g) * 200 + 3, 256),
        "ids below 0 and past the last expert": (torch.randint(-3, 12, (1000, 4), device="cuda", generator=g), 8),
        "one expert": (torch.zeros(77, 1, dtype=torch.int64, device="cuda"), 1),
        "no tokens": (torch.zeros(0, 8, dtype=torch.int64, device="cuda"), 128),
        "4085 experts (the last below the 48 KiB default)": (torch.randint(0, 4085, (512, 8), device="cuda", generator=g), 4085),
        "4086 experts (the first past it)": (torch.randint(0, 4086, (512, 8), device="cuda", generator=g), 4086),
        "4096 experts": (torch.randint(0, 4096, (512, 8), device="cuda", generator=g), 4096),
        "8192 experts (shared memory past 48 KB)": (torch.randint(0, 8192, (300, 8), device="cuda", generator=g), 8192),
        # the pairs spread over blocks: one 1024-pair step each, and (past 1024 x SMs pairs) several
        "32,776 pairs": (_routing(4097, 128, 8, seed), 128),
        "160,000 pairs, several steps per block": (_routing(20000, 256, 8, seed), 256),
        "160,000 pairs to one expert": (torch.full((40000, 4), 3, device="cuda"), 8),
        "a block's chunk of empty pairs": (torch.cat([torch.full((2000, 1), 9, device="cuda"),
                                                      torch.randint(0, 8, (2000, 1), device="cuda", generator=g)]), 8),
    }
    for what, (index, E) in cases.items():
        for tile in (16, 128):
            _assert_same(index, E, tile, f"{what} tile={tile} seed={seed}")


def test_the_c_boundary_names_the_argument_and_the_rule():
    index = torch.zeros(3, 2, dtype=torch.int64, device="cuda")
    rows = grouped.padded_rows(6, 4, 16)
    op = torch.ops.fused_swiglu.moe_layout.default
    cases = [
        ((index.float(), 4, 16, rows), "top_k_index must be torch.int64 or torch.int32"),
        ((index[0], 4, 16, rows), r"top_k_index must be 2-D \(T, k\)"),
        ((index, 0, 16, rows), r"experts must be in \[1, 8192\]; got 0"),
        ((index, 4, 0, rows), r"tile must be in \[1, 1024\]; got 0"),
        ((index, 4, 16, rows + 16), rf"padded_rows must be fused_swiglu.grouped.padded_rows\(6, 4, 16\) = {rows}"),
    ]
    for args, says in cases:
        with pytest.raises(RuntimeError, match=says):
            op(*args)


def test_cuda_graph_replays_under_new_routing(seed):
    E, k, T = 128, 8, 64
    index = _routing(T, E, k, seed)
    rows = grouped.padded_rows(T * k, E, 16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        routing_ops.moe_layout(index, E, 16, rows)  # warm-up: loads the libraries
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = routing_ops.moe_layout(index, E, 16, rows)
    for step in range(3):
        index.copy_(_routing(T, E, k, seed + 1 + step))
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(outs, routing_ops.moe_layout(index.cpu(), E, 16, rows)):
            assert torch.equal(a.cpu(), b), f"replay {step} seed={seed}"
