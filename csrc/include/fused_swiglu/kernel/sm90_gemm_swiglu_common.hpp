// What both kernels share: the SwiGLU EVT epilogue, CUTLASS's sm90 TMA GMMA SS mainloop built for a
// SwiGLUConfig (optionally wrapped, e.g. by the dual-B producer), the persistent GemmUniversal kernel,
// and the mapping of an fsw_problem onto CUTLASS's arguments.
//
// Warp roles are CUTLASS's sm90 warp-specialized kernels (cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_
// {pingpong,cooperative}.hpp): one producer warpgroup (a TMA warp for A/B tiles; register budget 40),
// and two consumer warpgroups (register budget 232 for Pingpong, 232/240 for Cooperative) that issue
// GMMA and run the epilogue. Pingpong: each consumer warpgroup owns a whole tile and an ordered barrier
// alternates their mainloops, so the SwiGLU epilogue of one overlaps the MMAs of the other.
// Cooperative: both consumer warpgroups split one tile along M.
//
// The collective epilogue's own D store is disabled (ElementD = void); the EVT node writes Y.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "fused_swiglu/detail/cutlass_sm90_gemm.hpp"
#include "fused_swiglu/detail/cutlass_sm90_gemm.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

#include "fused_swiglu.h"
#include "fused_swiglu/collective/sm90_mma_tma_gmma_ss_promoted_accumulation.hpp"
#include "fused_swiglu/collective/sm90_token_tile_shift.hpp"
#include "fused_swiglu/configs.hpp"
#include "fused_swiglu/epilogue/sm90_visitor_swiglu_store.hpp"

namespace fused_swiglu::kernel {

// Row-major (rows, K or N, L) strides of X, the weights and Y.
using StrideRowMajor = cute::Stride<int64_t, cute::_1, int64_t>;

inline StrideRowMajor row_major(int64_t ld) { return cute::make_stride(ld, cute::_1{}, int64_t(0)); }

// Column-major (M, N, L) strides: Y^T in the swap-AB GEMM, whose M runs along Y's rows.
using StrideColMajor = cute::Stride<cute::_1, int64_t, int64_t>;

inline StrideColMajor col_major(int64_t ld) { return cute::make_stride(cute::_1{}, ld, int64_t(0)); }

template <class Mainloop>
using UnchangedMainloop = Mainloop;

// The CollectiveBuilder's layout tags of X (A) and the weights (B): plain row-major X and K-major
// weights, or, for a config with block scaling (Config::kBlockScaled, kernel/sm90_gemm_swiglu_packed_
// fp8_blockwise.hpp), each paired with the layout of its scales, which selects CUTLASS's blockwise-
// scaled FP8 mainloop.
template <class Config, class = void>
struct OperandLayouts {
  using A = cutlass::layout::RowMajor;
  using B = cutlass::layout::ColumnMajor;
};

template <class Config>
struct OperandLayouts<Config, cute::enable_if_t<Config::kBlockScaled>> {
  using A = cute::tuple<cutlass::layout::RowMajor, typename Config::LayoutSFA>;
  using B = cute::tuple<cutlass::layout::ColumnMajor, typename Config::LayoutSFB>;
};

// The CollectiveBuilder's epilogue visits each subtile as one fragment of EPI_M * EPI_N / 128 elements
// per thread (Pingpong). That fragment must vectorize as one array over the register-to-smem copy's
// layout, which holds only when EPI_N / 16 is a power of two; other full-width subtiles (EPI_N = 96,
// 160) are visited in fragments of 8 elements (one stmatrix atom per thread) instead.
template <class CollectiveEpilogue, int FragmentSize>
struct WithFragmentSize;

template <int StagesC, int StagesD, int Fragment, bool ReuseSmemC, bool DelayTmaStore, class... Rest,
          int FragmentSize>
struct WithFragmentSize<
    cutlass::epilogue::collective::CollectiveEpilogue<
        cutlass::epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, Fragment, ReuseSmemC, DelayTmaStore>, Rest...>,
    FragmentSize> {
  using type = cutlass::epilogue::collective::CollectiveEpilogue<
      cutlass::epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>, Rest...>;
};

constexpr bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Config: a SwiGLUConfig. EpilogueTile: (EPI_M, EPI_N) subtile in accumulator columns; EPI_M must be a
// multiple of the MMA tile's M (64 rows per warpgroup in Pingpong, 128 in Cooperative).
// PairStride: distance between a gate column and its up column (Sm90SwiGLUStore).
// MainloopAdaptor: wraps the CollectiveBuilder's mainloop (ShiftedTokenTileMainloop for one B operand,
// UnchangedMainloop in swap-AB form; the dual mainloop for the dual kernel), after
// Config::kPromoteKTiles has chosen its accumulation (PromotedAccumulation).
// SwapAB: the GEMM is (2N, M, K) with the weights as A and X as B; gate/up pairs are accumulator rows
// and the epilogue writes Y^T (column-major in the GEMM's frame). Same operand layouts (both K-major).
// PairsAcrossSubtiles (SwapAB only): gate rows fill one epilogue subtile and their up rows the next.
// StorePreactivations (not SwapAB): the epilogue also writes g and u (fsw_problem.g, .u) beside Y.
// Accumulators: the EVT subtree whose fp32 values the SwiGLU node pairs (the accumulators as they are,
// or scaled by broadcast operands: kernel/sm90_gemm_swiglu_packed_fp8.hpp).
// ShiftLastTokenTile: tokens along M, the mainloop and the epilogue both start the last token tile at
// token_tile_start (collective/sm90_token_tile_shift.hpp); the swap-AB form keeps the scheduler's
// tiles, and so does a tree that reads per-token operands at the scheduler's tile coordinates.
template <class Config, class EpilogueTile, int PairStride, template <class> class MainloopAdaptor,
          bool SwapAB = false, bool PairsAcrossSubtiles = false, bool StorePreactivations = false,
          class Accumulators = cutlass::epilogue::fusion::Sm90AccFetch, bool ShiftLastTokenTile = !SwapAB>
struct SwiGLUGemmBase {
  using Element = typename Config::Element;        // x and the weights
  using ElementOut = typename Config::ElementOut;  // y, g and u
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // elements per 16 bytes
  static constexpr bool kSwapAB = SwapAB;
  static constexpr bool kStoresPreactivations = StorePreactivations;
  static constexpr bool kBlockScaled = Config::kBlockScaled;
  using StrideOut = cute::conditional_t<SwapAB, StrideColMajor, StrideRowMajor>;

