// Dual collective mainloop of the dual kernel: W_gate and W_up, read as they are, fill the two halves of one
// operand's smem stage; X fills the other operand. Split names the operand that holds the weights:
//
//   DualBCollectiveMma (Split = 1), the GEMM (M, 2I, K):
//     sA[:, :, stage]               <- X      tile (BLK_M, BLK_K)
//     sB[0 : BLK_N/2, :, stage]     <- W_gate tile (BLK_N/2, BLK_K)     gate accumulator columns
//     sB[BLK_N/2 : BLK_N, :, stage] <- W_up   tile (BLK_N/2, BLK_K)     up accumulator columns
//   DualACollectiveMma (Split = 0), the swap-AB GEMM (2I, M, K) for decode sizes:
//     sA[0 : BLK_M/2, :, stage]     <- W_gate tile (BLK_M/2, BLK_K)     gate accumulator rows
//     sA[BLK_M/2 : BLK_M, :, stage] <- W_up   tile (BLK_M/2, BLK_K)     up accumulator rows
//     sB[:, :, stage]               <- X      tile (BLK_N, BLK_K)
//
// Per pipeline stage the producer thread issues the three TMA loads (A's first), which complete on ONE
// transaction barrier of the stage (PipelineTmaAsync). The barrier's expected bytes are those of one
// (BLK_M + BLK_N) x BLK_K stage, exactly as for one GEMM, so the consumer side (GMMA issue, pipeline
// release) is CUTLASS's sm90 SS mainloop unchanged. The accumulator tile holds the gate accumulator in
// its first half along the split mode and the up accumulator in the second; the SwiGLU epilogue pairs
// them (Sm90SwiGLUStore: pair stride BLK_N/2 along columns, or a gate subtile followed by its up subtile).
//
// Both halves of the split stage are whole swizzle atoms (the half extent is a multiple of the atom's
// rows), so each half has the smem layout of a (half, BLK_K) tile and TMA writes it directly. In a
// cluster, each half is multicast like the operand it belongs to (sm90_tma_cluster_multicast.hpp).
//
// Paired rows (PairRows = P > 0, the (M, 2I, K) form only): instead of two halves, the B stage holds gate and
// up rows in alternating groups of P, as the packed kernel's weights are stored (weights.py):
//     sB[2 P g : 2 P g + P, :, stage]        <- W_gate rows n-tile * BLK_N/2 + [P g, P g + P)
//     sB[2 P g + P : 2 P (g + 1), :, stage]  <- W_up   rows n-tile * BLK_N/2 + [P g, P g + P)
// so the accumulators pair gate column c with c + P, as the packed kernel's (PairColumns<P>), and take its
// epilogue, whose small subtiles hold whole pairs. Each group is one swizzle atom of P = 8 rows, so TMA
// writes the (BLK_N/2, BLK_K) gate and up views of the stage in BLK_N/(2P) boxes each.
//
// Grouped (swap-AB form only, GroupedDualACollectiveMma): the weights of E experts, W_gate and W_up
// descriptors of (I, K, E) with the experts' stride as their batch stride (gate_up_proj [E, 2I, H] as
// transformers stores it: W_gate = rows 0..I-1 of each expert, W_up = rows I..2I-1). Token tile t reads
// the weights of expert tile_expert[t] (one int32 read by the producer thread per tile); X and the
// epilogue keep the problem's own coordinates (one padded token matrix, batch 1). The tile scheduler
// (kernel/sm90_tile_scheduler_expert_tiles.hpp) never hands out a tile whose expert is outside [0, E).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "fused_swiglu/detail/cutlass_sm90_gemm.hpp"

#include "fused_swiglu/collective/sm90_tma_cluster_multicast.hpp"
#include "fused_swiglu/collective/sm90_token_tile_shift.hpp"

