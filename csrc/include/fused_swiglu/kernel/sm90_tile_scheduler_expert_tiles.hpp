// The tile scheduler of the grouped kernel: CUTLASS's persistent data-parallel scheduler over one padded
// token matrix, whose token tiles each belong to one expert (tile_expert[t], read on the device).
//
// The grouped dual swap-AB GEMM is (2I, T_pad, K): weight tiles along M, token tiles of BLK_N rows along
// N. The routing lays each expert's tokens out as whole token tiles, in expert order, and marks the
// tiles past the last expert's with a value outside [0, E) (E itself from fused_swiglu.grouped). Such a
// tile is no work: the scheduler ends a CTA's sequence at the first tile whose expert lies outside
// [0, E), in every warp role alike (producer, both consumer warpgroups), so those tiles load, compute
// and write nothing, and a CTA whose first tile is one of them exits at once.
//
// Ending (rather than skipping) is what keeps the roles in step: the Pingpong consumers advance two
// tiles at a time and the producer one, so a tile skipped by one role must be skipped by all, which
// holds for a suffix only. The order is fixed to make the tiles past the last expert a suffix of every
// CTA's sequence: rasterisation along M (weight tiles fastest, linear index = t * tiles_m + w), no
// swizzle, no cluster; then tile (w, t) comes before every tile of a later token tile t' > t, and
// since tile_expert places the tiles past the last expert after all others, once one is reached every
// later one is past it too. (A tile_expert that puts such a value before a valid expert breaks that
// rule: the valid tiles after it are left unwritten, never read out of bounds.) The launch's
// rasterisation and swizzle fields are therefore ignored.
//
// The kernel reads tile_expert on the device when it starts each tile, so the routing can change
// between launches with no host synchronisation (a captured CUDA graph replays under new routing).
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace fused_swiglu::kernel {

// The tag a config's TileScheduler names (CUTLASS maps it to the scheduler below).
struct ExpertTileScheduler {};

class Sm90ExpertTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using typename Base::WorkTileInfo;
  using typename Base::RasterOrderOptions;

  struct Arguments : Base::Arguments {
    int32_t const* tile_expert = nullptr;  // (T_pad / BLK_N,) int32: the expert of each token tile
    int32_t experts = 0;                    // E: a tile whose expert is outside [0, E) is no work
  };

  struct Params : Base::Params {
    int32_t const* tile_expert = nullptr;
    int32_t experts = 0;
  };

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShape tile_shape,
                                        ClusterShape cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& arguments, void* workspace = nullptr,
                                        uint32_t const epilogue_subtile = 1,
                                        uint32_t ktile_start_alignment_count = 1u) {
    static_assert(cute::size(ClusterShape{}) == 1, "expert tiles: no cluster (the tile order must be fixed)");
    typename Base::Arguments along_m{};
    along_m.max_swizzle_size = 1;
    along_m.raster_order = RasterOrderOptions::AlongM;
    Params params;
    static_cast<Base::Params&>(params) =
        Base::to_underlying_arguments(problem_shape_mnkl, tile_shape, cluster_shape, hw_info, along_m, workspace,
                                      epilogue_subtile, ktile_start_alignment_count);
    params.tile_expert = arguments.tile_expert;
    params.experts = arguments.experts;
    return params;
  }

  CUTLASS_HOST_DEVICE static bool can_implement(Arguments const& args) {
    return Base::can_implement(args) && args.tile_expert != nullptr && args.experts >= 1;
  }

  CUTLASS_HOST_DEVICE Sm90ExpertTileScheduler() {}

  CUTLASS_DEVICE explicit Sm90ExpertTileScheduler(Params const& params)
      : Base(static_cast<Base::Params const&>(params)), tile_expert_(params.tile_expert), experts_(params.experts) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }

  // Base's tile, or none where its token tile's expert lies outside [0, E) (and so every later tile's).
  CUTLASS_DEVICE WorkTileInfo get_current_work() const {
    WorkTileInfo work = Base::get_current_work();
    if (work.is_valid() && uint32_t(tile_expert_[work.N_idx]) >= uint32_t(experts_)) {
      return WorkTileInfo::invalid_work_tile();
    }
    return work;
  }

 private:
  int32_t const* tile_expert_ = nullptr;
  int32_t experts_ = 0;
};

}  // namespace fused_swiglu::kernel

namespace cutlass::gemm::kernel::detail {

template <class ArchTag, class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<fused_swiglu::kernel::ExpertTileScheduler, ArchTag, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = fused_swiglu::kernel::Sm90ExpertTileScheduler;
};

}  // namespace cutlass::gemm::kernel::detail
