"""bench moe on the CPU: shapes, routing, every method the CPU runs against the fp32 reference, the
check that leaves a wrong method out, the floor and the rows (the timing itself needs a GPU)."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu.bench import moe, timing
from fused_swiglu.bench.shapes import MOE_MODELS, MoeShape, find_moe

TINY = MoeShape("tiny", 64, 32, 8, 2)


def test_a_moe_shape_of_impossible_sizes_is_refused():
    for sizes in ((64, 32, 8, 9), (0, 32, 8, 2), (64, 32, 0, 0)):
        with pytest.raises(ValueError, match="sizes must be positive and top-k at most the experts"):
            MoeShape("x", *sizes)


def test_moe_shapes_by_name_or_sizes():
    assert find_moe(None) == list(MOE_MODELS) and find_moe(["deepseek-v3"]) == [MOE_MODELS[3]]
    assert find_moe(["2048x768x128x8"]) == [MoeShape("2048x768x128x8", 2048, 768, 128, 8)]
    assert find_moe(["2048X768X128X8"])[0].experts == 128  # case-insensitive, as the help says
    for bad, rule in ((["Qwen3-9000B"], "unknown MoE shape"), (["64x32x8x9"], "top-k at most the experts"),
                      (["64x0x8x2"], "I must be a positive multiple of 8"), (["64x32x0x1"], "sizes must be positive"),
                      (["63x32x8x2"], "H must be a positive multiple of 8"), (["64x32x8"], "takes four numbers"),
                      (["64x32x8x2x1"], "takes four numbers"), ([f"{2**31}x32x8x2"], r"up to 2\*\*31 - 1")):
        with pytest.raises(ValueError, match=rule):
            find_moe(bad)


def test_sets_route_k_distinct_experts_per_token_and_offsets_count_them():
    s = moe.make_sets(TINY, 13, torch.bfloat16, torch.device("cpu"))[0]
    assert s.top_k_index.shape == (13, 2) and (s.top_k_index[:, 0] != s.top_k_index[:, 1]).all()
    torch.testing.assert_close(s.top_k_weights.float().sum(-1), torch.ones(13), atol=1e-2, rtol=0)
    perm, offsets = moe.route(s.top_k_index, TINY.experts)
    ids = s.top_k_index.reshape(-1)
    assert offsets.dtype == torch.int32 and offsets[-1] == 26
    assert torch.equal(offsets, torch.cumsum(torch.bincount(ids, minlength=8), 0).int())
    assert (ids[perm].diff() >= 0).all()  # sorted by expert


@pytest.mark.parametrize("T", [0, 1, 3, 13])
def test_every_method_the_cpu_runs_agrees_with_the_fp32_reference(T):
    module = moe.experts_module(TINY, torch.bfloat16, torch.device("cpu"))
    sets = moe.make_sets(TINY, T, torch.bfloat16, torch.device("cpu"))
    dropped = {}
    calls = moe.checked_calls(module, sets, moe.METHODS, dropped.__setitem__)
    assert set(calls) == {"hf_eager", "hf_batched_mm", "hf_grouped_mm", "fused", "fc1_grouped_mm", "fc1_fused"}
    assert set(dropped) == {"quack_varlen", "fc1_quack_varlen"}  # no quack-kernels here: left out, named
    assert all("quack" in why for why in dropped.values())
    for method, fns in calls.items():
        assert len(fns) == moe.N_SETS
        out = fns[1]()
        assert out.shape == ((T * 2, 32) if method in moe.FC1 else (T, 64))
        assert moe.relative_error(out, moe.reference(module, sets[1], method in moe.FC1)) < 0.01, method
    # the experts forward quack_varlen builds on, with the grouped_mm gate/up in quack's place
    out = moe.experts_forward(moe._gate_up_grouped_mm, module, sets[0])
    assert moe.relative_error(out, moe.reference(module, sets[0])) < 0.01


@pytest.mark.parametrize("T", [1, 13])
def test_the_fused_methods_sort_as_the_others_and_round_once(T):
    """fc1_fused's rows come in the order of route() (fc1_grouped_mm's), and both fused methods are at least
    as close to the fp32 reference as their grouped_mm counterparts (one rounding of the gate/up product)."""
    module = moe.experts_module(TINY, torch.bfloat16, torch.device("cpu"))
    s = moe.make_sets(TINY, T, torch.bfloat16, torch.device("cpu"))[0]
    for fused, peer, only in (("fc1_fused", "fc1_grouped_mm", True), ("fused", "hf_grouped_mm", False)):
        ref = moe.reference(module, s, only)
        ours, theirs = moe.method_fn(fused)(module, s), moe.method_fn(peer)(module, s)
        assert ours.shape == theirs.shape == ref.shape and ours.dtype == torch.bfloat16
        assert moe.relative_error(ours, ref) <= moe.relative_error(theirs, ref) + 1e-3, fused


def test_quack_methods_are_left_out_of_the_default_where_quack_is_missing_and_unknown_names_refused():
    runs, left_out = moe.default_methods()
    assert runs == [m for m in moe.METHODS if m not in moe.PEERS]  # no quack-kernels here
    assert len(left_out) == 1 and "quack-kernels" in left_out[0]
    assert "quack-kernels" in moe.peer_problem("fc1_quack_varlen") and moe.peer_problem("hf_eager") is None
    module = moe.experts_module(TINY, torch.bfloat16, torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown method 'foo'"):
        moe.checked_calls(module, moe.make_sets(TINY, 2, torch.bfloat16, torch.device("cpu")), ["foo"], print)


def test_a_method_whose_output_is_wrong_or_raises_is_left_out(monkeypatch):
    module = moe.experts_module(TINY, torch.bfloat16, torch.device("cpu"))
    sets = moe.make_sets(TINY, 5, torch.bfloat16, torch.device("cpu"))
    real = moe.method_fn

    def broken(method):
        if method == "hf_batched_mm":
            return lambda m, s: real(method)(m, s) * 1.5
        if method == "hf_grouped_mm":
            def oom(m, s):
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")
            return oom
        return real(method)

    monkeypatch.setattr(moe, "method_fn", broken)
    dropped = {}
    calls = moe.checked_calls(module, sets, ["hf_eager", "hf_batched_mm", "hf_grouped_mm"], dropped.__setitem__)
    assert list(calls) == ["hf_eager"]
    assert "differs from the fp32 reference by" in dropped["hf_batched_mm"]
    assert dropped["hf_grouped_mm"].startswith("OutOfMemoryError: CUDA out of memory")


def test_a_method_whose_cuda_graphs_do_not_fit_is_left_out_and_the_others_graphed(monkeypatch):
    captured = []

    def as_graph_replays(calls, device):
        (method, fns), = calls.items()
        captured.append(method)
        if method == "hf_batched_mm":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 24.00 GiB")
        return {method: [f"graph of {method}"] * len(fns)}

    monkeypatch.setattr(timing, "as_graph_replays", as_graph_replays)
    eager = [lambda: None, lambda: None]
    calls = {"hf_eager": eager, "hf_batched_mm": [print, print], "hf_grouped_mm": [print, print]}
    dropped = {}
    out = moe.graph_replays(calls, torch.device("cpu"), dropped.__setitem__)
    assert captured == ["hf_batched_mm", "hf_grouped_mm"]  # eager-only methods are never captured
    assert out == {"hf_eager": eager, "hf_grouped_mm": ["graph of hf_grouped_mm"] * 2}
    assert list(dropped) == ["hf_batched_mm"]
    assert dropped["hf_batched_mm"].startswith("out of memory in CUDA-graph capture: CUDA out of memory")


def test_the_results_file_is_written_after_every_cell_and_marked_complete_at_the_end(monkeypatch, tmp_path):
    import json

    from fused_swiglu.bench import report

    seen = []

    def time_grid(shapes, tokens, calls_for, rows_of, line_of, console, on_cell=None, **kw):
        rows = []
        for T in tokens:
            rows.append({"model": "tiny", "tokens": T, "method": "hf_grouped_mm", "median_ms": 1.0})
            on_cell(list(rows), None)
            seen.append(json.loads(out.read_text())["meta"]["complete"])
        return rows, None, {"sm_mhz": 1500.0}

    monkeypatch.setattr(moe, "measure_ceilings", lambda device: moe.Ceilings(3000.0, 700.0))
    monkeypatch.setattr(timing, "time_grid", time_grid)
    monkeypatch.setattr(report, "machine_meta", lambda device: {"gpu": "test"})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    out = tmp_path / "moe.json"
    moe.run_moe([TINY], [1, 4], ["hf_grouped_mm"], type("C", (), {"print": staticmethod(lambda *a: None)}), out=out)
    assert seen == [False, False]
    data = json.loads(out.read_text())
    assert data["meta"]["complete"] is True and data["meta"]["heat_soak"] == {"sm_mhz": 1500.0}
    assert [r["tokens"] for r in data["rows"]] == [1, 4] and data["meta"]["not_timed"] == []


def test_the_floor_is_weight_bytes_or_flops_whichever_takes_longer():
    c = moe.Ceilings(copy_gbps=4000.0, mm_tflops=500.0)
    s = MOE_MODELS[0]  # Qwen3-30B-A3B: H 2048, I 768, k 8
    weights = lambda active, n: active * n * 768 * 2048 * 2 / 4e12 * 1e3  # noqa: E731  ms at 4000 GB/s
    assert moe.floor_ms(s, 1, 8, c, gate_up_only=True) == pytest.approx(weights(8, 2))
    assert moe.floor_ms(s, 1, 8, c, gate_up_only=False) == pytest.approx(weights(8, 3))
    flops_ms = 2 * 4096 * 8 * 3 * 768 * 2048 / 500e12 * 1e3
    assert moe.floor_ms(s, 4096, 128, c, gate_up_only=False) == pytest.approx(max(flops_ms, weights(128, 3)))
    assert flops_ms > weights(128, 3)  # at 4096 tokens the products bound it


def test_rows_carry_the_shape_the_floor_and_the_ratio():
    t = timing.Timing(0.5, 0.4, 0.6, 10)
    c = moe.Ceilings(1000.0, 500.0)
    rows = moe.rows_of(TINY, 4, {"hf_grouped_mm": t, "fc1_grouped_mm": t}, 3.0, c)
    assert [r["method"] for r in rows] == ["hf_grouped_mm", "fc1_grouped_mm"]
    assert set(rows[0]) == set(moe.FIELDS) - set(timing.GRID_FIELDS)
    assert rows[0]["floor_ms"] > rows[1]["floor_ms"]  # three matrices against two
    assert rows[1]["over_floor"] == pytest.approx(0.5 / moe.floor_ms(TINY, 4, 3.0, c, True))
    assert rows[0]["experts"] == 8 and rows[0]["top_k"] == 2 and rows[0]["tokens"] == 4


def test_bench_moe_help_lists_every_method_and_the_fused_ones_in_the_description():
    import argparse

    from fused_swiglu import cli

    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    page = next(a for a in commands["bench"]._actions if isinstance(a, argparse._SubParsersAction)).choices["moe"]
    text = next(a.help for a in page._actions if "--methods" in a.option_strings)
    assert text.startswith(f"a subset of {', '.join(moe.METHODS)},")
    assert {"fused", "fc1_fused"} <= set(moe.METHODS) and "fc1_fused" in moe.FC1 and "fused" not in moe.FC1
    assert "the fused experts forward (fused" in " ".join(page.description.split())


def test_the_pinned_methods_name_each_grouped_token_tile_s_config():
    from fused_swiglu import configs
    from fused_swiglu.bench import moe

    tiles = sorted({int(m.rsplit("_t", 1)[1]) for m in moe.TILE_METHODS if "_t" in m})
    assert tiles == list(configs.grouped.GROUPED_TOKEN_TILES)
    moe.check_methods(["fused_t64", "fc1_fused_t128", "fused_coop", "fc1_fused_coop"])
    assert "fc1_fused_t16" in moe.FC1 and "fused_t16" not in moe.FC1
    assert "fc1_fused_coop" in moe.FC1 and "fused_coop" not in moe.FC1
    assert moe.tile_config("fc1_fused_t64", torch.float16, 768, 132) == "grouped_dual_swapab_pingpong_128x64x64_1x1_fp16"
    # the Cooperative config in the groups its 256-row weight tiles get: Mixtral-8x7B's 112 fit 132 SMs, not 100
    coop = "grouped_dual_swapab_cooperative_256x128x64_1x1_bf16"
    assert moe.tile_config("fused_coop", torch.bfloat16, 14336, 132) == coop + "@1:1"
    assert moe.tile_config("fc1_fused_coop", torch.bfloat16, 14336, 100) == coop + "@1:8"
    with pytest.raises(ValueError, match="unknown method 'fused_t32'"):
        moe.check_methods(["fused_t32"])
