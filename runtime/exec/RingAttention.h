// Ring attention (context parallelism's p2p variant, plan opcodes RingAttention and
// RingAttentionGrad; docs/context-parallel.md "The ring"): the key/value blocks of the cp ranks
// passed around the ring with point-to-point transfers, each rank computing its queries against
// the block it holds (runtime/cpu/RingAttention.h) while the next block is in flight.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"

#include <span>

namespace megac::runtime::commops {

using cpu::TensorRef;

/// out [b, s, h, dv] = causal attention by global position of this rank's q [b, s, h, d]
/// (positions qpos i64 [s]) over the keys and values of every member of the group over `axes`
/// (k [b, t, hk, d], v [b, t, hk, dv], kpos i64 [t] on each). g - 1 transfers of one block;
/// each is posted before the block already here is computed, and received while it is. The
/// blocks in flight and the row statistics live in `scratch`, the plan's buffer for them
/// (runtime/plan/RingScratch.h: at least ringScratchLayout(dims, false).bytes). `keyMask`
/// ([b or 1, 1, 1, t], q's dtype): this rank's block's additive key padding mask, which travels
/// with k and v (RingDims::mask).
Status ringAttention(comm::Communicator &comm, std::span<const uint32_t> axes, const TensorRef &q,
                     const TensorRef &k, const TensorRef &v, const TensorRef *keyMask,
                     const TensorRef &queryPositions, const TensorRef &keyPositions, double scale,
                     const TensorRef &out, const TensorRef &scratch);
/// The gradients of ringAttention: dq of this rank's queries, dk and dv of this rank's block
/// (summed over every member's queries). The row statistics are recomputed by one forward ring;
/// then a second ring carries each block with its dk and dv accumulators, which come home after
/// g transfers. The blocks, the dk/dv accumulators, the recomputed output and the row statistics
/// live in `scratch` (ringScratchLayout(dims, true)). With a key mask, its gradient `dKeyMask`
/// travels home with dk and dv.
Status ringAttentionGrad(comm::Communicator &comm, std::span<const uint32_t> axes,
                         const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, const TensorRef *keyMask,
                         const TensorRef &queryPositions, const TensorRef &keyPositions,
                         double scale, const TensorRef &dq, const TensorRef &dk,
                         const TensorRef &dv, const TensorRef *dKeyMask, const TensorRef &scratch);

} // namespace megac::runtime::commops
