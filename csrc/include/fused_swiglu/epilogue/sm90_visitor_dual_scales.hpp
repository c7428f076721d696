// Sm90DualScale: an sm90 Epilogue Visitor Tree (EVT) leaf node that broadcasts fp32 dequantization
// scales over the dual kernel's accumulator tile: one scale per accumulator row (Axis = 0) or per
// accumulator column (Axis = 1), per tensor or per vector element.
//
// CUTLASS's row and column broadcast nodes read scale[c] at the accumulator's global coordinate c.
// The dual kernel's tiles do not map onto one vector that way, so this node computes each scale's
// address itself (ScaleMap):
//
//   Tokens       the axis runs over tokens. Tile t holds tokens [s, s + T), T the tile's extent along
//                the axis, s = t * T, or token_tile_start(t, T, tokens) where the mainloop shifts the
//                last token tile back inside the problem (ShiftLastTokenTile: the dual kernel's
//                mainloop does, collective/sm90_token_tile_shift.hpp). Reads scale[token * stride].
//   DualWeights  the axis runs over the 2I gate/up accumulator rows or columns. Tile t holds gate rows
//                [t * T/2, t * T/2 + T/2) of W_gate in its first half and the same rows of W_up in its
//                second half (collective/sm90_mma_dual_tma_gmma_ss_warpspecialized.hpp). The scale
//                vector holds the gate scales, then the up scales: stride 1 reads scale[i] for gate row
//                i and scale[I + i] for up row i; stride 0 reads scale[0] (gate) and scale[1] (up).
//
// Positions past the problem (tokens >= M, weight rows >= I: TMA zero-filled their operands and
// clips their outputs) read no memory and get scale 0.
//
// Each consumer thread loads the scales of its own accumulator rows or columns from global memory in
// begin(), once per tile, into registers: the distinct coordinates along the axis of the thread's
// fragment (GMMA's accumulator layout gives a thread 2 rows of each 64-row warpgroup subtile and 2 of
// every 8 columns) in every epilogue subtile along the axis. visit() hands out the scale of each
// element from a compile-time table, so every register index is a constant. No shared memory and no
// synchronization: the scales are a few hundred bytes per tile, served by L1/L2.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"

#include "fused_swiglu/collective/sm90_token_tile_shift.hpp"

namespace fused_swiglu::epilogue::fusion {

using namespace cute;
using cutlass::Array;

enum class ScaleMap { Tokens, DualWeights };

namespace detail {

// For a thread's fragment of F accumulator elements whose offsets from the thread's first element are
// given by the static layout CrdLayout (fragment index -> (dm, dn)): the distinct offsets along Axis
// in order of first appearance, and for each element the index of its offset among them.
template <int F>
struct AxisTable {
  int offset[F];  // the distinct offsets (count of them)
  int slot[F];    // element -> index into offset
  int count;
};

template <class CrdLayout, int Axis, int F = int(decltype(size(CrdLayout{}))::value)>
constexpr AxisTable<F> make_axis_table() {
  AxisTable<F> t{};
  for (int i = 0; i < F; ++i) {
    int const along = int(get<Axis>(CrdLayout{}(i)));
    int s = 0;
    while (s < t.count && t.offset[s] != along) ++s;
    if (s == t.count) t.offset[t.count++] = along;
    t.slot[i] = s;
  }
  return t;
}

}  // namespace detail

template <
  int Axis,                         // 0: one scale per accumulator row; 1: per accumulator column
  ScaleMap Map,                     // what the axis runs over (above)
  bool ShiftLastTokenTile = false   // Tokens: the last token tile starts at token_tile_start
>
struct Sm90DualScale {
  static_assert(Axis == 0 || Axis == 1, "Axis: 0 = accumulator rows, 1 = accumulator columns");
  static_assert(!ShiftLastTokenTile || (Map == ScaleMap::Tokens && Axis == 0),
                "only a token axis along the accumulator rows (the GEMM's M) is shifted");

  struct SharedStorage {};

  struct Arguments {
    float const* ptr = nullptr;  // fp32 scales (layout above)
    int32_t stride = 0;          // 0: per tensor (Tokens: one value; DualWeights: gate, up); 1: per element
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr != nullptr && (args.stride == 0 || args.stride == 1);
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90DualScale() {}

  CUTLASS_HOST_DEVICE Sm90DualScale(Params const& params, SharedStorage const&) : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  // CrdLayout: the thread's fragment of one subtile (as in Sm90SwiGLUStore). Subtiles: epilogue
  // subtiles along Axis; EpiExtent: a subtile's extent along Axis; TileExtent: the CTA tile's.
  template <class CrdLayout, int Subtiles, int EpiExtent, int TileExtent>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    static constexpr int F = int(size(CrdLayout{}));
    static constexpr auto table() { return detail::make_axis_table<CrdLayout, Axis>(); }
    static constexpr int D = table().count;   // distinct coordinates along Axis per subtile

