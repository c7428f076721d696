"""The grouped operator (torch.library): SwiGLU over the experts of a mixture-of-experts layer, in the padded
layout that :func:`fused_swiglu.grouped.grouped_layout` builds (the public entry is
:func:`fused_swiglu.grouped.grouped_swiglu`).

``fused_swiglu::swiglu_grouped(x_pad, gate_up_proj, tile_expert, config="") -> y_pad``
    x_pad ``(T_pad, H)``: the routed tokens sorted by expert, each expert's rows padded to whole token
    tiles of a grouped config's tile (:data:`fused_swiglu.configs.grouped.GROUPED_TOKEN_TILES`: 16, 64 or 128 rows).
    gate_up_proj ``(E, 2I, H)`` of x_pad's dtype, as transformers stores the experts: ``W_gate[e] =
    gate_up_proj[e, :I]``, ``W_up[e] = gate_up_proj[e, I:]``. tile_expert ``(T_pad / tile,)`` int32 (its
    length gives the layout's token tile, ``T_pad / len(tile_expert)``): the expert of each token tile, in
    non-decreasing order, and a value outside ``[0, E)`` (E itself from the layout helper) for every tile
    past the last expert's. Returns y_pad ``(T_pad, I)``, new and contiguous, of x_pad's dtype: for each row
    r of a tile t with ``e = tile_expert[t]`` in ``[0, E)``, ``silu(x_pad[r] W_gate[e]^T) * (x_pad[r]
    W_up[e]^T)``.

Rows of the tiles past the last expert: the CUDA kernel neither computes nor writes them (its scheduler counts
the tiles before the first such tile and hands out no work past them, so they cost nothing); they hold whatever
the fresh allocation held. The CPU kernel writes zeros there. A tile_expert that puts such a value before a
valid expert's tile breaks the layout's rule: the CUDA kernel may then leave later valid tiles unwritten, or
compute a tile of such a value from zero weights (it never reads or writes out of bounds); the CPU kernel
computes every tile of a valid expert.

``config``: ``""`` (the choice, :func:`fused_swiglu.configs.grouped.grouped_choice`: the fast config of the layout's
token tile), ``"promoted"`` (the promoted config, whose layout has 16-row tiles,
:data:`fused_swiglu.configs.grouped.GROUPED_PROMOTED_TILE`) or the name of a grouped config for x_pad's dtype with that
tile (:func:`fused_swiglu.catalog.grouped_names`), optionally with its launch ``@1:<S>`` (token tiles in groups of
S = 1, 2, 4 or 8; the kernel's tile order: ``csrc/include/fused_swiglu/kernel/sm90_tile_scheduler_expert_tiles.hpp``).

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
from ._dispatch import PLAIN
from .configs.grouped import GROUPED_TOKEN_TILE as TOKEN_TILE, check_grouped_config, check_grouped_tile
from .op_library import OPS_LIBRARY, cuda_kernels_from_library
from .reference import swiglu_float64, swiglu_fp32_one_rounding

OP = "fused_swiglu::swiglu_grouped"
NAMES = ("swiglu_grouped",)  # operators whose CUDA kernels are C++
OPS_LIBRARY.define("swiglu_grouped(Tensor x_pad, Tensor gate_up_proj, Tensor tile_expert, str config=\"\") -> Tensor")
cuda_kernels_from_library(*NAMES)

swiglu_grouped = torch.ops.fused_swiglu.swiglu_grouped.default

_CUDA_DTYPES = (torch.bfloat16, torch.float16)


def check_dense(op: str, **named: object) -> None:
    """Each of ``named`` (argument name: value) a dense torch.Tensor: strided, not nested.

    Raises:
        TypeError: the first that is not, named in a message that starts with ``op``.
    """
    for arg, t in named.items():
        if not isinstance(t, Tensor) or t.layout != torch.strided or t.is_nested:
            raise TypeError(f"{op}: {arg} must be a dense (strided) torch.Tensor; got {type(t).__name__}")


def _possessive(arg: str) -> str:
    return arg + ("'" if arg.endswith("s") else "'s")  # hidden_states', x_pad's


def check_like(op: str, ref_name: str, ref: Tensor, *, same_dtype: bool = True, **named: Tensor) -> None:
    """Each of ``named`` (argument name: tensor) of the dtype of ``ref``, the tensor named ``ref_name`` (unless
    ``same_dtype`` is False), and on its device; a tensor's dtype is checked before its device.

    Raises:
        TypeError: another dtype. ValueError: another device. The message starts with ``op`` and names the
            argument, ``ref_name`` and both values.
    """
    for arg, t in named.items():
        if same_dtype and t.dtype != ref.dtype:
            raise TypeError(f"{op}: {arg} must have {_possessive(ref_name)} dtype {ref.dtype}; got "
                            f"{arg}.dtype={t.dtype}")
        if t.device != ref.device:
            raise ValueError(f"{op}: {arg} must be on {_possessive(ref_name)} device {ref.device}; got {arg} on "
                             f"{t.device}")


def values_checkable(t: Tensor) -> bool:
    """Whether the values of ``t`` can be checked without waiting for a GPU or breaking a trace: a plain CPU
    tensor (or parameter) of an eager call. A CUDA tensor's routing values are not read on the host."""
    return type(t) in PLAIN and t.device.type == "cpu" and not torch.compiler.is_compiling()


