"""What a patched MLP block relies on, shared by the 16-bit and the FP8 patches (``fused_swiglu.modules``,
``fused_swiglu.fp8.modules``): recognising SiLU, and the hooks a fused forward would skip."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.modules import module as _module


def is_silu(act: object) -> bool:
    """Whether ``act`` computes SiLU: ``torch.nn.SiLU`` (a subclass too, unless it overrides
    ``forward``) or Hugging Face's ``SiLUActivation`` (module ``transformers.activations``). Which of
    the two ``ACT2FN["silu"]`` returns depends on the transformers version. A class is recognised by
    what it is, not by its name: a user's own class named ``SiLU`` is not taken for SiLU."""
    return is_silu_type(type(act))


def is_silu_type(cls: type) -> bool:
    """:func:`is_silu` for an instance of ``cls``."""
    if issubclass(cls, nn.SiLU):
        return cls.forward is nn.SiLU.forward
    return cls.__name__ == "SiLUActivation" and cls.__module__.split(".")[0] == "transformers"


def act_name(act: object) -> str:
    """``act``'s class for a message: its name, qualified with its module where the name alone
    would read as SiLU."""
    cls = type(act)
    if cls.__name__ in ("SiLU", "SiLUActivation"):
        return f"{cls.__module__}.{cls.__qualname__}"
    return cls.__name__


def has_hooks(layer: nn.Module) -> bool:
    """Forward, forward-pre, backward or backward-pre hooks on ``layer`` itself."""
    return bool(layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks
                or layer._backward_pre_hooks)


def global_hooks() -> bool:
    """Hooks registered for every module (``torch.nn.modules.module.register_module_*_hook``)."""
    return bool(_module._global_forward_hooks or _module._global_forward_pre_hooks
                or _module._global_backward_hooks or _module._global_backward_pre_hooks)


# Stacked expert weights: a tensor attribute of one of these names with a leading expert dimension
# (transformers 5's ``gate_up_proj`` [E, 2I, H] in Qwen2/3-MoE, Mixtral, DeepSeek-V3 ...; others' 3-D
# gate/up or w1/w3).
_EXPERT_WEIGHTS = ("gate_up_proj", "gate_proj", "up_proj", "w1", "w3")


def experts_reason(module: nn.Module, name: str) -> str | None:
    """What ``module`` (``name`` in its model) is, if it holds a mixture-of-experts layer's routed
    experts that the dense patch cannot fuse; None if it does not. Recognised: a 3-D tensor attribute
    named ``gate_up_proj``, ``gate_proj``, ``up_proj``, ``w1`` or ``w3`` (the experts' stacked
    weights), or an ``nn.ModuleList`` named ``experts`` whose experts are not gate_proj / up_proj /
    down_proj blocks (e.g. ``w1`` / ``w2`` / ``w3`` experts; experts that are such blocks are patched
    one by one as dense blocks)."""
    for attr in _EXPERT_WEIGHTS:
        w = getattr(module, attr, None)
        if isinstance(w, Tensor) and w.dim() == 3:
            return f"routed experts, {attr} {tuple(w.shape)}"
    if isinstance(module, nn.ModuleList) and name.rpartition(".")[2] == "experts" and len(module):
        if not all(all(hasattr(e, p) for p in ("gate_proj", "up_proj", "down_proj")) for e in module):
            return f"routed experts, {len(module)} {type(module[0]).__name__} modules"
    return None
