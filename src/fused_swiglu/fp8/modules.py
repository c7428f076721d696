"""Fused gate/up for Hugging Face models quantized with transformers' fine-grained FP8.

transformers' fine-grained FP8 (``FineGrainedFP8Config``, the DeepSeek-V3 / Qwen3-FP8 recipe) turns each
MLP projection into an ``FP8Linear``: an e4m3 ``weight`` (out, in), fp32 ``weight_scale_inv``
``(ceil(out / 128), ceil(in / 128))`` (one scale per 128 x 128 block, multiplying back), activations
quantized at run time per 1 x 128 group of each token. Each of gate_proj and up_proj then quantizes x
and runs its own GEMM; silu and the product follow as two more kernels.

The patched block runs ``down_proj(y)`` with ``y = swiglu(x)`` computed by the block-scaled packed kernel
(``scaling="block"``): x quantized once per 1 x 128 group (``quantize_e4m3_groups``, one kernel), one
FP8 GEMM over the packed gate/up weights with their block scales applied per K block, SwiGLU in fp32,
y rounded once to bf16. ``down_proj`` stays the model's own ``FP8Linear`` (it takes bf16 activations and
quantizes them itself, in transformers' Triton or DeepGEMM path).

The packed kernel reads gate and up rows interleaved (``pack_weights_blockwise``), so the patch keeps a
packed copy of both weights and their scales: 2 I H bytes of e4m3 beside the model's own weights, made
when the block is patched and again when a weight or scale is replaced or changed in place (checked at
every eager call; a compiled model reads the copy it was traced with).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .._validate import hopper_status
from .dynamic import swiglu_packed_fp8_dynamic_op
from .quantize import E4M3, K_BLOCK, PACKED_ROWS, pack_weights_blockwise

_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
_BLOCK = (K_BLOCK, K_BLOCK)


def is_fp8_linear(layer: object) -> bool:
    """Whether ``layer`` is transformers' fine-grained ``FP8Linear`` (recognised by its class and module,
    ``transformers.integrations.finegrained_fp8``, not by its name alone)."""
    cls = type(layer)
    return (isinstance(layer, nn.Linear) and cls.__name__ == "FP8Linear"
            and cls.__module__.split(".")[0] == "transformers")


def is_fp8_block(module: nn.Module) -> bool:
    """Whether ``module`` has gate_proj, up_proj and down_proj and gate_proj and up_proj are ``FP8Linear``."""
    return all(hasattr(module, name) for name in _PROJECTIONS) and all(
        is_fp8_linear(getattr(module, name)) for name in ("gate_proj", "up_proj"))


def _block_size(layer: nn.Module) -> tuple[int, ...] | None:
    size = getattr(layer, "block_size", None)
    return tuple(size) if isinstance(size, Sequence) else None


def _layer_reason(name: str, layer: nn.Module, rows: int, cols: int) -> str | None:
    """Why ``layer`` is not a 128 x 128 block-scaled, dynamic, bias-free FP8Linear of shape (rows, cols)."""
    if layer.bias is not None:
        return f"{name} has a bias"
    if layer.weight.dtype != E4M3:
        return f"{name}.weight is {layer.weight.dtype}, not torch.float8_e4m3fn"
    if tuple(layer.weight.shape) != (rows, cols):
        return f"{name}.weight has shape {tuple(layer.weight.shape)}, not ({rows}, {cols})"
    if _block_size(layer) != _BLOCK:
        return f"{name}.block_size is {getattr(layer, 'block_size', None)}, not (128, 128)"
    if getattr(layer, "activation_scheme", None) != "dynamic":
        return f"{name}.activation_scheme is {getattr(layer, 'activation_scheme', None)!r}, not 'dynamic'"
    scale = getattr(layer, "weight_scale_inv", None)
    blocks = (-(-rows // K_BLOCK), -(-cols // K_BLOCK))
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32 or tuple(scale.shape) != blocks:
        what = "missing" if not isinstance(scale, torch.Tensor) else f"{scale.dtype} {tuple(scale.shape)}"
        return f"{name}.weight_scale_inv is {what}, not torch.float32 {blocks}"
    if scale.device != layer.weight.device:
        return f"{name}.weight_scale_inv is on {scale.device}, its weight on {layer.weight.device}"
    return None


def skip_reason(module: nn.Module, is_silu, has_hooks) -> str | None:
    """Why the FP8 block ``module`` (:func:`is_fp8_block`) is not one the fused forward can run (None: it
    is one): gate_proj and up_proj bias-free ``FP8Linear`` of one shape (I, H) with e4m3 weights, fp32
    128 x 128 block scales and dynamic activation scales, I a multiple of 8 and H of 16, a SiLU act_fn,
    no hooks on gate_proj or up_proj. ``is_silu`` and ``has_hooks`` are the bf16 path's predicates."""
    gate, up = module.gate_proj, module.up_proj
    I, H = gate.weight.shape if gate.weight.dim() == 2 else (0, 0)
    for name, layer in (("gate_proj", gate), ("up_proj", up)):
        reason = _layer_reason(name, layer, I, H)
        if reason is not None:
            return reason
    if I % PACKED_ROWS != 0 or H % 16 != 0:
        return f"gate_proj.weight is ({I}, {H}); the FP8 kernel needs I a multiple of 8 and H of 16"
    act = getattr(module, "act_fn", None)
    if not is_silu(act):
        return f"act_fn is {type(act).__name__}, not SiLU"
    if has_hooks(gate) or has_hooks(up):
        return "gate_proj or up_proj has hooks"
    return None


