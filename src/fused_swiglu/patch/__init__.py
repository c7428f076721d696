"""Fused SwiGLU inside existing model code: patch the MLP blocks of a loaded model in place.

Hugging Face's Qwen2, Llama and Mistral MLPs (and most SwiGLU MLPs written the same way) compute
``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with three bias-free ``nn.Linear`` layers and a
SiLU ``act_fn``. :func:`fuse_swiglu_mlps` finds such blocks and replaces their ``forward`` with
``down_proj(swiglu(x, gate_proj.weight, up_proj.weight))``: the gate and up products are never
written, and the weights stay where they are (the dual kernel reads them as they are; no copy, the state
dict is unchanged). A patched block keeps its class's name and ``isinstance`` answers: it takes a
subclass of its own class whose ``forward`` calls the patch it holds (``_fused_swiglu``;
:func:`fused_swiglu.patch.base.install`). :func:`unfuse_swiglu_mlps` restores the original classes.

Example::

    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", torch_dtype=torch.bfloat16).cuda()
    names = fuse_swiglu_mlps(model)   # ['model.layers.0.mlp', ...]

The package:

* :mod:`.base`: what the bodies rely on: recognising SiLU, the hooks a fused forward would skip,
  recognising mixture-of-experts experts, the patched class a block takes (:func:`~.base.install`) and
  :class:`~.base.BlockPatch`, the base of every body.
* :mod:`.dense`: the 16-bit body (:class:`~.dense.FusedSwiGLUForward`), bf16 / fp16 blocks.
* :mod:`.fp8`: the FP8 body (:class:`~.fp8.FusedFP8SwiGLUForward`), transformers' fine-grained FP8 blocks.
* :mod:`.experts`: the experts body (:class:`~.experts.FusedExpertsForward`), transformers 5's routed experts
  modules, and the recognisers it shares with the experts implementation ``"fused_swiglu"``
  (:mod:`fused_swiglu.hf_experts`).
* :mod:`.verify`: whether a block's own forward computes SwiGLU (by its class, else by a probe).
"""

from __future__ import annotations

import warnings
from functools import partial

import torch
from torch import nn

from .. import _validate as v
from ..configs import ACCUMULATIONS
from . import fp8 as fp8_body
from . import verify
from .base import BlockPatch, experts_reason, has_projections, install, installed, uninstall
from .dense import FusedSwiGLUForward, ProbedSwiGLUForward, kernel_reason, skip_reason
from .experts import fuse_experts
from .fp8 import FusedFP8SwiGLUForward
from .verify import by_class

__all__ = ["fuse_swiglu_mlps", "unfuse_swiglu_mlps", "block_reason", "forward_reason", "skip_reason", "readable",
           "ROOT_NAME", "EXPERTS_NOTE", "FusedSwiGLUForward", "ProbedSwiGLUForward", "FusedFP8SwiGLUForward"]


ROOT_NAME = "(the model itself)"  # how the names this module returns and warns with name the root module


def readable(name: str) -> str:
    """A qualified module name as this module reports it: the root module (``""``) as :data:`ROOT_NAME`."""
    return name or ROOT_NAME


