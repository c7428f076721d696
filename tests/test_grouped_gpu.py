"""The grouped kernel on a Hopper GPU, through fused_swiglu.grouped and the operator fused_swiglu::swiglu_grouped:
against float64 per expert at mixture-of-experts shapes (the dense tests' accuracy bar), every routed row
written and no row past the last expert's tiles, empty experts, one expert taking every row, the checks at the
C boundary, CUDA-graph capture replayed under new routing, and torch.compile."""

from __future__ import annotations

import functools

import pytest
import torch

from fused_swiglu import catalog, configs, grouped, grouped_ops
from numerics import Float64Truth

pytestmark = pytest.mark.gpu

# (hidden size H, intermediate size I, experts E) of the routed experts
SHAPES = {
    "Qwen3-30B-A3B": (2048, 768, 128),
    "DeepSeek-V3": (7168, 2048, 256),
    "Mixtral-8x7B": (4096, 14336, 8),
    "I=712": (1024, 712, 16),  # I not a multiple of a weight tile's gate half (64 or 128 rows)
}
TOKENS = (1, 3, 127, 129, 4097)  # routed rows: (token, expert) pairs


@functools.lru_cache(maxsize=1)  # one shape's weights at a time (DeepSeek-V3's take 15 GB in 16 bits)
def _weights(shape: str, dtype: torch.dtype) -> torch.Tensor:
    H, I, E = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(1)
    w = torch.randn(E, 2 * I, H, device="cuda", dtype=dtype, generator=g)
    return w.mul_(H**-0.5)


