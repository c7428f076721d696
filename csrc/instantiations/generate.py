#!/usr/bin/env python3
"""Writes one translation unit per kernel configuration, and registry.inc listing them.

Run from anywhere: ``python3 csrc/instantiations/generate.py``. The generated files are committed,
so building needs no Python step. Edit CONFIGS below to add or remove a configuration; the Python
selection table (src/fused_swiglu/configs.py) refers to them by name.
"""
from __future__ import annotations

import pathlib

HERE = pathlib.Path(__file__).resolve().parent

# (kernel, schedule, tile_m, tile_n, tile_k, cluster_m, cluster_n, promote_k_tiles); tile_n counts gate + up
# columns (*_swapab: tile_m counts them, tile_n tokens); promote_k_tiles 0 = GMMA accumulates all of K
# (see configs.hpp).
# dual 128x192 Pingpong is left out: its (64, 192) epilogue subtile next to 192 accumulators per thread
# spills registers (52 bytes with nvcc 13.0); see docs/perf-notes.md. Which config serves which
# problems: src/fused_swiglu/configs.py (TABLE rows, the wave and tail rules; choosable_configs() lists
# every config they can return, and a build test checks that this list compiles exactly those).
CONFIGS = [
    ("packed", "pingpong", 64, 64, 64, 1, 1, 0),     # small M where 2I/128 tiles leave most of a wave idle
    ("packed", "pingpong", 64, 128, 64, 1, 1, 0),    # small and mid M (to 256-384 by shape; entry 28)
    ("packed", "pingpong", 128, 128, 64, 2, 1, 0),   # M <= 2048 (and 384 < M <= 512 by default)
    ("packed", "pingpong", 128, 128, 64, 1, 2, 0),
    ("packed", "pingpong", 128, 192, 64, 2, 1, 0),   # M > 2048 on large weights; 32B at M <= 512
    ("packed", "pingpong", 64, 192, 64, 1, 1, 0),    # 256 < M <= 512 by shape; the tail rule (entry 39)
    ("packed", "pingpong", 128, 96, 64, 1, 1, 0),    # 320 < M <= 512 by shape (entries 27, 28)
    ("packed", "pingpong", 128, 160, 64, 2, 1, 0),   # 14B at 512 < M <= 2048 (entries 27, 29)
    ("dual", "pingpong", 64, 64, 64, 1, 1, 0),
    ("dual", "pingpong", 64, 128, 64, 1, 1, 0),
    ("dual", "pingpong", 128, 128, 64, 2, 1, 0),
    ("dual", "pingpong", 128, 128, 64, 1, 2, 0),
    ("dual", "pingpong", 128, 96, 64, 1, 1, 0),      # gate 48 + up 48 columns; as packed 128x96
    ("dual", "pingpong", 128, 160, 64, 2, 1, 0),     # gate 80 + up 80 columns; as packed 128x160
    ("dual", "pingpong", 64, 192, 64, 1, 1, 0),      # the tail rule only (entry 39; lost at M = 512, entry 11)
    # swap-AB forms for decode sizes: 128 weight rows by 16 tokens (perf-notes entries 25, 26)
    ("packed_swapab", "pingpong", 128, 16, 64, 1, 1, 0),
    ("dual_swapab", "pingpong", 128, 16, 64, 1, 1, 0),
    # accumulation="promoted": a second fp32 accumulator doubles the accumulator registers, so a
    # warpgroup's share of the tile is at most 64 x 192 (Pingpong 128-row tiles would need 256).
    ("packed", "pingpong", 64, 128, 64, 1, 1, 4),    # M <= 512, and every M on weights below 5e7
    ("packed", "cooperative", 128, 192, 64, 2, 1, 4),
    ("dual", "pingpong", 64, 128, 64, 1, 1, 4),
    ("dual", "cooperative", 128, 128, 64, 2, 1, 4),
    # promoted swap-AB decode tiles: 16 accumulators and 16 partial sums per thread (perf-notes entry 59)
    ("packed_swapab", "pingpong", 128, 16, 64, 1, 1, 4),
    ("dual_swapab", "pingpong", 128, 16, 64, 1, 1, 4),
]
# Measured and dropped (docs/perf-notes.md): 128x256 Cooperative, 256x128 Cooperative, Stream-K;
# promotion every 1 or 2 k-tiles (entry 7); packed 64x256 and 64x128 / 64x192 with cluster 2x1; 128x112, 128x144 and 128x176 (one GMMA of that width; entry 27: 1-12 % slower per FLOP
# than 128x128, which their fuller last wave at M = 512 did not make up; dual 128x176 spills).
CANDIDATES: list[tuple] = []

