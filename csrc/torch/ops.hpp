// The operators' CUDA kernels (registered in register.cpp). Each checks its operands at the C boundary
// (ranks, shapes, dtypes bf16 / fp16, one CUDA device, H and I multiples of 8), copies operands TMA cannot
// read, returns new contiguous outputs and launches with the plan of its config argument ("" = the choice).
#pragma once

#include <string>
#include <tuple>

#include "launch.hpp"

namespace fused_swiglu::torch_ops {

// Inference (inference_ops.cpp).
// y = silu(x @ w_gate^T) * (x @ w_up^T): x (M, H), w_gate and w_up (I, H); returns y (M, I).
Tensor swiglu_dual(Tensor x, Tensor w_gate, Tensor w_up, std::string config);
// y = swiglu(x @ w_packed^T) over the interleaved packed (2I, H) weight; returns y (M, I).
Tensor swiglu_packed(Tensor x, Tensor w_packed, std::string config);

// Training (training_ops.cpp).
// The dual kernel's store variant: y as swiglu_dual, and gu (M, 2I) = [g | u], the pre-activations
// x @ w_gate^T and x @ w_up^T rounded once to x's dtype.
std::tuple<Tensor, Tensor> swiglu_dual_store(Tensor x, Tensor w_gate, Tensor w_up, std::string config);
// The packed kernel's store variant over the interleaved packed (2I, H) weight.
std::tuple<Tensor, Tensor> swiglu_packed_store(Tensor x, Tensor w_packed, std::string config);
// dgu (M, 2I) = [dg | du], the gradients of y = silu(g) * u at dY = dz @ w_down: dz (M, H), w_down (H, I),
// gu (M, 2I) = [g | u].
Tensor dswiglu(Tensor dz, Tensor w_down, Tensor gu, std::string config);

}  // namespace fused_swiglu::torch_ops