def _routing(T: int, E: int, H: int, dtype: torch.dtype, seed: int, expert: int | None = None):
    """x_sorted (T, H) and int32 end offsets (E,): each row routed to a uniform random expert (or all to
    ``expert``), rows sorted by expert."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = (torch.randint(0, E, (T,), device="cuda", generator=g) if expert is None
           else torch.full((T,), expert, device="cuda"))
    ids = ids.sort().values
    offsets = torch.cumsum(torch.bincount(ids, minlength=E), 0).to(torch.int32)
    x = torch.randn(T, H, device="cuda", generator=g).to(dtype)
    return x, offsets


def _check_per_expert(y, x, w, offsets, what):
    I = w.shape[1] // 2
    ends = offsets.tolist()
    start = 0
    for e, end in enumerate(ends):
        if end > start:
            Float64Truth(x[start:end], w[e, :I], w[e, I:]).check(y[start:end], f"{what} expert {e} rows {start}:{end}")
        start = end


def _poisoned_operator(x, w, offsets, config=""):
    """The operator on grouped_layout's layout (the token tile of ``config``, or the choice's), its fresh output
    most likely a block the caching allocator held NaN (an element the kernel does not write stays NaN):
    (y_pad, layout, tile)."""
    T, I = x.shape[0], w.shape[1] // 2
    tile = grouped.layout_tile(T, w.shape[0], config)
    layout = grouped.grouped_layout(offsets, T, tile)
    x_pad = x.index_select(0, layout.source).masked_fill_(~layout.valid[:, None], 0)
    T_pad = x_pad.shape[0]
    grouped_ops.swiglu_grouped(x_pad, w, layout.tile_expert, config)  # loads the libraries, makes the plan
    torch.full((T_pad, I), float("nan"), device="cuda", dtype=x.dtype)
    torch.cuda.synchronize()
    y_pad = grouped_ops.swiglu_grouped(x_pad, w, layout.tile_expert, config)
    torch.cuda.synchronize()
    return y_pad, layout, tile


def _check_layout_rows(y_pad, layout, tile, E, what):
    in_tiles = (layout.tile_expert < E).repeat_interleave(tile)
    assert not y_pad[in_tiles].isnan().any(), f"{what}: rows of an expert's tiles left unwritten"
    # the padding rows of an expert's last tile hold zero rows of x_pad: silu(0) * 0
    assert (y_pad[in_tiles & ~layout.valid] == 0).all(), what
    # the tiles past the last expert's are no work: nothing written there
    assert y_pad[~in_tiles].isnan().all(), f"{what}: a tile past the last expert's was written"


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_float64_per_expert_and_writes_every_routed_row(shape, T, seed):
    H, I, E = SHAPES[shape]
    w = _weights(shape, torch.bfloat16)
    x, offsets = _routing(T, E, H, torch.bfloat16, seed)
    y_pad, layout, tile = _poisoned_operator(x, w, offsets)
    what = f"{shape} T={T} {tile}-row tiles seed={seed}"
    _check_layout_rows(y_pad, layout, tile, E, what)
    y = grouped.grouped_swiglu(x, w, offsets)
    assert torch.equal(y, y_pad.index_select(0, layout.dest)), what
    _check_per_expert(y, x, w, offsets, what)


def test_the_shapes_reach_every_token_tile():
    tiles = {grouped.layout_tile(T, E) for _, _, E in SHAPES.values() for T in TOKENS}
    assert tiles == set(configs.grouped.GROUPED_TOKEN_TILES)


@pytest.mark.parametrize("config", [n for n in catalog.grouped_names() if n.endswith("_bf16")])
def test_every_grouped_config_at_one_routing(config, seed):
    """Each config by name over a layout of its tile: 4097 rows over Qwen3-30B-A3B's 128 experts (32 per
    expert on average: several 16-row tiles per expert, one 64- or 128-row tile, partly padding)."""
    H, I, E = SHAPES["Qwen3-30B-A3B"]
    w = _weights("Qwen3-30B-A3B", torch.bfloat16)
    x, offsets = _routing(4097, E, H, torch.bfloat16, seed)
    y_pad, layout, tile = _poisoned_operator(x, w, offsets, config)
    what = f"{config} seed={seed}"
    _check_layout_rows(y_pad, layout, tile, E, what)
    y = grouped.grouped_swiglu(x, w, offsets, config=config)
    assert torch.equal(y, y_pad.index_select(0, layout.dest)), what
    _check_per_expert(y, x, w, offsets, what)


@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
@pytest.mark.parametrize("shape, T, expert", [("Mixtral-8x7B", 4097, None), ("Mixtral-8x7B", 4097, 3),
                                               ("Qwen3-30B-A3B", 20000, None), ("Qwen3-30B-A3B", 129, None),
                                               ("I=712", 4097, None), ("I=712", 3, 15)])
def test_token_tile_groups_write_the_same_bits_as_the_order_along_m(schedule, shape, T, expert, seed):
    """Every launch of the widest tile's configs, Pingpong and Cooperative (token tiles in groups of 1, 2, 4, 8:
    several tiles per expert, a last group that is not whole, one expert holding every tile, the last expert
    only): against float64 per expert, every tile of an expert written, none past the last expert's, and the
    same bits as the order along M (the same tiles, each computed alike)."""
    H, I, E = SHAPES[shape]
    w = _weights(shape, torch.bfloat16)
    x, offsets = _routing(T, E, H, torch.bfloat16, seed, expert=expert)
    by_tile = (configs.grouped.GROUPED_CONFIGS if schedule == "pingpong"
               else configs.grouped.GROUPED_COOPERATIVE_CONFIGS)
    name = f"{by_tile[configs.grouped.GROUPED_WIDEST_TILE]}_bf16"
    along_m = None
    for group in (1, 2, 4, 8):
        config = f"{name}@1:{group}"
        y_pad, layout, tile = _poisoned_operator(x, w, offsets, config)
        what = f"{shape} T={T} expert={expert} {config} seed={seed}"
        _check_layout_rows(y_pad, layout, tile, E, what)
        if along_m is None:
            along_m = y_pad
            _check_per_expert(y_pad.index_select(0, layout.dest), x, w, offsets, what)
        else:
            in_tiles = (layout.tile_expert < E).repeat_interleave(tile)
            assert torch.equal(y_pad[in_tiles], along_m[in_tiles]), what


@pytest.mark.parametrize("T", (1, 129, 4097))
def test_fp16(T, seed):
    H, I, E = SHAPES["Qwen3-30B-A3B"]
    w = _weights("Qwen3-30B-A3B", torch.float16)
    x, offsets = _routing(T, E, H, torch.float16, seed)
    _check_per_expert(grouped.grouped_swiglu(x, w, offsets), x, w, offsets, f"fp16 T={T} seed={seed}")


@pytest.mark.parametrize("T", (1, 129, 4097))
@pytest.mark.parametrize("shape", ["Qwen3-30B-A3B", "Mixtral-8x7B"])
def test_promoted_accumulation_is_exact_on_999_per_mille(shape, T, seed):
    """config="promoted": every routed row written, no mismatch on any expert's rows, the same bits as the dense
    dual kernel's promoted accumulation on each expert's rows (one summation order), and bit-identical to float64
    rounded once on >= 99.9 % of the routed output, as the dense kernels' promoted accumulation. The rate is taken
    over the whole routed output from T = 129 on: at T = 1 the output is one row (768 elements on Qwen3-30B-A3B,
    where one element is 0.13 %), and the dense kernel's bits and no mismatch are what that size checks."""
    from fused_swiglu import swiglu
    from fused_swiglu.accuracy import compare
    from fused_swiglu.reference import swiglu_float64

    H, I, E = SHAPES[shape]
    w = _weights(shape, torch.bfloat16)
    x, offsets = _routing(T, E, H, torch.bfloat16, seed)
    y_pad, layout, tile = _poisoned_operator(x, w, offsets, "promoted")
    what = f"{shape} T={T} promoted seed={seed}"
    assert tile == configs.grouped.GROUPED_PROMOTED_TILE
    _check_layout_rows(y_pad, layout, tile, E, what)
    y = grouped.grouped_swiglu(x, w, offsets, config="promoted")
    assert torch.equal(y, y_pad.index_select(0, layout.dest)), what
    ref64 = torch.empty(y.shape, dtype=torch.float64)
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            rows = y[start:end]
            ref64[start:end] = swiglu_float64(x[start:end], w[e, :I], w[e, I:]).cpu()
            assert compare(rows, ref64[start:end]).mismatch == 0, f"{what} expert {e}"
            dense = swiglu(x[start:end], w[e, :I], w[e, I:], backend="cutlass", accumulation="promoted")
            assert torch.equal(rows, dense), f"{what} expert {e}: not the dense promoted kernel's bits"
        start = end
    assert start == T, what
    r = compare(y, ref64)
    assert r.mismatch == 0, f"{what}: {r}"
    if T >= 129:
        assert r.exact >= 0.999, f"{what}: {r}"


