// The operator library's shared launch path (launch.hpp): the binding to the kernel library and the
// plan callback, the checks, TMA readiness, the plan cache and the launch.
#include "launch.hpp"

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/ops.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace fused_swiglu::torch_ops {
namespace {

#define FSW_SHIM_CHECK(call)                                                               \
  do {                                                                                     \
    AOTITorchError fsw_shim_status_ = (call);                                              \
    FSW_CHECK(fsw_shim_status_ == AOTI_TORCH_SUCCESS, "fused_swiglu: ", #call, " failed"); \
  } while (0)

constexpr size_t kMaxPlans = 4096;

// Filled by fsw_torch_bind: the kernel library's entry points and the Python plan callback.
using RunFn = fsw_status (*)(int, const fsw_problem*, void*, size_t, void*);
using WorkspaceFn = fsw_status (*)(int, const fsw_problem*, size_t*);
using LastErrorFn = const char* (*)();
// kind, config, m, n, k, token tile, dtype, device -> config index, raster, swizzle; returns 0 or writes a
// message.
using PlanFn = int (*)(int32_t, const char*, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t*,
                       int32_t*, int32_t*, char*, size_t);
using StreamFn = AOTITorchError (*)(int32_t, void**);
using QuantizeFn = fsw_status (*)(int32_t, int64_t, int64_t, const void*, int64_t, void*, int64_t, float*, int64_t,
                                  int64_t, int64_t, void*);
using MoeLayoutFn = fsw_status (*)(const void*, int32_t, int64_t, int32_t, int32_t, int32_t, int64_t, int64_t*, int32_t*,
                                   int64_t*, int32_t*, int64_t*, int32_t*, void*);

struct Binding {
  RunFn run = nullptr;
  WorkspaceFn workspace_size = nullptr;
  LastErrorFn last_error = nullptr;
  PlanFn plan = nullptr;
  StreamFn current_stream = nullptr;
  QuantizeFn quantize_e4m3_groups = nullptr;
  MoeLayoutFn moe_layout = nullptr;
};
std::atomic<Binding const*> g_binding{nullptr};

struct PlanKey {
  int32_t kind, dtype, device;
  int64_t m, n, k, tile;
  std::string config;
  bool operator==(PlanKey const& o) const {
    return kind == o.kind && dtype == o.dtype && device == o.device && m == o.m && n == o.n && k == o.k &&
           tile == o.tile && config == o.config;
  }
};
struct PlanKeyHash {
  size_t operator()(PlanKey const& p) const {
    size_t h = std::hash<int64_t>()(p.m);
    for (int64_t v : {int64_t(p.kind), int64_t(p.dtype), int64_t(p.device), p.n, p.k, p.tile}) {
      h = h * 0x100000001b3ULL ^ std::hash<int64_t>()(v);
    }
    return p.config.empty() ? h : h ^ std::hash<std::string>()(p.config);
  }
};
struct Plan {
  int32_t config, raster, swizzle;
  size_t workspace_bytes;
};

std::mutex g_plans_mutex;
std::unordered_map<PlanKey, Plan, PlanKeyHash> g_plans;

Binding const& binding() {
  Binding const* b = g_binding.load(std::memory_order_acquire);
  FSW_CHECK(b != nullptr,
            "fused_swiglu: the CUDA operators are loaded but not bound to the kernel library; call them "
            "through fused_swiglu (import fused_swiglu.ops), which binds them");
  return *b;
}

}  // namespace

int32_t dtype_code(Tensor const& t) {
  int32_t code = 0;
  FSW_SHIM_CHECK(aoti_torch_get_dtype(t.get(), &code));
  return code;
}

int32_t code_bf16() { return aoti_torch_dtype_bfloat16(); }
int32_t code_fp16() { return aoti_torch_dtype_float16(); }
int32_t code_fp32() { return aoti_torch_dtype_float32(); }
int32_t code_e4m3() { return aoti_torch_dtype_float8_e4m3fn(); }
int32_t code_int32() { return aoti_torch_dtype_int32(); }
int32_t code_int64() { return aoti_torch_dtype_int64(); }

void check_dtype(const char* op, Named named, int32_t dtype, const char* rule) {
  for (auto const& [arg, t] : named) {
    FSW_CHECK(dtype_code(*t) == dtype, "fused_swiglu::", op, ": ", arg, " must be ", rule);
  }
}

int32_t check_dtypes(const char* op, Named named) {
  static const int32_t bf16 = aoti_torch_dtype_bfloat16(), fp16 = aoti_torch_dtype_float16();
  const char* first_arg = named.begin()->first;
  int32_t first = dtype_code(*named.begin()->second);
  FSW_CHECK(first == bf16 || first == fp16, "fused_swiglu::", op, ": ", first_arg,
            " must be torch.bfloat16 or torch.float16 on CUDA");
  for (auto const& [arg, t] : named) {
    FSW_CHECK(dtype_code(*t) == first, "fused_swiglu::", op, ": ", arg, " must have ", first_arg, "'s dtype");
  }
  return first == bf16 ? FSW_DTYPE_BF16 : FSW_DTYPE_FP16;
}

int32_t check_devices(const char* op, Named named) {
  const char* first_arg = named.begin()->first;
  int32_t first = named.begin()->second->get_device_index();
  for (auto const& [arg, t] : named) {
    FSW_CHECK(t->is_cuda(), "fused_swiglu::", op, ": ", arg, " must be a CUDA tensor");
    FSW_CHECK(t->get_device_index() == first, "fused_swiglu::", op, ": ", arg, " must be on ", first_arg,
              "'s device cuda:", first, "; got cuda:", t->get_device_index());
  }
  return first;
}

void check_2d(const char* op, const char* arg, Tensor const& t, const char* shape) {
  FSW_CHECK(t.dim() == 2, "fused_swiglu::", op, ": ", arg, " must be 2-D ", shape, "; got ", t.dim(),
            "-D");
}

void check_tma_sizes(const char* op, int64_t n, int64_t k) {
  FSW_CHECK(k > 0 && k % kAlign == 0, "fused_swiglu::", op, ": H must be a positive multiple of ", kAlign,
            " for 16-byte TMA rows; got H=", k);
  FSW_CHECK(n % kAlign == 0, "fused_swiglu::", op, ": I must be a multiple of ", kAlign,
            " for 16-byte TMA rows; got I=", n);
}

Tensor tma_ready(Tensor const& t) {
  int64_t unit = 16 / int64_t(t.element_size());  // elements per 16 bytes
  bool ok = t.stride(1) == 1 && t.stride(0) % unit == 0 && t.stride(0) >= t.size(1) &&
            reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  if (ok) return t;
  std::array<int64_t, 2> sizes{t.size(0), t.size(1)};
  Tensor copy = torch::stable::new_empty(t, torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()));
  torch::stable::copy_(copy, t);
  return copy;
}

Tensor new_output(Tensor const& like, int64_t m, int64_t n) { return new_output(like, m, n, dtype_code(like)); }

namespace {

// A new tensor of `dims` sizes and strides, aoti dtype code `dtype`, on like's device.
Tensor new_empty_strided(Tensor const& like, int64_t dims, int64_t const* sizes, int64_t const* strides,
                         int32_t dtype) {
  int32_t device_type = 0;
  FSW_SHIM_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  AtenTensorHandle handle = nullptr;
  FSW_SHIM_CHECK(aoti_torch_empty_strided(dims, sizes, strides, dtype, device_type, like.get_device_index(), &handle));
  return Tensor(handle);
}

}  // namespace

Tensor new_vector(Tensor const& like, int64_t n, int32_t dtype) {
  std::array<int64_t, 1> sizes{n}, strides{1};
  return new_empty_strided(like, 1, sizes.data(), strides.data(), dtype);
}

Tensor new_output(Tensor const& like, int64_t m, int64_t n, int32_t dtype) {
  std::array<int64_t, 2> sizes{m, n}, strides{n, 1};
  return new_empty_strided(like, 2, sizes.data(), strides.data(), dtype);
}

Tensor new_column_major(Tensor const& like, int64_t m, int64_t n, int32_t dtype) {
  std::array<int64_t, 2> sizes{m, n}, strides{1, std::max<int64_t>(m, 1)};  // (1, 1) for no rows, as PyTorch
  return new_empty_strided(like, 2, sizes.data(), strides.data(), dtype);
}

namespace {

// Makes `device` the current CUDA device for the scope (a guard only where another one is current).
struct OnDevice {
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  explicit OnDevice(int32_t device) {
    if (torch::stable::accelerator::getCurrentDeviceIndex() != device) guard.emplace(device);
  }
};

Plan lookup_plan(PlanKey const& key, fsw_problem const& problem) {
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return it->second;  // a copy: another thread may clear the map
  }
  // Outside the lock: the callback takes Python's GIL, which another thread may hold while it waits
  // for this lock.
  Binding const& b = binding();
  Plan plan{};
  char message[1024] = {0};
  int rc = b.plan(key.kind, key.config.c_str(), key.m, key.n, key.k, key.tile, key.dtype, key.device, &plan.config,
                  &plan.raster, &plan.swizzle, message, sizeof(message));
  FSW_CHECK(rc == 0, message);
  fsw_problem sized = problem;
  sized.raster = plan.raster;
  sized.swizzle = plan.swizzle;
  fsw_status s = b.workspace_size(plan.config, &sized, &plan.workspace_bytes);
  FSW_CHECK(s == FSW_SUCCESS, "fused_swiglu: fsw_workspace_size failed: ", b.last_error());
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  if (g_plans.size() >= kMaxPlans) g_plans.clear();
  g_plans.insert_or_assign(key, plan);
  return plan;
}

}  // namespace

