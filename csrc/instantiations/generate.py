#!/usr/bin/env python3
"""Writes one translation unit per kernel configuration, and registry.inc listing them.

Run from anywhere: ``python3 csrc/instantiations/generate.py``. The generated files are committed,
so building needs no Python step. To add or remove a configuration, edit src/fused_swiglu/catalog.py
(the list both the C++ build and the Python choice read) and run this script.
"""
from __future__ import annotations

import importlib.util
import pathlib

HERE = pathlib.Path(__file__).resolve().parent

# The one list of configs, shared with the Python side: src/fused_swiglu/catalog.py (loaded by path,
# so this script needs neither torch nor an installed package). Which config serves which problem:
# src/fused_swiglu/configs/ (legality, the cost model and the tuned overrides).
_spec = importlib.util.spec_from_file_location("catalog", HERE.parents[1] / "src" / "fused_swiglu" / "catalog.py")
catalog = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(catalog)
CONFIGS = [(e, catalog.DTYPES) for e in catalog.CONFIGS + catalog.TRAINING_CONFIGS] + [
    (e, catalog.FP8_DTYPES) for e in catalog.FP8_CONFIGS] + [(e, catalog.FP8_OUT_DTYPES) for e in catalog.FP8_OUT_CONFIGS] + [
    (e, catalog.FP8_DTYPES) for e in catalog.FP8_BLOCKWISE_CONFIGS] + [
    (e, catalog.FP8_DTYPES) for e in catalog.FP8_DUAL_CONFIGS] + [
    (e, catalog.DTYPES) for e in catalog.GROUPED_CONFIGS] + [(e, catalog.DTYPES) for e in catalog.DUAL_PAIRED_CONFIGS]
# Measured and dropped (docs/perf-notes.md): 128x256, 256x128 and 256x192 Cooperative (again with the
# MUFU epilogue), Stream-K; a 2x2 cluster on 128x192 Pingpong;
# promotion every 1 or 2 k-tiles; packed 64x256 and 64x128 / 64x192 with cluster 2x1; 128x112, 128x144 and
# 128x176 (one GMMA of that width: slower per FLOP than 128x128, which their fuller last wave at M = 512
# did not make up; dual 128x176 spills).
# Grouped swap-AB 128x192 (spills: the gate subtile its epilogue keeps beside 192-column accumulators).
# e4m3: 128x128 2x1 and 128x192 1x2 Pingpong, 256x128 2x1 Cooperative, swap-AB 128x16; e4m3 y: 128x256
# Cooperative under the stream-K scheduler; block scaling: 128x128 2x1 Cooperative (docs/fp8.md).

# GMMA widths (N) that CuTe's atom selector offers by default. A tile whose N is not a multiple of one
# of the larger ones (160: N = 32 GMMAs x 5) needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED for one GMMA
# of the tile's width. The macro makes a translation unit compile longer (docs/perf-notes.md), so only
# the translation units that need it define it. It only adds
# atoms and selector branches for widths the default selector lacks, so widths it offers pick the
# same atom in every translation unit.
DEFAULT_GMMA_N = (256, 192, 128, 96, 64, 32, 16, 8)


def needs_extended_gmma_shapes(tile_n: int) -> bool:
    """True when the default selector would not cover ``tile_n`` with one GMMA (the tile's full width)."""
    return next(n for n in DEFAULT_GMMA_N if tile_n % n == 0) != tile_n


