// fsw_moe_layout (fused_swiglu/moe_layout.h): the grouped kernels' padded layout of a top-k routing in one kernel launch, in
// place of the sort, searches and gathers that build it from PyTorch operations (fused_swiglu.grouped).
//
// B blocks of 1024 threads (B = ceil(pairs / chunk), chunk a multiple of 1024 that keeps B within the SMs), block b
// placing the pairs [b chunk, (b + 1) chunk), the per-expert counters in each block's shared memory:
//   1. count each expert's pairs, all of them, and those before the block's chunk (shared-memory atomics; every
//      block reads every id);
//   2. an exclusive scan of the padded counts ceil(count / tile) tile gives each expert's first row, one of the
//      counts the end of its pairs in expert order (every block the same; block 0 writes both ends);
//   3. the block's pairs in order, 1024 at a time: a pair's rank among its expert's pairs is the pairs of that
//      expert before the block's chunk and placed by earlier 1024-pair steps (the expert's cursor), by earlier
//      warps of this step (the warps add to the cursor in turn) and by lower lanes of its warp
//      (__match_any_sync), so the order within an expert is the pairs' order, as a stable sort gives it; the
//      rank places the pair both in the padded rows and in expert order (the pairs of no expert last, ranked
//      the same way);
//   4. each tile's expert by a binary search of the experts' end rows, and the tile's padding rows (the tiles
//      spread over the blocks).
// Steps 3 and 4 write disjoint rows of `source`, and the blocks disjoint pairs and tiles. Step 3 costs 32
// block barriers per 1024 pairs of a block's chunk; step 1 costs each block a read of every id, so the whole
// launch reads the ids B times.
#include <cstdint>
#include <cuda_runtime.h>

#include "device.hpp"
#include "fused_swiglu/moe_layout.h"
#include "status.hpp"

namespace fused_swiglu::capi {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// The expert of pair i: ids below 0 count as expert 0; ids from E on, and i past the pairs, as E (no expert).
template <class Index>
__device__ __forceinline__ int32_t expert_of(Index const* idx, int64_t i, int64_t pairs, int32_t experts) {
  if (i >= pairs) return experts;
  int64_t const id = static_cast<int64_t>(idx[i]);
  if (id < 0) return 0;
  return id < experts ? static_cast<int32_t>(id) : experts;
}

// The kernel's shared memory in bytes: the scans' per-warp sums, two counters per expert and a cursor per
// expert and one for the pairs of no expert. Past the 48 KiB a launch gets by default (from 4,086 experts) the
// kernel opts in to more.
inline size_t shared_bytes(int32_t experts) { return sizeof(int32_t) * (kWarps + 3 * size_t(experts) + 1); }

// Pairs per block: whole 1024-pair steps, as few as keep the blocks within the device's `sms` (> 0) SMs (each
// runs alone on one: 1024 threads and up to 96 KiB of shared memory), so that they all run at once.
inline int64_t chunk_pairs(int64_t pairs, int sms) {
  int64_t const steps = (pairs + kThreads - 1) / kThreads;
  return (steps + sms - 1) / sms * kThreads;
}

__device__ __forceinline__ int32_t padded(int32_t count, int32_t tile) { return (count + tile - 1) / tile * tile; }

// The exclusive sum of `value` over the block's threads before this one; `sums` (kWarps,) shared scratch.
// Every thread of the block calls it.
__device__ int32_t block_exclusive_sum(int32_t value, int32_t* sums, int lane, int warp) {
  int32_t inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    int32_t const v = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  if (lane == 31) sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int32_t w = sums[lane];
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      int32_t const v = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += v;
    }
    sums[lane] = w;
  }
  __syncthreads();
  int32_t const before = inclusive - value + (warp > 0 ? sums[warp - 1] : 0);
  __syncthreads();  // sums is free for the next scan
  return before;
}

