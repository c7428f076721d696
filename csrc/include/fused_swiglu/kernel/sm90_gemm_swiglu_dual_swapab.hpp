// The dual kernel, swap-AB form for decode sizes: the dual GEMM with the operands exchanged.
//
//   Acc[0 : 64, :]    = W_gate[m-tile] @ X^T    gate accumulator rows           (DualACollectiveMma)
//   Acc[64 : 128, :]  = W_up[m-tile]   @ X^T    up accumulator rows
//   Y^T[I, M]         = Sm90SwiGLUStore(Acc), the gate subtile paired with the up subtile that follows
//
// As in the packed swap-AB kernel, the tokens sit on GMMA's N side so that a stage carries weight bytes
// (docs/performance.md). CUTLASS's Pingpong epilogue visits 64-row subtiles, so the gate
// rows and their up rows arrive in consecutive visits, in the same threads; the node keeps the gate
// subtile in registers (PairsAcrossSubtiles).
//
// The Cooperative form (the grouped kernel's 256-row weight tile: 128 gate rows, then their 128 up rows)
// pairs the same way. Its two consumer warpgroups split each 128-row MMA tile 64 / 64 and the tile holds
// two of them, so a thread's rows r of the gate half and r of the up half sit at the same place of
// consecutive 128-row subtiles (the epilogue's loop runs along M inside N).
#pragma once

#include "fused_swiglu/collective/sm90_mma_dual_tma_gmma_ss_warpspecialized.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"

namespace fused_swiglu::kernel {

// (the gate half of the tile's rows, EPI_N): Pingpong (64, TileN); Cooperative (128, 32). The Cooperative
// tile's 48 KiB mainloop stage leaves 3 stages beside 128 x 64 subtiles' output buffers and 4 beside 128 x 32
// ones; the node then keeps 16 gate values per thread.
template <class Config>
using DualSwapABEpilogueTile =
    cute::Shape<cute::Int<Config::kTileM / 2>, cute::Int<Config::kPingpong ? Config::kTileN : 32>>;

// Accumulators: as in DualTraits (the e4m3 form: sm90_gemm_swiglu_dual_fp8.hpp).
template <class Config_, class Accumulators_ = cutlass::epilogue::fusion::Sm90AccFetch>
struct DualSwapABTraits : KernelTraits<Config_> {
  using EpilogueTile = DualSwapABEpilogueTile<Config_>;
  using Pairing = fused_swiglu::epilogue::PairSubtiles<Config_::kTileM / 2>;
  using Accumulators = Accumulators_;
  template <class Mainloop>
  using MainloopAdaptor = fused_swiglu::collective::DualACollectiveMma<Mainloop>;
};

template <class Config>
struct DualSwapABSwiGLUGemm : SwiGLUGemmBase<DualSwapABTraits<Config>> {
  static_assert(Config::kPingpong, "swap-AB kernel: Pingpong schedule only");
  static_assert(Config::kTileM == 128, "dual swap-AB kernel: TileM = 128 (a 64-row gate subtile, then its up subtile)");
  using Base = SwiGLUGemmBase<DualSwapABTraits<Config>>;
  using typename Base::Element;
  using typename Base::Arguments;

  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    return Base::arguments(p, hw_info, {static_cast<Element const*>(p.w), row_major(p.ldw),
                                        static_cast<Element const*>(p.w_up), row_major(p.ldw_up),
                                        static_cast<Element const*>(p.x), row_major(p.ldx)});
  }
};

}  // namespace fused_swiglu::kernel
