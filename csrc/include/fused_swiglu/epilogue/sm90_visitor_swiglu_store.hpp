// Sm90SwiGLUStore: an sm90 Epilogue Visitor Tree (EVT) store node that applies SwiGLU to the fp32
// accumulator tile and writes a half-width output tile with TMA.
//
//   Y[m, j] = silu(G[m, j]) * U[m, j],   silu(v) = v / (1 + exp(-v))       (fp32, rounded once)
//   evaluated as G * U * rcp(1 + 2^(-G log2 e)) with the MUFU's ex2 and rcp (detail::swiglu)
//
// Its two policies (sm90_swiglu_policies.hpp) say which accumulators pair and what it writes:
//   Pairing = PairColumns<P>: gate and up columns P apart in an accumulator tile of CTA_N columns,
//     tile column c is a gate column  iff  (c / P) % 2 == 0;  its up partner is column c + P;
//     its output column is            j = (c / (2P)) * P + c % P,
//   so each (CTA_M, CTA_N) accumulator tile yields one (CTA_M, CTA_N / 2) output tile (packed weights:
//   P = 8; the dual GEMM: P = CTA_N / 2).
//   Pairing = PairRows<P>: the same along rows (the swap-AB GEMM): a (CTA_M / 2, CTA_N) output tile of Y^T.
//   Pairing = PairSubtiles<EPI_M>: a gate subtile, then its up subtile (the dual swap-AB GEMM).
//   Output = StoreY or StoreYAndPreactivations, either at the scheduler's tiles or in
//   ShiftedLastTokenTile<> (the last token tile where the mainloop placed it).
//
// Data path per epilogue subtile (EPI_M, EPI_N) of the collective epilogue:
//   visit()      registers: fp32 accumulators -> SwiGLU -> packed pairs of output elements
//   postreduce() registers -> shared memory (EPI_M, EPI_N/2) buffer of the current store stage
//   tma_store()  one thread issues the TMA store of that buffer to Y; the collective's store pipeline
//                commits it and guards the buffer's reuse (hence Stages >= the collective's StagesD).
// The collective's own D store is disabled (ElementD = void), so this node is the only writer of Y.
// TMA clips the M and N residues, so partial tiles need no predication here.
//
// With StoreYAndPreactivations (the training forward) the node also writes the pre-activations g and u,
// each rounded once to Element, as two more (M, N/2) outputs at Y's coordinates: G[m, j] and U[m, j]
// are the gate and up accumulators that Y[m, j] was computed from. They go through their own smem
// buffers and TMA stores beside Y's (row-major forms only).
//
// With an e4m3 Element the node quantizes Y (row-major forms only): each output is v * (1 / s) rounded to
// nearest e4m3 and saturated to +-448, v its fp32 SwiGLU value and s either one given scale (static) or
// the scale of its 1 x 128 group, s = amax / 448 over the group's 128 fp32 values of one row (dynamic),
// which the node also writes to an (M, ceil(N / 256)) fp32 tensor of the caller's strides. A group's 128 output
// columns are 256 accumulator columns: the CTA tile must span them (CTA_N = 256) and EPI_M = CTA_M, so
// the collective visits the group's subtiles one after another (its loop runs along M inside N). The node
// keeps the group's fp32 values in registers over its 256 / EPI_N subtiles, then reduces each row's
// amax over the four lanes that hold the row (GMMA's accumulator layout gives the row's columns to one
// quad of a warp), and writes the quantized (EPI_M, 128) output tile with one TMA store.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/float8.h"
#include "cutlass/epilogue/collective/builders/sm90_common.inl"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"

#include "fused_swiglu/collective/sm90_token_tile_shift.hpp"
#include "fused_swiglu/epilogue/sm90_swiglu_math.hpp"
#include "fused_swiglu/epilogue/sm90_swiglu_pair_table.hpp"
#include "fused_swiglu/epilogue/sm90_swiglu_policies.hpp"

