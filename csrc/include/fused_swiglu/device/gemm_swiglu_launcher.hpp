// Host side of both kernels: fsw_problem -> CUTLASS arguments, then CUTLASS's host contract
// (can_implement -> get_workspace_size -> to_underlying_arguments -> launch) with every failure
// turned into an fsw_status and a sentence for fsw_last_error().
//
// The launch does what GemmUniversalAdapter::initialize() + run() do, minus the work they repeat on
// every call: the kernel's dynamic shared-memory attribute is set once per device here (the adapter
// sets it, and ClusterLauncher sets the non-portable-cluster attribute, which clusters of at most 8
// CTAs do not need, on every launch). Per call there remain the TMA descriptors' encoding and one
// cudaLaunchKernelExC.
#pragma once

#include <atomic>
#include <cstdint>
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/kernel_hardware_info.h"

#include "fused_swiglu.h"
#include "status.hpp"
#include "registry.hpp"
#include "scale_layout.hpp"

namespace fused_swiglu::device {

using capi::fail;

// Multiprocessor count of the current device, queried once per device.
inline int sm_count_of_current_device(int* device_out) {
  static int cached[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  *device_out = device;
  if (device < 0 || device >= 64) return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  if (cached[device] == 0) {
    cached[device] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  }
  return cached[device];
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rules every kernel shares; the Python layer checks the same rules first with friendlier names.
inline fsw_status check_common(const fsw_problem& p, fsw_config_info const& info) {
  if (p.dtype != info.dtype) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "problem dtype %d does not match config %s", p.dtype, info.name);
  }
  if (p.m < 0) return fail(FSW_ERROR_INVALID_ARGUMENT, "M must be >= 0; got M=%lld", (long long)p.m);
  if (p.n <= 0 || p.n % 8 != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT,
                "N (intermediate size I) must be a positive multiple of 8 for 16-byte TMA rows; got N=%lld",
                (long long)p.n);
  }
  // Elements per 16 bytes of x and the weights: 8 (16-bit) or 16 (e4m3); the same for y (out_dtype).
  bool const fp8 = info.dtype == FSW_DTYPE_E4M3;
  int64_t const in_align = fp8 ? 16 : 8;
  if (p.k <= 0 || p.k % in_align != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT,
                "K (hidden size H) must be a positive multiple of %lld for 16-byte TMA rows; got K=%lld",
                (long long)in_align, (long long)p.k);
  }
  if (fp8) {
    struct Scale { const char* name; const float* ptr; int32_t stride; int64_t rows; int64_t align; };
    // block scaling: M-major (rows, ceil(K / 128)) scales, stride between K blocks (x_scale: 16-byte rows)
    Scale const scales[] = {Scale{"x_scale", p.x_scale, p.x_scale_stride, p.m, 4},
                            Scale{"w_scale", p.w_scale, p.w_scale_stride, 2 * p.n / 8, 1}};
    for (Scale const& s : scales) {
      if (s.ptr == nullptr) {
        return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s takes e4m3 inputs: %s must not be NULL", info.name, s.name);
      }
      if (!aligned16(s.ptr)) {
        return fail(FSW_ERROR_INVALID_ARGUMENT, "%s must be 16-byte aligned; got address %p", s.name,
                    (const void*)s.ptr);
      }
      if (info.block_scaled) {
        if (s.stride < s.rows || s.stride % s.align != 0) {
          return fail(FSW_ERROR_INVALID_ARGUMENT,
                      "config %s scales K blocks: %s_stride (between K blocks) must be >= %lld and a multiple of %lld;"
                      " got %d", info.name, s.name, (long long)s.rows, (long long)s.align, s.stride);
        }
      } else if (s.stride != 0 && s.stride != 1) {
        return fail(FSW_ERROR_INVALID_ARGUMENT, "%s_stride must be 0 (one scale) or 1 (one per row); got %d", s.name,
                    s.stride);
      }
    }
  } else if (p.x_scale != nullptr || p.w_scale != nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s takes 16-bit inputs: x_scale and w_scale must be NULL",
                info.name);
  }
  bool const fp8_out = info.out_dtype == FSW_DTYPE_E4M3;
  if (fp8_out) {
    if (p.y_scale_mode != FSW_Y_SCALE_STATIC && p.y_scale_mode != FSW_Y_SCALE_GROUP128) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "config %s writes e4m3 y: y_scale_mode must be %d (static) or %d (per 1x128 group); got %d",
                  info.name, FSW_Y_SCALE_STATIC, FSW_Y_SCALE_GROUP128, p.y_scale_mode);
    }
    if (p.y_scale == nullptr || reinterpret_cast<uintptr_t>(p.y_scale) % 4 != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s writes e4m3 y: y_scale must be a 4-byte aligned fp32 pointer",
                  info.name);
    }
    if (p.y_scale_mode == FSW_Y_SCALE_GROUP128) {
      int64_t const groups = (p.n + 127) / 128, sm = p.y_scale_stride_m, sg = p.y_scale_stride_g;
      if (!capi::distinct_scale_strides(p.m, groups, sm, sg)) {
        return fail(FSW_ERROR_INVALID_ARGUMENT,
                    "y_scale_stride_m and y_scale_stride_g must give every (row, group) scale its own address:"
                    " y_scale_stride_m >= %lld * y_scale_stride_g >= %lld (row-major) or y_scale_stride_g >="
                    " %lld * y_scale_stride_m >= %lld (column-major); got %lld and %lld",
                    (long long)groups, (long long)(groups > 1 ? 1 : 0), (long long)p.m,
                    (long long)(p.m > 1 ? 1 : 0), (long long)sm, (long long)sg);
      }
    }
  } else if (p.y_scale != nullptr || p.y_scale_mode != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s writes 16-bit y: y_scale must be NULL and y_scale_mode 0",
                info.name);
  }
  int64_t const out_align = fp8_out ? 16 : 8;
  // CUTLASS's problem shape is int32; the packed GEMM has 2N columns.
  if (p.m > INT32_MAX || 2 * p.n > INT32_MAX || p.k > INT32_MAX) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "M, 2N and K must each be < 2^31; got M=%lld N=%lld K=%lld",
                (long long)p.m, (long long)p.n, (long long)p.k);
  }
  // Grouped: E experts ldw_expert elements apart, and the expert of each whole token tile of x.
  bool const grouped = info.kind == FSW_KERNEL_GROUPED_DUAL;
  if (grouped) {
    if (p.experts < 1 || p.experts > INT32_MAX) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is grouped: experts must be in [1, 2^31); got %lld",
                  info.name, (long long)p.experts);
    }
    if (p.ldw_expert <= 0 || p.ldw_expert % in_align != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "config %s is grouped: ldw_expert (elements between two experts' weights) must be a positive "
                  "multiple of %lld (16 bytes); got %lld", info.name, (long long)in_align, (long long)p.ldw_expert);
    }
    if (p.tile_expert == nullptr || reinterpret_cast<uintptr_t>(p.tile_expert) % 4 != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is grouped: tile_expert must be a 4-byte aligned int32 pointer",
                  info.name);
    }
    if (p.m % info.tile_n != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "config %s is grouped: M (the padded token rows) must be a multiple of its token tile, %d; got M=%lld",
                  info.name, info.tile_n, (long long)p.m);
    }
  } else if (p.tile_expert != nullptr || p.experts != 0 || p.ldw_expert != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is not grouped: tile_expert must be NULL, experts and "
                "ldw_expert 0", info.name);
  }
  // Operands by kind: x (M, K); the weights (2N or N rows of K; the dSwiGLU GEMM's W_down: K rows of N);
  // y (M, N); the pre-activations g, u (M, N) where a config writes or reads them; dg, du (M, N).
  bool dual = info.kind == FSW_KERNEL_DUAL || grouped;
  bool dswiglu = info.kind == FSW_KERNEL_DSWIGLU;
  // align: elements per 16 bytes, which every row stride must be a multiple of
  struct Operand { const char* name; const void* ptr; int64_t ld; int64_t min_ld; int64_t align; };
  Operand ops[6];
  int count = 0;
  ops[count++] = {"x", p.x, p.ldx, p.k, in_align};
  if (dswiglu) {
    ops[count++] = {"w", p.w, p.ldw, p.n, 8};
    ops[count++] = {"dg", p.dg, p.lddgu, p.n, 8};
    ops[count++] = {"du", p.du, p.lddgu, p.n, 8};
  } else {
    ops[count++] = {"w", p.w, p.ldw, p.k, in_align};
    ops[count++] = {"y", p.y, p.ldy, p.n, out_align};
    // w_up is read by the dual kernels only (packed: unused, may be NULL)
    ops[count++] = {"w_up", dual ? p.w_up : p.w, dual ? p.ldw_up : p.ldw, p.k, in_align};
  }
  if (dswiglu || info.preactivations) {
    ops[count++] = {"g", p.g, p.ldgu, p.n, 8};
    ops[count++] = {"u", p.u, p.ldgu, p.n, 8};
  }
  for (int i = 0; i < count; ++i) {
    Operand const& op = ops[i];
    if (op.ptr == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "%s must not be NULL", op.name);
    if (!aligned16(op.ptr)) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "%s must be 16-byte aligned for TMA; got address %p", op.name, op.ptr);
    }
    if (op.ld < op.min_ld || op.ld % op.align != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "the row stride of %s must be >= %lld and a multiple of %lld elements (16 bytes); got %lld",
                  op.name, (long long)op.min_ld, (long long)op.align, (long long)op.ld);
    }
  }
  return FSW_SUCCESS;
}

