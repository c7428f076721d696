"""Shards of the gate/up and down weights: the same output columns in every layout, and the size rule."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from fused_swiglu import pack_gate_up, unpack_gate_up
from fused_swiglu.parallel import (TensorParallelSwiGLUMLP, local_size, shard_down, shard_gate_up, shard_packed,
                                   shard_swiglu_mlps)


def weights(I=48, H=16):
    # distinct integers: a row of the wrong tensor or the wrong column shows up as an exact mismatch
    w_gate = torch.arange(I * H, dtype=torch.float32).view(I, H)
    return w_gate, w_gate + 10_000, torch.arange(H * I, dtype=torch.float32).view(H, I) - 10_000


@pytest.mark.parametrize("world_size", [1, 2, 3, 6])
def test_every_layout_gives_a_rank_the_same_columns(world_size):
    w_gate, w_up, w_down = weights()
    n = 48 // world_size
    interleaved, concatenated = pack_gate_up(w_gate, w_up), torch.cat([w_gate, w_up])
    for r in range(world_size):
        cols = slice(r * n, (r + 1) * n)
        g, u = shard_gate_up(w_gate, w_up, r, world_size)
        assert torch.equal(g, w_gate[cols]) and torch.equal(u, w_up[cols])
        s = shard_packed(interleaved, r, world_size, layout="interleaved")
        assert torch.equal(s, pack_gate_up(w_gate[cols], w_up[cols]))  # itself interleaved
        gi, ui = unpack_gate_up(s, layout="interleaved")
        assert torch.equal(gi, g) and torch.equal(ui, u)
        c = shard_packed(concatenated, r, world_size, layout="concatenated")
        assert torch.equal(c, torch.cat([g, u]))  # gate rows then up rows, not rows [2rn, 2(r+1)n)
        assert torch.equal(shard_down(w_down, r, world_size), w_down[:, cols])
        assert shard_down(w_down, r, world_size).is_contiguous()


def test_interleaved_shard_is_a_view():
    w = pack_gate_up(*weights()[:2])
    assert shard_packed(w, 1, 2, layout="interleaved").data_ptr() == w[48:].data_ptr()


@pytest.mark.parametrize("I, world_size", [(48, 4), (40, 2), (8, 2)])
def test_size_rule(I, world_size):
    w_gate, w_up = weights()[0][:I], weights()[1][:I]
    with pytest.raises(ValueError, match=r"multiple of 8 \* world_size = %d" % (8 * world_size)):
        shard_gate_up(w_gate, w_up, 0, world_size)
    with pytest.raises(ValueError, match="whole blocks of 8 gate rows"):
        shard_packed(pack_gate_up(w_gate, w_up), 0, world_size, layout="interleaved")
    with pytest.raises(ValueError, match="I=%d" % I):
        shard_down(weights()[2][:, :I], 0, world_size)
    with pytest.raises(ValueError, match="I=%d" % I):
        local_size(I, world_size)


def test_rank_and_layout_errors():
    w_gate, w_up, w_down = weights()
    for rank, world_size in [(2, 2), (-1, 2), (0, 0)]:
        with pytest.raises(ValueError, match="rank must be in|world_size must be >= 1"):
            shard_gate_up(w_gate, w_up, rank, world_size)
    with pytest.raises(TypeError, match="rank must be an int"):
        shard_down(w_down, 0.0, 2)
    with pytest.raises(TypeError, match="world_size must be an int"):
        shard_down(w_down, 0, True)
    with pytest.raises(ValueError, match="layout"):
        shard_packed(torch.cat([w_gate, w_up]), 0, 2, layout="stacked")
    with pytest.raises(ValueError, match="w_down must be 2-D"):
        shard_down(w_down[0], 0, 2)
    with pytest.raises(ValueError, match="same shape"):
        shard_gate_up(w_gate, w_up[:8], 0, 2)


def test_module_needs_an_initialized_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    w_gate, w_up, w_down = weights()
    with pytest.raises(RuntimeError, match="init_process_group"):
        TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down)


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_module_argument_errors(one_rank):
    w_gate, w_up, w_down = (t.to(torch.bfloat16) for t in weights())
    with pytest.raises(ValueError, match="either w_gate and w_up"):
        TensorParallelSwiGLUMLP(w_down, w_gate)
    with pytest.raises(ValueError, match="either w_gate and w_up"):
        TensorParallelSwiGLUMLP(w_down, w_gate, w_up, w_packed=torch.cat([w_gate, w_up]), layout="concatenated")
    with pytest.raises(ValueError, match="reduce_dtype"):
        TensorParallelSwiGLUMLP(w_down, w_gate, w_up, reduce_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"w_up must be \(48, 16\)"):
        TensorParallelSwiGLUMLP(w_down, w_gate, w_up[:8])
    with pytest.raises(ValueError, match="layout"):
        TensorParallelSwiGLUMLP(w_down, w_packed=torch.cat([w_gate, w_up]), layout="stacked")
    with pytest.raises(ValueError, match="kernel"):
        TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down, kernel="fused")
    with pytest.raises(KeyError, match="down_proj.weight"):
        TensorParallelSwiGLUMLP.from_state_dict({"gate_proj.weight": w_gate}, "")


def test_world_size_one_is_the_plain_mlp(one_rank):
    import warnings

    from fused_swiglu import swiglu_mlp

    w_gate, w_up, w_down = (t.to(torch.bfloat16) / 1e5 for t in weights())
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp = TensorParallelSwiGLUMLP.from_full(w_gate, w_up, w_down)
        assert mlp.w_down.data_ptr() != w_down.data_ptr()  # the module owns its shards
        assert torch.equal(mlp(x), swiglu_mlp(x, w_gate, w_up, w_down))
        assert "world_size=1" in repr(mlp)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_every_qwen25_mlp_splits(world_size):
    from fused_swiglu.bench.shapes import MODELS

    for shape in MODELS:
        assert local_size(shape.intermediate_size, world_size) * world_size == shape.intermediate_size


def test_the_dual_kernel_is_held_to_the_sharding_rule_only(one_rank):
    w = torch.zeros(12, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"multiple of 8 \* world_size = 8 .*I=12") as e:
        TensorParallelSwiGLUMLP.from_full(w, w, w.T.contiguous())
    assert "interleaved" not in str(e.value)


def test_shard_swiglu_mlps_names_the_block_and_changes_nothing(one_rank):
    from torch import nn

    from tp_worker import Mlp

    good, bad = torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(12, 16, dtype=torch.bfloat16)
    model = nn.Sequential(Mlp(good, good, good.T.contiguous()), Mlp(bad, bad, bad.T.contiguous()))
    with pytest.raises(ValueError, match="MLP block '1': intermediate size I=12 .*no block was replaced"):
        shard_swiglu_mlps(model)
    assert isinstance(model[0], Mlp) and isinstance(model[1], Mlp)