namespace fused_swiglu::epilogue::fusion {

using namespace cute;
using cutlass::epilogue::fusion::ConsumerStoreArgs;
using cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks;
using cutlass::epilogue::fusion::EmptyProducerLoadCallbacks;
using cutlass::epilogue::fusion::ProducerLoadArgs;
using cutlass::Array;

template <
  int Stages,            // smem buffers; must be >= the collective epilogue's StagesD
  class EpilogueTile,    // (EPI_M, EPI_N) subtile of the accumulator tile, in accumulator columns
  class Element,         // output element (bfloat16_t, half_t or float_e4m3_t)
  class StrideMNL,       // stride of Y in the GEMM's frame: (M, N/2, L) as (ldy, _1, batch), or with
                         // pairs along M (M/2, N, L) as (_1, ldy, batch)
  class Pairing,         // PairColumns<P>, PairRows<P> or PairSubtiles<EPI_M> (sm90_swiglu_policies.hpp)
  class Output = StoreY  // StoreY or StoreYAndPreactivations, optionally in ShiftedLastTokenTile<>
>
struct Sm90SwiGLUStore {
  static constexpr int PairStride = Pairing::kStride;                  // P above
  static constexpr bool PairsAlongM = Pairing::kAlongM;
  static constexpr bool PairsAcrossSubtiles = Pairing::kAcrossSubtiles;
  static constexpr bool ShiftLastTokenTile = Output::kShiftLastTokenTile;
  static constexpr bool StorePreactivations = Output::kPreactivations;

  // With ElementD = void the collective epilogue stores no D, yet CUTLASS 4.2's collective still
  // reserves its smem_D buffer: EpilogueTile x StagesD elements of the type named here, taken from the
  // shared memory left to the mainloop's stages. This node writes Y through its own buffer
  // (SharedStorage below), so it names the narrowest element a TMA descriptor accepts: 8 bits halve
  // the unused buffer, which gives the dual 128x128 Pingpong tile a sixth stage.
  using ElementAux = uint8_t;

  static constexpr int EpiM = int(size<0>(EpilogueTile{}));
  static constexpr int EpiN = int(size<1>(EpilogueTile{}));
  static_assert(PairsAcrossSubtiles || (PairsAlongM ? EpiM : EpiN) % (2 * PairStride) == 0,
                "each epilogue subtile must hold whole gate/up pairs: EPI_N (PairsAlongM: EPI_M) % 2P == 0");
  static_assert(!PairsAcrossSubtiles || (PairsAlongM && PairStride == EpiM),
                "PairsAcrossSubtiles pairs rows of consecutive subtiles: PairsAlongM and PairStride == EPI_M");
  static_assert(PairStride % 2 == 0, "output elements are stored in pairs: PairStride must be even");
  static_assert(!(ShiftLastTokenTile && PairsAlongM), "the shifted token tile runs along M, the output's rows");
  static_assert(!(StorePreactivations && PairsAlongM), "pre-activations are written by the row-major forms only");
  static constexpr int kOutputs = StorePreactivations ? 3 : 1;   // Y, then G and U
  // e4m3 Y: quantized per 1 x kGroupCols group of output columns (or with one static scale)
  static constexpr bool kQuantized = cute::is_same_v<Element, cutlass::float_e4m3_t>;
  static constexpr int kGroupCols = 128;
  static constexpr int kSubtilesPerGroup = kQuantized ? 2 * kGroupCols / EpiN : 1;
  static_assert(!kQuantized || (!PairsAlongM && !PairsAcrossSubtiles && !StorePreactivations && !ShiftLastTokenTile),
                "e4m3 Y: row-major forms without pre-activations, tiles at the scheduler's coordinates");
  static_assert(!kQuantized || (2 * kGroupCols) % EpiN == 0, "e4m3 Y: EPI_N must divide a group's 256 columns");
  static_assert(cute::is_same_v<cute::remove_cvref_t<decltype(get<PairsAlongM ? 0 : 1>(StrideMNL{}))>, cute::_1>,
                "Y must have unit stride along the paired dimension (row-major Y; its transpose with PairsAlongM)");