void launch(const char* op, PlanKind kind, std::string const& config, int32_t device, fsw_problem& problem,
            Tensor const& like, std::initializer_list<Operand> inputs, int64_t token_tile) {
  std::array<std::optional<Tensor>, 4> ready;  // copies made for TMA live until the launch is queued
  FSW_CHECK(inputs.size() <= ready.size(), "fused_swiglu::", op, ": too many operands");
  size_t i = 0;
  for (Operand const& o : inputs) {
    Tensor const& t = ready.at(i++).emplace(tma_ready(o.tensor));
    o.ptr = t.data_ptr();
    o.ld = t.stride(0);
  }
  Binding const& b = binding();
  OnDevice on(device);  // the workspace query reads the device's SM count, the launch its stream
  PlanKey key{int32_t(kind), problem.dtype, device, problem.m, problem.n, problem.k, token_tile, config};
  Plan plan = lookup_plan(key, problem);
  problem.raster = plan.raster;
  problem.swizzle = plan.swizzle;
  void* workspace = nullptr;
  Tensor workspace_tensor = like;  // keeps a workspace allocation alive until the launch is queued
  if (plan.workspace_bytes > 0) {
    std::array<int64_t, 1> size{int64_t(plan.workspace_bytes)};
    workspace_tensor = torch::stable::new_empty(like, torch::headeronly::IntHeaderOnlyArrayRef(size.data(), 1),
                                                torch::headeronly::ScalarType::Byte);
    workspace = workspace_tensor.data_ptr();
  }
  fsw_status s = b.run(plan.config, &problem, workspace, plan.workspace_bytes, current_stream(device));
  FSW_CHECK(s == FSW_SUCCESS, "fused_swiglu::", op, ": fsw_run failed: ", b.last_error());
}

