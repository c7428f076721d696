"""Public SwiGLU MLP shapes beyond Qwen2.5, for the config choice's sweep (``fused-swiglu sweep``).

Source: each model's public ``config.json`` (``hidden_size``, ``intermediate_size``). Gemma-2 uses
GeGLU, not SwiGLU; its sizes stand for the Gemma-style shapes (the kernels do not care which gate
activation a model was trained with, only the shape).
"""

from __future__ import annotations

from .shapes import MODELS, TOKENS, MlpShape

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
SWEEP_TOKENS: tuple[int, ...] = (1, 7, 16, 100, 128, 333, 512, 1000, 2048, 3000, 6000, 8192)


def tune_problems() -> list[tuple[int, int, int]]:
    """``fused-swiglu tune``'s default problems (M, N = I, K = H): the sweep's shapes at its token
    counts and the Qwen2.5 shapes at the benchmark's."""
    out = [(M, s.intermediate_size, s.hidden_size) for s in SWEEP_MODELS for M in SWEEP_TOKENS]
    out += [(M, s.intermediate_size, s.hidden_size) for s in MODELS for M in TOKENS]
    return out


def find(names: list[str] | None) -> list[MlpShape]:
    """Shapes by name: a model of :data:`SWEEP_MODELS` (full name, case-insensitive), a Qwen2.5
    model or an ``HxI`` shape (as :func:`fused_swiglu.bench.shapes.find`); None: :data:`SWEEP_MODELS`.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or a malformed ``HxI``.
    """
    from .shapes import find as find_qwen

    if not names:
        return list(SWEEP_MODELS)
    by_name = {s.model.lower(): s for s in SWEEP_MODELS}
    out: list[MlpShape] = []
    for name in names:
        if name.lower() in by_name:
            out.append(by_name[name.lower()])
            continue
        try:
            out += find_qwen([name])
        except ValueError:
            known = ", ".join(s.model for s in SWEEP_MODELS)
            raise ValueError(f"unknown model {name!r}; known: {known}, the Qwen2.5 sizes, or a shape as HxI") from None
    return out
