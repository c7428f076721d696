"""How the public functions reach the operators: argument checks and their cache, the fast path's
tables and test, the operator called first with the Python checks only where it raises (:func:`op_first`),
the (..., H) -> (M, H) reshape, and the operator call below the Autograd key.

Used by :mod:`fused_swiglu.functional`, :mod:`fused_swiglu.mlp`, :mod:`fused_swiglu.fp8`,
:mod:`fused_swiglu.patch.dense`, :mod:`fused_swiglu.parallel` and :mod:`fused_swiglu.compile_fusion`; nothing
here is public API.
"""

from __future__ import annotations

import torch

from . import _validate as v
from .configs import ACCUMULATIONS, AUTO_CONFIG, training_unfused, unfused_faster
from .reference import swiglu_eager
from .tuning import SUSTAINED_FROM_M
from .weights import LAYOUTS

# Validated argument signatures -> (I, H, backend to use). Everything the checks read is in the key
# (choices, tensor types, dtypes, devices, x's last dimension, weight shapes); M, strides and
# alignment are not checked here (the ops handle any of them), so one entry serves every batch size.
PLANS: dict[tuple, tuple[int, int, str]] = {}
PLANS_MAX = 1024
# accumulation -> the ops' config argument (the automatic choice for that accumulation)
AUTO = {acc: key for key, acc in AUTO_CONFIG.items()}


# From this many tokens an eager call asks the choice's data whether PyTorch's unfused path is faster
# (configs.unfused_faster; the data's from_m is at least this)
UNFUSED_CHECK_FROM = SUSTAINED_FROM_M


# Tensor types the fast paths take: plain tensors and nn.Parameter (model weights); other subclasses
# (fake and functional tensors under tracing, user subclasses) always go through validation and the
# registered op.
PLAIN = (torch.Tensor, torch.nn.Parameter)
# CUDA device indices on which a full check has found a Hopper GPU
HOPPER: set[int] = set()


def fast_config(table: dict, *choices) -> str | None:
    """The ops' config argument for these choice arguments if they select the fast path, else None
    (other choices, and invalid ones: the full checks name them)."""
    try:
        return table.get(choices)
    except TypeError:  # an unhashable argument
        return None


def check_dual_args(x, w_gate, w_up, kernel, backend, accumulation) -> tuple[int, int, torch.device]:
    """:func:`fused_swiglu.swiglu`'s argument checks; returns (I, H, device)."""
    v.check_choice("kernel", kernel, v.KERNELS)
    v.check_choice("backend", backend, v.BACKENDS)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    v.check_tensors(x=x, w_gate=w_gate, w_up=w_up)
    v.check_dtypes(x=x, w_gate=w_gate, w_up=w_up)
    I, H = v.check_weight_pair(x, w_gate, w_up)
    return I, H, v.check_devices(x=x, w_gate=w_gate, w_up=w_up)


def check_packed_args(x, w_packed, layout, backend, accumulation) -> tuple[int, int, torch.device]:
    """:func:`fused_swiglu.swiglu_packed`'s argument checks; returns (I, H, device)."""
    v.check_choice("layout", layout, LAYOUTS)
    v.check_choice("backend", backend, v.BACKENDS)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    v.check_tensors(x=x, w_packed=w_packed)
    v.check_dtypes(x=x, w_packed=w_packed)
    I, H = v.check_packed(x, w_packed)
    return I, H, v.check_devices(x=x, w_packed=w_packed)


_AUTOCAST_FROM = (torch.float32, torch.float16, torch.bfloat16)


def autocast_cast(*tensors):
    """``tensors`` as an autocast region on the first one's device type casts a matrix product's inputs:
    under ``torch.autocast`` to bf16 / fp16, each float32 / float16 / bfloat16 tensor of another dtype
    cast to that dtype (differentiably), as ``torch.mm``'s are; outside one, or for other dtypes, as
    they are."""
    x = tensors[0]
    if not isinstance(x, torch.Tensor):
        return tensors
    dtype = v.autocast_dtype(x.device.type)
    if dtype not in (torch.bfloat16, torch.float16):
        return tensors
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype in _AUTOCAST_FROM and t.dtype != dtype else t
                 for t in tensors)