  // (EPI_M, EPI_N/2), or (EPI_M/2, EPI_N) with PairsAlongM
  // (EPI_M, EPI_N) with PairsAcrossSubtiles: each up subtile writes one whole output subtile
  // (EPI_M, 128) for e4m3 Y: one store per group
  using OutTile = Shape<Int<PairsAlongM && !PairsAcrossSubtiles ? EpiM / 2 : EpiM>,
                        Int<PairsAlongM ? EpiN : kQuantized ? kGroupCols : EpiN / 2>>;
  using OutStep = cute::conditional_t<PairsAlongM, Step<_2, _1>, Step<_1, _2>>;  // contiguous mode first
  using SmemLayoutAtom = decltype(cutlass::epilogue::collective::detail::
      sm90_get_epilogue_smem_swizzle_layout_atom<StrideMNL, Element, OutTile>());
  using SmemLayoutTma = decltype(tile_to_shape(SmemLayoutAtom{}, OutTile{}, OutStep{}));
  using SmemLayout = decltype(tile_to_shape(                                         // (OUT_M,OUT_N,PIPE)
      SmemLayoutTma{}, make_shape(size<0>(OutTile{}), size<1>(OutTile{}), Int<Stages>{}),
      cute::conditional_t<PairsAlongM, Step<_2, _1, _3>, Step<_1, _2, _3>>{}));

  struct SharedStorage {
    alignas(cutlass::detail::alignment_for_swizzle(SmemLayout{}))
    array_aligned<Element, cosize_v<SmemLayout> * kOutputs> smem_out;   // Y's buffers, then G's and U's
  };

  struct Arguments {
    Element* ptr_out = nullptr;  // Y, (M, N/2, L)
    StrideMNL dOut = {};
    Element* ptr_gate = nullptr;  // StorePreactivations: G and U, (M, N/2, L) each, stride dPre
    Element* ptr_up = nullptr;
    StrideMNL dPre = {};
    // e4m3 Y: its scales (fsw_problem.y_scale*): mode 1 reads ptr_scale[0]; mode 2 writes one per group
    float* ptr_scale = nullptr;
    int64_t scale_stride_m = 0;
    int64_t scale_stride_g = 0;
    int32_t scale_mode = 0;
  };

  struct Params {
    using TMA_Out = decltype(make_tma_copy(
        SM90_TMA_STORE{},
        make_tensor(static_cast<Element*>(nullptr), repeat_like(StrideMNL{}, int32_t(0)), StrideMNL{}),
        SmemLayoutTma{}));
    TMA_Out tma_store_out;
    TMA_Out tma_store_gate;   // StorePreactivations only (default-constructed otherwise)
    TMA_Out tma_store_up;
    float* ptr_scale;         // e4m3 Y only (as Arguments)
    int64_t scale_stride_m;
    int64_t scale_stride_g;
    int32_t scale_mode;
  };

