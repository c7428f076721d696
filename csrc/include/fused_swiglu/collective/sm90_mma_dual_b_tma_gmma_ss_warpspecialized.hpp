// Dual-B collective mainloop for Kernel-1: one A operand (X) and two B operands (W_gate, W_up).
//
// Per pipeline stage the producer thread issues three TMA loads that complete on ONE transaction
// barrier of the stage (PipelineTmaAsync):
//   sA[:, :, stage]              <- X     tile (BLK_M, BLK_K)
//   sB[0 : BLK_N/2, :, stage]    <- W_gate tile (BLK_N/2, BLK_K)     gate accumulator columns
//   sB[BLK_N/2 : BLK_N, :, stage]<- W_up   tile (BLK_N/2, BLK_K)     up accumulator columns
// The barrier's expected bytes are those of a single (BLK_M + BLK_N) x BLK_K stage, exactly as for one
// GEMM, so the consumer side (GMMA issue, pipeline release) is CUTLASS's sm90 SS mainloop unchanged:
// the consumer warpgroup's accumulator tile holds the gate accumulator in columns [0, BLK_N/2) and the
// up accumulator in columns [BLK_N/2, BLK_N), and the SwiGLU epilogue pairs column c with c + BLK_N/2.
//
// Both halves of the B stage are whole swizzle atoms (BLK_N/2 is a multiple of 8 rows of 128 bytes), so
// each half has the same smem layout as a (BLK_N/2, BLK_K) tile and TMA writes it directly.
// With a cluster of CLUSTER_M CTAs along M, each half is multicast like CUTLASS's B operand.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

#include "fused_swiglu/collective/sm90_tma_cluster_multicast.hpp"

namespace fused_swiglu::collective {

using namespace cute;

// Base: the CUTLASS sm90 TMA GMMA SS warp-specialized CollectiveMma built for TileShape (BLK_M, BLK_N,
// BLK_K) with BLK_N counting gate + up columns.
template <class Base>
struct DualBCollectiveMma : Base {
  using typename Base::TileShape;
  using typename Base::ElementA;
  using typename Base::ElementB;
  using typename Base::StrideA;
  using typename Base::StrideB;
  using typename Base::DispatchPolicy;
  using typename Base::GmemTiledCopyA;
  using typename Base::GmemTiledCopyB;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutAtomB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::InternalElementB;
  using ClusterShape = typename DispatchPolicy::ClusterShape;

  static constexpr int BlkN = int(size<1>(TileShape{}));
  static constexpr int HalfN = BlkN / 2;
  static_assert(HalfN % int(size<0>(SmemLayoutAtomB{})) == 0,
                "each half of the B tile must be whole smem swizzle atoms: (BLK_N/2) % atom rows == 0");
  static_assert(cute::is_same_v<cute::remove_cvref_t<decltype(get<1>(StrideB{}))>, cute::_1>,
                "W_gate and W_up must be K-major (row-major [N, K])");

  using HalfTileShape = Shape<decltype(size<0>(TileShape{})), Int<HalfN>, decltype(size<2>(TileShape{}))>;
  // (BLK_N/2, BLK_K): one stage of one half, same atom and tiling order as SmemLayoutB.
  using SmemLayoutBHalf = decltype(tile_to_shape(SmemLayoutAtomB{}, make_shape(Int<HalfN>{}, size<2>(TileShape{})),
                                                 Step<_1, _2>{}));

  struct Arguments {
    ElementA const* ptr_A;        // X       (M, K)
    StrideA dA;
    ElementB const* ptr_B_gate;   // W_gate  (N/2, K) = (I, K)
    StrideB dB_gate;
    ElementB const* ptr_B_up;     // W_up    (I, K)
    StrideB dB_up;
    uint32_t mma_promotion_interval = 4;
  };

  // Base::Params keeps the A descriptor and the transaction byte counts that the kernel and Base::mma
  // read; its full-width B descriptor is left default-constructed and never used.
  struct Params : Base::Params {
    using TMA_BHalf = decltype(make_tma_copy_B_sm90(
        GmemTiledCopyB{},
        make_tensor(static_cast<InternalElementB const*>(nullptr), repeat_like(StrideB{}, int32_t(0)), StrideB{}),
        SmemLayoutBHalf{}, HalfTileShape{}, ClusterShape{}));
    TMA_BHalf tma_load_b_gate;
    TMA_BHalf tma_load_b_up;
  };

