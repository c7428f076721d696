// Registers the operators' CUDA kernels (ops.hpp) with PyTorch. The schemas, CPU and fake kernels and
// autograd formulas are registered from Python (src/fused_swiglu/ops.py, training_ops.py, fp8/ops.py);
// PyTorch keeps a kernel registered before its schema, so the load order does not matter.
#include <torch/csrc/stable/library.h>

#include "ops.hpp"

STABLE_TORCH_LIBRARY_IMPL(fused_swiglu, CUDA, m) {
  using namespace fused_swiglu::torch_ops;
  m.impl("swiglu_dual", TORCH_BOX(&swiglu_dual));
  m.impl("swiglu_packed", TORCH_BOX(&swiglu_packed));
  m.impl("swiglu_dual_store", TORCH_BOX(&swiglu_dual_store));
  m.impl("swiglu_packed_store", TORCH_BOX(&swiglu_packed_store));
  m.impl("dswiglu", TORCH_BOX(&dswiglu));
  m.impl("swiglu_packed_fp8", TORCH_BOX(&swiglu_packed_fp8));
  m.impl("swiglu_dual_fp8", TORCH_BOX(&swiglu_dual_fp8));
  m.impl("quantize_e4m3_groups", TORCH_BOX(&quantize_e4m3_groups));
  m.impl("swiglu_grouped", TORCH_BOX(&swiglu_grouped));
  m.impl("moe_layout", TORCH_BOX(&moe_layout));
}