namespace fused_swiglu::collective {

using namespace cute;

namespace detail {

// CUTLASS's TMA descriptor for operand A (Split = 0) or B (Split = 1): they differ in the cluster mode
// they multicast along.
template <int Split, class CopyOp, class GTensor, class SLayout, class CtaTiler, class ClusterShape>
CUTE_HOST_RTC auto make_tma_copy_sm90(CopyOp const& op, GTensor const& gtensor, SLayout const& slayout,
                                      CtaTiler const& cta_tiler, ClusterShape const& cluster_shape) {
  if constexpr (Split == 0) return make_tma_copy_A_sm90(op, gtensor, slayout, cta_tiler, cluster_shape);
  else return make_tma_copy_B_sm90(op, gtensor, slayout, cta_tiler, cluster_shape);
}

// Params fields of the grouped form only (empty otherwise).
template <bool Grouped>
struct ExpertParams {};

template <>
struct ExpertParams<true> {
  int32_t const* tile_expert;  // (tokens / BLK_N,): the expert of each token tile
  int32_t experts;             // E: the weights' batch extent
};

}  // namespace detail

// Base: the CUTLASS sm90 TMA GMMA SS warp-specialized CollectiveMma built for TileShape (BLK_M, BLK_N,
// BLK_K), with gate + up counted in BLK_M (Split = 0) or BLK_N (Split = 1). Grouped: the weights batched
// over experts, token tile t reading expert tile_expert[t] (Split = 0 only). PairRows: 0 = the halves above,
// P > 0 = gate and up rows in alternating groups of P (Split = 1 only).
template <class Base, int Split, bool Grouped = false, int PairRows = 0>
struct DualCollectiveMma : Base {
  static_assert(Split == 0 || Split == 1, "Split: 0 = W_gate/W_up in operand A, 1 = in operand B");
  static_assert(!Grouped || Split == 0, "grouped: the swap-AB form only (weights as A, token tiles along N)");
  static_assert(PairRows == 0 || (Split == 1 && !Grouped), "paired rows: the (M, 2I, K) form only");
  static constexpr bool kSplitA = Split == 0;
  static constexpr bool kGrouped = Grouped;
  static constexpr bool kPairedRows = PairRows > 0;
  // Tokens along M (Split = 1): the last token tile is shifted inside the problem (sm90_token_tile_shift.hpp).
  // In the swap-AB form (tokens along N, decode sizes) tiles stay where the scheduler puts them.
  static constexpr bool kShiftsLastTokenTile = !kSplitA;

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
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using ClusterShape = typename DispatchPolicy::ClusterShape;

  // The weights' operand (W) and the tokens' operand (X).
  using ElementW = cute::conditional_t<kSplitA, ElementA, ElementB>;
  using ElementX = cute::conditional_t<kSplitA, ElementB, ElementA>;
  using StrideW = cute::conditional_t<kSplitA, StrideA, StrideB>;
  using StrideX = cute::conditional_t<kSplitA, StrideB, StrideA>;
  using InternalElementW = cute::conditional_t<kSplitA, typename Base::InternalElementA,
                                               typename Base::InternalElementB>;
  using GmemTiledCopyW = cute::conditional_t<kSplitA, GmemTiledCopyA, GmemTiledCopyB>;
  using SmemLayoutAtomW = cute::conditional_t<kSplitA, typename Base::SmemLayoutAtomA,
                                              typename Base::SmemLayoutAtomB>;

  static constexpr int Half = int(size<Split>(TileShape{})) / 2;
  static_assert(Half % int(size<0>(SmemLayoutAtomW{})) == 0,
                "each half of the weights' tile must be whole smem swizzle atoms: half % atom rows == 0");
  static_assert(cute::is_same_v<cute::remove_cvref_t<decltype(get<1>(StrideW{}))>, cute::_1>,
                "W_gate and W_up must be K-major (row-major [I, K])");

