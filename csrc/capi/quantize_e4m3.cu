// fsw_quantize_e4m3_groups: a 16-bit activation matrix to e4m3 with one fp32 scale per 1 x 128 group of
// each row, the quantization the e4m3-output epilogue applies to y, for the block-scaled kernels' x (and
// any FP8 GEMM that takes per-token-group scales).
//
// One warp per (row, group): lane l holds columns 128 g + l + 32 i (i < 4; each load instruction of the
// warp reads 32 consecutive elements), the amax is reduced over the warp with butterfly shuffles, and lane 0
// writes the scale.
#include <cfloat>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "fused_swiglu.h"
#include "scale_layout.hpp"
#include "status.hpp"

namespace fused_swiglu::capi {
namespace {

constexpr int kGroup = 128;
constexpr int kWarpsPerBlock = 8;
constexpr float kE4M3Max = 448.0f;

template <class T>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
quantize_e4m3_groups_kernel(const T* __restrict__ x, int64_t ldx, __nv_fp8_storage_t* __restrict__ q, int64_t ldq,
                            float* __restrict__ scale, int64_t stride_m, int64_t stride_g, int64_t m, int64_t k,
                            int64_t groups, int64_t warps) {
  int64_t const warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int const lane = threadIdx.x % 32;
  if (warp >= warps) return;
  int64_t const row = warp / groups, group = warp % groups;
  float* const s = scale + row * stride_m + group * stride_g;
  if (row >= m) {  // the padding rows the block-scaled kernels read
    if (lane == 0) *s = 0.0f;
    return;
  }
  float v[kGroup / 32];
  float amax = 0.0f;
  int64_t const col0 = group * kGroup + lane;
#pragma unroll
  for (int i = 0; i < kGroup / 32; ++i) {
    int64_t const col = col0 + 32 * i;
    v[i] = col < k ? static_cast<float>(x[row * ldx + col]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));  // fmaxf leaves a NaN out
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  float const sc = __fdiv_rn(amax, kE4M3Max);
  float const inv = fminf(__frcp_rn(sc), FLT_MAX);  // a zero scale: zeros stay zero
#pragma unroll
  for (int i = 0; i < kGroup / 32; ++i) {
    int64_t const col = col0 + 32 * i;
    if (col < k) q[row * ldq + col] = __nv_cvt_float_to_fp8(v[i] * inv, __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) *s = sc;
}

template <class T>
cudaError_t launch(const void* x, int64_t ldx, void* q, int64_t ldq, float* scale, int64_t stride_m,
                   int64_t stride_g, int64_t m, int64_t k, int64_t rows, cudaStream_t stream) {
  int64_t const groups = (k + kGroup - 1) / kGroup, warps = rows * groups;
  int64_t const blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  quantize_e4m3_groups_kernel<T><<<dim3(static_cast<unsigned>(blocks)), 32 * kWarpsPerBlock, 0, stream>>>(
      static_cast<const T*>(x), ldx, static_cast<__nv_fp8_storage_t*>(q), ldq, scale, stride_m, stride_g, m, k,
      groups, warps);
  return cudaGetLastError();
}

}  // namespace
}  // namespace fused_swiglu::capi

using namespace fused_swiglu::capi;

extern "C" __attribute__((visibility("default"))) fsw_status fsw_quantize_e4m3_groups(
    int32_t dtype, int64_t m, int64_t k, const void* x, int64_t ldx, void* q, int64_t ldq, float* scale,
    int64_t scale_stride_m, int64_t scale_stride_g, int64_t scale_rows, void* stream) {
  clear_error();
  if (dtype != FSW_DTYPE_BF16 && dtype != FSW_DTYPE_FP16) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "x's dtype must be %d (bf16) or %d (fp16); got %d", FSW_DTYPE_BF16,
                FSW_DTYPE_FP16, dtype);
  }
  if (m < 0 || k <= 0 || scale_rows < m) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "need M >= 0, K > 0 and scale_rows >= M; got M=%lld K=%lld scale_rows=%lld",
                (long long)m, (long long)k, (long long)scale_rows);
  }
  if (ldx < k || ldq < k) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "ldx and ldq must be >= K=%lld; got %lld and %lld", (long long)k,
                (long long)ldx, (long long)ldq);
  }
  int64_t const groups = (k + kGroup - 1) / kGroup;
  if (!distinct_scale_strides(scale_rows, groups, scale_stride_m, scale_stride_g)) {
    return fail(FSW_ERROR_INVALID_ARGUMENT,
                "scale_stride_m and scale_stride_g must give every (row, group) scale its own address (row- or"
                " column-major over %lld rows and %lld groups); got %lld and %lld", (long long)scale_rows,
                (long long)groups, (long long)scale_stride_m, (long long)scale_stride_g);
  }
  if (scale_rows == 0) return FSW_SUCCESS;
  if ((m > 0 && (x == nullptr || q == nullptr)) || scale == nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "x, q and scale must not be NULL");
  }
  if ((scale_rows * groups + kWarpsPerBlock - 1) / kWarpsPerBlock > INT32_MAX) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "scale_rows * ceil(K / 128) must be < 2^34; got %lld groups",
                (long long)(scale_rows * groups));
  }
  auto const s = static_cast<cudaStream_t>(stream);
  cudaError_t const e = dtype == FSW_DTYPE_BF16
                            ? launch<__nv_bfloat16>(x, ldx, q, ldq, scale, scale_stride_m, scale_stride_g, m, k,
                                                     scale_rows, s)
                            : launch<__half>(x, ldx, q, ldq, scale, scale_stride_m, scale_stride_g, m, k, scale_rows, s);
  if (e != cudaSuccess) {
    return fail(FSW_ERROR_CUDA, "fsw_quantize_e4m3_groups: %s", cudaGetErrorString(e));
  }
  return FSW_SUCCESS;
}
