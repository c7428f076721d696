// The tile scheduler of the grouped kernel: CUTLASS's persistent data-parallel scheduler over one padded
// token matrix, whose token tiles each belong to one expert (tile_expert[t], read on the device).
//
// The grouped dual swap-AB GEMM is (2I, T_pad, K): weight tiles along M, token tiles of BLK_N rows along
// N. The routing lays each expert's tokens out as whole token tiles, in expert order, and marks the
// tiles past the last expert's with a value outside [0, E) (E itself from fused_swiglu.grouped): the
// layout's first n_valid token tiles hold rows, the rest none. n_valid is known on the device only, so
// each CTA reads it from tile_expert when it starts (valid_token_tiles: one warp-wide probe of 32 entries
// per factor of 32 in the tile count, so one or two loads at decode and prefill sizes) and the scheduler
// hands out exactly the n_valid x tiles_m tiles that hold rows, in an order of its own:
//
//   groups of S consecutive token tiles (S, the launch's swizzle: 1, 2, 4 or 8), group after group; in a
//   group, weight tile after weight tile, and for each weight tile the group's S token tiles. The last
//   group takes the n_valid % S token tiles left, in the same way.
//
// A wave of CTAs thus covers few weight tiles for S token tiles at once: the S tiles of one expert that
// read a weight tile read it together, once from DRAM, where the order along M (S = 1: every weight tile
// of one token tile, then the next token tile) reads an expert's weights again for each of its token
// tiles once they no longer fit L2 (docs/perf-notes.md entry 119). With S = 1 the order is that one.
//
// Every role (producer, both Pingpong consumer warpgroups) maps CUTLASS's linear tile index through the
// same function of n_valid, so the roles stay in step; the tiles past n_valid x tiles_m are a suffix of
// every CTA's sequence and end it (a CTA whose first index is past it exits at once). CUTLASS's own order
// underneath is along M, swizzle 1, no cluster, which the linear index is read back from. The launch's
// raster is ignored.
//
// A tile_expert whose tiles past the last expert do not form a suffix (never the routing's) leaves the
// count wherever the probes find a change: tiles may then be left unwritten, or load an expert outside
// [0, E), which TMA fills with zeros; nothing is read or written out of bounds. The kernel reads
// tile_expert at each launch, so the routing can change between launches with no host synchronisation (a
// captured CUDA graph replays under new routing).
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace fused_swiglu::kernel {

// The tag a config's TileScheduler names (CUTLASS maps it to the scheduler below).
struct ExpertTileScheduler {};

// The largest token-tile group (the launch's swizzle).
constexpr int kMaxTokenTileGroup = 8;

class Sm90ExpertTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using typename Base::WorkTileInfo;
  using typename Base::RasterOrderOptions;

  struct Arguments : Base::Arguments {
    int32_t const* tile_expert = nullptr;  // (T_pad / BLK_N,) int32: the expert of each token tile
    int32_t experts = 0;                    // E: the token tiles from the first outside [0, E) on are no work
  };

  // Base::Params' problem_tiles_m_ / problem_tiles_n_ are the weight and token tiles: with swizzle 1 and no
  // cluster CUTLASS rounds neither up.
  struct Params : Base::Params {
    int32_t const* tile_expert = nullptr;
    int32_t experts = 0;
    uint32_t log_token_group = 0;  // log2 S
  };

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShape tile_shape,
                                        ClusterShape cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& arguments, void* workspace = nullptr,
                                        uint32_t const epilogue_subtile = 1,
                                        uint32_t ktile_start_alignment_count = 1u) {
    static_assert(cute::size(ClusterShape{}) == 1, "expert tiles: no cluster (the tile order is the scheduler's)");
    typename Base::Arguments along_m{};
    along_m.max_swizzle_size = 1;
    along_m.raster_order = RasterOrderOptions::AlongM;
    Params params;
    static_cast<Base::Params&>(params) =
        Base::to_underlying_arguments(problem_shape_mnkl, tile_shape, cluster_shape, hw_info, along_m, workspace,
                                      epilogue_subtile, ktile_start_alignment_count);
    params.tile_expert = arguments.tile_expert;
    params.experts = arguments.experts;
    int const group = arguments.max_swizzle_size > 0 ? arguments.max_swizzle_size : 1;
    params.log_token_group = uint32_t(group >= 8 ? 3 : group >= 4 ? 2 : group >= 2 ? 1 : 0);
    return params;
  }

  CUTLASS_HOST_DEVICE static bool can_implement(Arguments const& args) {
    int const group = args.max_swizzle_size;
    return Base::can_implement(args) && args.tile_expert != nullptr && args.experts >= 1 &&
           (group <= 1 || ((group & (group - 1)) == 0 && group <= kMaxTokenTileGroup));
  }

  CUTLASS_HOST_DEVICE Sm90ExpertTileScheduler() {}

  // Every thread of the CTA constructs it, converged (CUTLASS's kernels do so before the warp roles split):
  // each warp reads the count itself.
  CUTLASS_DEVICE explicit Sm90ExpertTileScheduler(Params const& params)
      : Base(static_cast<Base::Params const&>(params)),
        log_group_(params.log_token_group),
        valid_tiles_(valid_token_tiles(params.tile_expert, params.problem_tiles_n_, params.experts)) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }

  // The tile of the CTA's current linear index in the order above, or none past the tiles that hold rows.
  CUTLASS_DEVICE WorkTileInfo get_current_work() const {
    WorkTileInfo work = Base::get_current_work();  // along M, swizzle 1: linear = N_idx * tiles_m + M_idx
    if (!work.is_valid()) return work;
    uint32_t const weight_tiles = scheduler_params.problem_tiles_m_;
    uint32_t const linear = uint32_t(work.N_idx) * weight_tiles + uint32_t(work.M_idx);
    if (linear >= valid_tiles_ * weight_tiles) return WorkTileInfo::invalid_work_tile();
    uint32_t const group_tiles = weight_tiles << log_group_;  // tiles of one whole group
    uint32_t const group = linear / group_tiles;
    uint32_t const first = group << log_group_;                // the group's first token tile
    uint32_t const rest = linear - group * group_tiles;
    uint32_t const size = min(1u << log_group_, valid_tiles_ - first);  // S, or what the last group holds
    work.M_idx = int32_t(rest / size);
    work.N_idx = int32_t(first + rest % size);
    work.L_idx = 0;
    return work;
  }

  // The next tile of this CTA, for the kernels that ask through fetch_next_work (Cooperative; Pingpong
  // advances and calls get_current_work itself). CUTLASS's own fetch_next_work calls its base's
  // get_current_work, which knows neither the order above nor the count of tiles that hold rows.
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work_tile_info) {
    (void)work_tile_info;  // a data-parallel tile is never continued
    Base::advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }

  template <class TileSchedulerPipeline, class TileSchedulerPipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work_tile_info, TileSchedulerPipeline&,
                                      TileSchedulerPipelineState) {
    return fetch_next_work(work_tile_info);
  }

  // The token tiles before the first whose expert lies outside [0, E) (all of them if none): the warp
  // probes 32 evenly spaced entries of the range left, which shrinks 32-fold per probe. Call converged.
  CUTLASS_DEVICE static uint32_t valid_token_tiles(int32_t const* tile_expert, uint32_t tiles, int32_t experts) {
    uint32_t const lane = threadIdx.x % 32;
    uint32_t lo = 0, hi = tiles;  // tiles before lo hold an expert; the first that does not lies in [lo, hi]
    while (lo < hi) {
      uint32_t const step = (hi - lo + 31) / 32;
      uint32_t const probe = lo + lane * step;
      bool const past = probe < hi && uint32_t(tile_expert[probe]) >= uint32_t(experts);
      uint32_t const ballot = __ballot_sync(0xffffffffu, past);
      if (ballot == 0) {
        lo += (hi - 1 - lo) / step * step + 1;  // after the last probe inside the range
      } else {
        uint32_t const j = uint32_t(__ffs(ballot)) - 1;
        hi = lo + j * step;
        lo = j == 0 ? hi : lo + (j - 1) * step + 1;
      }
    }
    return hi;
  }

 private:
  uint32_t log_group_ = 0;
  uint32_t valid_tiles_ = 0;
};

}  // namespace fused_swiglu::kernel

namespace cutlass::gemm::kernel::detail {

template <class ArchTag, class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<fused_swiglu::kernel::ExpertTileScheduler, ArchTag, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = fused_swiglu::kernel::Sm90ExpertTileScheduler;
};

}  // namespace cutlass::gemm::kernel::detail
