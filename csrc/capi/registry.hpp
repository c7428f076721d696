// Internal: one entry per compiled kernel configuration (one per file under csrc/instantiations/).
#pragma once

#include <cstddef>
#include <cuda_runtime.h>

#include "fused_swiglu.h"

namespace fused_swiglu::capi {

struct ConfigEntry {
  fsw_config_info info;
  fsw_status (*can_implement)(const fsw_problem& problem);
  fsw_status (*workspace_size)(const fsw_problem& problem, size_t* bytes);
  fsw_status (*run)(const fsw_problem& problem, void* workspace, size_t workspace_bytes, cudaStream_t stream);
};

}  // namespace fused_swiglu::capi

// Each instantiation defines fused_swiglu::capi::entry_<name>(); registry.inc lists them.
#define FSW_DECLARE_CONFIG(name) \
  namespace fused_swiglu::capi { ConfigEntry const& entry_##name(); }
