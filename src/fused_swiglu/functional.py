"""Public functions: fused SwiGLU ``y = silu(x @ W_gate^T) * (x @ W_up^T)``.

Both functions accept ``x`` of shape ``(..., H)`` and return ``(..., I)`` in ``x.dtype``, computed
with fp32 accumulation and one rounding to the output dtype. Both are differentiable: with the CUDA
kernels the backward recomputes the gate and up products with PyTorch GEMMs
(:mod:`fused_swiglu.autograd`); the torch backend is differentiated by autograd.
"""

from __future__ import annotations

import torch

from . import _validate as v
from . import ops
from .configs import ACCUMULATIONS, AUTO_CONFIG
from .reference import swiglu_fp32_one_rounding
from .weights import LAYOUTS, pack_gate_up, unpack_gate_up


# Validated argument signatures -> (I, H, backend to use). Everything the checks read is in the key
# (choices, tensor types, dtypes, devices, x's last dimension, weight shapes); M, strides and
# alignment are not checked here (the ops handle any of them), so one entry serves every batch size.
_PLANS: dict[tuple, tuple[int, int, str]] = {}
_PLANS_MAX = 1024
# accumulation -> the ops' config argument (the automatic choice for that accumulation)
_AUTO = {acc: key for key, acc in AUTO_CONFIG.items()}


# Tensor types the fast paths take: plain tensors and nn.Parameter (model weights); other subclasses
# (fake and functional tensors under tracing, user subclasses) always go through validation and the
# registered op.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


# The fast path of the public functions: choice arguments -> the ops' config argument, for the calls
# that run the CUDA kernels as they are (dual kernel, or a packed weight in either layout).
_FAST_DUAL = {(k, b, a): _AUTO[a] for k in ("auto", "dual") for b in ("auto", "cutlass") for a in ACCUMULATIONS}
_FAST_PACKED = {(lay, b, a): _AUTO[a] for lay in LAYOUTS for b in ("auto", "cutlass") for a in ACCUMULATIONS}
# CUDA device indices on which a full check has found a Hopper GPU
_HOPPER: set[int] = set()


def _fast_config(table: dict, *choices) -> str | None:
    """The ops' config argument for these choice arguments if they select the fast path, else None
    (other choices, and invalid ones: the full checks name them)."""
    try:
        return table.get(choices)
    except TypeError:  # an unhashable argument
        return None


def _check_dual(x, w_gate, w_up, kernel, backend, accumulation) -> tuple[int, int, torch.device]:
    """:func:`swiglu`'s argument checks; returns (I, H, device)."""
    v.check_choice("kernel", kernel, v.KERNELS)
    v.check_choice("backend", backend, v.BACKENDS)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    v.check_tensors(x=x, w_gate=w_gate, w_up=w_up)
    v.check_dtypes(x=x, w_gate=w_gate, w_up=w_up)
    I, H = v.check_weight_pair(x, w_gate, w_up)
    return I, H, v.check_devices(x=x, w_gate=w_gate, w_up=w_up)


def _check_packed(x, w_packed, layout, backend, accumulation) -> tuple[int, int, torch.device]:
    """:func:`swiglu_packed`'s argument checks; returns (I, H, device)."""
    v.check_choice("layout", layout, LAYOUTS)
    v.check_choice("backend", backend, v.BACKENDS)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    v.check_tensors(x=x, w_packed=w_packed)
    v.check_dtypes(x=x, w_packed=w_packed)
    I, H = v.check_packed(x, w_packed)
    return I, H, v.check_devices(x=x, w_packed=w_packed)


def _fast(x: torch.Tensor) -> bool:
    """Whether a call on ``x`` may take the fast path: an eager call on a plain CUDA tensor of a
    device already checked to be Hopper. The operator checks the rest (the C boundary); if it
    raises, the caller runs its full Python checks, which name the argument and the rule."""
    return type(x) in _PLAIN and x.is_cuda and x.get_device() in _HOPPER and not torch.compiler.is_compiling()


def _run_op(op, x: torch.Tensor, *rest) -> torch.Tensor:
    """``op(x2d, *rest)`` for x of shape (..., H): (M, H) as is, else reshaped and the result viewed back."""
    if x.dim() == 2:
        return _call(op, x, *rest)
    y = _call(op, x.reshape(-1, x.shape[-1]), *rest)
    return y.view(*x.shape[:-1], y.shape[-1])


def _plan_key(fn: str, choice: tuple, backend: str, x, *weights) -> tuple | None:
    """Key of a call's validation outcome, or None where it must not be cached (tracing under
    torch.compile, non-tensors, tensor subclasses, nested or non-strided layouts, 0-d x)."""
    if torch.compiler.is_compiling() or type(x) not in _PLAIN or x.is_nested or x.dim() == 0:
        return None
    if not all(type(c) is str for c in (*choice, backend)):
        return None  # validate() names the bad argument
    if any(type(w) not in _PLAIN or w.is_nested for w in weights):
        return None
    if x.layout != torch.strided or any(w.layout != torch.strided for w in weights):
        return None  # validate() refuses sparse (and other) layouts by name
    return (fn, choice, backend, x.dtype, x.device, x.shape[-1],
            *((w.dtype, w.device, w.shape) for w in weights))


