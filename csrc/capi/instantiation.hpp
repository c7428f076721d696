// Internal: turns one kernel configuration into the entry its shared object exports. Included only by
// the generated files under csrc/instantiations/ (one configuration per translation unit, built into
// its own libfsw_<name>.so on demand).
#pragma once

#include "cutlass/numeric_types.h"

#include "fused_swiglu.h"
#include "registry.hpp"
#include "status.hpp"
#include "fused_swiglu/configs.hpp"
#include "fused_swiglu/device/gemm_swiglu_launcher.hpp"

namespace fused_swiglu::capi {

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
  using Gemm_##name = GemmTemplate<Config_##name>;                                                             \
  ConfigEntry build_##name();                                                                                  \
  }                                                                                                            \
  /* a function-local static: the capture-less lambdas below reach their own info through it */            \
  ConfigEntry const& entry_##name() {                                                                          \
    static ConfigEntry const e = build_##name();                                                               \
    return e;                                                                                                  \
  }                                                                                                            \
  namespace {                                                                                                  \
  ConfigEntry build_##name() {                                                                                 \
    ConfigEntry e = make_entry<Gemm_##name, Config_##name>(#name, kind, dtype, out_dtype);                               \
    e.can_implement = [](const fsw_problem& p) {                                                               \
      if (auto s = device::check_common(p, entry_##name().info); s != FSW_SUCCESS) return s;                   \
      return device::Launcher<Gemm_##name>::can_implement(p);                                                  \
    };                                                                                                         \
    e.workspace_size = [](const fsw_problem& p, size_t* bytes) {                                               \
      if (auto s = device::check_common(p, entry_##name().info); s != FSW_SUCCESS) return s;                   \
      return device::Launcher<Gemm_##name>::workspace_size(p, bytes);                                          \
    };                                                                                                         \
    e.run = [](const fsw_problem& p, void* ws, size_t ws_bytes, cudaStream_t stream) {                         \
      if (auto s = device::check_common(p, entry_##name().info); s != FSW_SUCCESS) return s;                   \
      return device::Launcher<Gemm_##name>::run(p, ws, ws_bytes, stream);                                      \
    };                                                                                                         \
    e.last_error = &last_error_text;                                                                           \
    return e;                                                                                                  \
  }                                                                                                            \
  }                                                                                                            \
  }                                                                                                            \
  extern "C" __attribute__((visibility("default"))) ::fused_swiglu::capi::ConfigEntry const* fsw_config_entry(   \
      int abi_version) {                                                                                       \
    return abi_version == FSW_ABI_VERSION ? &::fused_swiglu::capi::entry_##name() : nullptr;                   \
  }
