// The executor's opcodes that talk to other ranks: collectives along a tensor dim, pipeline
// sends and receives, and the vocab-parallel embedding and cross-entropy (Megatron's
// VocabParallelEmbedding and vocab_parallel_cross_entropy) on a vocab shard of the table or
// logits. Each takes TensorRefs like the CPU kernels, plus the communicator and the group's
// mesh axes; every member of the group must run the same op.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"

#include <memory>
#include <optional>
#include <span>

namespace megac::runtime::commops {

using cpu::TensorRef;

/// out = the group's sum or max of x (same shape); out may be x's memory.
Status allReduce(comm::Communicator &comm, std::span<const uint32_t> axes, comm::ReduceKind kind,
                 const TensorRef &x, const TensorRef &out);
/// out's `dim` = group size * x's; member g's x fills block g along dim.
Status allGather(comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                 const TensorRef &x, const TensorRef &out);
/// The group's reduction of x, of which this rank keeps block (group index) along `dim`.
Status reduceScatter(comm::Communicator &comm, std::span<const uint32_t> axes,
                     comm::ReduceKind kind, int64_t dim, const TensorRef &x, const TensorRef &out);
/// The asynchronous forms (plan opcodes AllReduceStart, AllGatherStart, ReduceScatterStart):
/// the same checks and, once the handle's wait() returns, the same `out`, bit for bit; x may be
/// reused at once, out is written only by wait().
StatusOr<std::unique_ptr<comm::CommHandle>>
startAllReduce(comm::Communicator &comm, std::span<const uint32_t> axes, comm::ReduceKind kind,
               const TensorRef &x, const TensorRef &out);
StatusOr<std::unique_ptr<comm::CommHandle>> startAllGather(comm::Communicator &comm,
                                                           std::span<const uint32_t> axes,
                                                           int64_t dim, const TensorRef &x,
                                                           const TensorRef &out);
StatusOr<std::unique_ptr<comm::CommHandle>>
startReduceScatter(comm::Communicator &comm, std::span<const uint32_t> axes, comm::ReduceKind kind,
                   int64_t dim, const TensorRef &x, const TensorRef &out);
/// x split along `dim` into group-size pieces, piece i to member i; the pieces received are
/// concatenated along `concatDim` in group order.
Status allToAll(comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                int64_t concatDim, const TensorRef &x, const TensorRef &out);
/// Expert parallelism's token exchange (mega.moe_exchange, docs/moe.md): AllToAll's shapes with
/// only the routed rows sent. dim 0 (to the experts): x [E, T_loc.., h] -> out [E / g, g·T_loc..,
/// h]; dim 1 (back): x [E / g, T_group.., h] -> out [E, T_group / g.., h]. tokenMask [T_loc.., E]
/// is this rank's tokens' routing, expertMask [T_group.., E / g] the group's routing to this
/// rank's experts (two views of one routing); a row is sent when its entry is non-zero, every
/// other output row is 0. One variable-split all-to-all; exact (rows are copied).
Status moeAllToAll(comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                   const TensorRef &x, const TensorRef &tokenMask, const TensorRef &expertMask,
                   const TensorRef &out);
/// This rank's block (its group index) of x along `dim`; no communication.
Status shardSlice(const comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                  const TensorRef &x, const TensorRef &out);
/// The peer of this rank: its coordinates with coordinate `axis` moved by `shift`.
StatusOr<int> peerOf(const comm::Communicator &comm, uint32_t axis, int64_t shift);
Status send(comm::Communicator &comm, uint32_t axis, int64_t shift, int64_t tag,
            const TensorRef &x);
Status recv(comm::Communicator &comm, uint32_t axis, int64_t shift, int64_t tag,
            const TensorRef &out);

/// Embedding on the vocab shard [V/G, h] (block = group index): ids outside it give zero rows
/// (out is a partial sum over the group). Any dtype (bytes are copied).
Status vocabEmbedding(const comm::Communicator &comm, std::span<const uint32_t> axes,
                      const TensorRef &table, const TensorRef &ids, const TensorRef &out);
/// dtable [V/G, h] of the shard: rows of ids outside it are skipped; f32/f64.
Status vocabEmbeddingGrad(const comm::Communicator &comm, std::span<const uint32_t> axes,
                          const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable);
/// The full-vocab per-token loss from logits [..., V/G]: max, sum of exp and the target's
/// logit are reduced over the group (in double); every member gets the same loss.
Status vocabCrossEntropy(comm::Communicator &comm, std::span<const uint32_t> axes,
                         const TensorRef &logits, const TensorRef &labels,
                         std::optional<int64_t> ignoreIndex, const TensorRef &out);
/// dlogits of the shard = dloss * (softmax - onehot) restricted to it; ignored rows are 0.
Status vocabCrossEntropyGrad(comm::Communicator &comm, std::span<const uint32_t> axes,
                             const TensorRef &dloss, const TensorRef &logits,
                             const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                             const TensorRef &dlogits);

} // namespace megac::runtime::commops