def fast_path(x: torch.Tensor) -> bool:
    """Whether a call on ``x`` may take the fast path: an eager call on a plain CUDA tensor of a
    device already checked to be Hopper. The operator checks the rest (the C boundary); if it
    raises, the caller runs its full Python checks, which name the argument and the rule (:func:`op_first`)."""
    return type(x) in PLAIN and x.is_cuda and x.get_device() in HOPPER and not torch.compiler.is_compiling()


def op_first(check, call, *args):
    """``call(*args)`` (an operator call) with the Python argument checks ``check()`` run only where it raises:
    the operator's C++ kernel checks every rule itself (RuntimeError), and ``check()`` then names the argument
    and the rule with the documented TypeError or ValueError. Where the checks find nothing wrong (a CUDA error,
    a library that cannot be built), the operator's exception is raised as it is. Used by the FP8 functions'
    eager CUDA calls (:func:`fused_swiglu.fp8.ops.run_checked`); the 16-bit functions' fast path writes the same
    rule inline, where a closure and an extra frame per call would add to the host time."""
    try:
        return call(*args)
    except Exception:
        check()
        raise


def below_unfused_check(x: torch.Tensor) -> bool:
    """Whether an eager call on x ``(..., H)`` is too small for the choice's data to be asked about the
    unfused path: fewer than :data:`UNFUSED_CHECK_FROM` tokens (or x 0-d)."""
    return x.dim() == 0 or x.numel() < UNFUSED_CHECK_FROM * x.shape[-1]


def _asked(x: torch.Tensor) -> tuple[int, str] | None:
    """(SM count, device name) of x's GPU where its tuned data may be asked about a call on x (x on a CUDA
    device, H > 0, not under torch.compile); else None."""
    if not x.is_cuda or x.shape[-1] == 0 or torch.compiler.is_compiling():
        return None
    from . import _lib

    num_sms, gpu, _ = _lib.target(x.device.index if x.device.index is not None else torch.cuda.current_device())
    return num_sms, gpu


