// The dual kernel: dual GEMM over W_gate and W_up as they are (no packing).
//
//   Acc[:, 0:BLK_N/2]     = X @ W_gate[n-tile]^T      one accumulator tile per consumer warpgroup,
//   Acc[:, BLK_N/2:BLK_N] = X @ W_up[n-tile]^T        gate half and up half (DualBCollectiveMma)
//   Y[M, N]               = Sm90SwiGLUStore(Acc), pair stride BLK_N/2
//
// Only the producer's loads differ from the packed kernel's (warp roles and budgets: sm90_gemm_swiglu_common.hpp).
// With the Pingpong schedule the two consumer warpgroups own alternate tiles and an ordered barrier
// alternates their mainloops, so the Swish on one warpgroup's gate accumulator (in its epilogue)
// overlaps the other warpgroup's GMMAs. The epilogue subtile spans the whole tile width so that each
// gate column meets its up column.
#pragma once

#include "fused_swiglu/collective/sm90_mma_dual_tma_gmma_ss_warpspecialized.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"

namespace fused_swiglu::kernel {

template <class Config>
using DualEpilogueTile = cute::Shape<cute::Int<Config::kPingpong ? 64 : 128>, cute::Int<Config::kTileN>>;

// Output: StoreY, or StoreYAndPreactivations for the training forward (g and u beside y). Accumulators:
// the EVT subtree the SwiGLU node pairs (the e4m3 form scales them: sm90_gemm_swiglu_dual_fp8.hpp).
template <class Config_, class Output_ = fused_swiglu::epilogue::StoreY,
          class Accumulators_ = cutlass::epilogue::fusion::Sm90AccFetch>
struct DualTraits : KernelTraits<Config_> {
  using EpilogueTile = DualEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairColumns<Config_::kTileN / 2>;
  using Output = fused_swiglu::epilogue::ShiftedLastTokenTile<Output_>;
  using Accumulators = Accumulators_;
  template <class Mainloop>
  using MainloopAdaptor = fused_swiglu::collective::DualBCollectiveMma<Mainloop>;
};

template <class Config, class Output = fused_swiglu::epilogue::StoreY>
struct DualSwiGLUGemm : SwiGLUGemmBase<DualTraits<Config, Output>> {
  using Base = SwiGLUGemmBase<DualTraits<Config, Output>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info, {static_cast<Element const*>(p.w), row_major(p.ldw),
                                        static_cast<Element const*>(p.w_up), row_major(p.ldw_up),
                                        static_cast<Element const*>(p.x), row_major(p.ldx)});
  }
};

template <class Config>
using DualStoreSwiGLUGemm = DualSwiGLUGemm<Config, fused_swiglu::epilogue::StoreYAndPreactivations>;

// The paired dual kernel: W_gate and W_up as they are, loaded into alternating groups of 8 rows of the B stage
// (PairedDualBCollectiveMma), so that the accumulators hold the packed kernel's layout (gate column c beside up
// column c + 8) and take its epilogue: (64, 64) subtiles of whole pairs, where the dual kernel's subtile spans
// the tile's width to meet each gate column's up column (which keeps 128 x 192 Pingpong from building clean).
template <class Config_, class Output_ = fused_swiglu::epilogue::StoreY>
struct PairedDualTraits : KernelTraits<Config_> {
  using EpilogueTile = PackedEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairColumns<8>;
  using Output = fused_swiglu::epilogue::ShiftedLastTokenTile<Output_>;
  template <class Mainloop>
  using MainloopAdaptor = fused_swiglu::collective::PairedDualBCollectiveMma<Mainloop>;
};

template <class Config, class Output = fused_swiglu::epilogue::StoreY>
struct PairedDualSwiGLUGemm : SwiGLUGemmBase<PairedDualTraits<Config, Output>> {
  using Base = SwiGLUGemmBase<PairedDualTraits<Config, Output>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info, {static_cast<Element const*>(p.w), row_major(p.ldw),
                                        static_cast<Element const*>(p.w_up), row_major(p.ldw_up),
                                        static_cast<Element const*>(p.x), row_major(p.ldx)});
  }
};

}  // namespace fused_swiglu::kernel
