// The CUDA executor's instruction dispatch (runtime/cuda/CudaDispatch.cpp): one plan instruction
// to its opcode's handler (a cuda:: kernel, or a device collective over the NCCL communicator),
// and the scratch memory the kernels draw from. Internal to runtime/cuda.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/plan/plan_generated.h"

#include <optional>
#include <vector>

namespace megac::runtime::cuda::exec {

/// Whether `inst` needs the NCCL communicator: the collectives, Send/Recv, and the
/// vocab-parallel Embedding, EmbeddingGrad, CrossEntropy and CrossEntropyGrad.
bool needsNccl(const megac::plan::Instruction &inst);
/// The mesh axes of the group `inst` communicates over (none for Send/Recv: the world).
std::optional<std::vector<uint32_t>> groupAxesOf(const megac::plan::Instruction &inst);

/// Whether the CUDA backend has a handler for `op` (OpcodeTableTest asks it without a device).
bool hasHandler(megac::plan::Opcode op);

/// Enqueues `inst` on ctx.stream (collectives on nccl's stream, ordered with it): `in` and
/// `outs` are its buffers' device refs, outputs never overlapping inputs except in place.
/// `mesh` and `rank` place a sharded Dropout; `nccl` may be null when needsNccl is false.
Status dispatch(const megac::plan::Instruction &inst, const std::vector<TensorRef> &in,
                const std::vector<TensorRef> &outs, const Context &ctx, NcclCommunicator *nccl,
                const comm::Mesh &mesh, int rank);

/// Temporary device memory for one instruction at a time: a bump pointer over chunks, reset
/// before each instruction. Memory handed out stays valid for the whole instruction (a request
/// that does not fit opens a new chunk instead of moving the old one); at the next reset,
/// several chunks are merged into one (wait for `stream`, free, allocate the sum), so it settles
/// on one buffer as large as the largest instruction needs.
class ScratchArena {
public:
  ScratchArena(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~ScratchArena();
  ScratchArena(const ScratchArena &) = delete;
  ScratchArena &operator=(const ScratchArena &) = delete;
  /// `bytes` (rounded up to 256) of device memory, until the next reset.
  StatusOr<void *> get(size_t bytes);
  Status reset();
  /// Whether the next reset() synchronizes the stream (it merges several chunks).
  bool willSynchronize() const { return chunks_.size() > 1; }

private:
  struct Chunk {
    void *data;
    size_t size, used;
  };
  std::vector<Chunk> chunks_;
  int device_;
  cudaStream_t stream_;
};

} // namespace megac::runtime::cuda::exec
