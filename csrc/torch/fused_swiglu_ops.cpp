// CUDA kernels of the fused_swiglu::swiglu_dual and fused_swiglu::swiglu_packed operators, written
// against PyTorch's stable C ABI (torch/csrc/stable), so one binary serves every PyTorch release from
// the targeted one on (TORCH_TARGET_VERSION, set by the build).
//
// The operator schemas, their CPU and fake kernels and their autograd formulas are registered from
// Python (src/fused_swiglu/ops.py); this file registers the CUDA kernel of each. A call checks its
// operands (the C boundary: ranks, shapes, dtypes, devices, TMA rules), makes them TMA-ready, looks
// its launch plan up in a per-process cache and launches through the kernel library's C ABI
// (capi/fused_swiglu.h), on the current CUDA stream of x's device. A plan is chosen once per problem
// (kernel, config argument, dtype, M, N, K, device) by the Python config table (a callback bound at
// load time), together with the workspace size the library asks for; a change of FUSED_SWIGLU_CONFIG
// in the running process drops the plans made before it.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "../capi/fused_swiglu.h"

using torch::stable::Tensor;

namespace fused_swiglu::torch_ops {
namespace {

// Error messages are joined from strings and std::to_string, never through iostreams: the stable
// headers' STD_TORCH_CHECK formats with std::ostringstream, whose number formatting reads locale
// state that a C++ runtime linked into this library would not share with PyTorch's (the build links
// the shared one and checks it; these messages stay whole either way).
inline void append(std::string& out, const char* part) { out += part != nullptr ? part : "(null)"; }
inline void append(std::string& out, std::string const& part) { out += part; }
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
inline void append(std::string& out, T part) {
  out += std::to_string(part);
}

// Throws std::runtime_error (RuntimeError in Python) with the parts joined.
template <class... Parts>
[[noreturn]] void fail(Parts const&... parts) {
  std::string message;
  (append(message, parts), ...);
  throw std::runtime_error(message);
}

#define FSW_CHECK(cond, ...)                                   \
  do {                                                         \
    if (!(cond)) ::fused_swiglu::torch_ops::fail(__VA_ARGS__); \
  } while (0)

// A shim call's error code as an exception.
#define FSW_SHIM_CHECK(call)                                                               \
  do {                                                                                     \
    AOTITorchError fsw_shim_status_ = (call);                                              \
    FSW_CHECK(fsw_shim_status_ == AOTI_TORCH_SUCCESS, "fused_swiglu: ", #call, " failed"); \
  } while (0)

constexpr int64_t kAlign = 8;  // elements: 16-byte TMA rows in bf16 / fp16
constexpr size_t kMaxPlans = 4096;

// Filled by fsw_torch_bind: the kernel library's entry points and the Python plan callback.
using RunFn = fsw_status (*)(int, const fsw_problem*, void*, size_t, void*);
using WorkspaceFn = fsw_status (*)(int, const fsw_problem*, size_t*);
using LastErrorFn = const char* (*)();
// kind, config, m, n, k, dtype, device -> config index, raster, swizzle; returns 0 or writes a message.
using PlanFn = int (*)(int32_t, const char*, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t*, int32_t*,
                       int32_t*, char*, size_t);
using StreamFn = AOTITorchError (*)(int32_t, void**);

struct Binding {
  RunFn run = nullptr;
  WorkspaceFn workspace_size = nullptr;
  LastErrorFn last_error = nullptr;
  PlanFn plan = nullptr;
  StreamFn current_stream = nullptr;
};
std::atomic<Binding const*> g_binding{nullptr};

struct PlanKey {
  int32_t kind, dtype, device;
  int64_t m, n, k;
  std::string config;
  bool operator==(PlanKey const& o) const {
    return kind == o.kind && dtype == o.dtype && device == o.device && m == o.m && n == o.n && k == o.k &&
           config == o.config;
  }
};
struct PlanKeyHash {
  size_t operator()(PlanKey const& p) const {
    size_t h = std::hash<int64_t>()(p.m);
    for (int64_t v : {int64_t(p.kind), int64_t(p.dtype), int64_t(p.device), p.n, p.k}) {
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

int32_t dtype_code(Tensor const& t) {
  int32_t code = 0;
  FSW_SHIM_CHECK(aoti_torch_get_dtype(t.get(), &code));
  return code;
}

// fsw_dtype of the operands: bf16 or fp16, all of one dtype.
int32_t check_dtypes(const char* op, std::initializer_list<std::pair<const char*, Tensor const*>> named) {
  static const int32_t bf16 = aoti_torch_dtype_bfloat16(), fp16 = aoti_torch_dtype_float16();
  int32_t first = dtype_code(*named.begin()->second);
  FSW_CHECK(first == bf16 || first == fp16, "fused_swiglu::", op,
            ": x must be torch.bfloat16 or torch.float16 on CUDA");
  for (auto const& [arg, t] : named) {
    FSW_CHECK(dtype_code(*t) == first, "fused_swiglu::", op, ": ", arg, " must have x's dtype");
  }
  return first == bf16 ? FSW_DTYPE_BF16 : FSW_DTYPE_FP16;
}

int32_t check_devices(const char* op, std::initializer_list<std::pair<const char*, Tensor const*>> named) {
  int32_t first = named.begin()->second->get_device_index();
  for (auto const& [arg, t] : named) {
    FSW_CHECK(t->is_cuda(), "fused_swiglu::", op, ": ", arg, " must be a CUDA tensor");
    FSW_CHECK(t->get_device_index() == first, "fused_swiglu::", op, ": ", arg,
              " must be on x's device cuda:", first, "; got cuda:", t->get_device_index());
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

// t (rows, cols) as TMA reads it: unit column stride, row stride a multiple of 8 elements and at least
// cols, 16-byte aligned start; else a contiguous copy.
Tensor tma_ready(Tensor const& t) {
  bool ok = t.stride(1) == 1 && t.stride(0) % kAlign == 0 && t.stride(0) >= t.size(1) &&
            reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  if (ok) return t;
  std::array<int64_t, 2> sizes{t.size(0), t.size(1)};
  Tensor copy = torch::stable::new_empty(t, torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()));
  torch::stable::copy_(copy, t);
  return copy;
}

Tensor new_output(Tensor const& x, int64_t m, int64_t n) {
  std::array<int64_t, 2> sizes{m, n}, strides{n, 1};
  int32_t device_type = 0;
  FSW_SHIM_CHECK(aoti_torch_get_device_type(x.get(), &device_type));
  AtenTensorHandle handle = nullptr;
  FSW_SHIM_CHECK(aoti_torch_empty_strided(2, sizes.data(), strides.data(), dtype_code(x),
                                                         device_type, x.get_device_index(), &handle));
  return Tensor(handle);
}

// The config table reads FUSED_SWIGLU_CONFIG; plans made under another value of it are dropped.
std::string g_override_seen;

void drop_plans_if_override_changed() {  // with g_plans_mutex held
  const char* now = std::getenv("FUSED_SWIGLU_CONFIG");
  if (now == nullptr) now = "";
  if (g_override_seen != now) {
    g_plans.clear();
    g_override_seen = now;
  }
}

Plan lookup_plan(PlanKey const& key, fsw_problem const& problem) {
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);
    drop_plans_if_override_changed();
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return it->second;  // a copy: another thread may clear the map
  }
  // Outside the lock: the callback takes Python's GIL, which another thread may hold while it waits
  // for this lock.
  Binding const& b = binding();
  Plan plan{};
  char message[1024] = {0};
  int rc = b.plan(key.kind, key.config.c_str(), key.m, key.n, key.k, key.dtype, key.device, &plan.config,
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

void launch(fsw_kernel_kind kind, std::string const& config, int32_t device, fsw_problem& problem,
            Tensor const& x) {
  Binding const& b = binding();
  PlanKey key{int32_t(kind), problem.dtype, device, problem.m, problem.n, problem.k, config};
  Plan plan = lookup_plan(key, problem);
  problem.raster = plan.raster;
  problem.swizzle = plan.swizzle;
  void* workspace = nullptr;
  Tensor workspace_tensor = x;  // keeps a workspace allocation alive until the launch is queued
  if (plan.workspace_bytes > 0) {
    std::array<int64_t, 1> size{int64_t(plan.workspace_bytes)};
    workspace_tensor = torch::stable::new_empty(x, torch::headeronly::IntHeaderOnlyArrayRef(size.data(), 1),
                                                torch::headeronly::ScalarType::Byte);
    workspace = workspace_tensor.data_ptr();
  }
  int32_t current = torch::stable::accelerator::getCurrentDeviceIndex();
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  if (current != device) guard.emplace(device);
  void* stream = nullptr;
  FSW_SHIM_CHECK(b.current_stream(device, &stream));
  fsw_status s = b.run(plan.config, &problem, workspace, plan.workspace_bytes, stream);
  FSW_CHECK(s == FSW_SUCCESS, "fused_swiglu::", kind == FSW_KERNEL_DUAL ? "swiglu_dual" : "swiglu_packed",
            ": fsw_run failed: ", b.last_error());
}

// Where one operand goes in an fsw_problem: its pointer and leading dimension.
struct Operand {
  Tensor const& tensor;
  const void*& ptr;
  int64_t& ld;
};

// Allocates y (M, n), makes the operands TMA-ready into `problem` and launches; M = 0 or n = 0
// returns the empty y without a launch.
Tensor run(fsw_kernel_kind kind, std::string const& config, int32_t device, fsw_problem& problem, Tensor const& x,
           int64_t n, std::initializer_list<Operand> operands) {
  int64_t m = x.size(0);
  Tensor y = new_output(x, m, n);
  if (m == 0 || n == 0) return y;
  std::array<std::optional<Tensor>, 3> ready;  // copies made for TMA live until the launch is queued
  size_t i = 0;
  for (Operand const& o : operands) {
    Tensor const& t = ready.at(i++).emplace(tma_ready(o.tensor));
    o.ptr = t.data_ptr();
    o.ld = t.stride(0);
  }
  problem.m = m, problem.n = n, problem.k = x.size(1);
  problem.y = y.data_ptr();
  problem.ldy = n;
  launch(kind, config, device, problem, x);
  return y;
}

// y = silu(x @ w_gate^T) * (x @ w_up^T): x (M, H), w_gate and w_up (I, H); returns (M, I) contiguous.
Tensor swiglu_dual(Tensor x, Tensor w_gate, Tensor w_up, std::string config) {
  const char* op = "swiglu_dual";
  check_2d(op, "x", x, "(M, H)");
  check_2d(op, "w_gate", w_gate, "(I, H)");
  check_2d(op, "w_up", w_up, "(I, H)");
  int64_t k = x.size(1), n = w_gate.size(0);
  FSW_CHECK(w_up.size(0) == n && w_up.size(1) == w_gate.size(1), "fused_swiglu::", op,
            ": w_gate and w_up must have the same shape (I, H)");
  FSW_CHECK(w_gate.size(1) == k, "fused_swiglu::", op, ": x must be (M, H) with H = w_gate.shape[1] = ",
            w_gate.size(1), "; got H=", k);
  fsw_problem p{};
  p.dtype = check_dtypes(op, {{"x", &x}, {"w_gate", &w_gate}, {"w_up", &w_up}});
  int32_t device = check_devices(op, {{"x", &x}, {"w_gate", &w_gate}, {"w_up", &w_up}});
  check_tma_sizes(op, n, k);
  return run(FSW_KERNEL_DUAL, config, device, p, x, n,
             {{x, p.x, p.ldx}, {w_gate, p.w, p.ldw}, {w_up, p.w_up, p.ldw_up}});
}

// y = swiglu(x @ w_packed^T) over the interleaved packed (2I, H) weight; returns (M, I) contiguous.
Tensor swiglu_packed(Tensor x, Tensor w_packed, std::string config) {
  const char* op = "swiglu_packed";
  check_2d(op, "x", x, "(M, H)");
  check_2d(op, "w_packed", w_packed, "(2I, H)");
  int64_t k = x.size(1), rows = w_packed.size(0);
  FSW_CHECK(rows % 2 == 0, "fused_swiglu::", op, ": w_packed must have an even number of rows (2I); got ",
            rows);
  FSW_CHECK(w_packed.size(1) == k, "fused_swiglu::", op,
            ": x must be (M, H) with H = w_packed.shape[1] = ", w_packed.size(1), "; got H=", k);
  int64_t n = rows / 2;
  fsw_problem p{};
  p.dtype = check_dtypes(op, {{"x", &x}, {"w_packed", &w_packed}});
  int32_t device = check_devices(op, {{"x", &x}, {"w_packed", &w_packed}});
  check_tma_sizes(op, n, k);
  return run(FSW_KERNEL_PACKED, config, device, p, x, n, {{x, p.x, p.ldx}, {w_packed, p.w, p.ldw}});
}

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

STABLE_TORCH_LIBRARY_IMPL(fused_swiglu, CUDA, m) {
  m.impl("swiglu_dual", TORCH_BOX(&fused_swiglu::torch_ops::swiglu_dual));
  m.impl("swiglu_packed", TORCH_BOX(&fused_swiglu::torch_ops::swiglu_packed));
}

#define FSW_TORCH_API extern "C" __attribute__((visibility("default")))

// Binds the operators to a loaded kernel library and the plan callback; returns 0, or 1 when this
// PyTorch has no CUDA (then the operators stay unbound). Rebinding drops the cached plans.
FSW_TORCH_API int fsw_torch_bind(void* run, void* workspace_size, void* last_error, void* plan) {
  using namespace fused_swiglu::torch_ops;
  StreamFn stream = find_current_stream();
  if (stream == nullptr) return 1;
  // never freed: a call on another thread may still read the previous binding
  Binding* b = new Binding{reinterpret_cast<RunFn>(run), reinterpret_cast<WorkspaceFn>(workspace_size),
                           reinterpret_cast<LastErrorFn>(last_error), reinterpret_cast<PlanFn>(plan), stream};
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
