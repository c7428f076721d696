"""What a patched MLP block relies on, shared by the 16-bit and the FP8 patches (``fused_swiglu.patch.dense``,
``fused_swiglu.patch.fp8``) and the experts patch (``fused_swiglu.patch.experts``): recognising SiLU, the hooks
a fused forward would skip, recognising mixture-of-experts experts, the patched class a block takes
(:func:`install`) and the base of the patches' forwards (:class:`BlockPatch`)."""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn
from torch.nn.modules import module as _module

from .._validate import warn_once


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


def act_reason(module: object) -> str | None:
    """Why ``module``'s ``act_fn`` keeps it unpatched, in words (it has none, or it is not SiLU), or None where it
    is SiLU (:func:`is_silu`)."""
    if not hasattr(module, "act_fn"):
        return "it has no act_fn attribute (the SiLU the fused kernels compute)"
    act = module.act_fn
    if is_silu(act):
        return None
    return f"act_fn is {act_name(act)}, not SiLU (torch.nn.SiLU or transformers' SiLUActivation)"


def act_name(act: object) -> str:
    """``act``'s class for a message: its name, qualified with its module where the name alone
    would read as SiLU."""
    cls = type(act)
    if cls.__name__ in ("SiLU", "SiLUActivation"):
        return f"{cls.__module__}.{cls.__qualname__}"
    return cls.__name__


PROJECTIONS = ("gate_proj", "up_proj", "down_proj")  # the layers an MLP block is recognised by


def has_projections(module: nn.Module) -> bool:
    """Whether ``module`` has ``gate_proj``, ``up_proj`` and ``down_proj`` attributes (what makes it a block
    either body may patch)."""
    return all(hasattr(module, name) for name in PROJECTIONS)


def has_hooks(layer: nn.Module) -> bool:
    """Forward, forward-pre, backward or backward-pre hooks on ``layer`` itself."""
    return bool(layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks
                or layer._backward_pre_hooks)


def global_hooks() -> bool:
    """Hooks registered for every module (``torch.nn.modules.module.register_module_*_hook``)."""
    return bool(_module._global_forward_hooks or _module._global_forward_pre_hooks
                or _module._global_backward_hooks or _module._global_backward_pre_hooks)


class BlockPatch:
    """The base of what a patched block's forward calls (:func:`install`): the 16-bit body
    (``fused_swiglu.patch.dense.FusedSwiGLUForward``) and the FP8 one (``fused_swiglu.patch.fp8.
    FusedFP8SwiGLUForward``) keep their own arming state on top of this; the experts patch
    (``fused_swiglu.patch.experts.FusedExpertsForward``) serves calls of three arguments (``more_arguments``).

    Attributes:
        module: the MLP block. backend: ``"auto"``, ``"cutlass"`` or ``"torch"``.
        more_arguments: (class attribute) whether a call with several positional arguments, the first a tensor
            that :func:`serves` takes, runs the patch with all of them (the experts patch: ``(hidden_states,
            top_k_index, top_k_weights)``) rather than the block's own forward. False: one tensor only.
        previous: the instance ``forward`` the block had before (None: its class's); removed from the
            block while it is patched, restored by :func:`uninstall`.
        base: the block's own class (its forward is the original one).
    """

    more_arguments = False

    def __init__(self, module: nn.Module, backend: str, previous=None):
        self.module, self.backend, self.previous = module, backend, previous
        self.base = type(module)
        self.base_forward = self.base.forward  # the class forward the patch was verified against

    def forward_changed(self) -> bool:
        """Whether the block's own forward is no longer the one the patch was verified against: its class's
        ``forward`` (or a parent's it inherits) reassigned after patching. Such a block runs its own
        forward (:func:`_patched_forward`) until the old one is back."""
        return self.previous is None and self.base.forward is not self.base_forward

    def original(self, *args, **kwargs) -> Tensor:
        """The block's own forward (its instance forward from before patching, else its class's)."""
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return self.base.forward(self.module, *args, **kwargs)

    def hooks_run(self) -> bool:
        """Whether hooks are registered that the fused path would skip: on the block's ``gate_proj``,
        ``up_proj`` or ``act_fn``, or for every module."""
        m = self.module
        return has_hooks(m.gate_proj) or has_hooks(m.up_proj) or has_hooks(m.act_fn) or global_hooks()

    def detach(self) -> None:
        """Remove what the patch registered on the block besides :func:`install` (:func:`uninstall` calls
        it first): nothing here."""


# Stacked expert weights: a tensor attribute of one of these names with a leading expert dimension
# (transformers 5's ``gate_up_proj`` [E, 2I, H] in Qwen2/3-MoE, Mixtral, DeepSeek-V3 ...; others' 3-D
# gate/up or w1/w3).
_EXPERT_WEIGHTS = ("gate_up_proj", "gate_proj", "up_proj", "w1", "w3")