# dtype -> (input element, its fsw_dtype, output element, its fsw_dtype)
DTYPES = {
    "bf16": ("cutlass::bfloat16_t", "FSW_DTYPE_BF16", "cutlass::bfloat16_t", "FSW_DTYPE_BF16"),
    "fp16": ("cutlass::half_t", "FSW_DTYPE_FP16", "cutlass::half_t", "FSW_DTYPE_FP16"),
    "e4m3": ("cutlass::float_e4m3_t", "FSW_DTYPE_E4M3", "cutlass::bfloat16_t", "FSW_DTYPE_BF16"),
    "e4m3_e4m3out": ("cutlass::float_e4m3_t", "FSW_DTYPE_E4M3", "cutlass::float_e4m3_t", "FSW_DTYPE_E4M3"),
}
KERNELS = {
    "packed": ("::fused_swiglu::kernel::PackedSwiGLUGemm", "FSW_KERNEL_PACKED",
               "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"),
    "dual": ("::fused_swiglu::kernel::DualSwiGLUGemm", "FSW_KERNEL_DUAL",
             "fused_swiglu/kernel/sm90_gemm_swiglu_dual.hpp"),
    # the dual kernel with gate and up rows paired by 8 in shared memory: the packed kernel's epilogue
    "dual_paired": ("::fused_swiglu::kernel::PairedDualSwiGLUGemm", "FSW_KERNEL_DUAL",
                    "fused_swiglu/kernel/sm90_gemm_swiglu_dual.hpp"),
    # The packed kernel with weights and tokens exchanged (tile_m weight rows, tile_n tokens): decode sizes
    "packed_swapab": ("::fused_swiglu::kernel::PackedSwapABSwiGLUGemm", "FSW_KERNEL_PACKED",
                      "fused_swiglu/kernel/sm90_gemm_swiglu_packed_swapab.hpp"),
    "dual_swapab": ("::fused_swiglu::kernel::DualSwapABSwiGLUGemm", "FSW_KERNEL_DUAL",
                    "fused_swiglu/kernel/sm90_gemm_swiglu_dual_swapab.hpp"),
    # training: the forward that also writes g and u, and the backward's dSwiGLU GEMM
    "packed_store": ("::fused_swiglu::kernel::PackedStoreSwiGLUGemm", "FSW_KERNEL_PACKED",
                     "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"),
    "dual_store": ("::fused_swiglu::kernel::DualStoreSwiGLUGemm", "FSW_KERNEL_DUAL",
                   "fused_swiglu/kernel/sm90_gemm_swiglu_dual.hpp"),
    "dswiglu": ("::fused_swiglu::kernel::DSwiGLUGemm", "FSW_KERNEL_DSWIGLU",
                "fused_swiglu/kernel/sm90_gemm_dswiglu.hpp"),
    # e4m3 inputs with dequantization scales, bfloat16 output
    "packed_fp8": ("::fused_swiglu::kernel::PackedFP8SwiGLUGemm", "FSW_KERNEL_PACKED",
                   "fused_swiglu/kernel/sm90_gemm_swiglu_packed_fp8.hpp"),
    # e4m3 inputs with 1 x 128 token-group and 128 x 128 weight-block scales, applied in the mainloop
    "packed_fp8_blockwise": ("::fused_swiglu::kernel::PackedBlockwiseFP8SwiGLUGemm", "FSW_KERNEL_PACKED",
                             "fused_swiglu/kernel/sm90_gemm_swiglu_packed_fp8_blockwise.hpp"),
    "packed_fp8_swapab": ("::fused_swiglu::kernel::PackedSwapABFP8SwiGLUGemm", "FSW_KERNEL_PACKED",
                          "fused_swiglu/kernel/sm90_gemm_swiglu_packed_fp8.hpp"),
    # the dual kernel on e4m3 x, W_gate and W_up with row scales, and its swap-AB form; bfloat16 output
    "dual_fp8": ("::fused_swiglu::kernel::DualFP8SwiGLUGemm", "FSW_KERNEL_DUAL",
                 "fused_swiglu/kernel/sm90_gemm_swiglu_dual_fp8.hpp"),
    "dual_fp8_swapab": ("::fused_swiglu::kernel::DualSwapABFP8SwiGLUGemm", "FSW_KERNEL_DUAL",
                        "fused_swiglu/kernel/sm90_gemm_swiglu_dual_fp8.hpp"),
    # the dual swap-AB kernel over the experts of a mixture-of-experts layer (gate_up_proj [E, 2I, H] in place)
    "grouped_dual_swapab": ("::fused_swiglu::kernel::GroupedDualSwapABSwiGLUGemm", "FSW_KERNEL_GROUPED_DUAL",
                            "fused_swiglu/kernel/sm90_gemm_swiglu_grouped_dual_swapab.hpp"),
}


name_of = catalog.name_of


def main() -> None:
    for old in HERE.glob("*.cu"):
        old.unlink()
    names = []
    for (kernel, schedule, tm, tn, tk, cm, cn, promote), dtypes in CONFIGS:
        gemm, kind, header = KERNELS[kernel]
        for dtype in dtypes:
            element, dtype_enum, element_out, out_enum = DTYPES[dtype]
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
                f"FSW_INSTANTIATE({name}, {gemm}, {kind}, {element}, {dtype_enum}, {element_out}, {out_enum}, "
                f"{tm}, {tn}, {tk}, {cm}, {cn}, {sched}, {promote})\n"
            )
    lines = "".join(f"  FSW_CONFIG({n}) \\\n" for n in names)
    (HERE.parent / "capi" / "registry.inc").write_text(
        "// Generated by csrc/instantiations/generate.py: the compiled configurations.\n"
        f"#define FSW_CONFIG_LIST \\\n{lines}\n"
    )


if __name__ == "__main__":
    main()
