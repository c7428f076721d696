// Two-level fp32 accumulation for the sm90 TMA GMMA SS mainloop.
//
// GMMA adds each k-block's products into its fp32 accumulators with the tensor core's own alignment
// and truncation, not IEEE round-to-nearest per addition. Over a long K that error grows with the
// magnitude of the running sum and shows as a lower exact-match rate against float64 as K grows
// (docs/performance.md).
//
// This mainloop lets GMMA accumulate only PromoteKTiles k-tiles (PromoteKTiles * BLK_K products) into
// a partial accumulator, then adds it into the main accumulator with ordinary fp32 FADDs (IEEE RN) and
// restarts the partial from zero. The same idea as CUTLASS's FP8 promotion (fp8_accumulation.hpp), with
// the main accumulator cleared first and the interval fixed at compile time.
//
// Cost: a second accumulator fragment (registers), and a full GMMA drain (warpgroup_wait<0>) at every
// promotion instead of one k-tile kept in flight.
//
// Producer side, pipeline accounting and mma_tail are Base's (CUTLASS's sm90 SS warp-specialized
// CollectiveMma); only the consumer's mma() differs. Releases follow Base: the stage of k-tile t is
// released after k-tile t + 1 was issued and t retired; mma_tail releases the last one.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "fused_swiglu/detail/cutlass_sm90_gemm.hpp"

namespace fused_swiglu::collective {

using namespace cute;

template <class Base, int PromoteKTiles>
struct PromotedAccumulationMma : Base {
  using typename Base::TiledMma;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::Params;

  static_assert(PromoteKTiles >= 1, "PromoteKTiles: k-tiles accumulated by GMMA between promotions, >= 1");
  static_assert(Base::K_PIPE_MMAS == 1, "written for one k-tile of GMMA in flight, as CUTLASS's SS mainloop");
  static constexpr int kPromoteKTiles = PromoteKTiles;

  // accum: the main accumulator (MMA, MMA_M, MMA_N), fp32, in registers. Written, not read: it is
  // cleared here, so the caller's value does not matter.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors,
                          Params const& /*params*/) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)

    constexpr int kMmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<kMmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCsA = thread_mma.partition_A(sA);                                  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCsB = thread_mma.partition_B(sB);                                  // (MMA,MMA_N,MMA_K,PIPE)
    Tensor tCrA = thread_mma.make_fragment_A(tCsA);                            // smem descriptors
    Tensor tCrB = thread_mma.make_fragment_B(tCsB);
    CUTE_STATIC_ASSERT_V(size<1>(tCsA) == size<1>(accum));
    CUTE_STATIC_ASSERT_V(size<1>(tCsB) == size<2>(accum));

    Tensor partial = make_fragment_like(accum);                               // GMMA's accumulator
    clear(accum);

    PipelineState smem_pipe_release = smem_pipe_read;
    int k_tiles_in_partial = 0;

    CUTLASS_PRAGMA_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tile_count; ++k_tile) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int read_stage = smem_pipe_read.index();

      // A fresh partial starts from zero (ScaleOut::Zero), then accumulates.
      tiled_mma.accumulate_ = k_tiles_in_partial == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++k_tiles_in_partial;

      if (k_tiles_in_partial == PromoteKTiles || k_tile == k_tile_count - 1) {
        warpgroup_wait<0>();                    // the partial is complete
        warpgroup_fence_operand(partial);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) {
          accum(i) += partial(i);                // fp32 add, round-to-nearest
        }
        k_tiles_in_partial = 0;
      } else {
        warpgroup_wait<1>();                    // k-tile t-1 retired; t stays in flight
        warpgroup_fence_operand(partial);
      }

      if (k_tile > 0) {                         // k-tile t-1's stage is no longer read
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
      ++smem_pipe_read;
    }
    warpgroup_fence_operand(accum);
  }
};

// MainloopAdaptor for SwiGLUGemmBase: PromoteKTiles == 0 keeps CUTLASS's single-level mainloop.
template <int PromoteKTiles>
struct PromotedAccumulation {
  template <class Base>
  using apply = cute::conditional_t<PromoteKTiles == 0, Base, PromotedAccumulationMma<Base, PromoteKTiles>>;
};

}  // namespace fused_swiglu::collective
