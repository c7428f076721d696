// Dual-A collective mainloop for Kernel-1 in swap-AB form (decode sizes): two A operands (W_gate,
// W_up) and one B operand (X), the mirror of DualBCollectiveMma.
//
// Per pipeline stage the producer thread issues three TMA loads that complete on ONE transaction
// barrier of the stage (PipelineTmaAsync):
//   sA[0 : BLK_M/2, :, stage]      <- W_gate tile (BLK_M/2, BLK_K)     gate accumulator rows
//   sA[BLK_M/2 : BLK_M, :, stage]  <- W_up   tile (BLK_M/2, BLK_K)     up accumulator rows
//   sB[:, :, stage]                <- X      tile (BLK_N, BLK_K)
// The barrier's expected bytes are those of one (BLK_M + BLK_N) x BLK_K stage, so the consumer side is
// CUTLASS's sm90 SS mainloop unchanged. With BLK_M = 128 and 64-row epilogue subtiles, the gate rows
// fill one subtile and their up rows the next, in the same threads (the warpgroup's two m64 GMMAs map
// threads to rows identically), which Sm90SwiGLUStore's PairsAcrossSubtiles mode pairs.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

#include "fused_swiglu/collective/sm90_tma_cluster_multicast.hpp"

namespace fused_swiglu::collective {

using namespace cute;

// Base: the CUTLASS sm90 TMA GMMA SS warp-specialized CollectiveMma built for TileShape (BLK_M, BLK_N,
// BLK_K) with BLK_M counting gate + up rows.
template <class Base>
struct DualACollectiveMma : Base {
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
  using typename Base::SmemLayoutAtomA;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::InternalElementA;
  using ClusterShape = typename DispatchPolicy::ClusterShape;

  static constexpr int BlkM = int(size<0>(TileShape{}));
  static constexpr int HalfM = BlkM / 2;
  static_assert(HalfM % int(size<0>(SmemLayoutAtomA{})) == 0,
                "each half of the A tile must be whole smem swizzle atoms: (BLK_M/2) % atom rows == 0");
  static_assert(cute::is_same_v<cute::remove_cvref_t<decltype(get<1>(StrideA{}))>, cute::_1>,
                "W_gate and W_up must be K-major (row-major [I, K])");

  using HalfTileShape = Shape<Int<HalfM>, decltype(size<1>(TileShape{})), decltype(size<2>(TileShape{}))>;
  // (BLK_M/2, BLK_K): one stage of one half, same atom and tiling order as SmemLayoutA.
  using SmemLayoutAHalf = decltype(tile_to_shape(SmemLayoutAtomA{}, make_shape(Int<HalfM>{}, size<2>(TileShape{})),
                                                 Step<_1, _2>{}));

  struct Arguments {
    ElementA const* ptr_A_gate;   // W_gate  (M/2, K) = (I, K)
    StrideA dA_gate;
    ElementA const* ptr_A_up;     // W_up    (I, K)
    StrideA dA_up;
    ElementB const* ptr_B;        // X       (N, K): the tokens
    StrideB dB;
    uint32_t mma_promotion_interval = 4;
  };

  // Base::Params keeps the B descriptor and the transaction byte counts that the kernel and Base::mma
  // read; its full-height A descriptor (built over W_gate) is never used.
  struct Params : Base::Params {
    using TMA_AHalf = decltype(make_tma_copy_A_sm90(
        GmemTiledCopyA{},
        make_tensor(static_cast<InternalElementA const*>(nullptr), repeat_like(StrideA{}, int32_t(0)), StrideA{}),
        SmemLayoutAHalf{}, HalfTileShape{}, ClusterShape{}));
    TMA_AHalf tma_load_a_gate;
    TMA_AHalf tma_load_a_up;
  };

