"""Whether an MLP block's own forward computes ``down_proj(silu(gate_proj(x)) * up_proj(x))``, so that
:func:`fused_swiglu.fuse_swiglu_mlps` may replace it without changing what the model computes.

Blocks are recognised by their attributes (``gate_proj``, ``up_proj``, ``down_proj``, a SiLU
``act_fn``), but attributes say nothing about the forward: a block with those names may add a
residual, scale its output, swap gate and up, or apply dropout. So a block is patched only after one
of two checks:

- **by class**: its class's ``forward`` is one of the Hugging Face MLP forwards listed in
  :data:`KNOWN_FORWARDS`, each of which is ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` (a test
  reads their source in the installed transformers), and no instance ``forward`` overrides it;
- **by a probe**: a block whose parameters and buffers all belong to gate_proj, up_proj and down_proj
  (anything else its forward might read, such as a LayerScale factor, could change after patching) has
  its forward run on a few random inputs (:data:`PROBES`: 2-D and 3-D, several token counts, small and
  large values), in eval and in training mode, and compared with ``down_proj(silu(gate_proj(x)) *
  up_proj(x))`` computed from the same layers: it must agree to within rounding, with no systematic
  scale, and give the same result twice (no dropout or other randomness).

A probe sees only its inputs: a forward that departs from SwiGLU only on inputs unlike them (a branch on
a token count or a value range the probes miss) is not caught.

The probe runs under ``torch.no_grad()`` on the block's own device and dtype, with its own random
generator; the global random states (CPU and the block's CUDA device), the block's and its
submodules' ``training`` flags and its buffers are restored afterwards (plain Python attributes that
the forward changes are put back too, those of the block and of its four layers). A probed block's plain
Python attributes and its layers' (:func:`plain_attributes`: a flag, a scale, a small list or dict) are
what the probe ran with: the patched forward checks on every call that they are still the same
(:func:`same_attributes`) and runs the block's own forward where one changed. Not seen: a field of a larger
object changed in place (a config), module-level globals, and branches on shapes or values unlike the
probe's inputs. Hooks on ``down_proj`` (the one layer the patched forward still calls as
a module) see the probe's calls.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# Hugging Face MLP classes whose forward is down_proj(act_fn(gate_proj(x)) * up_proj(x)), by module.
# Their act_fn, biases and layer types are still checked block by block (a Gemma MLP's GELU is
# refused there); this list only vouches for the forward.
KNOWN_FORWARDS: dict[str, tuple[str, ...]] = {
    "transformers.models.llama.modeling_llama": ("LlamaMLP",),
    "transformers.models.mistral.modeling_mistral": ("MistralMLP",),
    "transformers.models.qwen2.modeling_qwen2": ("Qwen2MLP",),
    "transformers.models.qwen3.modeling_qwen3": ("Qwen3MLP",),
    "transformers.models.qwen2_moe.modeling_qwen2_moe": ("Qwen2MoeMLP",),
    "transformers.models.qwen3_moe.modeling_qwen3_moe": ("Qwen3MoeMLP",),
    "transformers.models.deepseek_v3.modeling_deepseek_v3": ("DeepseekV3MLP",),
    "transformers.models.olmo2.modeling_olmo2": ("Olmo2MLP",),
    "transformers.models.smollm3.modeling_smollm3": ("SmolLM3MLP",),
    "transformers.models.granite.modeling_granite": ("GraniteMLP",),
    "transformers.models.glm4_moe.modeling_glm4_moe": ("Glm4MoeMLP",),
}

# The probe inputs: leading dimensions (H is appended) and the standard deviation of their values: 3-D
# and 2-D, token counts on both sides of common branch points, values small and large (past the
# clamps and thresholds a forward might apply).
PROBES: tuple[tuple[tuple[int, ...], float], ...] = (((2, 4), 1.0), ((9,), 3.0), ((1, 17), 0.25))
# The probe's tolerances, in units of the dtype's unit roundoff u: ||forward(x) - reference|| <=
# PROBE_ULPS * u * ||reference||, and the best scale a of forward(x) ~ a * reference within
# PROBE_SCALE_ULPS * u of 1. Computing the same function with other roundings (fp32 intermediates,
# another operand order) stays well inside both: rounding errors are not all of one sign, so they
# average out of a; a residual, a scale, swapped gate and up or another activation do not.
PROBE_ULPS = 4.0
PROBE_SCALE_ULPS = 1.0


def known_forward(module: nn.Module) -> bool:
    """Whether ``type(module).forward`` is one of :data:`KNOWN_FORWARDS` (by its defining module and
    qualified name, so a subclass that overrides ``forward`` is not taken for its parent)."""
    fwd = type(module).forward
    names = KNOWN_FORWARDS.get(getattr(fwd, "__module__", None), ())
    return any(getattr(fwd, "__qualname__", None) == f"{name}.forward" for name in names)


def _reference(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module.down_proj(F.silu(module.gate_proj(x)) * module.up_proj(x))


def _unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def _mismatch(got: object, want: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Why ``got`` is not ``want`` to within :data:`PROBE_ULPS` (None: it is)."""
    if not isinstance(got, torch.Tensor):
        return f"its forward returns {type(got).__name__}, not a tensor"
    if got.shape != want.shape:
        return f"its forward returns shape {tuple(got.shape)}, not down_proj's {tuple(want.shape)}"
    want64, got64 = want.detach().double(), got.detach().double()  # compared, not differentiated
    if not bool(torch.isfinite(want64).all()):
        return "the probe's reference output is not finite, so what its forward computes cannot be checked"
    scale = float(want64.norm())
    if scale == 0.0:
        return ("its weights give an all-zero output, so what its forward computes cannot be checked "
                "(patch after loading the weights)")
    u = _unit_roundoff(dtype)
    rel = float((got64 - want64).norm()) / scale
    if not rel <= PROBE_ULPS * u:  # NaN fails too
        return f"its forward differs from down_proj(silu(gate_proj(x)) * up_proj(x)) (relative difference {rel:.3g})"
    a = float((got64 * want64).sum()) / scale**2  # the least-squares scale of got against want
    if not abs(a - 1.0) <= PROBE_SCALE_ULPS * u:
        return f"its forward scales down_proj(silu(gate_proj(x)) * up_proj(x)) by {a:.5g}"
    return None