def unfused_predicted_faster(kernel: str, x: torch.Tensor, I: int, accumulation: str) -> bool:
    """Whether the choice's data predicts PyTorch's unfused path (:func:`fused_swiglu.reference.swiglu_eager`)
    faster than the fused ``kernel`` ("dual" / "packed") for an eager call on x ``(..., H)`` with I output
    columns: x on a CUDA device, at least :data:`UNFUSED_CHECK_FROM` tokens, not under torch.compile
    (:func:`fused_swiglu.configs.unfused_faster`: a GPU's tuned data at the power cap)."""
    if below_unfused_check(x) or (asked := _asked(x)) is None:
        return False
    H = x.shape[-1]
    return unfused_faster(kernel, x.numel() // H, I, H, accumulation, *asked, x.dtype)


def training_unfused_measured(x: torch.Tensor) -> bool:
    """Whether the GPU's tuned data measured the fused training step slower than the unfused one for a
    call on x ``(..., H)``: x on a CUDA device, not under torch.compile
    (:func:`fused_swiglu.configs.training_unfused`)."""
    if (asked := _asked(x)) is None:
        return False
    H = x.shape[-1]
    return training_unfused(x.numel() // H, H, asked[1], x.dtype)


def on_2d(fn, x: torch.Tensor, *rest):
    """``fn(x2d, *rest)`` for x of shape (..., H): (M, H) as is, else reshaped to (M, H) and the
    result's leading dimension viewed back to x's."""
    if x.dim() == 2:
        return fn(x, *rest)
    y = fn(x.reshape(-1, x.shape[-1]), *rest)
    return y.view(*x.shape[:-1], y.shape[-1])


def run_op(op, x: torch.Tensor, *rest) -> torch.Tensor:
    """``call_op(op, x2d, *rest)`` for x of shape (..., H), as :func:`on_2d` does it, written out: this is
    the patched block's per-call path (x of shape (B, S, H)), where a closure per call is host time."""
    if x.dim() == 2:
        return call_op(op, x, *rest)
    y = call_op(op, x.reshape(-1, x.shape[-1]), *rest)
    return y.view(*x.shape[:-1], y.shape[-1])


def plan_key(fn: str, choice: tuple, backend: str, x, *weights) -> tuple | None:
    """Key of a call's validation outcome, or None where it must not be cached (tracing under
    torch.compile, non-tensors, tensor subclasses, nested or non-strided layouts, 0-d x)."""
    if torch.compiler.is_compiling() or type(x) not in PLAIN or x.is_nested or x.dim() == 0:
        return None
    if not all(type(c) is str for c in (*choice, backend)):
        return None  # validate() names the bad argument
    if any(type(w) not in PLAIN or w.is_nested for w in weights):
        return None
    if x.layout != torch.strided or any(w.layout != torch.strided for w in weights):
        return None  # validate() refuses sparse (and other) layouts by name
    return (fn, choice, backend, x.dtype, x.device, x.shape[-1],
            *((w.dtype, w.device, w.shape) for w in weights))


def plan(key: tuple | None, backend: str, validate) -> tuple[int, int, str]:
    """(I, H, backend to use) for a call: from the cache, or by running ``validate()`` (the
    function's own argument checks, returning (I, H, device)) and the backend rules."""
    found = PLANS.get(key) if key is not None else None
    if found is None:
        I, H, device = validate()
        use = v.resolve_backend(backend, device, stacklevel=5)  # warn at the line that called swiglu*
        if use == "cutlass":
            v.check_alignment(I, H)
            v.require_hopper(device)
            if device.type == "cuda":
                HOPPER.add(device.index if device.index is not None else torch.cuda.current_device())
        found = (I, H, use)
        if key is not None and len(PLANS) < PLANS_MAX:
            PLANS[key] = found
    return found


def records_grad(args) -> bool:
    """Whether autograd records a call on ``args``: grad mode on and some tensor among them requires
    grad (other arguments, such as the ops' config string, are passed over). A loop, not ``any`` over a
    generator: every eager call asks, and the generator's frame costs about as much as the test itself."""
    if not torch.is_grad_enabled():
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return True
    return False


BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd


def call_op(op, *args: torch.Tensor | str) -> torch.Tensor:
    """Call an operator of :mod:`fused_swiglu.ops` (its C++ CUDA kernel on a GPU).

    An eager call that records no autograd graph (no input requires grad, or grad mode is off, as
    under ``torch.no_grad()`` / ``torch.inference_mode()``) dispatches below the Autograd key: the
    operators' autograd kernel is Python (torch.library), and passing through it would cost more
    host time than the kernel itself at small M. Under torch.compile, or when autograd records the
    call, the operator is called as it is, so its fake kernel and backward apply.
    """
    if not torch.compiler.is_compiling() and not records_grad(args):
        with BELOW_AUTOGRAD():
            return op(*args)
    return op(*args)


def run_2d(x: torch.Tensor, I: int, H: int, launch, *weights: torch.Tensor) -> torch.Tensor:
    """Reshape x (..., H) to (M, H), launch, reshape the (M, I) result back. An empty problem
    returns at once, unless autograd records the call (then the op returns the empty result, and
    its backward gives zero weight gradients, as eager PyTorch does)."""
    if x.dim() == 2:  # (M, H) already: no reshape of x or view of the (M, I) result per call
        if x.shape[0] == 0 or I == 0:
            if not records_grad((x, *weights)):
                return x.new_empty((x.shape[0], I))
        return launch(x)
    lead = x.shape[:-1]
    x2d = x.reshape(-1, H)  # (M, H); a view when strides allow, else a copy
    if x2d.shape[0] == 0 or I == 0:
        if not records_grad((x, *weights)):
            return x.new_empty((*lead, I))
    return launch(x2d).view(*lead, I)
