// The operand checks the dual and packed forms of every family share (launch.hpp).
#include "launch.hpp"

namespace fused_swiglu::torch_ops {

int32_t check_dual(const char* op, Tensor const& x, Tensor const& w_gate, Tensor const& w_up, fsw_problem& p) {
  check_2d(op, "x", x, "(M, H)");
  check_2d(op, "w_gate", w_gate, "(I, H)");
  check_2d(op, "w_up", w_up, "(I, H)");
  int64_t k = x.size(1), n = w_gate.size(0);
  FSW_CHECK(w_up.size(0) == n && w_up.size(1) == w_gate.size(1), "fused_swiglu::", op,
            ": w_gate and w_up must have the same shape (I, H)");
  FSW_CHECK(w_gate.size(1) == k, "fused_swiglu::", op, ": x must be (M, H) with H = w_gate.shape[1] = ",
            w_gate.size(1), "; got H=", k);
  p.dtype = check_dtypes(op, {{"x", &x}, {"w_gate", &w_gate}, {"w_up", &w_up}});
  int32_t device = check_devices(op, {{"x", &x}, {"w_gate", &w_gate}, {"w_up", &w_up}});
  check_tma_sizes(op, n, k);
  p.m = x.size(0), p.n = n, p.k = k;
  return device;
}

int32_t check_packed(const char* op, Tensor const& x, Tensor const& w_packed, fsw_problem& p) {
  check_2d(op, "x", x, "(M, H)");
  check_2d(op, "w_packed", w_packed, "(2I, H)");
  int64_t k = x.size(1), rows = w_packed.size(0);
  FSW_CHECK(rows % 2 == 0, "fused_swiglu::", op, ": w_packed must have an even number of rows (2I); got ",
            rows);
  FSW_CHECK(w_packed.size(1) == k, "fused_swiglu::", op,
            ": x must be (M, H) with H = w_packed.shape[1] = ", w_packed.size(1), "; got H=", k);
  p.dtype = check_dtypes(op, {{"x", &x}, {"w_packed", &w_packed}});
  int32_t device = check_devices(op, {{"x", &x}, {"w_packed", &w_packed}});
  check_tma_sizes(op, rows / 2, k);
  p.m = x.size(0), p.n = rows / 2, p.k = k;
  return device;
}

}  // namespace fused_swiglu::torch_ops
