"""The two collectives of a tensor-parallel MLP, differentiable.

``copy_to_ranks``: forward identity (every rank holds the same x); backward all-reduce (x's gradient
is the sum of the ranks' partial gradients). ``reduce_from_ranks``: forward all-reduce of the ranks'
partial outputs; backward identity (every rank receives the full output's gradient). Without
autograd each is one in-place ``torch.distributed.all_reduce`` or nothing.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """``(rank, world_size)`` of this process in ``group`` (None: the default group).

    Raises:
        RuntimeError: torch.distributed is not initialized.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "tensor parallelism needs torch.distributed initialized (torch.distributed.init_process_group) "
            "or explicit rank and world_size for the sharding helpers"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def _all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    t = t.contiguous()
    dist.all_reduce(t, group=group)
    return t


class _CopyToRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dx):
        return _all_reduce(dx.clone(), ctx.group), None


class _ReduceFromRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, group):
        return _all_reduce(z.clone(), group)

    @staticmethod
    def backward(ctx, dz):
        return dz, None


def copy_to_ranks(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """x as it is; its gradient all-reduced over ``group``."""
    if x.requires_grad and torch.is_grad_enabled():
        return _CopyToRanks.apply(x, group)
    return x


def reduce_from_ranks(z: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """The sum of every rank's ``z`` (a new tensor, or z itself summed in place when no gradient is
    recorded); the gradient passes through unchanged."""
    if z.requires_grad and torch.is_grad_enabled():
        return _ReduceFromRanks.apply(z, group)
    return _all_reduce(z, group)