def _other_state(module: nn.Module) -> list[str]:
    """Parameters, buffers and tensor attributes of ``module`` that do not belong to gate_proj, up_proj or
    down_proj."""
    own = ("gate_proj.", "up_proj.", "down_proj.")
    names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
    names += [n for n, value in vars(module).items() if isinstance(value, torch.Tensor)]
    return [n for n in names if not n.startswith(own)]


# Attribute values compared by value where not the same object (else by identity)
_VALUE_TYPES = (bool, int, float, complex, str, bytes, type(None))
# The layers whose own plain attributes a probed block's forward may read as well (a flag on gate_proj)
_CHILDREN = ("gate_proj", "up_proj", "down_proj", "act_fn")
# A list, tuple, set or dict of at most this many items (nested up to _DEPTH deep), or a tensor of at most
# this many elements, is compared by its contents on every call; any other object by identity
_SMALL = 16
_DEPTH = 3
_CONTAINERS = (list, tuple, set, frozenset, dict)


def _public(module: nn.Module) -> list[tuple[str, object]]:
    return [(k, value) for k, value in vars(module).items()
            if not k.startswith("_") and k not in ("training", "forward")]


def _frozen(value: object, depth: int = 0) -> object:
    """What a call compares of an attribute value: a number, string, bytes or None itself; a small
    container's contents; a small tensor's values; anything else by identity (``("object", id)``)."""
    if type(value) in _VALUE_TYPES:
        return value
    if isinstance(value, torch.Tensor) and not value.is_meta and value.numel() <= _SMALL:
        return ("tensor", value.dtype, tuple(value.shape), tuple(value.detach().flatten().tolist()))
    if isinstance(value, _CONTAINERS) and len(value) <= _SMALL and depth < _DEPTH:
        items = value.items() if isinstance(value, dict) else (
            sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value)
        if isinstance(value, dict):
            return (dict, tuple((k, _frozen(v, depth + 1)) for k, v in items))
        return (type(value), tuple(_frozen(v, depth + 1) for v in items))
    return ("object", id(value))