def _grouped(entries: list[tuple[str, str]]) -> str:
    """``'a', 'b', 'c' and 4 more: reason; ...``: names (three per reason, then a count) by reason."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in entries:
        by_reason.setdefault(reason, []).append(repr(readable(name)))
    parts = []
    for reason, names in by_reason.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        parts.append(f"{shown}: {reason}")
    return "; ".join(parts)


EXPERTS_NOTE = ("routed experts left unfused run the model's own experts code, the implementation its config "
                "selects (shared experts and dense MLP layers are patched as dense blocks)")


def _unfused_warning(skipped: list[tuple[str, str]], experts: list[tuple[str, str]], patched: int,
                     already: int) -> str:
    """One message naming the blocks left unfused, grouped by reason, and the experts modules left as
    they are."""
    before = f" ({already} patched already)" if already else ""
    if skipped:
        if not patched and not already:
            head = (f"fuse_swiglu_mlps patched no block: {len(skipped)} block(s) have gate_proj, up_proj and "
                    "down_proj, none of which could be patched")
        else:
            head = (f"fuse_swiglu_mlps patched {patched} block(s){before} and left {len(skipped)} unfused (they "
                    "run their original forward)")
        message = f"{head}; {_grouped(skipped)}"
    else:
        message = f"fuse_swiglu_mlps patched {patched} block(s){before}"
    if experts:
        message += (f". {len(experts)} mixture-of-experts experts module(s) left unfused: {_grouped(experts)}. "
                    f"{EXPERTS_NOTE[0].upper()}{EXPERTS_NOTE[1:]}")
    return message


def _patch(module: nn.Module) -> BlockPatch | None:
    p = installed(module)
    return p if isinstance(p, BlockPatch) else None


def fuse_swiglu_mlps(
    model: nn.Module, *, kernel: str = "dual", accumulation: str = "fast", backend: str = "auto",
    recompute: bool = False, experts: bool = True,
) -> list[str]:
    """Run every SwiGLU MLP block of ``model`` through :func:`fused_swiglu.swiglu`, in place.

    A submodule is patched when it has ``gate_proj``, ``up_proj`` and ``down_proj`` attributes that
    are ``nn.Linear`` without bias, gate and up weights of one shape ``(I, H)``, and an ``act_fn``
    that is SiLU: ``torch.nn.SiLU`` (or a subclass that keeps its ``forward``) or Hugging Face's
    ``SiLUActivation``, whichever ``ACT2FN["silu"]`` returns in the installed transformers, and whose
    own forward computes ``down_proj(silu(gate_proj(x)) * up_proj(x))``: known by its class for the
    Hugging Face MLPs of :data:`fused_swiglu.patch.verify.KNOWN_FORWARDS` (Llama, Mistral, Qwen2, Qwen3, the
    dense and shared-expert MLPs of Qwen2-MoE, Qwen3-MoE and DeepSeek-V3, ...), else checked by a probe
    (:func:`fused_swiglu.patch.verify.probe`): a block with no parameters, buffers or tensor attributes
    beyond its three projections has its forward run on a few small random inputs in eval and in
    training mode, which must match to within rounding, with no systematic scale, and be deterministic
    (no dropout); global random states and ``training`` flags are restored, and hooks on ``down_proj``
    see the probe's calls. A probed block whose plain Python attributes (a flag, a scale) change after
    patching runs its own forward from then on (one RuntimeWarning).
    A block with these attributes whose forward computes something else (a residual, a scale, gate and
    up swapped, another activation, dropout), or reads parameters of its own (a LayerScale), keeps its
    forward and is named in the warning; so is a block of another class on the meta device (nothing to
    probe). A probe sees only its inputs: a forward that departs from SwiGLU on other inputs alone is
    not caught. A patched block's call with one positional tensor runs the fused forward; any other call
    (keywords, more arguments, no tensor), and calls under ``torch.fx`` / ``torch.jit.trace`` tracing or
    under an autocast to another dtype than x's, run the block's own forward. The patched forward computes
    ``down_proj(swiglu(x, gate_proj.weight, up_proj.weight))``. Mixture-of-experts layers: with
    ``experts=True`` the routed experts modules of transformers 5 (3-D ``gate_up_proj`` ``(E, 2I, H)``, gate
    rows then up rows, and ``down_proj`` ``(E, H, I)``; Qwen2-MoE, Qwen3-MoE, Mixtral, DeepSeek-V3 ...)
    whose layout the grouped kernel reads (no bias, SiLU, the default gate, bf16 / fp16 weights, I and H
    multiples of 8; :func:`fused_swiglu.patch.experts.patch_reason`) are patched to run
    :func:`fused_swiglu.experts.swiglu_experts` (:class:`fused_swiglu.patch.experts.FusedExpertsForward`:
    ``accumulation`` as given, ``kernel`` does not apply; inference only; a call it cannot run, one that autograd records included, runs the module's own forward,
    whatever implementation the config selects); other experts modules (gpt-oss's, FP8 experts, experts
    stored another way) are named in the warning with the reason and run their own code; shared experts and
    dense MLP layers are patched as dense blocks. Blocks the
    kernels could never run as they are (weights not bf16/fp16, as in an fp32 model; I or H not a
    multiple of 8) are left unpatched; convert a model before patching it. At call time, inputs
    the kernels cannot take (x not of the weights' dtype, weights moved to another dtype or device)
    run the original forward instead. On a CPU or a non-Hopper GPU, ``backend="auto"``
    runs :func:`swiglu`'s PyTorch fallback (fp32 products, one rounding; one warning per process).
    Blocks already patched are left as they are, and so are blocks carrying an accelerate hook
    (``_hf_hook``: a ``device_map`` that offloads or splits the model), whose forward moves tensors
    between devices, blocks whose ``gate_proj`` or ``up_proj`` overrides ``nn.Linear.forward`` (an
    adapter or quantized wrapper), and blocks whose ``gate_proj``, ``up_proj`` or ``act_fn`` has forward,
    forward-pre, backward or backward-pre hooks: the fused forward does not call them, so such hooks
    would not run (while hooks for every module are registered, a
    patched block runs its original forward);
    ``down_proj`` is still called as a module. Whether a block qualifies is decided when patching; a
    call then checks in one branch that nothing it relies on changed (:class:`FusedSwiGLUForward`):
    a block changed after patching (hooks on ``gate_proj`` / ``up_proj`` / ``act_fn``, a bias, another
    ``act_fn``, a replaced layer or weight) runs its original forward; weights updated in place are
    read at every call. The result is differentiable. When autograd records a call (grad mode on and
    x or a weight requiring grad) and ``down_proj`` is a plain bias-free ``nn.Linear`` without hooks
    of shape ``(H, I)``, the whole block (gate, up and down) runs as :func:`fused_swiglu.swiglu_mlp`:
    the forward also stores the gate and up pre-activations (``(..., 2I)`` in x's dtype, kept for the
    backward) and the backward fuses the SwiGLU gradient into the down projection's data-gradient
    GEMM; otherwise (inference, ``recompute=True``, ``accumulation="promoted"``) the backward
    recomputes the gate and up products (see :func:`swiglu`). A patched model stays patched through ``torch.save`` /
    ``torch.load`` of the whole model and ``copy.deepcopy``.

    Blocks quantized with transformers' fine-grained FP8 (gate_proj and up_proj ``FP8Linear`` with e4m3
    weights, fp32 128 x 128 block scales ``weight_scale_inv`` and dynamic activation scales, no bias)
    are patched too (:mod:`fused_swiglu.patch.fp8`): x is quantized once per 1 x 128 group and gate
    and up run as one block-scaled FP8 GEMM with SwiGLU in its epilogue (bf16 y), then ``down_proj``
    (the model's own FP8 layer). The block keeps a packed copy of its gate/up weights (2 I H bytes),
    kept in step with them as :class:`fused_swiglu.patch.fp8.FusedFP8SwiGLUForward` says (writes
    through ``.data`` are not seen). ``kernel``, ``accumulation`` and ``recompute`` do not apply to
    them; a call with x not bf16, on a GPU other than Hopper (``backend="cutlass"``: an error), or
    recorded by autograd runs the original forward, and so does a block changed after patching.

    Args:
        model: any ``nn.Module``; it is modified in place (the patched blocks' classes).
        kernel: ``"dual"`` (default; reads the weights as they are), ``"auto"`` (the same) or
            ``"packed"`` (packs both weights on every call: a copy of 2·I·H elements per call,
            rarely worth it here).
        accumulation: ``"fast"`` or ``"promoted"``, as in :func:`swiglu`.
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``, as in :func:`swiglu`.
        recompute: True: under autograd, store nothing extra and recompute the gate and up
            products in the backward (less memory, more time; supports ``create_graph=True``).
        experts: True (default): patch the routed experts modules the grouped kernel can run, as above;
            False: leave every experts module as it is (named in the warning).

    Returns:
        The qualified names (``model.named_modules()``) of the blocks patched by this call; the root
        module, when it is itself a block, as ``"(the model itself)"``.

    Warns:
        UserWarning: once per call, when it leaves blocks that have ``gate_proj``, ``up_proj`` and
        ``down_proj`` unpatched: their names (three per reason, then a count) and why, e.g.
        ``'model.layers.0.mlp', ... and 25 more: act_fn is GELUTanh, not SiLU``, and the
        mixture-of-experts experts modules it left as they are; or, when nothing is or was patched
        and no submodule has those attributes, that it found no such block.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``; kernel, accumulation or backend not a str.
        ValueError: unknown kernel, accumulation or backend.
        TypeError: recompute or experts is not a bool.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    v.check_bool("recompute", recompute)
    v.check_bool("experts", experts)
    v.check_choice("kernel", kernel, v.KERNELS)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    v.check_choice("backend", backend, v.BACKENDS)
    patched, already, skipped, left_experts = [], 0, [], []
    for name, module in model.named_modules():
        if _patch(module) is not None:
            already += 1
            continue
        what = experts_reason(module, name)
        if what is not None:
            what = fuse_experts(module, what, accumulation, backend) if experts else what
            if what is None:
                patched.append(readable(name))
            else:
                left_experts.append((name, what))
            continue
        if not has_projections(module):
            continue
        fp8 = fp8_body.is_fp8_block(module)
        previous = vars(module).get("forward")  # an instance forward set by someone else, or None
        reason = block_reason(module, previous)
        if reason is not None:
            skipped.append((name, reason))
            continue
        if fp8:
            install(module, fp8_body.FusedFP8SwiGLUForward(module, backend, previous))
        else:
            kind = FusedSwiGLUForward if by_class(module, previous) else ProbedSwiGLUForward
            patch = kind(module, kernel, accumulation, backend, previous, recompute)
            install(module, patch)
        patched.append(readable(name))
    if skipped or left_experts:
        warnings.warn(_unfused_warning(skipped, left_experts, len(patched), already), UserWarning, stacklevel=2)
    elif not patched and not already:
        warnings.warn("fuse_swiglu_mlps patched no block: no submodule has gate_proj, up_proj and down_proj "
                      "attributes (Hugging Face's Llama / Qwen2 / Mistral MLP layout)", UserWarning, stacklevel=2)
    return patched


def block_reason(module: nn.Module, previous=None) -> str | None:
    """Why the block ``module`` (it has gate_proj, up_proj and down_proj) may not be replaced by a
    fused forward (None: it may): :func:`skip_reason` and the kernels' dtype and alignment rules (or
    the FP8 block's rules), an accelerate hook, and then what its forward computes
    (:func:`fused_swiglu.patch.verify.verify`: known by its class, else probed). ``previous``: the block's
    instance ``forward``, if it has one (it is what the block runs, so it is what is probed)."""
    fp8 = fp8_body.is_fp8_block(module)
    reason = fp8_body.skip_reason(module) if fp8 else (skip_reason(module) or kernel_reason(module))
    if reason is None and hasattr(module, "_hf_hook"):
        reason = "it carries an accelerate hook (_hf_hook)"
    if reason is None:
        reason = forward_reason(module, previous, torch.bfloat16 if fp8 else module.gate_proj.weight.dtype)
    return reason


def forward_reason(module: nn.Module, previous=None, dtype: torch.dtype | None = None) -> str | None:
    """Why the forward that the block ``module`` runs (``previous``, its instance forward, if any; else
    its class's) may not be taken for ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (None: it may);
    :func:`fused_swiglu.patch.verify.verify` with activations of ``dtype`` (default: gate_proj's weight dtype)."""
    forward = previous if previous is not None else partial(type(module).forward, module)
    return verify.verify(module, forward, previous, dtype or module.gate_proj.weight.dtype)


def unfuse_swiglu_mlps(model: nn.Module) -> list[str]:
    """Undo :func:`fuse_swiglu_mlps`: restore the original forward of every patched block.

    Returns:
        The qualified names of the blocks restored (the root module as ``"(the model itself)"``).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    restored = []
    for name, module in model.named_modules():
        patch = _patch(module)
        if patch is None:
            continue
        uninstall(module, patch)
        restored.append(readable(name))
    return restored