def experts_reason(module: nn.Module, name: str) -> str | None:
    """What ``module`` (``name`` in its model) is, if it holds a mixture-of-experts layer's routed
    experts that the dense patch cannot fuse (the experts patch, ``fused_swiglu.patch.experts``, may); None if
    it does not. Recognised: a 3-D tensor attribute
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


# A patched block keeps its patch (the fused forward and its state) in this instance attribute, and
# takes the class :func:`patched_class` makes of its own class, whose forward calls the patch.
PATCH_ATTR = "_fused_swiglu"
_PATCHED: dict[type, type] = {}


# torch.fx's query for its symbolic tracing alone (torch 2.5 on; older releases: any fx tracing, which
# also logs a notice on its first call), looked up once
_FX_TRACING = (getattr(torch.fx._symbolic_trace, "is_fx_symbolic_tracing", None)
               or getattr(torch.fx._symbolic_trace, "is_fx_tracing", None) or (lambda: False))


def _is_tracing() -> bool:
    """torch.fx's symbolic tracing or torch.jit.trace (not torch.compile): they record the block's own
    forward, whose graph does not depend on the values the patch checks."""
    return bool(_FX_TRACING()) or torch.jit.is_tracing()


def serves(x) -> bool:
    """Whether a patched block's call with the one positional argument ``x`` runs the patch: a tensor,
    outside fx / jit tracing, and not under an autocast to another dtype than x's (the block's own
    forward computes in the autocast dtype there)."""
    if not isinstance(x, torch.Tensor) or (not torch.compiler.is_compiling() and _is_tracing()):
        return False
    kind = x.device.type
    return not (torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) != x.dtype)


def _patched_forward(self, *args, **kwargs):
    # the patch serves the call it was verified for, one positional tensor (as transformers calls its
    # MLPs), while the block's class forward is the one it was verified against (checked on eager calls:
    # under torch.compile the check would add guards per block); any other call (keywords, more arguments,
    # no tensor, a trace, an autocast to another dtype, a forward reassigned since) runs the block's own
    # forward, which takes or refuses it as before; a patch with more_arguments (the experts') also serves
    # positional calls of several arguments (read only on such calls: no guard more for an MLP's call)
    patch = self._fused_swiglu
    if not torch.compiler.is_compiling() and patch.forward_changed():
        name = patch.base.__name__
        warn_once(f"forward-changed-{id(patch.base)}", f"fused_swiglu: {name}.forward is no longer the forward "
                  f"fuse_swiglu_mlps checked when it patched a {name} block (reassigned since): the block runs "
                  "the new forward, unfused; unfuse and fuse again to have it checked", stacklevel=None)
    elif len(args) == 1 and not kwargs and serves(args[0]):
        return patch(args[0])
    elif len(args) > 1 and not kwargs and patch.more_arguments and serves(args[0]):
        return patch(*args)
    return patch.original(*args, **kwargs)


def _forward_of(base: type):
    """The patched class's ``forward``: :func:`_patched_forward` with ``base.forward``'s name and signature
    (``__wrapped__``), so that torch.fx tracing a patched block as its root module gives it the block's
    own arguments, not a ``*args`` proxy."""
    def forward(self, *args, **kwargs):
        return _patched_forward(self, *args, **kwargs)

    return functools.wraps(base.forward)(forward)


def _rebuild(base: type) -> nn.Module:
    return object.__new__(patched_class(base))


def _reduce_ex(self, protocol):
    # pickled (torch.save, copy.deepcopy) as "the patched class of base" plus the instance state, so
    # loading needs only base to be importable
    return _rebuild, (type(self).patched_base,), self.__getstate__()


def patched_class(base: type) -> type:
    """The subclass of ``base`` that a patched block of class ``base`` takes: the same name, qualified
    name, module and docstring, a ``forward`` that calls the block's patch (``PATCH_ATTR``), and
    pickling that rebuilds it from ``base``. One class per ``base``.

    A class rather than an instance ``forward``: torch.compile guards an instance attribute named
    ``forward`` on every call at a cost per block that a class attribute does not have."""
    cls = _PATCHED.get(base)
    if cls is None:
        cls = type(base.__name__, (base,), {
            "forward": _forward_of(base), "__reduce_ex__": _reduce_ex, "patched_base": base,
            "__module__": base.__module__, "__qualname__": base.__qualname__, "__doc__": base.__doc__,
        })
        _PATCHED[base] = cls
    return cls


def install(module: nn.Module, patch: BlockPatch) -> None:
    """Patch ``module``: ``patch`` (callable on x) becomes its forward. An instance ``forward`` it had
    (someone else's patch) is removed from the instance, since it would hide the class's; the patch
    keeps it (``patch.previous``) to run and restore."""
    vars(module).pop("forward", None)
    vars(module)[PATCH_ATTR] = patch
    module.__class__ = patched_class(type(module))


def uninstall(module: nn.Module, patch: BlockPatch) -> None:
    """Undo :func:`install`: what the patch registered (:meth:`BlockPatch.detach`), the original class, and
    the instance forward the block had, if any."""
    patch.detach()
    module.__class__ = type(module).patched_base
    del vars(module)[PATCH_ATTR]
    if patch.previous is not None:
        module.forward = patch.previous


def installed(module: nn.Module) -> object | None:
    """The patch :func:`install` gave ``module``, or None."""
    return vars(module).get(PATCH_ATTR) if isinstance(type(module).__dict__.get("patched_base"), type) else None
