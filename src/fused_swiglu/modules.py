"""Fused SwiGLU inside existing model code: patch the MLP blocks of a loaded model in place.

Hugging Face's Qwen2, Llama and Mistral MLPs (and most SwiGLU MLPs written the same way) compute
``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with three bias-free ``nn.Linear`` layers and a
SiLU ``act_fn``. :func:`fuse_swiglu_mlps` finds such blocks and replaces their ``forward`` with
``down_proj(swiglu(x, gate_proj.weight, up_proj.weight))``: the gate and up products are never
written, and the weights stay where they are (the dual kernel reads them as they are; no copy, the state
dict is unchanged). A patched block keeps its class's name and ``isinstance`` answers: it takes a
subclass of its own class whose ``forward`` calls the patch it holds (``_fused_swiglu``;
:func:`fused_swiglu._blocks.install`). :func:`unfuse_swiglu_mlps` restores the original classes.

Example::

    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", torch_dtype=torch.bfloat16).cuda()
    names = fuse_swiglu_mlps(model)   # ['model.layers.0.mlp', ...]
"""

from __future__ import annotations

import warnings
from functools import partial

import torch
from torch import nn

from . import _validate as v
from . import mlp_ops, ops
from ._blocks import (BlockPatch, act_name, experts_reason, global_hooks, has_hooks, install, installed, is_silu,
                      is_silu_type, uninstall)
from ._verify import (Watch, by_class, plain_attributes, same_attributes, same_attributes_traced, traced_checks,
                      verify)
from ._dispatch import AUTO, below_unfused_check, on_2d, run_op, training_unfused_measured, unfused_predicted_faster
from .configs import ACCUMULATIONS
from .fp8 import modules as fp8_modules
from .functional import swiglu
from .hf_experts import fuse_experts



def _plain_linear(layer: nn.Module) -> bool:
    """``nn.Linear`` or a subclass that keeps its ``forward`` (not a wrapper such as an adapter or a
    quantized layer, whose forward computes something else)."""
    return isinstance(layer, nn.Linear) and type(layer).forward is nn.Linear.forward


_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _has_projections(module: nn.Module) -> bool:
    return all(hasattr(module, name) for name in _PROJECTIONS)


def skip_reason(module: nn.Module) -> str | None:
    """Why ``module`` is not a SwiGLU MLP block the fused forward can run (None: it is one):
    gate_proj/up_proj/down_proj bias-free nn.Linear layers (gate and up plain ``nn.Linear`` or
    subclasses that keep its forward), gate and up of one shape, a SiLU act_fn, and no hooks on
    gate_proj, up_proj or act_fn (the fused forward reads their weights without calling them, so their
    hooks would not run)."""
    if not _has_projections(module):
        return "it has no gate_proj, up_proj and down_proj"
    layers = [getattr(module, name) for name in _PROJECTIONS]
    if not all(isinstance(layer, nn.Linear) for layer in layers):
        return "gate_proj, up_proj and down_proj are not all nn.Linear"
    if not (_plain_linear(module.gate_proj) and _plain_linear(module.up_proj)):
        return "gate_proj or up_proj overrides nn.Linear.forward"
    if any(layer.bias is not None for layer in layers):
        return "its projections have a bias"
    if module.gate_proj.weight.shape != module.up_proj.weight.shape:
        return "gate_proj and up_proj weights differ in shape"
    act = getattr(module, "act_fn", None)
    if not is_silu(act):
        return f"act_fn is {act_name(act)}, not SiLU (torch.nn.SiLU or transformers' SiLUActivation)"
    if has_hooks(module.gate_proj) or has_hooks(module.up_proj):
        return "gate_proj or up_proj has hooks"
    if has_hooks(act):
        return "act_fn has hooks"
    return None


def _kernel_reason(module: nn.Module) -> str | None:
    """Why the kernels could never run the SwiGLU block ``module`` as its weights are (None: they
    can): weights not bf16/fp16, or I or H not a multiple of 8. Such a block would run its original
    forward at every call."""
    w = module.gate_proj.weight
    if w.dtype not in v.DTYPES:
        return (f"its weights are {w.dtype}; the kernels take torch.bfloat16 or torch.float16 (convert the "
                "model before patching)")
    I, H = w.shape
    if I % v.ALIGN or H % v.ALIGN:
        return f"gate_proj.weight is ({I}, {H}); the kernels need I and H to be multiples of {v.ALIGN}"
    return None


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