@pytest.mark.parametrize("expert", [0, 7])
def test_one_expert_takes_every_row(expert, seed):
    H, I, E = SHAPES["Mixtral-8x7B"]
    w = _weights("Mixtral-8x7B", torch.bfloat16)
    x, offsets = _routing(4097, E, H, torch.bfloat16, seed, expert=expert)
    y_pad, layout, _ = _poisoned_operator(x, w, offsets)
    assert not y_pad[layout.valid].isnan().any()
    y = grouped.grouped_swiglu(x, w, offsets)
    _check_per_expert(y, x, w, offsets, f"every row to expert {expert} seed={seed}")


def test_empty_experts_and_rows_past_the_last_offset(seed):
    H, I, E = SHAPES["Qwen3-30B-A3B"]
    w = _weights("Qwen3-30B-A3B", torch.bfloat16)
    counts = torch.zeros(E, dtype=torch.int64)
    counts[[0, 5, 6, 127]] = torch.tensor([17, 1, 16, 33])  # every other expert empty
    offsets = torch.cumsum(counts, 0).to(torch.int32).cuda()
    x = torch.randn(67 + 5, H, device="cuda").to(torch.bfloat16)  # 5 rows past the last offset
    y = grouped.grouped_swiglu(x, w, offsets)
    assert (y[67:] == 0).all()
    _check_per_expert(y[:67], x[:67], w, offsets, f"empty experts seed={seed}")
    assert grouped.grouped_swiglu(x[:0], w, torch.zeros(E, dtype=torch.int32, device="cuda")).shape == (0, I)