  // problem_shape is the GEMM's (M, N, K[, L]) with N = 2 * I accumulator columns.
  template <class ProblemShape>
  static constexpr Params
  to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    auto out_shape = PairsAlongM ? make_shape(M / 2, N, L) : make_shape(M, N / 2, L);
    auto tma = [&](Element* ptr, StrideMNL stride) {
      return make_tma_copy(SM90_TMA_STORE{}, make_tensor(ptr, make_layout(out_shape, stride)), SmemLayoutTma{});
    };
    auto scale = [&](auto... tmas) {
      return Params{tmas..., args.ptr_scale, args.scale_stride_m, args.scale_stride_g, args.scale_mode};
    };
    if constexpr (StorePreactivations) {
      return scale(tma(args.ptr_out, args.dOut), tma(args.ptr_gate, args.dPre), tma(args.ptr_up, args.dPre));
    } else {
      return scale(tma(args.ptr_out, args.dOut), typename Params::TMA_Out{}, typename Params::TMA_Out{});
    }
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    // N = 2I accumulator columns with I a multiple of 8. Packed weights (P = 8) then hold whole 16-row
    // pairs; for the dual GEMM (P = BLK_N/2) a partial last tile is fine: its gate and up halves are
    // loaded from separate tensors and TMA fills rows past I with zeros and clips the stores.
    // PairsAlongM: the same for M = 2I accumulator rows.
    auto tma_ready = [](Element const* ptr, StrideMNL stride) {
      return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 &&
             (get<PairsAlongM ? 1 : 0>(stride) * int64_t(sizeof(Element))) % 16 == 0;
    };
    bool pre_ok = !StorePreactivations || (args.ptr_gate != nullptr && args.ptr_up != nullptr &&
                                           tma_ready(args.ptr_gate, args.dPre) && tma_ready(args.ptr_up, args.dPre));
    bool scale_ok = !kQuantized || (args.ptr_scale != nullptr && (args.scale_mode == 1 || args.scale_mode == 2));
    return (PairsAlongM ? M : N) % 16 == 0 && tma_ready(args.ptr_out, args.dOut) && pre_ok && scale_ok;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90SwiGLUStore() {}

  CUTLASS_HOST_DEVICE Sm90SwiGLUStore(Params const& params, SharedStorage const& shared_storage)
      : params_ptr(&params), smem_out(const_cast<Element*>(shared_storage.smem_out.data())) {}

  Params const* params_ptr = nullptr;
  Element* smem_out = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(ProducerLoadArgs<Args...> const&) {
    return EmptyProducerLoadCallbacks{};
  }

  template <class CrdLayout, class STensor, class STensorS2G, class GTensorS2G>
  struct ConsumerStoreCallbacks : EmptyConsumerStoreCallbacks {
    // STensor / STensorS2G: Y's buffers; G's and U's (StorePreactivations) are the same views offset by
    // one and two buffer sizes.
    static constexpr int F = int(size(CrdLayout{}));   // accumulator elements per thread per subtile
    static constexpr auto pair_table() { return detail::make_pair_table<CrdLayout, Pairing>(); }
    static_assert(PairsAcrossSubtiles || pair_table().ok,
                  "the accumulator partition does not hold both elements of every gate/up pair");
    // PairsAcrossSubtiles: every element of the up subtile pairs with the same element of the gate subtile
    static constexpr int NumPairs = PairsAcrossSubtiles ? F : F / 2;
    static_assert(PairsAlongM || NumPairs % 2 == 0, "output elements are written two at a time");
    static constexpr int S = kSubtilesPerGroup;
    static constexpr int kRows = kQuantized ? pair_table().rows : 1;   // distinct output rows of a thread

    CUTLASS_DEVICE ConsumerStoreCallbacks(STensor&& sOut, STensorS2G&& bSG_sOut, STensor&& sGate,
                                          STensorS2G&& bSG_sGate, STensor&& sUp, STensorS2G&& bSG_sUp,
                                          GTensorS2G&& bSG_gOut, int thr_m_out, int thr_n_out,
                                          Params const* params_ptr, int row0, int M, int group0, int groups,
                                          float static_scale)
        : sOut(cute::forward<STensor>(sOut)),
          bSG_sOut(cute::forward<STensorS2G>(bSG_sOut)),
          sGate(cute::forward<STensor>(sGate)),
          bSG_sGate(cute::forward<STensorS2G>(bSG_sGate)),
          sUp(cute::forward<STensor>(sUp)),
          bSG_sUp(cute::forward<STensorS2G>(bSG_sUp)),
          bSG_gOut(cute::forward<GTensorS2G>(bSG_gOut)),
          thr_m_out(thr_m_out), thr_n_out(thr_n_out), params_ptr(params_ptr),
          row0(row0), M(M), group0(group0), groups(groups), static_scale(static_scale) {}

