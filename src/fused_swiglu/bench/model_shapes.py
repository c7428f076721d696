"""The problems of the config choice's sweep and tuning: the public shapes of
:data:`fused_swiglu.bench.shapes.SWEEP_MODELS` at :data:`SWEEP_TOKENS`, and the Qwen2.5 shapes at the
benchmark's token counts."""

from __future__ import annotations

from .shapes import MODELS, SWEEP_MODELS, TOKENS, MlpShape

__all__ = ["SUSTAINED_MODELS", "SWEEP_MODELS", "SWEEP_TOKENS", "tune_problems"]

SWEEP_TOKENS: tuple[int, ...] = (1, 7, 16, 100, 128, 333, 512, 1000, 2048, 3000, 6000, 8192)


def tune_problems() -> list[tuple[int, int, int]]:
    """``fused-swiglu tune``'s default problems (M, N = I, K = H): the sweep's shapes at its token
    counts and the Qwen2.5 shapes at the benchmark's."""
    out = [(M, s.intermediate_size, s.hidden_size) for s in SWEEP_MODELS for M in SWEEP_TOKENS]
    out += [(M, s.intermediate_size, s.hidden_size) for s in MODELS for M in TOKENS]
    return out


# ``fused-swiglu tune --sustained``'s default shapes: the seven Qwen2.5 ones and eight public ones of
# other families and sizes
SUSTAINED_MODELS: tuple[MlpShape, ...] = (
    *MODELS,
    *(m for m in SWEEP_MODELS if m.model in ("Gemma-2-2B", "Llama-3-8B", "Mistral-Nemo-12B", "Phi-3-medium",
                                             "Yi-34B", "Llama-3-70B")),
    MlpShape("DeepSeek-V3-dense", 7168, 18432),
    MlpShape("Qwen3-32B", 5120, 25600),
)
