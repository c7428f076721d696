// Internal: the host side of every kernel config: fsw_problem -> CUTLASS arguments, then CUTLASS's host
// contract (can_implement -> get_workspace_size -> to_underlying_arguments -> launch) with every failure
// turned into an fsw_status and a sentence for fsw_last_error(). The problem has passed the core
// library's checks (problem_rules.hpp) before it gets here.
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

#include "device.hpp"
#include "fused_swiglu.h"
#include "status.hpp"

namespace fused_swiglu::capi {

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

}  // namespace fused_swiglu::capi
