"""Fused SwiGLU inside existing model code: patch the MLP blocks of a loaded model in place.

Hugging Face's Qwen2, Llama and Mistral MLPs (and most SwiGLU MLPs written the same way) compute
``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with three bias-free ``nn.Linear`` layers and a
SiLU ``act_fn``. :func:`fuse_swiglu_mlps` finds such blocks and replaces their ``forward`` with
``down_proj(swiglu(x, gate_proj.weight, up_proj.weight))``: the gate and up products are never
written, and the weights stay where they are (Kernel-1 reads them as they are; no copy, the state
dict is unchanged). :func:`unfuse_swiglu_mlps` restores the original forwards.

Example::

    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", torch_dtype=torch.bfloat16).cuda()
    names = fuse_swiglu_mlps(model)   # ['model.layers.0.mlp', ...]
"""

from __future__ import annotations

import types

import torch
from torch import nn

from . import _validate as v
from .configs import ACCUMULATIONS
from .functional import swiglu

_ORIGINAL = "_fused_swiglu_original_forward"
_SILU_CLASS_NAMES = ("SiLU", "SiLUActivation")  # torch.nn.SiLU; older transformers' own class


def _is_swiglu_mlp(module: nn.Module) -> bool:
    """gate_proj/up_proj/down_proj bias-free nn.Linear layers, gate and up of one shape, SiLU act_fn."""
    layers = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(layer, nn.Linear) and layer.bias is None for layer in layers):
        return False
    gate, up, _ = layers
    act = getattr(module, "act_fn", None)
    return gate.weight.shape == up.weight.shape and type(act).__name__ in _SILU_CLASS_NAMES


def _fused_forward(kernel: str, accumulation: str, backend: str):
    def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
        wg, wu = self.gate_proj.weight, self.up_proj.weight
        usable = (
            x.dtype in v.DTYPES
            and wg.dtype == x.dtype and wu.dtype == x.dtype
            and wg.device == x.device and wu.device == x.device
            and wg.shape[0] % v.ALIGN == 0 and wg.shape[1] % v.ALIGN == 0
        )
        if not usable:  # fp32 models, mixed dtypes or devices, H or I not a multiple of 8
            return getattr(self, _ORIGINAL)(x)
        y = swiglu(x, wg, wu, kernel=kernel, accumulation=accumulation, backend=backend)
        return self.down_proj(y)

    return forward


def fuse_swiglu_mlps(
    model: nn.Module, *, kernel: str = "dual", accumulation: str = "fast", backend: str = "auto"
) -> list[str]:
    """Run every SwiGLU MLP block of ``model`` through :func:`fused_swiglu.swiglu`, in place.

    A submodule is patched when it has ``gate_proj``, ``up_proj`` and ``down_proj`` attributes that
    are ``nn.Linear`` without bias, gate and up weights of one shape ``(I, H)``, and an ``act_fn``
    that is SiLU (``torch.nn.SiLU``, which is what Hugging Face's ``ACT2FN["silu"]`` returns). Its
    forward then computes ``down_proj(swiglu(x, gate_proj.weight, up_proj.weight))``. At call time,
    inputs the kernels cannot take (x not bf16/fp16, weights of another dtype or device, H or I not
    a multiple of 8) run the original forward instead. On a CPU or a non-Hopper GPU, ``backend="auto"``
    runs :func:`swiglu`'s PyTorch fallback (fp32 products, one rounding; one warning per process).
    Blocks already patched are left as they are, and so are blocks carrying an accelerate hook
    (``_hf_hook``: a ``device_map`` that offloads or splits the model), whose forward moves tensors
    between devices. The result is differentiable (see :func:`swiglu`).

    Args:
        model: any ``nn.Module``; it is modified in place (instance ``forward`` attributes).
        kernel: ``"dual"`` (default; reads the weights as they are) or ``"packed"`` (packs both
            weights on every call: a copy of 2·I·H elements per call, rarely worth it here).
        accumulation: ``"fast"`` or ``"promoted"``, as in :func:`swiglu`.
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``, as in :func:`swiglu`.

    Returns:
        The qualified names (``model.named_modules()``) of the blocks patched by this call.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: unknown kernel, accumulation or backend.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    v.check_choice("kernel", kernel, ("dual", "packed"))
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    v.check_choice("backend", backend, v.BACKENDS)
    patched = []
    for name, module in model.named_modules():
        if _is_swiglu_mlp(module) and not hasattr(module, _ORIGINAL) and not hasattr(module, "_hf_hook"):
            setattr(module, _ORIGINAL, module.forward)
            module.forward = types.MethodType(_fused_forward(kernel, accumulation, backend), module)
            patched.append(name)
    return patched


def unfuse_swiglu_mlps(model: nn.Module) -> list[str]:
    """Undo :func:`fuse_swiglu_mlps`: restore the original forward of every patched block.

    Returns:
        The qualified names of the blocks restored.
    """
    restored = []
    for name, module in model.named_modules():
        if hasattr(module, _ORIGINAL):
            original = getattr(module, _ORIGINAL)
            delattr(module, _ORIGINAL)
            if getattr(original, "__func__", None) is type(module).forward:
                del module.forward  # the class's forward again
            else:
                module.forward = original  # an instance forward that was there before
            restored.append(name)
    return restored
