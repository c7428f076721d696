"""The grouped operator (torch.library): SwiGLU over the experts of a mixture-of-experts layer, in the padded
layout that :func:`fused_swiglu.grouped.grouped_layout` builds (the public entry is
:func:`fused_swiglu.grouped.grouped_swiglu`).

``fused_swiglu::swiglu_grouped(x_pad, gate_up_proj, tile_expert, config="") -> y_pad``
    x_pad ``(T_pad, H)``: the routed tokens sorted by expert, each expert's rows padded to whole token
    tiles of a grouped config's tile (:data:`fused_swiglu.configs.GROUPED_TOKEN_TILES`: 16, 64 or 128 rows).
    gate_up_proj ``(E, 2I, H)`` of x_pad's dtype, as transformers stores the experts: ``W_gate[e] =
    gate_up_proj[e, :I]``, ``W_up[e] = gate_up_proj[e, I:]``. tile_expert ``(T_pad / tile,)`` int32 (its
    length gives the layout's token tile, ``T_pad / len(tile_expert)``): the expert of each token tile, in
    non-decreasing order, and a value outside ``[0, E)`` (E itself from the layout helper) for every tile
    past the last expert's. Returns y_pad ``(T_pad, I)``, new and contiguous, of x_pad's dtype: for each row
    r of a tile t with ``e = tile_expert[t]`` in ``[0, E)``, ``silu(x_pad[r] W_gate[e]^T) * (x_pad[r]
    W_up[e]^T)``.

Rows of the tiles past the last expert: the CUDA kernel neither computes nor writes them (its scheduler hands
out no work from the first such tile on, so they cost nothing); they hold whatever the fresh allocation held.
The CPU kernel writes zeros there. A tile_expert that puts such a value before a valid expert's tile breaks
the layout's rule: the CUDA kernel may then leave the later valid tiles unwritten too (it never reads out of
bounds); the CPU kernel computes every tile of a valid expert.

``config``: ``""`` (the choice, :func:`fused_swiglu.configs.grouped_choice`: the fast config of the layout's
token tile) or the name of a grouped config for x_pad's dtype with that tile
(:func:`fused_swiglu.catalog.grouped_names`); ``"promoted"`` is refused (no grouped config accumulates that way
yet).

CUDA kernel: C++ (``csrc/torch/grouped_ops.cpp``) on the one launch path (the plan callback, the plan cache,
one ``fsw_run``): bf16 / fp16, one CUDA device, H and I multiples of 8, gate_up_proj readable in place by TMA
(unit stride along H, row and expert strides multiples of 8 elements, a 16-byte aligned start: a contiguous
tensor is; it is never copied); x_pad is copied once if TMA cannot read it; tile_expert is read on the device
at each launch (no host synchronisation: a captured CUDA graph replays under new routing). It raises
RuntimeError naming the argument and the rule. CPU kernel: fp32 products per expert and one rounding to
x_pad's dtype (float64 in float64). Fake kernel: y_pad's shape, dtype and contiguous strides. The CPU and fake
kernels raise TypeError / ValueError naming the argument. Autograd: gradients of x_pad and gate_up_proj
(the gate and up products recomputed in the backward, the SwiGLU derivative in fp32, the products of
:mod:`fused_swiglu.grouped_grad`; none past the last expert's tiles).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import grouped_grad
from .configs import GROUPED_TOKEN_TILE as TOKEN_TILE
from .configs import check_grouped_config, check_grouped_tile
from .op_library import OPS_LIBRARY, cuda_kernels_from_library
from .reference import swiglu_float64, swiglu_fp32_one_rounding

OP = "fused_swiglu::swiglu_grouped"
NAMES = ("swiglu_grouped",)  # operators whose CUDA kernels are C++
OPS_LIBRARY.define("swiglu_grouped(Tensor x_pad, Tensor gate_up_proj, Tensor tile_expert, str config=\"\") -> Tensor")
cuda_kernels_from_library(*NAMES)

swiglu_grouped = torch.ops.fused_swiglu.swiglu_grouped.default

_CUDA_DTYPES = (torch.bfloat16, torch.float16)


def check_weights(x: Tensor, gate_up_proj: Tensor, config: str = "", op: str = OP, x_name: str = "x_pad") -> tuple[int, int, int]:
    """The rules on the rows ``x`` (named ``x_name`` in errors, any number of rows), the weights and the config
    that the operator ``op`` shares with :func:`fused_swiglu.grouped.grouped_swiglu`; returns ``(E, I, H)``.

    Raises:
        TypeError: a dtype: x not floating point (bf16 / fp16 on CUDA), gate_up_proj not of x's dtype; an
            argument that is not a dense tensor.
        ValueError: a rank, a shape (no expert, an odd number of rows per expert, gate_up_proj's H not x's), a
            device, H or I not a multiple of 8 on CUDA, a config :func:`fused_swiglu.configs.check_grouped_config`
            refuses.
    """
    for arg, t in ((x_name, x), ("gate_up_proj", gate_up_proj)):
        if not isinstance(t, Tensor) or t.layout != torch.strided or t.is_nested:
            raise TypeError(f"{op}: {arg} must be a dense (strided) torch.Tensor; got {type(t).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{op}: {x_name} must be 2-D ({'T_pad' if x_name == 'x_pad' else 'T'}, H); got shape "
                         f"{tuple(x.shape)}")
    if gate_up_proj.dim() != 3:
        raise ValueError(f"{op}: gate_up_proj must be 3-D (E, 2I, H); got shape {tuple(gate_up_proj.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{op}: {x_name} must be a floating-point tensor; got {x_name}.dtype={x.dtype}")
    whose = x_name + ("'" if x_name.endswith("s") else "'s")  # hidden_states', x_pad's
    if gate_up_proj.dtype != x.dtype:
        raise TypeError(f"{op}: gate_up_proj must have {whose} dtype {x.dtype}; got "
                        f"gate_up_proj.dtype={gate_up_proj.dtype}")
    if gate_up_proj.device != x.device:
        raise ValueError(f"{op}: gate_up_proj must be on {whose} device {x.device}; got gate_up_proj on "
                         f"{gate_up_proj.device}")
    H = x.shape[1]
    E, rows, Hw = gate_up_proj.shape
    if E < 1:
        raise ValueError(f"{op}: gate_up_proj must hold at least one expert (E >= 1); got shape "
                         f"{tuple(gate_up_proj.shape)}")
    if rows % 2:
        raise ValueError(f"{op}: gate_up_proj must have an even number of rows per expert (2I: gate rows, then up "
                         f"rows); got shape {tuple(gate_up_proj.shape)}")
    if Hw != H:
        raise ValueError(f"{op}: {x_name} must have H = gate_up_proj.shape[2] = {Hw} columns; got H={H}")
    I = rows // 2
    if x.device.type == "cuda":
        if x.dtype not in _CUDA_DTYPES:
            raise TypeError(f"{op}: {x_name} must be torch.bfloat16 or torch.float16 on CUDA; got "
                            f"{x_name}.dtype={x.dtype}")
        if H == 0 or H % 8 or I % 8:
            raise ValueError(f"{op}: H must be a positive multiple of 8 and I a multiple of 8 for 16-byte TMA rows; "
                             f"got H={H}, I={I}")
    check_grouped_config(config, x.dtype)
    return E, I, H


def check_operands(x_pad: Tensor, gate_up_proj: Tensor, tile_expert: Tensor, config: str = "") -> tuple[int, int, int]:
    """The operator's rules (as its CUDA kernel checks them), named in errors; returns ``(E, I, H)``.

    Raises:
        TypeError: as :func:`check_weights`; tile_expert not an int32 dense tensor.
        ValueError: as :func:`check_weights`; tile_expert not 1-D on x_pad's device with T_pad / tile entries
            for the token tile of a grouped config (:data:`fused_swiglu.configs.GROUPED_TOKEN_TILES`), or a named
            config of another tile.
    """
    if not isinstance(tile_expert, Tensor) or tile_expert.layout != torch.strided or tile_expert.is_nested:
        raise TypeError(f"{OP}: tile_expert must be a dense (strided) torch.Tensor; got {type(tile_expert).__name__}")
    if tile_expert.dim() != 1:
        raise ValueError(f"{OP}: tile_expert must be 1-D (T_pad / token tile,); got shape {tuple(tile_expert.shape)}")
    result = check_weights(x_pad, gate_up_proj, config)
    if tile_expert.dtype != torch.int32:
        raise TypeError(f"{OP}: tile_expert must be torch.int32; got tile_expert.dtype={tile_expert.dtype}")
    if tile_expert.device != x_pad.device:
        raise ValueError(f"{OP}: tile_expert must be on x_pad's device {x_pad.device}; got tile_expert on "
                         f"{tile_expert.device}")
    if not (isinstance(x_pad.shape[0], int) and isinstance(tile_expert.shape[0], int)):
        return result  # symbolic sizes (torch.compile's tracing): the CUDA kernel checks the tile at run time
    tile = token_tile(x_pad, tile_expert)
    if tile is None:
        raise ValueError(f"{OP}: tile_expert must have one entry per token tile of x_pad (T_pad / token tile, T_pad a "
                         f"whole number of tiles); got {tile_expert.shape[0]} entries for T_pad={x_pad.shape[0]}")
    if tile:
        try:
            check_grouped_tile(config, tile)
        except ValueError as e:
            raise ValueError(f"{OP}: {e}") from None
    return result


def token_tile(x_pad: Tensor, tile_expert: Tensor) -> int | None:
    """The layout's token tile, ``T_pad / len(tile_expert)``: 0 for an empty layout, None when tile_expert's
    entries do not divide T_pad (or there are none for a non-empty x_pad)."""
    rows, tiles = x_pad.shape[0], tile_expert.shape[0]
    if rows == 0 and tiles == 0:
        return 0
    if tiles == 0 or rows % tiles:
        return None
    return rows // tiles


@torch.library.register_fake(OP)
def _swiglu_grouped_fake(x_pad, gate_up_proj, tile_expert, config=""):
    _, I, _ = check_operands(x_pad, gate_up_proj, tile_expert, config)
    return x_pad.new_empty((x_pad.shape[0], I))  # contiguous, as the CUDA kernel returns


def _swiglu_grouped_cpu(x_pad, gate_up_proj, tile_expert, config=""):
    E, I, _ = check_operands(x_pad, gate_up_proj, tile_expert, config)
    tile = token_tile(x_pad, tile_expert)
    reference = swiglu_float64 if x_pad.dtype == torch.float64 else swiglu_fp32_one_rounding
    y = x_pad.new_zeros((x_pad.shape[0], I))
    experts = tile_expert.tolist()
    t = 0
    while t < len(experts):  # one product per run of tiles of one expert
        e, end = experts[t], t + 1
        while end < len(experts) and experts[end] == e:
            end += 1
        if 0 <= e < E:
            rows = slice(t * tile, end * tile)
            y[rows] = reference(x_pad[rows], gate_up_proj[e, :I], gate_up_proj[e, I:]).to(y.dtype)
        t = end
    return y


OPS_LIBRARY.impl("swiglu_grouped", _swiglu_grouped_cpu, "CPU")


def _setup_context(ctx, inputs, output):
    x_pad, gate_up_proj, tile_expert, _ = inputs
    ctx.save_for_backward(x_pad, gate_up_proj, tile_expert)


def _backward(ctx, dy):
    """Gradients of x_pad and gate_up_proj: the gate and up products recomputed per expert (x_pad's dtype),
    the SwiGLU derivative in fp32 (float64 in float64), then dx_pad = [dg | du] W[e] and
    dW[e] = sum over e's rows of [dg | du]^T x_pad (grouped_grad)."""
    x_pad, gate_up_proj, tile_expert = ctx.saved_tensors
    E, two_i, _ = gate_up_proj.shape
    I = two_i // 2
    tile = token_tile(x_pad, tile_expert)
    if not tile:  # an empty layout
        return torch.zeros_like(x_pad), torch.zeros_like(gate_up_proj), None, None
    offsets = grouped_grad.expert_offsets(tile_expert, E, tile)
    compute = torch.float64 if x_pad.dtype == torch.float64 else torch.float32
    gu = grouped_grad.rows_times_weights(x_pad, gate_up_proj, offsets, tile_expert, transpose=True).to(compute)
    g, u = gu[:, :I], gu[:, I:]
    s = torch.sigmoid(g)
    dyc = dy.to(compute)
    dgu = torch.cat([dyc * u * s * (1 + g * (1 - s)), dyc * g * s], dim=1).to(x_pad.dtype)
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = grouped_grad.rows_times_weights(dgu, gate_up_proj, offsets, tile_expert, transpose=False)
    if ctx.needs_input_grad[1]:
        dw = grouped_grad.weight_grad(dgu, x_pad, offsets, tile_expert, E)
    return dx, dw, None, None


torch.library.register_autograd(OP, _backward, setup_context=_setup_context)
