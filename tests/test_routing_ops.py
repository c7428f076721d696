"""The routing operator fused_swiglu::moe_layout on the CPU: its layout against a loop over the pairs (counts,
whole tiles per expert, pair order within an expert; the sort's layout for ids below 0 and past the last expert,
which the CPU kernel refuses), the fake kernel, opcheck, torch.compile, and the argument checks."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fused_swiglu import grouped, routing_ops


def layout_by_loop(index: torch.Tensor, E: int, tile: int):
    """The layout the operator documents, pair by pair: (source, tile_expert, pair_row, padded_offsets, order,
    expert_offsets)."""
    T, k = index.shape
    ids = [min(max(int(i), 0), E) for i in index.reshape(-1).tolist()]  # below 0: expert 0; past the last: E
    counts = [sum(1 for i in ids if i == e) for e in range(E)]
    starts, row = [], 0
    for e in range(E):
        starts.append(row)
        row += -(-counts[e] // tile) * tile
    T_pad = grouped.padded_rows(T * k, E, tile)
    source = [0] * T_pad
    pair_row = [0] * (T * k)
    placed = [0] * E
    for i, e in enumerate(ids):
        if e < E:
            pair_row[i] = starts[e] + placed[e]
            source[pair_row[i]] = i // k
            placed[e] += 1
    ends = [s + -(-c // tile) * tile for s, c in zip(starts, counts)]
    tile_expert = [next((e for e in range(E) if ends[e] > t * tile), E) for t in range(T_pad // tile)]
    order = [i for e in range(E + 1) for i, pair_e in enumerate(ids) if pair_e == e]  # no expert's pairs last
    expert_offsets = [sum(counts[: e + 1]) for e in range(E)]
    return source, tile_expert, pair_row, ends, order, expert_offsets


def run(index: torch.Tensor, E: int, tile: int):
    return routing_ops.moe_layout(index, E, tile, grouped.padded_rows(index.numel(), E, tile))


ROUTINGS = {  # name: (top_k_index, E)
    "T=1 k=8 of 128": (torch.tensor([[5, 77, 3, 127, 0, 64, 9, 100]]), 128),
    "T=129 k=4 of 16": (torch.randint(0, 16, (129, 4), generator=torch.Generator().manual_seed(0)), 16),
    "one expert takes every pair": (torch.full((97, 2), 6), 8),
    "empty experts, ids past the last and below 0": (torch.tensor([[3, 30], [-1, 31], [32, 3], [40, -5]]), 32),
    "no tokens": (torch.zeros(0, 2, dtype=torch.int64), 4),
    "one expert": (torch.zeros(33, 1, dtype=torch.int64), 1),
}


@pytest.mark.parametrize("tile", [16, 64, 128])
@pytest.mark.parametrize("name", sorted(ROUTINGS))
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_the_layout_is_the_documented_one(name, tile, index_dtype):
    """The operator's layout; for ids outside [0, E), which the CPU kernel refuses, the sort's layout that the
    CUDA path takes past the kernel's bounds (unchecked there)."""
    index, E = ROUTINGS[name]
    unchecked = bool(index.numel()) and (int(index.min()) < 0 or int(index.max()) >= E)
    layout = routing_ops.layout_by_sorting if unchecked else run
    got = layout(index.to(index_dtype), E, tile)
    want = layout_by_loop(index, E, tile)
    assert [t.dtype for t in got] == [torch.int64, torch.int32, torch.int64, torch.int32, torch.int64, torch.int32]
    assert tuple(t.tolist() for t in got) == want, name


def test_it_is_the_sort_and_grouped_layout():
    """The same rows as fused_swiglu.experts.route_experts followed by fused_swiglu.grouped.grouped_layout."""
    from fused_swiglu import experts

    index = torch.randint(0, 64, (300, 6), generator=torch.Generator().manual_seed(1))
    source, tile_expert, pair_row, offsets, order, expert_offsets = run(index, 64, 16)
    routing = experts.route_experts(index, 64)
    assert torch.equal(order, routing.order) and torch.equal(expert_offsets, routing.expert_offsets)
    layout = grouped.grouped_layout(routing.expert_offsets, index.numel(), 16)
    assert torch.equal(tile_expert, layout.tile_expert) and torch.equal(offsets, layout.padded_offsets)
    assert torch.equal(pair_row[routing.order], layout.dest)
    assert torch.equal(source[layout.valid], routing.token[layout.source[layout.valid]])


def test_fake_kernel_opcheck_and_fullgraph_compile():
    index = torch.randint(0, 8, (40, 2), generator=torch.Generator().manual_seed(2))
    rows = grouped.padded_rows(80, 8, 16)
    with FakeTensorMode() as mode:
        shapes = [tuple(t.shape) for t in routing_ops.moe_layout(mode.from_tensor(index), 8, 16, rows)]
    assert shapes == [(rows,), (rows // 16,), (80,), (8,), (80,), (8,)]
    torch.library.opcheck(routing_ops.moe_layout, (index, 8, 16, rows))
    compiled = torch.compile(lambda i: routing_ops.moe_layout(i, 8, 16, rows)[2] + 1, backend="aot_eager",
                             fullgraph=True)
    assert torch.equal(compiled(index), run(index, 8, 16)[2] + 1)


def test_bad_arguments_name_the_argument_and_the_rule():
    index = torch.zeros(3, 2, dtype=torch.int64)
    rows = grouped.padded_rows(6, 4, 16)
    cases = [
        ((index.float(), 4, 16, rows), TypeError, "top_k_index must be torch.int64 or torch.int32"),
        ((index[0], 4, 16, rows), ValueError, r"top_k_index must be 2-D \(T, k\) with k >= 1"),
        ((index[:, :0], 4, 16, rows), ValueError, r"got shape \(3, 0\)"),
        ((index, 0, 16, rows), ValueError, r"experts must be in \[1, 8192\]; got 0"),
        ((index, 8193, 16, rows), ValueError, r"experts must be in \[1, 8192\]"),
        ((index, 4, 0, rows), ValueError, r"tile must be in \[1, 1024\]; got 0"),
        ((index, 4, 16, rows + 16), ValueError, rf"padded_rows must be fused_swiglu.grouped.padded_rows\(6, 4, 16\) = "
                                                rf"{rows}; got {rows + 16}"),
    ]
    for args, error, says in cases:
        with pytest.raises(error, match=says):
            routing_ops.moe_layout(*args)


@pytest.mark.parametrize(("device", "pairs", "experts", "kernel"), [
    ("cuda", 1, 1, True),
    ("cuda", routing_ops.KERNEL_MAX_PAIRS, routing_ops.MAX_EXPERTS, True),
    ("cuda", routing_ops.KERNEL_MAX_PAIRS + 1, 128, False),
    ("cuda", 8, routing_ops.MAX_EXPERTS + 1, False),
    ("cpu", 8, 8, False),
])
def test_the_experts_forward_takes_the_kernel_within_its_bounds(device, pairs, experts, kernel):
    assert routing_ops.uses_kernel(torch.device(device), pairs, experts) is kernel


def test_the_layout_past_the_kernel_s_bounds_is_the_sort_s():
    index = torch.randint(0, 8, (routing_ops.KERNEL_MAX_PAIRS // 4 + 1, 4))
    for a, b in zip(routing_ops.layout(index, 8, 64), routing_ops.moe_layout(index, 8, 64, grouped.padded_rows(
            index.numel(), 8, 64))):
        assert torch.equal(a, b)