template <class Index>
__global__ void __launch_bounds__(kThreads, 1)
moe_layout_kernel(Index const* __restrict__ idx, int64_t pairs, int32_t k, int32_t experts, int32_t tile,
                  int64_t padded_rows, int64_t chunk, int64_t* __restrict__ source, int32_t* __restrict__ tile_expert,
                  int64_t* __restrict__ pair_row, int32_t* __restrict__ padded_offsets, int64_t* __restrict__ order,
                  int32_t* __restrict__ expert_offsets) {
  extern __shared__ int32_t smem[];             // all shared memory is dynamic: its size is shared_bytes(E)
  int32_t* const warp_sums = smem;               // (kWarps,) the scans' per-warp sums
  int32_t* const ends = smem + kWarps;           // (E,) pairs of each expert; after step 2, the end of its pairs
  int32_t* const start = ends + experts;         // (E,) first row of each expert
  int32_t* const cursor = ends + 2 * experts;    // (E + 1,) pairs of each expert, and of no expert (E), before
                                                 // the chunk or placed so far
  int const tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int64_t const begin = int64_t(blockIdx.x) * chunk, end = begin + chunk < pairs ? begin + chunk : pairs;

  // 1. counts: each expert's pairs, and each expert's and no expert's before this block's chunk
  for (int e = tid; e <= experts; e += kThreads) {
    if (e < experts) ends[e] = 0;
    cursor[e] = 0;
  }
  __syncthreads();
  for (int64_t i = tid; i < pairs; i += kThreads) {
    int32_t const e = expert_of(idx, i, pairs, experts);
    if (e < experts) atomicAdd(&ends[e], 1);
    if (i < begin) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();

  // 2. each expert's first row, and the end of its pairs in expert order: thread t scans experts
  // [t per, (t + 1) per), the block the threads' sums
  int const per = (experts + kThreads - 1) / kThreads;
  int const first = min(tid * per, experts), last = min(first + per, experts);
  int32_t own_rows = 0, own_pairs = 0;
  for (int e = first; e < last; ++e) own_rows += padded(ends[e], tile), own_pairs += ends[e];
  int32_t row = block_exclusive_sum(own_rows, warp_sums, lane, warp);
  int32_t pair = block_exclusive_sum(own_pairs, warp_sums, lane, warp);
  for (int e = first; e < last; ++e) {
    start[e] = row;
    row += padded(ends[e], tile);
    pair += ends[e];
    ends[e] = pair;
    if (blockIdx.x == 0) padded_offsets[e] = row, expert_offsets[e] = pair;
  }
  __syncthreads();
  auto pairs_of = [&](int e) { return ends[e] - (e > 0 ? ends[e - 1] : 0); };

  // 3. each pair's row, and its place in expert order, in pair order within its expert (no expert's pairs
  // last, in pair order)
  unsigned const lower_lanes = (1u << lane) - 1u;
  for (int64_t step = begin; step < end; step += kThreads) {
    int64_t const i = step + tid;
    int32_t const e = i < end ? expert_of(idx, i, end, experts) : experts + 1;  // experts + 1: no pair
    unsigned const peers = __match_any_sync(0xffffffffu, e);
    int32_t const rank = __popc(peers & lower_lanes);
    int64_t r = 0, place = 0;
    for (int w = 0; w < kWarps; ++w) {  // the warps in turn: a warp's pairs come after the earlier warps'
      if (warp == w && e <= experts) {
        int32_t const q = cursor[e] + rank;  // the pair's rank among its expert's
        place = int64_t(e > 0 ? ends[e - 1] : 0) + q;
        if (e < experts) r = int64_t(start[e]) + q;
      }
      __syncwarp();
      if (warp == w && e <= experts && rank == 0) cursor[e] += __popc(peers);
      __syncthreads();
    }
    if (i < end) {
      pair_row[i] = r;
      order[place] = i;
      if (e < experts) source[r] = i / k;
    }
  }

  // 4. each tile's expert (the first whose end row is past the tile's first row; E past the last expert's)
  // and its rows that hold no pair
  int64_t const tiles = padded_rows / tile;
  for (int64_t t = int64_t(blockIdx.x) * kThreads + tid; t < tiles; t += int64_t(gridDim.x) * kThreads) {
    int64_t const first_row = t * tile;
    int lo = 0, hi = experts;
    while (lo < hi) {
      int const mid = (lo + hi) / 2;
      if (int64_t(start[mid]) + padded(pairs_of(mid), tile) > first_row) hi = mid;
      else lo = mid + 1;
    }
    tile_expert[t] = lo;
    int64_t held = 0;  // rows of this tile that hold pairs: a prefix
    if (lo < experts) {
      int64_t const left = int64_t(start[lo]) + pairs_of(lo) - first_row;
      held = left < 0 ? 0 : (left > tile ? tile : left);
    }
    for (int64_t r = first_row + held; r < first_row + tile; ++r) source[r] = 0;
  }
}

template <class Index>
cudaError_t launch(const void* idx, int64_t pairs, int32_t k, int32_t experts, int32_t tile, int64_t padded_rows,
                   int64_t* source, int32_t* tile_expert, int64_t* pair_row, int32_t* padded_offsets,
                   int64_t* order, int32_t* expert_offsets, cudaStream_t stream) {
  size_t const smem = shared_bytes(experts);
  auto kernel = moe_layout_kernel<Index>;
  if (smem > 48 * 1024) {
    cudaError_t const e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) {
      cudaGetLastError();  // cleared here: returned as this call's error, not left for the next launch's check
      return e;
    }
  }
  int device = 0;
  int const sms = sm_count_of_current_device(&device);
  if (sms <= 0) {
    cudaError_t const e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorInvalidDevice;
  }
  int64_t const chunk = chunk_pairs(pairs, sms);
  int64_t const blocks = pairs > 0 ? (pairs + chunk - 1) / chunk : 1;
  kernel<<<unsigned(blocks), kThreads, smem, stream>>>(static_cast<Index const*>(idx), pairs, k, experts, tile,
                                                       padded_rows, chunk, source, tile_expert, pair_row,
                                                       padded_offsets, order, expert_offsets);
  return cudaGetLastError();
}

}  // namespace
}  // namespace fused_swiglu::capi

