// Internal: the rule for a (rows, groups) fp32 scale tensor given by two element strides, shared by the
// e4m3-output kernels' y_scale and fsw_quantize_e4m3_groups' scale.
#pragma once

#include <cstdint>

namespace fused_swiglu::capi {

// Whether every (row, group) scale has its own address: row-major (stride_m >= groups * stride_g,
// stride_g >= 1) or column-major (stride_g >= rows * stride_m, stride_m >= 1); a dimension of size 1
// may have any stride.
inline bool distinct_scale_strides(int64_t rows, int64_t groups, int64_t stride_m, int64_t stride_g) {
  if (rows <= 1) return groups <= 1 || stride_g >= 1;
  if (groups <= 1) return stride_m >= 1;
  return (stride_g >= 1 && stride_m >= groups * stride_g) || (stride_m >= 1 && stride_g >= rows * stride_m);
}

}  // namespace fused_swiglu::capi
