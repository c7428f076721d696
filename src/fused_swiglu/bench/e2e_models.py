"""Hugging Face causal-LM models for ``fused-swiglu bench e2e``, built from configs in code.

No hub access: each model is a ``transformers`` config with the real model's dimensions (public
``config.json`` of each checkpoint) and random weights, initialised directly on the target device in
the benchmark's dtype, at full depth. The decoder MLPs are Hugging Face's SwiGLU blocks
(``gate_proj``, ``up_proj``, ``down_proj``, SiLU), the blocks :func:`fused_swiglu.fuse_swiglu_mlps`
patches. The specs and their names import no PyTorch (the command's parsers list them); :func:`build`
loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MAX_POSITIONS = 4096  # enough for the benchmark's prompts, prefill and decode


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture. ``family``: ``"qwen2"``, ``"llama"``, ``"qwen3"`` or ``"qwen3_moe"``
    (the transformers config class); ``head_dim`` None: hidden_size / num_heads. A ``"qwen3_moe"`` model
    routes every decoder layer's MLP through ``experts`` experts of ``expert_intermediate_size`` rows,
    ``experts_per_token`` of them per token (top-k weights normalised), and has no dense MLP
    (``intermediate_size`` is the config's, unused)."""

    name: str
    family: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    rope_theta: float
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0

    def config(self):
        """The transformers config (``attn_implementation="sdpa"``).

        Raises:
            ImportError: transformers is not installed.
            ValueError: an unknown ``family``.
        """
        import transformers

        classes = {"qwen2": "Qwen2Config", "llama": "LlamaConfig", "qwen3": "Qwen3Config",
                   "qwen3_moe": "Qwen3MoeConfig"}
        if self.family not in classes:
            raise ValueError(f"family must be one of {', '.join(classes)}; got {self.family!r}")
        kwargs = dict(
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads, vocab_size=self.vocab_size, rope_theta=self.rope_theta,
            tie_word_embeddings=self.tie_word_embeddings, max_position_embeddings=MAX_POSITIONS,
            hidden_act="silu", attn_implementation="sdpa",
        )
        if self.head_dim is not None:
            kwargs["head_dim"] = self.head_dim
        if self.family == "qwen3_moe":
            kwargs.update(num_experts=self.experts, num_experts_per_tok=self.experts_per_token,
                          moe_intermediate_size=self.expert_intermediate_size, norm_topk_prob=True,
                          decoder_sparse_step=1, mlp_only_layers=[])
        return getattr(transformers, classes[self.family])(**kwargs)


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("Qwen2.5-0.5B", "qwen2", 896, 4864, 24, 14, 2, 151936, 1e6, tie_word_embeddings=True),
    ModelSpec("Qwen2.5-7B", "qwen2", 3584, 18944, 28, 28, 4, 152064, 1e6),
    ModelSpec("Llama-3-8B", "llama", 4096, 14336, 32, 32, 8, 128256, 500000.0),
    ModelSpec("Qwen3-1.7B", "qwen3", 2048, 6144, 28, 16, 8, 151936, 1e6, tie_word_embeddings=True, head_dim=128),
)
QUICK_MODELS = ("Qwen2.5-0.5B",)
# Found by name but not run by default: Qwen2.5-7B's dimensions at a depth whose training step
# (4 x 2048 tokens, weights, gradients and activations) fits one GPU comfortably
EXTRA_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("Qwen2.5-7B-8L", "qwen2", 3584, 18944, 8, 28, 4, 152064, 1e6),
    # the mixture-of-experts model at its real size (about 30.5 B parameters, 61 GB in bf16): its 48
    # experts layers are what fuse_swiglu_mlps patches
    ModelSpec("Qwen3-30B-A3B", "qwen3_moe", 2048, 6144, 48, 32, 4, 151936, 1e6, head_dim=128, experts=128,
              experts_per_token=8, expert_intermediate_size=768),
)

# Small stand-ins of the same architectures, for tests (any device, a few milliseconds a forward)
TINY_QWEN2 = ModelSpec("tiny-qwen2", "qwen2", 64, 128, 2, 4, 2, 256, 1e6, tie_word_embeddings=True)
TINY_LLAMA = ModelSpec("tiny-llama", "llama", 64, 128, 2, 4, 2, 256, 500000.0)
TINY_QWEN3_MOE = ModelSpec("tiny-qwen3-moe", "qwen3_moe", 64, 128, 2, 4, 2, 256, 1e6, head_dim=16, experts=8,
                           experts_per_token=2, expert_intermediate_size=32)


def names() -> list[str]:
    return [s.name for s in (*MODELS, *EXTRA_MODELS)]


def find(models: list[str | ModelSpec] | None) -> list[ModelSpec]:
    """Models by name (case-insensitive; :data:`MODELS`) or as ModelSpecs; None: all of :data:`MODELS`.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if models is None:
        return list(MODELS)
    by_name = {s.name.lower(): s for s in (*MODELS, *EXTRA_MODELS)}
    found = []
    for m in models:
        if isinstance(m, ModelSpec):
            found.append(m)
        elif m.lower() in by_name:
            found.append(by_name[m.lower()])
        else:
            raise ValueError(f"unknown model {m!r} for the end-to-end benchmark; known: {', '.join(names())}")
    return found


def build(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """``spec``'s causal LM with random weights (transformers' own initialisation, seeded), created
    on ``device`` in ``dtype`` (no copy through host memory), in eval mode.

    transformers 5 takes ``dtype=``; older releases take ``torch_dtype=``. Whichever is accepted,
    the parameters' dtype is checked and converted if a release ignored the keyword.

    Raises:
        ImportError: transformers is not installed.
    """
    import torch
    from transformers import AutoModelForCausalLM

    cfg = spec.config()
    torch.manual_seed(seed)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:  # a release before the dtype= keyword
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    if next(model.parameters()).dtype != dtype:
        model = model.to(dtype)
    return model.eval()


def n_params(model) -> int:
    """Parameters counted once (tied embeddings once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