class FusedSwiGLUForward(BlockPatch):
    """The forward that :func:`fuse_swiglu_mlps` gives a 16-bit MLP block (:class:`fused_swiglu._blocks.
    BlockPatch` holds the block, backend, previous forward and original class): the patched class's ``forward``
    calls this object, held by the block (instance attribute ``_fused_swiglu``).

    A plain object rather than a closure, so that a patched model survives ``torch.save`` /
    ``torch.load`` and ``copy.deepcopy`` still patched, and :func:`unfuse_swiglu_mlps` still finds it.

    A call takes one branch: the fast path calls the registered operator
    (``fused_swiglu::swiglu_dual``) on ``gate_proj.weight`` and ``up_proj.weight`` and then
    ``down_proj`` as a module, when the block still holds the layers and weights the last full check
    saw (and the same ``act_fn``, no biases), x has their dtype, device kind and H, and neither
    ``gate_proj`` / ``up_proj`` nor every module (global hooks) has forward or backward hooks. Anything else (the first call, hooks added later, a layer, weight or
    ``act_fn`` replaced, a bias set, a dtype or device change) takes the full check again: it runs the original forward where the block no longer qualifies,
    :func:`swiglu` where only the fast path's conditions fail (the packed kernel, a fallback), and
    otherwise re-arms the fast path. Weights updated in place (optimizer steps, ``load_state_dict``)
    are read at every call. On the fast path, a call that autograd records runs the whole block as
    ``fused_swiglu::mlp_forward`` instead (:func:`fused_swiglu.mlp_ops.mlp`), when the full check also armed ``down_proj`` (a plain
    bias-free ``nn.Linear`` of shape ``(H, I)``, not ``recompute``, fast accumulation) and it is still
    that layer, with that weight, no bias and no hooks. Under torch.compile a call is traced by
    :func:`_traced` instead, which takes the same decisions from the block's layers alone and neither
    reads nor sets the arming state, so a compiled patched block carries no more guards than the stock one.

    Attributes (besides :class:`fused_swiglu._blocks.BlockPatch`'s):
        kernel, accumulation: passed to :func:`swiglu` with the backend.
        recompute: never run the whole-block operator.
    """

    def __init__(self, module: nn.Module, kernel: str, accumulation: str, backend: str, previous=None,
                 recompute: bool = False):
        super().__init__(module, backend, previous)
        self.kernel, self.accumulation, self.recompute = kernel, accumulation, recompute
        self.config = AUTO[accumulation]
        # what a traced call decides from (_traced): whether it may call the dual operator directly on a
        # Hopper GPU / on the CPU, and whether autograd-recorded calls may run the whole-block operator
        self.direct_cuda = kernel != "packed" and backend != "torch"
        self.direct_cpu = kernel != "packed" and backend != "cutlass"
        self.whole_block = not recompute and accumulation == "fast"
        self._disarm()

    # what the fast path was last checked for, unarmed: None never matches
    _UNARMED = dict(gate=None, up=None, w_gate=None, w_up=None, dtype=None, act=None, on_cuda=False, down=None,
                    w_down=None)

    def _disarm(self) -> None:
        # one attribute at a time: torch.compile traces this (the first call of a compiled model),
        # and Dynamo before PyTorch 2.13 cannot trace __dict__.update
        self.gate = self.up = self.w_gate = self.w_up = self.dtype = self.act = None
        self.down = self.w_down = None
        self.on_cuda = False

    def __getstate__(self):
        return {**self.__dict__, **self._UNARMED}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return _traced(self, x)
        m = self.module
        g, u = m.gate_proj, m.up_proj
        if (
            g is self.gate and u is self.up and g.weight is self.w_gate and u.weight is self.w_up
            and x.dtype is self.dtype and self.w_gate.dtype is self.dtype and x.is_cuda is self.on_cuda
            and x.shape[-1] == self.w_gate.shape[1]
            and g.bias is None and u.bias is None and m.act_fn is self.act and not self.hooks_run()
        ):
            return self._armed(x)
        return self._checked(x)

    def _armed(self, x: torch.Tensor) -> torch.Tensor:
        """The fast path: the whole-block operator when autograd records and ``down_proj`` is still the
        plain bias-free, hook-free layer it was armed with; else the up-projection kernel and
        ``down_proj`` as a module. Where the GPU's data measured the fused step slower (a training call
        of that size, :func:`fused_swiglu.configs.training_unfused`) or predicts the unfused path faster
        (an inference call), the block's own forward."""
        m, d = self.module, self.down
        if torch.is_grad_enabled() and (x.requires_grad or self.w_gate.requires_grad or self.w_up.requires_grad
                                        or (d is not None and d.weight.requires_grad)):
            if training_unfused_measured(x):
                return self.original(x)
            if d is not None and m.down_proj is d and d.weight is self.w_down and d.bias is None and not has_hooks(d):
                return self._whole_block(x)
        if not below_unfused_check(x) and self._unfused_faster(x):
            return self.original(x)
        return m.down_proj(self._fused(x))

    def _unfused_faster(self, x: torch.Tensor) -> bool:
        """Whether the choice's data predicts the block's own (unfused) forward faster than the fused kernel
        for this call (:func:`fused_swiglu._dispatch.unfused_predicted_faster`)."""
        return unfused_predicted_faster(self.kernel, x, self.w_gate.shape[0], self.accumulation)

    def _fused(self, x: torch.Tensor) -> torch.Tensor:
        return run_op(ops.swiglu_dual, x, self.w_gate, self.w_up, self.config)

    def _whole_block(self, x: torch.Tensor) -> torch.Tensor:
        """The training path: gate, up and down in the whole-MLP operator (pre-activations stored)."""
        return on_2d(mlp_ops.mlp, x, self.w_gate, self.w_up, self.w_down)

    def _checked(self, x: torch.Tensor) -> torch.Tensor:
        """The full check, and the call it decides on."""
        self._disarm()
        m = self.module
        if skip_reason(m) is not None or global_hooks():  # no SwiGLU block now, or hooks to run
            return self.original(x)
        wg, wu = m.gate_proj.weight, m.up_proj.weight
        usable = (
            x.dtype in v.DTYPES
            and wg.dtype == x.dtype and wu.dtype == x.dtype
            and wg.device == x.device and wu.device == x.device
            and wg.shape[0] % v.ALIGN == 0 and wg.shape[1] % v.ALIGN == 0
        )
        if not usable:  # fp32 models, mixed dtypes or devices, H or I not a multiple of 8
            return self.original(x)
        if self.kernel != "packed" and x.dim() > 0 and x.shape[-1] == wg.shape[1] and self._fast_path_runs(x.device):
            self.gate, self.up, self.w_gate, self.w_up = m.gate_proj, m.up_proj, wg, wu
            self.dtype, self.on_cuda, self.act = x.dtype, x.is_cuda, m.act_fn
            d = m.down_proj
            if (
                not self.recompute and self.accumulation == "fast" and _plain_linear(d) and d.bias is None
                and tuple(d.weight.shape) == (wg.shape[1], wg.shape[0])
                and d.weight.dtype == x.dtype and d.weight.device == x.device
            ):
                self.down, self.w_down = d, d.weight
            return self._armed(x)
        y = swiglu(x, wg, wu, kernel=self.kernel, accumulation=self.accumulation, backend=self.backend)
        return m.down_proj(y)

    def _fast_path_runs(self, device: torch.device) -> bool:
        """Whether the operator computes what :func:`swiglu` would with this backend on ``device``:
        its CUDA kernel on a Hopper GPU (backend auto or cutlass), its CPU kernel (the fp32
        fallback) on the CPU (auto or torch; auto warns once there, as :func:`swiglu` does)."""
        if device.type == "cuda":
            return self.backend != "torch" and v.hopper_status(device) is None
        if device.type == "cpu" and self.backend != "cutlass":
            if self.backend == "auto":
                v.resolve_backend("auto", device, stacklevel=None)
            return True
        return False


