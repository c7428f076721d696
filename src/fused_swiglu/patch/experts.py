"""The experts body of the model patch: a routed experts module of transformers 5 (one module of 3-D weights,
``gate_up_proj`` ``(E, 2I, H)`` and ``down_proj`` ``(E, H, I)``, whose class carries
``@use_experts_implementation``) takes a patched class whose forward runs
:func:`fused_swiglu.experts.swiglu_experts` (:class:`FusedExpertsForward`, on :class:`~.base.BlockPatch`), installed
by :func:`fuse_experts` from :func:`fused_swiglu.fuse_swiglu_mlps`; :func:`fused_swiglu.unfuse_swiglu_mlps`
restores the class.

The recognisers it shares with transformers' experts implementation ``"fused_swiglu"``
(:mod:`fused_swiglu.hf_experts`) live here too: whether a module holds experts the fused forward computes
(:func:`layout_reason`: gate rows then up rows, not transposed, no bias, no post-expert norm, the default gate
with a SiLU ``act_fn``), whether the fused forward runs a given call (:func:`call_reason`), and the one warning
per process that the experts run the grouped operator's PyTorch kernel on the CPU (:func:`cpu_notice`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import _validate as v
from ..experts import INDEX_DTYPES, swiglu_experts
from .base import BlockPatch, act_reason, global_hooks, has_hooks, install

__all__ = ["FusedExpertsForward", "call_reason", "cpu_notice", "fuse_experts", "layout_reason", "patch_reason"]

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
    if (reason := act_reason(module)) is not None:
        return reason
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
        return ("autograd records the call (grad mode on and an input or weight requiring grad): training keeps "
                "transformers' experts path (the fused backward recomputes the gate and up products and is not "
                "measured against it)")
    if device.type == "cuda":
        why = v.hopper_status(device)
        if why is not None:
            return why
        if w.shape[2] % v.ALIGN or (w.shape[1] // 2) % v.ALIGN:
            return f"gate_up_proj is {tuple(w.shape)}; the kernels need I and H to be multiples of {v.ALIGN}"
    elif device.type != "cpu":
        return f"its tensors are on {device}, neither a CUDA device nor the CPU"
    return None


def cpu_notice(device: torch.device) -> None:
    """One warning per process that the experts run the grouped operator's PyTorch kernel (the CPU)."""
    if device.type == "cpu":
        v.resolve_backend("auto", device, stacklevel=None)


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
    config = ""  # the grouped operator's config argument: "" (fast accumulation) or "promoted"

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
            cpu_notice(hidden_states.device)
        return swiglu_experts(hidden_states, top_k_index, top_k_weights, m.gate_up_proj, m.down_proj,
                              config=self.config)


def patch_reason(module: nn.Module, accumulation: str = "fast", backend: str = "auto") -> str | None:
    """Why :func:`fuse_experts` leaves the experts module ``module`` as it is (None: it patches it):
    :func:`layout_reason`; weights not bf16 / fp16 or H, I not multiples of 8; ``backend="torch"`` (the fused
    experts have no PyTorch path on a GPU: transformers' own runs them); an instance ``forward`` (another patch)
    or an accelerate hook; hooks on ``act_fn``. ``accumulation`` does not decide: the grouped kernel has both."""
    reason = layout_reason(module) or _weights_reason(module)
    if reason is not None:
        return reason
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
    patch = FusedExpertsForward(module, backend)
    patch.config = "promoted" if accumulation == "promoted" else ""
    install(module, patch)
    return None
