// fused_swiglu C ABI.
//
// The kernel library is a plain shared object with this C interface: no libtorch linkage, so one
// binary serves every PyTorch version. Python loads it with ctypes (src/fused_swiglu/_lib.py).
//
// Host contract, in the order CUTLASS's GemmUniversalAdapter uses it:
//   fsw_can_implement -> fsw_workspace_size -> fsw_run
// Every entry point returns an fsw_status; on failure fsw_last_error() returns a sentence naming the
// rule that was broken (thread-local, valid until the next call on the same thread).
//
// Math (all kernels):  y[m, j] = silu(g[m, j]) * u[m, j],  silu(v) = v / (1 + exp(-v))
//   g = x @ W_gate^T, u = x @ W_up^T, accumulated in fp32, rounded once to the output dtype.
//   e4m3 inputs: the fp32 accumulators are first multiplied by the dequantization scales (fsw_problem).
//   e4m3 output: the fp32 SwiGLU values are divided by y's scale(s) and rounded once to e4m3 (fsw_problem).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FSW_ABI_VERSION 13

typedef enum fsw_status {
  FSW_SUCCESS = 0,
  FSW_ERROR_INVALID_ARGUMENT = 1,  // a shape, stride, pointer or dtype breaks a documented rule
  FSW_ERROR_NOT_SUPPORTED = 2,     // valid request the library has no kernel for (e.g. unknown config)
  FSW_ERROR_CUDA = 3,              // a CUDA runtime call failed
  FSW_ERROR_INTERNAL = 4           // CUTLASS reported an unexpected status
} fsw_status;

typedef enum fsw_dtype { FSW_DTYPE_BF16 = 0, FSW_DTYPE_FP16 = 1, FSW_DTYPE_E4M3 = 2 } fsw_dtype;

// Which weight operand a kernel reads.
typedef enum fsw_kernel_kind {
  FSW_KERNEL_PACKED = 0,  // the packed kernel: one GEMM over packed W [2N, K] + SwiGLU EVT epilogue
  FSW_KERNEL_DUAL = 1,    // the dual kernel: dual GEMM over W_gate [N, K] and W_up [N, K]
  // The SwiGLU backward through the down projection: one GEMM dY = dZ @ W_down with x = dZ (M, K),
  // w = W_down (K, N) (its row stride ldw >= N), and a dSwiGLU epilogue that reads g, u (M, N) and
  // writes, from the fp32 accumulator dY,
  //   dg = dY * u * s * (1 + g * (1 - s)),  du = dY * g * s,  s = sigmoid(g)
  // (the derivatives of silu(g) * u). y, w_up: unused.
  FSW_KERNEL_DSWIGLU = 2,
  // The dual kernel batched over the experts of a mixture-of-experts layer (swap-AB, decode sizes). x is
  // x_pad (M = T_pad, K): the routed tokens sorted by expert, each expert's rows padded to whole token
  // tiles (the config's tile_n rows; M a multiple of it); tile_expert[t] (M / tile_n int32) names the
  // expert of token tile t, and a value outside [0, experts) marks a tile past the last expert's: the
  // kernel hands out no work from the first such tile on, so those tiles must all come after every
  // valid one (non-decreasing values do). w and w_up are expert 0's W_gate and W_up (N, K), row strides
  // ldw and ldw_up; expert e's lie e * ldw_expert elements further (transformers' gate_up_proj [E, 2N, K]:
  // w = gate_up_proj, w_up = w + N * K, ldw = ldw_up = K, ldw_expert = 2N * K). y (M, N): row r gets
  // silu(x[r] W_gate[e]^T) * (x[r] W_up[e]^T), e = tile_expert[r / tile_n]; the rows of tiles past the
  // last expert are not written. tile_expert is read on the device, at every launch.
  FSW_KERNEL_GROUPED_DUAL = 3
} fsw_kernel_kind;

