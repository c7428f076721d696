// The packed kernel: one TMA warp-specialized GEMM over packed gate/up weights with the SwiGLU EVT epilogue.
//
//   Acc[M, 2N] = X[M, K] @ W_packed[2N, K]^T            (GMMA, fp32 accumulators)
//   Y[M, N]    = Sm90SwiGLUStore(Acc), pair stride 8     (silu(gate) * up, one rounding, TMA store)
//
// W_packed interleaves 8 gate rows with the 8 matching up rows (weights.py), so every (64, 64) epilogue
// subtile holds whole gate/up pairs. Warp roles and budgets: sm90_gemm_swiglu_common.hpp.
#pragma once

#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"

namespace fused_swiglu::kernel {

// EPI_N = 64 accumulator columns write 32 output columns (64 bytes) per TMA store. A TileN that is not
// a multiple of 64 (96 and 160 in the library: widths whose tile count fills whole waves at M = 512)
// takes one full-width subtile instead: narrower subtiles (32 or 16 columns) were measured slower,
// though together with CuTe's N = 16 / 32 GMMA fallback, so what the narrow stores alone cost is not
// known (docs/performance.md).
template <class Config>
using PackedEpilogueTile = cute::Shape<cute::Int<Config::kPingpong ? 64 : 128>,
                                       cute::Int<Config::kTileN % 64 == 0 ? 64 : Config::kTileN>>;

// Output: StoreY, or StoreYAndPreactivations for the training forward (g and u beside y).
template <class Config_, class Output_ = fused_swiglu::epilogue::StoreY>
struct PackedTraits : KernelTraits<Config_> {
  using EpilogueTile = PackedEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairColumns<8>;
  using Output = fused_swiglu::epilogue::ShiftedLastTokenTile<Output_>;
  template <class Mainloop>
  using MainloopAdaptor = fused_swiglu::collective::ShiftedTokenTileMainloop<Mainloop>;
};

template <class Config, class Output = fused_swiglu::epilogue::StoreY>
struct PackedSwiGLUGemm : SwiGLUGemmBase<PackedTraits<Config, Output>> {
  using Base = SwiGLUGemmBase<PackedTraits<Config, Output>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info, {static_cast<Element const*>(p.x), row_major(p.ldx),
                                        static_cast<Element const*>(p.w), row_major(p.ldw)});
  }
};

template <class Config>
using PackedStoreSwiGLUGemm = PackedSwiGLUGemm<Config, fused_swiglu::epilogue::StoreYAndPreactivations>;

}  // namespace fused_swiglu::kernel