class ProbedSwiGLUForward(FusedSwiGLUForward):
    """:class:`FusedSwiGLUForward` for a block whose forward was verified by the probe, not by its class
    (:func:`fused_swiglu._verify.verify`): the probe ran with the block's plain Python attributes as they
    were at patching (``plain``, :func:`fused_swiglu._verify.plain_attributes`), so a call where one has
    changed runs the block's own forward (one RuntimeWarning per block class). Under torch.compile each
    saved attribute is read, and so guarded, as the stock forward that reads it would be (numbers, strings
    and flags by value, other objects by identity); a block holding containers or tensors runs its own
    forward under torch.compile."""

    def __init__(self, module: nn.Module, *args, **kwargs):
        super().__init__(module, *args, **kwargs)
        self.plain = plain_attributes(module)
        self.watch = Watch(module, self.plain)
        # what a traced call compares (numbers, strings, flags by value, other objects by identity, each
        # guarded); None: a block with containers or tensors runs its own forward under torch.compile
        self.checks = traced_checks(module, self.plain)

    def __getstate__(self):  # the watch and checks hold the block's objects: made again where it is rebuilt
        return {**super().__getstate__(), "watch": None, "checks": None}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            if self.checks is None or not same_attributes_traced(self.module, self.checks):
                return self.original(x)
            return _traced(self, x)
        if self.watch is None:  # after a copy or a load: watched from here if it still is as probed
            self.watch = Watch(self.module) if same_attributes(self.module, self.plain, portable=True) else False
            self.plain = self.watch.saved if self.watch else self.plain
            self.checks = traced_checks(self.module, self.plain) if self.watch else None
        if not (self.watch and self.watch.same()):
            v.warn_once(f"plain-attributes:{self.base.__module__}.{self.base.__qualname__}", (
                f"fused_swiglu: a plain attribute of a patched {self.base.__qualname__} block changed after "
                "fuse_swiglu_mlps checked its forward; such a block runs its own forward from then on "
                "(unfuse_swiglu_mlps and fuse_swiglu_mlps check it again)."), stacklevel=None)
            return self.original(x)
        return super().__call__(x)


