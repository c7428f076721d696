// The SwiGLU node's per-element arithmetic (Sm90SwiGLUStore): silu(g) * u in fp32, and fp32 pairs
// rounded to e4m3.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"

namespace fused_swiglu::epilogue::fusion::detail {

// silu(g) * u in fp32 from two MUFU operations: g * u * rcp(1 + 2^(-g log2 e)), no division and no
// branch. ex2.approx.ftz is within 2 ulp of fp32 (its argument rounded once), rcp.approx.ftz within
// 1 ulp, so the result is a few fp32 ulp from the exact value, far below half an ulp of the 16-bit
// output it is rounded to: the kernels' exact-match rates against float64 match those of an IEEE
// division (docs/performance.md).
// Edge cases: g -> -inf makes 2^(-g log2 e) = +inf and rcp(inf) = 0, so the result is -0 * u as with
// g / inf; g = 0 gives 0; large positive g gives g * u; a NaN propagates. A denormal exponential is
// flushed to 0, which changes 1 + e by less than an fp32 ulp. Against the IEEE division this form
// issues a few instructions per element instead of a check and a slow-path branch, and at long K
// the lighter epilogue lets the SMs keep a higher clock.
CUTLASS_DEVICE float swiglu(float g, float u) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return g * r * u;
}

constexpr float kE4M3Max = 448.0f;  // largest finite e4m3 value

// Two fp32 values rounded to nearest e4m3 and saturated to +-448 (NaN stays NaN), lo in the low byte.
CUTLASS_DEVICE uint16_t to_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace fused_swiglu::epilogue::fusion::detail
