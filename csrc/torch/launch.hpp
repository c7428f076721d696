// What every operator of the operator library shares: C-boundary checks, TMA readiness, the launch-plan
// cache and the launch through the kernel library's C ABI (include/fused_swiglu.h), on the current CUDA
// stream of the operands' device. Written against PyTorch's stable C ABI (torch/csrc/stable), so one
// binary serves every PyTorch release from the targeted one on (TORCH_TARGET_VERSION, set by the build).
//
// A plan is chosen once per problem (plan kind, config argument, dtype, M, N, K, a grouped problem's token
// tile, device) by the Python config choice (a callback bound at load time, src/fused_swiglu/_plans.py),
// together with the workspace size the library asks for; fsw_torch_clear_plans drops them
// (fused_swiglu.configs.set_config_override does).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "fused_swiglu.h"

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

// What the plan callback is asked for (src/fused_swiglu/_plans.py, PLAN_KINDS): an fsw_kernel_kind; one
// of the training forward's store variants, which the C ABI runs as PACKED / DUAL configs that also write
// g and u (preactivations = 1); an e4m3 family (row scales with bf16 y or e4m3 y, block scales, the
// dual kernel's row scales); or the grouped dual kernel (FSW_KERNEL_GROUPED_DUAL configs; M = T_pad).
// Plan kinds and fsw_kernel_kind values agree for the first three only.
enum PlanKind : int32_t {
  kPlanPacked = FSW_KERNEL_PACKED,
  kPlanDual = FSW_KERNEL_DUAL,
  kPlanDswiglu = FSW_KERNEL_DSWIGLU,
  kPlanPackedStore = 3,
  kPlanDualStore = 4,
  kPlanPackedFp8 = 5,
  kPlanPackedFp8E4m3Out = 6,
  kPlanPackedFp8Block = 7,
  kPlanDualFp8 = 8,
  kPlanGroupedDual = 9,
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

// Every named tensor of `dtype` (an aoti dtype code), which `rule` names in the error.
void check_dtype(const char* op, Named named, int32_t dtype, const char* rule);

// aoti dtype codes.
int32_t dtype_code(Tensor const& t);
int32_t code_bf16();
int32_t code_fp16();
int32_t code_fp32();
int32_t code_e4m3();
int32_t code_int32();
int32_t code_int64();

// t (rows, cols) as TMA reads it: unit column stride, a row stride of whole 16-byte units and at least
// cols, 16-byte aligned start; else a contiguous copy.
Tensor tma_ready(Tensor const& t);
// A new contiguous (m, n) tensor of like's dtype (or of aoti dtype code `dtype`) on like's device.
Tensor new_output(Tensor const& like, int64_t m, int64_t n);
Tensor new_output(Tensor const& like, int64_t m, int64_t n, int32_t dtype);
// A new contiguous 1-D (n,) tensor of aoti dtype code `dtype` on like's device.
Tensor new_vector(Tensor const& like, int64_t n, int32_t dtype);
// A new (m, n) tensor of strides (1, max(m, 1)), aoti dtype code `dtype`, on like's device: one allocation, no
// transposed view of a row-major one.
Tensor new_column_major(Tensor const& like, int64_t m, int64_t n, int32_t dtype);

// The current CUDA stream of `device`.
void* current_stream(int32_t device);
// fsw_quantize_e4m3_groups of the bound kernel library on the current stream of `device`; `op` names the
// operator in errors.
void run_quantize_e4m3_groups(const char* op, int32_t device, int32_t dtype, int64_t m, int64_t k, const void* x,
                              int64_t ldx, void* q, int64_t ldq, float* scale, int64_t scale_stride_m,
                              int64_t scale_stride_g, int64_t scale_rows);
// fsw_moe_layout (include/fused_swiglu/moe_layout.h) of the bound kernel library on the current stream of `device`.
void run_moe_layout(const char* op, int32_t device, const void* top_k_index, int32_t index_bits, int64_t pairs,
                    int32_t k, int32_t experts, int32_t tile, int64_t padded_rows, int64_t* source,
                    int32_t* tile_expert, int64_t* pair_row, int32_t* padded_offsets, int64_t* order,
                    int32_t* expert_offsets);

// Where one input goes in an fsw_problem: its pointer and leading dimension.
struct Operand {
  Tensor const& tensor;
  const void*& ptr;
  int64_t& ld;
};

// Launches `problem` (sizes and outputs filled in) on the current stream of `device` with the plan of
// (kind, config), after making each input operand TMA-ready and writing its pointer and row stride into
// `problem` (copies live until the launch is queued). `op` names the operator in errors. `token_tile`: the
// token rows per tile of a grouped problem's layout (the plan's config must have that tile), 0 otherwise.
void launch(const char* op, PlanKind kind, std::string const& config, int32_t device, fsw_problem& problem,
            Tensor const& like, std::initializer_list<Operand> inputs, int64_t token_tile = 0);

}  // namespace fused_swiglu::torch_ops
