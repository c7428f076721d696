// Sm90DSwiGLU: the sm90 Epilogue Visitor Tree of the SwiGLU backward, for the GEMM dY = dZ @ W_down.
//
// y = silu(g) * u with silu(g) = g * s, s = sigmoid(g), so from the fp32 accumulator dY:
//   dg = dY * u * s * (1 + g * (1 - s))        (d silu / dg = s + g * s * (1 - s))
//   du = dY * g * s
// each rounded once to Element. g and u (the forward's pre-activations, Element) are read with TMA
// at the accumulator's coordinates; dg leaves through an aux store and du as the collective's D.
//
// Built from CUTLASS's own nodes as one DAG (Sm90TopologicalVisitor) so that s is computed once per
// element and read by both gradients:
//   0 acc (dY)   1 g (AuxLoad)   2 u (AuxLoad)   3 s = sigmoid(1)
//   4 dg = f(0, 1, 2, 3)   5 AuxStore(4)   6 du = 0 * 1 * 3  (output: D)
// The loads and the store share the collective's stage counts (StagesC for the loads, StagesD for the
// aux store), as CUTLASS's builder does for its own aux nodes.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

namespace fused_swiglu::epilogue::fusion {

namespace detail {

// 1 / (1 + 2^(-g log2 e)) with the MUFU's ex2 and rcp (the forward's form, detail::swiglu).
CUTLASS_DEVICE float sigmoid(float g) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
}

}  // namespace detail

// Compute functors on fragments (Array<float, N>); CUTLASS also instantiates them with float to look
// for an Arguments member, which only needs the class to exist.
template <class T>
struct SwiGLUSigmoid {
  CUTLASS_DEVICE T operator()(T const& g) const {
    T s;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < int(T::kElements); ++i) s[i] = detail::sigmoid(g[i]);
    return s;
  }
};

template <class T>
struct SwiGLUGateGrad {
  CUTLASS_DEVICE T operator()(T const& dy, T const& g, T const& u, T const& s) const {
    T dg;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < int(T::kElements); ++i) dg[i] = dy[i] * u[i] * (s[i] * (1.0f + g[i] * (1.0f - s[i])));
    return dg;
  }
};

template <class T>
struct SwiGLUUpGrad {
  CUTLASS_DEVICE T operator()(T const& dy, T const& g, T const& s) const {
    T du;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < int(T::kElements); ++i) du[i] = dy[i] * (g[i] * s[i]);
    return du;
  }
};

// EpilogueDescriptor: cutlass::epilogue::collective::detail::EpilogueDescriptor of the GEMM's tile,
// epilogue subtile, void C, Element D and schedule. StrideAux: the row-major stride of g, u and dg.
template <class EpilogueDescriptor, class Element, class StrideAux>
struct DSwiGLUCallbacks {
  using Load = cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpilogueDescriptor, StrideAux, Element>;
  using Store = cutlass::epilogue::collective::detail::AuxStoreDescriptor<EpilogueDescriptor, StrideAux, Element>;
  using EpilogueTile = typename EpilogueDescriptor::EpilogueTile;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  using AuxLoad = cutlass::epilogue::fusion::Sm90AuxLoad<Load::Stages, EpilogueTile, Element, StrideAux,
                                                         typename Load::SmemLayoutAtom, typename Load::CopyOpS2R>;
  using AuxStore = cutlass::epilogue::fusion::Sm90AuxStore<Store::Stages, EpilogueTile, Element, kRound, StrideAux,
                                                           typename Store::SmemLayoutAtom, typename Store::CopyOpR2S>;
  template <template <class> class Fn, class Out>
  using Compute = cutlass::epilogue::fusion::Sm90Compute<Fn, Out, float, kRound>;

  using Edges = cute::tuple<cute::seq<>, cute::seq<>, cute::seq<>, cute::seq<1>, cute::seq<0, 1, 2, 3>, cute::seq<4>,
                            cute::seq<0, 1, 3>>;
  using type = cutlass::epilogue::fusion::Sm90TopologicalVisitor<
      float, Edges,
      cutlass::epilogue::fusion::Sm90AccFetch,   // 0
      AuxLoad,                                   // 1 g
      AuxLoad,                                   // 2 u
      Compute<SwiGLUSigmoid, float>,             // 3 s
      Compute<SwiGLUGateGrad, Element>,          // 4 dg, rounded once
      AuxStore,                                  // 5 dg -> memory
      Compute<SwiGLUUpGrad, Element>>;           // 6 du -> D

  // Arguments of the tree, in node order.
  static typename type::Arguments arguments(Element const* g, Element const* u, StrideAux d_gu, Element* dg,
                                            StrideAux d_dg) {
    return {{}, {g, Element(0), d_gu}, {u, Element(0), d_gu}, {}, {}, {dg, d_dg}, {}};
  }
};

}  // namespace fused_swiglu::epilogue::fusion
