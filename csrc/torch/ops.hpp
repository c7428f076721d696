// The operators' CUDA kernels (registered in register.cpp). Each checks its operands at the C boundary
// (ranks, shapes, dtypes bf16 / fp16, one CUDA device, H and I multiples of 8), copies operands TMA cannot
// read, returns new contiguous outputs and launches with the plan of its config argument ("" = the choice).
#pragma once

#include <torch/headeronly/core/ScalarType.h>

#include <optional>
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

// e4m3 (fp8_ops.cpp): x and the weights float8_e4m3fn with fp32 dequantization scales (layouts:
// src/fused_swiglu/fp8/__init__.py).
// The packed kernel over w_packed (2I, H): scaling "row" (x_scale (1,) / (M,), w_scale (1,) / (2I,)) or
// "block" (x_scale (M, ceil(H / 128)), w_scale (2I / 8, ceil(H / 128))); x_scale None: x bf16 / fp16,
// quantized here per 1 x 128 group (block scaling only). y bfloat16, or with e4m3_out float8_e4m3fn with the
// static scale out_scale or, without it, one scale per 1 x 128 group of y (a bool, not a dtype: the
// cheaper argument to pass from Python on every call). Returns (y (M, I), y_scale):
// y_scale (M, ceil(I / 128)) fp32 for e4m3 y without out_scale, else None (no tensor to allocate per call).
std::tuple<Tensor, std::optional<Tensor>> swiglu_packed_fp8(Tensor x, Tensor w_packed, std::optional<Tensor> x_scale,
                                             Tensor w_scale, std::optional<Tensor> out_scale, std::string scaling,
                                             bool e4m3_out, std::string config);
// The dual kernel over w_gate and w_up (I, H), row scales x_scale (1,) / (M,), gate_scale and up_scale
// both (1,) or both (I,); returns bfloat16 y (M, I).
Tensor swiglu_dual_fp8(Tensor x, Tensor w_gate, Tensor w_up, Tensor x_scale, Tensor gate_scale, Tensor up_scale,
                       std::string config);
// Grouped (grouped_ops.cpp): the experts of a mixture-of-experts layer.
// y_pad (T_pad, I) = silu(x_pad W_gate[e]^T) * (x_pad W_up[e]^T) per token tile, e its expert: x_pad
// (T_pad, H) bf16 / fp16, the routed tokens sorted by expert, each expert's rows padded to whole tiles;
// gate_up_proj (E, 2I, H) of x_pad's dtype, W_gate = rows [0, I) and W_up = rows [I, 2I) of each expert, read
// in place; tile_expert (T_pad / tile,) int32, the expert of each tile (the tile: T_pad / its entries), a
// value outside [0, E) for the tiles past the last expert, whose rows of y_pad are not written
// (fused_swiglu.grouped).
Tensor swiglu_grouped(Tensor x_pad, Tensor gate_up_proj, Tensor tile_expert, std::string config);
// The padded layout of a top-k routing top_k_index (T, k) int64 / int32 over `experts` experts in token
// tiles of `tile` rows, T_pad = padded_rows rows (include/fused_swiglu/moe_layout.h): (source (T_pad,) int64, tile_expert
// (T_pad / tile,) int32, pair_row (T k,) int64, padded_offsets (experts,) int32, order (T k,) int64,
// expert_offsets (experts,) int32).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> moe_layout(Tensor top_k_index, int64_t experts,
                                                                      int64_t tile, int64_t padded_rows);

// t (rows, cols) bf16 / fp16 quantized per 1 x 128 group of each row: (q (rows, cols) e4m3, scale (rows,
// ceil(cols / 128)) fp32), scale row-major, or of strides (1, ld) with ld = rows rounded up to 4 (the
// block-scaled kernels' layout) if column_major_scales.
std::tuple<Tensor, Tensor> quantize_e4m3_groups(Tensor t, bool column_major_scales);

}  // namespace fused_swiglu::torch_ops
