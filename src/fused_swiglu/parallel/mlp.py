"""A tensor-parallel SwiGLU MLP: the fused up-projection on this rank's columns, a row-parallel down
projection and one all-reduce.

Every rank of the process group holds the same x ``(..., H)``. Rank r computes
``y_r = silu(x W_gate_r^T) * (x W_up_r^T)`` for its ``I / t`` columns with the fused kernel (dual or
packed), its partial ``z_r = y_r W_down_r^T`` ``(..., H)``, and ``z = sum_r z_r`` is all-reduced, so
that every rank returns the whole MLP output. Under autograd x's gradient is all-reduced too
(:mod:`.comm`), and the local block runs :func:`fused_swiglu.swiglu_mlp`'s fused backward.
"""

from __future__ import annotations

import warnings

from collections.abc import Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .. import _validate as v
from .._dispatch import on_2d
from ..configs import KERNELS
from ..functional import swiglu, swiglu_packed
from ..mlp import swiglu_mlp, swiglu_mlp_packed
from ..patch import forward_reason, readable, skip_reason
from ..weights import LAYOUTS, pack_gate_up
from .comm import copy_to_ranks, reduce_from_ranks, world
from .sharding import shard_down, shard_gate_up, shard_packed


def _partial_fp32(y: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """``y @ w_down.T`` summed and returned in fp32 (no rounding to y's dtype)."""
    if y.is_cuda and not (torch.is_grad_enabled() and (y.requires_grad or w_down.requires_grad)):
        return on_2d(lambda y2d, w: torch.mm(y2d, w.T, out_dtype=torch.float32), y, w_down)  # cuBLAS, fp32 out
    return F.linear(y.float(), w_down.float())


class TensorParallelSwiGLUMLP(nn.Module):
    """This rank's share of a SwiGLU MLP (``forward(x) -> z``, both ``(..., H)``; every rank returns
    the full z).

    Construct it from this rank's shards (below), from full weights (:meth:`from_full`) or from a full
    Hugging Face state dict (:meth:`from_state_dict`). The shards are parameters (``w_gate``, ``w_up``
    or ``w_packed``, and ``w_down``).

    Args:
        w_down: ``(H, I_r)``, this rank's columns of ``down_proj.weight`` (:func:`.shard_down`).
        w_gate, w_up: ``(I_r, H)`` this rank's rows (:func:`.shard_gate_up`), for the dual kernel;
            or None with ``w_packed``.
        w_packed: ``(2 I_r, H)`` this rank's packed weight (:func:`.shard_packed`), with ``layout``
            ``"interleaved"`` (the packed kernel) or ``"concatenated"`` (``[W_gate; W_up]`` rows: the dual
            kernel on its two row halves, views).
        group: the process group the MLP is split over (None: the default group).
        reduce_dtype: None (default): each rank's partial z is rounded to x's dtype and the
            all-reduce sums in that dtype (what serving engines do); ``torch.float32``: the partial
            z stays fp32 through the all-reduce and the sum is rounded once (twice the bytes
            reduced; results closer to the one-GPU MLP, docs/tensor-parallel.md).
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``, as in :func:`fused_swiglu.swiglu`.
        recompute: as in :func:`fused_swiglu.swiglu_mlp` (training with the input's dtype reduce).

    All tensors share one dtype (bf16 / fp16) and device. Shapes are checked on the first call by the
    kernels' own rules.

    Raises:
        ValueError: neither or both of (w_gate, w_up) and w_packed; an unknown layout; shards whose
            shapes disagree; reduce_dtype other than None or torch.float32.
        RuntimeError: torch.distributed not initialized.
    """

    def __init__(self, w_down: torch.Tensor, w_gate: torch.Tensor | None = None, w_up: torch.Tensor | None = None,
                 *, w_packed: torch.Tensor | None = None, layout: str | None = None,
                 group: dist.ProcessGroup | None = None, reduce_dtype: torch.dtype | None = None,
                 backend: str = "auto", recompute: bool = False) -> None:
        super().__init__()
        dual = w_gate is not None or w_up is not None
        if dual == (w_packed is not None) or (dual and (w_gate is None or w_up is None)):
            raise ValueError("give either w_gate and w_up (dual kernel) or w_packed with layout (packed kernel)")
        if reduce_dtype not in (None, torch.float32):
            raise ValueError(f"reduce_dtype must be None (x's dtype) or torch.float32; got {reduce_dtype}")
        v.check_bool("recompute", recompute)
        self.rank, self.world_size = world(group)
        self.group, self.reduce_dtype, self.backend, self.recompute = group, reduce_dtype, backend, recompute
        I_r = w_down.shape[1] if w_down.dim() == 2 else -1
        if dual:
            shapes = {"w_gate": tuple(w_gate.shape), "w_up": tuple(w_up.shape)}
            self.layout = None
            self.w_gate, self.w_up = nn.Parameter(w_gate), nn.Parameter(w_up)
            self.w_packed = None
            rows = I_r
        else:
            v.check_choice("layout", layout, LAYOUTS)
            shapes = {"w_packed": tuple(w_packed.shape)}
            self.layout = layout
            self.w_gate = self.w_up = None
            self.w_packed = nn.Parameter(w_packed)
            rows = 2 * I_r
        self.w_down = nn.Parameter(w_down)
        H = w_down.shape[0] if w_down.dim() == 2 else -1
        for name, shape in shapes.items():
            if shape != (rows, H):
                raise ValueError(
                    f"{name} must be ({rows}, {H}) to match w_down of shape {tuple(w_down.shape)} (H, I / world_size); "
                    f"got {shape}"
                )

    @property
    def kernel(self) -> str:
        return "dual" if self.w_packed is None else "packed"

    @classmethod
    def from_full(cls, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, kernel: str = "dual",
                  group: dist.ProcessGroup | None = None, **options) -> "TensorParallelSwiGLUMLP":
        """This rank's MLP from the full weights ``w_gate``, ``w_up`` ``(I, H)`` and ``w_down`` ``(H, I)``
        (the same on every rank). ``kernel``: ``"dual"`` (row slices of w_gate, w_up) or ``"packed"``
        (this rank's rows packed into the interleaved layout). The module owns copies of its shards,
        so the full weights can be freed. ``options``: the constructor's keyword arguments. Raises as
        :func:`.shard_gate_up` and the constructor."""
        v.check_choice("kernel", kernel, KERNELS)
        rank, world_size = world(group)
        with torch.no_grad():
            g, u = (t.clone() for t in shard_gate_up(w_gate, w_up, rank, world_size))
            down = shard_down(w_down, rank, world_size)
            if down.data_ptr() == w_down.data_ptr():  # world size 1: the shard is the weight itself
                down = down.clone()
        if kernel == "packed":
            return cls(down, w_packed=pack_gate_up(g, u), layout="interleaved", group=group, **options)
        return cls(down, g, u, group=group, **options)

    @classmethod
    def from_state_dict(cls, state_dict: Mapping[str, torch.Tensor], prefix: str = "", *, kernel: str = "dual",
                        group: dist.ProcessGroup | None = None, **options) -> "TensorParallelSwiGLUMLP":
        """This rank's MLP from a full Hugging Face MLP state dict: ``{prefix}gate_proj.weight`` and
        ``{prefix}up_proj.weight``, or a concatenated ``{prefix}gate_up_proj.weight`` ``[gate; up]``;
        and ``{prefix}down_proj.weight``. With ``kernel="packed"`` a concatenated weight is sharded
        in its own layout (no reorder); otherwise as :meth:`from_full`.

        Raises:
            KeyError: the state dict lacks these keys (the message lists what is there under prefix).
        """
        v.check_choice("kernel", kernel, KERNELS)

        def get(name: str) -> torch.Tensor:
            key = prefix + name
            if key not in state_dict:
                found = sorted(k for k in state_dict if k.startswith(prefix))[:8]
                raise KeyError(f"state_dict has no {key!r} (keys under prefix {prefix!r}: {found})")
            return state_dict[key]

        w_down = get("down_proj.weight")
        if prefix + "gate_up_proj.weight" in state_dict:
            fused = get("gate_up_proj.weight")
            rank, world_size = world(group)
            if kernel == "packed":
                shard = shard_packed(fused, rank, world_size, layout="concatenated")
                return cls(shard_down(w_down, rank, world_size), w_packed=shard, layout="concatenated", group=group,
                           **options)
            I = fused.shape[0] // 2
            return cls.from_full(fused[:I], fused[I:], w_down, kernel=kernel, group=group, **options)
        return cls.from_full(get("gate_proj.weight"), get("up_proj.weight"), w_down, kernel=kernel, group=group,
                             **options)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_ranks(x, self.group)
        if self.reduce_dtype is None:
            if self.w_packed is None:
                z = swiglu_mlp(x, self.w_gate, self.w_up, self.w_down, recompute=self.recompute, backend=self.backend)
            else:
                z = (swiglu_mlp_packed(x, self.w_packed, self.w_down, layout="interleaved", recompute=self.recompute,
                                       backend=self.backend) if self.layout == "interleaved" else
                     swiglu_mlp(x, *self.w_packed.chunk(2), self.w_down, recompute=self.recompute, backend=self.backend))
            return reduce_from_ranks(z, self.group)
        if self.w_packed is None:
            y = swiglu(x, self.w_gate, self.w_up, backend=self.backend)
        else:
            y = (swiglu_packed(x, self.w_packed, layout="interleaved", backend=self.backend)
                 if self.layout == "interleaved" else swiglu(x, *self.w_packed.chunk(2), backend=self.backend))
        return reduce_from_ranks(_partial_fp32(y, self.w_down), self.group).to(x.dtype)

    def extra_repr(self) -> str:
        I_r, H = self.w_down.shape[1], self.w_down.shape[0]
        layout = f", layout={self.layout}" if self.layout else ""
        return (f"kernel={self.kernel}{layout}, H={H}, I_per_rank={I_r}, rank={self.rank}, "
                f"world_size={self.world_size}, reduce_dtype={self.reduce_dtype}")


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    parent_name, _, child = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), child


