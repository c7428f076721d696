"""transformers' mixture-of-experts experts through :func:`fused_swiglu.experts.swiglu_experts`: an experts
implementation named ``"fused_swiglu"`` (:func:`register_experts_implementation`). The patch that
:func:`fused_swiglu.fuse_swiglu_mlps` gives an experts module (:func:`fuse_experts`) and the recognisers both
use (:func:`layout_reason`, :func:`call_reason`) are the model patch's experts body,
:mod:`fused_swiglu.patch.experts`; this module imports them from there (its names here are the same objects).

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
expert parallelism, and no autograd (a call that autograd records, grad mode on and the hidden states, the
routing weights or the experts' weights requiring grad, runs transformers' path: the fused backward recomputes
the gate and up products, and is not measured against transformers' training path):

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

from torch import Tensor, nn

from . import _validate as v
from .experts import swiglu_experts
# the recognisers and the experts patch live in the model patch package (fused_swiglu.patch.experts); the patch's
# names are imported from here too
from .patch.experts import FusedExpertsForward, call_reason, cpu_notice, fuse_experts, layout_reason, patch_reason

__all__ = ["IMPLEMENTATION", "FusedExpertsForward", "call_reason", "experts_forward", "fp8_experts_forward",
           "fuse_experts", "layout_reason", "patch_reason", "register_experts_implementation"]

IMPLEMENTATION = "fused_swiglu"  # the experts implementation's name in transformers' ExpertsInterface


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
    cpu_notice(hidden_states.device)
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
