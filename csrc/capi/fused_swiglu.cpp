// The C ABI of fused_swiglu.h: the config registry (slots filled by fsw_load_config), last-error
// text, argument checks and dispatch.
#include "fused_swiglu.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "problem_rules.hpp"
#include "registry.hpp"
#include "status.hpp"

#include "registry.inc"  // FSW_CONFIG(name) for every instantiation

namespace fused_swiglu::capi {
namespace {

constexpr const char* kNames[] = {
#define FSW_CONFIG(name) #name,
    FSW_CONFIG_LIST
#undef FSW_CONFIG
};
constexpr int kNumEntries = int(sizeof(kNames) / sizeof(kNames[0]));

// A slot is written once (under g_load_mutex) and read without a lock.
std::atomic<ConfigEntry const*> g_slots[kNumEntries] = {};
std::mutex g_load_mutex;

bool in_range(int config) {
  if (config >= 0 && config < kNumEntries) return true;
  fail(FSW_ERROR_NOT_SUPPORTED, "config index must be in [0, %d); got %d", kNumEntries, config);
  return false;
}

ConfigEntry const* lookup(int config) {
  if (!in_range(config)) return nullptr;
  ConfigEntry const* e = g_slots[config].load(std::memory_order_acquire);
  if (e == nullptr) {
    fail(FSW_ERROR_NOT_SUPPORTED, "config %s is not loaded: call fsw_load_config with its library first",
         kNames[config]);
  }
  return e;
}

fsw_status check_problem(ConfigEntry const& e, const fsw_problem* p) {
  if (p == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "problem must not be NULL");
  if ((e.info.kind == FSW_KERNEL_DUAL || e.info.kind == FSW_KERNEL_GROUPED_DUAL) && p->w_up == nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is a dual-GEMM kernel: w_up must not be NULL", e.info.name);
  }
  return check_problem_rules(*p, e.info);
}

// A config library's failure, with its text copied into this library's last error.
fsw_status adopt(ConfigEntry const& e, fsw_status s) {
  if (s != FSW_SUCCESS) fail(s, "%s", e.last_error());
  return s;
}

}  // namespace
}  // namespace fused_swiglu::capi

using namespace fused_swiglu::capi;

#define FSW_API extern "C" __attribute__((visibility("default")))

FSW_API int fsw_abi_version(void) { return FSW_ABI_VERSION; }

FSW_API const char* fsw_last_error(void) { return last_error_text(); }

FSW_API int fsw_num_configs(void) { return kNumEntries; }

FSW_API const char* fsw_config_name(int idx) { return idx >= 0 && idx < kNumEntries ? kNames[idx] : nullptr; }

FSW_API int fsw_config_loaded(int idx) {
  return idx >= 0 && idx < kNumEntries && g_slots[idx].load(std::memory_order_acquire) != nullptr;
}

FSW_API fsw_status fsw_load_config(const char* path, int* index) {
  clear_error();
  if (path == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "path must not be NULL");
  std::lock_guard<std::mutex> guard(g_load_mutex);
  // Kept open for the life of the process: its kernels may sit in captured CUDA graphs.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return fail(FSW_ERROR_INVALID_ARGUMENT, "cannot load the config library %s: %s", path, why ? why : "unknown");
  }
  auto entry_fn = reinterpret_cast<fsw_config_entry_fn>(dlsym(handle, FSW_CONFIG_ENTRY_SYMBOL));
  if (entry_fn == nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "%s does not export %s: it is not a config library", path,
                FSW_CONFIG_ENTRY_SYMBOL);
  }
  ConfigEntry const* e = entry_fn(FSW_ABI_VERSION);
  if (e == nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "%s was built for another ABI version than %d; rebuild it", path,
                FSW_ABI_VERSION);
  }
  for (int i = 0; i < kNumEntries; ++i) {
    if (std::strcmp(kNames[i], e->info.name) != 0) continue;
    ConfigEntry const* held = g_slots[i].load(std::memory_order_acquire);
    if (held == nullptr) g_slots[i].store(e, std::memory_order_release);
    if (index != nullptr) *index = i;
    return FSW_SUCCESS;  // a second library of a loaded name is ignored: the first stays in use
  }
  return fail(FSW_ERROR_INVALID_ARGUMENT, "%s holds config %s, which this core library does not list", path,
              e->info.name);
}

FSW_API fsw_status fsw_get_config(int idx, fsw_config_info* info) {
  clear_error();
  ConfigEntry const* e = lookup(idx);
  if (e == nullptr) return FSW_ERROR_NOT_SUPPORTED;
  if (info == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "info must not be NULL");
  *info = e->info;
  return FSW_SUCCESS;
}

FSW_API fsw_status fsw_can_implement(int config, const fsw_problem* problem) {
  clear_error();
  ConfigEntry const* e = lookup(config);
  if (e == nullptr) return FSW_ERROR_NOT_SUPPORTED;
  if (auto s = check_problem(*e, problem); s != FSW_SUCCESS) return s;
  return adopt(*e, e->can_implement(*problem));
}

FSW_API fsw_status fsw_workspace_size(int config, const fsw_problem* problem, size_t* bytes) {
  clear_error();
  ConfigEntry const* e = lookup(config);
  if (e == nullptr) return FSW_ERROR_NOT_SUPPORTED;
  if (bytes == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
  if (auto s = check_problem(*e, problem); s != FSW_SUCCESS) return s;
  return adopt(*e, e->workspace_size(*problem, bytes));
}

FSW_API fsw_status fsw_run(int config, const fsw_problem* problem, void* workspace, size_t workspace_bytes,
                           void* stream) {
  clear_error();
  ConfigEntry const* e = lookup(config);
  if (e == nullptr) return FSW_ERROR_NOT_SUPPORTED;
  if (auto s = check_problem(*e, problem); s != FSW_SUCCESS) return s;
  return adopt(*e, e->run(*problem, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}
