// Kernel-1: dual-GEMM over W_gate and W_up as they are (no packing), Pingpong or Cooperative.
//
//   Acc[:, 0:BLK_N/2]     = X @ W_gate[n-tile]^T      one accumulator tile per consumer warpgroup,
//   Acc[:, BLK_N/2:BLK_N] = X @ W_up[n-tile]^T        gate half and up half (DualBCollectiveMma)
//   Y[M, N]               = Sm90SwiGLUStore(Acc), pair stride BLK_N/2
//
// Warp roles, register budgets and pipelines are those of CUTLASS's sm90 warp-specialized kernels (see
// sm90_gemm_swiglu_packed.hpp); only the producer's loads differ. With the Pingpong schedule the two
// consumer warpgroups own alternate tiles and an ordered barrier alternates their mainloops, so the
// Swish on one warpgroup's gate accumulator (in its epilogue) overlaps the other warpgroup's GMMAs.
// The epilogue subtile spans the whole tile width so that each gate column meets its up column.
#pragma once

#include "fused_swiglu/collective/sm90_mma_dual_b_tma_gmma_ss_warpspecialized.hpp"
#include "fused_swiglu/kernel/sm90_gemm_swiglu_packed.hpp"

namespace fused_swiglu::kernel {

template <class Config>
struct DualSwiGLUGemm {
  using Element = typename Config::Element;
  using EpilogueTile = cute::Shape<cute::Int<Config::kPingpong ? 64 : 128>, cute::Int<Config::kTileN>>;
  using FusionCallbacks = SwiGLUCallbacks<Config, /*PairStride=*/Config::kTileN / 2, EpilogueTile>;
  using CollectiveEpilogue = SwiGLUCollectiveEpilogue<Config, EpilogueTile, FusionCallbacks>;
  static_assert(CollectiveEpilogue::DispatchPolicy::StagesD <= 2,
                "Sm90SwiGLUStore keeps 2 smem buffers: the store pipeline must not run deeper");

  using BaseMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,
      Element, cutlass::layout::ColumnMajor, 8,
      typename Config::ElementAccumulator,
      typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;
  using CollectiveMainloop = fused_swiglu::collective::DualBCollectiveMma<BaseMainloop>;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, typename Config::TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  // The GEMM is (M, 2N, K): gate and up columns together.
  static typename Gemm::Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    using namespace cute;
    typename GemmKernel::StrideA dX = make_stride(int64_t(p.ldx), _1{}, int64_t(0));
    typename GemmKernel::StrideB dWg = make_stride(int64_t(p.ldw), _1{}, int64_t(0));
    typename GemmKernel::StrideB dWu = make_stride(int64_t(p.ldw_up), _1{}, int64_t(0));
    StrideY dY = make_stride(int64_t(p.ldy), _1{}, int64_t(0));
    typename CollectiveEpilogue::StrideC dC{};
    typename CollectiveEpilogue::StrideD dD{};
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(p.m), int(2 * p.n), int(p.k), 1},
        {static_cast<Element const*>(p.x), dX, static_cast<Element const*>(p.w), dWg,
         static_cast<Element const*>(p.w_up), dWu},
        {{{}, {static_cast<Element*>(p.y), dY}}, nullptr, dC, nullptr, dD},
        hw_info};
    return args;
  }
};

}  // namespace fused_swiglu::kernel
