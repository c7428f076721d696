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
when the block is patched and kept in step with them (:class:`FusedFP8SwiGLUForward`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .._validate import hopper_status, require_hopper, warn_once
from ..fp8.ops import swiglu_packed_fp8_op
from ..fp8.quantize import E4M3, K_BLOCK, PACKED_ROWS, pack_weights_blockwise
from .base import BlockPatch, act_reason, has_hooks, has_projections

_BLOCK = (K_BLOCK, K_BLOCK)


def is_fp8_linear(layer: object) -> bool:
    """Whether ``layer`` is transformers' fine-grained ``FP8Linear`` (recognised by its class and module,
    ``transformers.integrations.finegrained_fp8``, not by its name alone)."""
    cls = type(layer)
    return (isinstance(layer, nn.Linear) and cls.__name__ == "FP8Linear"
            and cls.__module__.split(".")[0] == "transformers")


def is_fp8_block(module: nn.Module) -> bool:
    """Whether ``module`` has gate_proj, up_proj and down_proj and gate_proj and up_proj are ``FP8Linear``."""
    return has_projections(module) and all(is_fp8_linear(getattr(module, name)) for name in ("gate_proj", "up_proj"))


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


def skip_reason(module: nn.Module) -> str | None:
    """Why the FP8 block ``module`` (:func:`is_fp8_block`) is not one the fused forward can run (None: it
    is one): gate_proj and up_proj bias-free ``FP8Linear`` of one shape (I, H) with e4m3 weights, fp32
    128 x 128 block scales and dynamic activation scales, I a multiple of 8 and H of 16, a SiLU act_fn,
    no hooks on gate_proj, up_proj or act_fn."""
    gate, up = module.gate_proj, module.up_proj
    I, H = gate.weight.shape if gate.weight.dim() == 2 else (0, 0)
    for name, layer in (("gate_proj", gate), ("up_proj", up)):
        reason = _layer_reason(name, layer, I, H)
        if reason is not None:
            return reason
    if I % PACKED_ROWS != 0 or H % 16 != 0:
        return f"gate_proj.weight is ({I}, {H}); the FP8 kernel needs I a multiple of 8 and H of 16"
    if (reason := act_reason(module)) is not None:
        return reason
    act = module.act_fn
    if has_hooks(gate) or has_hooks(up) or has_hooks(act):
        return "gate_proj, up_proj or act_fn has hooks"
    return None


def _state(layer: nn.Module) -> tuple:
    """What the packed copy was made from: the weight and scale tensors, their versions and storage."""
    w, s = layer.weight, layer.weight_scale_inv
    return (w, s, w._version, s._version, w.data_ptr(), s.data_ptr())


def _same_tensors(layer: nn.Module, state: tuple) -> bool:
    return layer.weight is state[0] and layer.weight_scale_inv is state[1]


def _same_state(layer: nn.Module, state: tuple) -> bool:
    w, s = layer.weight, layer.weight_scale_inv
    return (w is state[0] and s is state[1] and w._version == state[2] and s._version == state[3]
            and w.data_ptr() == state[4] and s.data_ptr() == state[5])


def _still_block_scaled(layer: nn.Module) -> bool:
    """The per-call part of :func:`_layer_reason`: what can change on a layer without replacing it."""
    return (layer.bias is None and _block_size(layer) == _BLOCK
            and getattr(layer, "activation_scheme", None) == "dynamic")


class FusedFP8SwiGLUForward(BlockPatch):
    """The ``forward`` that :func:`fused_swiglu.fuse_swiglu_mlps` installs on a fine-grained FP8 MLP block
    (:class:`fused_swiglu.patch.base.BlockPatch` holds the block, backend, previous forward and original class).

    A call runs the fused path (module docstring) when x is bfloat16 and on a Hopper GPU (backend
    ``"auto"`` / ``"cutlass"``) or on the CPU (``"auto"`` / ``"torch"``: the operator's CPU kernel), the
    block still qualifies (:func:`skip_reason`; a bias, block size or activation scheme changed on
    gate_proj / up_proj is seen at every call), no hooks are registered on gate_proj, up_proj or act_fn
    or for every module, and autograd does not record the call (the FP8 kernel has no backward).
    Anything else runs the block's original forward; ``backend="cutlass"`` with a bf16 x that is not on
    a Hopper GPU raises, as :func:`fused_swiglu.swiglu` does.

    The packed copy of the gate/up weights follows them: an eager call repacks (in place) when a
    weight, a scale or a layer was replaced, moved or changed in place (PyTorch's version counter),
    ``load_state_dict`` repacks at once, and ``torch.save`` / ``deepcopy`` keep the copy with the
    weights. Inside torch.compile only replacements are checked (a replaced weight runs the original
    forward until the next eager call); writes that bypass the version counter (``.data``, NumPy
    views of the storage) are not seen at all: call :meth:`repack` after them.

    Attributes (besides :class:`fused_swiglu.patch.base.BlockPatch`'s):
        w_packed, w_scale: the packed copy of the gate/up weights and their block scales (None before
            the first pack: a block patched on the meta device packs at its first call).
    """

    def __init__(self, module: nn.Module, backend: str, previous=None):
        super().__init__(module, backend, previous)
        self.w_packed = self.w_scale = None
        self._source = None  # (gate_proj, up_proj, act_fn, _state(gate), _state(up)) of the packed copy
        self._hook = module.register_load_state_dict_post_hook(self._after_load)
        self.repack()

    def detach(self) -> None:
        """Remove the ``load_state_dict`` hook (:func:`fused_swiglu.unfuse_swiglu_mlps` calls it)."""
        self._hook.remove()

    def _after_load(self, module, incompatible_keys) -> None:
        self.repack()

    def _current(self) -> bool:
        m, source = self.module, self._source
        g, u = m.gate_proj, m.up_proj
        if not (source is not None and g is source[0] and u is source[1] and m.act_fn is source[2]
                and _still_block_scaled(g) and _still_block_scaled(u)):
            return False
        if torch.compiler.is_compiling():  # versions and storage cannot be read in a graph
            return _same_tensors(g, source[3]) and _same_tensors(u, source[4])
        return _same_state(g, source[3]) and _same_state(u, source[4])

    def repack(self) -> bool:
        """Check the block again and pack its gate/up weights and scales into the packed copy (in place
        when the shapes are unchanged, so compiled graphs read the new values). Returns False, leaving
        no copy, when the block no longer qualifies or its weights are on the meta device."""
        m = self.module
        if not is_fp8_block(m) or skip_reason(m) is not None:
            self.w_packed = self.w_scale = self._source = None
            return False
        g, u = m.gate_proj, m.up_proj
        if any(t.is_meta for t in (g.weight, u.weight, g.weight_scale_inv, u.weight_scale_inv)):
            self.w_packed = self.w_scale = self._source = None
            return False
        with torch.no_grad():
            w, s = pack_weights_blockwise(g.weight, u.weight, g.weight_scale_inv, u.weight_scale_inv)
            old_w, old_s = self.w_packed, self.w_scale
            if (old_w is not None and old_w.shape == w.shape and old_w.device == w.device
                    and old_s.shape == s.shape and old_s.stride() == s.stride()):
                old_w.copy_(w)
                old_s.copy_(s)
            else:
                self.w_packed, self.w_scale = w, s
        self._source = (g, u, m.act_fn, _state(g), _state(u))
        return True

    def _runs_here(self, x: torch.Tensor) -> bool:
        if x.dtype != torch.bfloat16 or (torch.is_grad_enabled() and x.requires_grad):
            return False
        if self.backend == "cutlass":
            require_hopper(x.device)
            return True
        if x.is_cuda:
            return self.backend != "torch" and hopper_status(x.device) is None
        if x.device.type != "cpu":
            return False
        warn_once("fp8-cpu", "fused_swiglu: a patched FP8 MLP block on the CPU runs the operator's CPU kernel, which "
                  "quantizes x as the GPU kernel does, then dequantizes and multiplies in fp32: for correctness, not "
                  "speed; its speed against the block's own forward has not been measured (unfuse_swiglu_mlps "
                  "restores it).", stacklevel=None)
        return True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m = self.module
        if not self._runs_here(x) or self.hooks_run():
            return self.original(x)
        if not self._current() and (torch.compiler.is_compiling() or not self.repack()):
            return self.original(x)
        if self.w_packed.device != x.device:
            return self.original(x)
        H = self.w_packed.shape[1]
        if x.shape[-1] != H:
            raise ValueError(f"x must have gate_proj.in_features = {H} elements in its last dimension; "
                             f"got x of shape {tuple(x.shape)}")
        y, _ = swiglu_packed_fp8_op(x.reshape(-1, H), self.w_packed, None, self.w_scale, None, "block", False, "")
        return m.down_proj(y.view(*x.shape[:-1], y.shape[-1]))