  // Paired rows: P rows per group, G groups of gate (and of up) rows per stage.
  static constexpr int kGroupRows = kPairedRows ? PairRows : Half;
  static constexpr int kGroups = Half / kGroupRows;
  static_assert(Half % kGroupRows == 0 && kGroupRows % int(size<0>(SmemLayoutAtomW{})) == 0,
                "paired rows: the half is whole groups, each group whole smem swizzle atoms");
  // What one TMA load of a weight operand covers: its half of the stage, or one group of P rows.
  using WLoadTileShape = cute::conditional_t<
      kSplitA, Shape<Int<kGroupRows>, decltype(size<1>(TileShape{})), decltype(size<2>(TileShape{}))>,
      Shape<decltype(size<0>(TileShape{})), Int<kGroupRows>, decltype(size<2>(TileShape{}))>>;
  // (rows, BLK_K): one stage of one such load, same atom and tiling order as the operand's smem layout.
  using SmemLayoutWHalf = decltype(tile_to_shape(SmemLayoutAtomW{},
                                                 make_shape(Int<kGroupRows>{}, size<2>(TileShape{})), Step<_1, _2>{}));
  // The weights' stage (2 half, BLK_K, PIPE) as (row in group, BLK_K, gate or up, group, PIPE): row r + P h + 2 P g.
  template <class LayoutW>
  CUTE_HOST_DEVICE static constexpr auto paired_rows(LayoutW const& w) {
    constexpr int rows = 2 * Half;
    constexpr int k = int(size<2>(TileShape{}));
    return composition(w, Layout<Shape<Int<kGroupRows>, Int<k>, _2, Int<kGroups>, decltype(size<2>(w))>,
                                 Stride<_1, Int<rows>, Int<kGroupRows>, Int<2 * kGroupRows>, Int<rows * k>>>{});
  }
  // local_tile projections of A (m, k) and B (n, k) tiles.
  using StepW = cute::conditional_t<kSplitA, Step<_1, Underscore, _1>, Step<Underscore, _1, _1>>;
  using StepX = cute::conditional_t<kSplitA, Step<Underscore, _1, _1>, Step<_1, Underscore, _1>>;

  struct Arguments {
    ElementW const* ptr_gate;  // W_gate (I, K)
    StrideW d_gate;
    ElementW const* ptr_up;    // W_up   (I, K)
    StrideW d_up;
    ElementX const* ptr_x;     // X      (tokens, K)
    StrideX d_x;
    uint32_t mma_promotion_interval = 4;
    // Grouped only: W_gate and W_up of E experts, (I, K, E) with d_gate's / d_up's batch stride between
    // experts; the expert of each token tile. Ignored otherwise.
    int32_t const* tile_expert = nullptr;
    int32_t experts = 1;
  };

  // Base::Params keeps X's descriptor and the transaction byte counts that the kernel and Base::mma
  // read; its full-size descriptor of the weights' operand (built over W_gate) is never used.
  struct Params : Base::Params, detail::ExpertParams<Grouped> {
    using TMA_WHalf = decltype(detail::make_tma_copy_sm90<Split>(
        GmemTiledCopyW{},
        make_tensor(static_cast<InternalElementW const*>(nullptr), repeat_like(StrideW{}, int32_t(0)), StrideW{}),
        SmemLayoutWHalf{}, WLoadTileShape{}, ClusterShape{}));
    TMA_WHalf tma_load_gate;
    TMA_WHalf tma_load_up;
  };

