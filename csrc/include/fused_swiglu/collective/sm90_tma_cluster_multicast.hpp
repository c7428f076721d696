// Where a CTA sits in its cluster and which CTAs its TMA loads multicast to, by the rule of CUTLASS's
// sm90 TMA GMMA mainloop: A goes to the CTAs of this cluster row, B to those of this cluster column.
// Used by the dual mainloop (both forms), whose producer issues its own loads.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace fused_swiglu::collective {

struct ClusterMulticast {
  uint2 block_id;   // (x, y) = (position along M, position along N) in the cluster
  uint16_t mask_a;  // multicast mask of A's loads (0 when A is not multicast)
  uint16_t mask_b;  // multicast mask of B's loads (0 when B is not multicast)
};

template <class ClusterShape, class GmemTiledCopyA, class GmemTiledCopyB>
CUTLASS_DEVICE ClusterMulticast cluster_multicast(uint32_t block_rank_in_cluster) {
  using namespace cute;
  constexpr uint32_t cluster_shape_x = get<0>(ClusterShape{});
  ClusterMulticast mc{{block_rank_in_cluster % cluster_shape_x, block_rank_in_cluster / cluster_shape_x}, 0, 0};
  auto block_layout = Layout<ClusterShape>{};  // (m,n) -> block_id
  if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
    for (int n = 0; n < size<1>(block_layout); ++n) {
      mc.mask_a |= (uint16_t(1) << block_layout(mc.block_id.x, n, Int<0>{}));
    }
  }
  if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
    for (int m = 0; m < size<0>(block_layout); ++m) {
      mc.mask_b |= (uint16_t(1) << block_layout(m, mc.block_id.y, Int<0>{}));
    }
  }
  return mc;
}

}  // namespace fused_swiglu::collective