# GMMA widths (N) that CuTe's atom selector offers by default. A tile whose N is not a multiple of one
# of the larger ones (160: N = 32 GMMAs x 5) needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED for one GMMA
# of the tile's width (perf-notes entry 27). The macro makes a translation unit compile ~1.7x longer
# (dual 128x128: 62 s -> 107 s), so only the translation units that need it define it. It only adds
# atoms and selector branches for widths the default selector lacks, so widths it offers pick the
# same atom in every translation unit.
DEFAULT_GMMA_N = (256, 192, 128, 96, 64, 32, 16, 8)


def needs_extended_gmma_shapes(tile_n: int) -> bool:
    """True when the default selector would not cover ``tile_n`` with one GMMA (the tile's full width)."""
    return next(n for n in DEFAULT_GMMA_N if tile_n % n == 0) != tile_n


DTYPES = {"bf16": ("cutlass::bfloat16_t", "FSW_DTYPE_BF16"), "fp16": ("cutlass::half_t", "FSW_DTYPE_FP16")}
KERNELS = {
    "packed": ("::fused_swiglu::kernel::PackedSwiGLUGemm", "FSW_KERNEL_PACKED",
               "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"),
    "dual": ("::fused_swiglu::kernel::DualSwiGLUGemm", "FSW_KERNEL_DUAL",
             "fused_swiglu/kernel/sm90_gemm_swiglu_dual.hpp"),
    # Kernel-2 with weights and tokens exchanged (tile_m weight rows, tile_n tokens): decode sizes
    "packed_swapab": ("::fused_swiglu::kernel::PackedSwapABSwiGLUGemm", "FSW_KERNEL_PACKED",
                      "fused_swiglu/kernel/sm90_gemm_swiglu_packed_swapab.hpp"),
    "dual_swapab": ("::fused_swiglu::kernel::DualSwapABSwiGLUGemm", "FSW_KERNEL_DUAL",
                    "fused_swiglu/kernel/sm90_gemm_swiglu_dual_swapab.hpp"),
}


def name_of(kernel, schedule, tm, tn, tk, cm, cn, promote, dtype) -> str:
    acc = f"_promote{promote}" if promote else ""
    return f"{kernel}_{schedule}_{tm}x{tn}x{tk}_{cm}x{cn}{acc}_{dtype}"


def main() -> None:
    for old in HERE.glob("*.cu"):
        old.unlink()
    names = []
    todo = [(c, DTYPES) for c in CONFIGS] + [(c, {"bf16": DTYPES["bf16"]}) for c in CANDIDATES]
    for (kernel, schedule, tm, tn, tk, cm, cn, promote), dtypes in todo:
        gemm, kind, header = KERNELS[kernel]
        for dtype, (element, dtype_enum) in dtypes.items():
            name = name_of(kernel, schedule, tm, tn, tk, cm, cn, promote, dtype)
            names.append(name)
            sched = {"pingpong": "Pingpong", "cooperative": "Cooperative"}[schedule]
            extended = ("// one GMMA of N = %d (see generate.py)\n#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n" % tn
                        if needs_extended_gmma_shapes(tn) else "")
            (HERE / f"{name}.cu").write_text(
                "// Generated by generate.py: one kernel configuration per translation unit.\n"
                f"{extended}"
                f'#include "{header}"\n'
                '#include "instantiation.hpp"\n\n'
                f"FSW_INSTANTIATE({name}, {gemm}, {kind}, {element}, {dtype_enum}, "
                f"{tm}, {tn}, {tk}, {cm}, {cn}, {sched}, {promote})\n"
            )
    lines = "".join(f"  FSW_CONFIG({n}) \\\n" for n in names)
    (HERE.parent / "capi" / "registry.inc").write_text(
        "// Generated by csrc/instantiations/generate.py: the compiled configurations.\n"
        f"#define FSW_CONFIG_LIST \\\n{lines}\n"
    )


if __name__ == "__main__":
    main()
