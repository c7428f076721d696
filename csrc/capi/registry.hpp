// Internal: the entry of one compiled kernel configuration. Each configuration is its own shared
// object (libfsw_<name>.so, one file of csrc/instantiations/) exporting fsw_config_entry;
// the core library loads it on request (fsw_load_config) into the slot of its name in registry.inc.
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
  const char* (*last_error)();  // the config library's own fsw_last_error text
};

}  // namespace fused_swiglu::capi

// The one symbol a config library exports: its entry, or NULL when abi_version is not the
// FSW_ABI_VERSION it was compiled with.
#define FSW_CONFIG_ENTRY_SYMBOL "fsw_config_entry"
extern "C" typedef fused_swiglu::capi::ConfigEntry const* (*fsw_config_entry_fn)(int abi_version);
