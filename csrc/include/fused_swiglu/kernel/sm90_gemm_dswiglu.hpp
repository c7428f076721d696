// The SwiGLU backward's GEMM: the data gradient of the down projection with a dSwiGLU epilogue.
//
//   Acc[M, N] = dZ[M, K] @ W_down[K, N]           (GMMA, fp32 accumulators; N = I, K = H)
//   dg, du    = Sm90DSwiGLU(Acc, g, u)             (epilogue/sm90_callbacks_dswiglu.hpp)
//
// So dY never reaches memory: the backward reads g and u once and writes dg and du once, where
// PyTorch's autograd writes dY and runs two elementwise passes over it. With g | u and dg | du as the
// two halves of one (M, 2N) buffer each, the rest of the backward is one GEMM per gradient:
// dX = [dg du] @ [W_gate; W_up] and [dW_gate; dW_up] = [dg du]^T @ X.
//
// A = dZ is K-major (row-major (M, K)); B = W_down as stored by nn.Linear, (K, N) row-major, is
// N-major (GMMA reads 16-bit MN-major operands from shared memory). Persistent tile scheduler, warp
// roles and register budgets as in sm90_gemm_swiglu_common.hpp (Pingpong: the epilogue of one consumer
// warpgroup overlaps the other's mainloop).
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "fused_swiglu/detail/cutlass_sm90_gemm.hpp"
#include "fused_swiglu/detail/cutlass_sm90_gemm.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"

#include "fused_swiglu.h"
#include "fused_swiglu/configs.hpp"
#include "fused_swiglu/epilogue/sm90_callbacks_dswiglu.hpp"

namespace fused_swiglu::kernel {

// Config: a SwiGLUConfig whose TileN counts output columns (no gate/up pairs here).
template <class Config>
struct DSwiGLUGemm {
  using Element = typename Config::Element;
  static constexpr bool kSwapAB = false;
  static constexpr bool kStoresPreactivations = false;
  static constexpr bool kBlockScaled = false;
  static_assert(Config::kPromoteKTiles == 0, "the dSwiGLU GEMM accumulates all of K in GMMA's accumulators");

  // (64, 32) subtiles: the DAG holds several fp32 fragments per subtile beside the tile's accumulators.
  using EpilogueTile = cute::Shape<cute::_64, cute::_32>;
  using StrideRow = cute::Stride<int64_t, cute::_1, int64_t>;
  using EpilogueDescriptor = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      typename Config::TileShape, EpilogueTile, void, Element, typename Config::EpilogueSchedule>;
  using Callbacks = fused_swiglu::epilogue::fusion::DSwiGLUCallbacks<EpilogueDescriptor, Element, StrideRow>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      typename Config::TileShape, typename Config::ClusterShape, EpilogueTile,
      float, /*ElementCompute=*/float,
      /*ElementC=*/void, cutlass::layout::RowMajor, 8,
      /*ElementD=*/Element, cutlass::layout::RowMajor, 8,   // du
      typename Config::EpilogueSchedule,
      typename Callbacks::type>::CollectiveOp;

  // A = dZ (M, K) row-major: K-major. B = W_down (K, N) row-major: N-major ("RowMajor" for B).
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,
      Element, cutlass::layout::RowMajor, 8,
      float,
      typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, typename Config::TileScheduler>;
  using Arguments = typename GemmKernel::Arguments;  // what make_arguments returns

  // fsw_problem (already validated; FSW_KERNEL_DSWIGLU fields) -> CUTLASS arguments of the (M, N, K) GEMM.
  static Arguments make_arguments(fsw_problem const& p, cutlass::KernelHardwareInfo hw_info) {
    typename CollectiveMainloop::StrideA d_a{};
    typename CollectiveMainloop::StrideB d_b{};
    cute::get<0>(d_a) = p.ldx;
    cute::get<1>(d_b) = p.ldw;
    StrideRow d_gu = cute::make_stride(p.ldgu, cute::_1{}, int64_t(0));
    StrideRow d_dgu = cute::make_stride(p.lddgu, cute::_1{}, int64_t(0));
    typename CollectiveEpilogue::StrideD d_d{};
    cute::get<0>(d_d) = p.lddgu;
    return {cutlass::gemm::GemmUniversalMode::kGemm,
            {int(p.m), int(p.n), int(p.k), 1},
            {static_cast<Element const*>(p.x), d_a, static_cast<Element const*>(p.w), d_b},
            {Callbacks::arguments(static_cast<Element const*>(p.g), static_cast<Element const*>(p.u), d_gu,
                                  static_cast<Element*>(p.dg), d_dgu),
             nullptr, typename CollectiveEpilogue::StrideC{}, static_cast<Element*>(p.du), d_d},
            hw_info};
  }
};

}  // namespace fused_swiglu::kernel