// One SwiGLU problem. All matrices are row-major with unit stride along the last dimension; ld* are
// row strides in elements. Every pointer must be 16-byte aligned and every ld* a multiple of 16 bytes
// (8 elements of 16 bits, 16 of e4m3), as TMA requires.
typedef struct fsw_problem {
  int64_t m;          // M: tokens, rows of x and y (>= 0)
  int64_t n;          // N: intermediate size I, columns of y (multiple of 8)
  int64_t k;          // K: hidden size H (multiple of 8; of 16 for e4m3)
  int32_t dtype;      // fsw_dtype of x and the weights; y's is the config's out_dtype
  int32_t raster;     // tile rasterisation: 0 = heuristic, 1 = along M, 2 = along N
  int32_t swizzle;    // max swizzle size of the tile scheduler (1, 2, 4 or 8); 0 = 1
  const void* x;      // (M, K)
  int64_t ldx;
  const void* w;      // PACKED: (2N, K) interleaved gate/up (see weights.py); DUAL: W_gate (N, K)
  int64_t ldw;
  const void* w_up;   // DUAL: W_up (N, K); PACKED: unused (NULL)
  int64_t ldw_up;
  void* y;            // (M, N) output
  int64_t ldy;
  // The pre-activations g = x @ W_gate^T and u = x @ W_up^T, (M, N) each with row stride ldgu: written
  // beside y by a config with preactivations = 1 (NULL otherwise), read by FSW_KERNEL_DSWIGLU.
  void* g;
  void* u;
  int64_t ldgu;
  // FSW_KERNEL_DSWIGLU: the gradients dg, du (M, N) it writes, row stride lddgu. Others: NULL.
  void* dg;
  void* du;
  int64_t lddgu;
  // dtype FSW_DTYPE_E4M3: fp32 dequantization scales, 16-byte aligned, multiplied into the accumulators
  // before SwiGLU: acc[m, r] * x_scale[m * x_scale_stride] * w_scale[r * w_scale_stride], r a weight
  // row (PACKED: the 2N packed rows, the scales packed like the rows). A stride of 0 reads one scale
  // (per tensor), 1 one per token (x_scale, M values) or weight row (w_scale, 2N values).
  // Block-scaled configs (fsw_config_info.block_scaled) instead multiply each 128-deep K block kb's
  // products, in the mainloop, by x_scale[m + kb * x_scale_stride] (one per 1 x 128 group of a token
  // row; x_scale_stride >= M, a multiple of 4: the kernel reads ceil(M / 4) * 4 scales of each K block, so
  // the buffer holds ceil(K / 128) * x_scale_stride floats) and w_scale[r / 8 + kb * w_scale_stride] (one per 8
  // packed weight rows; w_scale_stride >= 2N / 8): each 128 x 128 block scale of W_gate and W_up
  // repeated over the 8-row groups of the packed layout that its rows fall into.
  // 16-bit dtypes: NULL, strides 0.
  const float* x_scale;
  const float* w_scale;
  int32_t x_scale_stride;
  int32_t w_scale_stride;
  // Configs whose out_dtype is FSW_DTYPE_E4M3: y's fp32 scales (y ~ y_e4m3 * scale), 4-byte aligned. Each
  // output is v * (1 / scale) rounded to nearest e4m3 and saturated to +-448, v the fp32 SwiGLU value.
  //   y_scale_mode 1 (static): reads the one scale y_scale[0].
  //   y_scale_mode 2 (dynamic, per 1 x 128 group): for every row m < M and group g of output columns
  //     [128 g, min(128 g + 128, N)), writes y_scale[m * y_scale_stride_m + g * y_scale_stride_g] = the
  //     group's amax / 448 (fp32 division, rounded once); an all-zero group gets scale 0 and zeros.
  //     Strides in elements, row-major (y_scale_stride_m >= ceil(N / 128) * y_scale_stride_g >= 1, e.g.
  //     (ceil(N / 128), 1)) or column-major (y_scale_stride_g >= M * y_scale_stride_m >= 1); the stride of a
  //     dimension of size 1 is free.
  // Other configs: NULL, strides and mode 0.
  float* y_scale;
  int64_t y_scale_stride_m;
  int64_t y_scale_stride_g;
  int32_t y_scale_mode;
  // FSW_KERNEL_GROUPED_DUAL (see there): E >= 1 experts, the elements between two experts' weights (a
  // multiple of 16 bytes), and the expert of each token tile (M / tile_n int32, 4-byte aligned, on the
  // device). Other kinds: 0, 0 and NULL.
  int64_t experts;
  int64_t ldw_expert;
  const int32_t* tile_expert;
} fsw_problem;

#define FSW_Y_SCALE_STATIC 1
#define FSW_Y_SCALE_GROUP128 2

