// CUDA kernels of fused_swiglu::swiglu_dual and fused_swiglu::swiglu_packed (schemas, CPU and fake
// kernels and autograd: src/fused_swiglu/ops.py).
#include "ops.hpp"

namespace fused_swiglu::torch_ops {

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
  int64_t m = x.size(0);
  Tensor y = new_output(x, m, n);
  if (m == 0 || n == 0) return y;
  p.m = m, p.n = n, p.k = k;
  p.y = y.data_ptr(), p.ldy = n;
  launch(op, kPlanDual, config, device, p, x, {{x, p.x, p.ldx}, {w_gate, p.w, p.ldw}, {w_up, p.w_up, p.ldw_up}});
  return y;
}

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
  int64_t m = x.size(0);
  Tensor y = new_output(x, m, n);
  if (m == 0 || n == 0) return y;
  p.m = m, p.n = n, p.k = k;
  p.y = y.data_ptr(), p.ldy = n;
  launch(op, kPlanPacked, config, device, p, x, {{x, p.x, p.ldx}, {w_packed, p.w, p.ldw}});
  return y;
}

}  // namespace fused_swiglu::torch_ops
