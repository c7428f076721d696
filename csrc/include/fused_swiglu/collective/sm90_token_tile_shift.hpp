// The last token tile, shifted back inside the problem.
//
// When M is not a multiple of the tile's token extent BLK_M, the last token tile would reach past M:
// TMA zero-fills the rows of X there and clips the rows of Y, and such tiles ran measurably slower
// than whole ones, reading more DRAM bytes (docs/performance.md). With M >= BLK_M the last
// tile starts at M - BLK_M instead, so every row it loads and stores lies inside the problem; it
// recomputes rows of the tile before it, which both tiles compute with the same instructions over the
// same K order, so both write the same values.
//
// ShiftedTokenTileMainloop wraps CUTLASS's sm90 TMA GMMA SS mainloop (tokens = operand A, the GEMM
// (M, 2I, K)); the dual mainloop (sm90_mma_dual_tma_gmma_ss_warpspecialized.hpp) and the SwiGLU epilogue
// (Sm90SwiGLUStore, ShiftLastTokenTile) place the tile with the same token_tile_start.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace fused_swiglu::collective {

using namespace cute;

// First row of token tile `tile` of `tile_rows` rows over `rows` rows: tile * tile_rows, except that a
// last tile reaching past `rows` starts at rows - tile_rows when the problem has at least one whole tile.
CUTLASS_HOST_DEVICE int token_tile_start(int tile, int tile_rows, int rows) {
  int start = tile * tile_rows;
  return (start + tile_rows > rows && rows >= tile_rows) ? rows - tile_rows : start;
}

// Base: CUTLASS's sm90 TMA GMMA SS warp-specialized CollectiveMma (optionally with promoted
// accumulation), A = X (M, K). Only the producer's placement of the A tile changes.
template <class Base>
struct ShiftedTokenTileMainloop : Base {
  using typename Base::TileShape;
  using typename Base::Params;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;

  static constexpr bool kShiftsLastTokenTile = true;

  // Base's (gA_mkl, gB_nkl), which the kernel reads the tile counts from, and X as a whole (M, K, L).
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    auto [M, N, K, L] = problem_shape_MNKL;
    auto base = Base::load_init(problem_shape_MNKL, params);
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));  // (m,k,l)
    return cute::make_tuple(get<0>(base), get<1>(base), mA_mkl);
  }

  // Base's producer, given an A tile that starts at token_tile_start (as tile 0 of an offset view).
  template <class TensorA, class TensorB, class TensorMA, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB, TensorMA> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor mA_mkl = get<2>(load_inputs);
    constexpr int kTileM = int(size<0>(TileShape{}));
    int const start = token_tile_start(int(m_coord), kTileM, int(size<0>(mA_mkl)));
    Tensor gA_mkl = local_tile(domain_offset(make_coord(start, 0, 0), mA_mkl), TileShape{}, make_coord(_, _, _),
                               Step<_1, Underscore, _1>{});                         // (BLK_M,BLK_K,m,k,l)
    Base::load(params, pipeline, smem_pipe_write, cute::make_tuple(gA_mkl, get<1>(load_inputs)),
               cute::make_tuple(0, n_coord, k_coord, l_coord), k_tile_iter, k_tile_count, thread_idx,
               block_rank_in_cluster, shared_tensors);
  }
};

// Whether a mainloop places its last token tile with token_tile_start (the epilogue must agree).
template <class Mainloop, class = void>
struct shifts_last_token_tile : cute::false_type {};
template <class Mainloop>
struct shifts_last_token_tile<Mainloop, cute::void_t<decltype(Mainloop::kShiftsLastTokenTile)>>
    : cute::bool_constant<Mainloop::kShiftsLastTokenTile> {};

}  // namespace fused_swiglu::collective
