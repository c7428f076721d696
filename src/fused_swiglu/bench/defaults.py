"""The names and defaults of the benchmark runs, as plain values: the methods, token counts,
repetitions and warm-up of each timed run, the tensor-parallel run's models, the end-to-end run's
steps and the timing protocols.

The benchmark modules (:mod:`~fused_swiglu.bench.methods`, :mod:`~fused_swiglu.bench.run`,
:mod:`~fused_swiglu.bench.backward`, :mod:`~fused_swiglu.bench.fp8`, :mod:`~fused_swiglu.bench.tp`,
:mod:`~fused_swiglu.bench.e2e`, :mod:`~fused_swiglu.bench.e2e_modes`, :mod:`~fused_swiglu.bench.e2e_ab`,
:mod:`~fused_swiglu.bench.timing`)
take them from here, under their own names (``backward.METHODS`` is :data:`BACKWARD_METHODS`). This
module imports no PyTorch, so that the ``fused-swiglu`` parsers, which list these values in their
help and choices, answer ``--help`` and usage errors without loading it.
"""

from __future__ import annotations

from ..tuning import SUSTAINED_FROM_M

__all__ = [
    "BACKWARD_METHODS", "BACKWARD_REPS", "BACKWARD_TOKENS", "BACKWARD_WARMUP_MS", "E2E_AB_COMPILED_MODES",
    "E2E_AB_DEFAULT_MODES", "E2E_AB_DEFAULT_VARIANTS", "E2E_AB_MODES", "E2E_AB_VARIANTS", "E2E_ACCURACY", "E2E_MODES", "E2E_STEPS",
    "FP8_METHODS", "FP8_REPS", "FP8_TOKENS", "FP8_WARMUP_MS", "KERNEL_METHODS", "KERNEL_REPS", "KERNEL_WARMUP_MS",
    "MOE_METHODS", "MOE_REPS", "MOE_TILE_METHODS", "MOE_TOKENS", "MOE_WARMUP_MS", "PROTOCOLS", "SUSTAINED_FROM_M", "SUSTAINED_SECONDS", "TP_MODELS", "TP_REPS", "TP_TOKENS",
    "TUNE_SUSTAINED_SECONDS", "TUNE_SUSTAINED_TOKENS", "TUNE_FAMILY_GROUPS", "TUNE_FAMILY_TOKENS",
    "TUNE_TRAINING_TOKENS",
]

# bench (the kernels; its token counts are fused_swiglu.bench.shapes.TOKENS)
KERNEL_METHODS = ("eager", "cublas_gemm", "torch_compile", "fused_packed", "fused_dual", "fused_packed_promoted",
                  "fused_dual_promoted", "quack")
KERNEL_WARMUP_MS = 25.0  # warm-up per method and shape
KERNEL_REPS = 50  # timed repetitions per method and shape

# bench backward
BACKWARD_METHODS = ("eager", "compiled", "fused_dual", "fused_packed", "recompute_dual")
BACKWARD_TOKENS = (512, 2048, 8192)
BACKWARD_REPS = 20
BACKWARD_WARMUP_MS = 200.0

# bench moe (its shapes: fused_swiglu.bench.shapes.MOE_MODELS); hf_*: transformers' experts forwards; fused:
# fused_swiglu.experts; fc1_*: the gate/up projection and SwiGLU alone, routing included
MOE_METHODS = ("hf_eager", "hf_batched_mm", "hf_grouped_mm", "quack_varlen", "fused", "fc1_grouped_mm",
               "fc1_quack_varlen", "fc1_fused")
# the fused methods with the grouped config of one token tile (fused_swiglu.configs.grouped.GROUPED_TOKEN_TILES),
# named only: fused_t16, fc1_fused_t64, ...; _coop: the Cooperative grouped config (256 weight rows by 128
# tokens) in the token-tile groups the choice's rule gives its weight tiles
MOE_TILE_METHODS = tuple(f"{method}_t{tile}" for method in ("fused", "fc1_fused") for tile in (16, 64, 128)) + (
    "fused_coop", "fc1_fused_coop")
MOE_TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
MOE_REPS = 30
MOE_WARMUP_MS = 100.0

# bench fp8 (its shapes: fused_swiglu.bench.shapes.MODELS and FP8_MODELS)
FP8_METHODS = ("fp8_fused", "fp8_fused_dual", "fp8_fused_promoted", "fp8_unfused", "fp8_fused_e4m3out",
               "fp8_unfused_e4m3out", "fp8_fused_blockwise", "fp8_unfused_blockwise", "fused_packed")
FP8_TOKENS = (1, 16, 128, 512, 2048, 8192)
FP8_REPS = 30
FP8_WARMUP_MS = 100.0

# bench tp
TP_TOKENS = (1, 128, 2048, 8192)
TP_MODELS = ("32B", "72B")
TP_REPS = 30

# bench e2e: the modes of fused_swiglu.bench.e2e_modes, and the accuracy step selectable with them
E2E_MODES = ("eager_decode_b1", "eager_decode_b8", "captured_decode_step", "compiled_decode", "prefill", "training")
E2E_ACCURACY = "accuracy"
E2E_STEPS = (*E2E_MODES, E2E_ACCURACY)

# bench e2e-ab: its modes; the variants it times against each other (stock: Hugging Face's MLPs; patched:
# fuse_swiglu_mlps; backend: the stock model compiled with fused_backend()), the pair timed by default,
# and the modes that compile the model, the only ones where the backend variant applies
E2E_AB_MODES = ("compiled_decode", "captured_decode_step", "prefill", "training")
E2E_AB_DEFAULT_MODES = ("compiled_decode", "captured_decode_step", "prefill")  # training: asked for by name
E2E_AB_VARIANTS = ("stock", "patched", "backend")
E2E_AB_DEFAULT_VARIANTS = ("stock", "patched")
E2E_AB_COMPILED_MODES = ("compiled_decode",)

# the timing protocols of CUDA-graph replays (fused_swiglu.bench.timing); "auto": the sustained one from
# M = SUSTAINED_FROM_M on
PROTOCOLS = ("auto", "sustained", "interleaved")
SUSTAINED_SECONDS = 1.0  # per method and cell

# tune --sustained: token counts of its problems (3000 and 4097: counts off the 128-token tiles, whose last
# round of tiles the costs must price too), and each launch's time back to back at the power cap
TUNE_SUSTAINED_TOKENS = (2048, 3000, 4097, 6000, 8192)
TUNE_SUSTAINED_SECONDS = 0.12
# tune --families: the token counts the e4m3 families are timed at (their bands' bounds come from these), the
# training kernels' (prefill- and training-sized batches; their bands run by H), and the groups --families names
TUNE_FAMILY_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
TUNE_TRAINING_TOKENS = (2048, 8192)
TUNE_FAMILY_GROUPS = {
    "fp8": (("packed_fp8", "fast"), ("packed_fp8", "promoted"), ("packed_fp8_e4m3out", "fast"),
            ("packed_fp8_block", "fast"), ("dual_fp8", "fast")),
    "training": (("dual_store", "fast"), ("packed_store", "fast"), ("dswiglu", "fast")),
}
