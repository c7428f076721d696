"""transformers' mixture-of-experts experts through :func:`fused_swiglu.experts.swiglu_experts`: an experts
implementation named ``"fused_swiglu"`` (:func:`register_experts_implementation`) and the patch that
:func:`fused_swiglu.fuse_swiglu_mlps` gives an experts module (:func:`fuse_experts`).

transformers 5 keeps the routed experts of Qwen2-MoE, Qwen3-MoE, Mixtral, DeepSeek-V3 and others as one module
of 3-D weights (``gate_up_proj`` ``(E, 2I, H)``, ``down_proj`` ``(E, H, I)``) whose class carries
``@use_experts_implementation``: its forward ``(hidden_states, top_k_index, top_k_weights)`` runs the function
that ``config._experts_implementation`` names in ``ALL_EXPERTS_FUNCTIONS`` (``"eager"``, the class's own loop,
``"grouped_mm"``, the default, ``"batched_mm"``, ...), and the decorator records the layout in flags
(``has_gate``, ``has_bias``, ``is_transposed``, ``is_concatenated``, ``has_post_expert_norm``) that transformers'
own grouped and batched forwards follow. The fused forward takes the layout the kernel reads
(:func:`layout_reason`): gate rows then up rows (concatenated, not transposed), no bias, no post-expert norm,
the default gate (``act_fn(gate) * up``) with a SiLU ``act_fn``. Other layouts (gpt-oss's interleaved, biased,
clamped experts; transposed weights; custom gates; non-gated experts) keep transformers' path.

Two ways in, each checking every call (:func:`call_reason`) and running transformers' own path where the fused
forward cannot run it: bf16 / fp16 tensors of one device, a Hopper GPU or the CPU (the grouped operator's
PyTorch kernel, a fallback for correctness: one warning per process), H and I multiples of 8 on CUDA, no
expert parallelism, and no autograd (the fused forward is inference only; a call that autograd records, grad
mode on and the hidden states, the routing weights or the experts' weights requiring grad, runs transformers'
path, which is differentiable):

* ``experts_implementation="fused_swiglu"`` (after :func:`register_experts_implementation`): the model's
  config selects it for every experts module; where a call cannot run fused it runs transformers'
  ``grouped_mm`` forward (one RuntimeWarning per reason). ``generate()`` switches ``"grouped_mm"`` to
  ``"batched_mm"`` for decoding and leaves every other name as it is, so ``"fused_swiglu"`` stays selected
  through decoding. transformers' fine-grained FP8 experts (another interface) run its FP8 ``grouped_mm``
  under that name (:func:`fp8_experts_forward`).
* :func:`fuse_experts` (from :func:`fused_swiglu.fuse_swiglu_mlps`): one module's class becomes a patched
  subclass whose forward runs the fused forward whatever the config selects; where a call cannot run fused it
  runs the module's own forward, i.e. what the config selects (during ``generate()``'s decoding, with the
  default ``"grouped_mm"``, that is ``"batched_mm"``). :func:`fused_swiglu.unfuse_swiglu_mlps` restores the
  class.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import _validate as v
from .patch.base import BlockPatch, act_name, global_hooks, has_hooks, install, is_silu
from .experts import INDEX_DTYPES, swiglu_experts

__all__ = ["IMPLEMENTATION", "FusedExpertsForward", "call_reason", "experts_forward", "fp8_experts_forward",
           "fuse_experts", "layout_reason", "patch_reason", "register_experts_implementation"]

IMPLEMENTATION = "fused_swiglu"  # the experts implementation's name in transformers' ExpertsInterface

# transformers' layout flags (@use_experts_implementation) and the value the fused forward needs
_FLAGS = (("has_gate", True, "it has no gate (up_proj experts)"),
          ("has_bias", False, "its projections have biases"),
          ("is_transposed", False, "its weights are stored transposed ((E, H, 2I))"),
          ("is_concatenated", True, "its gate and up rows are interleaved, not gate rows then up rows"),
          ("has_post_expert_norm", False, "it normalises each expert's output"))


def _default_gate(cls: type) -> bool:
    """Whether the experts class ``cls`` gates with transformers' default ``act_fn(gate) * up`` (the
    ``_apply_gate`` that ``@use_experts_implementation`` adds where the class has none)."""
    gate = getattr(cls, "_apply_gate", None)
    return getattr(gate, "__name__", None) == "_default_apply_gate" and getattr(gate, "__module__", "").startswith(
        "transformers.")


def layout_reason(module: nn.Module) -> str | None:
    """Why the experts module ``module`` does not hold experts the fused forward computes (None: it does):
    a transformers experts class (``@use_experts_implementation``) with ``gate_up_proj`` ``(E, 2I, H)`` (gate
    rows then up rows: concatenated, not transposed) and ``down_proj`` ``(E, H, I)`` as tensors, no biases, no
    post-expert norm, the default gate with a SiLU ``act_fn`` (``torch.nn.SiLU`` or transformers'
    ``SiLUActivation``). Reads attributes only."""
    if not (hasattr(module, "has_gate") and hasattr(module, "is_transposed")):
        return "its class is not a transformers experts class (@use_experts_implementation)"
    reasons = [reason for flag, needed, reason in _FLAGS if bool(getattr(module, flag, needed)) != needed]
    if not _default_gate(type(module)):
        reasons.append("its gate is its own _apply_gate, not act_fn(gate) * up")
    if reasons:
        return "; ".join(reasons)
    act = getattr(module, "act_fn", None)
    if not is_silu(act):
        return f"act_fn is {act_name(act)}, not SiLU (torch.nn.SiLU or transformers' SiLUActivation)"
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not (isinstance(gate_up, Tensor) and isinstance(down, Tensor) and gate_up.dim() == 3 and down.dim() == 3):
        return "gate_up_proj and down_proj are not both 3-D tensors"
    E, rows, H = gate_up.shape
    if rows % 2 or tuple(down.shape) != (E, H, rows // 2):
        return (f"gate_up_proj {tuple(gate_up.shape)} and down_proj {tuple(down.shape)} are not (E, 2I, H) and "
                "(E, H, I)")
    return None


def _weights_reason(module: nn.Module) -> str | None:
    """Why the kernels could never run the experts' weights as they are (None: they can): not bf16 / fp16 of
    one dtype, or H or I not a multiple of 8. Assumes :func:`layout_reason` is None."""
    w, d = module.gate_up_proj, module.down_proj
    if w.dtype not in v.DTYPES or d.dtype != w.dtype:
        return (f"its weights are {w.dtype} and {d.dtype}; the kernels take torch.bfloat16 or torch.float16 (convert "
                "the model before patching)")
    _, rows, H = w.shape
    if H % v.ALIGN or (rows // 2) % v.ALIGN:
        return f"gate_up_proj is {tuple(w.shape)}; the kernels need I and H to be multiples of {v.ALIGN}"
    return None


def call_reason(module: nn.Module, hidden_states: object, top_k_index: object, top_k_weights: object) -> str | None:
    """Why the fused forward does not run this call of the experts module ``module`` (None: it does):
    :func:`layout_reason`; expert parallelism (``_is_expert_parallel``: ids of other ranks' experts); the
    arguments not a ``(T, H)`` bf16 / fp16 tensor, ``(T, k)`` int64 / int32 ids and ``(T, k)`` floating
    weights on the weights' device and of their dtype; autograd recording the call (grad mode on and an
    argument or weight requiring grad); a device other than a Hopper GPU or the CPU; H or I not a multiple of
    8 on CUDA. Reads attributes, shapes and dtypes only (no data: nothing waits for the GPU)."""
    reason = layout_reason(module)
    if reason is not None:
        return reason
    if getattr(module, "_is_expert_parallel", False):
        return "its experts are split over ranks (expert parallelism)"
    w, d = module.gate_up_proj, module.down_proj
    x, idx, kw = hidden_states, top_k_index, top_k_weights
    if not (isinstance(x, Tensor) and isinstance(idx, Tensor) and isinstance(kw, Tensor)):
        return "its arguments are not three tensors"
    if not (x.dim() == 2 and idx.dim() == 2 and tuple(kw.shape) == tuple(idx.shape) and idx.shape[0] == x.shape[0]
            and idx.shape[1] >= 1 and x.shape[1] == w.shape[2]):
        return (f"hidden_states {tuple(x.shape)}, top_k_index {tuple(idx.shape)} and top_k_weights "
                f"{tuple(kw.shape)} are not (T, H), (T, k) and (T, k) with H = {w.shape[2]}")
    if x.dtype not in v.DTYPES or w.dtype != x.dtype or d.dtype != x.dtype:
        return (f"hidden_states and the weights are {x.dtype}, {w.dtype} and {d.dtype}; the kernels take one of "
                "torch.bfloat16 and torch.float16")
    if idx.dtype not in INDEX_DTYPES or not kw.is_floating_point():
        return f"top_k_index is {idx.dtype} and top_k_weights {kw.dtype}, not int64 / int32 ids and floating weights"
    device = x.device
    if not (idx.device == device and kw.device == device and w.device == device and d.device == device):
        return "its tensors are not all on one device"
    if torch.is_grad_enabled() and (x.requires_grad or kw.requires_grad or w.requires_grad or d.requires_grad):
        return ("autograd records the call (grad mode on and an input or weight requiring grad): the fused experts "
                "forward is inference only")
    if device.type == "cuda":
        why = v.hopper_status(device)
        if why is not None:
            return why
        if w.shape[2] % v.ALIGN or (w.shape[1] // 2) % v.ALIGN:
            return f"gate_up_proj is {tuple(w.shape)}; the kernels need I and H to be multiples of {v.ALIGN}"
    elif device.type != "cpu":
        return f"its tensors are on {device}, neither a CUDA device nor the CPU"
    return None


def _cpu_notice(device: torch.device) -> None:
    """One warning per process that the experts run the grouped operator's PyTorch kernel (the CPU)."""
    if device.type == "cpu":
        v.resolve_backend("auto", device, stacklevel=None)