    STensor sOut;          // (OUT_M,OUT_N,PIPE)
    STensorS2G bSG_sOut;   // (TMA,TMA_M,TMA_N,PIPE)
    STensor sGate;         // StorePreactivations: G's and U's buffers (else aliases of Y's, unused)
    STensorS2G bSG_sGate;
    STensor sUp;
    STensorS2G bSG_sUp;
    GTensorS2G bSG_gOut;   // (TMA,TMA_M,TMA_N,EPI_M,EPI_N)
    int thr_m_out;         // output row of this thread's first element inside the subtile
    int thr_n_out;         // output column of this thread's first element inside the subtile
    Params const* params_ptr;
    int row0;              // e4m3 Y: output row (in Y) of this thread's first element
    int M;                 // rows of Y
    int group0;            // e4m3 Y: the tile's first 128-column group
    int groups;            // e4m3 Y: Y's 128-column groups (a swizzled grid's padding tiles lie beyond them)
    float static_scale;    // e4m3 Y, scale mode 1: the given scale
    Array<Element, NumPairs> out;   // this thread's SwiGLU results for the current subtile
    Array<Element, StorePreactivations ? NumPairs : 1> out_gate;   // and its g, u (StorePreactivations)
    Array<Element, StorePreactivations ? NumPairs : 1> out_up;
    Array<float, PairsAcrossSubtiles ? F : 1> gate;   // PairsAcrossSubtiles: the last gate subtile
    Array<float, F> acc;   // the subtile's accumulators, gathered when it arrives in several fragments
    // e4m3 Y: the group's fp32 values over its S subtiles, each row's running amax, then the group
    // quantized (pairs of neighbouring output columns, two e4m3 per element)
    Array<float, kQuantized ? S * NumPairs : 1> group_values;
    Array<float, kRows> row_amax = {};
    Array<uint16_t, kQuantized ? S * NumPairs / 2 : 1> group_out;

    // e4m3 Y: every row's group scale (the amax over the quad of lanes that holds the row), written
    // for scale mode 2, then the group's values quantized with it.
    CUTLASS_DEVICE void quantize_group(int group) {
      constexpr auto t = pair_table();
      int const lane = int(threadIdx.x % 32);
      Array<float, kRows> inv;
      cute::for_each(make_int_sequence<kRows>{}, [&](auto r) {
        float a = row_amax[r];
        a = fmaxf(a, __shfl_xor_sync(0xffffffff, a, 1));
        a = fmaxf(a, __shfl_xor_sync(0xffffffff, a, 2));
        bool const dynamic = params_ptr->scale_mode == 2;
        float const scale = dynamic ? __fdiv_rn(a, detail::kE4M3Max) : static_scale;
        inv[r] = fminf(__frcp_rn(scale), FLT_MAX);   // scale 0: all values are 0 and stay 0
        int const row = row0 + t.row_off[decltype(r)::value];
        if (dynamic && lane % 4 == 0 && row < M && group0 + group < groups) {
          params_ptr->ptr_scale[row * params_ptr->scale_stride_m + (group0 + group) * params_ptr->scale_stride_g] =
              scale;
        }
        row_amax[r] = 0.0f;
      });
      cute::for_each(make_int_sequence<S * NumPairs / 2>{}, [&](auto q) {
        constexpr int i = 2 * decltype(q)::value;
        constexpr int slot = t.row_slot[i % NumPairs];   // pairs 2q, 2q + 1 share a row
        group_out[q] = detail::to_e4m3x2(group_values[i] * inv[slot], group_values[i + 1] * inv[slot]);
      });
    }

