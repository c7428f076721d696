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
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

#include "fused_swiglu.h"
#include "fused_swiglu/collective/sm90_mma_tma_gmma_ss_promoted_accumulation.hpp"
#include "fused_swiglu/collective/sm90_token_tile_shift.hpp"
#include "fused_swiglu/configs.hpp"
#include "fused_swiglu/epilogue/sm90_swiglu_policies.hpp"
#include "fused_swiglu/epilogue/sm90_visitor_swiglu_store.hpp"

namespace fused_swiglu::kernel {

// Row-major (rows, K or N, L) strides of X, the weights and Y.
using StrideRowMajor = cute::Stride<int64_t, cute::_1, int64_t>;

inline StrideRowMajor row_major(int64_t ld) { return cute::make_stride(ld, cute::_1{}, int64_t(0)); }

// Column-major (M, N, L) strides: Y^T in the swap-AB GEMM, whose M runs along Y's rows.
using StrideColMajor = cute::Stride<cute::_1, int64_t, int64_t>;

inline StrideColMajor col_major(int64_t ld) { return cute::make_stride(cute::_1{}, ld, int64_t(0)); }

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

// What a kernel is made of, as one traits struct that SwiGLUGemmBase reads (each kernel header defines
// its own, on top of KernelTraits' defaults):
//   Config           a SwiGLUConfig (configs.hpp)
//   EpilogueTile     (EPI_M, EPI_N) subtile, in accumulator columns; EPI_M a multiple of the MMA tile's M
//                    (64 rows per warpgroup in Pingpong, 128 in Cooperative)
//   Pairing          the SwiGLU node's pairing policy (epilogue/sm90_swiglu_policies.hpp). PairRows and
//                    PairSubtiles make the GEMM swap-AB: (2N, M, K) with the weights as A and X as B,
//                    gate/up pairs in accumulator rows, Y^T written (column-major in the GEMM's frame)
//   Output           the node's output policy: StoreY, or StoreYAndPreactivations (g and u, fsw_problem.g
//                    and .u, beside Y); ShiftedLastTokenTile<> where the mainloop starts the last token
//                    tile at token_tile_start (collective/sm90_token_tile_shift.hpp)
//   Accumulators     the EVT subtree whose fp32 values the node pairs: the accumulators as they are, or
//                    scaled by broadcast operands (kernel/sm90_gemm_swiglu_packed_fp8.hpp)
//   MainloopAdaptor  wraps the CollectiveBuilder's mainloop (ShiftedTokenTileMainloop, the dual mainloop,
//                    ...) after Config::kPromoteKTiles has chosen its accumulation (PromotedAccumulation)
template <class Config_>
struct KernelTraits {
  using Config = Config_;
  using Output = fused_swiglu::epilogue::StoreY;
  using Accumulators = cutlass::epilogue::fusion::Sm90AccFetch;
  template <class Mainloop>
  using MainloopAdaptor = Mainloop;
};

template <class Traits>
struct SwiGLUGemmBase {
  using Config = typename Traits::Config;
  using EpilogueTile = typename Traits::EpilogueTile;
  using Pairing = typename Traits::Pairing;
  using Output = typename Traits::Output;
  using Accumulators = typename Traits::Accumulators;
  using Element = typename Config::Element;        // x and the weights
  using ElementOut = typename Config::ElementOut;  // y, g and u
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // elements per 16 bytes
  static constexpr bool kSwapAB = Pairing::kAlongM;
  static constexpr bool kStoresPreactivations = Output::kPreactivations;
  static constexpr bool kBlockScaled = Config::kBlockScaled;
  using StrideOut = cute::conditional_t<kSwapAB, StrideColMajor, StrideRowMajor>;

  static constexpr bool kShiftLastTokenTile = Output::kShiftLastTokenTile;
  using FusionCallbacks = cutlass::epilogue::fusion::Sm90EVT<
      fused_swiglu::epilogue::fusion::Sm90SwiGLUStore</*Stages=*/2, EpilogueTile, ElementOut, StrideOut, Pairing, Output>,
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
  using CollectiveMainloop = typename Traits::template MainloopAdaptor<AccumulatingMainloop>;
  static_assert(fused_swiglu::collective::shifts_last_token_tile<CollectiveMainloop>::value == kShiftLastTokenTile,
                "the mainloop and the epilogue must place the last token tile alike (Traits::MainloopAdaptor, Output)");
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
    if constexpr (kSwapAB) d_out = col_major(p.ldy), d_pre = col_major(p.ldgu);
    else d_out = row_major(p.ldy), d_pre = row_major(p.ldgu);
    Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        kSwapAB ? typename GemmKernel::ProblemShape{int(2 * p.n), int(p.m), int(p.k), 1}
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