void* current_stream(int32_t device) {
  void* stream = nullptr;
  FSW_SHIM_CHECK(binding().current_stream(device, &stream));
  return stream;
}

void run_quantize_e4m3_groups(const char* op, int32_t device, int32_t dtype, int64_t m, int64_t k, const void* x,
                              int64_t ldx, void* q, int64_t ldq, float* scale, int64_t scale_stride_m,
                              int64_t scale_stride_g, int64_t scale_rows) {
  Binding const& b = binding();
  OnDevice on(device);
  fsw_status s = b.quantize_e4m3_groups(dtype, m, k, x, ldx, q, ldq, scale, scale_stride_m, scale_stride_g,
                                        scale_rows, current_stream(device));
  FSW_CHECK(s == FSW_SUCCESS, "fused_swiglu::", op, ": fsw_quantize_e4m3_groups failed: ", b.last_error());
}

void run_moe_layout(const char* op, int32_t device, const void* top_k_index, int32_t index_bits, int64_t pairs,
                    int32_t k, int32_t experts, int32_t tile, int64_t padded_rows, int64_t* source,
                    int32_t* tile_expert, int64_t* pair_row, int32_t* padded_offsets, int64_t* order,
                    int32_t* expert_offsets) {
  Binding const& b = binding();
  OnDevice on(device);
  fsw_status s = b.moe_layout(top_k_index, index_bits, pairs, k, experts, tile, padded_rows, source, tile_expert,
                              pair_row, padded_offsets, order, expert_offsets, current_stream(device));
  FSW_CHECK(s == FSW_SUCCESS, "fused_swiglu::", op, ": fsw_moe_layout failed: ", b.last_error());
}

