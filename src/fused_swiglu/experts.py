"""The routed experts of a mixture-of-experts layer, forward only: routing, the grouped gate/up projection with
SwiGLU (:func:`fused_swiglu.grouped.grouped_swiglu`'s kernel), the down projection and the routing-weighted
sum, for serving engines and transformers' experts (:mod:`fused_swiglu.hf_experts`).

The experts' weights are transformers' 3-D tensors, read in place: ``gate_up_proj`` ``(E, 2I, H)`` (each
expert's I gate rows, then its I up rows) and ``down_proj`` ``(E, H, I)``. For T tokens with k experts each
(``top_k_index`` ``(T, k)``, ``top_k_weights`` ``(T, k)``)::

    out[t] = sum_j top_k_weights[t, j] * down_proj[e] @ (silu(gate_up_proj[e, :I] @ x[t]) * (gate_up_proj[e, I:] @ x[t]))
             with e = top_k_index[t, j]

Every step runs on the tensors' device with torch operations whose sizes follow from T, k and E alone: no
host synchronisation and no host decision on the routing, so a CUDA graph captures a call and replays it
under new routing, and ``torch.compile(fullgraph=True)`` traces it.

How (:func:`swiglu_experts`): the routing (:func:`fused_swiglu.routing_ops.layout`: on CUDA one launch of the
``fused_swiglu::moe_layout`` kernel up to 131,072 pairs and 8,192 experts, else a stable sort, searches and gathers)
sorts the T k (token, expert) pairs by expert into the grouped kernel's padded layout
(each expert's rows in whole token tiles of 16, 64 or 128 rows, by the routed rows per expert, in pair order
within an expert), the hidden states are gathered into it once, run through
``fused_swiglu::swiglu_grouped`` (gate, up and SwiGLU in one kernel, fp32 accumulation, one rounding), then the
down projection over the same padded rows (``torch._grouped_mm`` with the padded end offsets, or one product
per token tile in float64), and the T k rows gathered back in (token, slot) order, weighted and summed over
the k slots, as transformers' ``grouped_mm`` experts forward does (fp32 where the weights are fp32).

Differentiable with respect to the hidden states, the routing weights and both weight tensors: the grouped
operator's backward recomputes each pair's gate and up products (nothing beyond the inputs is kept), the down
projection's backward is two grouped products (:mod:`fused_swiglu.grouped_grad`). transformers' experts keep
their own path under autograd (:mod:`fused_swiglu.hf_experts`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _validate as v
from . import grouped_grad, grouped_ops, routing_ops
from .grouped import layout_tile
from .routing_ops import sort_pairs

__all__ = ["ExpertsRouting", "INDEX_DTYPES", "route_experts", "routed_swiglu", "swiglu_experts"]

INDEX_DTYPES = (torch.int64, torch.int32)  # top_k_index: torch.topk's int64, or int32
# dtypes torch._grouped_mm multiplies (its CPU kernel; on CUDA its fast path is bf16, fp16 takes ATen's
# per-expert loop, which reads the offsets on the host); float64 takes one product per token tile
# (experts_down)
_GROUPED_MM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class ExpertsRouting(NamedTuple):
    """The (token, expert) pairs of a routing sorted by expert (:func:`route_experts`); all on the routing's
    device.

    order: ``(T k,)`` int64, the pairs' flat indices ``t * k + j`` (token t, slot j of ``top_k_index``) in
        expert order; pairs of one expert keep their (token, slot) order (a stable sort).
    token: ``(T k,)`` int64, the token of each sorted pair (``order // k``): the row of the hidden states
        that pair reads.
    expert_offsets: ``(E,)`` int32, cumulative end rows of each expert's pairs in the sorted order (the
        ``torch._grouped_mm`` convention): expert e owns sorted pairs ``[expert_offsets[e - 1],
        expert_offsets[e])``.
    """

    order: Tensor
    token: Tensor
    expert_offsets: Tensor


def _check_index(op: str, top_k_index: Tensor) -> tuple[int, int]:
    grouped_ops.check_dense(op, top_k_index=top_k_index)
    if top_k_index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: top_k_index must be torch.int64 or torch.int32 (expert ids); got "
                        f"top_k_index.dtype={top_k_index.dtype}")
    if top_k_index.dim() != 2 or top_k_index.shape[1] < 1:
        raise ValueError(f"{op}: top_k_index must be 2-D (T, k) with k >= 1 experts per token; got shape "
                         f"{tuple(top_k_index.shape)}")
    return top_k_index.shape[0], top_k_index.shape[1]


def route_experts(top_k_index: Tensor, experts: int) -> ExpertsRouting:
    """Sort the (token, expert) pairs of a top-k routing by expert, on ``top_k_index``'s device: one stable
    sort of the T k expert ids and one ``searchsorted`` of the sorted ids for the end offsets (no histogram,
    no host synchronisation).

    Args:
        top_k_index: ``(T, k)`` torch.int64 or torch.int32, the experts of each token (``top_k_index[t, j]``
            in ``[0, experts)``; checked in an eager call on the CPU (ValueError; not while torch.compile
            traces). On CUDA not checked (it would wait for the GPU): an id >= ``experts`` sorts past
            ``expert_offsets[-1]`` and belongs to no expert; a negative id is counted as expert 0's, in pair
            order among its other pairs.
        experts: E, the experts (>= 1).

    Returns:
        :class:`ExpertsRouting`: ``order`` and ``token`` ``(T k,)`` int64, ``expert_offsets`` ``(E,)`` int32.

    Raises:
        TypeError: top_k_index not a dense tensor of torch.int64 or torch.int32; experts not an int.
        ValueError: top_k_index not 2-D (T, k) with k >= 1; experts < 1; on the CPU, an id outside
            ``[0, experts)``.
    """
    _, k = _check_index("route_experts", top_k_index)
    if not isinstance(experts, int) or isinstance(experts, bool):
        raise TypeError(f"route_experts: experts must be an int (E); got {type(experts).__name__}")
    if experts < 1:
        raise ValueError(f"route_experts: experts must be >= 1; got experts={experts}")
    grouped_ops.check_expert_ids("route_experts", top_k_index, experts, "the experts argument")
    return _route(top_k_index, experts, k)


def _route(top_k_index: Tensor, experts: int, k: int) -> ExpertsRouting:
    order, offsets = sort_pairs(top_k_index, experts)
    return ExpertsRouting(order, order.div(k, rounding_mode="floor"), offsets)


def _check_common(op: str, hidden_states: Tensor, top_k_index: Tensor, gate_up_proj: Tensor,
                  config: str) -> tuple[int, int, int, int, int]:
    """The rules shared by :func:`routed_swiglu` and :func:`swiglu_experts` (besides the down projection's
    weights): returns ``(E, I, H, T, k)``."""
    E, I, H = grouped_ops.check_weights(hidden_states, gate_up_proj, config, op=op, x_name="hidden_states")
    T, k = _check_index(op, top_k_index)
    if T != hidden_states.shape[0]:
        raise ValueError(f"{op}: top_k_index must have one row per token, T = hidden_states.shape[0] = "
                         f"{hidden_states.shape[0]}; got shape {tuple(top_k_index.shape)}")
    grouped_ops.check_like(op, "hidden_states", hidden_states, same_dtype=False, top_k_index=top_k_index)
    grouped_ops.check_expert_ids(op, top_k_index, E)
    if hidden_states.device.type == "cuda":
        why = v.hopper_status(hidden_states.device)
        if why is not None:
            raise RuntimeError(f"{op}: the grouped kernel cannot run: {why}")
    elif hidden_states.device.type != "cpu":
        raise ValueError(f"{op}: hidden_states must be on a CUDA device (a Hopper GPU) or the CPU; got "
                         f"{hidden_states.device}")
    return E, I, H, T, k


class _Layout(NamedTuple):
    """:func:`fused_swiglu.routing_ops.moe_layout`'s outputs."""

    source: Tensor
    tile_expert: Tensor
    pair_row: Tensor
    padded_offsets: Tensor
    order: Tensor
    expert_offsets: Tensor


def _padded_swiglu(hidden_states: Tensor, top_k_index: Tensor, experts: int, gate_up_proj: Tensor,
                   config: str) -> tuple[Tensor, _Layout]:
    """The grouped kernel over the routed pairs in its padded layout (one routing operator, the hidden states
    gathered once): ``(y_pad (T_pad, I), layout)``. The padding rows of an expert's last tile read token 0 (they
    are computed, never read back); the rows of the tiles past the last expert's are not written on CUDA."""
    pairs = top_k_index.numel()
    tile = layout_tile(pairs, experts, config)
    layout = _Layout(*routing_ops.layout(top_k_index, experts, tile))
    x_pad = hidden_states.index_select(0, layout.source)
    return grouped_ops.swiglu_grouped(x_pad, gate_up_proj, layout.tile_expert, config), layout


def routed_swiglu(hidden_states: Tensor, top_k_index: Tensor, gate_up_proj: Tensor, *,
                  config: str = "") -> tuple[Tensor, ExpertsRouting]:
    """The gate/up projection and SwiGLU of every (token, expert) pair of a routing, routing included, the
    pairs sorted by expert: ``y[r] = silu(x[t] W_gate[e]^T) * (x[t] W_up[e]^T)`` for sorted pair r of token
    t and expert e, with ``W_gate[e] = gate_up_proj[e, :I]`` and ``W_up[e] = gate_up_proj[e, I:]``.

    For a serving engine that runs its own down projection: ``y`` and ``routing.expert_offsets`` are the
    operands of a grouped product with ``down_proj`` (``torch._grouped_mm(y, down_proj.transpose(1, 2),
    offs=routing.expert_offsets)``), ``routing.order`` says which (token, slot) each row is.

    Args:
        hidden_states: ``(T, H)``, the tokens. CUDA (a Hopper GPU): torch.bfloat16 or torch.float16, H a
            multiple of 8; CPU: any floating dtype of 16 bits or more.
        top_k_index: ``(T, k)`` torch.int64 or torch.int32 on hidden_states' device, each token's experts,
            in ``[0, E)`` (not checked: :func:`route_experts`).
        gate_up_proj: ``(E, 2I, H)`` of hidden_states' dtype and device, each expert's gate rows then its up
            rows (transformers' experts layout), read in place (on CUDA: unit stride along H, row and expert
            strides multiples of 8 elements, 16-byte aligned; any contiguous tensor is); I a multiple of 8
            on CUDA.
        config: ``""`` (the choice, fast accumulation), ``"promoted"`` (the choice, promoted accumulation,
            as :func:`fused_swiglu.swiglu`'s; 16-row token tiles) or a grouped config name for the dtype
            (:func:`fused_swiglu.catalog.grouped_names`), optionally with its launch ``@1:<S>`` (as
            :func:`fused_swiglu.grouped.grouped_swiglu`'s).

    Returns:
        ``(y, routing)``: y ``(T k, I)`` in hidden_states' dtype, new and contiguous, row r the r-th pair in
        expert order (fp32 accumulation and SwiGLU, one rounding; the CPU: fp32 products, one rounding,
        float64 in float64), differentiable with respect to hidden_states and gate_up_proj; routing the
        :class:`ExpertsRouting` of the pairs.

    Raises:
        TypeError: an argument not a dense tensor; hidden_states not floating point (not bf16 / fp16 on
            CUDA); gate_up_proj not of its dtype; top_k_index not int64 / int32.
        ValueError: a rank or shape (top_k_index not (T, k) with k >= 1 and T = hidden_states' rows,
            gate_up_proj not (E, 2I, H) with hidden_states' H), a device (not CUDA or the CPU, or not the
            tensors' one), H or I not a multiple of 8 on CUDA, a config the choice refuses; on the CPU, an
            expert id outside [0, E).
        RuntimeError: a CUDA device that is not a Hopper GPU.
    """
    op = "routed_swiglu"
    E, _, _, T, k = _check_common(op, hidden_states, top_k_index, gate_up_proj, config)
    if T == 0:
        return hidden_states.new_empty((0, gate_up_proj.shape[1] // 2)), _route(top_k_index, E, k)
    # the routing operator gives the pairs in expert order too (route_experts' stable sort, without a sort)
    y_pad, layout = _padded_swiglu(hidden_states, top_k_index, E, gate_up_proj, config)
    routing = ExpertsRouting(layout.order, layout.order.div(k, rounding_mode="floor"), layout.expert_offsets)
    return y_pad.index_select(0, layout.pair_row.index_select(0, layout.order)), routing


def _down_projection(y_pad: Tensor, down_proj: Tensor, layout: _Layout) -> Tensor:
    """``(T_pad, H)``: each padded row's product with its expert's ``down_proj``, up to
    ``layout.padded_offsets[-1]`` (the rows past it, of no expert, hold anything). bf16: ``torch._grouped_mm``
    (traced by torch.compile); other dtypes: :func:`experts_down`, opaque to torch.compile (whose
    ``torch._grouped_mm`` takes bf16 only), and every dtype when autograd records the call (its backward,
    :func:`_experts_down_backward`, reads only the experts' rows)."""
    records = torch.is_grad_enabled() and (y_pad.requires_grad or down_proj.requires_grad)
    if y_pad.dtype == torch.bfloat16 and not records:
        return torch._grouped_mm(y_pad, down_proj.transpose(1, 2), offs=layout.padded_offsets)
    return experts_down(y_pad, down_proj, layout.padded_offsets, layout.tile_expert)


@torch.library.custom_op("fused_swiglu::experts_down", mutates_args=())
def experts_down(y_pad: Tensor, down_proj: Tensor, padded_offsets: Tensor, tile_expert: Tensor) -> Tensor:
    """The down projection of the padded rows for the dtypes torch.compile's ``torch._grouped_mm`` refuses:
    ``(T_pad, H)``, row r of expert e's tiles ``y_pad[r] @ down_proj[e]^T``; the rows past
    ``padded_offsets[-1]`` hold anything. fp16, fp32: ``torch._grouped_mm`` (fp16 on CUDA: ATen's per-expert
    loop, which reads the offsets on the host); float64: one product per token tile of the layout
    (:func:`fused_swiglu.grouped_grad.rows_times_weights`: 0 past the last expert's tiles). Arguments as :func:`fused_swiglu.grouped.grouped_layout` and :func:`swiglu_experts` make
    them (not checked here)."""
    if y_pad.dtype in _GROUPED_MM_DTYPES:
        return torch._grouped_mm(y_pad, down_proj.transpose(1, 2), offs=padded_offsets)
    return grouped_grad.rows_times_weights(y_pad, down_proj, padded_offsets, tile_expert, transpose=True)


@experts_down.register_fake
def _experts_down_fake(y_pad, down_proj, padded_offsets, tile_expert):
    return y_pad.new_empty((y_pad.shape[0], down_proj.shape[1]))


def _experts_down_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _experts_down_backward(ctx, dout):
    """Gradients of y_pad (``dout[r] @ down_proj[e]``) and down_proj (``sum over e's rows of dout[r]^T y_pad[r]``),
    from the experts' rows only (grouped_grad)."""
    y_pad, down_proj, padded_offsets, tile_expert = ctx.saved_tensors
    dy = dw = None
    if ctx.needs_input_grad[0]:
        dy = grouped_grad.rows_times_weights(dout, down_proj, padded_offsets, tile_expert, transpose=False)
    if ctx.needs_input_grad[1]:
        dw = grouped_grad.weight_grad(dout, y_pad, padded_offsets, tile_expert, down_proj.shape[0])
    return dy, dw, None, None


experts_down.register_autograd(_experts_down_backward, setup_context=_experts_down_setup)


def swiglu_experts(hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor, gate_up_proj: Tensor,
                   down_proj: Tensor, *, config: str = "") -> Tensor:
    """The routed experts' forward of a mixture-of-experts layer with SwiGLU experts::

        out[t] = sum_j top_k_weights[t, j] * (silu(x[t] W_gate[e]^T) * (x[t] W_up[e]^T)) W_down[e]^T,
        e = top_k_index[t, j]

    with ``W_gate[e] = gate_up_proj[e, :I]``, ``W_up[e] = gate_up_proj[e, I:]``, ``W_down[e] = down_proj[e]``
    (transformers' experts layout, read in place): the arguments transformers passes an experts forward
    (``hidden_states, top_k_index, top_k_weights``) and the experts' two weight tensors.

    Gate, up and SwiGLU run in the grouped kernel (fp32 accumulation, one rounding to hidden_states' dtype);
    the down projection is ``torch._grouped_mm`` (bf16 and fp16; on the CPU fp32 too; float64 on the CPU: one
    product per token tile); each pair's row is multiplied by its weight and the k rows of a token
    summed, in the dtype the product of hidden_states' dtype and top_k_weights' promotes to (fp32 for fp32
    weights, as transformers' ``grouped_mm`` forward), then rounded to hidden_states' dtype. No host
    synchronisation (CUDA-graph capturable under new routing) and ``torch.compile(fullgraph=True)``
    traceable, with one exception: fp16 on CUDA, where ``torch._grouped_mm`` runs ATen's per-expert loop,
    which reads the offsets on the host (correct, not capturable; bf16 is).

    Args:
        hidden_states: ``(T, H)``, the tokens (T >= 0). CUDA (a Hopper GPU): torch.bfloat16 or
            torch.float16, H a multiple of 8; CPU: any floating dtype of 16 bits or more.
        top_k_index: ``(T, k)`` torch.int64 or torch.int32 on hidden_states' device (k >= 1), the experts
            of each token, in ``[0, E)``; checked in an eager call on the CPU (ValueError; not while
            torch.compile traces). On CUDA not checked (it would wait for the GPU): an id >= E is routed to
            no expert and its pair reads the first padded row instead (another pair's row, or an unwritten one
            when no id is below E): wrong values, never an access out of bounds (the expert-parallel sentinel
            convention is not supported); a negative id is taken as expert 0.
        top_k_weights: ``(T, k)`` floating point on hidden_states' device, the weight of each
            (token, expert) pair (any floating dtype of 16 bits or more: fp32 router weights stay fp32 in the sum).
        gate_up_proj: ``(E, 2I, H)`` of hidden_states' dtype and device, each expert's gate rows then its up
            rows; on CUDA read in place by TMA (unit stride along H, row and expert strides multiples of 8
            elements, a 16-byte aligned start: any contiguous tensor), I a multiple of 8.
        down_proj: ``(E, H, I)`` of hidden_states' dtype and device (on CUDA with unit stride along I and the
            other strides multiples of 8 elements, as a contiguous tensor has).
        config: ``""`` (the choice, fast accumulation), ``"promoted"`` (the choice, promoted accumulation,
            as :func:`fused_swiglu.swiglu`'s; 16-row token tiles) or a grouped config name for the dtype
            (:func:`fused_swiglu.catalog.grouped_names`), optionally with its launch ``@1:<S>`` (as
            :func:`fused_swiglu.grouped.grouped_swiglu`'s), for the gate/up kernel.

    Returns:
        ``(T, H)`` in hidden_states' dtype, new and contiguous; differentiable with respect to hidden_states,
        top_k_weights, gate_up_proj and down_proj (the backward recomputes the gate and up products).

    Raises:
        TypeError: an argument not a dense tensor; hidden_states not floating point (not bf16 / fp16 on
            CUDA); gate_up_proj or down_proj not of hidden_states' dtype; top_k_index not int64 / int32;
            top_k_weights not floating point.
        ValueError: a rank or shape (hidden_states not (T, H); top_k_index or top_k_weights not (T, k) with
            k >= 1; gate_up_proj not (E, 2I, H) with an even row count and hidden_states' H; down_proj not
            (E, H, I) of gate_up_proj's E and I), a device (not CUDA or the CPU, or not hidden_states'), H or
            I not a multiple of 8 on CUDA, down_proj's strides on CUDA (unit stride along I, the others
            multiples of 8 elements), a config the choice refuses; on the CPU, an expert id outside [0, E).
        RuntimeError: a CUDA device that is not a Hopper GPU.
    """
    op = "swiglu_experts"
    E, I, H, T, k = _check_common(op, hidden_states, top_k_index, gate_up_proj, config)
    grouped_ops.check_dense(op, top_k_weights=top_k_weights, down_proj=down_proj)
    if not top_k_weights.is_floating_point() or top_k_weights.element_size() == 1:
        raise TypeError(f"{op}: top_k_weights must be a floating-point tensor of 16 bits or more; got "
                        f"top_k_weights.dtype={top_k_weights.dtype}")
    if tuple(top_k_weights.shape) != (T, k):
        raise ValueError(f"{op}: top_k_weights must have top_k_index's shape (T, k) = {(T, k)}; got shape "
                         f"{tuple(top_k_weights.shape)}")
    grouped_ops.check_like(op, "hidden_states", hidden_states, same_dtype=False, top_k_weights=top_k_weights)
    grouped_ops.check_like(op, "hidden_states", hidden_states, down_proj=down_proj)
    if tuple(down_proj.shape) != (E, H, I):
        raise ValueError(f"{op}: down_proj must be (E, H, I) = {(E, H, I)} for gate_up_proj of shape "
                         f"{tuple(gate_up_proj.shape)}; got shape {tuple(down_proj.shape)}")
    strides = down_proj.stride()
    if hidden_states.device.type == "cuda" and (strides[2] != 1 or strides[1] % v.ALIGN or strides[0] % v.ALIGN):
        raise ValueError(f"{op}: down_proj must have unit stride along I and its other strides multiples of "
                         f"{v.ALIGN} elements on CUDA (torch._grouped_mm's rows; a contiguous tensor has them); got "
                         f"strides {tuple(strides)}")
    if T == 0:
        return hidden_states.new_zeros((0, H))
    y_pad, layout = _padded_swiglu(hidden_states, top_k_index, E, gate_up_proj, config)
    out_pad = _down_projection(y_pad, down_proj, layout)
    out = out_pad.index_select(0, layout.pair_row).view(T, k, H)  # each pair's row, in (token, slot) order
    return (out * top_k_weights.unsqueeze(-1)).sum(dim=1).to(hidden_states.dtype)