def test_cuda_graph_replays_under_new_routing(seed):
    H, I, E = SHAPES["Qwen3-30B-A3B"]
    w = _weights("Qwen3-30B-A3B", torch.bfloat16)
    T = 64
    x, offsets = _routing(T, E, H, torch.bfloat16, seed)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grouped.grouped_swiglu(x, w, offsets)  # warm-up: loads the libraries, makes the plan
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = grouped.grouped_swiglu(x, w, offsets)
    for step, expert in enumerate((None, 3, None)):  # new rows and routing in the captured buffers
        new_x, new_offsets = _routing(T, E, H, torch.bfloat16, seed + 1 + step, expert=expert)
        x.copy_(new_x)
        offsets.copy_(new_offsets)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, grouped.grouped_swiglu(x, w, offsets)), f"replay {step} seed={seed}"
        _check_per_expert(y, x, w, offsets, f"graph replay {step} seed={seed}")


def test_torch_compile_fullgraph(seed):
    H, I, E = SHAPES["Qwen3-30B-A3B"]
    w = _weights("Qwen3-30B-A3B", torch.bfloat16)
    x, offsets = _routing(40, E, H, torch.bfloat16, seed)
    compiled = torch.compile(grouped.grouped_swiglu, fullgraph=True)
    assert torch.equal(compiled(x, w, offsets), grouped.grouped_swiglu(x, w, offsets))


def test_the_c_boundary_names_the_argument_and_the_rule():
    H, I, E = 64, 32, 4
    x = torch.randn(32, H, device="cuda").to(torch.bfloat16)
    w = torch.randn(E, 2 * I, H, device="cuda").to(torch.bfloat16)
    te = torch.tensor([0, 2], dtype=torch.int32, device="cuda")
    cases = [
        ((x.float(), w.float(), te), "x_pad must be torch.bfloat16 or torch.float16"),
        ((x, w.half(), te), "gate_up_proj must have x_pad's dtype"),
        ((x, w, te.long()), "tile_expert must be torch.int32"),
        ((x, w, te.cpu()), "tile_expert must be a CUDA tensor"),
        ((x, w[0], te), r"gate_up_proj must be 3-D \(E, 2I, H\)"),
        ((x[:30], w, te), r"ValueError: the layout's token tile must be one of \(16, 64, 128\) rows"),
        ((x, w, te.repeat(2)[:3]), "tile_expert must have one entry per token tile of x_pad"),
        ((x, w[:, :63], te), "an even number of rows per expert"),
        ((x, w[:, :, :32], te), r"x_pad must be \(T_pad, H\) with H = gate_up_proj.shape\[2\] = 32; got H=64"),
        ((x, w.transpose(1, 2).contiguous().transpose(1, 2), te), "gate_up_proj must be readable in place by TMA"),
    ]
    for args, says in cases:
        with pytest.raises(RuntimeError, match=says):
            grouped_ops.swiglu_grouped(*args, "")
    with pytest.raises(RuntimeError, match="ValueError: config='promoted': the grouped configs with promoted "
                                           "accumulation have 16-row token tiles, but the layout's tiles hold 64"):
        grouped_ops.swiglu_grouped(x.repeat(4, 1), w, te, "promoted")  # 128 rows, 2 entries: 64-row tiles
    # a named config of another tile than the layout's (16 rows: 32 rows, 2 entries)
    with pytest.raises(RuntimeError, match="has 64-row token tiles, but the layout's tiles hold 16 rows"):
        torch.ops.fused_swiglu.swiglu_grouped.default(x, w, te, "grouped_dual_swapab_pingpong_128x64x64_1x1_bf16")
    # a strided view of the weights that TMA reads in place: every other expert
    y = grouped_ops.swiglu_grouped(x, w[::2], te.clamp_max(1), "")
    z = grouped_ops.swiglu_grouped(x, w[::2].contiguous(), te.clamp_max(1), "")
    assert torch.equal(y, z)
