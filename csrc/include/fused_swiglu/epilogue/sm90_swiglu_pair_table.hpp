// Which accumulator elements of one thread's fragment pair up (Sm90SwiGLUStore), worked out at compile
// time from the fragment's coordinate layout and the node's pairing policy (sm90_swiglu_policies.hpp).
#pragma once

#include "cute/tensor.hpp"

namespace fused_swiglu::epilogue::fusion::detail {

using namespace cute;

// For a thread's fragment of F accumulator elements whose offsets (dm, dn) from the thread's first
// element are given by the static layout CrdLayout (fragment index -> (dm, dn)), list the gate elements
// in fragment order with their up partner. Evaluated at compile time so that every register index in
// visit() is a constant (no local memory).
template <int F>
struct PairTable {
  int gate[F / 2];
  int up[F / 2];
  int out_m[F / 2];    // output-row offset of the pair (relative to the output row of the first element)
  int out_n[F / 2];    // output-column offset (relative to the output column of the first element)
  int row_slot[F / 2]; // index of out_m[p] among the thread's distinct output rows
  int row_off[F / 2];  // the distinct output-row offsets, in order of first appearance (rows of them)
  int rows;
  bool ok;
};

// Output index of accumulator index c along the paired dimension: (c / 2P) * P + c % P.
constexpr int paired_out(int c, int P) { return (c / (2 * P)) * P + c % P; }

template <class CrdLayout, class Pairing, int F = int(decltype(size(CrdLayout{}))::value)>
constexpr PairTable<F> make_pair_table() {
  constexpr int P = Pairing::kStride;
  constexpr bool PairsAlongM = Pairing::kAlongM;
  PairTable<F> t{};
  int dm[F] = {};
  int dn[F] = {};
  for (int i = 0; i < F; ++i) {
    auto c = CrdLayout{}(i);
    dm[i] = int(get<0>(c));
    dn[i] = int(get<1>(c));
  }
  t.ok = true;
  int pairs = 0;
  for (int i = 0; i < F; ++i) {
    int along = PairsAlongM ? dm[i] : dn[i];
    if ((along / P) % 2 != 0) continue;   // an up element: found through its gate partner
    int partner = -1;
    for (int j = 0; j < F; ++j) {
      bool is_partner = PairsAlongM ? (dn[j] == dn[i] && dm[j] == dm[i] + P) : (dm[j] == dm[i] && dn[j] == dn[i] + P);
      if (is_partner) partner = j;
    }
    if (partner < 0 || pairs >= F / 2) { t.ok = false; return t; }
    t.gate[pairs] = i;
    t.up[pairs] = partner;
    t.out_m[pairs] = PairsAlongM ? paired_out(dm[i], P) : dm[i];
    t.out_n[pairs] = PairsAlongM ? dn[i] : paired_out(dn[i], P);
    ++pairs;
  }
  t.ok = t.ok && pairs == F / 2;
  for (int p = 0; p < pairs; ++p) {
    int slot = 0;
    while (slot < t.rows && t.row_off[slot] != t.out_m[p]) ++slot;
    if (slot == t.rows) t.row_off[t.rows++] = t.out_m[p];
    t.row_slot[p] = slot;
  }
  // Row-major results are written to shared memory two at a time (32-bit stores): pairs 2q and 2q+1
  // must be neighbouring output columns of one row, the first at an even column. (PairsAlongM: one
  // element at a time; its neighbours along the contiguous M belong to other threads.)
  for (int q = 0; !PairsAlongM && t.ok && q + 1 < pairs; q += 2) {
    t.ok = t.out_m[q] == t.out_m[q + 1] && t.out_n[q + 1] == t.out_n[q] + 1 && t.out_n[q] % 2 == 0;
  }
  return t;
}

}  // namespace fused_swiglu::epilogue::fusion::detail
