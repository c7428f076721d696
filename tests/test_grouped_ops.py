"""The grouped operator (fused_swiglu.grouped_ops) on the CPU: the CPU kernel against float64 per expert,
the fake kernel, opcheck, torch.compile, the argument checks and the config argument (the choice itself:
tests/configs/test_grouped_choice.py)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fused_swiglu import grouped_ops
from fused_swiglu.accuracy import ulp_at
from fused_swiglu.reference import swiglu_float64

T = grouped_ops.TOKEN_TILE


def _operands(experts=(0, 0, 2, 3), E=3, H=32, I=24, dtype=torch.bfloat16, seed=0):
    """x_pad of len(experts) tiles, gate_up_proj (E, 2I, H) and tile_expert = experts."""
    g = torch.Generator().manual_seed(seed)
    x_pad = torch.randn(len(experts) * T, H, generator=g).to(dtype)
    gate_up_proj = (torch.randn(E, 2 * I, H, generator=g) * H**-0.5).to(dtype)
    return x_pad, gate_up_proj, torch.tensor(experts, dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_each_tile_is_swiglu_of_its_expert_and_tiles_past_the_last_expert_are_zero(dtype):
    x_pad, w, tile_expert = _operands(experts=(1, 0, 0, 2, 3, -1), dtype=dtype)  # 3 and -1: outside [0, E)
    y = grouped_ops.swiglu_grouped(x_pad, w, tile_expert)
    assert y.shape == (6 * T, 24) and y.dtype == dtype and y.is_contiguous()
    for t, e in enumerate(tile_expert.tolist()):
        rows = slice(t * T, (t + 1) * T)
        if not 0 <= e < 3:
            assert torch.equal(y[rows], torch.zeros_like(y[rows])), t
            continue
        ref64 = swiglu_float64(x_pad[rows], w[e, :24], w[e, 24:])
        err = (y[rows].double() - ref64).abs()
        bound = ulp_at(ref64, dtype) if dtype != torch.float32 else ref64.abs() * 1e-5 + 1e-6
        assert (err <= bound).all(), (t, e, err.max().item())


def test_float64_is_computed_in_float64():
    x_pad, w, tile_expert = _operands(dtype=torch.float64)
    y = grouped_ops.swiglu_grouped(x_pad, w, tile_expert)
    assert torch.allclose(y[:2 * T], swiglu_float64(x_pad[:2 * T], w[0, :24], w[0, 24:]), rtol=0, atol=1e-12)


def test_fake_kernel_gives_the_shape_dtype_and_contiguous_strides():
    with FakeTensorMode():
        x_pad = torch.empty(64, 2048, dtype=torch.bfloat16)
        w = torch.empty(128, 2 * 768, 2048, dtype=torch.bfloat16)
        y = grouped_ops.swiglu_grouped(x_pad, w, torch.empty(4, dtype=torch.int32), "")
        assert y.shape == (64, 768) and y.stride() == (768, 1) and y.dtype == torch.bfloat16
        xt = torch.empty(2048, 64, dtype=torch.bfloat16).t()  # a strided x_pad still gives a contiguous y
        assert grouped_ops.swiglu_grouped(xt, w, torch.empty(4, dtype=torch.int32), "").stride() == (768, 1)


def test_opcheck_and_torch_compile_fullgraph():
    x_pad, w, tile_expert = _operands(dtype=torch.float32)
    torch.library.opcheck(grouped_ops.swiglu_grouped, (x_pad, w, tile_expert, ""))
    compiled = torch.compile(lambda x: grouped_ops.swiglu_grouped(x, w, tile_expert) * 2, backend="aot_eager",
                             fullgraph=True)
    assert torch.equal(compiled(x_pad), grouped_ops.swiglu_grouped(x_pad, w, tile_expert) * 2)


def _bad_cases():
    x, w, te = _operands()
    return [
        ((x.int(), w, te), TypeError, "x_pad must be a floating-point tensor"),
        ((x, w.half(), te), TypeError, "gate_up_proj must have x_pad's dtype torch.bfloat16"),
        ((x, w, te.long()), TypeError, r"tile_expert must be torch.int32; got tile_expert.dtype=torch.int64"),
        ((x[None], w, te), ValueError, r"x_pad must be 2-D \(T_pad, H\)"),
        ((x, w[0], te), ValueError, r"gate_up_proj must be 3-D \(E, 2I, H\)"),
        ((x, w, te[None]), ValueError, r"tile_expert must be 1-D"),
        ((x, w[:0], te), ValueError, r"at least one expert \(E >= 1\)"),
        ((x, w[:, :47], te), ValueError, "an even number of rows per expert"),
        ((x[:, :16], w, te), ValueError, r"H = gate_up_proj.shape\[2\] = 32 columns; got H=16"),
        ((x[:63], w, te), ValueError, "one entry per token tile of x_pad .*got 4 entries for T_pad=63"),
        ((x, w, te[:3]), ValueError, "one entry per token tile of x_pad .*got 3 entries for T_pad=64"),
        ((x, w, te[:2]), ValueError, r"token tile must be one of \(16, 64, 128\) rows .*got 32"),
        ((x, w, te[:0]), ValueError, "one entry per token tile of x_pad .*got 0 entries for T_pad=64"),
        ((x, w.to("meta"), te), ValueError, "gate_up_proj must be on x_pad's device cpu; got gate_up_proj on meta"),
    ]


@pytest.mark.parametrize("fake", [False, True])
def test_bad_operands_are_refused_naming_the_argument_and_the_rule(fake):
    for args, error, says in _bad_cases():
        if fake and any(a.device.type != "cpu" for a in args):
            continue  # FakeTensorMode keeps no device of a meta tensor
        with pytest.raises(error, match=says):
            if fake:
                with FakeTensorMode() as mode:
                    grouped_ops.swiglu_grouped(*(mode.from_tensor(a) for a in args), "")
            else:
                grouped_ops.swiglu_grouped(*args, "")


def test_cuda_rules_are_checked_on_fake_cuda_tensors():
    x, w, te = _operands(H=36, dtype=torch.bfloat16)
    with FakeTensorMode():
        fx, fw, fte = (torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda") for t in (x, w, te))
        with pytest.raises(ValueError, match="H must be a positive multiple of 8 and I a multiple of 8 for 16-byte "
                                             "TMA rows; got H=36, I=24"):
            grouped_ops.swiglu_grouped(fx, fw, fte)
        with pytest.raises(TypeError, match="x_pad must be torch.bfloat16 or torch.float16 on CUDA"):
            grouped_ops.swiglu_grouped(fx.float(), fw.float(), fte)


def test_the_config_argument():
    x, w, te = _operands()
    name = "grouped_dual_swapab_pingpong_128x16x64_1x1_bf16"
    assert torch.equal(grouped_ops.swiglu_grouped(x, w, te, name), grouped_ops.swiglu_grouped(x, w, te, ""))
    # a config whose token tile is not the layout's (16 rows here) would cover several experts' tiles
    with pytest.raises(ValueError, match="has 64-row token tiles, but the layout's tiles hold 16 rows"):
        grouped_ops.swiglu_grouped(x, w, te, "grouped_dual_swapab_pingpong_128x64x64_1x1_bf16")
    promoted = "grouped_dual_swapab_pingpong_128x16x64_1x1_promote4_bf16"
    assert torch.equal(grouped_ops.swiglu_grouped(x, w, te, "promoted"), grouped_ops.swiglu_grouped(x, w, te, promoted))
    for config, says in (("fast", "or 'promoted' \\(the choice, promoted accumulation\\); got config='fast'"),
                         ("grouped_dual_swapab_pingpong_128x16x64_1x1_fp16", "must name a grouped kernel for "
                                                                             "torch.bfloat16"),
                         ("dual_swapab_pingpong_128x16x64_1x1_bf16", "closest: grouped_dual_swapab"),
                         ("nonsense", "got config='nonsense'")):
        with pytest.raises(ValueError, match=says):
            grouped_ops.swiglu_grouped(x, w, te, config)


@pytest.mark.parametrize("tile", [64, 128])
def test_wider_token_tiles_are_read_from_tile_expert(tile):
    """The layout's tile is T_pad / len(tile_expert): each tile of ``tile`` rows is its expert's."""
    g = torch.Generator().manual_seed(1)
    experts = (2, 0, 1)
    x_pad = torch.randn(len(experts) * tile, 32, generator=g).to(torch.bfloat16)
    w = (torch.randn(3, 48, 32, generator=g) * 32**-0.5).to(torch.bfloat16)
    y = grouped_ops.swiglu_grouped(x_pad, w, torch.tensor(experts, dtype=torch.int32))
    for t, e in enumerate(experts):
        rows = slice(t * tile, (t + 1) * tile)
        ref64 = swiglu_float64(x_pad[rows], w[e, :24], w[e, 24:])
        assert ((y[rows].double() - ref64).abs() <= ulp_at(ref64, torch.bfloat16)).all(), (t, e)


def test_gradients_of_x_pad_and_gate_up_proj():
    """gradcheck (fast mode) in float64 over a layout with an empty expert and a tile past the last expert's, and opcheck's
    autograd checks (the registration, the backward traced by AOT autograd) in bf16, the dtype whose backward
    products are torch._grouped_mm's."""
    x_pad, w, tile_expert = _operands(experts=(0, 0, 2, 3), E=3, H=8, I=8, dtype=torch.float64)
    args = (x_pad.requires_grad_(), w.requires_grad_())
    assert torch.autograd.gradcheck(lambda x, w: grouped_ops.swiglu_grouped(x, w, tile_expert), args, fast_mode=True)
    x_pad, w, tile_expert = _operands(H=16, I=16)
    torch.library.opcheck(grouped_ops.swiglu_grouped, (x_pad.requires_grad_(), w.requires_grad_(), tile_expert, ""),
                          test_utils=("test_autograd_registration", "test_aot_dispatch_dynamic"))
