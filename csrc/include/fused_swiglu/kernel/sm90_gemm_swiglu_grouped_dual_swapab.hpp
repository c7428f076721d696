// The grouped kernel for decode sizes: the dual swap-AB kernel batched over the experts of a
// mixture-of-experts layer (docs/architecture.md, "Grouped kernels").
//
//   gate_up_proj [E, 2I, H]      the experts' weights as transformers stores them: W_gate of expert e =
//                                rows 0..I-1 of gate_up_proj[e], W_up = rows I..2I-1, read in place
//   x_pad [T_pad, H]             the routed tokens sorted by expert, each expert's rows padded to whole
//                                token tiles of BLK_N = 16 rows
//   tile_expert [T_pad / 16]     the expert of each token tile; a value outside [0, E) past the last one
//   y_pad [T_pad, I]             y_pad[r] = silu(x_pad[r] W_gate[e]^T) * (x_pad[r] W_up[e]^T), e the expert
//                                of r's token tile; the rows of tiles past the last expert are not written
//
// Two schedules: Pingpong with 128 weight rows per tile (64 gate, 64 up), one consumer warpgroup per tile;
// Cooperative with 256 (128 gate, 128 up), both consumer warpgroups on one tile, so that each k-tile's GMMAs
// cover twice the weight rows for the same token tile (the dense dual Cooperative 256-row tile's reason).
//
// It is the dual swap-AB GEMM (2I, T_pad, H) of sm90_gemm_swiglu_dual_swapab.hpp with two changes: the
// mainloop's W_gate / W_up descriptors are (I, H, E) with the experts' stride as their batch stride, and
// token tile t loads the weights of expert tile_expert[t] (GroupedDualACollectiveMma); the tile scheduler
// hands out no tile past the last expert (sm90_tile_scheduler_expert_tiles.hpp). x_pad, the epilogue
// and y_pad keep the dense problem's coordinates.
#pragma once

#include "fused_swiglu/collective/sm90_mma_dual_tma_gmma_ss_warpspecialized.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_common.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_dual_swapab.hpp"
#include "fused_swiglu/kernel/sm90_tile_scheduler_expert_tiles.hpp"

namespace fused_swiglu::kernel {

// Config with the expert-tile scheduler.
template <class Config>
struct WithExpertTiles : Config {
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1, "grouped kernel: no cluster (the scheduler orders the tiles itself)");
  using TileScheduler = ExpertTileScheduler;
};

// The dual swap-AB kernel's traits with the expert-tile scheduler and the grouped mainloop.
template <class Config_>
struct GroupedDualSwapABTraits : DualSwapABTraits<WithExpertTiles<Config_>> {
  template <class Mainloop>
  using MainloopAdaptor = fused_swiglu::collective::GroupedDualACollectiveMma<Mainloop>;
};

template <class Config>
struct GroupedDualSwapABSwiGLUGemm : SwiGLUGemmBase<GroupedDualSwapABTraits<Config>> {
  static_assert(Config::kPingpong ? Config::kTileM == 128 : Config::kTileM == 256,
                "grouped dual swap-AB kernel: Pingpong with TileM = 128 (a 64-row gate subtile, then its up subtile) "
                "or Cooperative with TileM = 256 (128 gate rows, then their 128 up rows)");
  using Base = SwiGLUGemmBase<GroupedDualSwapABTraits<Config>>;
  using typename Base::Element;
  using typename Base::Arguments;

  // p: m = T_pad, n = I, k = H; w = W_gate of expert 0 and w_up = its W_up (row strides ldw, ldw_up), the
  // experts ldw_expert elements apart; tile_expert (m / BLK_N entries), experts = E.
  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    auto batched = [](int64_t ld, int64_t batch) { return cute::make_stride(ld, cute::_1{}, batch); };
    Arguments args =
        Base::arguments(p, hw_info, {static_cast<Element const*>(p.w), batched(p.ldw, p.ldw_expert),
                                     static_cast<Element const*>(p.w_up), batched(p.ldw_up, p.ldw_expert),
                                     static_cast<Element const*>(p.x), row_major(p.ldx), /*promotion=*/4,
                                     p.tile_expert, int32_t(p.experts)});
    args.scheduler.tile_expert = p.tile_expert;
    args.scheduler.experts = int32_t(p.experts);
    return args;
  }
};

}  // namespace fused_swiglu::kernel