  static constexpr bool kShiftLastTokenTile = ShiftLastTokenTile;
  using FusionCallbacks = cutlass::epilogue::fusion::Sm90EVT<
      fused_swiglu::epilogue::fusion::Sm90SwiGLUStore<
          /*Stages=*/2, EpilogueTile, ElementOut, StrideOut, PairStride, /*PairsAlongM=*/SwapAB,
          PairsAcrossSubtiles, kShiftLastTokenTile, StorePreactivations>,
      Accumulators>;
  using BuiltEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      typename Config::TileShape, typename Config::ClusterShape, EpilogueTile,
      typename Config::ElementAccumulator, /*ElementCompute=*/float,
      /*ElementC=*/void, cutlass::layout::RowMajor, 8,
      /*ElementD=*/void, cutlass::layout::RowMajor, 8,
      typename Config::EpilogueSchedule,
      FusionCallbacks>::CollectiveOp;
  static constexpr int kEpiN = int(cute::size<1>(EpilogueTile{}));
  static constexpr bool kWholeSubtileFragment = is_power_of_two(kEpiN / 16) && kEpiN % 16 == 0;
  using CollectiveEpilogue = cute::conditional_t<kWholeSubtileFragment, BuiltEpilogue,
                                                 typename WithFragmentSize<BuiltEpilogue, 8>::type>;
  static_assert(CollectiveEpilogue::DispatchPolicy::StagesD <= 2,
                "Sm90SwiGLUStore keeps 2 smem buffers: the store pipeline must not run deeper");

  // A = X (M, K) row-major: K-major.  B = weights (rows, K) row-major: K-major ("ColumnMajor" for B).
  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, typename OperandLayouts<Config>::A, kAlignment,
      Element, typename OperandLayouts<Config>::B, kAlignment,
      typename Config::ElementAccumulator,
      typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;
  // e4m3: CUTLASS's FP8 mainloop promotes by itself (configs.hpp)
  using AccumulatingMainloop = typename fused_swiglu::collective::PromotedAccumulation<
      Config::kFP8 ? 0 : Config::kPromoteKTiles>::template apply<BuiltMainloop>;
  using CollectiveMainloop = MainloopAdaptor<AccumulatingMainloop>;
  static_assert(fused_swiglu::collective::shifts_last_token_tile<CollectiveMainloop>::value == kShiftLastTokenTile,
                "the mainloop and the epilogue must place the last token tile alike (MainloopAdaptor)");
  // CUTLASS's collective epilogue visits only the first fragment of each MMA tile when a subtile spans
  // several MMA tiles, so a subtile visited in fragments must lie inside one GMMA atom's N.
  static_assert(kWholeSubtileFragment ||
                    int(cute::size<1>(typename CollectiveMainloop::TiledMma::AtomShape_MNK{})) % kEpiN == 0,
                "an epilogue subtile visited in several fragments must lie inside one GMMA atom (N)");

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, typename Config::TileScheduler>;
  using Arguments = typename GemmKernel::Arguments;  // what make_arguments returns

  // fsw_problem (already validated) -> CUTLASS arguments around the kernel's own mainloop arguments
  // and those of the Accumulators subtree.
  // The GEMM is (M, 2N, K): gate and up accumulator columns together; (2N, M, K) with SwapAB.
  static Arguments arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info,
                                            typename CollectiveMainloop::Arguments mainloop,
                                            typename Accumulators::Arguments accumulators = {}) {
    StrideOut d_out, d_pre;
    if constexpr (SwapAB) d_out = col_major(p.ldy), d_pre = col_major(p.ldgu);
    else d_out = row_major(p.ldy), d_pre = row_major(p.ldgu);
    Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        SwapAB ? typename GemmKernel::ProblemShape{int(2 * p.n), int(p.m), int(p.k), 1}
               : typename GemmKernel::ProblemShape{int(p.m), int(2 * p.n), int(p.k), 1},
        mainloop,
        {{accumulators,
          {static_cast<ElementOut*>(p.y), d_out, static_cast<ElementOut*>(p.g), static_cast<ElementOut*>(p.u), d_pre,
           p.y_scale, p.y_scale_stride_m, p.y_scale_stride_g, p.y_scale_mode}},
         nullptr, typename CollectiveEpilogue::StrideC{}, nullptr, typename CollectiveEpilogue::StrideD{}},
        hw_info};
    return args;
  }
};

}  // namespace fused_swiglu::kernel
