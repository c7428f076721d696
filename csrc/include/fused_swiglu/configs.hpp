// Named TileShape / ClusterShape / schedule presets shared by both kernels.
//
// A preset fixes everything that is a compile-time choice of the CUTLASS kernel; the run-time choices
// (rasterisation order and swizzle of the persistent tile scheduler) travel in fsw_problem.
// Which preset serves which problem is decided in Python (src/fused_swiglu/configs.py) from the
// measurements recorded in docs/perf-notes.md.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace fused_swiglu {

// Both schedules use CUTLASS's persistent data-parallel tile scheduler (a stream-K variant was
// measured slower at every size, docs/perf-notes.md).
enum class Schedule { Pingpong, Cooperative };

// PromoteKTiles: 0 = GMMA accumulates the whole K; p > 0 = GMMA accumulates p k-tiles at a time, each
// partial then added into a main fp32 accumulator (16-bit inputs:
// collective/sm90_mma_tma_gmma_ss_promoted_accumulation.hpp; e4m3 inputs: CUTLASS's sm90 FP8 mainloop,
// whose promotion interval is counted in GMMA k-blocks of 32).
// ElementOut: y's element; the 16-bit kernels write their input type, the e4m3 kernels bfloat16_t or
// float_e4m3_t (quantized in the epilogue: epilogue/sm90_visitor_swiglu_store.hpp).
template <class Element_, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, Schedule Schedule_,
          int PromoteKTiles = 0, class ElementOut_ = Element_>
struct SwiGLUConfig {
  using Element = Element_;            // x and the weights (bfloat16_t, half_t or float_e4m3_t)
  using ElementOut = ElementOut_;      // y (and the pre-activations g, u)
  using ElementAccumulator = float;    // GMMA accumulators
  static constexpr bool kFP8 = cute::is_same_v<Element_, cutlass::float_e4m3_t>;
  // TileShape counts accumulator columns: gate and up together, so one tile writes TileN / 2 outputs.
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr Schedule schedule = Schedule_;
  static constexpr bool kPingpong = Schedule_ == Schedule::Pingpong;

  using TileScheduler = cutlass::gemm::PersistentScheduler;
  // e4m3 without promotion: CUTLASS's FP8 fast-accumulation schedules (GMMA accumulates all of K);
  // with promotion the plain schedules, for which CUTLASS's builder picks its promoting FP8 mainloop.
  using KernelSchedule = cute::conditional_t<kFP8 && PromoteKTiles == 0,
      cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                          cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum>,
      cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                          cutlass::gemm::KernelTmaWarpSpecializedCooperative>>;
  using EpilogueSchedule = cute::conditional_t<kPingpong,
      cutlass::epilogue::TmaWarpSpecialized,
      cutlass::epilogue::TmaWarpSpecializedCooperative>;

  static constexpr int kTileM = TileM, kTileN = TileN, kTileK = TileK;
  static constexpr int kClusterM = ClusterM, kClusterN = ClusterN;
  static constexpr int kPromoteKTiles = PromoteKTiles;
  // Block-scaled e4m3 (kernel/sm90_gemm_swiglu_packed_fp8_blockwise.hpp derives such a config): scales
  // applied per 128-deep K block inside the mainloop instead of to the accumulators in the epilogue.
  static constexpr bool kBlockScaled = false;
  // fp32 accumulator registers per consumer thread: a warpgroup (128 threads) holds the whole tile in
  // Pingpong and half of it in Cooperative; promoted accumulation adds a partial-sum fragment as large.
  static constexpr int kAccumulatorsPerThread =
      TileM * TileN / (kPingpong ? 128 : 256) * (PromoteKTiles > 0 ? 2 : 1);

  static_assert(PromoteKTiles >= 0, "PromoteKTiles: 0 (off) or the k-tiles between promotions");
  static_assert(!kFP8 || TileK == 128, "e4m3 inputs: TileK = 128 (one 128-byte swizzled row per k-tile)");
  static_assert(kFP8 || cute::is_same_v<ElementOut_, Element_>, "16-bit inputs: y has the input's element");
  static_assert(TileN % 16 == 0, "TileN must hold whole 8-column gate/up pairs of 16 columns");
  static_assert(!kPingpong || TileM % 64 == 0, "Pingpong: one warpgroup owns the tile, TileM % 64 == 0");
  static_assert(kPingpong || TileM % 128 == 0, "Cooperative: two warpgroups split TileM, TileM % 128 == 0");
  // A TMA box spans at most 256 elements per dimension. Without a multicast cluster CUTLASS loads each
  // operand tile as one box, so a larger tile fails cuTensorMapEncodeTiled at run time (CUTLASS only
  // prints the error) and the launch never finishes. A multicast or dual
  // load splits the box, so this guard is stricter than the hardware limit for those.
  static_assert(TileM <= 256 && TileN <= 256, "TileM and TileN must be <= 256 (TMA box dimension limit)");
};

}  // namespace fused_swiglu
