// CUDA kernels of the training operators fused_swiglu::swiglu_dual_store, swiglu_packed_store and dswiglu
// (schemas, CPU and fake kernels: src/fused_swiglu/training_ops.py; the MLP operators and their autograd
// that call them: src/fused_swiglu/mlp_ops.py).
#include "ops.hpp"

#include <cstddef>

namespace fused_swiglu::torch_ops {
namespace {

// Byte address of column `col` of a 16-bit row-major tensor.
void* column(Tensor const& t, int64_t col) { return static_cast<char*>(t.data_ptr()) + col * 2; }

// y (M, I) and gu (M, 2I) = [g | u], with their pointers and row strides written into p (sizes set).
std::tuple<Tensor, Tensor> store_outputs(Tensor const& x, fsw_problem& p) {
  Tensor y = new_output(x, p.m, p.n);
  Tensor gu = new_output(x, p.m, 2 * p.n);
  if (p.m == 0 || p.n == 0) return {y, gu};
  p.y = y.data_ptr(), p.ldy = p.n;
  p.g = gu.data_ptr(), p.u = column(gu, p.n), p.ldgu = 2 * p.n;
  return {y, gu};
}

}  // namespace

std::tuple<Tensor, Tensor> swiglu_dual_store(Tensor x, Tensor w_gate, Tensor w_up, std::string config) {
  const char* op = "swiglu_dual_store";
  fsw_problem p{};
  int32_t device = check_dual(op, x, w_gate, w_up, p);
  auto out = store_outputs(x, p);
  if (p.m == 0 || p.n == 0) return out;
  launch(op, kPlanDualStore, config, device, p, x,
         {{x, p.x, p.ldx}, {w_gate, p.w, p.ldw}, {w_up, p.w_up, p.ldw_up}});
  return out;
}

std::tuple<Tensor, Tensor> swiglu_packed_store(Tensor x, Tensor w_packed, std::string config) {
  const char* op = "swiglu_packed_store";
  fsw_problem p{};
  int32_t device = check_packed(op, x, w_packed, p);
  auto out = store_outputs(x, p);
  if (p.m == 0 || p.n == 0) return out;
  launch(op, kPlanPackedStore, config, device, p, x, {{x, p.x, p.ldx}, {w_packed, p.w, p.ldw}});
  return out;
}

Tensor dswiglu(Tensor dz, Tensor w_down, Tensor gu, std::string config) {
  const char* op = "dswiglu";
  check_2d(op, "dz", dz, "(M, H)");
  check_2d(op, "w_down", w_down, "(H, I)");
  check_2d(op, "gu", gu, "(M, 2I)");
  int64_t m = dz.size(0), k = dz.size(1), n = w_down.size(1);
  FSW_CHECK(w_down.size(0) == k, "fused_swiglu::", op, ": w_down must be (H, I) with H = dz.shape[1] = ", k,
            "; got w_down of shape (", w_down.size(0), ", ", n, ")");
  FSW_CHECK(gu.size(0) == m && gu.size(1) == 2 * n, "fused_swiglu::", op, ": gu must be (M, 2I) = (", m, ", ",
            2 * n, "); got gu of shape (", gu.size(0), ", ", gu.size(1), ")");
  fsw_problem p{};
  p.dtype = check_dtypes(op, {{"dz", &dz}, {"w_down", &w_down}, {"gu", &gu}});
  int32_t device = check_devices(op, {{"dz", &dz}, {"w_down", &w_down}, {"gu", &gu}});
  check_tma_sizes(op, n, k);
  Tensor dgu = new_output(dz, m, 2 * n);
  if (m == 0 || n == 0) return dgu;
  Tensor gu_ready = tma_ready(gu);  // read through p.g and p.u until the launch is queued
  p.m = m, p.n = n, p.k = k;
  p.g = gu_ready.data_ptr(), p.u = column(gu_ready, n), p.ldgu = gu_ready.stride(0);
  p.dg = dgu.data_ptr(), p.du = column(dgu, n), p.lddgu = 2 * n;
  launch(op, kPlanDswiglu, config, device, p, dz, {{dz, p.x, p.ldx}, {w_down, p.w, p.ldw}});
  return dgu;
}

}  // namespace fused_swiglu::torch_ops
