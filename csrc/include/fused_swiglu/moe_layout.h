// The routing kernel of the grouped (mixture-of-experts) kernels: from a top-k routing to the padded layout
// the grouped kernels read (fused_swiglu.grouped.grouped_layout's, computed in one kernel). Part of the core
// library (libfused_swiglu.so), beside the C ABI of fused_swiglu.h; the kernel configs do not include it.
#pragma once

#include <stdint.h>

#include "fused_swiglu.h"

#ifdef __cplusplus
extern "C" {
#endif

// The most experts fsw_moe_layout takes (its per-expert counters live in shared memory).
#define FSW_MOE_LAYOUT_MAX_EXPERTS 8192

// T_pad, the rows of the padded layout of `pairs` routed rows over `experts` experts in tiles of `tile` rows:
// the worst case over every routing, pairs + (tile - 1) min(experts, pairs), rounded up to a multiple of tile
// (fused_swiglu.grouped.padded_rows in Python).
static inline int64_t fsw_moe_padded_rows(int64_t pairs, int64_t experts, int64_t tile) {
  int64_t const hit = pairs < experts ? pairs : experts;
  return (pairs + (tile - 1) * hit + tile - 1) / tile * tile;
}

// The padded layout of `pairs` = T k (token, expert) pairs of a top-k routing, on `stream` (a cudaStream_t),
// asynchronous, one launch of up to one thread block per SM (csrc/capi/moe_layout.cu):
//
//   top_k_index   (T, k) row-major, int64 (index_bits 64) or int32 (32): the expert of each pair, pair
//                 i = t k + j; an id < 0 counts as expert 0, an id >= experts belongs to no expert
//   padded_rows   T_pad: a multiple of tile, at least fsw_moe_padded_rows(pairs, experts, tile)
//
// Expert e's pairs take rows [start_e, start_e + count_e) of the layout, in pair order (a stable counting
// sort), start_e a multiple of tile, each expert ceil(count_e / tile) whole tiles in expert order, and
// writes:
//
//   source          (T_pad,) int64: the token (pair / k) of each row; 0 for the padding rows of an
//                   expert's last tile and every row past the last expert's tiles
//   tile_expert     (T_pad / tile,) int32: the expert of each tile; experts for the tiles past the last
//                   expert's
//   pair_row        (pairs,) int64: the row of each pair; 0 for a pair of no expert
//   padded_offsets  (experts,) int32: the end row of each expert's tiles (start_e + ceil(count_e / tile) tile)
//   order           (pairs,) int64: the pairs in expert order, each expert's in pair order, then the pairs of no
//                   expert in pair order (a stable sort by expert id clamped to [0, experts])
//   expert_offsets  (experts,) int32: the end of each expert's pairs in that order (count_0 + ... + count_e)
fsw_status fsw_moe_layout(const void* top_k_index, int32_t index_bits, int64_t pairs, int32_t k, int32_t experts,
                          int32_t tile, int64_t padded_rows, int64_t* source, int32_t* tile_expert, int64_t* pair_row,
                          int32_t* padded_offsets, int64_t* order, int32_t* expert_offsets, void* stream);

#ifdef __cplusplus
}
#endif
