"""The kernels on a Hopper GPU against float64 (criterion: numerics.py). Inputs are fresh random
data on every run; each test's seed is in its failure message."""

from __future__ import annotations


import pytest
import torch

from fused_swiglu import _lib, catalog, pack_gate_up, swiglu, swiglu_packed
from fused_swiglu.bench.shapes import QWEN2_5_BY_SIZE as QWEN
from numerics import Float64Truth, assert_matches_float64

# the deprecated layout="concatenated" is still tested until its removal; its warning: test_functional_cpu
pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:swiglu.*layout='concatenated'.*deprecated:FutureWarning")]

DTYPES = [torch.bfloat16, torch.float16]


def _dt(dtype):
    return "bf16" if dtype == torch.bfloat16 else "fp16"


def _inputs(M, H, I, dtype, lead=None):
    """x ~ N(0, 1), weights ~ N(0, 1/H) on the GPU."""
    shape = (M, H) if lead is None else (*lead, H)
    x = torch.randn(shape, device="cuda").to(dtype)
    wg = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    wu = (torch.randn(I, H, device="cuda") * H**-0.5).to(dtype)
    return x, wg, wu


def _all_paths(x, wg, wu):
    """Every public path: (name, output)."""
    w_cat = torch.cat([wg, wu])
    return [
        ("swiglu dual", swiglu(x, wg, wu, kernel="dual", backend="cutlass")),
        ("swiglu packed", swiglu(x, wg, wu, kernel="packed", backend="cutlass")),
        ("swiglu_packed interleaved", swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved", backend="cutlass")),
        ("swiglu_packed concatenated", swiglu_packed(x, w_cat, layout="concatenated", backend="cutlass")),
        ("swiglu dual promoted", swiglu(x, wg, wu, kernel="dual", backend="cutlass", accumulation="promoted")),
        ("swiglu_packed interleaved promoted",
         swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved", backend="cutlass", accumulation="promoted")),
    ]


def _check_all(x, wg, wu, what):
    truth = Float64Truth(x, wg, wu)
    for name, out in _all_paths(x, wg, wu):
        truth.check(out, f"{what} {name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("M", [1, 127, 2048])
@pytest.mark.parametrize("model", list(QWEN))
def test_qwen_shapes(model, M, dtype, seed):
    H, I = QWEN[model]
    x, wg, wu = _inputs(M, H, I, dtype)
    _check_all(x, wg, wu, f"{model} M={M} {_dt(dtype)} seed={seed}")


@pytest.mark.parametrize("M", [1, 129, 2048])
@pytest.mark.parametrize("model", list(QWEN))
def test_qwen_shapes_compiled(model, M, seed):
    """The same paths inside one torch.compile(fullgraph=True) graph: the kernels the eager calls
    run, bit for bit."""
    H, I = QWEN[model]
    x, wg, wu = _inputs(M, H, I, torch.bfloat16)
    w_packed, w_cat = pack_gate_up(wg, wu), torch.cat([wg, wu])

    def paths(x, wg, wu, w_packed, w_cat):
        return (swiglu(x, wg, wu), swiglu_packed(x, w_packed, layout="interleaved"),
                swiglu_packed(x, w_cat, layout="concatenated"))

    torch._dynamo.reset()
    compiled = torch.compile(paths, fullgraph=True)(x, wg, wu, w_packed, w_cat)
    for name, got, want in zip(("dual", "interleaved", "concatenated"), compiled, paths(x, wg, wu, w_packed, w_cat)):
        assert torch.equal(got, want), f"compiled {name} {model} M={M} differs from the eager call (seed={seed})"


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("M", [3, 29, 129, 4097])  # 7B at M = 29: two swap-AB token tiles, the last partial
@pytest.mark.parametrize("model", ["0.5B", "7B"])
def test_ragged_token_counts(model, M, dtype, seed):
    H, I = QWEN[model]
    x, wg, wu = _inputs(M, H, I, dtype)
    _check_all(x, wg, wu, f"{model} M={M} {_dt(dtype)} seed={seed}")


@pytest.mark.parametrize(("model", "M"), [("1.5B", 345), ("7B", 300), ("7B", 360), ("14B", 500), ("14B", 1000),
                                         ("32B", 700), ("7B", 520), ("3B", 1030), ("72B", 520), ("72B", 1030)])
def test_mid_token_counts(model, M, seed):
    """Token counts that the table serves with 64x192, 128x96 or 128x160 tiles (the tail rule, for
    the packed kernel on 72B only up to M = 768), each with a partial last token tile."""
    H, I = QWEN[model]
    x, wg, wu = _inputs(M, H, I, torch.bfloat16)
    _check_all(x, wg, wu, f"{model} M={M} seed={seed}")


@pytest.mark.fuzz
@pytest.mark.parametrize("trial", range(4))
def test_random_shapes(trial, seed):
    """A fresh draw each run: M in [1, 5000), H and I multiples of 8 up to 8184 and 16376, bf16 and
    fp16 in turn, every method against float64."""
    gen = torch.Generator().manual_seed(seed + trial)

    def draw(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=gen))

    M, H, I = draw(1, 5000), 8 * draw(1, 1024), 8 * draw(1, 2048)
    dtype = DTYPES[trial % 2]
    x, wg, wu = _inputs(M, H, I, dtype)
    _check_all(x, wg, wu, f"M={M} H={H} I={I} {_dt(dtype)} seed={seed} trial={trial}")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize(("model", "M"), [("1.5B", 648), ("7B", 2048)])
def test_zero_tokens(model, M, dtype, seed):
    """All-zero tokens (gate accumulators of exactly 0, as in the rows of a partial tile past M), in
    full tiles and in the partial last one."""
    H, I = QWEN[model]
    x, wg, wu = _inputs(M, H, I, dtype)
    x[3:9] = 0
    x[M - 5:] = 0
    _check_all(x, wg, wu, f"{model} M={M} {_dt(dtype)} zero tokens seed={seed}")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_batched_and_non_contiguous_x(dtype, seed):
    x, wg, wu = _inputs(0, 896, 4864, dtype, lead=(3, 7))
    _check_all(x, wg, wu, f"3-D x seed={seed}")
    assert swiglu(x, wg, wu).shape == (3, 7, 4864)
    xt = x.transpose(0, 1)  # (7, 3, 896), not viewable as 2-D
    _check_all(xt, wg, wu, f"transposed x seed={seed}")
    x1 = x[0, 0]  # 1-D x: (H,) -> (I,)
    _check_all(x1, wg, wu, f"1-D x seed={seed}")


def test_empty_x_launches_nothing_and_leaves_cuda_healthy(seed):
    _, wg, wu = _inputs(1, 896, 4864, torch.bfloat16)
    for shape in [(0, 896), (2, 0, 896)]:
        x = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        for _, out in _all_paths(x, wg, wu):
            assert out.shape == shape[:-1] + (4864,)
    a = torch.randn(64, 64, device="cuda")
    b = torch.randn(64, 64, device="cuda")
    c = torch.mm(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-2, atol=1e-2)


def test_auto_backend_uses_the_kernels_without_warning(recwarn, seed):
    x, wg, wu = _inputs(16, 896, 4864, torch.bfloat16)
    out = swiglu(x, wg, wu)
    assert not [w for w in recwarn if "fallback" in str(w.message)]
    assert _lib.is_loaded()
    assert_matches_float64(out, x, wg, wu, f"auto seed={seed}")


def test_runs_on_the_current_stream(seed):
    x, wg, wu = _inputs(300, 896, 4864, torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = swiglu(x, wg, wu)
    torch.cuda.current_stream().wait_stream(side)
    assert_matches_float64(out, x, wg, wu, f"side stream seed={seed}")


@pytest.mark.parametrize("kernel", ["dual", "packed"])
def test_cuda_graph_capture_and_replay(kernel, seed):
    x, wg, wu = _inputs(129, 896, 4864, torch.bfloat16)
    w_packed = pack_gate_up(wg, wu)

    def step():
        if kernel == "dual":
            return swiglu(x, wg, wu, kernel="dual")
        return swiglu_packed(x, w_packed, layout="interleaved")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: loads the library, selects the config
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step()
    for _ in range(2):
        x.copy_(torch.randn_like(x, dtype=torch.float32).to(x.dtype))
        graph.replay()
        torch.cuda.synchronize()
        assert_matches_float64(y, x, wg, wu, f"graph replay {kernel} seed={seed}")


def test_torch_compile_fullgraph(seed):
    x, wg, wu = _inputs(0, 896, 4864, torch.bfloat16, lead=(3, 7))
    w_packed = pack_gate_up(wg, wu)

    @torch.compile(fullgraph=True)
    def f(x, wg, wu, w_packed):
        a = swiglu(x, wg, wu)
        b = swiglu(x, wg, wu, kernel="packed", backend="cutlass")
        c = swiglu_packed(x, w_packed, layout="interleaved")
        return a, b, c

    for name, out in zip(("dual", "packed", "prepacked"), f(x, wg, wu, w_packed)):
        assert_matches_float64(out, x, wg, wu, f"compiled {name} seed={seed}")


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
def test_opcheck(contiguous, seed):
    H, I = 896, 4864
    if contiguous:
        x = torch.randn(3, 7, H, device="cuda").to(torch.bfloat16)
    else:
        x = torch.randn(3, 7, 2 * H, device="cuda").to(torch.bfloat16)[..., ::2]
    x2d = x.reshape(-1, H)  # (21, H); strides (2H, 2) in the strided case
    assert x2d.is_contiguous() == contiguous
    wg = (torch.randn(I, H, device="cuda") * H**-0.5).to(torch.bfloat16)
    wu = (torch.randn(I, H, device="cuda") * H**-0.5).to(torch.bfloat16)
    torch.library.opcheck(torch.ops.fused_swiglu.swiglu_dual.default, (x2d, wg, wu, ""))
    torch.library.opcheck(torch.ops.fused_swiglu.swiglu_packed.default, (x2d, pack_gate_up(wg, wu), ""))


# --- cases users reported -------------------------------------------------------------------------


def test_user_I_not_multiple_of_8_is_a_clear_error():
    x = torch.randn(33, 896, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4860, 896, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"I must be a multiple of 8 for 16-byte TMA rows; got I=4860"):
        swiglu(x, w, w)
    with pytest.raises(ValueError, match=r"got I=4860"):
        swiglu_packed(x, torch.cat([w, w]), layout="concatenated")


def test_user_H_900_is_a_clear_error():
    x = torch.randn(33, 900, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4864, 900, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"H must be a positive multiple of 8 for 16-byte TMA rows; got H=900"):
        swiglu(x, w, w)


def test_user_misaligned_x_and_row_slice_weight(seed):
    buf = torch.randn(128, 904, device="cuda").to(torch.bfloat16)
    x = buf[:, 1:897]  # row stride 904, start 2 bytes past a 16-byte boundary
    assert x.data_ptr() % 16 != 0
    w_fused = (torch.randn(2 * 4864, 896, device="cuda") / 896**0.5).to(torch.bfloat16)
    wg, wu = w_fused[:4864], w_fused[4864:]  # row-slice views, no copy needed
    _check_all(x, wg, wu, f"misaligned x seed={seed}")
    assert_matches_float64(swiglu_packed(x, w_fused, layout="concatenated"), x, wg, wu, f"fused view seed={seed}")


def test_user_strided_x_and_transposed_weight(seed):
    base = torch.randn(3, 7, 1792, device="cuda").to(torch.bfloat16)
    x = base[..., ::2]  # (3, 7, 896), column stride 2
    wt = (torch.randn(896, 4864, device="cuda") / 896**0.5).to(torch.bfloat16)
    wg = wt.t()  # (4864, 896) with strides (1, 4864)
    wu = (torch.randn(4864, 896, device="cuda") / 896**0.5).to(torch.bfloat16)
    _check_all(x, wg, wu, f"strided x seed={seed}")
    _check_all(x.transpose(0, 1), wg, wu, f"strided transposed x seed={seed}")


# --- accumulation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", list(QWEN))
def test_promoted_accumulation_is_exact_on_999_per_mille(model, seed):
    """accumulation="promoted": bit-identical to float64 rounded once on >= 99.9 % of the outputs
    (bf16, M = 2048), and no mismatch. GMMA's own accumulation gives 99.2 % at K = 8192."""
    from fused_swiglu.accuracy import compare

    H, I = QWEN[model]
    x, wg, wu = _inputs(2048, H, I, torch.bfloat16)
    truth = Float64Truth(x, wg, wu)
    outs = {
        "dual": swiglu(x, wg, wu, kernel="dual", backend="cutlass", accumulation="promoted"),
        "packed": swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved", backend="cutlass",
                                accumulation="promoted"),
    }
    for name, out in outs.items():
        r = compare(out, truth.ref64)
        assert r.exact >= 0.999 and r.mismatch == 0, f"{model} {name} seed={seed}: {r}"


@pytest.mark.parametrize("accumulation", ["fast", "promoted"])
@pytest.mark.parametrize("kernel", ["dual", "packed"])
def test_a_row_gets_the_same_bits_at_every_batch_size(kernel, accumulation, seed):
    """Every config of one accumulation sums K in the same order (64-wide k-tiles, the same
    promotion interval), so a token's output does not depend on how many tokens share the call,
    although M picks different tile shapes (7B: 64x128 at M <= 128, 64x192 at M = 520, 128-row tiles
    elsewhere above)."""
    H, I = QWEN["7B"]
    x, wg, wu = _inputs(4097, H, I, torch.bfloat16)
    full = swiglu(x, wg, wu, kernel=kernel, backend="cutlass", accumulation=accumulation)
    for lo, hi in [(5, 6), (0, 128), (100, 612), (7, 527), (1000, 3048)]:
        part = swiglu(x[lo:hi], wg, wu, kernel=kernel, backend="cutlass", accumulation=accumulation)
        assert torch.equal(part, full[lo:hi]), f"rows {lo}:{hi} differ from the M=4097 call (seed={seed})"


# --- every compiled config, every element written, nothing outside -------------------------------


# the configs whose output is y (the dSwiGLU GEMM's are tested in test_mlp_gpu.py), one test id each
UP_PROJECTION_CONFIGS = [n for n in catalog.names() + catalog.training_names() + catalog.dual_paired_names()
                         if not n.startswith("dswiglu")]


@pytest.mark.parametrize("name", UP_PROJECTION_CONFIGS)
def test_every_config_writes_exactly_its_output(name, seed):
    M, H, I = 200, 896, 1000  # partial tiles along M and N
    pad_rows, pad_cols = 8, 16
    cfg = _lib.library().info(name)
    dtype = torch.bfloat16 if cfg.dtype == "bf16" else torch.float16
    x, wg, wu = _inputs(M, H, I, dtype)
    big = torch.full((M + pad_rows, I + pad_cols), float("nan"), device="cuda", dtype=dtype)
    y = big[:M, :I]  # row stride I + 16: a multiple of 8
    gu = _preactivation_buffer(cfg, M, I, dtype)
    if cfg.kernel == "packed":
        _lib.run(cfg.name, x, pack_gate_up(wg, wu), None, y, **gu)
    else:
        _lib.run(cfg.name, x, wg, wu, y, **gu)
    torch.cuda.synchronize()
    what = f"{cfg.name} seed={seed}"
    assert torch.isnan(big[M:]).all() and torch.isnan(big[:M, I:]).all(), f"{what}: wrote outside y"
    assert_matches_float64(y, x, wg, wu, what)
    if gu:  # the store form: every gate and up pre-activation written too
        assert not (gu["g"].isnan().any() or gu["u"].isnan().any()), f"{what}: g or u not written"


def _preactivation_buffer(cfg, M: int, I: int, dtype) -> dict:
    """Poisoned g and u outputs ``(M, I)`` each, views of one ``(M, 2I)`` buffer, for a config that
    stores the pre-activations (the training forward); nothing for the others."""
    if not cfg.preactivations:
        return {}
    gu = torch.full((M, 2 * I), float("nan"), device="cuda", dtype=dtype)
    return {"g": gu[:, :I], "u": gu[:, I:]}


def _chain_weights(x, wg, wu, layers, run):
    """Per-layer weights scaled so that every layer's gate and up products have a standard
    deviation of about 2 (SwiGLU is quadratic in its input's scale: a chain with one weight would
    vanish or overflow), found by running the chain with a synchronisation after every launch.
    Returns (weights, outputs)."""
    weights, outs = [], []
    for _ in range(layers):
        c = 2.0 / x.float().std().item()
        weights.append((wg * c, wu * c))
        x = run(x, *weights[-1])
        torch.cuda.synchronize()
        outs.append(x)
    return weights, outs


@pytest.mark.parametrize("kernel", ["dual", "packed"])
def test_cuda_graph_of_a_chain(kernel, seed):
    """Four launches in one CUDA graph, each reading the output of the one before it with its own
    weights (a stack of layers): every replay gives the bits of the same chain run eagerly with a
    synchronisation after every launch, so each captured launch kept its own arguments."""
    M, H = 512, 1024
    x, wg, wu = _inputs(M, H, H, torch.bfloat16)

    def run(t, g, u):
        if kernel == "dual":
            return swiglu(t, g, u, kernel="dual")
        return swiglu_packed(t, pack_gate_up(g, u), layout="interleaved")

    weights, expected = _chain_weights(x, wg, wu, 4, run)
    packed = [pack_gate_up(g, u) for g, u in weights]

    def chain(t):
        for i, (g, u) in enumerate(weights):
            t = swiglu(t, g, u, kernel="dual") if kernel == "dual" else swiglu_packed(t, packed[i], layout="interleaved")
        return t

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain(x)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = chain(x)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(expected[-1]).all() and expected[-1].abs().mean() > 0.1
    assert torch.equal(y, expected[-1]), f"graph of a {kernel} chain differs (seed={seed})"


@pytest.mark.parametrize("name", UP_PROJECTION_CONFIGS)
def test_every_config_places_a_partial_last_token_tile_inside_the_problem(name, seed):
    """With M not a multiple of the token tile, the last tile of a tokens-along-M config starts at
    M - tile (collective/sm90_token_tile_shift.hpp) and writes rows that the tile before it writes
    too; both must write the same bits, and every row must match the call over whole tiles. Below one
    tile (M < tile) and in swap-AB form the tile reaches past M as before. Output poisoned first."""
    H, I = 896, 1000
    cfg = _lib.library().info(name)
    dtype = torch.bfloat16 if cfg.dtype == "bf16" else torch.float16
    tile = cfg.tile_n if cfg.swap_ab else cfg.tile_m
    x, wg, wu = _inputs(4 * tile, H, I, dtype)
    w, w_up = (pack_gate_up(wg, wu), None) if cfg.kernel == "packed" else (wg, wu)

    def run(M):
        y = torch.full((M, I), float("nan"), device="cuda", dtype=dtype)
        _lib.run(cfg.name, x[:M], w, w_up, y, **_preactivation_buffer(cfg, M, I, dtype))
        return y

    whole = run(4 * tile)
    assert_matches_float64(whole, x, wg, wu, f"{cfg.name} M={4 * tile} seed={seed}")
    for M in (tile - 1, tile + 1, 2 * tile + tile // 2, 4 * tile - 1):
        part = run(M)
        assert torch.equal(part, whole[:M]), f"{cfg.name} M={M}: rows differ from the M={4 * tile} call (seed={seed})"


@pytest.mark.parametrize("kernel", ["packed", "dual"])
def test_the_epilogue_saturates_like_the_division(kernel, seed):
    """silu(g) * u from the MUFU's ex2 and rcp: gates far below -88.7 (where 2^(-g log2 e) overflows
    fp32) give 0 as g / (1 + exp(-g)) does, a zero gate gives 0, and a row of gates and ups in the
    hundreds is as close to float64 as any other."""
    M, H, I = 256, 896, 512
    x, wg, wu = _inputs(M, H, I, torch.bfloat16)
    x[0] *= 200.0   # gate and up pre-activations of order +-200
    x[1] = 0.0      # gate 0, up 0
    y = swiglu(x, wg, wu, kernel=kernel, backend="cutlass")
    torch.cuda.synchronize()
    g = x[0].double() @ wg.double().T
    assert (g < -100).sum() > 10, "the scaled row must hold saturated gates"
    assert torch.equal(y[0][g < -100].float(), torch.zeros_like(y[0][g < -100].float())), f"seed={seed}"
    assert_matches_float64(y[0:1], x[0:1], wg, wu, f"{kernel} row of large gates, seed={seed}")
    assert torch.equal(y[1].float(), torch.zeros_like(y[1].float())), f"zero row (seed={seed})"
    assert_matches_float64(y[2:], x[2:], wg, wu, f"{kernel} seed={seed}")


def test_a_config_name_the_library_does_not_compile_is_refused_by_name():
    x, wg, wu = _inputs(4, 64, 64, torch.bfloat16)
    with pytest.raises(RuntimeError, match="ValueError: config must name a dual kernel for torch.bfloat16 .* got "
                                           "config='dual_pingpong_1x1x1_1x1_bf16' \\(closest: "):
        torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "dual_pingpong_1x1x1_1x1_bf16")


# --- sweep ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("H", [64, 896, 3584, 4096])
@pytest.mark.parametrize("I", [8, 256, 4864, 14336, 18944])
def test_sweep(I, H, dtype, seed):
    for M in (1, 63, 64, 65, 127, 128, 129, 1000):
        x, wg, wu = _inputs(M, H, I, dtype)
        out_dual = swiglu(x, wg, wu, kernel="dual", backend="cutlass")
        out_packed = swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved", backend="cutlass")
        what = f"M={M} I={I} H={H} {_dt(dtype)} seed={seed}"
        truth = Float64Truth(x, wg, wu)
        truth.check(out_dual, f"dual {what}")
        truth.check(out_packed, f"packed {what}")


def test_the_fast_path_raises_the_same_typed_errors(seed):
    """Once a device is known to be Hopper, calls skip the Python checks; a bad call still gets the
    Python checks' error (the type and the sentence naming the argument)."""
    x, wg, wu = _inputs(4, 64, 64, torch.bfloat16)
    swiglu(x, wg, wu)  # arms the fast path for this device
    w_packed = pack_gate_up(wg, wu)
    with pytest.raises(TypeError, match="w_gate must have the same dtype as x"):
        swiglu(x, wg.half(), wu)
    with pytest.raises(ValueError, match="w_up must be on the same device as x"):
        swiglu(x, wg, wu.cpu())
    with pytest.raises(ValueError, match="I must be a multiple of 8"):
        swiglu(x, wg[:60], wu[:60])
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., H\)"):
        swiglu(x[:, :32], wg, wu)
    with pytest.raises(ValueError, match="w_packed must have an even number of rows"):
        swiglu_packed(x, w_packed[:127], layout="interleaved")
    with pytest.raises(TypeError, match="x must be a dense"):
        swiglu(x.to_sparse(), wg, wu)
    assert_matches_float64(swiglu(x, wg, wu), x, wg, wu, f"after the errors seed={seed}")