def shard_swiglu_mlps(model: nn.Module, group: dist.ProcessGroup | None = None, *, kernel: str = "dual",
                      **options) -> list[str]:
    """Replace every SwiGLU MLP block of ``model`` (the blocks :func:`fused_swiglu.fuse_swiglu_mlps`
    recognises: bias-free gate_proj/up_proj/down_proj ``nn.Linear``, a SiLU act_fn, and a forward that
    computes ``down_proj(silu(gate_proj(x)) * up_proj(x))``, known by its class or probed) by this
    rank's :class:`TensorParallelSwiGLUMLP`, in place; blocks with those attributes whose forward
    computes something else are left as they are and named in one warning. The rest of the model stays as it is (each rank
    runs it on the same input); the full MLP weights are dropped, so each rank keeps ``1 / t`` of them.
    Not reversible: reload the model to undo it.

    Args:
        model: a module, e.g. a Hugging Face Qwen2 / Llama model, the same on every rank.
        group: the process group (None: the default group).
        kernel: ``"dual"`` or ``"packed"``; ``options``: the module's keyword arguments.

    Returns:
        The qualified names of the replaced blocks.

    Raises:
        RuntimeError: torch.distributed is not initialized. ValueError: an MLP's intermediate size
            is not a multiple of 8 * world_size (no block is replaced then).
    """
    v.check_choice("kernel", kernel, KERNELS)
    _, world_size = world(group)
    candidates = [(name, m) for name, m in model.named_modules() if name and skip_reason(m) is None]
    blocks, other = [], []
    for name, m in candidates:
        reason = forward_reason(m, vars(m).get("forward"))
        if reason is None:
            blocks.append((name, m))
        else:
            other.append(f"{readable(name)!r}: {reason}")
    if other:
        warnings.warn(f"shard_swiglu_mlps left {len(other)} block(s) as they are: " + "; ".join(other), UserWarning,
                      stacklevel=2)
    for name, m in blocks:  # every size checked before any block changes
        I = m.gate_proj.weight.shape[0]
        if I % (8 * world_size) != 0:
            raise ValueError(f"MLP block {name!r}: intermediate size I={I} is not a multiple of 8 * world_size = "
                             f"{8 * world_size} (each rank must hold whole blocks of 8 gate and 8 up rows); no block "
                             "was replaced")
    for name, m in blocks:
        with torch.no_grad():
            tp = TensorParallelSwiGLUMLP.from_full(m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight,
                                                   kernel=kernel, group=group, **options)
        for p in tp.parameters():
            p.requires_grad_(m.gate_proj.weight.requires_grad)
        parent, child = _parent(model, name)
        setattr(parent, child, tp)
    return [name for name, _ in blocks]
