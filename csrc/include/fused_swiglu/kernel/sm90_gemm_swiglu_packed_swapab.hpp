// The packed kernel, swap-AB form for decode sizes: the same packed GEMM with the operands exchanged.
//
//   Acc[2N, M] = W_packed[2N, K] @ X[M, K]^T             (GMMA, fp32 accumulators; weights are A)
//   Y^T[N, M]  = Sm90SwiGLUStore(Acc), pairs along M      (silu(gate) * up, one rounding, TMA store of Y^T)
//
// At M <= 16 the normal form wastes most of each stage on a 64-row X tile (GMMA's smallest M) that holds
// a few useful rows. Here the tokens sit on GMMA's N side (TileN = 16) and a stage is almost all weight
// bytes, so more of the weight stream is in flight per SM (docs/performance.md). The
// interleave of weights.py (8 gate rows, then their 8 up rows) puts each gate accumulator row r and its
// up row r + 8 in the same thread (GMMA's accumulator layout), so pairing needs no data exchange.
#pragma once

#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"

namespace fused_swiglu::kernel {

// (64, TileN): one warpgroup's 64 accumulator rows by all tokens of the tile.
template <class Config>
using PackedSwapABEpilogueTile = cute::Shape<cute::_64, cute::Int<Config::kTileN>>;

template <class Config_>
struct PackedSwapABTraits : KernelTraits<Config_> {
  using EpilogueTile = PackedSwapABEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairRows<8>;
};

template <class Config>
struct PackedSwapABSwiGLUGemm : SwiGLUGemmBase<PackedSwapABTraits<Config>> {
  static_assert(Config::kPingpong, "swap-AB kernel: Pingpong schedule only");
  static_assert(Config::kTileM % 64 == 0, "swap-AB kernel: TileM (weight rows) must be a multiple of 64");
  using Base = SwiGLUGemmBase<PackedSwapABTraits<Config>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info, {static_cast<Element const*>(p.w), row_major(p.ldw),
                                        static_cast<Element const*>(p.x), row_major(p.ldx)});
  }
};

}  // namespace fused_swiglu::kernel
