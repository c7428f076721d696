// What every operator of the operator library shares: C-boundary checks, TMA readiness, the launch-plan
// cache and the launch through the kernel library's C ABI (capi/fused_swiglu.h), on the current CUDA
// stream of the operands' device. Written against PyTorch's stable C ABI (torch/csrc/stable), so one
// binary serves every PyTorch release from the targeted one on (TORCH_TARGET_VERSION, set by the build).
//
// A plan is chosen once per problem (plan kind, config argument, dtype, M, N, K, device) by the Python
// config choice (a callback bound at load time, src/fused_swiglu/_plans.py), together with the workspace
// size the library asks for; a change of FUSED_SWIGLU_CONFIG in the running process drops the plans made
// before it.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "../capi/fused_swiglu.h"

namespace fused_swiglu::torch_ops {

using torch::stable::Tensor;

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

constexpr int64_t kAlign = 8;  // elements: 16-byte TMA rows in bf16 / fp16

// What the plan callback is asked for: an fsw_kernel_kind, or one of the training forward's store
// variants, which the C ABI runs as PACKED / DUAL configs that also write g and u (preactivations = 1).
enum PlanKind : int32_t {
  kPlanPacked = FSW_KERNEL_PACKED,
  kPlanDual = FSW_KERNEL_DUAL,
  kPlanDswiglu = FSW_KERNEL_DSWIGLU,
  kPlanPackedStore = 3,
  kPlanDualStore = 4,
};

using Named = std::initializer_list<std::pair<const char*, Tensor const*>>;

// fsw_dtype of the operands: bf16 or fp16, all of the first operand's dtype.
int32_t check_dtypes(const char* op, Named named);
// The CUDA device index of the operands, all on the first operand's device.
int32_t check_devices(const char* op, Named named);
void check_2d(const char* op, const char* arg, Tensor const& t, const char* shape);
// H (k) a positive multiple of 8 and I (n) a multiple of 8: 16-byte TMA rows.
void check_tma_sizes(const char* op, int64_t n, int64_t k);

// The dual kernel's operands x (M, H), w_gate and w_up (I, H) / the packed kernel's x and w_packed (2I, H):
// ranks, shapes, dtypes, devices and TMA sizes; fills p.m, p.n = I, p.k = H and p.dtype and returns the device.
int32_t check_dual(const char* op, Tensor const& x, Tensor const& w_gate, Tensor const& w_up, fsw_problem& p);
int32_t check_packed(const char* op, Tensor const& x, Tensor const& w_packed, fsw_problem& p);

// t (rows, cols) as TMA reads it: unit column stride, row stride a multiple of 8 elements and at least
// cols, 16-byte aligned start; else a contiguous copy.
Tensor tma_ready(Tensor const& t);
// A new contiguous (m, n) tensor of like's dtype on like's device.
Tensor new_output(Tensor const& like, int64_t m, int64_t n);

// Where one input goes in an fsw_problem: its pointer and leading dimension.
struct Operand {
  Tensor const& tensor;
  const void*& ptr;
  int64_t& ld;
};

// Launches `problem` (sizes and outputs filled in) on the current stream of `device` with the plan of
// (kind, config), after making each input operand TMA-ready and writing its pointer and row stride into
// `problem` (copies live until the launch is queued). `op` names the operator in errors.
void launch(const char* op, PlanKind kind, std::string const& config, int32_t device, fsw_problem& problem,
            Tensor const& like, std::initializer_list<Operand> inputs);

}  // namespace fused_swiglu::torch_ops