  // problem_shape: (2I, tokens, K[, L]) in accumulator rows.
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    auto problem_shape_MNKL = append<4>(problem_shape, 1);
    auto M = get<0>(problem_shape_MNKL);
    auto K = get<2>(problem_shape_MNKL);
    auto L = get<3>(problem_shape_MNKL);
    typename Base::Arguments base_args{args.ptr_A_gate, args.dA_gate, args.ptr_B, args.dB, args.mma_promotion_interval};
    Params params;
    static_cast<typename Base::Params&>(params) = Base::to_underlying_arguments(problem_shape, base_args, workspace);
    auto half = [&](ElementA const* ptr, StrideA const& dA) {
      auto p = reinterpret_cast<InternalElementA const*>(ptr);
      Tensor tensor_a = make_tensor(p, make_layout(make_shape(M / 2, K, L), dA));  // (I, K, L)
      return make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutAHalf{}, HalfTileShape{}, ClusterShape{});
    };
    params.tma_load_a_gate = half(args.ptr_A_gate, args.dA_gate);
    params.tma_load_a_up = half(args.ptr_A_up, args.dA_up);
    return params;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    constexpr int kAlign = 128 / cutlass::sizeof_bits<ElementA>::value;  // 16-byte TMA rows
    bool ok = M % 2 == 0;
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(M / 2, K, L), args.dA_gate);
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(M / 2, K, L), args.dA_up);
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(N, K, L), args.dB);
    return ok;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a_gate.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_a_up.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  // Returns (gAgate_mkl, gB_nkl, gAup_mkl): (BLK_M/2,BLK_K,m,k,l), (BLK_N,BLK_K,n,k,l), (BLK_M/2,BLK_K,m,k,l).
  // A first and B second: the kernel reads the tile counts from them.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto [M, N, K, L] = problem_shape_MNKL;
    Tensor mAg_mkl = params.tma_load_a_gate.get_tma_tensor(make_shape(M / 2, K, L));                 // (m,k,l)
    Tensor mAu_mkl = params.tma_load_a_up.get_tma_tensor(make_shape(M / 2, K, L));                   // (m,k,l)
    Tensor mB_nkl = params.tma_load_b.get_tma_tensor(make_shape(N, K, L));                           // (n,k,l)
    Tensor gAg_mkl = local_tile(mAg_mkl, HalfTileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});
    Tensor gAu_mkl = local_tile(mAu_mkl, HalfTileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});
    Tensor gB_nkl = local_tile(mB_nkl, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});
    return cute::make_tuple(gAg_mkl, gB_nkl, gAu_mkl);
  }

  // Producer: one elected thread of the producer warp issues the three TMA loads of every k-tile.
  template <class TensorAg, class TensorB, class TensorAu, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorAg, TensorB, TensorAu> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});        // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});        // (BLK_N,BLK_K,PIPE)
    Tensor sA_halves = logical_divide(sA, Shape<Int<HalfM>>{});                     // ((BLK_M/2,2),BLK_K,PIPE)
    Tensor sAg = sA_halves(make_coord(_, _0{}), _, _);                                   // (BLK_M/2,BLK_K,PIPE)
    Tensor sAu = sA_halves(make_coord(_, _1{}), _, _);                                   // (BLK_M/2,BLK_K,PIPE)

    auto const mc = cluster_multicast<ClusterShape, GmemTiledCopyA, GmemTiledCopyB>(block_rank_in_cluster);

    auto block_tma_ag = params.tma_load_a_gate.get_slice(mc.block_id.y);
    auto block_tma_au = params.tma_load_a_up.get_slice(mc.block_id.y);
    auto block_tma_b = params.tma_load_b.get_slice(mc.block_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gAg = get<0>(load_inputs)(_, _, m_coord, _, l_coord);                             // (BLK_M/2,BLK_K,k)
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);                                // (BLK_N,BLK_K,k)
    Tensor gAu = get<2>(load_inputs)(_, _, m_coord, _, l_coord);                             // (BLK_M/2,BLK_K,k)

    Tensor tAgAg = block_tma_ag.partition_S(gAg);                                          // (TMA,TMA_M,TMA_K,k)
    Tensor tAsAg = block_tma_ag.partition_D(sAg);                                       // (TMA,TMA_M,TMA_K,PIPE)
    Tensor tAgAu = block_tma_au.partition_S(gAu);                                          // (TMA,TMA_M,TMA_K,k)
    Tensor tAsAu = block_tma_au.partition_D(sAu);                                       // (TMA,TMA_M,TMA_K,PIPE)
    Tensor tBgB = block_tma_b.partition_S(gB);                                             // (TMA,TMA_N,TMA_K,k)
    Tensor tBsB = block_tma_b.partition_D(sB);                                          // (TMA,TMA_N,TMA_K,PIPE)

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      using BarrierType = typename MainloopPipeline::ProducerBarrierType;
      BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      int stage = smem_pipe_write.index();
      copy(params.tma_load_a_gate.with(*tma_barrier, mc.mask_a), tAgAg(_, _, _, *k_tile_iter), tAsAg(_, _, _, stage));
      copy(params.tma_load_a_up.with(*tma_barrier, mc.mask_a), tAgAu(_, _, _, *k_tile_iter), tAsAu(_, _, _, stage));
      copy(params.tma_load_b.with(*tma_barrier, mc.mask_b), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

}  // namespace fused_swiglu::collective
