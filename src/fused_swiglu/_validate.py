"""Argument checks shared by the public functions; all run before any kernel launch.

Every message names the argument, the rule and the value found.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

DTYPES = (torch.bfloat16, torch.float16)
BACKENDS = ("auto", "cutlass", "torch")
KERNELS = ("auto", "dual", "packed")
ALIGN = 8  # elements: 16-byte rows for TMA in bf16/fp16
_warned: set[str] = set()


def check_choice(arg: str, value: object, allowed: tuple[str, ...]) -> None:
    """TypeError for a value that is not a str, ValueError for a str not in ``allowed``, naming ``arg``."""
    if not isinstance(value, str):  # no `in` on arrays, tensors, ...
        raise TypeError(f"{arg} must be a str, one of {', '.join(map(repr, allowed))}; got {arg}={value!r}")
    if value not in allowed:
        raise ValueError(f"{arg} must be one of {', '.join(map(repr, allowed))}; got {arg}={value!r}")


def check_bool(arg: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{arg} must be a bool; got {arg}={value!r}")


def check_tensors(**named: object) -> None:
    for arg, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{arg} must be a torch.Tensor; got {type(t).__name__}")
        if t.layout != torch.strided:
            raise TypeError(f"{arg} must be a dense (strided) tensor; got layout {t.layout}")
        if t.is_nested:
            raise TypeError(f"{arg} must be a dense (strided) tensor; got a nested tensor")


def check_dtypes(**named: torch.Tensor) -> torch.dtype:
    """All tensors bf16 or fp16 and of one dtype; returns it."""
    first_arg, first = next(iter(named.items()))
    for arg, t in named.items():
        if t.dtype not in DTYPES:
            raise TypeError(f"{arg} must be torch.bfloat16 or torch.float16; got {arg}.dtype={t.dtype}")
        if t.dtype != first.dtype:
            raise TypeError(
                f"{arg} must have the same dtype as {first_arg}; got {arg}.dtype={t.dtype} and "
                f"{first_arg}.dtype={first.dtype}"
            )
    return first.dtype


def check_devices(**named: torch.Tensor) -> torch.device:
    """All tensors on one device; returns it."""
    first_arg, first = next(iter(named.items()))
    for arg, t in named.items():
        if t.device != first.device:
            raise ValueError(
                f"{arg} must be on the same device as {first_arg}; got {arg} on {t.device} and "
                f"{first_arg} on {first.device}"
            )
    return first.device


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def _check_x(x: torch.Tensor, arg: str, w: torch.Tensor) -> None:
    """x of shape (..., H) with H = ``w.shape[1]`` (w is the weight named ``arg``); ValueError naming x."""
    H = w.shape[1]
    if x.dim() < 1 or x.shape[-1] != H:
        raise ValueError(
            f"x must have shape (..., H) with H = {arg}.shape[1]; got x {_shape(x)} and H={H} "
            f"({arg} {_shape(w)})"
        )


def _transposed(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether x's last dimension is the 2-D weight ``w``'s first, not its second: ``w`` given as its .T."""
    return x.dim() >= 1 and w.shape[1] != x.shape[-1] and w.shape[0] == x.shape[-1]


def _check_orientation(x: torch.Tensor, rows: str, stored: dict[str, str], **weights: torch.Tensor) -> None:
    """ValueError naming each 2-D weight of ``weights`` that looks transposed against x (:func:`_transposed`).

    ``rows`` is the weights' row count as the docs write it (``"I"``, ``"2I"``); ``stored[arg]`` names
    a weight of the right orientation (e.g. ``"gate_proj.weight as stored"``). When every weight looks
    transposed, x itself may be the argument at fault, and the message also gives x's rule.
    """
    bad = [arg for arg, w in weights.items() if _transposed(x, w)]
    if not bad:
        return
    names = " and ".join(bad)
    got = ", ".join(f"{arg} {_shape(w)}" for arg, w in weights.items())
    one = len(bad) == 1
    message = (
        f"{names} must be ({rows}, H) = (out_features, in_features), as nn.Linear.weight stores it; got {got} "
        f"and x {_shape(x)}: x's last dimension, {x.shape[-1]}, is {bad[0]}.shape[0], so {names} "
        f"{'looks' if one else 'look'} transposed: pass {' and '.join(f'{arg}.T' for arg in bad)}, i.e. "
        f"{' and '.join(stored[arg] for arg in bad)}, not {'its' if one else 'their'} .T"
    )
    if len(bad) == len(weights):
        first, w = next(iter(weights.items()))
        message += (f". If the weights are right, x is not: x must have shape (..., H) with H = {first}.shape[1] "
                    f"= {w.shape[1]}")
    raise ValueError(message)