def _is_object(frozen: object) -> bool:
    """Whether a :func:`_frozen` value stands for an object compared by identity."""
    return isinstance(frozen, tuple) and len(frozen) == 2 and frozen[0] == "object"


def _portable(frozen: object) -> object:
    """``frozen`` with objects compared by type instead of identity (a copy has other objects)."""
    if _is_object(frozen):
        return "object"
    if isinstance(frozen, tuple) and len(frozen) == 2 and frozen[0] in _CONTAINERS:
        return (frozen[0], tuple(_portable(v) for v in frozen[1]))
    return frozen


def large_tensors(module: nn.Module) -> list[str]:
    """Attributes of the block or its four layers holding, inside a container, a tensor of more than 16
    elements (whose contents a call cannot compare cheaply)."""
    found = []

    def visit(name: str, value: object, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            if depth and value.numel() > _SMALL:
                found.append(name)
        elif isinstance(value, _CONTAINERS) and depth < _DEPTH:
            for v in (value.values() if isinstance(value, dict) else value):
                visit(name, v, depth + 1)

    for layer, prefix in _layers(module):
        for k, value in _public(layer):
            visit(prefix + k, value, 0)
    return sorted(set(found))


def _layers(module: nn.Module) -> list[tuple[nn.Module, str]]:
    """The block and its four layers, each with the prefix of its attribute names."""
    return [(module, "")] + [(getattr(module, c), c + ".") for c in _CHILDREN
                             if isinstance(getattr(module, c, None), nn.Module)]


def plain_attributes(module: nn.Module) -> tuple[tuple[str, object], ...]:
    """The plain Python attributes of a block that its forward may read, as ``(name, value)`` in the
    order of the ``__dict__``s: every name without a leading underscore (``nn.Module`` keeps its own state
    under such names), other than ``training`` and an instance ``forward``, of the block and of its
    gate_proj, up_proj, down_proj and act_fn (``"gate_proj.flag"``), each as :func:`_frozen` gives it."""
    return tuple((prefix + k, _frozen(value)) for layer, prefix in _layers(module) for k, value in _public(layer))


def same_attributes(module: nn.Module, saved: tuple[tuple[str, object], ...], portable: bool = False) -> bool:
    """Whether ``module``'s :func:`plain_attributes` are still ``saved``: the same names in the same order
    and contents; ``portable``: objects compared by type (a copy of the block against its original's)."""
    now = plain_attributes(module)
    if portable:
        now, saved = (tuple((k, _portable(v)) for k, v in t) for t in (now, saved))
    return now == saved


class Watch:
    """:func:`same_attributes` at a fraction of its cost, for a patched block's every call: the
    ``__dict__`` of the block and of its four layers, each value saved (numbers, strings, bytes and None by
    value, small containers and tensors by contents, other objects by identity), each dict's length (a
    new attribute; only where the length differs are the public names listed), and the block's
    submodules by identity."""

    def __init__(self, module: nn.Module, saved: tuple[tuple[str, object], ...] | None = None):
        self.module = module
        self.saved = plain_attributes(module) if saved is None else saved  # as the probe ran it
        self.layers = [(layer, prefix[:-1] or None) for layer, prefix in _layers(module)]
        self.lengths = [len(vars(layer)) for layer, _ in self.layers]
        self.names = [frozenset(k for k, _ in _public(layer)) for layer, _ in self.layers]
        self.items = [(vars(layer), k, value, None if type(value) in _VALUE_TYPES else _frozen(value))
                      for layer, _ in self.layers for k, value in _public(layer)]
        self.submodules = [(k, v) for k, v in module._modules.items() if k not in _CHILDREN]
        self.count = len(module._modules)

    def _replaced(self) -> bool:
        """A layer was replaced: the same as before if the new one's plain attributes equal the old one's
        (a new ``nn.Linear`` of the same shape) and nothing else changed; the watch then follows it."""
        if not same_attributes(self.module, self.saved):
            return False
        self.__init__(self.module, self.saved)
        return True

    def same(self) -> bool:
        """Whether every saved attribute and submodule is still there and the same, and no public
        attribute or submodule was added."""
        m = self.module
        mods = m._modules
        if len(mods) != self.count or any(mods.get(k) is not v for k, v in self.submodules):
            return False
        for i, (layer, child) in enumerate(self.layers):
            if child is not None and mods.get(child) is not layer:
                return self._replaced()
            d = vars(layer)
            if len(d) != self.lengths[i]:
                if frozenset(k for k, _ in _public(layer)) != self.names[i]:
                    return False
                self.lengths[i] = len(d)  # an underscored attribute came or went
        for d, k, value, frozen in self.items:
            now = d.get(k, _MISSING)
            if frozen is None:
                if now is not value and not (type(now) is type(value) and now == value):
                    return False
            elif _frozen(now) != frozen:
                return False
        return True


_MISSING = object()


def traced_checks(module: nn.Module, saved: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object, bool], ...] | None:
    """What a call traced by torch.compile compares of ``saved`` (:func:`plain_attributes` of ``module``):
    ``(name, value, by_identity)`` per attribute, a number, string, bytes or None by value and any other
    object (a config) by identity; None where one is a container or a tensor (such a block runs its own
    forward under torch.compile)."""
    out = []
    for k, frozen in saved:
        if type(frozen) in _VALUE_TYPES:
            out.append((k, frozen, False))
        elif _is_object(frozen):
            owner, _, name = k.rpartition(".")
            out.append((k, getattr(getattr(module, owner) if owner else module, name), True))
        else:
            return None
    return tuple(out)