def _plan(key: tuple | None, backend: str, validate) -> tuple[int, int, str]:
    """(I, H, backend to use) for a call: from the cache, or by running ``validate()`` (the
    function's own argument checks, returning (I, H, device)) and the backend rules."""
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        I, H, device = validate()
        use = v.resolve_backend(backend, device, stacklevel=5)  # warn at the line that called swiglu*
        if use == "cutlass":
            v.check_alignment(I, H)
            v.require_hopper(device)
            if device.type == "cuda":
                _HOPPER.add(device.index if device.index is not None else torch.cuda.current_device())
        plan = (I, H, use)
        if key is not None and len(_PLANS) < _PLANS_MAX:
            _PLANS[key] = plan
    return plan


def _records_grad(args) -> bool:
    """Whether autograd records a call on ``args``: grad mode on and some tensor among them requires
    grad (other arguments, such as the ops' config string, are passed over)."""
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd


def _call(op, *args: torch.Tensor | str) -> torch.Tensor:
    """Call an operator of :mod:`fused_swiglu.ops` (its C++ CUDA kernel on a GPU).

    An eager call that records no autograd graph (no input requires grad, or grad mode is off, as
    under ``torch.no_grad()`` / ``torch.inference_mode()``) dispatches below the Autograd key: the
    operators' autograd kernel is Python (torch.library), and passing through it would cost more
    host time than the kernel itself at small M. Under torch.compile, or when autograd records the
    call, the operator is called as it is, so its fake kernel and backward apply.
    """
    if not torch.compiler.is_compiling() and not _records_grad(args):
        with _BELOW_AUTOGRAD():
            return op(*args)
    return op(*args)


def _run_2d(x: torch.Tensor, I: int, H: int, launch, *weights: torch.Tensor) -> torch.Tensor:
    """Reshape x (..., H) to (M, H), launch, reshape the (M, I) result back. An empty problem
    returns at once, unless autograd records the call (then the op returns the empty result, and
    its backward gives zero weight gradients, as eager PyTorch does)."""
    if x.dim() == 2:  # (M, H) already: no reshape of x or view of the (M, I) result per call
        if x.shape[0] == 0 or I == 0:
            if not _records_grad((x, *weights)):
                return x.new_empty((x.shape[0], I))
        return launch(x)
    lead = x.shape[:-1]
    x2d = x.reshape(-1, H)  # (M, H); a view when strides allow, else a copy
    if x2d.shape[0] == 0 or I == 0:
        if not _records_grad((x, *weights)):
            return x.new_empty((*lead, I))
    return launch(x2d).view(*lead, I)


def swiglu(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    *,
    backend: str = "auto",
    kernel: str = "auto",
    accumulation: str = "fast",
) -> torch.Tensor:
    """Fused ``silu(x @ w_gate.T) * (x @ w_up.T)``.

    Args:
        x: ``(..., H)`` activations, torch.bfloat16 or torch.float16, any strides. With the CUDA
            kernels, non-contiguous or misaligned x is copied once (rows need unit column stride,
            a row stride that is a multiple of 8 elements and a 16-byte aligned start).
        w_gate: ``(I, H)`` gate_proj weight, same dtype and device as x. Same copy rule as x.
        w_up: ``(I, H)`` up_proj weight, same dtype and device as x. Same copy rule as x.
        backend: ``"cutlass"`` (the CUDA kernels; needs a CUDA tensor on a compute capability 9.0
            GPU), ``"torch"`` (fp32 PyTorch matrix products, one rounding; any device), or
            ``"auto"`` (cutlass when the tensors are on a Hopper GPU, else torch with one warning
            per process).
        kernel: ``"dual"`` (the dual kernel: one dual GEMM reading w_gate and w_up as they are),
            ``"packed"`` (the packed kernel: packs the weights with :func:`pack_gate_up` on every call,
            a copy of both weights, 2·I·H elements read and written, then one GEMM with a SwiGLU
            epilogue; to pay the copy once, pack yourself and call :func:`swiglu_packed`), or
            ``"auto"`` (= ``"dual"``).
        accumulation: how the CUDA kernels sum the K products (the torch backend always runs its
            IEEE fp32 matrix products). ``"fast"``: GMMA accumulates all of K in its fp32
            accumulators, whose additions do not round to nearest. ``"promoted"``: GMMA
            accumulates 4 k-tiles (256 products) at a time and each partial sum is added into a
            second fp32 accumulator with round-to-nearest: more outputs bit-equal to the correctly
            rounded float64 result (about as often as PyTorch's fp32 matrix products rounded
            once), for more GPU time. The measured rates and costs: docs/performance.md and
            docs/results/h200.

    Returns:
        ``(..., I)`` tensor of x's dtype on x's device, contiguous. x with no rows (M = 0)
        returns an empty tensor without a launch. Differentiable with respect to x and the
        weights: the backward recomputes ``x @ w_gate.T`` and ``x @ w_up.T`` with PyTorch GEMMs
        in the input dtype, then follows eager PyTorch's autograd (:mod:`fused_swiglu.autograd`).

    Raises:
        TypeError: an argument is not a dense (strided) tensor; a dtype is not bf16/fp16 or the
            dtypes differ.
        ValueError: w_gate/w_up not 2-D or of different shapes; ``x.shape[-1] != H``; tensors on
            different devices; unknown backend, kernel or accumulation; with the CUDA kernels, H or
            I not a multiple of 8 (16-byte TMA rows) or H = 0.
        RuntimeError: backend="cutlass" on a CPU tensor or a GPU that is not compute capability
            9.0; a CUDA error from the kernel library.
        fused_swiglu.errors.BuildError: the kernel library could not be built or loaded.
    """
    config = _fast_config(_FAST_DUAL, kernel, backend, accumulation)
    if config is not None and _fast(x):
        try:
            return _run_op(ops.swiglu_dual, x, w_gate, w_up, config)
        except Exception:
            _plan(None, backend, lambda: _check_dual(x, w_gate, w_up, kernel, backend, accumulation))  # typed error
            raise

    def validate() -> tuple[int, int, torch.device]:
        return _check_dual(x, w_gate, w_up, kernel, backend, accumulation)

    I, H, use = _plan(_plan_key("swiglu", (kernel, accumulation), backend, x, w_gate, w_up), backend, validate)
    if use == "torch":
        return swiglu_fp32_one_rounding(x, w_gate, w_up)
    config = _AUTO[accumulation]
    if kernel == "packed":
        w_packed = pack_gate_up(w_gate, w_up)  # (2I, H): one copy of both weights per call
        return _run_2d(x, I, H, lambda x2d: _call(ops.swiglu_packed, x2d, w_packed, config), w_packed)
    return _run_2d(x, I, H, lambda x2d: _call(ops.swiglu_dual, x2d, w_gate, w_up, config), w_gate, w_up)


