// The weight scales' loads of CUTLASS's blockwise-scaled sm90 FP8 mainloop, rewritten for scales that
// cover several weight rows each but fewer than 32.
//
// CUTLASS 4.2's mainloop loads a tile's weight scales (those it does not load with TMA) in its
// auxiliary producer warp with cp.async: lane l copies the scales of the tile's rows l, l + 32, ...,
// predicated on l < ScaleNsPerTile. With one scale per G rows, 1 < G < 32, lane l's rows belong to
// scales l / G, l / G + 32 / G, ..., so the scales of rows 32 / G .. 31 (mod 32) are never loaded:
// with the packed kernel's G = 8, three in four of them (their accumulator columns came out NaN).
// Here lane l < ScaleNsPerTile copies scale l of the tile, one 4-byte cp.async per k-tile, zero-filled
// past the last scale; the consumer side is CUTLASS's unchanged. Pipeline accounting is CUTLASS's: all
// 32 lanes arrive on the stage's barrier when their copies land (cpasync_barrier_arrive_noinc).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/arch/barrier.h"

namespace fused_swiglu::collective {

template <class Base>
struct WholeScaleTileLoads : Base {
  using typename Base::Params;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;

  static constexpr int kScalesPerTile = Base::ScaleNsPerTile;
  static_assert(Base::IsTmaLoadSFA && !Base::IsTmaLoadSFB,
                "written for token scales loaded with TMA and weight scales loaded by the auxiliary warp");
  static_assert(kScalesPerTile <= 32, "one weight scale per lane of the auxiliary warp");

  template <class LoadInputs, class BlockCoord, class KTileIterator>
  CUTLASS_DEVICE void load_auxiliary(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                     LoadInputs const&, BlockCoord const& blk_coord, KTileIterator k_tile_iter,
                                     int k_tile_count, int lane, uint32_t, TensorStorage& shared_tensors) {
    using cute::get;
    int const scales = int(cute::size<0, 1>(params.layout_SFB));            // weight rows / G
    int64_t const k_stride = int64_t(cute::stride<1, 1>(params.layout_SFB));  // between K blocks
    int const scale = int(get<1>(blk_coord)) * kScalesPerTile + lane;
    bool const copies = lane < kScalesPerTile;
    bool const inside = copies && scale < scales;
    // smem: kScalesPerTile scales per stage, stage after stage
    uint32_t const smem = cute::cast_smem_ptr_to_uint(shared_tensors.smem_SFB.data()) + uint32_t(lane) * 4u;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      if (copies) {
        float const* src = params.ptr_SFB + (inside ? scale + int64_t(*k_tile_iter) * k_stride : 0);
        uint32_t const dst = smem + uint32_t(smem_pipe_write.index() * kScalesPerTile) * 4u;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(inside ? 4 : 0));
      }
      pipeline.producer_commit(smem_pipe_write, cutlass::arch::cpasync_barrier_arrive_noinc);
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

}  // namespace fused_swiglu::collective
