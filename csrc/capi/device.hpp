// Internal: the current CUDA device's SM count, shared by the kernel configs' launcher (launcher.hpp) and
// the routing kernel (moe_layout.cu), which size their grids by it.
#pragma once

#include <cuda_runtime.h>

namespace fused_swiglu::capi {

// The SM count of the current device, whose index goes to *device_out; queried once per device (each shared
// object keeps its own cache). 0 or less where a query fails, with its error left for cudaGetLastError().
inline int sm_count_of_current_device(int* device_out) {
  static int cached[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  *device_out = device;
  int* const slot = device >= 0 && device < 64 ? &cached[device] : nullptr;
  if (slot != nullptr && *slot > 0) return *slot;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return -1;
  if (slot != nullptr) *slot = sms;
  return sms;
}

}  // namespace fused_swiglu::capi
