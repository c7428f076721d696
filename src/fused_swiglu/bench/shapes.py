"""Qwen2.5 dense models' decoder MLP dimensions.

Source: the public model configs (``config.json`` of each Qwen/Qwen2.5-* model: ``hidden_size``,
``intermediate_size``). The MLP computes ``down_proj(silu(gate_proj(x)) * up_proj(x))`` with
gate_proj and up_proj weights of shape ``(intermediate_size, hidden_size)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MlpShape:
    model: str
    hidden_size: int  # H
    intermediate_size: int  # I


MODELS: tuple[MlpShape, ...] = (
    MlpShape("Qwen2.5-0.5B", 896, 4864),
    MlpShape("Qwen2.5-1.5B", 1536, 8960),
    MlpShape("Qwen2.5-3B", 2048, 11008),
    MlpShape("Qwen2.5-7B", 3584, 18944),
    MlpShape("Qwen2.5-14B", 5120, 13824),
    MlpShape("Qwen2.5-32B", 5120, 27648),
    MlpShape("Qwen2.5-72B", 8192, 29568),
)
TOKENS: tuple[int, ...] = (1, 16, 128, 512, 2048, 8192)


MAX_SIZE = 2**31 - 1  # the kernels' problem sizes are 32-bit


def parse_custom(name: str) -> MlpShape | None:
    """``"HxI"`` (e.g. ``"4096x14336"``: hidden size 4096, intermediate size 14336; ASCII digits) as an
    MlpShape named ``"HxI"``; None if ``name`` does not have that form.

    Raises:
        ValueError: H or I is not a positive multiple of 8 (the kernels' 16-byte TMA rows) or exceeds
            2**31 - 1.
    """
    match = re.fullmatch(r"([0-9]+)[xX]([0-9]+)", name)
    if match is None:
        return None
    H, I = int(match[1]), int(match[2])
    if H <= 0 or I <= 0 or H % 8 or I % 8 or max(H, I) > MAX_SIZE:
        raise ValueError(f"custom shape {name!r}: hidden size H and intermediate size I must be positive "
                         f"multiples of 8, at most 2**31 - 1; got H={H}, I={I}")
    return MlpShape(f"{H}x{I}", H, I)


def find(names: list[str] | None) -> list[MlpShape]:
    """Models by name: full (``Qwen2.5-7B``) or size (``7B``), case-insensitive, or any MLP shape as
    ``HxI`` (hidden x intermediate size, e.g. ``4096x14336``); None: the seven Qwen2.5 models. A shape
    named twice (also as a model and as ``HxI``) is listed once, where first named.

    Raises:
        ValueError: an unknown name (the message lists the known ones), or an ``HxI`` whose sizes are
            not positive multiples of 8 up to 2**31 - 1.
    """
    if not names:
        return list(MODELS)
    out: list[MlpShape] = []
    seen: set[tuple[int, int]] = set()
    for name in names:
        custom = parse_custom(name)
        if custom is not None:
            found = [custom]
        else:
            key = name.lower().removeprefix("qwen2.5-")
            found = [m for m in MODELS if m.model.lower().removeprefix("qwen2.5-") == key]
            if not found:
                known = ", ".join(m.model.removeprefix("Qwen2.5-") for m in MODELS)
                raise ValueError(f"unknown model {name!r}; known: {known}, or a shape as HxI (e.g. 4096x14336)")
        for m in found:
            if (m.hidden_size, m.intermediate_size) not in seen:
                seen.add((m.hidden_size, m.intermediate_size))
                out.append(m)
    return out
