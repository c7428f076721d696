// The dual kernel for e4m3 inputs: x, W_gate and W_up in float_e4m3_t as stored (no packing), y in
// bfloat16_t, fast accumulation (GMMA accumulates all of K).
//
//   Acc[:, 0:BLK_N/2]     = X @ W_gate[n-tile]^T      (FP8 GMMA, fp32 accumulators; DualBCollectiveMma)
//   Acc[:, BLK_N/2:BLK_N] = X @ W_up[n-tile]^T
//   Y[M, N]               = Sm90SwiGLUStore(Acc * x_scale[token] * w_scale[weight row]), pair stride BLK_N/2
//
// The dequantization scales are multiplied into the fp32 accumulators before the SwiGLU node pairs
// them, as in the packed e4m3 kernel (sm90_gemm_swiglu_packed_fp8.hpp), but through Sm90DualScale
// (epilogue/sm90_visitor_dual_scales.hpp): a dual tile's gate and up halves come from two weight
// tensors, and the last token tile is shifted inside the problem as the dual mainloop shifts it, which
// CUTLASS's broadcast nodes (reading at the scheduler's coordinates) do not follow.
//
// Scales (fsw_problem, dtype FSW_DTYPE_E4M3, kind FSW_KERNEL_DUAL), fp32, 16-byte aligned:
//   x_scale  x_scale_stride 0: x_scale[0] for every token; 1: x_scale[m] for token m (M values).
//   w_scale  the gate scales, then the up scales. w_scale_stride 0: w_scale[0] for W_gate and w_scale[1]
//            for W_up (2 values); 1: w_scale[i] for row i of W_gate and w_scale[N + i] for row i of W_up
//            (2N values, N = I). Per tensor or per output channel, the same kind for both weights.
//   acc * x_scale * w_scale is evaluated in that order in fp32 (swap-AB form: acc * w_scale * x_scale).
//
// The swap-AB form (DualSwapABFP8SwiGLUGemm, decode sizes) is the dual kernel's swap-AB form
// (sm90_gemm_swiglu_dual_swapab.hpp) with the same scales: the weight scale becomes the accumulator
// rows' (gate rows in the first 64 of a 128-row tile, up rows in the next 64) and the token scale the
// columns'.
#pragma once

#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"

#include "fused_swiglu/epilogue/sm90_visitor_dual_scales.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_dual.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_dual_swapab.hpp"

namespace fused_swiglu::kernel {

namespace dual_fp8 {

using fused_swiglu::epilogue::fusion::ScaleMap;
using fused_swiglu::epilogue::fusion::Sm90DualScale;

using Multiply = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                        cutlass::FloatRoundStyle::round_to_nearest>;

// acc * row scale * column scale in fp32.
template <class RowScale, class ColumnScale>
using ScaledAccumulators = cutlass::epilogue::fusion::Sm90EVT<
    Multiply,
    cutlass::epilogue::fusion::Sm90EVT<Multiply, cutlass::epilogue::fusion::Sm90AccFetch, RowScale>,
    ColumnScale>;

// The dual GEMM (M, 2N, K): tokens along the rows (last tile shifted, as DualBCollectiveMma loads it),
// gate | up weight rows along the columns.
using DualScales = ScaledAccumulators<Sm90DualScale<0, ScaleMap::Tokens, /*ShiftLastTokenTile=*/true>,
                                      Sm90DualScale<1, ScaleMap::DualWeights>>;
// The swap-AB GEMM (2N, M, K): gate | up weight rows along the rows, tokens along the columns.
using DualSwapABScales = ScaledAccumulators<Sm90DualScale<0, ScaleMap::DualWeights>,
                                            Sm90DualScale<1, ScaleMap::Tokens>>;

// The scales' arguments: (pointer, stride) of the accumulator rows' and of the columns' scale.
template <class Scales>
typename Scales::Arguments scale_arguments(float const* rows, int32_t rows_stride, float const* cols,
                                           int32_t cols_stride) {
  return {{{}, {rows, rows_stride}, {}}, {cols, cols_stride}, {}};
}

}  // namespace dual_fp8

template <class Config>
struct DualFP8SwiGLUGemm
    : SwiGLUGemmBase<DualTraits<Config, fused_swiglu::epilogue::StoreY, dual_fp8::DualScales>> {
  static_assert(Config::kFP8, "DualFP8SwiGLUGemm: e4m3 inputs (SwiGLUConfig<cutlass::float_e4m3_t, ...>)");
  static_assert(Config::kPromoteKTiles == 0, "the dual e4m3 kernel: fast accumulation (PromoteKTiles = 0)");
  using Base = SwiGLUGemmBase<DualTraits<Config, fused_swiglu::epilogue::StoreY, dual_fp8::DualScales>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info,
                           {static_cast<Element const*>(p.w), row_major(p.ldw),
                            static_cast<Element const*>(p.w_up), row_major(p.ldw_up),
                            static_cast<Element const*>(p.x), row_major(p.ldx)},
                           dual_fp8::scale_arguments<dual_fp8::DualScales>(p.x_scale, p.x_scale_stride, p.w_scale,
                                                                           p.w_scale_stride));
  }
};

template <class Config>
struct DualSwapABFP8SwiGLUGemm : SwiGLUGemmBase<DualSwapABTraits<Config, dual_fp8::DualSwapABScales>> {
  static_assert(Config::kFP8, "DualSwapABFP8SwiGLUGemm: e4m3 inputs (SwiGLUConfig<cutlass::float_e4m3_t, ...>)");
  static_assert(Config::kPromoteKTiles == 0, "the dual e4m3 kernel: fast accumulation (PromoteKTiles = 0)");
  static_assert(Config::kPingpong, "swap-AB kernel: Pingpong schedule only");
  static_assert(Config::kTileM == 128, "dual swap-AB kernel: TileM = 128 (a 64-row gate subtile, then its up subtile)");
  using Base = SwiGLUGemmBase<DualSwapABTraits<Config, dual_fp8::DualSwapABScales>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info,
                           {static_cast<Element const*>(p.w), row_major(p.ldw),
                            static_cast<Element const*>(p.w_up), row_major(p.ldw_up),
                            static_cast<Element const*>(p.x), row_major(p.ldx)},
                           dual_fp8::scale_arguments<dual_fp8::DualSwapABScales>(p.w_scale, p.w_scale_stride,
                                                                                 p.x_scale, p.x_scale_stride));
  }
};

}  // namespace fused_swiglu::kernel
