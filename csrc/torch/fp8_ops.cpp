// CUDA kernels of the e4m3 operators fused_swiglu::swiglu_packed_fp8, swiglu_dual_fp8 and
// quantize_e4m3_groups (schemas, CPU and fake kernels: src/fused_swiglu/fp8/ops.py; the scale layouts:
// include/fused_swiglu.h, fsw_problem).
#include <torch/csrc/stable/ops.h>

#include <array>
#include <optional>

#include "ops.hpp"

namespace fused_swiglu::torch_ops {
namespace {

constexpr int64_t kGroup = 128;      // columns per scale of a 1 x 128 group, K per block scale
constexpr int64_t kPackedRows = 8;   // packed weight rows per block-scale row
constexpr int64_t kE4m3Unit = 16;    // e4m3 elements per 16-byte TMA unit

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool aligned16(Tensor const& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

template <size_t N>
torch::headeronly::IntHeaderOnlyArrayRef dims(std::array<int64_t, N> const& a) {
  return torch::headeronly::IntHeaderOnlyArrayRef(a.data(), a.size());
}

// A row scaling's scale: fp32, (1,) or (n,) / (n, 1).
void check_row_scale(const char* op, const char* arg, Tensor const& s, int64_t n, const char* what) {
  check_dtype(op, {{arg, &s}}, code_fp32(), "torch.float32");
  bool shape_ok = (s.numel() == 1 || s.numel() == n) && s.dim() <= 2 && (s.dim() < 2 || s.size(1) == 1);
  FSW_CHECK(shape_ok, "fused_swiglu::", op, ": ", arg, " must have shape (1,) (per tensor) or (", n, ",) / (", n,
            ", 1), ", what, "; got ", s.dim(), "-D with ", s.numel(), " elements");
}

// A block scaling's scale: fp32 (rows, blocks).
void check_block_scale(const char* op, const char* arg, Tensor const& s, int64_t rows, int64_t blocks,
                       const char* what) {
  check_dtype(op, {{arg, &s}}, code_fp32(), "torch.float32");
  FSW_CHECK(s.dim() == 2 && s.size(0) == rows && s.size(1) == blocks, "fused_swiglu::", op, ": ", arg,
            " must have shape (", rows, ", ", blocks, ") = ", what);
}

// s as the kernels read a row scaling's scale: numel() contiguous floats from a 16-byte aligned address. s
// itself where it is so laid out (a (1,), (n,) or (n, 1) tensor: no dispatcher call per launch), else a
// flattened copy (reshape keeps a strided or expanded 1-D view as it is).
Tensor vector_ready(Tensor const& s) {
  if (s.is_contiguous() && aligned16(s)) return s;
  std::array<int64_t, 1> flat{s.numel()};
  Tensor v = torch::stable::contiguous(torch::stable::reshape(s, dims(flat)));
  return aligned16(v) ? v : torch::stable::clone(v);
}

// A fresh fp32 (ceil(rows / 4) * 4, blocks) buffer of strides (1, ld), zero-filled or not: the block-scaled
// kernels' layout of scales, with the padding rows they read.
Tensor m_major_buffer(Tensor const& like, int64_t rows, int64_t blocks, bool zeroed) {
  Tensor buffer = new_column_major(like, ceil_div(rows, 4) * 4, blocks, code_fp32());
  if (zeroed) torch::stable::zero_(buffer);
  return buffer;
}

// s (rows, blocks) as the block-scaled kernels read it: stride (1, ld), ld >= rows a multiple of 4, 16-byte
// aligned; else a copy so laid out with zero padding rows.
Tensor m_major(Tensor const& s, int64_t rows) {
  if (s.stride(0) == 1 && s.stride(1) % 4 == 0 && s.stride(1) >= rows && aligned16(s)) return s;
  Tensor padded = m_major_buffer(s, rows, s.size(1), /*zeroed=*/true);
  Tensor view = torch::stable::narrow(padded, 0, 0, rows);
  torch::stable::copy_(view, s);
  return view;
}

// The dual kernel's weight scales (fsw_problem.w_scale): gate's then up's in one aligned vector, read in
// place where up's already follow gate's in memory.
Tensor dual_weight_scales(Tensor const& gate_scale, Tensor const& up_scale) {
  int64_t n = gate_scale.numel();
  if (gate_scale.is_contiguous() && up_scale.is_contiguous() && aligned16(gate_scale) &&
      static_cast<const char*>(up_scale.data_ptr()) == static_cast<const char*>(gate_scale.data_ptr()) + 4 * n) {
    return gate_scale;  // the kernel reads 2n floats from here: gate's n, then up's n
  }
  std::array<int64_t, 1> size{2 * n}, part{n};
  Tensor both = torch::stable::new_empty(gate_scale, dims(size));
  Tensor first = torch::stable::narrow(both, 0, 0, n), second = torch::stable::narrow(both, 0, n, n);
  torch::stable::copy_(first, torch::stable::reshape(gate_scale, dims(part)));
  torch::stable::copy_(second, torch::stable::reshape(up_scale, dims(part)));
  return both;
}

const float* floats(Tensor const& t) { return static_cast<const float*>(t.data_ptr()); }

// x (M, K) bf16 / fp16 quantized per 1 x 128 group into q (M, K) e4m3 and its scales (M, ceil(K / 128)) in
// `scale`: the block-scaled layout (padding rows zeroed by the kernel) if m_major, else row-major.
void quantize_groups(const char* op, int32_t device, Tensor const& x, Tensor const& q, Tensor const& scale,
                     int64_t scale_rows) {
  // rows of unit column stride, ldx >= K; contiguous() would keep a one-row view of any row stride
  Tensor ready = x;
  if (x.stride(1) != 1 || x.stride(0) < x.size(1)) {
    std::array<int64_t, 2> size{x.size(0), x.size(1)};
    ready = torch::stable::new_empty(x, dims(size));
    torch::stable::copy_(ready, x);
  }
  int32_t dtype = dtype_code(x) == code_bf16() ? FSW_DTYPE_BF16 : FSW_DTYPE_FP16;
  run_quantize_e4m3_groups(op, device, dtype, x.size(0), x.size(1), ready.data_ptr(), ready.stride(0), q.data_ptr(),
                           q.stride(0), static_cast<float*>(scale.data_ptr()), scale.stride(0), scale.stride(1),
                           scale_rows);
}

}  // namespace

std::tuple<Tensor, std::optional<Tensor>> swiglu_packed_fp8(Tensor x, Tensor w_packed, std::optional<Tensor> x_scale,
                                             Tensor w_scale, std::optional<Tensor> out_scale, std::string scaling,
                                             bool e4m3_out, std::string config) {
  const char* op = "swiglu_packed_fp8";
  bool block = scaling == "block";
  FSW_CHECK(block || scaling == "row", "fused_swiglu::", op, ": scaling must be 'row' or 'block'; got '", scaling,
            "'");
  FSW_CHECK(!(block && e4m3_out), "fused_swiglu::", op, ": scaling='block' writes bfloat16 y");
  FSW_CHECK(!out_scale || e4m3_out, "fused_swiglu::", op, ": out_scale is for e4m3 y (e4m3_out=True)");
  FSW_CHECK(x_scale || block, "fused_swiglu::", op,
            ": x_scale may be None only with scaling='block' (x bf16 / fp16, quantized here per 1 x 128 group)");
  check_2d(op, "x", x, "(M, H)");
  check_2d(op, "w_packed", w_packed, "(2I, H)");
  int64_t m = x.size(0), k = x.size(1), rows = w_packed.size(0), n = rows / 2, blocks = ceil_div(k, kGroup);
  FSW_CHECK(w_packed.size(1) == k, "fused_swiglu::", op, ": w_packed must have x's H=", k, " columns; got ",
            w_packed.size(1));
  FSW_CHECK(rows > 0 && rows % 16 == 0, "fused_swiglu::", op,
            ": w_packed must have 2I rows with I a positive multiple of 8; got ", rows, " rows");
  FSW_CHECK(k > 0 && k % kE4m3Unit == 0, "fused_swiglu::", op,
            ": H (x.shape[1]) must be a positive multiple of 16 (16-byte e4m3 rows for TMA); got H=", k);
  FSW_CHECK(!e4m3_out || n % kE4m3Unit == 0, "fused_swiglu::", op,
            ": e4m3 y needs I a multiple of 16 (16-byte e4m3 rows for TMA); got I=", n);
  check_dtype(op, {{"w_packed", &w_packed}}, code_e4m3(), "torch.float8_e4m3fn");
  if (x_scale) {
    check_dtype(op, {{"x", &x}}, code_e4m3(), "torch.float8_e4m3fn");
  } else {
    FSW_CHECK(dtype_code(x) == code_bf16() || dtype_code(x) == code_fp16(), "fused_swiglu::", op,
              ": x must be torch.bfloat16 or torch.float16 where x_scale is None (quantized here)");
  }
  if (block) {
    if (x_scale) check_block_scale(op, "x_scale", *x_scale, m, blocks, "(M, ceil(H / 128))");
    check_block_scale(op, "w_scale", w_scale, rows / kPackedRows, blocks, "(2I / 8, ceil(H / 128))");
  } else {
    check_row_scale(op, "x_scale", *x_scale, m, "M (per token)");
    check_row_scale(op, "w_scale", w_scale, rows, "2I (per weight row)");
  }
  if (out_scale) {
    check_dtype(op, {{"out_scale", &*out_scale}}, code_fp32(), "torch.float32");
    FSW_CHECK(out_scale->numel() == 1, "fused_swiglu::", op, ": out_scale must be one value of shape (1,)");
  }
  Named named{{"x", &x}, {"w_packed", &w_packed}, {"w_scale", &w_scale}};
  int32_t device = check_devices(op, named);
  if (x_scale) check_devices(op, {{"x", &x}, {"x_scale", &*x_scale}});
  if (out_scale) check_devices(op, {{"x", &x}, {"out_scale", &*out_scale}});

  Tensor y = new_output(x, m, n, e4m3_out ? code_e4m3() : code_bf16());
  bool dynamic_out = e4m3_out && !out_scale;
  std::optional<Tensor> y_scale;
  if (dynamic_out) y_scale = new_output(x, m, ceil_div(n, kGroup), code_fp32());
  if (m == 0) return {y, y_scale};

  fsw_problem p{};
  p.m = m, p.n = n, p.k = k, p.dtype = FSW_DTYPE_E4M3;
  p.y = y.data_ptr(), p.ldy = n;
  Tensor xq = x, xs = w_scale, ws = w_scale, os = w_scale;  // set below; each lives until the launch is queued
  if (!x_scale) {
    xq = new_output(x, m, k, code_e4m3());
    xs = m_major_buffer(x, m, blocks, /*zeroed=*/false);  // the kernel zeroes the padding rows
    quantize_groups(op, device, x, xq, xs, xs.size(0));  // the GEMM reads xs's first m rows by its stride
  } else {
    xs = block ? m_major(*x_scale, m) : vector_ready(*x_scale);
  }
  ws = block ? m_major(w_scale, rows / kPackedRows) : vector_ready(w_scale);
  p.x_scale = floats(xs), p.w_scale = floats(ws);
  if (block) {
    p.x_scale_stride = int32_t(xs.stride(1)), p.w_scale_stride = int32_t(ws.stride(1));
  } else {
    p.x_scale_stride = xs.numel() > 1, p.w_scale_stride = ws.numel() > 1;
  }
  if (dynamic_out) {
    p.y_scale = static_cast<float*>(y_scale->data_ptr());
    p.y_scale_stride_m = y_scale->size(1), p.y_scale_stride_g = 1, p.y_scale_mode = FSW_Y_SCALE_GROUP128;
  } else if (out_scale) {
    os = vector_ready(*out_scale);
    p.y_scale = static_cast<float*>(os.data_ptr()), p.y_scale_mode = FSW_Y_SCALE_STATIC;
  }
  PlanKind kind = block ? kPlanPackedFp8Block : e4m3_out ? kPlanPackedFp8E4m3Out : kPlanPackedFp8;
  launch(op, kind, config, device, p, xq, {{xq, p.x, p.ldx}, {w_packed, p.w, p.ldw}});
  return {y, y_scale};
}

Tensor swiglu_dual_fp8(Tensor x, Tensor w_gate, Tensor w_up, Tensor x_scale, Tensor gate_scale, Tensor up_scale,
                       std::string config) {
  const char* op = "swiglu_dual_fp8";
  check_2d(op, "x", x, "(M, H)");
  check_2d(op, "w_gate", w_gate, "(I, H)");
  check_2d(op, "w_up", w_up, "(I, H)");
  int64_t m = x.size(0), k = x.size(1), n = w_gate.size(0);
  FSW_CHECK(w_gate.size(1) == k && w_up.size(1) == k, "fused_swiglu::", op,
            ": w_gate and w_up must have x's H=", k, " columns");
  FSW_CHECK(w_up.size(0) == n, "fused_swiglu::", op, ": w_up must have w_gate's I=", n, " rows; got ",
            w_up.size(0));
  FSW_CHECK(n > 0 && n % 8 == 0, "fused_swiglu::", op,
            ": I (w_gate.shape[0]) must be a positive multiple of 8 (16-byte y rows for TMA); got I=", n);
  FSW_CHECK(k > 0 && k % kE4m3Unit == 0, "fused_swiglu::", op,
            ": H (x.shape[1]) must be a positive multiple of 16 (16-byte e4m3 rows for TMA); got H=", k);
  check_dtype(op, {{"x", &x}, {"w_gate", &w_gate}, {"w_up", &w_up}}, code_e4m3(), "torch.float8_e4m3fn");
  check_row_scale(op, "x_scale", x_scale, m, "M (per token)");
  check_row_scale(op, "gate_scale", gate_scale, n, "I (per output channel)");
  check_row_scale(op, "up_scale", up_scale, n, "I (per output channel)");
  FSW_CHECK(gate_scale.numel() == up_scale.numel(), "fused_swiglu::", op,
            ": gate_scale and up_scale must be of one kind, both per tensor (1,) or both per output channel");
  int32_t device = check_devices(op, {{"x", &x}, {"w_gate", &w_gate}, {"w_up", &w_up}, {"x_scale", &x_scale},
                                      {"gate_scale", &gate_scale}, {"up_scale", &up_scale}});
  Tensor y = new_output(x, m, n, code_bf16());
  if (m == 0) return y;
  fsw_problem p{};
  p.m = m, p.n = n, p.k = k, p.dtype = FSW_DTYPE_E4M3;
  p.y = y.data_ptr(), p.ldy = n;
  Tensor xs = vector_ready(x_scale), ws = dual_weight_scales(gate_scale, up_scale);
  p.x_scale = floats(xs), p.w_scale = floats(ws);
  p.x_scale_stride = xs.numel() > 1, p.w_scale_stride = gate_scale.numel() > 1;
  launch(op, kPlanDualFp8, config, device, p, x, {{x, p.x, p.ldx}, {w_gate, p.w, p.ldw}, {w_up, p.w_up, p.ldw_up}});
  return y;
}

std::tuple<Tensor, Tensor> quantize_e4m3_groups(Tensor t, bool column_major_scales) {
  const char* op = "quantize_e4m3_groups";
  check_2d(op, "t", t, "(rows, cols)");
  check_dtypes(op, {{"t", &t}});
  int32_t device = check_devices(op, {{"t", &t}});
  int64_t m = t.size(0), k = t.size(1), groups = ceil_div(k, kGroup);
  Tensor q = new_output(t, m, k, code_e4m3());
  Tensor padded = column_major_scales ? m_major_buffer(t, m, groups, /*zeroed=*/false)
                                      : new_output(t, m, groups, code_fp32());
  if (m > 0 && k > 0) quantize_groups(op, device, t, q, padded, padded.size(0));
  return {q, column_major_scales ? torch::stable::narrow(padded, 0, 0, m) : padded};
}

}  // namespace fused_swiglu::torch_ops