namespace {

// aoti_torch_get_current_cuda_stream lives in libtorch_cuda, which a CPU build of PyTorch lacks: looked
// up at bind time, so that this library also loads (and registers) there.
StreamFn find_current_stream() {
  void* self = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  void* fn = self ? dlsym(self, "aoti_torch_get_current_cuda_stream") : nullptr;
  if (fn == nullptr) fn = dlsym(RTLD_DEFAULT, "aoti_torch_get_current_cuda_stream");
  return reinterpret_cast<StreamFn>(fn);
}

}  // namespace
}  // namespace fused_swiglu::torch_ops

#define FSW_TORCH_API extern "C" __attribute__((visibility("default")))

// Binds the operators to a loaded kernel library (its fsw_run, fsw_workspace_size, fsw_last_error,
// fsw_quantize_e4m3_groups and fsw_moe_layout) and the plan callback; returns 0, or 1 when this PyTorch has no
// CUDA (then the operators stay unbound). Rebinding drops the cached plans.
FSW_TORCH_API int fsw_torch_bind(void* run, void* workspace_size, void* last_error, void* plan, void* quantize,
                                 void* moe_layout) {
  using namespace fused_swiglu::torch_ops;
  StreamFn stream = find_current_stream();
  if (stream == nullptr) return 1;
  // never freed: a call on another thread may still read the previous binding
  Binding* b = new Binding{reinterpret_cast<RunFn>(run), reinterpret_cast<WorkspaceFn>(workspace_size),
                           reinterpret_cast<LastErrorFn>(last_error), reinterpret_cast<PlanFn>(plan), stream,
                           reinterpret_cast<QuantizeFn>(quantize), reinterpret_cast<MoeLayoutFn>(moe_layout)};
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);
    g_plans.clear();
  }
  g_binding.store(b, std::memory_order_release);
  return 0;
}

// Forgets every cached launch plan (the next call of each problem asks the plan callback again).
FSW_TORCH_API void fsw_torch_clear_plans(void) {
  using namespace fused_swiglu::torch_ops;
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  g_plans.clear();
}

FSW_TORCH_API int64_t fsw_torch_num_plans(void) {
  using namespace fused_swiglu::torch_ops;
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  return int64_t(g_plans.size());
}
