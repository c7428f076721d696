// Internal: turns one kernel configuration into the entry its shared object exports. Included only by
// the generated files under csrc/instantiations/ (one configuration per translation unit, built into
// its own libfsw_<name>.so on demand).
#pragma once

#include "cutlass/numeric_types.h"

#include "fused_swiglu.h"
#include "fused_swiglu/configs.hpp"
#include "launcher.hpp"
#include "registry.hpp"
#include "status.hpp"

namespace fused_swiglu::capi {

// The entry of config `name`: its description and the launcher of GemmT. The core library checks every
// problem (problem_rules.hpp) before it calls the entry's functions.
template <class GemmT, class Config>
ConfigEntry make_entry(const char* name, fsw_kernel_kind kind, fsw_dtype dtype, fsw_dtype out_dtype) {
  ConfigEntry e{};
  e.info.name = name;
  e.info.kind = kind;
  e.info.dtype = dtype;
  e.info.out_dtype = out_dtype;
  e.info.tile_m = Config::kTileM;
  e.info.tile_n = Config::kTileN;
  e.info.tile_k = Config::kTileK;
  e.info.cluster_m = Config::kClusterM;
  e.info.cluster_n = Config::kClusterN;
  e.info.pingpong = Config::kPingpong ? 1 : 0;
  e.info.stages = GemmT::CollectiveMainloop::DispatchPolicy::Stages;
  e.info.promote_k_tiles = Config::kPromoteKTiles;
  e.info.smem_bytes = GemmT::GemmKernel::SharedStorageSize;
  e.info.epilogue_smem_bytes = int(sizeof(typename GemmT::CollectiveEpilogue::SharedStorage));
  e.info.swap_ab = GemmT::kSwapAB ? 1 : 0;
  e.info.preactivations = GemmT::kStoresPreactivations ? 1 : 0;
  e.info.block_scaled = GemmT::kBlockScaled ? 1 : 0;
  e.can_implement = &Launcher<GemmT>::can_implement;
  e.workspace_size = &Launcher<GemmT>::workspace_size;
  e.run = &Launcher<GemmT>::run;
  e.last_error = &last_error_text;
  return e;
}

}  // namespace fused_swiglu::capi

// FSW_INSTANTIATE(name, GemmTemplate, kind, Element, dtype, ElementOut, out_dtype, TileM, TileN, TileK, ClusterM,
//                 ClusterN, Schedule, PromoteKTiles)
#define FSW_INSTANTIATE(name, GemmTemplate, kind, Element, dtype, ElementOut, out_dtype, TM, TN, TK, CM, CN, Sched, P) \
  namespace fused_swiglu::capi {                                                                               \
  namespace {                                                                                                  \
  using Config_##name =                                                                                        \
      ::fused_swiglu::SwiGLUConfig<Element, TM, TN, TK, CM, CN, ::fused_swiglu::Schedule::Sched, P, ElementOut>; \
  }                                                                                                            \
  }                                                                                                            \
  extern "C" __attribute__((visibility("default"))) ::fused_swiglu::capi::ConfigEntry const* fsw_config_entry(   \
      int abi_version) {                                                                                       \
    using Config = ::fused_swiglu::capi::Config_##name;                                                        \
    static ::fused_swiglu::capi::ConfigEntry const e =                                                         \
        ::fused_swiglu::capi::make_entry<GemmTemplate<Config>, Config>(#name, kind, dtype, out_dtype);         \
    return abi_version == FSW_ABI_VERSION ? &e : nullptr;                                                      \
  }