def check_expert_ids(op: str, top_k_index: Tensor, experts: int, what: str = "E = gate_up_proj.shape[0]") -> None:
    """Every expert id of ``top_k_index`` in ``[0, experts)``, where it can be read here
    (:func:`values_checkable`).

    Raises:
        ValueError: an id outside the range, naming the lowest and highest.
    """
    if not values_checkable(top_k_index) or top_k_index.numel() == 0:
        return
    lo, hi = int(top_k_index.min()), int(top_k_index.max())
    if lo < 0 or hi >= experts:
        raise ValueError(f"{op}: top_k_index must hold expert ids in [0, {experts}) ({what}); got ids from {lo} "
                         f"to {hi}")


def check_offsets(op: str, expert_offsets: Tensor, rows: int) -> None:
    """``expert_offsets`` non-decreasing end rows in ``[0, rows]``, where they can be read here
    (:func:`values_checkable`).

    Raises:
        ValueError: an offset out of order or out of range, naming the first such expert.
    """
    if not values_checkable(expert_offsets) or expert_offsets.numel() == 0:
        return
    ends = expert_offsets.tolist()
    starts = [0, *ends[:-1]]
    for e, (start, end) in enumerate(zip(starts, ends)):
        if not start <= end <= rows:
            raise ValueError(f"{op}: expert_offsets must be non-decreasing end rows in [0, T] (T = x_sorted.shape[0] "
                             f"= {rows}); got expert_offsets[{e}] = {end}"
                             + (f" after expert_offsets[{e - 1}] = {start}" if e else ""))


def check_weights(x: Tensor, gate_up_proj: Tensor, config: str = "", op: str = OP, x_name: str = "x_pad") -> tuple[int, int, int]:
    """The rules on the rows ``x`` (named ``x_name`` in errors, any number of rows), the weights and the config
    that the operator ``op`` shares with :func:`fused_swiglu.grouped.grouped_swiglu`; returns ``(E, I, H)``.

    Raises:
        TypeError: a dtype: x not floating point or an 8-bit float (bf16 / fp16 on CUDA), gate_up_proj not of
            x's dtype; an argument that is not a dense tensor.
        ValueError: a rank, a shape (no expert, an odd number of rows per expert, gate_up_proj's H not x's), a
            device, H or I not a multiple of 8 on CUDA, a config
            :func:`fused_swiglu.configs.grouped.check_grouped_config` refuses.
    """
    check_dense(op, **{x_name: x, "gate_up_proj": gate_up_proj})
    if x.dim() != 2:
        raise ValueError(f"{op}: {x_name} must be 2-D ({'T_pad' if x_name == 'x_pad' else 'T'}, H); got shape "
                         f"{tuple(x.shape)}")
    if gate_up_proj.dim() != 3:
        raise ValueError(f"{op}: gate_up_proj must be 3-D (E, 2I, H); got shape {tuple(gate_up_proj.shape)}")
    if not x.is_floating_point() or x.element_size() == 1:
        raise TypeError(f"{op}: {x_name} must be a floating-point tensor of 16 bits or more (8-bit floats take the "
                        f"e4m3 functions, fused_swiglu.fp8); got {x_name}.dtype={x.dtype}")
    check_like(op, x_name, x, gate_up_proj=gate_up_proj)
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
    try:
        check_grouped_config(config, x.dtype)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{op}: {e}") from None
    return E, I, H


def check_operands(x_pad: Tensor, gate_up_proj: Tensor, tile_expert: Tensor, config: str = "") -> tuple[int, int, int]:
    """The operator's rules (as its CUDA kernel checks them), named in errors; returns ``(E, I, H)``.

    Raises:
        TypeError: as :func:`check_weights`; tile_expert not an int32 dense tensor.
        ValueError: as :func:`check_weights`; tile_expert not 1-D on x_pad's device with T_pad / tile entries
            for the token tile of a grouped config (:data:`fused_swiglu.configs.grouped.GROUPED_TOKEN_TILES`), or a named
            config (or ``"promoted"``) of another tile.
    """
    check_dense(OP, tile_expert=tile_expert)
    if tile_expert.dim() != 1:
        raise ValueError(f"{OP}: tile_expert must be 1-D (T_pad / token tile,); got shape {tuple(tile_expert.shape)}")
    result = check_weights(x_pad, gate_up_proj, config)
    if tile_expert.dtype != torch.int32:
        raise TypeError(f"{OP}: tile_expert must be torch.int32; got tile_expert.dtype={tile_expert.dtype}")
    check_like(OP, "x_pad", x_pad, same_dtype=False, tile_expert=tile_expert)
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
