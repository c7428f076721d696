// Internal: the C-side checks of an fsw_problem against the config it is given to (the core library's
// entry points call them; csrc/capi/fused_swiglu.cpp).
#pragma once

#include <cstdint>

#include "fused_swiglu.h"
#include "scale_layout.hpp"
#include "status.hpp"

namespace fused_swiglu::capi {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Every rule a problem must meet for config `info`, checked once per entry point (fsw_can_implement,
// fsw_workspace_size, fsw_run) before the config library sees the problem; the Python layer checks the
// same rules first with friendlier names. CUTLASS's can_implement runs after these, in the config library.
inline fsw_status check_problem_rules(const fsw_problem& p, fsw_config_info const& info) {
  if (p.dtype != info.dtype) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "problem dtype %d does not match config %s", p.dtype, info.name);
  }
  if (p.m < 0) return fail(FSW_ERROR_INVALID_ARGUMENT, "M must be >= 0; got M=%lld", (long long)p.m);
  if (p.n <= 0 || p.n % 8 != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT,
                "N (intermediate size I) must be a positive multiple of 8 for 16-byte TMA rows; got N=%lld",
                (long long)p.n);
  }
  // Elements per 16 bytes of x and the weights: 8 (16-bit) or 16 (e4m3); the same for y (out_dtype).
  bool const fp8 = info.dtype == FSW_DTYPE_E4M3;
  int64_t const in_align = fp8 ? 16 : 8;
  if (p.k <= 0 || p.k % in_align != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT,
                "K (hidden size H) must be a positive multiple of %lld for 16-byte TMA rows; got K=%lld",
                (long long)in_align, (long long)p.k);
  }
  if (fp8) {
    struct Scale { const char* name; const float* ptr; int32_t stride; int64_t rows; int64_t align; };
    // block scaling: M-major (rows, ceil(K / 128)) scales, stride between K blocks (x_scale: 16-byte rows)
    Scale const scales[] = {Scale{"x_scale", p.x_scale, p.x_scale_stride, p.m, 4},
                            Scale{"w_scale", p.w_scale, p.w_scale_stride, 2 * p.n / 8, 1}};
    for (Scale const& s : scales) {
      if (s.ptr == nullptr) {
        return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s takes e4m3 inputs: %s must not be NULL", info.name, s.name);
      }
      if (!aligned16(s.ptr)) {
        return fail(FSW_ERROR_INVALID_ARGUMENT, "%s must be 16-byte aligned; got address %p", s.name,
                    (const void*)s.ptr);
      }
      if (info.block_scaled) {
        if (s.stride < s.rows || s.stride % s.align != 0) {
          return fail(FSW_ERROR_INVALID_ARGUMENT,
                      "config %s scales K blocks: %s_stride (between K blocks) must be >= %lld and a multiple of %lld;"
                      " got %d", info.name, s.name, (long long)s.rows, (long long)s.align, s.stride);
        }
      } else if (s.stride != 0 && s.stride != 1) {
        return fail(FSW_ERROR_INVALID_ARGUMENT, "%s_stride must be 0 (one scale) or 1 (one per row); got %d", s.name,
                    s.stride);
      }
    }
  } else if (p.x_scale != nullptr || p.w_scale != nullptr) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s takes 16-bit inputs: x_scale and w_scale must be NULL",
                info.name);
  }
  bool const fp8_out = info.out_dtype == FSW_DTYPE_E4M3;
  if (fp8_out) {
    if (p.y_scale_mode != FSW_Y_SCALE_STATIC && p.y_scale_mode != FSW_Y_SCALE_GROUP128) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "config %s writes e4m3 y: y_scale_mode must be %d (static) or %d (per 1x128 group); got %d",
                  info.name, FSW_Y_SCALE_STATIC, FSW_Y_SCALE_GROUP128, p.y_scale_mode);
    }
    if (p.y_scale == nullptr || reinterpret_cast<uintptr_t>(p.y_scale) % 4 != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s writes e4m3 y: y_scale must be a 4-byte aligned fp32 pointer",
                  info.name);
    }
    if (p.y_scale_mode == FSW_Y_SCALE_GROUP128) {
      int64_t const groups = (p.n + 127) / 128, sm = p.y_scale_stride_m, sg = p.y_scale_stride_g;
      if (!distinct_scale_strides(p.m, groups, sm, sg)) {
        return fail(FSW_ERROR_INVALID_ARGUMENT,
                    "y_scale_stride_m and y_scale_stride_g must give every (row, group) scale its own address:"
                    " y_scale_stride_m >= %lld * y_scale_stride_g >= %lld (row-major) or y_scale_stride_g >="
                    " %lld * y_scale_stride_m >= %lld (column-major); got %lld and %lld",
                    (long long)groups, (long long)(groups > 1 ? 1 : 0), (long long)p.m,
                    (long long)(p.m > 1 ? 1 : 0), (long long)sm, (long long)sg);
      }
    }
  } else if (p.y_scale != nullptr || p.y_scale_mode != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s writes 16-bit y: y_scale must be NULL and y_scale_mode 0",
                info.name);
  }
  int64_t const out_align = fp8_out ? 16 : 8;
  // CUTLASS's problem shape is int32; the packed GEMM has 2N columns.
  if (p.m > INT32_MAX || 2 * p.n > INT32_MAX || p.k > INT32_MAX) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "M, 2N and K must each be < 2^31; got M=%lld N=%lld K=%lld",
                (long long)p.m, (long long)p.n, (long long)p.k);
  }
  // Grouped: E experts ldw_expert elements apart, and the expert of each whole token tile of x.
  bool const grouped = info.kind == FSW_KERNEL_GROUPED_DUAL;
  if (grouped) {
    if (p.experts < 1 || p.experts > INT32_MAX) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is grouped: experts must be in [1, 2^31); got %lld",
                  info.name, (long long)p.experts);
    }
    if (p.ldw_expert <= 0 || p.ldw_expert % in_align != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "config %s is grouped: ldw_expert (elements between two experts' weights) must be a positive "
                  "multiple of %lld (16 bytes); got %lld", info.name, (long long)in_align, (long long)p.ldw_expert);
    }
    if (p.tile_expert == nullptr || reinterpret_cast<uintptr_t>(p.tile_expert) % 4 != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is grouped: tile_expert must be a 4-byte aligned int32 pointer",
                  info.name);
    }
    if (p.m % info.tile_n != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "config %s is grouped: M (the padded token rows) must be a multiple of its token tile, %d; got M=%lld",
                  info.name, info.tile_n, (long long)p.m);
    }
  } else if (p.tile_expert != nullptr || p.experts != 0 || p.ldw_expert != 0) {
    return fail(FSW_ERROR_INVALID_ARGUMENT, "config %s is not grouped: tile_expert must be NULL, experts and "
                "ldw_expert 0", info.name);
  }
  // Operands by kind: x (M, K); the weights (2N or N rows of K; the dSwiGLU GEMM's W_down: K rows of N);
  // y (M, N); the pre-activations g, u (M, N) where a config writes or reads them; dg, du (M, N).
  bool dual = info.kind == FSW_KERNEL_DUAL || grouped;
  bool dswiglu = info.kind == FSW_KERNEL_DSWIGLU;
  // align: elements per 16 bytes, which every row stride must be a multiple of
  struct Operand { const char* name; const void* ptr; int64_t ld; int64_t min_ld; int64_t align; };
  Operand ops[6];
  int count = 0;
  ops[count++] = {"x", p.x, p.ldx, p.k, in_align};
  if (dswiglu) {
    ops[count++] = {"w", p.w, p.ldw, p.n, 8};
    ops[count++] = {"dg", p.dg, p.lddgu, p.n, 8};
    ops[count++] = {"du", p.du, p.lddgu, p.n, 8};
  } else {
    ops[count++] = {"w", p.w, p.ldw, p.k, in_align};
    ops[count++] = {"y", p.y, p.ldy, p.n, out_align};
    // w_up is read by the dual kernels only (packed: unused, may be NULL)
    ops[count++] = {"w_up", dual ? p.w_up : p.w, dual ? p.ldw_up : p.ldw, p.k, in_align};
  }
  if (dswiglu || info.preactivations) {
    ops[count++] = {"g", p.g, p.ldgu, p.n, 8};
    ops[count++] = {"u", p.u, p.ldgu, p.n, 8};
  }
  for (int i = 0; i < count; ++i) {
    Operand const& op = ops[i];
    if (op.ptr == nullptr) return fail(FSW_ERROR_INVALID_ARGUMENT, "%s must not be NULL", op.name);
    if (!aligned16(op.ptr)) {
      return fail(FSW_ERROR_INVALID_ARGUMENT, "%s must be 16-byte aligned for TMA; got address %p", op.name, op.ptr);
    }
    if (op.ld < op.min_ld || op.ld % op.align != 0) {
      return fail(FSW_ERROR_INVALID_ARGUMENT,
                  "the row stride of %s must be >= %lld and a multiple of %lld elements (16 bytes); got %lld",
                  op.name, (long long)op.min_ld, (long long)op.align, (long long)op.ld);
    }
  }
  return FSW_SUCCESS;
}

}  // namespace fused_swiglu::capi
