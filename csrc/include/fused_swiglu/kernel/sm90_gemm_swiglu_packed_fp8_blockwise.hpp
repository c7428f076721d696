// The packed kernel for e4m3 inputs with block scaling (the DeepSeek-V3 recipe): one fp32 scale per
// 1 x 128 group of each token row of X and per 128 x 128 block of each weight, applied per 128-deep
// K block while accumulating. y in bfloat16.
//
//   Acc[m, c] = sum_kb x_scale[m, kb] * w_scale[c / 8, kb] * sum_{k in block kb} X[m, k] W_packed[c, k]
//   Y[M, N]   = Sm90SwiGLUStore(Acc), pair stride 8        (fp32, one rounding)
//
// The mainloop is CUTLASS's blockwise-scaled sm90 FP8 mainloop (KernelTmaWarpSpecialized{Pingpong,
// Cooperative}FP8Blockwise): GMMA accumulates one 128-deep k-tile into a partial accumulator, which is
// then multiplied by its row and column scales and added into the fp32 accumulator. Its scale layouts
// are M-major (ScaleConfig below):
//   x_scale: (M, ceil(K / 128)), element (m, kb) at m + kb * x_scale_stride (x_scale_stride >= M, a
//            multiple of 4: CUTLASS loads these with TMA, 16-byte rows);
//   w_scale: (2N / 8, ceil(K / 128)), element (g, kb) at g + kb * w_scale_stride: one scale per group of
//            8 packed rows, since the packed layout interleaves 8 gate rows with the 8 matching up rows
//            (weights.py): each 128 x 128 block scale of W_gate and W_up repeated over the 16 groups
//            its rows fall into (fused_swiglu.fp8.pack_weights_blockwise).
// CUTLASS loads the token scales with TMA and the weight scales with cp.async; the latter are loaded by
// our WholeScaleTileLoads (collective/sm90_blockwise_scale_loads.hpp), since CUTLASS 4.2's own copy
// loads only a quarter of them at one scale per 8 rows.
// The k-tile is the scale block (TileK = 128), and a partial accumulator as large as the main one
// doubles the accumulator registers (64 x 128 Pingpong, 128 x 192 Cooperative: 64 x 192 per warpgroup).
#pragma once

#include "cutlass/detail/blockwise_scale_layout.hpp"

#include "fused_swiglu/collective/sm90_blockwise_scale_loads.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"

namespace fused_swiglu::kernel {

namespace blockwise {

// Packed rows per run of gate (then up) rows (weights.py), and so rows per weight scale.
constexpr int kPackedRows = 8;

// Scale granularity (M, N, K): per token, per 8 packed weight rows, per 128 of K; both M-major.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kPackedRows, 128>;

template <class Config>
struct WithBlockScaling : Config {
  static_assert(Config::kFP8 && Config::kPromoteKTiles == 0,
                "block scaling: e4m3 inputs, the promotion is the blockwise mainloop's own (PromoteKTiles = 0)");
  static_assert(Config::kTileK == 128, "block scaling: one 128-deep scale block per k-tile");
  static constexpr bool kBlockScaled = true;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using KernelSchedule = cute::conditional_t<Config::kPingpong,
      cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
      cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
};

// ((1, rows), (128, ceil(K / 128)), 1) with unit stride along rows and `ld` between K blocks.
template <class Layout, int Granularity>
Layout scale_layout(int64_t rows, int64_t k, int64_t ld) {
  using namespace cute;
  return make_layout(make_shape(make_shape(Int<Granularity>{}, int32_t(rows / Granularity)),
                                make_shape(_128{}, int32_t((k + 127) / 128)), int32_t(1)),
                     make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, int32_t(ld)), int32_t(0)));
}

}  // namespace blockwise

// The block-scaled config, the packed pairing at the weights' block rows, tiles at the scheduler's
// coordinates, and the mainloop that loads whole scale tiles.
template <class Config_>
struct PackedBlockwiseFP8Traits : KernelTraits<blockwise::WithBlockScaling<Config_>> {
  using EpilogueTile = PackedEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairColumns<blockwise::kPackedRows>;
  template <class Mainloop>
  using MainloopAdaptor = fused_swiglu::collective::WholeScaleTileLoads<Mainloop>;
};

template <class Config>
struct PackedBlockwiseFP8SwiGLUGemm : SwiGLUGemmBase<PackedBlockwiseFP8Traits<Config>> {
  using Base = SwiGLUGemmBase<PackedBlockwiseFP8Traits<Config>>;
  using typename Base::Element;
  using typename Base::Arguments;
  using typename Base::CollectiveMainloop;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    using LayoutSFA = typename blockwise::WithBlockScaling<Config>::LayoutSFA;
    using LayoutSFB = typename blockwise::WithBlockScaling<Config>::LayoutSFB;
    return Base::arguments(
        p, hw_info,
        {static_cast<Element const*>(p.x), row_major(p.ldx), static_cast<Element const*>(p.w), row_major(p.ldw),
         // the token scales' rows rounded up to 4 (x_scale_stride is), as CUTLASS's TMA load of them needs
         p.x_scale, blockwise::scale_layout<LayoutSFA, 1>((p.m + 3) / 4 * 4, p.k, p.x_scale_stride),
         p.w_scale, blockwise::scale_layout<LayoutSFB, blockwise::kPackedRows>(2 * p.n, p.k, p.w_scale_stride)});
  }
};

}  // namespace fused_swiglu::kernel
