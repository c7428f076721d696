// The two policies of the SwiGLU store node (Sm90SwiGLUStore, sm90_visitor_swiglu_store.hpp):
//
//   Pairing  which accumulator element is the up partner of a gate element. Gate and up lie P apart
//            along the paired dimension: offset c along it is a gate element iff (c / P) % 2 == 0, its
//            partner is c + P, and its output index is (c / 2P) * P + c % P.
//   Output   what the node writes beside Y, and where the last token tile's rows go.
//
// Each is a type with static members only; the node reads them, nothing else does.
#pragma once

namespace fused_swiglu::epilogue {

// Pairs along the accumulator's columns: the GEMM (M, 2I, K) with tokens as rows, Y row-major.
// Packed weights: P = 8 (weights.py interleaves 8 gate rows, then their 8 up rows); the dual GEMM:
// P = BLK_N / 2 (the gate tile in the first half of the B tile, up in the second).
template <int P>
struct PairColumns {
  static constexpr int kStride = P;
  static constexpr bool kAlongM = false;
  static constexpr bool kAcrossSubtiles = false;
};

// Pairs along the accumulator's rows: the swap-AB GEMM (2I, M, K), weights as GMMA's A operand, so
// the node writes Y transposed (Y^T is M-major there). GMMA gives every thread rows r and r + 8 of
// each 16-row group, so with P = 8 a thread holds both elements of each of its pairs.
template <int P>
struct PairRows {
  static constexpr int kStride = P;
  static constexpr bool kAlongM = true;
  static constexpr bool kAcrossSubtiles = false;
};

// Pairs along the rows, P = EPI_M: the gate rows fill one epilogue subtile and their up rows the
// next (the dual swap-AB GEMM: W_gate in the first 64 rows of a 128-row tile, W_up in the next 64).
// The node keeps the gate subtile's accumulators in registers and writes the pairs with the up subtile.
template <int EpiM>
struct PairSubtiles {
  static constexpr int kStride = EpiM;
  static constexpr bool kAlongM = true;
  static constexpr bool kAcrossSubtiles = true;
};

// Y alone, each tile at the tile scheduler's coordinates.
struct StoreY {
  static constexpr bool kPreactivations = false;
  static constexpr bool kShiftLastTokenTile = false;
};

// Y, and the pre-activations G and U (the training forward): G[m, j] and U[m, j] are the gate and up
// accumulators Y[m, j] was computed from, each rounded once, at Y's coordinates (PairColumns only).
struct StoreYAndPreactivations {
  static constexpr bool kPreactivations = true;
  static constexpr bool kShiftLastTokenTile = false;
};

// Output, with the last token tile (along M) starting at token_tile_start, where the mainloop placed
// it (collective/sm90_token_tile_shift.hpp): PairColumns only.
template <class Output>
struct ShiftedLastTokenTile : Output {
  static constexpr bool kShiftLastTokenTile = true;
};

}  // namespace fused_swiglu::epilogue