  // problem_shape: (M, 2I, K[, L]) in accumulator columns.
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    auto problem_shape_MNKL = append<4>(problem_shape, 1);
    auto N = get<1>(problem_shape_MNKL);
    auto K = get<2>(problem_shape_MNKL);
    auto L = get<3>(problem_shape_MNKL);
    typename Base::Arguments base_args{args.ptr_A, args.dA, args.ptr_B_gate, args.dB_gate,
                                       args.mma_promotion_interval};
    Params params;
    static_cast<typename Base::Params&>(params) = Base::to_underlying_arguments(problem_shape, base_args, workspace);
    auto half = [&](ElementB const* ptr, StrideB const& dB) {
      auto p = reinterpret_cast<InternalElementB const*>(ptr);
      Tensor tensor_b = make_tensor(p, make_layout(make_shape(N / 2, K, L), dB));  // (I, K, L)
      return make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b, SmemLayoutBHalf{}, HalfTileShape{}, ClusterShape{});
    };
    params.tma_load_b_gate = half(args.ptr_B_gate, args.dB_gate);
    params.tma_load_b_up = half(args.ptr_B_up, args.dB_up);
    return params;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    constexpr int kAlign = 128 / cutlass::sizeof_bits<ElementB>::value;  // 16-byte TMA rows
    bool ok = N % 2 == 0;
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(M, K, L), args.dA);
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(N / 2, K, L), args.dB_gate);
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(N / 2, K, L), args.dB_up);
    return ok;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b_gate.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b_up.get_tma_descriptor());
  }

  // Returns (gA_mkl, gBgate_nkl, gBup_nkl): (BLK_M,BLK_K,m,k,l), (BLK_N/2,BLK_K,n,k,l) twice.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto [M, N, K, L] = problem_shape_MNKL;
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));                           // (m,k,l)
    Tensor mBg_nkl = params.tma_load_b_gate.get_tma_tensor(make_shape(N / 2, K, L));                 // (n,k,l)
    Tensor mBu_nkl = params.tma_load_b_up.get_tma_tensor(make_shape(N / 2, K, L));                   // (n,k,l)
    Tensor gA_mkl = local_tile(mA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});  // (BLK_M,BLK_K,m,k,l)
    Tensor gBg_nkl = local_tile(mBg_nkl, HalfTileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});
    Tensor gBu_nkl = local_tile(mBu_nkl, HalfTileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});
    return cute::make_tuple(gA_mkl, gBg_nkl, gBu_nkl);
  }

  // Producer: one elected thread of the producer warp issues the three TMA loads of every k-tile.
  template <class TensorA, class TensorBg, class TensorBu, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorBg, TensorBu> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});        // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});        // (BLK_N,BLK_K,PIPE)
    Tensor sB_halves = logical_divide(sB, Shape<Int<HalfN>>{});                     // ((BLK_N/2,2),BLK_K,PIPE)
    Tensor sBg = sB_halves(make_coord(_, _0{}), _, _);                                   // (BLK_N/2,BLK_K,PIPE)
    Tensor sBu = sB_halves(make_coord(_, _1{}), _, _);                                   // (BLK_N/2,BLK_K,PIPE)

    auto const mc = cluster_multicast<ClusterShape, GmemTiledCopyA, GmemTiledCopyB>(block_rank_in_cluster);

    auto block_tma_a = params.tma_load_a.get_slice(mc.block_id.y);
    auto block_tma_bg = params.tma_load_b_gate.get_slice(mc.block_id.x);
    auto block_tma_bu = params.tma_load_b_up.get_slice(mc.block_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);                                // (BLK_M,BLK_K,k)
    Tensor gBg = get<1>(load_inputs)(_, _, n_coord, _, l_coord);                             // (BLK_N/2,BLK_K,k)
    Tensor gBu = get<2>(load_inputs)(_, _, n_coord, _, l_coord);                             // (BLK_N/2,BLK_K,k)

    Tensor tAgA = block_tma_a.partition_S(gA);                                             // (TMA,TMA_M,TMA_K,k)
    Tensor tAsA = block_tma_a.partition_D(sA);                                          // (TMA,TMA_M,TMA_K,PIPE)
    Tensor tBgBg = block_tma_bg.partition_S(gBg);                                          // (TMA,TMA_N,TMA_K,k)
    Tensor tBsBg = block_tma_bg.partition_D(sBg);                                       // (TMA,TMA_N,TMA_K,PIPE)
    Tensor tBgBu = block_tma_bu.partition_S(gBu);                                          // (TMA,TMA_N,TMA_K,k)
    Tensor tBsBu = block_tma_bu.partition_D(sBu);                                       // (TMA,TMA_N,TMA_K,PIPE)

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      using BarrierType = typename MainloopPipeline::ProducerBarrierType;
      BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      int stage = smem_pipe_write.index();
      copy(params.tma_load_a.with(*tma_barrier, mc.mask_a), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      copy(params.tma_load_b_gate.with(*tma_barrier, mc.mask_b), tBgBg(_, _, _, *k_tile_iter), tBsBg(_, _, _, stage));
      copy(params.tma_load_b_up.with(*tma_barrier, mc.mask_b), tBgBu(_, _, _, *k_tile_iter), tBsBu(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

}  // namespace fused_swiglu::collective
