"""Tensor parallelism over torch.distributed: shards of the MLP weights in the layout each kernel
reads, a tensor-parallel MLP module and a helper that applies it to a model's MLP blocks.

Gate and up are split by output columns (each rank gets the gate and up rows of the same columns),
down by input columns, and the ranks' partial outputs are summed with one all-reduce.
"""

from .mlp import TensorParallelSwiGLUMLP, shard_swiglu_mlps
from .sharding import local_size, shard_down, shard_gate_up, shard_packed

__all__ = ["TensorParallelSwiGLUMLP", "shard_swiglu_mlps", "local_size", "shard_down", "shard_gate_up", "shard_packed"]