def _state(layer: nn.Module) -> tuple:
    """What the packed copy was made from: the weight and scale tensors, their versions and storage."""
    w, s = layer.weight, layer.weight_scale_inv
    return (w, s, w._version, s._version, w.data_ptr(), s.data_ptr())


def _same_state(layer: nn.Module, state: tuple) -> bool:
    w, s = layer.weight, layer.weight_scale_inv
    return (w is state[0] and s is state[1] and w._version == state[2] and s._version == state[3]
            and w.data_ptr() == state[4] and s.data_ptr() == state[5])


class FusedFP8SwiGLUForward:
    """The ``forward`` that :func:`fused_swiglu.fuse_swiglu_mlps` installs on a fine-grained FP8 MLP block.

    A call runs the fused path (module docstring) when x is bfloat16 and on a Hopper GPU (backend
    ``"auto"`` / ``"cutlass"``) or on the CPU (``"auto"`` / ``"torch"``: the operator's CPU kernel), the
    block still qualifies (:func:`skip_reason`, checked when gate_proj, up_proj, their weights or act_fn
    were replaced since the last call), no hooks are registered on gate_proj / up_proj or for every
    module, and autograd does not record the call (the FP8 kernel has no backward). Anything else runs
    the block's original forward.

    Attributes:
        module: the MLP block. previous: the instance forward it had before (None: its class's).
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``.
        w_packed, w_scale: the packed copy of the gate/up weights and their block scales.
    """

    def __init__(self, module: nn.Module, backend: str, is_silu, has_hooks, global_hooks, previous=None):
        self.module, self.backend, self.previous = module, backend, previous
        self._is_silu, self._has_hooks, self._global_hooks = is_silu, has_hooks, global_hooks
        self.w_packed = self.w_scale = None
        self._source = None  # (gate_proj, up_proj, act_fn, _state(gate), _state(up)) of the packed copy
        self._pack()

    def __getstate__(self):
        return {**self.__dict__, "w_packed": None, "w_scale": None, "_source": None}

    def original(self, x: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            return self.previous(x)
        return type(self.module).forward(self.module, x)

    def _current(self) -> bool:
        m, source = self.module, self._source
        return (source is not None and m.gate_proj is source[0] and m.up_proj is source[1] and m.act_fn is source[2]
                and (torch.compiler.is_compiling()
                     or (_same_state(m.gate_proj, source[3]) and _same_state(m.up_proj, source[4]))))

    def _pack(self) -> bool:
        """Re-check the block and pack its gate/up weights; False when it no longer qualifies."""
        m = self.module
        self.w_packed = self.w_scale = self._source = None
        if not is_fp8_block(m) or skip_reason(m, self._is_silu, self._has_hooks) is not None:
            return False
        g, u = m.gate_proj, m.up_proj
        with torch.no_grad():
            self.w_packed, self.w_scale = pack_weights_blockwise(g.weight, u.weight, g.weight_scale_inv,
                                                                 u.weight_scale_inv)
        self._source = (g, u, m.act_fn, _state(g), _state(u))
        return True

    def _runs_here(self, x: torch.Tensor) -> bool:
        if x.dtype != torch.bfloat16 or (torch.is_grad_enabled() and x.requires_grad):
            return False
        if x.is_cuda:
            return self.backend != "torch" and hopper_status(x.device) is None
        return x.device.type == "cpu" and self.backend != "cutlass"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m = self.module
        if (not self._runs_here(x) or self._has_hooks(m.gate_proj) or self._has_hooks(m.up_proj)
                or self._global_hooks()):
            return self.original(x)
        if not self._current() and not self._pack():
            return self.original(x)
        if self.w_packed.device != x.device:
            return self.original(x)
        y = swiglu_packed_fp8_dynamic_op(x.reshape(-1, x.shape[-1]), self.w_packed, self.w_scale, "")
        return m.down_proj(y.view(*x.shape[:-1], y.shape[-1]))