@torch.compiler.assume_constant_result
def _plain_linear_types(*classes: type) -> bool:
    """Whether each class is ``nn.Linear`` or a subclass that keeps its forward. Assumed constant under
    torch.compile (as :func:`_swiglu_types`)."""
    return all(issubclass(c, nn.Linear) and c.forward is nn.Linear.forward for c in classes)


@torch.compiler.assume_constant_result
def _swiglu_types(gate: type, up: type, act: type) -> bool:
    """Whether a block with layers of these classes is one the fused forward replaces: gate and up
    plain linear layers, a SiLU act_fn. Assumed constant under torch.compile: the layers' own type
    guards re-trace a call whose classes change, so reading the classes here adds no guard."""
    return _plain_linear_types(gate, up) and is_silu_type(act)


def _traced(patch: FusedSwiGLUForward, x: torch.Tensor) -> torch.Tensor:
    """A patched block's call as torch.compile traces it (the compiled code runs what this returns).

    It makes the full check's decisions from what the stock forward's trace reads anyway (the layers,
    their weights, biases and hooks, the act_fn's type and hooks) and from two attributes of the patch
    (its module and config), so that Dynamo guards no more per block than for the stock block, and it
    writes nothing: the eager path's arming state is neither read nor set (an attribute set in traced
    code is replayed after every call of the compiled code). Guards re-trace it when any of what it
    read changes (a hook added, a layer or weight replaced, a dtype changed).
    """
    m = patch.module
    g, u, act = m.gate_proj, m.up_proj, m.act_fn
    if not (
        _swiglu_types(type(g), type(u), type(act)) and g.bias is None and u.bias is None
        and not (has_hooks(g) or has_hooks(u) or has_hooks(act) or global_hooks())
    ):
        return patch.original(x)
    wg, wu = g.weight, u.weight
    if not (
        x.dtype in v.DTYPES and wg.dtype == x.dtype and wu.dtype == x.dtype and wg.shape == wu.shape
        and x.dim() > 0 and x.shape[-1] == wg.shape[1] and wg.device == x.device and wu.device == x.device
        and wg.shape[0] % v.ALIGN == 0 and wg.shape[1] % v.ALIGN == 0
    ):
        return patch.original(x)
    direct = patch.direct_cuda and v.hopper_status(x.device) is None if x.is_cuda else patch.direct_cpu
    if not direct:
        return m.down_proj(swiglu(x, wg, wu, kernel=patch.kernel, accumulation=patch.accumulation,
                                  backend=patch.backend))
    if torch.is_grad_enabled() and (x.requires_grad or wg.requires_grad or wu.requires_grad):
        d = m.down_proj
        if (
            patch.whole_block and _plain_linear_types(type(d))
            and d.bias is None and not has_hooks(d) and d.weight.shape == (wg.shape[1], wg.shape[0])
            and d.weight.dtype == x.dtype and d.weight.device == x.device
        ):
            return on_2d(mlp_ops.mlp, x, wg, wu, d.weight)
    return m.down_proj(run_op(ops.swiglu_dual, x, wg, wu, patch.config))


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
    Hugging Face MLPs of :data:`fused_swiglu._verify.KNOWN_FORWARDS` (Llama, Mistral, Qwen2, Qwen3, the
    dense and shared-expert MLPs of Qwen2-MoE, Qwen3-MoE and DeepSeek-V3, ...), else checked by a probe
    (:func:`fused_swiglu._verify.probe`): a block with no parameters, buffers or tensor attributes
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
    multiples of 8; :func:`fused_swiglu.hf_experts.patch_reason`) are patched to run
    :func:`fused_swiglu.experts.swiglu_experts` (:class:`fused_swiglu.hf_experts.FusedExpertsForward`:
    inference only; a call it cannot run, one that autograd records included, runs the module's own forward,
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
    are patched too (:mod:`fused_swiglu.fp8.modules`): x is quantized once per 1 x 128 group and gate
    and up run as one block-scaled FP8 GEMM with SwiGLU in its epilogue (bf16 y), then ``down_proj``
    (the model's own FP8 layer). The block keeps a packed copy of its gate/up weights (2 I H bytes),
    kept in step with them as :class:`fused_swiglu.fp8.modules.FusedFP8SwiGLUForward` says (writes
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
        TypeError: ``model`` is not an ``nn.Module``.
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
        if not _has_projections(module):
            continue
        fp8 = fp8_modules.is_fp8_block(module)
        previous = vars(module).get("forward")  # an instance forward set by someone else, or None
        reason = block_reason(module, previous)
        if reason is not None:
            skipped.append((name, reason))
            continue
        if fp8:
            install(module, fp8_modules.FusedFP8SwiGLUForward(module, backend, previous))
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
    (:func:`fused_swiglu._verify.verify`: known by its class, else probed). ``previous``: the block's
    instance ``forward``, if it has one (it is what the block runs, so it is what is probed)."""
    fp8 = fp8_modules.is_fp8_block(module)
    reason = fp8_modules.skip_reason(module) if fp8 else (skip_reason(module) or _kernel_reason(module))
    if reason is None and hasattr(module, "_hf_hook"):
        reason = "it carries an accelerate hook (_hf_hook)"
    if reason is None:
        reason = forward_reason(module, previous, torch.bfloat16 if fp8 else module.gate_proj.weight.dtype)
    return reason


def forward_reason(module: nn.Module, previous=None, dtype: torch.dtype | None = None) -> str | None:
    """Why the forward that the block ``module`` runs (``previous``, its instance forward, if any; else
    its class's) may not be taken for ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (None: it may);
    :func:`fused_swiglu._verify.verify` with activations of ``dtype`` (default: gate_proj's weight dtype)."""
    forward = previous if previous is not None else partial(type(module).forward, module)
    return verify(module, forward, previous, dtype or module.gate_proj.weight.dtype)


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
