"""Decoder MLP dimensions of public SwiGLU models: the seven Qwen2.5 dense models (the benchmark's),
the public shapes beyond them (the config choice's sweep, ``fused-swiglu sweep``) and the FP8
checkpoints' shapes (``fused-swiglu bench fp8``); the routed experts of mixture-of-experts models
(``fused-swiglu bench moe``).

Source: each model's public ``config.json`` (``hidden_size``, ``intermediate_size``). The MLP
computes ``down_proj(silu(gate_proj(x)) * up_proj(x))`` with gate_proj and up_proj weights of shape
``(intermediate_size, hidden_size)``. Gemma-2 uses GeGLU, not SwiGLU; its sizes stand for the
Gemma-style shapes (the kernels do not care which gate activation a model was trained with).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import catalog


@dataclass(frozen=True)
class MlpShape:
    model: str
    hidden_size: int  # H
    intermediate_size: int  # I


# the seven Qwen2.5 dense models by size, as --models names them (``7B``): (hidden_size, intermediate_size)
QWEN2_5_BY_SIZE: dict[str, tuple[int, int]] = {
    "0.5B": (896, 4864),
    "1.5B": (1536, 8960),
    "3B": (2048, 11008),
    "7B": (3584, 18944),
    "14B": (5120, 13824),
    "32B": (5120, 27648),
    "72B": (8192, 29568),
}
MODELS: tuple[MlpShape, ...] = tuple(MlpShape(f"Qwen2.5-{size}", H, I) for size, (H, I) in QWEN2_5_BY_SIZE.items())
TOKENS: tuple[int, ...] = (1, 16, 128, 512, 2048, 8192)

SWEEP_MODELS: tuple[MlpShape, ...] = (
    MlpShape("Qwen3-0.6B", 1024, 3072),
    MlpShape("Llama-3.2-1B", 2048, 8192),
    MlpShape("Gemma-2-2B", 2304, 9216),
    MlpShape("Qwen3-4B", 2560, 9728),
    MlpShape("Llama-3.2-3B", 3072, 8192),
    MlpShape("Llama-2-7B", 4096, 11008),
    MlpShape("Qwen3-8B", 4096, 12288),
    MlpShape("Llama-3-8B", 4096, 14336),
    MlpShape("Mistral-Nemo-12B", 5120, 14336),
    MlpShape("Phi-3-medium", 5120, 17920),
    MlpShape("Mistral-Small-24B", 5120, 32768),
    MlpShape("Yi-34B", 7168, 20480),
    MlpShape("DeepSeek-67B", 8192, 22016),
    MlpShape("Llama-3-70B", 8192, 28672),
)

# FP8 checkpoints' MLP shapes beside the Qwen2.5 ones (bench fp8)
FP8_MODELS: tuple[MlpShape, ...] = (
    MlpShape("Qwen3-8B", 4096, 12288),
    MlpShape("Qwen3-32B", 5120, 25600),
    MlpShape("Llama-3.1-70B", 8192, 28672),
    MlpShape("DeepSeek-V3-dense", 7168, 18432),
)


MAX_SIZE = 2**31 - 1  # the kernels' problem sizes are 32-bit


def parse_custom(name: str) -> MlpShape | None:
    """``"HxI"`` (e.g. ``"4096x14336"``: hidden size 4096, intermediate size 14336; ASCII digits) as an
    MlpShape named ``"HxI"``; None if ``name`` does not have that form.

    Raises:
        ValueError: H or I is missing, not a positive multiple of 8 (the kernels' 16-byte TMA rows),
            or exceeds 2**31 - 1.
    """
    match = re.fullmatch(r"([0-9]+)[xX]([0-9]+)", name)
    if match is None:
        if re.fullmatch(r"[0-9]*[xX][0-9]*", name):  # "4096x", "x14336": a shape with a size missing
            raise ValueError(f"custom shape {name!r}: give both sizes as HxI, e.g. 4096x14336")
        return None
    H, I = int(match[1]), int(match[2])
    if H <= 0 or I <= 0 or H % 8 or I % 8 or max(H, I) > MAX_SIZE:
        raise ValueError(f"custom shape {name!r}: hidden size H and intermediate size I must be positive "
                         f"multiples of 8, at most 2**31 - 1; got H={H}, I={I}")
    return MlpShape(f"{H}x{I}", H, I)


@dataclass(frozen=True)
class MoeShape:
    """A mixture-of-experts layer's routed experts: each expert a SwiGLU MLP of hidden size H and
    intermediate size I, each token routed to ``top_k`` of ``experts`` (``config.json``: ``hidden_size``,
    ``moe_intermediate_size`` or ``intermediate_size``, ``num_experts`` / ``num_local_experts`` /
    ``n_routed_experts``, ``num_experts_per_tok``)."""

    model: str
    hidden_size: int  # H
    intermediate_size: int  # I, per expert
    experts: int  # E
    top_k: int

    def __post_init__(self):
        if min(self.hidden_size, self.intermediate_size, self.experts, self.top_k) < 1 or self.top_k > self.experts:
            raise ValueError(f"MoE shape {self.model!r}: sizes must be positive and top-k at most the experts; got "
                             f"H={self.hidden_size}, I={self.intermediate_size}, E={self.experts}, k={self.top_k}")


MOE_MODELS: tuple[MoeShape, ...] = (
    MoeShape("Qwen3-30B-A3B", 2048, 768, 128, 8),
    MoeShape("Qwen3-235B-A22B", 4096, 1536, 128, 8),
    MoeShape("Mixtral-8x7B", 4096, 14336, 8, 2),
    MoeShape("DeepSeek-V3", 7168, 2048, 256, 8),  # its routed experts (the shared expert is a dense MLP)
)


def find_moe(names: list[str] | None) -> list[MoeShape]:
    """MoE shapes by name or as ``HxIxExK`` (e.g. ``2048x768x128x8``), case-insensitive; None or empty:
    :data:`MOE_MODELS`.

    Raises:
        ValueError: an unknown name; sizes not four numbers, H or I not a positive multiple of 8 (16-byte
            rows) or above 2**31 - 1, E or top-k not positive, or top-k above E.
    """
    if not names:
        return list(MOE_MODELS)
    known = {m.model.lower(): m for m in MOE_MODELS}
    out = []
    for name in names:
        if name.lower() in known:
            out.append(known[name.lower()])
            continue
        parts = name.lower().split("x")
        if not all(p.isdigit() for p in parts) or len(parts) < 2:
            raise ValueError(f"unknown MoE shape {name!r}; known: {', '.join(m.model for m in MOE_MODELS)}, "
                             "or HxIxExK (hidden, expert intermediate size, experts, top-k)")
        if len(parts) != 4:
            raise ValueError(f"MoE shape {name!r}: HxIxExK takes four numbers (hidden, expert intermediate size, "
                             f"experts, top-k); got {len(parts)}")
        H, I, E, K = map(int, parts)
        if min(E, K) < 1 or K > E:
            raise ValueError(f"MoE shape {name!r}: sizes must be positive and top-k at most the experts")
        for what, v in (("H", H), ("I", I)):
            if v < 1 or v % 8 or v > MAX_SIZE:
                raise ValueError(f"MoE shape {name!r}: {what} must be a positive multiple of 8 (16-byte rows) up to "
                                 f"2**31 - 1; got {what}={v}")
        out.append(MoeShape(name, H, I, E, K))
    return out


def find(names: list[str] | None, default: tuple[MlpShape, ...] = MODELS) -> list[MlpShape]:
    """Shapes by name: a model of :data:`MODELS` or :data:`SWEEP_MODELS` by full name (``Qwen2.5-7B``,
    ``Llama-3-8B``), a Qwen2.5 model by size (``7B``), case-insensitive, or any MLP shape as ``HxI``
    (hidden x intermediate size, e.g. ``4096x14336``); None or empty: ``default``. A shape named twice
    (also as a model and as ``HxI``) is listed once, where first named.

    Raises:
        ValueError: an unknown name (the message lists the known ones), or an ``HxI`` whose sizes are
            not positive multiples of 8 up to 2**31 - 1.
    """
    if not names:
        return list(default)
    by_name = {m.model.lower(): m for m in (*MODELS, *SWEEP_MODELS)}
    by_name.update({size.lower(): m for size, m in zip(QWEN2_5_BY_SIZE, MODELS)})
    out: list[MlpShape] = []
    seen: set[tuple[int, int]] = set()
    for name in names:
        m = parse_custom(name) or by_name.get(name.lower())
        if m is None:
            known = ", ".join([*QWEN2_5_BY_SIZE, *(m.model for m in SWEEP_MODELS)])
            raise ValueError(f"unknown model {name!r}; known: {known}, or a shape as HxI (e.g. 4096x14336)")
        if (m.hidden_size, m.intermediate_size) not in seen:
            seen.add((m.hidden_size, m.intermediate_size))
            out.append(m)
    return out


def find_fp8(names: list[str] | None) -> list[MlpShape]:
    """``--models`` of ``bench fp8``: names of :data:`FP8_MODELS` (case-insensitive), else as :func:`find`; None
    or empty: :data:`MODELS` and :data:`FP8_MODELS`.

    Raises:
        ValueError: an unknown name (as :func:`find`).
    """
    if not names:
        return list(MODELS + FP8_MODELS)
    own = {m.model.lower(): m for m in FP8_MODELS}
    try:
        return [own[n.lower()] if n.lower() in own else find([n])[0] for n in names]
    except ValueError as e:
        raise ValueError(f"{e}; or an FP8 checkpoint's shape: {', '.join(m.model for m in FP8_MODELS)}") from None


def check_family_shapes(shapes, families) -> None:
    """Whether ``families`` ((kernel, accumulation) pairs of tune --families) can be timed on ``shapes``
    (:class:`MlpShape`): H and I multiples of 8 (16-byte rows), H of 16 for the e4m3 kernels (their k-tiles
    of 16 bytes), and I of 128 for e4m3 y (``packed_fp8_e4m3out``: whole 1 x 128 scale groups, as the tune's
    inputs are made).

    Raises:
        ValueError: a shape outside that, naming it and the rule.
    """
    e4m3 = any(catalog.BANDED_FAMILIES[kernel][0] == "M" for kernel, _ in families)
    e4m3_out = any(kernel == "packed_fp8_e4m3out" for kernel, _ in families)
    h, i = (16 if e4m3 else 8), (128 if e4m3_out else 8)
    why = "e4m3 y's 1 x 128 groups" if e4m3_out else "the e4m3 kernels' rows" if e4m3 else "16-byte rows"
    for s in shapes:
        if s.hidden_size % h or s.intermediate_size % i:
            raise ValueError(f"{s.model}: tune --families takes H a multiple of {h} and I of {i} ({why}); "
                             f"got H={s.hidden_size}, I={s.intermediate_size}")