    // The collective hands over each subtile in F / FragmentSize fragments of consecutive elements
    // (epi_v = 0, 1, ...; its loop is unrolled, so every register index below is a constant). Most
    // configurations visit the whole subtile at once (FragmentSize == F); tile widths whose per-thread
    // fragment does not vectorize as one array (SwiGLUGemmBase::kWholeSubtileFragment) visit it 8 elements at a
    // time, and the node gathers them before it pairs gate with up.
    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE auto visit(Array<ElementAccumulator, FragmentSize> const& frg_acc, int epi_v, int epi_m,
                              int epi_n, Array<ElementInput, FragmentSize> const& frg_input) {
      static_assert(F % FragmentSize == 0, "the collective must visit the subtile in whole fragments");
      constexpr bool kWhole = FragmentSize == F;
      if constexpr (!kWhole) {
        cute::for_each(make_int_sequence<FragmentSize>{}, [&](auto i) {
          acc[epi_v * FragmentSize + decltype(i)::value] = static_cast<float>(frg_input[i]);
        });
        if (epi_v != F / FragmentSize - 1) return frg_input;
      }
      auto value = [&](int i) {
        if constexpr (kWhole) return static_cast<float>(frg_input[i]);
        else return acc[i];
      };
      if constexpr (PairsAcrossSubtiles) {
        if (epi_m % 2 == 0) {  // a gate subtile: keep it for the up subtile that follows
          cute::for_each(make_int_sequence<F>{}, [&](auto i) { gate[i] = value(i); });
          return frg_input;
        }
      }
      // every output of this subtile, from its gate and up accumulators
      if constexpr (PairsAcrossSubtiles) {  // element i of the up subtile pairs with element i kept above
        cute::for_each(make_int_sequence<F>{}, [&](auto i) {
          out[i] = static_cast<Element>(detail::swiglu(gate[i], value(i)));
        });
      } else if constexpr (kQuantized) {
        int const s = epi_n % S;   // a constant once the collective's subtile loop is unrolled
        cute::for_each(make_int_sequence<NumPairs>{}, [&](auto p) {
          constexpr auto t = pair_table();
          float v = detail::swiglu(value(t.gate[decltype(p)::value]), value(t.up[decltype(p)::value]));
          group_values[s * NumPairs + decltype(p)::value] = v;
          float& a = row_amax[t.row_slot[decltype(p)::value]];
          a = fmaxf(a, fabsf(v));
        });
        if (s == S - 1) quantize_group(epi_n / S);
      } else {
        cute::for_each(make_int_sequence<NumPairs>{}, [&](auto p) {
          constexpr auto t = pair_table();
          float g = value(t.gate[decltype(p)::value]);
          float u = value(t.up[decltype(p)::value]);
          out[decltype(p)::value] = static_cast<Element>(detail::swiglu(g, u));
          if constexpr (StorePreactivations) {
            out_gate[decltype(p)::value] = static_cast<Element>(g);
            out_up[decltype(p)::value] = static_cast<Element>(u);
          }
        });
      }
      return frg_input;
    }

    CUTLASS_DEVICE void postreduce(int epi_m, int epi_n, int store_iteration, bool issue_smem_store) {
      if (!issue_smem_store) return;
      int pipe = store_iteration % Stages;
      if constexpr (PairsAcrossSubtiles) {
        if (epi_m % 2 == 0) return;  // gate subtile: nothing to write yet
        cute::for_each(make_int_sequence<F>{}, [&](auto i) {
          constexpr auto c = CrdLayout{}(decltype(i)::value);
          sOut(thr_m_out + int(get<0>(c)), thr_n_out + int(get<1>(c)), pipe) = out[i];
        });
      } else if constexpr (kQuantized) {
        if (epi_n % S != S - 1) return;   // the group's last subtile writes the whole group
        pipe = (store_iteration / S) % Stages;
        cute::for_each(make_int_sequence<S * NumPairs / 2>{}, [&](auto q) {
          constexpr int i = 2 * decltype(q)::value;
          constexpr int p = i % NumPairs;
          constexpr auto t = pair_table();
          Element* dst = &sOut(thr_m_out + t.out_m[p], (i / NumPairs) * (EpiN / 2) + thr_n_out + t.out_n[p], pipe);
          *reinterpret_cast<uint16_t*>(dst) = group_out[decltype(q)::value];
        });
      } else if constexpr (PairsAlongM) {
        cute::for_each(make_int_sequence<NumPairs>{}, [&](auto q) {
          constexpr int p = decltype(q)::value;
          constexpr auto t = pair_table();
          sOut(thr_m_out + t.out_m[p], thr_n_out + t.out_n[p], pipe) = out[p];
        });
      } else {
        // Pairs 2q and 2q+1 are adjacent output columns of one row (make_pair_table checks it).
        cute::for_each(make_int_sequence<NumPairs / 2>{}, [&](auto q) {
          constexpr int p = 2 * decltype(q)::value;
          constexpr auto t = pair_table();
          auto store_pair = [&](auto& smem, auto const& values) {
            Element* dst = &smem(thr_m_out + t.out_m[p], thr_n_out + t.out_n[p], pipe);
            Element lo = values[p];
            Element hi = values[p + 1];
            *reinterpret_cast<uint32_t*>(dst) = uint32_t(lo.raw()) | (uint32_t(hi.raw()) << 16);
          };
          store_pair(sOut, out);
          if constexpr (StorePreactivations) {
            store_pair(sGate, out_gate);
            store_pair(sUp, out_up);
          }
        });
      }
    }