def experts_forward(self: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
    """The experts implementation ``"fused_swiglu"``: transformers' experts-function signature (the experts
    module, ``hidden_states`` ``(T, H)``, ``top_k_index`` ``(T, k)``, ``top_k_weights`` ``(T, k)``; returns
    ``(T, H)`` in hidden_states' dtype). Runs :func:`fused_swiglu.experts.swiglu_experts` on the module's
    ``gate_up_proj`` and ``down_proj``; where :func:`call_reason` gives a reason, transformers' ``grouped_mm``
    experts forward instead (one RuntimeWarning per reason and class)."""
    reason = call_reason(self, hidden_states, top_k_index, top_k_weights)
    if reason is not None:
        from transformers.integrations.moe import grouped_mm_experts_forward

        name = type(self).__qualname__
        v.warn_once(f"experts-implementation:{name}:{reason}", (
            f"fused_swiglu: experts_implementation='{IMPLEMENTATION}' runs transformers' grouped_mm for this "
            f"{name} call: {reason}"), stacklevel=None)
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    _cpu_notice(hidden_states.device)
    return swiglu_experts(hidden_states, top_k_index, top_k_weights, self.gate_up_proj, self.down_proj)


def fp8_experts_forward(self: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
    """``"fused_swiglu"`` for transformers' fine-grained FP8 experts (its ``FP8ExpertsInterface``): their
    e4m3 weights are not the grouped kernel's, so transformers' FP8 ``grouped_mm`` forward runs them (one
    RuntimeWarning), rather than the KeyError an unknown name would raise in a model whose config selects
    ``"fused_swiglu"`` for every experts module."""
    from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS

    v.warn_once("experts-implementation:fp8", (
        f"fused_swiglu: experts_implementation='{IMPLEMENTATION}' runs transformers' FP8 grouped_mm for the "
        f"fine-grained FP8 experts ({type(self).__qualname__}): the grouped kernel takes bf16 / fp16 weights"),
        stacklevel=None)
    return ALL_FP8_EXPERTS_FUNCTIONS["grouped_mm"](self, hidden_states, top_k_index, top_k_weights)


def register_experts_implementation() -> str:
    """Register :func:`experts_forward` in transformers' ``ExpertsInterface`` (``ALL_EXPERTS_FUNCTIONS``) as
    ``"fused_swiglu"``, for every experts class of every model, and :func:`fp8_experts_forward` under the same
    name in its ``FP8ExpertsInterface`` where transformers has one (idempotent); returns the name. Call it
    before building or loading a model with ``experts_implementation="fused_swiglu"`` (``from_pretrained``, a
    config) or ``model.set_experts_implementation("fused_swiglu")``: transformers refuses names it does not
    know.

    Raises:
        ImportError: transformers is not installed, or has no ``ExpertsInterface`` (before transformers 5).
    """
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError as e:
        raise ImportError("register_experts_implementation needs transformers 5 or later (its ExpertsInterface, "
                          f"transformers.integrations.moe): {e}") from None
    ExpertsInterface.register(IMPLEMENTATION, experts_forward)
    try:
        from transformers.integrations.finegrained_fp8 import FP8ExpertsInterface
    except ImportError:  # a transformers without fine-grained FP8 experts
        pass
    else:
        FP8ExpertsInterface.register(IMPLEMENTATION, fp8_experts_forward)
    return IMPLEMENTATION


class FusedExpertsForward(BlockPatch):
    """The forward that :func:`fuse_experts` gives an experts module (held by it as ``_fused_swiglu``, as
    :func:`fused_swiglu.patch.base.install` does for MLP blocks): a call with three positional tensors
    ``(hidden_states, top_k_index, top_k_weights)`` (as transformers' MoE blocks call their experts), outside
    fx / jit tracing and autocast to another dtype, runs :func:`fused_swiglu.experts.swiglu_experts` where
    :func:`call_reason` is None and no hooks are registered on ``act_fn`` or for every module; any other call
    runs the module's own forward (the implementation its config selects). With ``backend="cutlass"`` a call
    on anything but a Hopper GPU raises RuntimeError, as :func:`fused_swiglu.swiglu` does.
    """

    more_arguments = True

    def hooks_run(self) -> bool:
        """Whether hooks are registered that the fused forward would skip: on ``act_fn`` (never called), or
        for every module."""
        act = getattr(self.module, "act_fn", None)
        return (isinstance(act, nn.Module) and has_hooks(act)) or global_hooks()

    def __call__(self, *args: Tensor) -> Tensor:
        if len(args) != 3:  # not transformers' call: the module's own forward takes or refuses it
            return self.original(*args)
        hidden_states, top_k_index, top_k_weights = args
        m = self.module
        if self.backend == "cutlass":
            v.require_hopper(hidden_states.device)
        if self.hooks_run() or call_reason(m, hidden_states, top_k_index, top_k_weights) is not None:
            return self.original(hidden_states, top_k_index, top_k_weights)
        if not torch.compiler.is_compiling():
            _cpu_notice(hidden_states.device)
        return swiglu_experts(hidden_states, top_k_index, top_k_weights, m.gate_up_proj, m.down_proj)


def patch_reason(module: nn.Module, accumulation: str = "fast", backend: str = "auto") -> str | None:
    """Why :func:`fuse_experts` leaves the experts module ``module`` as it is (None: it patches it):
    :func:`layout_reason`; weights not bf16 / fp16 or H, I not multiples of 8; ``accumulation="promoted"`` (no
    grouped config accumulates that way yet); ``backend="torch"`` (the fused experts have no PyTorch path on a
    GPU: transformers' own runs them); an instance ``forward`` (another patch) or an accelerate hook; hooks on
    ``act_fn``."""
    reason = layout_reason(module) or _weights_reason(module)
    if reason is not None:
        return reason
    if accumulation == "promoted":
        return "accumulation='promoted': the grouped kernel has no config with promoted accumulation yet"
    if backend == "torch":
        return "backend='torch': routed experts keep transformers' own experts code"
    if "forward" in vars(module):
        return "it has an instance forward (another patch)"
    if hasattr(module, "_hf_hook"):
        return "it carries an accelerate hook (_hf_hook)"
    act = module.act_fn
    if isinstance(act, nn.Module) and has_hooks(act):
        return "act_fn has hooks"
    return None


def fuse_experts(module: nn.Module, what: str, accumulation: str = "fast", backend: str = "auto") -> str | None:
    """Patch the experts module ``module`` (``what``: how :func:`fused_swiglu.patch.base.experts_reason` describes
    it) with :class:`FusedExpertsForward`, or leave it as it is: None when patched, else ``what`` and the
    reason (:func:`patch_reason`), for :func:`fused_swiglu.fuse_swiglu_mlps`'s warning. ``accumulation`` and
    ``backend`` as :func:`fused_swiglu.fuse_swiglu_mlps` takes them (checked there)."""
    reason = patch_reason(module, accumulation, backend)
    if reason is not None:
        return f"{what}: {reason}"
    install(module, FusedExpertsForward(module, backend))
    return None