  // problem_shape: (M, 2I, K[, L]) for Split = 1, (2I, tokens, K[, L]) for Split = 0.
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    auto problem_shape_MNKL = append<4>(problem_shape, 1);
    auto rows_W = get<Split>(problem_shape_MNKL);  // 2I
    auto K = get<2>(problem_shape_MNKL);
    auto L = weight_batches(get<3>(problem_shape_MNKL), args.experts);
    typename Base::Arguments base_args;
    if constexpr (kSplitA) {
      base_args = {args.ptr_gate, args.d_gate, args.ptr_x, args.d_x, args.mma_promotion_interval};
    } else {
      base_args = {args.ptr_x, args.d_x, args.ptr_gate, args.d_gate, args.mma_promotion_interval};
    }
    Params params;
    static_cast<typename Base::Params&>(params) = Base::to_underlying_arguments(problem_shape, base_args, workspace);
    auto half = [&](ElementW const* ptr, StrideW const& d) {
      auto p = reinterpret_cast<InternalElementW const*>(ptr);
      Tensor tensor_w = make_tensor(p, make_layout(make_shape(rows_W / 2, K, L), d));  // (I, K, L)
      return detail::make_tma_copy_sm90<Split>(GmemTiledCopyW{}, tensor_w, SmemLayoutWHalf{}, WLoadTileShape{},
                                               ClusterShape{});
    };
    params.tma_load_gate = half(args.ptr_gate, args.d_gate);
    params.tma_load_up = half(args.ptr_up, args.d_up);
    if constexpr (Grouped) {
      params.tile_expert = args.tile_expert;
      params.experts = args.experts;
    }
    return params;
  }