def check_weight_pair(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> tuple[int, int]:
    """w_gate and w_up 2-D (I, H) of one shape, x (..., H); returns (I, H).

    Raises:
        ValueError: naming the argument at fault and showing the shapes: a weight not 2-D; a weight
            given transposed, (H, I) (x's last dimension is its first); w_gate and w_up of different
            shapes; x whose last dimension is not H.
    """
    for arg, w in (("w_gate", w_gate), ("w_up", w_up)):
        if w.dim() != 2:
            raise ValueError(f"{arg} must be 2-D (I, H); got {arg} of shape {_shape(w)}")
    stored = {"w_gate": "gate_proj.weight as stored", "w_up": "up_proj.weight as stored"}
    _check_orientation(x, "I", stored, w_gate=w_gate, w_up=w_up)
    if w_gate.shape != w_up.shape:
        raise ValueError(
            f"w_gate and w_up must have the same shape (I, H); got w_gate {_shape(w_gate)} "
            f"and w_up {_shape(w_up)}"
        )
    _check_x(x, "w_gate", w_gate)
    I, H = w_gate.shape
    return I, H


def check_packed(x: torch.Tensor, w_packed: torch.Tensor) -> tuple[int, int]:
    """w_packed 2-D (2I, H) with an even row count, x (..., H); returns (I, H).

    Raises:
        ValueError: naming the argument at fault and showing the shapes: w_packed not 2-D, given
            transposed, (H, 2I) (x's last dimension is its first), or with an odd row count; x whose
            last dimension is not H.
    """
    if w_packed.dim() != 2:
        raise ValueError(f"w_packed must be 2-D (2I, H); got w_packed of shape {_shape(w_packed)}")
    stored = {"w_packed": "pack_gate_up(gate_proj.weight, up_proj.weight) or their torch.cat"}
    _check_orientation(x, "2I", stored, w_packed=w_packed)
    rows, H = w_packed.shape
    if rows % 2 != 0:
        raise ValueError(
            f"w_packed must have an even number of rows (2I); got {rows} rows (w_packed {_shape(w_packed)})"
        )
    _check_x(x, "w_packed", w_packed)
    return rows // 2, H


def check_alignment(I: int, H: int) -> None:
    """The kernels' TMA rules: H and I multiples of 8 (16-byte rows), H > 0."""
    if H % ALIGN != 0 or H == 0:
        raise ValueError(f"H must be a positive multiple of {ALIGN} for 16-byte TMA rows; got H={H}")
    if I % ALIGN != 0:
        raise ValueError(f"I must be a multiple of {ALIGN} for 16-byte TMA rows; got I={I}")


_CAPABILITY: dict[int, tuple[int, int]] = {}


@torch.compiler.assume_constant_result
def _capability(index: int) -> tuple[int, int]:
    # a device's compute capability never changes: ask the driver once per device
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = tuple(torch.cuda.get_device_capability(index))
    return cap


def hopper_status(device: torch.device) -> str | None:
    """None if the kernels can run on ``device``; else a sentence saying why not."""
    if device.type != "cuda":
        return f"tensors are on {device}, not on a CUDA device"
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _capability(index)
    if tuple(cap) != (9, 0):
        return (
            f"device cuda:{index} has compute capability {cap[0]}.{cap[1]}; the kernels need an "
            "NVIDIA Hopper GPU (compute capability 9.0, sm_90a)"
        )
    return None


def fallback_cost(device: torch.device) -> str:
    """A sentence on the PyTorch fallback's speed on ``device``'s type against the unfused bf16/fp16
    products it replaces: fixed text per device type (``"cpu"``, ``"cuda"``, others), for warnings."""
    if device.type == "cpu":
        return (
            "On a CPU with bf16/fp16 matrix instructions (AVX-512 BF16, AMX) it can take about 1-5x the time of "
            "eager bf16/fp16 (M = 1-512 tokens, H = 896, I = 4864), so a patched model can run slower than the "
            "stock one; on an AVX2-only CPU it can be faster than eager from a few dozen tokens on and slower at "
            "decode sizes (M = 1-16)."
        )
    if device.type == "cuda":
        return (
            "On a GPU its fp32 products do not run on the bf16/fp16 tensor cores: it is slower than the unfused "
            "bf16/fp16 products it replaces, so a patched model runs slower than the stock one."
        )
    return f"Its speed against the unfused bf16/fp16 products has not been measured on {device.type}."


def resolve_backend(backend: str, device: torch.device, stacklevel: int | None = 4) -> str:
    """'cutlass' or 'torch'. 'auto' picks cutlass on Hopper, else torch with one warning per process
    (why the kernels cannot run, and :func:`fallback_cost`).

    An explicit 'cutlass' is returned as is: call :func:`require_hopper` after the argument checks.
    """
    check_choice("backend", backend, BACKENDS)
    if backend != "auto":
        return backend
    why = hopper_status(device)
    if why is None:
        return "cutlass"
    warn_once(
        "auto-backend",
        f"fused_swiglu: backend='auto' runs the PyTorch fallback because {why}. The fallback multiplies in fp32 "
        f"and rounds once, for correctness, not speed. {fallback_cost(device)}",
        stacklevel,
    )
    return "torch"


def require_hopper(device: torch.device) -> None:
    why = hopper_status(device)
    if why is not None:
        raise RuntimeError(f"backend='cutlass' cannot run: {why}")


def _library_dirs() -> tuple[str, ...]:
    """The folders of torch, transformers (where imported) and this package, each ending in a separator."""
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__))]
    transformers = sys.modules.get("transformers")
    if transformers is not None and getattr(transformers, "__file__", None):
        dirs.append(os.path.dirname(transformers.__file__))
    return tuple(os.path.join(d, "") for d in dirs)


def outside_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in this function's caller that names the first frame
    outside torch, transformers and this package: the user's line that led there."""
    dirs = _library_dirs()
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(dirs):
        frame, level = frame.f_back, level + 1
    return level


def autocast_dtype(kind: str) -> torch.dtype | None:
    """The dtype of the autocast region in force for device type ``kind`` (``x.device.type``), or None
    outside one, and for device types autocast does not know (``meta``, where PyTorch's own query
    raises)."""
    try:
        return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
    except RuntimeError:
        return None


def warn_once(key: str, message: str, stacklevel: int | None = 3) -> None:
    """Warn once per process for ``key``; ``stacklevel`` as in warnings.warn, counted from here (None:
    the first frame outside torch, transformers and this package, :func:`outside_stacklevel`)."""
    if key not in _warned and not torch.compiler.is_compiling():  # no warning inside a traced graph
        if stacklevel is None:
            stacklevel = outside_stacklevel()
        # marked as given only once warn() returns: under an "error" filter the warning is raised
        # again on the next call instead of disappearing
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)
        _warned.add(key)