using namespace fused_swiglu::capi;

extern "C" __attribute__((visibility("default"))) fsw_status fsw_moe_layout(
    const void* top_k_index, int32_t index_bits, int64_t pairs, int32_t k, int32_t experts, int32_t tile,
    int64_t padded_rows, int64_t* source, int32_t* tile_expert, int64_t* pair_row, int32_t* padded_offsets,
    int64_t* order, int32_t* expert_offsets, void* stream) {
  clear_error();
  if (index_bits != 32 && index_bits != 64) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "index_bits must be 32 or 64 (int32 or int64 expert ids); got %d",
                index_bits);
  }
  if (experts < 1 || experts > FSW_MOE_LAYOUT_MAX_EXPERTS) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "experts must be in [1, %d]; got %d", FSW_MOE_LAYOUT_MAX_EXPERTS,
                experts);
  }
  if (k < 1 || tile < 1 || pairs < 0 || pairs % k != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "need k >= 1, tile >= 1 and pairs >= 0 a multiple of k; got pairs=%lld "
                "k=%d tile=%d", (long long)pairs, k, tile);
  }
  int64_t const worst = fsw_moe_padded_rows(pairs, experts, tile);
  if (padded_rows < worst || padded_rows % tile != 0 || padded_rows > INT32_MAX) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "padded_rows must be a multiple of tile=%d, at least %lld (every "
                "routing's worst case) and < 2^31; got %lld", tile, (long long)worst, (long long)padded_rows);
  }
  if ((pairs > 0 && (top_k_index == nullptr || pair_row == nullptr || order == nullptr)) ||
      (padded_rows > 0 && (source == nullptr || tile_expert == nullptr)) || padded_offsets == nullptr ||
      expert_offsets == nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "top_k_index, source, tile_expert, pair_row, padded_offsets, order and "
                "expert_offsets must not be NULL");
  }
  auto const s = static_cast<cudaStream_t>(stream);
  cudaError_t const e =
      index_bits == 64 ? launch<int64_t>(top_k_index, pairs, k, experts, tile, padded_rows, source, tile_expert,
                                         pair_row, padded_offsets, order, expert_offsets, s)
                       : launch<int32_t>(top_k_index, pairs, k, experts, tile, padded_rows, source, tile_expert,
                                         pair_row, padded_offsets, order, expert_offsets, s);
  if (e != cudaSuccess) return fail(FSW_ERROR_CUDA, "fsw_moe_layout: %s", cudaGetErrorString(e));
  return FSW_SUCCESS;
}
