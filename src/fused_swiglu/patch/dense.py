"""The model patch's 16-bit body: which bf16 / fp16 SwiGLU blocks it can run (:func:`skip_reason`,
:func:`kernel_reason`) and the forward a patched block calls (:class:`FusedSwiGLUForward`, and
:class:`ProbedSwiGLUForward` for a block verified by a probe; :func:`_traced` under torch.compile).

:func:`fused_swiglu.fuse_swiglu_mlps` (:mod:`fused_swiglu.patch`) chooses this body for a block whose
gate_proj and up_proj are 16-bit ``nn.Linear`` layers, and :mod:`fused_swiglu.patch.fp8`'s for
transformers' fine-grained FP8 ones; :mod:`fused_swiglu.patch.base` holds what both rely on.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _validate as v
from .. import mlp_ops, ops
from .._dispatch import AUTO, below_unfused_check, on_2d, run_op, training_unfused_measured, unfused_predicted_faster
from ..functional import swiglu
from .base import PROJECTIONS, BlockPatch, act_reason, global_hooks, has_hooks, has_projections, is_silu_type
from .verify import Watch, plain_attributes, same_attributes, same_attributes_traced, traced_checks


def _plain_linear(layer: nn.Module) -> bool:
    """``nn.Linear`` or a subclass that keeps its ``forward`` (not a wrapper such as an adapter or a
    quantized layer, whose forward computes something else)."""
    return isinstance(layer, nn.Linear) and type(layer).forward is nn.Linear.forward


def skip_reason(module: nn.Module) -> str | None:
    """Why ``module`` is not a SwiGLU MLP block the fused forward can run (None: it is one):
    gate_proj/up_proj/down_proj bias-free nn.Linear layers (gate and up plain ``nn.Linear`` or
    subclasses that keep its forward), gate and up of one shape, a SiLU act_fn, and no hooks on
    gate_proj, up_proj or act_fn (the fused forward reads their weights without calling them, so their
    hooks would not run)."""
    if not has_projections(module):
        return "it has no gate_proj, up_proj and down_proj"
    layers = [getattr(module, name) for name in PROJECTIONS]
    if not all(isinstance(layer, nn.Linear) for layer in layers):
        return "gate_proj, up_proj and down_proj are not all nn.Linear"
    if not (_plain_linear(module.gate_proj) and _plain_linear(module.up_proj)):
        return "gate_proj or up_proj overrides nn.Linear.forward"
    if any(layer.bias is not None for layer in layers):
        return "its projections have a bias"
    if module.gate_proj.weight.shape != module.up_proj.weight.shape:
        return "gate_proj and up_proj weights differ in shape"
    if (reason := act_reason(module)) is not None:
        return reason
    if has_hooks(module.gate_proj) or has_hooks(module.up_proj):
        return "gate_proj or up_proj has hooks"
    if has_hooks(module.act_fn):
        return "act_fn has hooks"
    return None


def kernel_reason(module: nn.Module) -> str | None:
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


class FusedSwiGLUForward(BlockPatch):
    """The forward that :func:`fused_swiglu.fuse_swiglu_mlps` gives a 16-bit MLP block
    (:class:`fused_swiglu.patch.base.BlockPatch` holds the block, backend, previous forward and original class):
    the patched class's ``forward`` calls this object, held by the block (instance attribute ``_fused_swiglu``).

    A plain object rather than a closure, so that a patched model survives ``torch.save`` /
    ``torch.load`` and ``copy.deepcopy`` still patched, and :func:`fused_swiglu.unfuse_swiglu_mlps` still
    finds it.

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

    Attributes (besides :class:`fused_swiglu.patch.base.BlockPatch`'s):
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
    (:func:`fused_swiglu.patch.verify.verify`): the probe ran with the block's plain Python attributes as they
    were at patching (``plain``, :func:`fused_swiglu.patch.verify.plain_attributes`), so a call where one has
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