def same_attributes_traced(module: nn.Module, checks: tuple[tuple[str, object, bool], ...]) -> bool:
    """:func:`same_attributes` as torch.compile traces it, from :func:`traced_checks`: each attribute read
    again with ``getattr`` (Dynamo guards each value read) and compared by value or identity. An attribute
    added later is not seen there."""
    for k, b, identity in checks:
        owner, _, name = k.rpartition(".")
        now = getattr(getattr(module, owner) if owner else module, name, None)
        if (now is not b) if identity else (now != b):
            return False
    return True


def _set_training(modules: list[nn.Module], flags: list[bool]) -> None:
    for m, flag in zip(modules, flags):
        m.training = flag


def _run_probe(module: nn.Module, forward: Callable, inputs: list[torch.Tensor]) -> str | None:
    """The probe proper; see :func:`probe`."""
    subs = list(module.modules())
    for training in (False, True):
        _set_training(subs, [training] * len(subs))
        mode = "training" if training else "eval"
        for x in inputs:
            want = _reference(module, x)
            first = forward(x)
            second = forward(x)  # the random state has moved on: dropout would draw another mask
            reason = _mismatch(first, want, x.dtype)
            if reason is not None:
                return f"{reason} in {mode} mode, x of shape {tuple(x.shape)}"
            if not torch.equal(first, second):
                return f"its forward is not deterministic in {mode} mode (dropout or other randomness)"
    with torch.enable_grad():  # a forward may branch on autograd being on
        x = inputs[0]
        reason = _mismatch(forward(x).detach(), _reference(module, x), x.dtype)
        if reason is not None:
            return f"{reason} with autograd enabled, x of shape {tuple(x.shape)}"
    return None


