"""What a patched MLP block relies on, shared by the 16-bit and the FP8 patches (``fused_swiglu.modules``,
``fused_swiglu.fp8.modules``): recognising SiLU, and the hooks a fused forward would skip."""

from __future__ import annotations

from torch import nn
from torch.nn.modules import module as _module


def is_silu(act: object) -> bool:
    """Whether ``act`` computes SiLU: ``torch.nn.SiLU`` (a subclass too, unless it overrides
    ``forward``) or Hugging Face's ``SiLUActivation`` (module ``transformers.activations``). Which of
    the two ``ACT2FN["silu"]`` returns depends on the transformers version. A class is recognised by
    what it is, not by its name: a user's own class named ``SiLU`` is not taken for SiLU."""
    cls = type(act)
    if isinstance(act, nn.SiLU):
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