  // The weights' batch extent: the problem's L, or E experts in the grouped form.
  template <class L>
  CUTLASS_HOST_DEVICE static auto weight_batches(L l, int32_t experts) {
    if constexpr (Grouped) return experts;
    else return l;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto problem_shape_MNKL = append<4>(problem_shape, 1);
    auto rows_W = get<Split>(problem_shape_MNKL);
    auto rows_X = get<1 - Split>(problem_shape_MNKL);
    auto K = get<2>(problem_shape_MNKL);
    auto L = get<3>(problem_shape_MNKL);
    auto L_W = weight_batches(L, args.experts);
    constexpr int kAlign = 128 / cutlass::sizeof_bits<ElementW>::value;  // 16-byte TMA rows
    bool ok = rows_W % 2 == 0;
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(rows_W / 2, K, L_W), args.d_gate);
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(rows_W / 2, K, L_W), args.d_up);
    ok = ok && cutlass::detail::check_alignment<kAlign>(make_shape(rows_X, K, L), args.d_x);
    if constexpr (Grouped) {
      // every token tile names its expert; the problem itself is one batch
      ok = ok && args.tile_expert != nullptr && args.experts >= 1 && L == 1 &&
           rows_X % int(size<1>(TileShape{})) == 0;
    }
    return ok;
  }

  // X's descriptor (Base::Params' A or B).
  CUTLASS_HOST_DEVICE static auto const& tma_load_x(Params const& params) {
    if constexpr (kSplitA) return params.tma_load_b;
    else return params.tma_load_a;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    if constexpr (!kSplitA) cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_gate.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_up.get_tma_descriptor());
    if constexpr (kSplitA) cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  // Returns (gA, gB, gW_up, mX): A's and B's tiles first, as the kernel reads the tile counts from them
  // ((BLK_M,BLK_K,m,k,l) and (BLK_N,BLK_K,n,k,l), the weights' operand as its gate half), then the up
  // half of the weights' operand, then X as a whole (tokens, K, L) for the shifted last token tile.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    auto rows_W = get<Split>(problem_shape_MNKL);
    auto rows_X = get<1 - Split>(problem_shape_MNKL);
    auto K = get<2>(problem_shape_MNKL);
    auto L = get<3>(problem_shape_MNKL);
    auto L_W = [&] {
      if constexpr (Grouped) return params.experts;
      else return L;
    }();
    Tensor mWg = params.tma_load_gate.get_tma_tensor(make_shape(rows_W / 2, K, L_W));                // (i,k,l)
    Tensor mWu = params.tma_load_up.get_tma_tensor(make_shape(rows_W / 2, K, L_W));                  // (i,k,l)
    Tensor mX = tma_load_x(params).get_tma_tensor(make_shape(rows_X, K, L));                         // (t,k,l)
    // (half,BLK_K,i,k,l), or with paired rows (P,BLK_K,i,k,l) over groups i of P rows
    Tensor gWg = local_tile(mWg, WLoadTileShape{}, make_coord(_, _, _), StepW{});
    Tensor gWu = local_tile(mWu, WLoadTileShape{}, make_coord(_, _, _), StepW{});
    Tensor gX = local_tile(mX, TileShape{}, make_coord(_, _, _), StepX{});           // (BLK_X,BLK_K,t,k,l)
    if constexpr (kSplitA) return cute::make_tuple(gWg, gX, gWu, mX);
    else return cute::make_tuple(gX, gWg, gWu, mX);
  }

  // Producer: one elected thread of the producer warp issues the three TMA loads of every k-tile.
  template <class TensorA, class TensorB, class TensorWu, class TensorX, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB, TensorWu, TensorX> const& load_inputs,
                           BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});        // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});        // (BLK_N,BLK_K,PIPE)
    Tensor sW = get<Split>(cute::make_tuple(sA, sB));                                      // (2 half,BLK_K,PIPE)
    // the gate and up views: the two halves (half,BLK_K,PIPE), or every other group of P rows (P,BLK_K,G,PIPE)
    auto views = [&] {
      if constexpr (kPairedRows) {
        Tensor sW_pairs = make_tensor(sW.data(), paired_rows(sW.layout()));           // (P,BLK_K,2,G,PIPE)
        return cute::make_tuple(sW_pairs(_, _, _0{}, _, _), sW_pairs(_, _, _1{}, _, _));
      } else {
        Tensor sW_halves = logical_divide(sW, Shape<Int<Half>>{});                        // ((half,2),BLK_K,PIPE)
        return cute::make_tuple(sW_halves(make_coord(_, _0{}), _, _), sW_halves(make_coord(_, _1{}), _, _));
      }
    }();
    Tensor sWg = get<0>(views);
    Tensor sWu = get<1>(views);
    Tensor sX = get<1 - Split>(cute::make_tuple(sA, sB));                                  // (BLK_X,BLK_K,PIPE)

    // A: sliced by the CTA's position along N (block_id.y), multicast to the CTAs of its cluster row;
    // B: sliced by its position along M (block_id.x), multicast to its cluster column.
    auto const mc = cluster_multicast<ClusterShape, GmemTiledCopyA, GmemTiledCopyB>(block_rank_in_cluster);
    auto const slice = cute::make_tuple(mc.block_id.y, mc.block_id.x);
    uint16_t const mask_W = get<Split>(cute::make_tuple(mc.mask_a, mc.mask_b));
    uint16_t const mask_X = get<1 - Split>(cute::make_tuple(mc.mask_a, mc.mask_b));

    auto block_tma_wg = params.tma_load_gate.get_slice(get<Split>(slice));
    auto block_tma_wu = params.tma_load_up.get_slice(get<Split>(slice));
    auto block_tma_x = tma_load_x(params).get_slice(get<1 - Split>(slice));

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    auto const w_coord = get<Split>(cute::make_tuple(m_coord, n_coord));
    auto const x_coord = get<1 - Split>(cute::make_tuple(m_coord, n_coord));
    int const x_tile = int(x_coord);
    int const l_tile = int(l_coord);
    // The weights' batch: the problem's, or the expert of this token tile (the scheduler hands out only
    // tiles whose expert lies in [0, E))
    int const w_batch = [&] {
      if constexpr (Grouped) return int(params.tile_expert[x_tile]);
      else return l_tile;
    }();
    // (half,BLK_K,k), or with paired rows (P,BLK_K,i,k) over every group i of P rows (the tile's: from first_group)
    auto w_rows = [&](auto const& gW) {
      if constexpr (kPairedRows) return gW(_, _, _, _, w_batch);
      else return gW(_, _, w_coord, _, w_batch);
    };
    int const first_group = int(w_coord) * kGroups;
    Tensor gWg = w_rows(get<Split>(load_inputs));
    // (BLK_X,BLK_K,k): in the (M, 2I, K) form the last token tile starts at token_tile_start
    Tensor gX = [&] {
      if constexpr (kShiftsLastTokenTile) {
        Tensor mX = get<3>(load_inputs);                                                   // (t,k,l)
        int const start = token_tile_start(x_tile, int(size<0>(TileShape{})), int(size<0>(mX)));
        return local_tile(domain_offset(make_coord(start, 0, 0), mX), TileShape{}, make_coord(_, _, _),
                          StepX{})(_, _, 0, _, l_tile);
      } else {
        return get<1 - Split>(load_inputs)(_, _, x_tile, _, l_tile);
      }
    }();
    Tensor gWu = w_rows(get<2>(load_inputs));

    // (TMA,TMA_W,TMA_K,k) and (TMA,TMA_W,TMA_K,PIPE); with paired rows (TMA,TMA_W,TMA_K,i,k) and (TMA,TMA_W,TMA_K,G,PIPE)
    Tensor tWgWg = block_tma_wg.partition_S(gWg);
    Tensor tWsWg = block_tma_wg.partition_D(sWg);
    Tensor tWgWu = block_tma_wu.partition_S(gWu);
    Tensor tWsWu = block_tma_wu.partition_D(sWu);
    Tensor tXgX = block_tma_x.partition_S(gX);                                             // (TMA,TMA_X,TMA_K,k)
    Tensor tXsX = block_tma_x.partition_D(sX);                                          // (TMA,TMA_X,TMA_K,PIPE)

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      using BarrierType = typename MainloopPipeline::ProducerBarrierType;
      BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      int stage = smem_pipe_write.index();
      if constexpr (!kSplitA) {
        copy(tma_load_x(params).with(*tma_barrier, mask_X), tXgX(_, _, _, *k_tile_iter), tXsX(_, _, _, stage));
      }
      if constexpr (kPairedRows) {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < kGroups; ++g) {  // group g of gate rows, then its up rows, P rows each
          copy(params.tma_load_gate.with(*tma_barrier, mask_W), tWgWg(_, _, _, first_group + g, *k_tile_iter),
               tWsWg(_, _, _, g, stage));
          copy(params.tma_load_up.with(*tma_barrier, mask_W), tWgWu(_, _, _, first_group + g, *k_tile_iter),
               tWsWu(_, _, _, g, stage));
        }
      } else {
        copy(params.tma_load_gate.with(*tma_barrier, mask_W), tWgWg(_, _, _, *k_tile_iter), tWsWg(_, _, _, stage));
        copy(params.tma_load_up.with(*tma_barrier, mask_W), tWgWu(_, _, _, *k_tile_iter), tWsWu(_, _, _, stage));
      }
      if constexpr (kSplitA) {
        copy(tma_load_x(params).with(*tma_barrier, mask_X), tXgX(_, _, _, *k_tile_iter), tXsX(_, _, _, stage));
      }
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

// The two forms by name, for the kernels' MainloopAdaptor (a template of one parameter).
template <class Base>
using DualBCollectiveMma = DualCollectiveMma<Base, 1>;  // the dual kernel: X as A, W_gate | W_up as B
template <class Base>
using DualACollectiveMma = DualCollectiveMma<Base, 0>;  // the dual kernel in swap-AB form: W_gate | W_up as A
template <class Base>
using GroupedDualACollectiveMma = DualCollectiveMma<Base, 0, true>;  // the swap-AB form over E experts' weights
template <class Base>
using PairedDualBCollectiveMma = DualCollectiveMma<Base, 1, false, 8>;  // the dual kernel, gate/up rows paired by 8

}  // namespace fused_swiglu::collective