    CUTLASS_DEVICE void tma_store(int epi_m, int epi_n, int store_iteration, bool issue_tma_store) {
      if constexpr (PairsAcrossSubtiles) {
        if (issue_tma_store && epi_m % 2 == 1) {  // the up subtile writes output subtile epi_m / 2
          int pipe = store_iteration % Stages;
          copy(params_ptr->tma_store_out, bSG_sOut(_, _, _, pipe), bSG_gOut(_, _, _, epi_m / 2, epi_n));
        }
      } else if constexpr (kQuantized) {
        if (issue_tma_store && epi_n % S == S - 1) {   // the group's output tile
          int pipe = (store_iteration / S) % Stages;
          copy(params_ptr->tma_store_out, bSG_sOut(_, _, _, pipe), bSG_gOut(_, _, _, epi_m, epi_n / S));
        }
      } else if (issue_tma_store) {
        int pipe = store_iteration % Stages;
        copy(params_ptr->tma_store_out, bSG_sOut(_, _, _, pipe), bSG_gOut(_, _, _, epi_m, epi_n));
        if constexpr (StorePreactivations) {  // G and U share Y's shape, so Y's coordinates address them
          copy(params_ptr->tma_store_gate, bSG_sGate(_, _, _, pipe), bSG_gOut(_, _, _, epi_m, epi_n));
          copy(params_ptr->tma_store_up, bSG_sUp(_, _, _, pipe), bSG_gOut(_, _, _, epi_m, epi_n));
        }
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    // Output tile of this CTA: (CTA_M, CTA_N/2), or (CTA_M/2, CTA_N) with PairsAlongM.
    auto out_cta_tile = [&] {
      if constexpr (PairsAlongM) return make_shape(size<0>(args.tile_shape_mnk) / _2{}, size<1>(args.tile_shape_mnk));
      else return make_shape(size<0>(args.tile_shape_mnk), size<1>(args.tile_shape_mnk) / _2{});
    }();
    auto out_shape = [](auto M_, auto N_, auto L_) {  // arguments: C++17 lambdas cannot capture structured bindings
      if constexpr (PairsAlongM) return make_shape(M_ / 2, N_, L_);
      else return make_shape(M_, N_ / 2, L_);
    }(M, N, L);
    Tensor mOut = params_ptr->tma_store_out.get_tma_tensor(out_shape);                      // (OUT_M,OUT_N,L)
    // First output row of the tile: m * CTA_M, or token_tile_start for a shifted last token tile.
    int const tile_m = int(size<0>(args.tile_shape_mnk));
    int const m_start = ShiftLastTokenTile ? fused_swiglu::collective::token_tile_start(int(m), tile_m, int(M)) : int(m) * tile_m;
    int const n_tile = int(n);
    int const l_tile = int(l);
    int const m_tile = int(m);
    Tensor gOut = [&] {                                                             // (CTA_OUT_M,CTA_OUT_N)
      if constexpr (ShiftLastTokenTile) {
        return local_tile(domain_offset(make_coord(m_start, 0, 0), mOut), out_cta_tile, make_coord(0, n_tile, l_tile));
      } else {
        return local_tile(mOut, out_cta_tile, make_coord(m_tile, n_tile, l_tile));
      }
    }();
    Tensor gOut_epi = flat_divide(gOut, OutTile{});                // (OUT_M,OUT_N,EPI_M_CNT,EPI_N_CNT)
    auto smem_buffer = [&](int b) {                                                   // (OUT_M,OUT_N,PIPE)
      return cute::as_position_independent_swizzle_tensor(
          make_tensor(make_smem_ptr(smem_out + b * int(cosize_v<SmemLayout>)), SmemLayout{}));
    };
    Tensor sOut_epi = smem_buffer(0);
    Tensor sGate_epi = smem_buffer(StorePreactivations ? 1 : 0);
    Tensor sUp_epi = smem_buffer(StorePreactivations ? 2 : 0);

    ThrCopy thrblk_s2g = params_ptr->tma_store_out.get_slice(_0{});
    Tensor bSG_sOut = thrblk_s2g.partition_S(sOut_epi);                              // (TMA,TMA_M,TMA_N,PIPE)
    Tensor bSG_sGate = thrblk_s2g.partition_S(sGate_epi);
    Tensor bSG_sUp = thrblk_s2g.partition_S(sUp_epi);
    Tensor bSG_gOut = thrblk_s2g.partition_D(gOut_epi);                  // (TMA,TMA_M,TMA_N,EPI_M,EPI_N)

    // args.tCcD: (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates relative to this thread's first element.
    using CrdLayout = decltype(coalesce(layout(args.tCcD(_, _, _, _0{}, _0{}))));
    // This thread's first element relative to the CTA tile: residue_cD - residue_tCcD.
    int thr_m_cta = int(get<0>(args.residue_cD)) - int(get<0>(args.residue_tCcD));
    int thr_n_cta = int(get<1>(args.residue_cD)) - int(get<1>(args.residue_tCcD));
    // Inside a subtile (the thread pattern repeats in every subtile).
    int thr_m = thr_m_cta % EpiM;
    int thr_n = thr_n_cta % EpiN;
    // The first element is always a gate element (thread offsets along the paired dimension stay
    // below PairStride).
    int thr_m_out = PairsAlongM && !PairsAcrossSubtiles ? detail::paired_out(thr_m, PairStride) : thr_m;
    int thr_n_out = PairsAlongM ? thr_n : detail::paired_out(thr_n, PairStride);

    // e4m3 Y: the subtile rows are the tile's (EPI_M = CTA_M), and the tile's N spans whole groups.
    using CtaTile = cute::remove_cvref_t<decltype(args.tile_shape_mnk)>;
    static_assert(!kQuantized || (int(size<0>(CtaTile{})) == EpiM && int(size<1>(CtaTile{})) % (2 * kGroupCols) == 0),
                  "e4m3 Y: EPI_M == CTA_M and CTA_N a multiple of 256 accumulator columns (whole groups)");
    int const group0 = n_tile * int(size<1>(args.tile_shape_mnk)) / (2 * kGroupCols);
    float const static_scale = kQuantized && params_ptr->scale_mode == 1 ? *params_ptr->ptr_scale : 0.0f;
    return ConsumerStoreCallbacks<CrdLayout, decltype(sOut_epi), decltype(bSG_sOut), decltype(bSG_gOut)>(
        cute::move(sOut_epi), cute::move(bSG_sOut), cute::move(sGate_epi), cute::move(bSG_sGate),
        cute::move(sUp_epi), cute::move(bSG_sUp), cute::move(bSG_gOut), thr_m_out, thr_n_out, params_ptr,
        m_start + thr_m_out, int(M), group0, (int(N) / 2 + kGroupCols - 1) / kGroupCols, static_scale);
  }
};

}  // namespace fused_swiglu::epilogue::fusion