// GemmT: a kernel/ composition (PackedSwiGLUGemm, DualSwiGLUGemm, DSwiGLUGemm, ...) providing
//   GemmKernel (a CUTLASS 3.x kernel), Arguments (its arguments) and
//   static Arguments make_arguments(fsw_problem const&, KernelHardwareInfo).
template <class GemmT>
struct Launcher {
  using GemmKernel = typename GemmT::GemmKernel;
  using Arguments = typename GemmT::Arguments;
  static constexpr int kSmemBytes = GemmKernel::SharedStorageSize;

  static fsw_status arguments(const fsw_problem& p, Arguments* args) {
    cutlass::KernelHardwareInfo hw_info;
    int device = 0;
    int sms = sm_count_of_current_device(&device);
    if (sms <= 0) return fail(FSW_ERROR_CUDA, "could not query the current CUDA device");
    hw_info.device_id = device;
    hw_info.sm_count = sms;
    *args = GemmT::make_arguments(p, hw_info);
    using Raster = decltype(args->scheduler.raster_order);
    args->scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
    args->scheduler.max_swizzle_size = p.swizzle > 0 ? p.swizzle : 1;
    return FSW_SUCCESS;
  }

  // Arguments for p, checked by CUTLASS's can_implement.
  static fsw_status checked_arguments(const fsw_problem& p, Arguments* args) {
    if (auto s = arguments(p, args); s != FSW_SUCCESS) return s;
    cutlass::Status st = GemmKernel::can_implement(*args) ? cutlass::Status::kSuccess : cutlass::Status::kInvalid;
    if (st != cutlass::Status::kSuccess) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "CUTLASS cannot implement this problem (M=%lld N=%lld K=%lld): %s",
                  (long long)p.m, (long long)p.n, (long long)p.k, cutlassGetStatusString(st));
    }
    return FSW_SUCCESS;
  }

  static fsw_status can_implement(const fsw_problem& p) {
    if (p.m == 0) return FSW_SUCCESS;
    Arguments args;
    return checked_arguments(p, &args);
  }

  static fsw_status workspace_size(const fsw_problem& p, size_t* bytes) {
    *bytes = 0;
    if (p.m == 0) return FSW_SUCCESS;
    Arguments args;
    if (auto s = arguments(p, &args); s != FSW_SUCCESS) return s;
    *bytes = GemmKernel::get_workspace_size(args);
    return FSW_SUCCESS;
  }

  static fsw_status run(const fsw_problem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (p.m == 0) return FSW_SUCCESS;  // nothing to compute: no launch, no CUDA error left behind
    Arguments args;
    if (auto s = checked_arguments(p, &args); s != FSW_SUCCESS) return s;
    size_t need = GemmKernel::get_workspace_size(args);
    if (need > workspace_bytes || (need > 0 && workspace == nullptr)) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "workspace too small: need %zu bytes, got %zu", need, workspace_bytes);
    }
    cutlass::Status st = GemmKernel::initialize_workspace(args, workspace, stream, nullptr);
    if (st != cutlass::Status::kSuccess) {
      cudaError_t e = cudaGetLastError();
      return fail(FSW_ERROR_INTERNAL, "CUTLASS initialize_workspace failed: %s (%s)", cutlassGetStatusString(st),
                  cudaGetErrorString(e));
    }
    if (auto s = set_kernel_attributes_once(); s != FSW_SUCCESS) return s;
    typename GemmKernel::Params params = GemmKernel::to_underlying_arguments(args, workspace);
    return launch(params, stream);
  }

 private:
  // cudaFuncAttributeMaxDynamicSharedMemorySize for this kernel, set once per device (the attribute
  // belongs to the device's context). Two threads may both set it the first time; that is harmless.
  static fsw_status set_kernel_attributes_once() {
    static std::atomic<uint64_t> done_devices{0};
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      cudaGetLastError();
      return fail(FSW_ERROR_CUDA, "could not query the current CUDA device");
    }
    uint64_t const bit = device < 64 ? (uint64_t{1} << device) : 0;  // devices >= 64: set every call
    if (bit != 0 && (done_devices.load(std::memory_order_acquire) & bit)) return FSW_SUCCESS;
    if (kSmemBytes >= (48 << 10)) {
      cudaError_t e = cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
      if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(FSW_ERROR_CUDA, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize=%d) failed: %s", kSmemBytes,
                    cudaGetErrorString(e));
      }
    }
    done_devices.fetch_or(bit, std::memory_order_release);
    return FSW_SUCCESS;
  }

  // One launch of the persistent grid, with the kernel's static ClusterShape as a launch attribute.
  static fsw_status launch(typename GemmKernel::Params& params, cudaStream_t stream) {
    using ClusterShape = typename GemmKernel::DispatchPolicy::ClusterShape;
    static_assert(cute::is_static_v<ClusterShape>, "the launch reads a static ClusterShape");
    static_assert(cute::size(ClusterShape{}) <= 8, "clusters above 8 CTAs need the non-portable cluster attribute");
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = unsigned(cute::size<0>(ClusterShape{}));
    cluster.val.clusterDim.y = unsigned(cute::size<1>(ClusterShape{}));
    cluster.val.clusterDim.z = unsigned(cute::size<2>(ClusterShape{}));
    cudaLaunchConfig_t config{};
    config.gridDim = GemmKernel::get_grid_shape(params);
    config.blockDim = GemmKernel::get_block_shape();
    config.dynamicSmemBytes = size_t(kSmemBytes);
    config.stream = stream;
    config.attrs = &cluster;
    config.numAttrs = cute::size(ClusterShape{}) > 1 ? 1 : 0;  // 1 x 1: a plain launch, as CUTLASS's adapter does
    void* kernel_params[] = {&params};
    cudaError_t e = cudaLaunchKernelExC(&config, reinterpret_cast<void const*>(cutlass::device_kernel<GemmKernel>),
                                        kernel_params);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clears a launch error; a sticky one stays and is reported as it is
      return fail(FSW_ERROR_CUDA, "kernel launch failed: %s (grid %u x %u x %u, cluster %u x %u)",
                  cudaGetErrorString(e), config.gridDim.x, config.gridDim.y, config.gridDim.z,
                  cluster.val.clusterDim.x, cluster.val.clusterDim.y);
    }
    return FSW_SUCCESS;
  }
};

}  // namespace fused_swiglu::device
