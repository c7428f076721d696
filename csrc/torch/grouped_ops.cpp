// CUDA kernels of fused_swiglu::swiglu_grouped, the dual kernel batched over the experts of a
// mixture-of-experts layer (schema, CPU and fake kernels: src/fused_swiglu/grouped_ops.py; the problem:
// include/fused_swiglu.h, FSW_KERNEL_GROUPED_DUAL), and of fused_swiglu::moe_layout, the padded layout of a top-k
// routing that it reads (schema, CPU and fake kernels: src/fused_swiglu/routing_ops.py; the kernel:
// include/fused_swiglu/moe_layout.h).
#include <torch/csrc/stable/ops.h>

#include <algorithm>

#include "fused_swiglu/moe_layout.h"
#include "ops.hpp"

namespace fused_swiglu::torch_ops {

Tensor swiglu_grouped(Tensor x_pad, Tensor gate_up_proj, Tensor tile_expert, std::string config) {
  const char* op = "swiglu_grouped";
  check_2d(op, "x_pad", x_pad, "(T_pad, H)");
  FSW_CHECK(gate_up_proj.dim() == 3, "fused_swiglu::", op, ": gate_up_proj must be 3-D (E, 2I, H); got ",
            gate_up_proj.dim(), "-D");
  FSW_CHECK(tile_expert.dim() == 1, "fused_swiglu::", op, ": tile_expert must be 1-D (T_pad / token tile,); got ",
            tile_expert.dim(), "-D");
  fsw_problem p{};
  p.dtype = check_dtypes(op, {{"x_pad", &x_pad}, {"gate_up_proj", &gate_up_proj}});
  check_dtype(op, {{"tile_expert", &tile_expert}}, code_int32(), "torch.int32");
  int32_t device = check_devices(op, {{"x_pad", &x_pad}, {"gate_up_proj", &gate_up_proj}, {"tile_expert", &tile_expert}});
  int64_t const rows = x_pad.size(0), k = x_pad.size(1);
  int64_t const experts = gate_up_proj.size(0), rows_w = gate_up_proj.size(1);
  FSW_CHECK(experts >= 1, "fused_swiglu::", op, ": gate_up_proj must hold at least one expert (E >= 1); got E=0");
  FSW_CHECK(rows_w % 2 == 0, "fused_swiglu::", op,
            ": gate_up_proj must have an even number of rows per expert (2I: gate rows, then up rows); got ", rows_w);
  FSW_CHECK(gate_up_proj.size(2) == k, "fused_swiglu::", op, ": x_pad must be (T_pad, H) with H = gate_up_proj.shape[2] = ",
            gate_up_proj.size(2), "; got H=", k);
  int64_t const n = rows_w / 2;
  check_tma_sizes(op, n, k);
  // The layout's token tile, T_pad / tile_expert's entries: the plan's config must have it (the choice checks).
  int64_t const tiles = tile_expert.size(0);
  FSW_CHECK((rows == 0 && tiles == 0) || (tiles > 0 && rows % tiles == 0), "fused_swiglu::", op,
            ": tile_expert must have one entry per token tile of x_pad (T_pad / token tile, T_pad a whole number of "
            "tiles); got ", tiles, " entries for T_pad=", rows);
  int64_t const token_tile = tiles > 0 ? rows / tiles : 0;
  // The weights are read in place (a copy per call would cost more than the kernel): TMA's rules on the
  // (I, H, E) views of the gate and up rows.
  int64_t const ld = gate_up_proj.stride(1);
  int64_t const ld_expert = experts == 1 ? rows_w * ld : gate_up_proj.stride(0);
  bool const in_place = gate_up_proj.stride(2) == 1 && ld >= k && ld % kAlign == 0 && ld_expert > 0 &&
                        ld_expert % kAlign == 0 && reinterpret_cast<uintptr_t>(gate_up_proj.data_ptr()) % 16 == 0;
  FSW_CHECK(in_place || gate_up_proj.numel() == 0, "fused_swiglu::", op,
            ": gate_up_proj must be readable in place by TMA: unit stride along H, row and expert strides positive "
            "multiples of ", kAlign, " elements (16 bytes), a 16-byte aligned start (a contiguous tensor has all "
            "three); got strides (", gate_up_proj.stride(0), ", ", ld, ", ", gate_up_proj.stride(2), ")");

  Tensor y = new_output(x_pad, rows, n);
  if (rows == 0 || n == 0) return y;
  Tensor experts_of_tiles = tile_expert.is_contiguous() ? tile_expert : torch::stable::contiguous(tile_expert);
  p.y = y.data_ptr(), p.ldy = n;
  p.w = gate_up_proj.data_ptr(), p.ldw = ld;
  p.w_up = static_cast<const char*>(gate_up_proj.data_ptr()) + n * ld * int64_t(gate_up_proj.element_size());
  p.ldw_up = ld;
  p.experts = experts;
  p.ldw_expert = ld_expert;
  p.tile_expert = static_cast<const int32_t*>(experts_of_tiles.data_ptr());
  p.m = rows, p.n = n, p.k = k;
  launch(op, kPlanGroupedDual, config, device, p, x_pad, {{x_pad, p.x, p.ldx}}, token_tile);
  return y;
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> moe_layout(Tensor top_k_index, int64_t experts,
                                                                      int64_t tile, int64_t padded_rows) {
  const char* op = "moe_layout";
  check_2d(op, "top_k_index", top_k_index, "(T, k)");
  int32_t const code = dtype_code(top_k_index);
  FSW_CHECK(code == code_int64() || code == code_int32(), "fused_swiglu::", op,
            ": top_k_index must be torch.int64 or torch.int32");
  int32_t device = check_devices(op, {{"top_k_index", &top_k_index}});
  int64_t const tokens = top_k_index.size(0), k = top_k_index.size(1);
  FSW_CHECK(k >= 1 && k <= INT32_MAX, "fused_swiglu::", op, ": top_k_index must be (T, k) with k >= 1; got k=", k);
  FSW_CHECK(experts >= 1 && experts <= FSW_MOE_LAYOUT_MAX_EXPERTS, "fused_swiglu::", op, ": experts must be in [1, ",
            FSW_MOE_LAYOUT_MAX_EXPERTS, "]; got ", experts);
  FSW_CHECK(tile >= 1 && tile <= 1024, "fused_swiglu::", op, ": tile must be in [1, 1024]; got ", tile);
  int64_t const pairs = tokens * k;
  int64_t const worst = fsw_moe_padded_rows(pairs, experts, tile);
  FSW_CHECK(padded_rows == worst, "fused_swiglu::", op, ": padded_rows must be fused_swiglu.grouped.padded_rows(",
            pairs, ", ", experts, ", ", tile, ") = ", worst, "; got ", padded_rows);
  FSW_CHECK(worst <= INT32_MAX, "fused_swiglu::", op, ": the layout's rows must be < 2^31; got ", worst);
  Tensor ids = top_k_index.is_contiguous() ? top_k_index : torch::stable::contiguous(top_k_index);
  Tensor source = new_vector(ids, worst, code_int64());
  Tensor tile_expert = new_vector(ids, worst / tile, code_int32());
  Tensor pair_row = new_vector(ids, pairs, code_int64());
  Tensor padded_offsets = new_vector(ids, experts, code_int32());
  Tensor order = new_vector(ids, pairs, code_int64());
  Tensor expert_offsets = new_vector(ids, experts, code_int32());
  run_moe_layout(op, device, ids.data_ptr(), code == code_int64() ? 64 : 32, pairs, int32_t(k), int32_t(experts),
                 int32_t(tile), worst, static_cast<int64_t*>(source.data_ptr()),
                 static_cast<int32_t*>(tile_expert.data_ptr()), static_cast<int64_t*>(pair_row.data_ptr()),
                 static_cast<int32_t*>(padded_offsets.data_ptr()), static_cast<int64_t*>(order.data_ptr()),
                 static_cast<int32_t*>(expert_offsets.data_ptr()));
  return {source, tile_expert, pair_row, padded_offsets, order, expert_offsets};
}

}  // namespace fused_swiglu::torch_ops
