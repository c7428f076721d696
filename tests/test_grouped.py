"""fused_swiglu.grouped on the CPU: the padded layout (against a loop over the experts), and grouped_swiglu
against float64 per expert, its argument checks and torch.compile."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import grouped
from fused_swiglu.accuracy import ulp_at
from fused_swiglu.reference import swiglu_float64


def _offsets(counts) -> torch.Tensor:
    return torch.cumsum(torch.tensor(counts, dtype=torch.int64), 0).to(torch.int32)


def _layout_by_loop(counts, T, tile=16):
    """The layout the docstring describes, one expert at a time: (source, valid, tile_expert, dest, routed,
    padded_offsets)."""
    E = len(counts)
    T_pad = grouped.padded_rows(T, E, tile)
    source, valid = [0] * T_pad, [False] * T_pad
    tile_expert = [E] * (T_pad // tile)
    dest, routed, padded_offsets = [0] * T, [False] * T, []
    row, padded_row = 0, 0
    for e, c in enumerate(counts):
        for j in range(c):
            source[padded_row + j], valid[padded_row + j] = row + j, True
            dest[row + j], routed[row + j] = padded_row + j, True
        tiles = -(-c // tile)
        tile_expert[padded_row // tile: padded_row // tile + tiles] = [e] * tiles
        row, padded_row = row + c, padded_row + tiles * tile
        padded_offsets.append(padded_row)
    return source, valid, tile_expert, dest, routed, padded_offsets


COUNTS = {
    "one row": [0, 1, 0],
    "decode, top-8 of 128": [1 if e in (3, 17, 40, 41, 90, 100, 101, 127) else 0 for e in range(128)],
    "empty experts between": [5, 0, 0, 17, 0, 16, 33],
    "one expert takes every row": [0, 0, 129, 0],
    "every expert full tiles": [16, 32, 48],
    "no rows": [0, 0],
    "the first expert only": [40],
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_the_layout_matches_one_expert_at_a_time(name):
    counts = COUNTS[name]
    T = sum(counts)
    layout = grouped.grouped_layout(_offsets(counts), T)
    source, valid, tile_expert, dest, routed, padded_offsets = _layout_by_loop(counts, T)
    assert layout.valid.tolist() == valid and layout.tile_expert.tolist() == tile_expert
    assert layout.padded_offsets.tolist() == padded_offsets and layout.padded_offsets.dtype == torch.int32
    assert [s for s, v in zip(layout.source.tolist(), valid) if v] == [s for s, v in zip(source, valid) if v]
    assert layout.dest.tolist() == dest and layout.routed.tolist() == routed
    assert layout.tile_expert.dtype == torch.int32 and layout.tile_expert.shape == (grouped.padded_rows(T, len(counts)) // 16,)
    assert torch.equal(layout.tile_expert, layout.tile_expert.sort().values)  # tiles past the last expert come last


def test_rows_past_the_last_offset_belong_to_no_expert():
    layout = grouped.grouped_layout(_offsets([2, 1]), 5)  # rows 3 and 4 are routed to no expert
    assert layout.routed.tolist() == [True, True, True, False, False]
    assert layout.valid.sum().item() == 3 and layout.dest.tolist()[:3] == [0, 1, 16]


def test_padded_rows_is_the_worst_case_rounded_to_whole_tiles():
    assert grouped.padded_rows(1, 128) == 16
    assert grouped.padded_rows(8, 128) == 128  # 8 experts of one row each
    assert grouped.padded_rows(4097, 8) == (4097 + 15 * 8 + 15) // 16 * 16
    assert grouped.padded_rows(0, 8) == 0
    for counts in COUNTS.values():  # never fewer rows than the layout takes
        assert sum(-(-c // 16) * 16 for c in counts) <= grouped.padded_rows(sum(counts), len(counts))


def test_the_layout_refuses_bad_offsets():
    with pytest.raises(TypeError, match="expert_offsets must be an integer tensor"):
        grouped.grouped_layout(torch.zeros(3), 0)
    with pytest.raises(ValueError, match=r"expert_offsets must be 1-D \(E,\) with E >= 1; got shape \(0,\)"):
        grouped.grouped_layout(torch.zeros(0, dtype=torch.int32), 0)
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        grouped.grouped_layout(torch.zeros(2, dtype=torch.int32), -1)


def test_malformed_offsets_give_in_bounds_indices():
    for offsets, T in (([5, 3, 9], 9), ([4, 100], 10), ([-3, 2], 2)):
        layout = grouped.grouped_layout(torch.tensor(offsets, dtype=torch.int32), T)
        T_pad = grouped.padded_rows(T, len(offsets))
        assert 0 <= layout.source.min() and layout.source.max() < max(T, 1)
        assert layout.dest.numel() == 0 or (0 <= layout.dest.min() and layout.dest.max() < T_pad)


def _problem(counts, H=32, I=24, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    E, T = len(counts), sum(counts)
    x = torch.randn(T, H, generator=g).to(dtype)
    w = (torch.randn(E, 2 * I, H, generator=g) * H**-0.5).to(dtype)
    return x, w, _offsets(counts)


@pytest.mark.parametrize("name", sorted(COUNTS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grouped_swiglu_is_swiglu_of_each_row_s_expert(name, dtype):
    counts = COUNTS[name]
    x, w, offsets = _problem(counts, dtype=dtype)
    y = grouped.grouped_swiglu(x, w, offsets)
    assert y.shape == (x.shape[0], 24) and y.dtype == dtype and y.is_contiguous()
    start = 0
    for e, c in enumerate(counts):
        rows = slice(start, start + c)
        ref64 = swiglu_float64(x[rows], w[e, :24], w[e, 24:])
        assert ((y[rows].double() - ref64).abs() <= ulp_at(ref64, dtype)).all(), (name, e)
        start += c


def test_grouped_swiglu_gradcheck_in_float64():
    x = torch.randn(10, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    w = (torch.randn(3, 16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) / 3).requires_grad_()
    offsets = _offsets([4, 0, 6])  # an expert with no rows
    assert torch.autograd.gradcheck(lambda x, w: grouped.grouped_swiglu(x, w, offsets), (x, w), fast_mode=True)


def test_rows_past_the_last_offset_get_zeros():
    x, w, _ = _problem([3, 2])
    y = grouped.grouped_swiglu(x, w, _offsets([2, 1]))
    assert torch.equal(y[3:], torch.zeros_like(y[3:])) and y[:3].abs().sum() > 0


@pytest.mark.parametrize("ends, first_bad", [([3, 2], "expert_offsets\\[1\\] = 2 after expert_offsets\\[0\\] = 3"),
                                             ([-1, 5], "expert_offsets\\[0\\] = -1$"),
                                             ([3, 9], "expert_offsets\\[1\\] = 9 after expert_offsets\\[0\\] = 3")])
def test_offsets_out_of_order_or_range_are_refused_on_the_cpu(ends, first_bad):
    x, w, _ = _problem([3, 2])  # T = 5 rows
    with pytest.raises(ValueError, match=r"grouped_swiglu: expert_offsets must be non-decreasing end rows in "
                                         r"\[0, T\] \(T = x_sorted.shape\[0\] = 5\); got " + first_bad):
        grouped.grouped_swiglu(x, w, torch.tensor(ends, dtype=torch.int32))


def test_grouped_swiglu_names_the_argument_and_the_rule():
    x, w, offsets = _problem([3, 2])
    cases = [
        ((x.int(), w, offsets), TypeError, "grouped_swiglu: x_sorted must be a floating-point tensor"),
        ((x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), offsets), TypeError,
         "x_sorted must be a floating-point tensor of 16 bits or more"),
        ((x[None], w, offsets), ValueError, r"grouped_swiglu: x_sorted must be 2-D \(T, H\)"),
        ((x, w.half(), offsets), TypeError, "gate_up_proj must have x_sorted's dtype"),
        ((x, w[0], offsets), ValueError, r"gate_up_proj must be 3-D \(E, 2I, H\)"),
        ((x, w[:, :47], offsets), ValueError, "an even number of rows per expert"),
        ((x[:, :16], w, offsets), ValueError, "x_sorted must have H = gate_up_proj.shape"),
        ((x, w, offsets.long()), TypeError, "expert_offsets must be torch.int32"),
        ((x, w, offsets[:1]), ValueError, r"one end offset per expert, \(2,\); got shape \(1,\)"),
        ((x, w, offsets.to("meta")), ValueError, "expert_offsets must be on x_sorted's device cpu"),
        ((x, w, [3, 5]), TypeError, "expert_offsets must be a dense"),
        ((x, w.to("meta"), offsets), ValueError, "gate_up_proj must be on x_sorted's device cpu"),
    ]
    for args, error, says in cases:
        with pytest.raises(error, match=says):
            grouped.grouped_swiglu(*args)
    with pytest.raises(ValueError, match="config must name a grouped kernel .* or 'promoted'"):
        grouped.grouped_swiglu(x, w, offsets, config="fast")


def test_grouped_swiglu_traces_under_torch_compile_fullgraph():
    x, w, offsets = _problem([5, 0, 20, 1], dtype=torch.float32)
    compiled = torch.compile(grouped.grouped_swiglu, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x, w, offsets), grouped.grouped_swiglu(x, w, offsets))
    other = _offsets([1, 20, 0, 5])  # new routing, same sizes: no recompilation needed for the result
    assert torch.equal(compiled(x, w, other), grouped.grouped_swiglu(x, w, other))
