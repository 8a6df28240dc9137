// Which rows expert parallelism's token exchange (plan opcode MoeAllToAll) sends to and receives
// from each member of its group, read from the routing masks on the host, and the checks on its
// shapes: written once for both backends. The CPU backend (CommOps.cpp, moeAllToAll) copies the
// rows on the host and the CUDA backend (runtime/cuda/DeviceCommOps.cu) on the device, in this
// order, so the same bytes travel in the same order on both. No CUDA:
// tests/unit/runtime/MoeRoutesTest.cpp checks them against the exchange's definition.
#pragma once

#include "runtime/cpu/Kernels.h"
#include "support/Status.h"

#include <cstdint>
#include <vector>

namespace megac::runtime::collective {

/// The shapes of one MoeAllToAll (both backends' checks and messages).
/// Routed tensors are [E, tokens.., h] on the sending side of dim 0 ("to the experts": x has
/// every expert, out this rank's E/G) and the reverse for dim 1 ("back").
struct MoeShape {
  bool toExperts = true;
  int64_t members = 1;     // G, the group's size
  int64_t experts = 0;     // E
  int64_t localTokens = 0; // tokens per rank (the product of the token dims)
  int64_t localExperts = 0;
  size_t rowBytes = 0; // h elements of x's dtype
};

/// Checks x, out and the masks' shapes and dtypes (the masks' data is not read). Masks are
/// floating point: token_mask [T_loc.., E], expert_mask [G*T_loc.., E/G].
StatusOr<MoeShape> moeShape(int64_t dim, int64_t members, const cpu::TensorRef &x,
                            const cpu::TensorRef &tokenMask, const cpu::TensorRef &expertMask,
                            const cpu::TensorRef &out);

/// Per member j of the group: the rows of x (in units of rowBytes) sent to j, in the order they
/// travel, and the rows of out that the rows received from j fill, in the order they arrive.
struct MoeRoutes {
  std::vector<std::vector<int64_t>> sendRows, recvRows;
  /// The row counts per member (what the count exchange sends and checks).
  std::vector<size_t> sendCounts() const;
  std::vector<size_t> recvCounts() const;
};

/// The routes of `shape` from the masks' values (host memory, as tokenMask and expertMask).
/// A mask entry routes when it is non-zero (for bf16 and f16: any bit but the sign's).
MoeRoutes moeRoutes(const MoeShape &shape, const cpu::TensorRef &tokenMask,
                    const cpu::TensorRef &expertMask);

} // namespace megac::runtime::collective
