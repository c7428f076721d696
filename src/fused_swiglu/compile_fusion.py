"""A torch.compile backend that runs the SwiGLU products of any model as ``fused_swiglu::swiglu_dual``.

Usage::

    compiled = torch.compile(model, backend=fused_swiglu.fused_backend())

:func:`fused_backend` returns a backend for ``torch.compile``. Each graph that Dynamo captures is
rewritten by :func:`fuse_graph` and then handed to the inner backend (Inductor by default; ``mode=`` and
``options=`` given to ``torch.compile`` are passed on to it). The rewrite runs on Dynamo's graph, before
AOTAutograd, so the same rewritten graph serves inference and training: AOTAutograd differentiates
the operator through its registered backward (:mod:`fused_swiglu.autograd`), as in eager mode.

What is matched
---------------
A product ``silu(G) * U`` (``*``, ``torch.mul`` or ``Tensor.mul``, either operand first) where:

* ``silu`` is ``F.silu`` (an ``nn.SiLU`` module and transformers' SiLU activation trace to it) or
  ``A * torch.sigmoid(A)``;
* ``G`` and ``U`` are products of one activation tensor ``x`` of shape ``(..., H)`` (the same graph
  node, or the same ``view`` / ``reshape`` of one) with weights of shape ``(I, H)``:
  ``F.linear(x, W)`` (an ``nn.Linear`` without bias), ``x @ W.T`` / ``torch.matmul`` / ``torch.mm`` /
  ``Tensor.matmul`` with ``W.T``, ``W.t()``, ``W.mT``, ``W.transpose(0, 1)`` or ``W.permute(1, 0)``;
  or two row blocks of one product over concatenated weights ``[W_a; W_b]`` of shape ``(2I, H)``,
  taken with ``chunk(2, dim=-1)``, ``split(I, dim=-1)`` / ``split([I, I], dim=-1)``, last-dimension
  slices (``gu[..., :I]``) or ``narrow(-1, ...)``;
* ``G`` and ``U`` may each be followed by the same chain of ``view`` / ``reshape`` / ``contiguous``.

The operand under ``silu`` is the gate, whatever the model calls it: ``silu(x @ W_u.T) * (x @ W_g.T)``
becomes ``swiglu_dual(x, W_u, W_g)``. A match is replaced by ``x.reshape(-1, H)``, one call of
``fused_swiglu::swiglu_dual`` (concatenated weights: on two ``narrow`` row views of the one weight, no
copy) and a ``view`` back to ``(..., I)``; the nodes it replaces are removed.

What is left as it is, and why
------------------------------
Each product left unfused is recorded with its reason (:attr:`FusedSwiGLUBackend.unfused`), and the
first graph with such products warns once per backend:

* tensors not on a Hopper GPU (compute capability 9.0): the CUDA kernels need sm_90a, and the
  operator's CPU kernel (fp32 products, one rounding) is slower than the unfused bf16/fp16 products.
  ``force=True`` rewrites graphs on the CPU too (the CPU kernel; for tests). A CUDA GPU of another
  architecture is never rewritten: the operator has no kernel for it.
* dtypes other than bf16 / fp16, x and the weights of different dtypes or devices, or products
  computed in another dtype than x's (autocast to another dtype);
* I or H not a multiple of 8 (the kernels' 16-byte TMA rows), or not known when compiling;
* a projection with a bias (the operator has none);
* a weight that is not row-major ``(I, H)`` (``x @ W`` with a stored ``(H, I)`` weight, or strides the
  kernels do not read in place): the operator would copy it on every call;
* an intermediate used elsewhere: the gate or up product, the ``silu`` output, or the concatenated
  product read by another node (the operator never writes them, and computing them again
  beside it would cost the GEMMs the fusion saves);
* different activation tensors for the two products, or different view chains after them.

Products that match none of the forms above (another activation, a cast between the product and
``silu``, products of different shapes) are not candidates and are neither changed nor recorded.

Numerics: the operator sums in fp32 and rounds once, where eager PyTorch rounds the gate and up
products to the dtype before ``silu`` and the multiply; results agree within the dtype's rounding,
not bit for bit. The backward is the operator's registered one (it recomputes the gate and up
products), not AOTAutograd's derivative of the replaced nodes.

Errors
------
:func:`fused_backend` raises TypeError (``force`` not a bool, ``inner`` neither a name nor a callable)
and ValueError (an unknown ``accumulation``, no backend registered under the name ``inner``);
:func:`fuse_graph` raises TypeError for anything but a ``torch.fx.GraphModule``. Compiling raises
nothing of its own: a product the operator cannot take is left as it is and recorded, and errors of the
inner backend reach the caller as ``torch.compile`` reports them (``BackendCompilerFailed``).

Private PyTorch APIs relied on
------------------------------
* the form of Dynamo's graphs (``torch._C._nn.linear``, ``torch.nn.functional.silu``,
  ``operator.mul``, ``builtins.getattr(w, "T")``, ``Tensor`` method calls) and the fake tensors Dynamo
  stores in ``node.meta["example_value"]``;
* ``torch._dynamo.backends.registry.lookup_backend`` (an inner backend given by name);
* ``torch._inductor.compile_fx.compile_fx`` with ``config_patches`` and
  ``torch._inductor.list_mode_options`` (the Inductor inner backend with ``mode`` / ``options``).

The nodes inserted are ``Tensor`` method calls (``reshape``, ``narrow``, ``size``, ``view``) and the
operator's ``OpOverload``, which AOTAutograd's cache accepts. Changes in Dynamo's graph forms can make
matches disappear (the graph is then compiled as it is); ``tests/test_compile_fusion.py`` checks the
matches, results and gradients on the installed PyTorch, and ``tests/test_compile_fusion_gpu.py`` the
kernels, results, gradients and CUDA-graph replays of compiled models on a Hopper GPU.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import operator
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx

from . import _validate as v
from . import ops
from ._dispatch import AUTO
from .configs import ACCUMULATIONS

log = logging.getLogger(__name__)

__all__ = ["FusedSwiGLUBackend", "FusionRecord", "fuse_graph", "fused_backend"]

FORCE_HINT = "force=True rewrites graphs on the CPU too"


@dataclass(frozen=True)
class FusionRecord:
    """One ``silu(G) * U`` product found in a graph.

    Attributes:
        graph: the number of the graph among those the backend was given (0 first).
        node: the name of the product's node in Dynamo's graph.
        gate, up: the names of the weight nodes whose products were G (under silu) and U, with the
            rows read for concatenated weights (``w[0:128]``); in Dynamo's graphs these name the
            parameters, e.g. ``l_self_modules_mlp_modules_gate_proj_parameters_weight_``.
        layout: ``"separate"`` (two weights) or ``"concatenated"`` (row blocks of one weight).
        shape: ``(I, H)``, None where not known.
        reason: None when the product was replaced; else why it was left as it is.
    """

    graph: int
    node: str
    gate: str
    up: str
    layout: str
    shape: tuple[int, int] | None
    reason: str | None = None


# --- node forms ------------------------------------------------------------------------------------

_LINEAR = {torch._C._nn.linear, F.linear}
_MATMUL_FUNCTIONS = {operator.matmul, torch.matmul, torch.mm}
_MATMUL_METHODS = {"matmul", "mm", "__matmul__"}
_MUL_FUNCTIONS = {operator.mul, torch.mul}
_SIGMOID_FUNCTIONS = {torch.sigmoid, F.sigmoid}
_CHUNK_FUNCTIONS = {torch.chunk}
_SPLIT_FUNCTIONS = {torch.split, torch.functional.split}
_RESHAPE_FUNCTIONS = {torch.reshape}
_NARROW_FUNCTIONS = {torch.narrow}


def _calls(node, functions=(), methods=()) -> bool:
    return isinstance(node, fx.Node) and (
        (node.op == "call_function" and node.target in functions)
        or (node.op == "call_method" and node.target in methods)
    )


def _value(node):
    """The fake value Dynamo recorded for ``node`` (None where there is none)."""
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, fx.Node) else None


def _tensor(node) -> torch.Tensor | None:
    value = _value(node)
    return value if isinstance(value, torch.Tensor) else None


def _arg(node: fx.Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _static(n) -> bool:
    return type(n) is int


def _last_dim(dim, ndim: int) -> bool:
    return _static(dim) and ndim > 0 and dim % ndim == ndim - 1


def _is_mul(node) -> bool:
    return _calls(node, _MUL_FUNCTIONS, {"mul"}) and len(node.args) == 2 and not node.kwargs


def _silu_input(node) -> tuple[fx.Node, list[fx.Node]] | None:
    """``(A, nodes)`` if ``node`` computes ``silu(A)`` (``nodes``: those computing it), else None."""
    if _calls(node, {F.silu}) and isinstance(node.args[0] if node.args else None, fx.Node):
        return node.args[0], [node]
    if _is_mul(node):  # A * sigmoid(A), either order
        a, b = node.args
        for s, other in ((a, b), (b, a)):
            if _calls(s, _SIGMOID_FUNCTIONS, {"sigmoid"}) and len(s.args) == 1 and not s.kwargs and s.args[0] is other:
                return other, [node, s]
    return None


_VIEW_METHODS = {"view", "reshape"}


def _is_view(node) -> bool:
    """A shape-only step: ``view`` / ``reshape`` (method or ``torch.reshape``) or ``contiguous()``."""
    if _calls(node, _RESHAPE_FUNCTIONS, _VIEW_METHODS):
        return bool(node.args)
    return _calls(node, (), {"contiguous"}) and len(node.args) == 1 and not node.kwargs


def _same_value(a, b) -> bool:
    """Whether ``a`` and ``b`` are one graph value: the same node, or the same shape-only step of one."""
    if a is b:
        return True
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node) and _is_view(a) and _is_view(b)):
        return False
    if a.op != b.op or a.target != b.target or len(a.args) != len(b.args) or a.kwargs != b.kwargs:
        return False
    return all(_same_value(x, y) if isinstance(x, fx.Node) else x == y for x, y in zip(a.args, b.args))


def _same_steps(a: list[fx.Node], b: list[fx.Node]) -> bool:
    """Whether two chains of shape-only steps apply the same steps (arguments after the tensor)."""
    return len(a) == len(b) and all(
        x.op == y.op and x.target == y.target and x.args[1:] == y.args[1:] and x.kwargs == y.kwargs
        for x, y in zip(a, b)
    )


def _transposed_weight(node) -> fx.Node | None:
    """W if ``node`` is the transpose of a 2-D W (``W.T``, ``W.mT``, ``W.t()``, ``W.transpose(0, 1)``,
    ``W.permute(1, 0)``, or their ``torch.`` functions), else None."""
    if not isinstance(node, fx.Node) or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    w = node.args[0]
    value = _tensor(w)
    if value is None or value.dim() != 2:
        return None
    rest = list(node.args[1:])
    if node.op == "call_function" and node.target is builtins.getattr:
        return w if rest in (["T"], ["mT"]) else None
    if _calls(node, {torch.t}, {"t"}):
        return w if not rest and not node.kwargs else None
    if _calls(node, {torch.transpose}, {"transpose"}):
        dims = [_arg(node, 1, "dim0"), _arg(node, 2, "dim1")]
        ok = all(_static(d) for d in dims) and {d % 2 for d in dims} == {0, 1}
        return w if ok else None
    if _calls(node, {torch.permute}, {"permute"}):
        dims = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
        if not rest:
            dims = node.kwargs.get("dims", [])
        return w if len(dims) == 2 and all(_static(d) for d in dims) and [d % 2 for d in dims] == [1, 0] else None
    return None


@dataclass
class _Product:
    """An operand of the product: ``x @ W[rows].T`` followed by shape-only ``steps``."""

    x: fx.Node
    w: fx.Node
    start: int | None  # first row of W (None: all of W)
    rows: int | None  # rows of W it reads (None: all of W)
    bias: object
    steps: list[fx.Node]  # shape-only steps after the projection, in order
    inner: list[fx.Node]  # intermediates only the pattern may read (projection, chunk, pieces, steps)
    spare: list[fx.Node]  # removed when nothing reads them any more (the weight's transpose)
    why_not: str | None = None  # a reason the product cannot be fused, known from its form


def _projection(node) -> _Product | None:
    """``node`` as ``x @ W.T`` (F.linear or a matmul with a transposed weight), else None."""
    if _calls(node, _LINEAR):
        x, w, bias = _arg(node, 0, "input"), _arg(node, 1, "weight"), _arg(node, 2, "bias")
        if not (isinstance(x, fx.Node) and isinstance(w, fx.Node)):
            return None
        return _Product(x, w, None, None, bias, [], [node], [])
    if _calls(node, _MATMUL_FUNCTIONS, _MATMUL_METHODS) and len(node.args) == 2 and not node.kwargs:
        x, wt = node.args
        if not (isinstance(x, fx.Node) and isinstance(wt, fx.Node)):
            return None
        w = _transposed_weight(wt)
        if w is not None:
            return _Product(x, w, None, None, None, [], [node], [wt])
        value = _tensor(wt)
        if value is not None and value.dim() == 2:
            return _Product(x, wt, None, None, None, [], [node], [],
                            why_not="a weight is used as stored, x @ W with W of shape (H, I): the operator reads "
                                    "(I, H) row-major weights")
    return None


def _piece(node) -> tuple[fx.Node, int, int, list[fx.Node]] | None:
    """``(P, start, length, nodes)`` if ``node`` is a block of columns of ``P`` (chunk / split then
    getitem, a last-dimension slice or narrow), else None."""
    if not isinstance(node, fx.Node):
        return None
    value = _tensor(node)
    if value is None or value.dim() == 0 or not _static(value.shape[-1]):
        return None
    length = value.shape[-1]
    if node.op == "call_function" and node.target is operator.getitem and len(node.args) == 2:
        parent, index = node.args
        if not isinstance(parent, fx.Node):
            return None
        if _calls(parent, _CHUNK_FUNCTIONS | _SPLIT_FUNCTIONS, {"chunk", "split"}) and _static(index):
            source = parent.args[0] if parent.args else None
            src = _tensor(source)
            pieces = _value(parent)
            dim = _arg(parent, 2, "dim", 0)
            if src is None or not isinstance(pieces, (tuple, list)) or not _last_dim(dim, src.dim()):
                return None
            sizes = [p.shape[-1] for p in pieces]
            if not all(_static(s) for s in sizes) or not 0 <= index < len(sizes):
                return None
            return source, sum(sizes[:index]), length, [parent, node]
        src = _tensor(parent)
        if src is None or not isinstance(index, tuple) or not index or not isinstance(index[-1], slice):
            return None
        if not _static(src.shape[-1]):
            return None
        lead = index[:-1]
        full = slice(None, None, None)
        if lead.count(Ellipsis) == 1 and all(i is Ellipsis or i == full for i in lead):
            pass
        elif not (len(lead) == src.dim() - 1 and all(i == full for i in lead)):
            return None
        s = index[-1]
        if s.step not in (None, 1) or not all(b is None or _static(b) for b in (s.start, s.stop)):
            return None
        start, stop, _ = s.indices(src.shape[-1])
        return (parent, start, length, [node]) if stop - start == length else None
    if _calls(node, _NARROW_FUNCTIONS, {"narrow"}) and len(node.args) >= 1:
        source = node.args[0]
        src = _tensor(source)
        dim, start = _arg(node, 1, "dim"), _arg(node, 2, "start")
        if src is None or not _last_dim(dim, src.dim()) or not _static(start):
            return None
        return source, start, length, [node]
    return None


def _operand(node) -> _Product | None:
    """``node`` as a product of x with weight rows, possibly followed by shape-only steps, else None."""
    steps = []
    while _is_view(node) and isinstance(node.args[0], fx.Node):
        steps.append(node)
        node = node.args[0]
    steps.reverse()
    found = _projection(node)
    if found is None:
        piece = _piece(node)
        if piece is None:
            return None
        source, start, length, nodes = piece
        found = _projection(source)
        if found is None or found.rows is not None:
            return None
        found.start, found.rows = start, length
        found.inner = found.inner + nodes
    found.steps = steps
    found.inner = found.inner + steps
    return found


# --- checks ---------------------------------------------------------------------------------------


def _device_reason(device: torch.device, force: bool) -> str | None:
    if device.type == "cuda":
        why = v.hopper_status(device)
        return None if why is None else f"{why}; no kernel of the operator runs there"
    if device.type == "cpu":
        return None if force else f"tensors are on the CPU, not on a Hopper GPU ({FORCE_HINT})"
    return f"tensors are on {device}; the operator has kernels for Hopper GPUs and the CPU only"


def _weight_shape(p: _Product) -> tuple[int, int] | None:
    """(I, H) of the rows the product reads, when known."""
    w = _tensor(p.w)
    if w is None or w.dim() != 2:
        return None
    rows = p.rows if p.rows is not None else w.shape[0]
    return rows, w.shape[1]


def _reason(mul: fx.Node, pattern: set[fx.Node], g: _Product, u: _Product, force: bool) -> str | None:
    """Why the candidate cannot be replaced (None: it can)."""
    for p in (g, u):
        if p.why_not is not None:
            return p.why_not
        if p.bias is not None:
            return "a projection has a bias (the operator computes none)"
    if not _same_value(g.x, u.x):
        return "the gate and up products read different activation tensors"
    if not _same_steps(g.steps, u.steps):
        return "the gate and up products are reshaped differently"
    for node in pattern:
        others = [user.name for user in node.users if user not in pattern and user is not mul]
        if others:
            return (f"the intermediate {node.name} is also read by {', '.join(others)} (the operator never "
                    "writes it)")
    x, wg, wu = _tensor(g.x), _tensor(g.w), _tensor(u.w)
    if x is None or wg is None or wu is None:
        return "the graph holds no example values for x and the weights"
    if x.dtype not in v.DTYPES:
        return f"x is {x.dtype}; the kernels take torch.bfloat16 or torch.float16"
    out = _tensor(mul)
    if out is None or out.dtype != x.dtype:
        return (f"the product is {getattr(out, 'dtype', None)} where x is {x.dtype} (autocast casts the operands); "
                "the operator computes in x's dtype")
    for name, w in (("gate", wg), ("up", wu)):
        if w.dtype != x.dtype:
            return f"the {name} weight is {w.dtype} and x {x.dtype}; the operator takes one dtype"
        if w.device != x.device:
            return f"the {name} weight is on {w.device} and x on {x.device}"
    shape_g, shape_u = _weight_shape(g), _weight_shape(u)
    if shape_g != shape_u or shape_g is None:
        return f"the gate and up weights read differ in shape ({shape_g} and {shape_u})"
    I, H = shape_g
    if not (_static(I) and _static(H)):
        return "I or H is not known when compiling"
    if x.dim() == 0 or x.shape[-1] != H:
        return f"x's last dimension is not H = {H}"
    if I % v.ALIGN or H % v.ALIGN or H == 0:
        return f"the weights are ({I}, {H}); the kernels need I and H to be multiples of {v.ALIGN}"
    for name, w in (("gate", wg), ("up", wu)):
        if w.stride(1) != 1 or w.stride(0) % v.ALIGN:
            return (f"the {name} weight has strides {tuple(w.stride())}, which the kernels do not read in place; the "
                    "operator would copy it on every call")
    return _device_reason(x.device, force)


# --- the rewrite ----------------------------------------------------------------------------------


def _insert(graph: fx.Graph, kind: str, target, args: tuple, value, meta: dict, kwargs: dict | None = None) -> fx.Node:
    node = graph.create_node(kind, target, args, kwargs)
    node.meta.update(meta)
    node.meta["example_value"] = value
    return node


def _replace(graph: fx.Graph, mul: fx.Node, g: _Product, u: _Product, config: str) -> fx.Node:
    """Insert ``view(swiglu_dual(x.reshape(-1, H), W_g, W_u, config), ..., I)`` and the steps after it,
    before ``mul``; return the node that replaces ``mul``."""
    meta = {k: mul.meta[k] for k in ("nn_module_stack", "stack_trace") if k in mul.meta}
    xv = _tensor(g.x)
    I, H = _weight_shape(g)
    fake = xv.fake_mode if hasattr(xv, "fake_mode") else None
    with graph.inserting_before(mul), (fake if fake is not None else contextlib.nullcontext()):
        x2d, x2dv = g.x, xv
        if xv.dim() != 2:
            x2dv = xv.reshape(-1, H)
            x2d = _insert(graph, "call_method", "reshape", (g.x, -1, H), x2dv, meta)
        weights = []
        for p in (g, u):
            w, wv = p.w, _tensor(p.w)
            if p.rows is not None:
                wv = wv.narrow(0, p.start, p.rows)
                w = _insert(graph, "call_method", "narrow", (p.w, 0, p.start, p.rows), wv, meta)
            weights.append((w, wv))
        (wg, wgv), (wu, wuv) = weights
        yv = ops.swiglu_dual(x2dv, wgv, wuv, config)
        y = _insert(graph, "call_function", ops.swiglu_dual, (x2d, wg, wu, config), yv, meta)
        if xv.dim() != 2:
            lead = []
            for i, size in enumerate(xv.shape[:-1]):
                if not _static(size):  # a symbolic size: read it from x in the graph
                    size = _insert(graph, "call_method", "size", (g.x, i), size, meta)
                lead.append(size)
            yv = yv.view(*xv.shape[:-1], I)
            y = _insert(graph, "call_method", "view", (y, *lead, I), yv, meta)
        for step in g.steps:
            yv = _tensor(step)
            y = _insert(graph, step.op, step.target, (y, *step.args[1:]), yv, meta, dict(step.kwargs))
    return y


def _erase(graph: fx.Graph, nodes: set[fx.Node]) -> set[fx.Node]:
    """Erase the ``nodes`` that nothing reads any more, users before what they read; return those erased."""
    erased = set()
    for node in reversed(list(graph.nodes)):
        if node in nodes and not node.users and node.op not in ("placeholder", "get_attr", "output"):
            graph.erase_node(node)
            erased.add(node)
    return erased


def _candidates(graph: fx.Graph):
    """``(mul, gate, up, silu_nodes)`` for each ``silu(G) * U`` whose G and U are projections."""
    for node in list(graph.nodes):
        if not _is_mul(node):
            continue
        a, b = node.args
        for s, other in ((a, b), (b, a)):
            silu = _silu_input(s)
            if silu is None:
                continue
            pre, silu_nodes = silu
            g, u = _operand(pre), _operand(other)
            if g is not None and u is not None:
                yield node, g, u, silu_nodes
                break


def _rows_name(p: _Product) -> str:
    return p.w.name if p.rows is None else f"{p.w.name}[{p.start}:{p.start + p.rows}]"


def fuse_graph(gm: fx.GraphModule, *, force: bool = False, accumulation: str = "fast",
               graph_index: int = 0) -> list[FusionRecord]:
    """Rewrite each ``silu(G) * U`` of Dynamo's graph ``gm`` that the kernels can run into
    ``fused_swiglu::swiglu_dual``, in place (the forms matched and the reasons for leaving one:
    the module's docstring).

    Args:
        gm: a graph captured by Dynamo (a custom backend's first argument): its nodes carry fake
            values in ``meta["example_value"]``; nodes without them are not rewritten.
        force: also rewrite graphs whose tensors are on the CPU (the operator's CPU kernel).
        accumulation: ``"fast"`` or ``"promoted"``, as in :func:`fused_swiglu.swiglu`.
        graph_index: stored in the records (:attr:`FusionRecord.graph`).

    Returns:
        One record per candidate product, replaced (``reason`` None) or not.

    Raises:
        TypeError: gm is not a ``torch.fx.GraphModule``; force is not a bool; accumulation not a str.
        ValueError: unknown accumulation.
    """
    if not isinstance(gm, fx.GraphModule):
        raise TypeError(f"gm must be a torch.fx.GraphModule; got {type(gm).__name__}")
    v.check_bool("force", force)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    config = AUTO[accumulation]
    graph = gm.graph
    records = []
    erased: set[fx.Node] = set()
    for mul, g, u, silu_nodes in _candidates(graph):
        if mul in erased:  # removed by an earlier rewrite
            continue
        pattern = {*silu_nodes, *g.inner, *u.inner}
        reason = _reason(mul, pattern, g, u, force)
        layout = "separate" if g.rows is None and u.rows is None else "concatenated"
        shape = _weight_shape(g)
        record = FusionRecord(graph_index, mul.name, _rows_name(g), _rows_name(u), layout,
                              shape if shape is not None and all(_static(s) for s in shape) else None, reason)
        records.append(record)
        if reason is not None:
            log.debug("fused_swiglu: %s left unfused: %s", mul.name, reason)
            continue
        y = _replace(graph, mul, g, u, config)
        mul.replace_all_uses_with(y)
        removable = {mul, *pattern, *g.spare, *u.spare, *([u.x] if u.x is not g.x else [])}
        erased |= _erase(graph, removable)
        log.debug("fused_swiglu: %s replaced by %s (gate %s, up %s)", mul.name, y.name, g.w.name, u.w.name)
    if any(r.reason is None for r in records):
        graph.lint()
        gm.recompile()
    return records


# --- the backend ----------------------------------------------------------------------------------


def _grouped(records: list[FusionRecord]) -> str:
    by_reason: dict[str, list[str]] = {}
    for r in records:
        by_reason.setdefault(r.reason, []).append(r.node)
    return "; ".join(f"{len(nodes)} product{'' if len(nodes) == 1 else 's'}: {reason}"
                     for reason, nodes in by_reason.items())


class FusedSwiGLUBackend:
    """A ``torch.compile`` backend: :func:`fuse_graph`, then the inner backend.

    Made by :func:`fused_backend`. It changes no global state: the rewrite happens on each graph it is
    given, including recompilations, and ``mode`` / ``options`` apply to that compilation only.

    Attributes:
        inner: the inner backend, as given (a name or a callable).
        force, accumulation: as given to :func:`fused_backend`.
        graphs: how many graphs it was given (a copy of the backend, ``copy.copy`` or ``copy.deepcopy``, is
            the backend itself, so these counts and records are shared).
        fused: a :class:`FusionRecord` for each product replaced by the operator.
        unfused: a :class:`FusionRecord` (with its reason) for each candidate product left as it is.
    """

    __name__ = "fused_swiglu"  # what torch.compile calls the backend

    def __init__(self, inner, force: bool, accumulation: str):
        self.inner, self.force, self.accumulation = inner, force, accumulation
        self.graphs = 0
        self.fused: list[FusionRecord] = []
        self.unfused: list[FusionRecord] = []
        self._warned = False

    def __deepcopy__(self, memo) -> FusedSwiGLUBackend:
        """The backend itself: a configuration that deep-copies its options (transformers'
        ``CompileConfig.to_dict()``) still hands torch.compile this backend, whose records stay readable."""
        return self

    def __copy__(self) -> FusedSwiGLUBackend:
        return self

    def __repr__(self) -> str:
        return (f"FusedSwiGLUBackend(inner={self.inner!r}, force={self.force}, accumulation={self.accumulation!r}; "
                f"{self.graphs} graph(s), {len(self.fused)} fused, {len(self.unfused)} unfused)")

    def __call__(self, gm: fx.GraphModule, example_inputs, **kwargs):
        records = fuse_graph(gm, force=self.force, accumulation=self.accumulation, graph_index=self.graphs)
        self.graphs += 1
        fused = [r for r in records if r.reason is None]
        unfused = [r for r in records if r.reason is not None]
        self.fused.extend(fused)
        self.unfused.extend(unfused)
        if unfused and not self._warned:
            self._warned = True
            warnings.warn(
                f"fused_swiglu.fused_backend: {len(unfused)} SwiGLU product(s) of this graph left unfused "
                f"({len(fused)} fused): {_grouped(unfused)}. They run as the model wrote them (the backend's "
                "unfused records name each; this warning is given once per backend)",
                UserWarning, stacklevel=v.outside_stacklevel())
        return self._compile(gm, example_inputs, **kwargs)

    def _compile(self, gm, example_inputs, mode: str | None = None, options: dict | None = None, **kwargs):
        if self.inner == "inductor":
            from torch._inductor import list_mode_options
            from torch._inductor.compile_fx import compile_fx

            patches = dict(list_mode_options(mode)) if mode not in (None, "default") else {}
            patches.update(options or {})
            return compile_fx(gm, example_inputs, config_patches=patches, **kwargs)
        from torch._dynamo.backends.registry import lookup_backend

        if mode is not None:
            kwargs["mode"] = mode
        if options is not None:
            kwargs["options"] = options
        return lookup_backend(self.inner)(gm, example_inputs, **kwargs)


def fused_backend(inner="inductor", *, force: bool = False, accumulation: str = "fast") -> FusedSwiGLUBackend:
    """A ``torch.compile`` backend that runs the model's SwiGLU products as ``fused_swiglu::swiglu_dual``.

    ``torch.compile(model, backend=fused_backend())`` compiles as Inductor does, after replacing
    every ``silu(x @ W_gate.T) * (x @ W_up.T)`` the kernels can run (the forms matched, and what is
    left as it is and why: :mod:`fused_swiglu.compile_fusion`). The rewrite precedes AOTAutograd, so a
    backward through the compiled model runs the operator's registered backward. On a device other
    than a Hopper GPU the graphs are compiled unchanged (with one warning naming why), unless
    ``force=True`` on the CPU. Each call returns a new backend with its own records.

    Args:
        inner: the backend that compiles the rewritten graph: ``"inductor"`` (default; ``mode`` and
            ``options`` given to ``torch.compile`` become its config patches), another registered
            backend name (``"aot_eager"``, ``"eager"``, ...), or a backend callable
            ``(gm, example_inputs) -> callable``.
        force: True: also rewrite graphs on the CPU, where the operator's CPU kernel computes in fp32
            and rounds once (slower than eager bf16/fp16; meant for tests). CUDA GPUs other than
            Hopper are never rewritten.
        accumulation: ``"fast"`` or ``"promoted"``: the operator's config choice, as in
            :func:`fused_swiglu.swiglu`.

    Returns:
        A :class:`FusedSwiGLUBackend`; its ``fused`` and ``unfused`` lists record each product found.

    Raises:
        TypeError: force is not a bool; inner is neither a string nor callable; accumulation not a str.
        ValueError: unknown accumulation, or no backend registered under the name ``inner``.
    """
    v.check_bool("force", force)
    v.check_choice("accumulation", accumulation, ACCUMULATIONS)
    if isinstance(inner, str):
        from torch._dynamo.backends.registry import lookup_backend

        try:
            lookup_backend(inner)
        except Exception as exc:  # InvalidBackend
            raise ValueError(f"inner must name a torch.compile backend ({', '.join(torch._dynamo.list_backends())}, "
                             f"...); got inner={inner!r}") from exc
    elif not callable(inner):
        raise TypeError(f"inner must be a backend name or a callable; got {type(inner).__name__}")
    return FusedSwiGLUBackend(inner, force, accumulation)