def probe(module: nn.Module, forward: Callable, dtype: torch.dtype) -> str | None:
    """Refuse a block with parameters or buffers beyond its three projections; else run ``forward`` (the
    block's own forward, not ``module.__call__``) on the random inputs of :data:`PROBES` (``dtype``, the
    block's device) and compare it with ``down_proj(silu(gate_proj(x)) * up_proj(x))``, in eval and in
    training mode.

    Returns None when it matches; else why not (a sentence). Exceptions raised by the forward are
    returned as a reason, never raised. Leaves the global random states, the ``training`` flags and
    the buffers of ``module`` as they were.
    """
    other = _other_state(module) + large_tensors(module)
    if other:
        shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        return (f"it has parameters, buffers or tensor attributes beyond gate_proj, up_proj and down_proj ({shown}), "
                "which its forward may read and which may change after patching")
    weight = module.gate_proj.weight
    if weight.device.type == "meta":
        return "its weights are on the meta device, so what its forward computes cannot be checked (load them first)"
    H = weight.shape[1]
    gen = torch.Generator(device=weight.device).manual_seed(0)
    inputs = [(std * torch.randn((*lead, H), generator=gen, device=weight.device, dtype=torch.float32)).to(dtype)
              for lead, std in PROBES]
    subs = list(module.modules())
    flags = [m.training for m in subs]
    buffers = [(b, b.clone()) for b in module.buffers()]
    attributes = [(layer, dict(_public(layer)), {k: copy.copy(v) for k, v in _public(layer)
                                                 if isinstance(v, (list, dict, set))}) for layer, _ in _layers(module)]
    before = plain_attributes(module)
    devices = [weight.device] if weight.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices, device_type="cuda"):
            reason = _run_probe(module, forward, inputs)
        after = plain_attributes(module)
        if reason is None and after != before:
            changed = [k for (k, a), (_, b) in zip(after, before) if a != b]
            return ("its forward changes its own attributes (" + ", ".join(changed[:3] or ["added ones"])
                    + "), which a fused forward would not")
        return reason
    except Exception as e:  # the block's own code: whatever it raises means "cannot verify"
        first = (str(e).splitlines() or [""])[0]
        said = f" ({first[:120]}{'...' if len(first) > 120 else ''})" if first else ""
        return f"its forward raised {type(e).__name__} on a probe input{said}"
    finally:
        _set_training(subs, flags)
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        _restore_attributes(attributes)


def _restore_attributes(attributes: list[tuple[nn.Module, dict[str, object], dict[str, object]]]) -> None:
    """Put back the plain attributes each layer had (:func:`_public`): a value the probe's calls replaced,
    none that they added, and the contents of a list, dict or set they changed in place (a counter or a
    log the forward keeps is as it was before the probe)."""
    for layer, saved, contents in attributes:
        for k, _ in _public(layer):
            if k not in saved:
                delattr(layer, k)
        for k, value in saved.items():
            if vars(layer).get(k) is not value:
                setattr(layer, k, value)
        for k, was in contents.items():
            value = saved[k]
            if value != was:
                if isinstance(value, list):
                    value[:] = was
                else:
                    value.clear()
                    value.update(was)


def by_class(module: nn.Module, previous: Callable | None) -> bool:
    """Whether the block's forward is vouched for by its class: :func:`known_forward` and no instance
    forward (``previous``) overriding it; else :func:`verify` probes it."""
    return previous is None and known_forward(module)


def verify(module: nn.Module, forward: Callable, previous: Callable | None, dtype: torch.dtype) -> str | None:
    """Why the block ``module`` may not be replaced by the fused forward (None: it may): its forward is
    vouched for by its class (:func:`by_class`), or :func:`probe` finds that ``forward`` computes the
    SwiGLU MLP. ``dtype``: the probe input's dtype (the block's activations)."""
    if by_class(module, previous):
        return None
    return probe(module, forward, dtype)
