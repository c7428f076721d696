// The C ABI of fused_swiglu.h: config registry, last-error text, argument checks and dispatch.
#include "fused_swiglu.h"

#include <cstdarg>
#include <cstdio>
#include <string>

#include "registry.hpp"
#include "status.hpp"

#include "registry.inc"  // FSW_CONFIG(name) for every instantiation

#define FSW_CONFIG(name) FSW_DECLARE_CONFIG(name)
FSW_CONFIG_LIST
#undef FSW_CONFIG

namespace fused_swiglu::capi {
namespace {

thread_local std::string g_last_error;

using EntryFn = ConfigEntry const& (*)();
constexpr EntryFn kEntries[] = {
#define FSW_CONFIG(name) &entry_##name,
    FSW_CONFIG_LIST
#undef FSW_CONFIG
};
constexpr int kNumEntries = int(sizeof(kEntries) / sizeof(kEntries[0]));

ConfigEntry const* lookup(int config) {
  if (config < 0 || config >= kNumEntries) {
    fail(FSW_ERROR_NOT_SUPPORTED, "config index must be in [0, %d); got %d", kNumEntries, config);
    return nullptr;
  }
  return &kEntries[config]();
}

fsw_status check_problem(ConfigEntry const& e, const fsw_problem* p) {
  if (p == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "problem must not be NULL");
  if (e.info.kind == FSW_KERNEL_DUAL && p->w_up == nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is a dual-GEMM kernel: w_up must not be NULL", e.info.name);
  }
  return FSW_SUCCESS;
}

}  // namespace

fsw_status fail(fsw_status status, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  g_last_error = buf;
  return status;
}

void clear_error() { g_last_error.clear(); }

}  // namespace fused_swiglu::capi

using namespace fused_swiglu::capi;

#define FSW_API extern "C" __attribute__((visibility("default")))

FSW_API int fsw_abi_version(void) { return FSW_ABI_VERSION; }

FSW_API const char* fsw_last_error(void) { return g_last_error.c_str(); }

FSW_API int fsw_num_configs(void) { return kNumEntries; }

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
  return e->can_implement(*problem);
}

FSW_API fsw_status fsw_workspace_size(int config, const fsw_problem* problem, size_t* bytes) {
  clear_error();
  ConfigEntry const* e = lookup(config);
  if (e == nullptr) return FSW_ERROR_NOT_SUPPORTED;
  if (bytes == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
  if (auto s = check_problem(*e, problem); s != FSW_SUCCESS) return s;
  return e->workspace_size(*problem, bytes);
}

FSW_API fsw_status fsw_run(int config, const fsw_problem* problem, void* workspace, size_t workspace_bytes,
                           void* stream) {
  clear_error();
  ConfigEntry const* e = lookup(config);
  if (e == nullptr) return FSW_ERROR_NOT_SUPPORTED;
  if (auto s = check_problem(*e, problem); s != FSW_SUCCESS) return s;
  return e->run(*problem, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
