// The packed kernel for e4m3 inputs: x and the packed weights in float_e4m3_t, y in bfloat16_t.
//
//   Acc[M, 2N] = X[M, K] @ W_packed[2N, K]^T                          (FP8 GMMA, fp32 accumulators)
//   Y[M, N]    = Sm90SwiGLUStore(Acc[m, c] * x_scale[m] * w_scale[c])  (fp32, one rounding)
//
// The dequantization scales enter the EVT as CUTLASS's dynamic broadcast nodes, multiplied into the
// fp32 accumulators before the SwiGLU node pairs them: x_scale as a column broadcast (one value per
// accumulator row, i.e. per token, or one for all rows) and w_scale as a row broadcast (one value per
// accumulator column, i.e. per packed weight row, or one for all). Whether each is a vector or a
// scalar is a run-time choice (fsw_problem.x_scale_stride, .w_scale_stride), so one kernel serves
// per-tensor and per-token / per-channel scaling.
//
// Accumulation (configs.hpp): CUTLASS's FP8 fast-accumulation mainloop (GMMA accumulates all of K), or,
// with PromoteKTiles = 1, its FP8 mainloop that adds each k-tile's GMMA partial sum into a second fp32
// accumulator (the tensor cores' FP8 accumulation keeps fewer mantissa bits than fp32).
//
// The swap-AB form (PackedSwapABFP8SwiGLUGemm) takes the weights as GMMA's A operand for decode sizes.
//
// The last token tile is not shifted into the problem (as the 16-bit packed kernel's is): the column
// broadcast reads the token scales at the scheduler's tile coordinates. TMA fills rows past M with
// zeros and clips the store.
#pragma once

#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"

#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_packed_swapab.hpp"

namespace fused_swiglu::kernel {

namespace fp8 {

using cute::_0;
using cute::Stride;

using Multiply = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                        cutlass::FloatRoundStyle::round_to_nearest>;

// One scale per accumulator row (stride true) or one value (false), and one per accumulator column.
template <class Config>
using RowScale = cutlass::epilogue::fusion::Sm90ColBroadcast<
    0, typename Config::TileShape, float, float, Stride<bool, _0, int64_t>>;
template <class Config>
using ColumnScale = cutlass::epilogue::fusion::Sm90RowBroadcast<
    0, typename Config::TileShape, float, float, Stride<_0, bool, int64_t>>;

// acc * row scale * column scale in fp32: rows are tokens and columns weight rows, or the other way
// round in the swap-AB GEMM.
template <class Config>
using ScaledAccumulators = cutlass::epilogue::fusion::Sm90EVT<
    Multiply,
    cutlass::epilogue::fusion::Sm90EVT<Multiply, cutlass::epilogue::fusion::Sm90AccFetch, RowScale<Config>>,
    ColumnScale<Config>>;

// The scales' arguments: (pointer, stride flag) of the accumulator rows' and of the columns' scale.
template <class Config>
typename ScaledAccumulators<Config>::Arguments scale_arguments(float const* rows, int32_t rows_stride,
                                                               float const* cols, int32_t cols_stride) {
  return {{{}, {rows, 0.0f, {rows_stride != 0, cute::_0{}, int64_t(0)}}, {}},
          {cols, 0.0f, {cute::_0{}, cols_stride != 0, int64_t(0)}},
          {}};
}

}  // namespace fp8

// The 16-bit packed kernels' traits with scaled accumulators, the tiles at the scheduler's coordinates
// and CUTLASS's mainloop as built.
template <class Config_>
struct PackedFP8Traits : KernelTraits<Config_> {
  using EpilogueTile = PackedEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairColumns<8>;
  using Accumulators = fp8::ScaledAccumulators<Config_>;
};

template <class Config_>
struct PackedSwapABFP8Traits : PackedSwapABTraits<Config_> {
  using Accumulators = fp8::ScaledAccumulators<Config_>;
};

template <class Config>
struct PackedFP8SwiGLUGemm : SwiGLUGemmBase<PackedFP8Traits<Config>> {
  static_assert(Config::kFP8, "PackedFP8SwiGLUGemm: e4m3 inputs (SwiGLUConfig<cutlass::float_e4m3_t, ...>)");
  static_assert(Config::kPromoteKTiles <= 1, "e4m3: promotion after every k-tile (1) or none (0)");
  using Base = SwiGLUGemmBase<PackedFP8Traits<Config>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info,
                           {static_cast<Element const*>(p.x), row_major(p.ldx),
                            static_cast<Element const*>(p.w), row_major(p.ldw)},
                           fp8::scale_arguments<Config>(p.x_scale, p.x_scale_stride, p.w_scale, p.w_scale_stride));
  }
};

// The swap-AB form for decode sizes (as PackedSwapABSwiGLUGemm): the GEMM is (2N, M, K) with the packed
// weights as GMMA's A operand, so w_scale is the accumulator rows' scale and x_scale the columns'.
template <class Config>
struct PackedSwapABFP8SwiGLUGemm : SwiGLUGemmBase<PackedSwapABFP8Traits<Config>> {
  static_assert(Config::kFP8, "PackedSwapABFP8SwiGLUGemm: e4m3 inputs (SwiGLUConfig<cutlass::float_e4m3_t, ...>)");
  static_assert(Config::kPingpong && Config::kTileM % 64 == 0, "swap-AB kernel: Pingpong, TileM % 64 == 0");
  static_assert(Config::kPromoteKTiles <= 1, "e4m3: promotion after every k-tile (1) or none (0)");
  using Base = SwiGLUGemmBase<PackedSwapABFP8Traits<Config>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info,
                           {static_cast<Element const*>(p.w), row_major(p.ldw),
                            static_cast<Element const*>(p.x), row_major(p.ldx)},
                           fp8::scale_arguments<Config>(p.w_scale, p.w_scale_stride, p.x_scale, p.x_scale_stride));
  }
};

}  // namespace fused_swiglu::kernel