    CUTLASS_DEVICE ConsumerStoreCallbacks(Params const* params_ptr, int first, int tile_start, int extent)
        : params_ptr(params_ptr), first(first), tile_start(tile_start), extent(extent) {}

    Params const* params_ptr;
    int first;        // coordinate along Axis of the thread's first element inside the CTA tile
    int tile_start;   // Tokens: the tile's first token; DualWeights: its first gate (and up) row
    int extent;       // Tokens: the token count; DualWeights: I
    Array<float, Subtiles * D> scales;   // subtile e, distinct coordinate d: scales[e * D + d]

    // The scale at coordinate c along Axis inside the CTA tile (0 past the problem): one predicated
    // load, no branch, so that the thread's loads are all in flight together.
    CUTLASS_DEVICE float load(int c) const {
      bool const vector = params_ptr->stride != 0;
      int index;
      bool inside;
      if constexpr (Map == ScaleMap::Tokens) {
        int const token = tile_start + c;
        index = vector ? token : 0;
        inside = token < extent;
      } else {
        constexpr int kHalf = TileExtent / 2;
        int const up = c >= kHalf ? 1 : 0;            // the second half of the tile holds W_up's rows
        int const row = tile_start + c - up * kHalf;  // the row of W_gate / W_up
        index = vector ? up * extent + row : up;
        inside = row < extent;
      }
      return inside ? __ldg(params_ptr->ptr + index) : 0.0f;
    }

    CUTLASS_DEVICE void begin() {
      constexpr auto t = table();
      cute::for_each(make_int_sequence<Subtiles>{}, [&](auto e) {
        cute::for_each(make_int_sequence<D>{}, [&](auto d) {
          constexpr int s = decltype(e)::value * D + decltype(d)::value;
          scales[s] = load(first + decltype(e)::value * EpiExtent + t.offset[decltype(d)::value]);
        });
      });
    }

    // Element i of fragment epi_v of subtile (epi_m, epi_n) is element epi_v * FragmentSize + i of the
    // subtile's fragment (the collective's order, as CrdLayout's).
    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE Array<float, FragmentSize> visit(Array<ElementAccumulator, FragmentSize> const&, int epi_v,
                                                    int epi_m, int epi_n) {
      static_assert(F % FragmentSize == 0, "the collective must visit the subtile in whole fragments");
      constexpr auto t = table();
      int const e = Axis == 0 ? epi_m : epi_n;   // constants once the collective's loops are unrolled
      Array<float, FragmentSize> out;
      cute::for_each(make_int_sequence<FragmentSize>{}, [&](auto i) {
        out[i] = scales[e * D + t.slot[epi_v * FragmentSize + decltype(i)::value]];
      });
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    using CtaTile = cute::remove_cvref_t<decltype(args.tile_shape_mnk)>;
    using EpiTile = cute::remove_cvref_t<decltype(args.epi_tile)>;
    constexpr int kTile = int(size<Axis>(CtaTile{}));
    constexpr int kEpi = int(size<Axis>(EpiTile{}));
    static_assert(kTile % kEpi == 0, "the CTA tile must hold whole epilogue subtiles along the scale axis");
    static_assert(Map == ScaleMap::Tokens || kTile % 2 == 0, "a dual tile holds a gate half and an up half");
    // args.tCcD: (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates relative to this thread's first element
    using CrdLayout = decltype(coalesce(layout(args.tCcD(_, _, _, _0{}, _0{}))));
    // This thread's first element relative to the CTA tile: residue_cD - residue_tCcD.
    int const first = int(get<Axis>(args.residue_cD)) - int(get<Axis>(args.residue_tCcD));
    int const tile = Axis == 0 ? int(m) : int(n);
    int const rows = Axis == 0 ? int(M) : int(N);   // the GEMM's extent along Axis
    int tile_start, extent;
    if constexpr (Map == ScaleMap::Tokens) {
      tile_start = ShiftLastTokenTile ? fused_swiglu::collective::token_tile_start(tile, kTile, rows) : tile * kTile;
      extent = rows;
    } else {
      tile_start = tile * (kTile / 2);
      extent = rows / 2;
    }
    return ConsumerStoreCallbacks<CrdLayout, kTile / kEpi, kEpi, kTile>(params_ptr, first, tile_start, extent);
  }
};

}  // namespace fused_swiglu::epilogue::fusion
