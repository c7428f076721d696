// CUDA kernels of fused_swiglu::swiglu_dual and fused_swiglu::swiglu_packed (schemas, CPU and fake
// kernels and autograd: src/fused_swiglu/ops.py).
#include "ops.hpp"

namespace fused_swiglu::torch_ops {

Tensor swiglu_dual(Tensor x, Tensor w_gate, Tensor w_up, std::string config) {
  const char* op = "swiglu_dual";
  fsw_problem p{};
  int32_t device = check_dual(op, x, w_gate, w_up, p);
  Tensor y = new_output(x, p.m, p.n);
  if (p.m == 0 || p.n == 0) return y;
  p.y = y.data_ptr(), p.ldy = p.n;
  launch(op, kPlanDual, config, device, p, x, {{x, p.x, p.ldx}, {w_gate, p.w, p.ldw}, {w_up, p.w_up, p.ldw_up}});
  return y;
}

Tensor swiglu_packed(Tensor x, Tensor w_packed, std::string config) {
  const char* op = "swiglu_packed";
  fsw_problem p{};
  int32_t device = check_packed(op, x, w_packed, p);
  Tensor y = new_output(x, p.m, p.n);
  if (p.m == 0 || p.n == 0) return y;
  p.y = y.data_ptr(), p.ldy = p.n;
  launch(op, kPlanPacked, config, device, p, x, {{x, p.x, p.ldx}, {w_packed, p.w, p.ldw}});
  return y;
}

}  // namespace fused_swiglu::torch_ops