def swiglu_packed(
    x: torch.Tensor,
    w_packed: torch.Tensor,
    *,
    layout: str,
    backend: str = "auto",
    accumulation: str = "fast",
) -> torch.Tensor:
    """Fused SwiGLU on gate and up weights stored in one ``(2I, H)`` tensor.

    Args:
        x: ``(..., H)`` activations, torch.bfloat16 or torch.float16, any strides
            (non-contiguous or misaligned x is copied once, as in :func:`swiglu`).
        w_packed: ``(2I, H)``, same dtype and device as x.
        layout: required. ``"interleaved"``: the layout of :func:`pack_gate_up` (blocks of 8 gate
            rows then 8 up rows), read by the packed kernel (one GEMM with a SwiGLU epilogue).
            ``"concatenated"``: ``w_packed = [W_gate; W_up]`` (gate rows ``[0, I)``, up rows
            ``[I, 2I)``), run by the dual kernel on the two row slices (views, no copy).
        backend: ``"auto"``, ``"cutlass"`` or ``"torch"``, as in :func:`swiglu`.
        accumulation: ``"fast"`` or ``"promoted"``, as in :func:`swiglu`.

    Returns:
        ``(..., I)`` tensor of x's dtype on x's device, contiguous; differentiable with respect
        to x and w_packed, as in :func:`swiglu` (the interleaved layout's gradient is interleaved).

    Raises:
        TypeError: layout missing; an argument is not a dense (strided) tensor; a dtype is not
            bf16/fp16 or the dtypes differ.
        ValueError: unknown layout, backend or accumulation; w_packed not 2-D or with an odd row count;
            ``x.shape[-1] != H``; different devices; with the CUDA kernels, H or I not a multiple
            of 8 (16-byte TMA rows); interleaved layout with I not a multiple of 8.
        RuntimeError: as in :func:`swiglu`.
    """
    config = _fast_config(_FAST_PACKED, layout, backend, accumulation)
    if config is not None and _fast(x):
        try:
            if layout == "interleaved":
                return _run_op(ops.swiglu_packed, x, w_packed, config)
            I = w_packed.shape[0] // 2
            return _run_op(ops.swiglu_dual, x, w_packed[:I], w_packed[I:], config)
        except Exception:
            _plan(None, backend, lambda: _check_packed(x, w_packed, layout, backend, accumulation))  # typed error
            raise

    def validate() -> tuple[int, int, torch.device]:
        return _check_packed(x, w_packed, layout, backend, accumulation)

    I, H, use = _plan(_plan_key("swiglu_packed", (layout, accumulation), backend, x, w_packed), backend, validate)
    if use == "torch":
        w_gate, w_up = unpack_gate_up(w_packed, layout=layout)
        return swiglu_fp32_one_rounding(x, w_gate, w_up)
    config = _AUTO[accumulation]
    if layout == "interleaved":
        return _run_2d(x, I, H, lambda x2d: _call(ops.swiglu_packed, x2d, w_packed, config), w_packed)
    w_gate, w_up = w_packed[:I], w_packed[I:]  # (I, H) row-slice views, 16-byte aligned when H % 8 == 0
    return _run_2d(x, I, H, lambda x2d: _call(ops.swiglu_dual, x2d, w_gate, w_up, config), w_gate, w_up)
