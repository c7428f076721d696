"""Qwen2.5 dense models' decoder MLP dimensions.

Source: the public model configs (``config.json`` of each Qwen/Qwen2.5-* model: ``hidden_size``,
``intermediate_size``). The MLP computes ``down_proj(silu(gate_proj(x)) * up_proj(x))`` with
gate_proj and up_proj weights of shape ``(intermediate_size, hidden_size)``.
"""

from __future__ import annotations

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


def find(names: list[str] | None) -> list[MlpShape]:
    """Models by name: full (``Qwen2.5-7B``) or size (``7B``), case-insensitive; None: all.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if not names:
        return list(MODELS)
    out = []
    for name in names:
        key = name.lower().removeprefix("qwen2.5-")
        match = [m for m in MODELS if m.model.lower().removeprefix("qwen2.5-") == key]
        if not match:
            known = ", ".join(m.model.removeprefix("Qwen2.5-") for m in MODELS)
            raise ValueError(f"unknown model {name!r}; known: {known}")
        out.extend(match)
    return out
