// The CUDA executor's opcodes that talk to other ranks, on device memory: the device versions
// of runtime/exec/CommOps.h with the same contracts (shapes, dtypes, block layout, messages),
// over a NcclCommunicator. Re-laying blocks along a dim other than 0 and slicing a shard are
// kernels on ctx.stream; temporary copies come from ctx.scratch.
#pragma once

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/NcclCommunicator.h"

#include <optional>
#include <span>

namespace megac::runtime::cuda::devcomm {

/// out = the group's sum or max of x (same shape); out may be x's memory.
Status allReduce(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                 comm::ReduceKind kind, const TensorRef &x, const TensorRef &out);
/// out's `dim` = group size * x's; member g's x fills block g along dim.
Status allGather(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                 int64_t dim, const TensorRef &x, const TensorRef &out);
/// The group's reduction of x, of which this rank keeps block (group index) along `dim`.
Status reduceScatter(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                     comm::ReduceKind kind, int64_t dim, const TensorRef &x, const TensorRef &out);
/// x split along `dim` into group-size pieces, piece i to member i; the pieces received are
/// concatenated along `concatDim` in group order.
Status allToAll(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                int64_t dim, int64_t concatDim, const TensorRef &x, const TensorRef &out);
/// The asynchronous forms (plan opcodes AllReduceStart, AllGatherStart, ReduceScatterStart):
/// the same contracts, the collective posted on nccl's stream under `key` (the start's output
/// buffer) and left in flight; finishCollective(key) (CollectiveDone) makes ctx.stream wait for
/// it and then lays the gathered blocks out along `dim`. `x` may be overwritten as soon as the
/// start returns (as comm::Communicator's starts allow): it is copied on ctx.stream first, into
/// the output (all-reduce and all-gather then run in place) or, for a reduce-scatter, into
/// memory of its own. Packed or gathered pieces live in their own device memory
/// (cudaMallocAsync on ctx.stream, freed on it after the finish), not in ctx.scratch, which the
/// next instruction reuses while the collective runs.
Status startAllReduce(NcclCommunicator &nccl, const Context &ctx, uint64_t key,
                      std::span<const uint32_t> axes, comm::ReduceKind kind, const TensorRef &x,
                      const TensorRef &out);
Status startAllGather(NcclCommunicator &nccl, const Context &ctx, uint64_t key,
                      std::span<const uint32_t> axes, int64_t dim, const TensorRef &x,
                      const TensorRef &out);
Status startReduceScatter(NcclCommunicator &nccl, const Context &ctx, uint64_t key,
                          std::span<const uint32_t> axes, comm::ReduceKind kind, int64_t dim,
                          const TensorRef &x, const TensorRef &out);
Status finishCollective(NcclCommunicator &nccl, uint64_t key);
/// Expert parallelism's token exchange (plan opcode MoeAllToAll), runtime/exec/CommOps.h's
/// contract: the routing masks are read on the host (the compute stream is synchronized, after
/// nccl.drain()), the rows of each member are packed on the device in the CPU backend's order
/// (runtime/exec/MoeRoutes.h), their counts exchanged and the rows sent with grouped ncclSend/ncclRecv
/// (NcclCommunicator::allToAllV); rows no member fills are zero.
Status moeAllToAll(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                   int64_t dim, const TensorRef &x, const TensorRef &tokenMask,
                   const TensorRef &expertMask, const TensorRef &out);
/// This rank's block (its group index) of x along `dim`; no communication.
Status shardSlice(const NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                  int64_t dim, const TensorRef &x, const TensorRef &out);
/// Pipeline transfers to / from the rank whose coordinate `axis` is this one's plus `shift`.
Status send(NcclCommunicator &nccl, uint32_t axis, int64_t shift, int64_t tag, const TensorRef &x);
Status recv(NcclCommunicator &nccl, uint32_t axis, int64_t shift, int64_t tag,
            const TensorRef &out);

/// Embedding on the vocab shard [V/G, h] (block = group index): ids outside it give zero rows
/// (out is a partial sum over the group). An id outside [0, V) is a DeviceError
/// (idOutOfRange) in *ctx.errors.
Status vocabEmbedding(const NcclCommunicator &nccl, const Context &ctx,
                      std::span<const uint32_t> axes, const TensorRef &table, const TensorRef &ids,
                      const TensorRef &out);
/// dtable [V/G, h] of the shard: rows of ids outside it are skipped.
Status vocabEmbeddingGrad(const NcclCommunicator &nccl, const Context &ctx,
                          std::span<const uint32_t> axes, const TensorRef &dy, const TensorRef &ids,
                          const TensorRef &dtable);
/// The full-vocab per-token loss from logits [..., V/G]: the row max is all-reduced (max), then
/// the sums of exp and the target's logit (one all-reduce, sum); every member gets the same
/// loss. Statistics are f32 (f64 for f64 logits). A label outside [0, V) that is not ignored is
/// a DeviceError (labelOutOfRange).
Status vocabCrossEntropy(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                         const TensorRef &logits, const TensorRef &labels,
                         std::optional<int64_t> ignoreIndex, const TensorRef &out);
/// dlogits of the shard = dloss * (softmax - onehot) restricted to it; ignored rows are 0.
Status vocabCrossEntropyGrad(NcclCommunicator &nccl, const Context &ctx,
                             std::span<const uint32_t> axes, const TensorRef &dloss,
                             const TensorRef &logits, const TensorRef &labels,
                             std::optional<int64_t> ignoreIndex, const TensorRef &dlogits);

} // namespace megac::runtime::cuda::devcomm