typedef struct fsw_config_info {
  const char* name;   // e.g. "packed_pingpong_128x192x64_2x1_bf16"
  int32_t kind;       // fsw_kernel_kind
  int32_t dtype;      // fsw_dtype of x and the weights
  int32_t out_dtype;  // fsw_dtype of y (and g, u)
  int32_t tile_m, tile_n, tile_k;   // CTA TileShape (tile_n counts gate + up columns)
  int32_t cluster_m, cluster_n;     // ClusterShape
  int32_t pingpong;   // 1 = Pingpong schedule, 0 = Cooperative
  int32_t stages;     // mainloop pipeline stages
  int32_t promote_k_tiles;  // 0: GMMA accumulates all of K; p > 0: partials of p k-tiles promoted to fp32
  int32_t smem_bytes;       // shared memory per CTA in bytes (mainloop stages + epilogue + barriers)
  int32_t epilogue_smem_bytes;  // of which the collective epilogue, the SwiGLU node's output buffers included
  int32_t swap_ab;          // 1: swap-AB GEMM (weights as GMMA's A, tile_m weight rows by tile_n tokens)
  int32_t preactivations;   // 1: also writes g and u (fsw_problem.g, .u) beside y (training forward)
  int32_t block_scaled;     // 1: e4m3 scales per 128-deep K block, applied in the mainloop (fsw_problem)
} fsw_config_info;

int fsw_abi_version(void);
const char* fsw_last_error(void);
// The configs this library knows, by index in [0, fsw_num_configs()). Each config's kernels live in
// their own shared object (libfsw_<name>.so), loaded by fsw_load_config; the entry points
// below return FSW_ERROR_NOT_SUPPORTED for a config that is not loaded.
int fsw_num_configs(void);
// The name of config idx (NULL outside [0, fsw_num_configs())); valid for the life of the process.
const char* fsw_config_name(int idx);
// 1 if config idx is loaded, else 0.
int fsw_config_loaded(int idx);
// Loads the config library at `path` (kept loaded for the life of the process) and writes its config
// index into *index (may be NULL). Loading a config that is already loaded returns its index.
// FSW_ERROR_INVALID_ARGUMENT: the file cannot be loaded, exports no entry, was built for another ABI
// version, or holds a config this library does not list.
fsw_status fsw_load_config(const char* path, int* index);
// Fills *info for a loaded config idx.
fsw_status fsw_get_config(int idx, fsw_config_info* info);
fsw_status fsw_can_implement(int config, const fsw_problem* problem);
// Device workspace in bytes that fsw_run needs for this problem (may be 0).
fsw_status fsw_workspace_size(int config, const fsw_problem* problem, size_t* bytes);
// Launches on `stream` (a cudaStream_t). Asynchronous; never synchronizes. M == 0 is a no-op.
fsw_status fsw_run(int config, const fsw_problem* problem, void* workspace, size_t workspace_bytes,
                   void* stream);

// Quantizes x (M, K), dtype FSW_DTYPE_BF16 or FSW_DTYPE_FP16, row stride ldx elements, to e4m3 per 1 x 128
// group of each row, as the e4m3-output epilogue quantizes y: over the group's columns [128 g, min(128 g + 128,
// K)), scale = amax / 448 (fp32 division, rounded once; a NaN does not count), and each value becomes
// v * fminf(1 / scale, FLT_MAX) rounded to nearest e4m3 and saturated to +-448 (an all-zero group: scale 0 and
// zeros). Writes q (M, K) e4m3 with row stride ldq and scale[m * scale_stride_m + g * scale_stride_g] for rows
// m < scale_rows (>= M): rows in [M, scale_rows) get 0, the padding that block-scaled configs read x_scale
// with (x_scale_stride = scale_stride_g, scale_stride_m = 1, scale_rows = ceil(M / 4) * 4). Scale strides as
// fsw_problem.y_scale's (row- or column-major). No alignment rule beyond the element types'. Launches on
// `stream` (a cudaStream_t); asynchronous.
fsw_status fsw_quantize_e4m3_groups(int32_t dtype, int64_t m, int64_t k, const void* x, int64_t ldx, void* q,
                                    int64_t ldq, float* scale, int64_t scale_stride_m, int64_t scale_stride_g,
                                    int64_t scale_rows, void* stream);

#ifdef __cplusplus
}
#endif
