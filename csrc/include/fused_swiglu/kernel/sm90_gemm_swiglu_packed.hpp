// Kernel-2: one TMA warp-specialized GEMM over packed gate/up weights with the SwiGLU EVT epilogue.
//
//   Acc[M, 2N] = X[M, K] @ W_packed[2N, K]^T            (GMMA, fp32 accumulators)
//   Y[M, N]    = Sm90SwiGLUStore(Acc), pair stride 8     (silu(gate) * up, one rounding, TMA store)
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
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

#include "fused_swiglu.h"
#include "fused_swiglu/configs.hpp"
#include "fused_swiglu/epilogue/sm90_visitor_swiglu_store.hpp"

namespace fused_swiglu::kernel {

// Epilogue subtile (EPI_M, EPI_N) in accumulator columns. EPI_M must be a multiple of the MMA tile's M
// (64 rows per warpgroup in Pingpong, 128 in Cooperative); EPI_N = 64 writes 32 output columns
// (64 bytes) per TMA store.
template <class Config>
using PackedEpilogueTile = cute::Shape<cute::Int<Config::kPingpong ? 64 : 128>, cute::_64>;

// Y is row-major (M, N, L).
using StrideY = cute::Stride<int64_t, cute::_1, int64_t>;

template <class Config, int PairStride, class EpilogueTile>
using SwiGLUCallbacks = cutlass::epilogue::fusion::Sm90EVT<
    fused_swiglu::epilogue::fusion::Sm90SwiGLUStore<
        /*Stages=*/2, EpilogueTile, typename Config::Element, StrideY, PairStride>,
    cutlass::epilogue::fusion::Sm90AccFetch>;

template <class Config, class EpilogueTile, class FusionCallbacks>
using SwiGLUCollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    typename Config::TileShape, typename Config::ClusterShape, EpilogueTile,
    typename Config::ElementAccumulator, /*ElementCompute=*/float,
    /*ElementC=*/void, cutlass::layout::RowMajor, 8,
    /*ElementD=*/void, cutlass::layout::RowMajor, 8,
    typename Config::EpilogueSchedule,
    FusionCallbacks>::CollectiveOp;

template <class Config>
struct PackedSwiGLUGemm {
  using Element = typename Config::Element;
  using EpilogueTile = PackedEpilogueTile<Config>;
  using FusionCallbacks = SwiGLUCallbacks<Config, /*PairStride=*/8, EpilogueTile>;
  using CollectiveEpilogue = SwiGLUCollectiveEpilogue<Config, EpilogueTile, FusionCallbacks>;
  static_assert(CollectiveEpilogue::DispatchPolicy::StagesD <= 2,
                "Sm90SwiGLUStore keeps 2 smem buffers: the store pipeline must not run deeper");

  // A = X (M, K) row-major: K-major.  B = W_packed (2N, K) row-major: K-major ("ColumnMajor" for B).
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,
      Element, cutlass::layout::ColumnMajor, 8,
      typename Config::ElementAccumulator,
      typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, typename Config::TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  // fsw_problem (already validated) -> CUTLASS arguments. The GEMM is (M, 2N, K): 2N packed rows.
  static typename Gemm::Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    using namespace cute;
    typename GemmKernel::StrideA dX = make_stride(int64_t(p.ldx), _1{}, int64_t(0));
    typename GemmKernel::StrideB dW = make_stride(int64_t(p.ldw), _1{}, int64_t(0));
    StrideY dY = make_stride(int64_t(p.ldy), _1{}, int64_t(0));
    typename CollectiveEpilogue::StrideC dC{};
    typename CollectiveEpilogue::StrideD dD{};
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(p.m), int(2 * p.n), int(p.k), 1},
        {static_cast<Element const*>(p.x), dX, static_cast<Element const*>(p.w), dW},
        {{{}, {static_cast<Element*>(p.y), dY}}, nullptr, dC, nullptr, dD},
        hw_info};
    return args;
  }
};

}  // namespace fused_swiglu::kernel
