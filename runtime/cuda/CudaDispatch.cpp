// The CUDA executor's instruction dispatch (CudaDispatch.h): every opcode to its cuda:: kernel
// or device collective, and the per-instruction scratch memory.
#include "runtime/cuda/CudaDispatch.h"

#include "runtime/cuda/DeviceCommOps.h"
#include "runtime/exec/Parameters.h"

#include <algorithm>
#include <string>

namespace megac::runtime::cuda::exec {

namespace fb = megac::plan;

// The kernel enums list the ops in the opcode order, so the mapping is an offset.
static_assert(int(UnaryOp::Neg) == int(fb::Opcode::Neg) &&
              int(UnaryOp::Not) == int(fb::Opcode::Not));
static_assert(int(BinaryOp::Or) == int(fb::Opcode::Or) - int(fb::Opcode::Add));

namespace {

std::span<const int64_t> spanOf(const flatbuffers::Vector<int64_t> *v) {
  return v ? std::span<const int64_t>(v->data(), v->size()) : std::span<const int64_t>();
}
std::span<const uint32_t> spanOf(const flatbuffers::Vector<uint32_t> *v) {
  return v ? std::span<const uint32_t>(v->data(), v->size()) : std::span<const uint32_t>();
}
std::vector<uint32_t> vectorOf(const flatbuffers::Vector<uint32_t> *v) {
  std::span<const uint32_t> s = spanOf(v);
  return {s.begin(), s.end()};
}

comm::ReduceKind commKind(fb::ReduceKind kind) {
  return kind == fb::ReduceKind::max ? comm::ReduceKind::max : comm::ReduceKind::sum;
}

std::optional<int64_t> ignoreOf(const fb::CrossEntropyAttrs *a) {
  return a->has_ignore_index() ? std::optional<int64_t>(a->ignore_index()) : std::nullopt;
}

Status cudaFailure(const std::string &what, cudaError_t error, int device) {
  return Status::error(what + " on CUDA device " + std::to_string(device) + ": " +
                       cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

#define CUDA_TRY(call, what)                                                                       \
  do {                                                                                             \
    cudaError_t cuda_error_ = (call);                                                              \
    if (cuda_error_ != cudaSuccess)                                                                \
      return cudaFailure(what, cuda_error_, device_);                                              \
  } while (0)

} // namespace

/// Opcodes that need the NCCL communicator: collectives, transfers, vocab-parallel ops.
bool needsNccl(const fb::Instruction &inst) {
  using O = fb::Opcode;
  switch (inst.op()) {
  case O::AllReduce:
  case O::AllGather:
  case O::ReduceScatter:
  case O::AllToAll:
  case O::ShardSlice:
  case O::Send:
  case O::Recv:
    return true;
  case O::Embedding:
  case O::EmbeddingGrad: {
    const fb::EmbeddingAttrs *a = inst.attrs_as_EmbeddingAttrs();
    return a && a->vocab_axes() && a->vocab_axes()->size() > 0;
  }
  case O::CrossEntropy:
  case O::CrossEntropyGrad: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    return a && a->vocab_axes() && a->vocab_axes()->size() > 0;
  }
  default:
    return false;
  }
}

/// The group axes an instruction communicates over (none for Send/Recv, which use the world).
std::optional<std::vector<uint32_t>> groupAxesOf(const fb::Instruction &inst) {
  if (const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs())
    return vectorOf(a->axes());
  if (const fb::EmbeddingAttrs *a = inst.attrs_as_EmbeddingAttrs())
    return vectorOf(a->vocab_axes());
  if (const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs())
    return vectorOf(a->vocab_axes());
  return std::nullopt;
}

ScratchArena::~ScratchArena() {
  for (Chunk &c : chunks_)
    cudaFree(c.data);
}

StatusOr<void *> ScratchArena::get(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < bytes) {
    size_t size = std::max<size_t>(bytes, size_t(1) << 20);
    Chunk c{nullptr, size, 0};
    CUDA_TRY(cudaMalloc(&c.data, size),
             "cudaMalloc of " + std::to_string(size) + " bytes of scratch memory");
    chunks_.push_back(c);
  }
  Chunk &c = chunks_.back();
  void *p = static_cast<uint8_t *>(c.data) + c.used;
  c.used += bytes;
  return p;
}

Status ScratchArena::reset() {
  if (chunks_.size() > 1) {
    size_t total = 0;
    for (Chunk &c : chunks_)
      total += c.size;
    // Kernels of earlier instructions may still use the chunks. Waiting for the compute stream
    // covers the collectives too (it waits for each of them); staged sends have their own
    // buffers, and waiting for them could deadlock a pipeline.
    CUDA_TRY(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (growing scratch memory)");
    for (Chunk &c : chunks_)
      cudaFree(c.data);
    chunks_.clear();
    Chunk c{nullptr, total, 0};
    CUDA_TRY(cudaMalloc(&c.data, total),
             "cudaMalloc of " + std::to_string(total) + " bytes of scratch memory");
    chunks_.push_back(c);
  }
  if (!chunks_.empty())
    chunks_.back().used = 0;
  return Status::ok();
}

namespace {

std::optional<Status> dispatchComm(const fb::Instruction &inst, const std::vector<TensorRef> &in,
                                   const std::vector<TensorRef> &outs, const Context &ctx,
                                   NcclCommunicator *nccl) {
  using O = fb::Opcode;
  if (!needsNccl(inst))
    return std::nullopt;
  if (!nccl)
    return Status::error("no NCCL communicator (internal: the plan scan missed this opcode)");
  NcclCommunicator &c = *nccl;
  switch (inst.op()) {
  case O::AllReduce: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return devcomm::allReduce(c, ctx, spanOf(a->axes()), commKind(a->kind()), in[0], outs[0]);
  }
  case O::AllGather: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return devcomm::allGather(c, ctx, spanOf(a->axes()), a->dim(), in[0], outs[0]);
  }
  case O::ReduceScatter: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return devcomm::reduceScatter(c, ctx, spanOf(a->axes()), commKind(a->kind()), a->dim(), in[0],
                                  outs[0]);
  }
  case O::AllToAll: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return devcomm::allToAll(c, ctx, spanOf(a->axes()), a->dim(), a->concat_dim(), in[0], outs[0]);
  }
  case O::ShardSlice: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return devcomm::shardSlice(c, ctx, spanOf(a->axes()), a->dim(), in[0], outs[0]);
  }
  case O::Send: {
    const fb::P2PAttrs *a = inst.attrs_as_P2PAttrs();
    return devcomm::send(c, a->axis(), a->shift(), a->tag(), in[0]);
  }
  case O::Recv: {
    const fb::P2PAttrs *a = inst.attrs_as_P2PAttrs();
    return devcomm::recv(c, a->axis(), a->shift(), a->tag(), outs[0]);
  }
  case O::Embedding:
    return devcomm::vocabEmbedding(c, ctx, spanOf(inst.attrs_as_EmbeddingAttrs()->vocab_axes()),
                                   in[0], in[1], outs[0]);
  case O::EmbeddingGrad:
    return devcomm::vocabEmbeddingGrad(c, ctx, spanOf(inst.attrs_as_EmbeddingAttrs()->vocab_axes()),
                                       in[0], in[1], outs[0]);
  case O::CrossEntropy: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    return devcomm::vocabCrossEntropy(c, ctx, spanOf(a->vocab_axes()), in[0], in[1], ignoreOf(a),
                                      outs[0]);
  }
  case O::CrossEntropyGrad: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    return devcomm::vocabCrossEntropyGrad(c, ctx, spanOf(a->vocab_axes()), in[0], in[1], in[2],
                                          ignoreOf(a), outs[0]);
  }
  default:
    return std::nullopt;
  }
}

} // namespace

Status dispatch(const fb::Instruction &inst, const std::vector<TensorRef> &in,
                const std::vector<TensorRef> &outs, const Context &ctx, NcclCommunicator *nccl,
                const comm::Mesh &mesh, int rank) {
  using O = fb::Opcode;
  O op = inst.op();
  if (std::optional<Status> done = dispatchComm(inst, in, outs, ctx, nccl))
    return std::move(*done);
  const TensorRef &out = outs[0];
  switch (op) {
  case O::Neg:
  case O::Abs:
  case O::Exp:
  case O::Log:
  case O::Tanh:
  case O::Erf:
  case O::Sigmoid:
  case O::Relu:
  case O::Sqrt:
  case O::Rsqrt:
  case O::Not:
    return unary(ctx, static_cast<UnaryOp>(op), in[0], out);
  case O::Add:
  case O::Sub:
  case O::Mul:
  case O::Div:
  case O::Pow:
  case O::Min:
  case O::Max:
  case O::And:
  case O::Or:
    return binary(ctx, static_cast<BinaryOp>(int(op) - int(O::Add)), in[0], in[1], out);
  case O::Compare:
    return compare(ctx, static_cast<ComparePredicate>(inst.attrs_as_CompareAttrs()->predicate()),
                   in[0], in[1], out);
  case O::Where:
    return where(ctx, in[0], in[1], in[2], out);
  case O::Copy:
    return copy(ctx, in[0], out);
  case O::Transpose:
    return transpose(ctx, in[0], spanOf(inst.attrs_as_TransposeAttrs()->perm()), out);
  case O::Slice:
    return slice(ctx, in[0], spanOf(inst.attrs_as_SliceAttrs()->starts()),
                 spanOf(inst.attrs_as_SliceAttrs()->strides()), out);
  case O::Concat:
    return concat(ctx, in, inst.attrs_as_AxisAttrs()->axis(), out);
  case O::Broadcast:
    return broadcast(ctx, in[0], out);
  case O::Cast:
    return cast(ctx, in[0], out);
  case O::Gather:
    return gather(ctx, in[0], in[1], inst.attrs_as_AxisAttrs()->axis(), out);
  case O::Reduce:
    return reduce(ctx, static_cast<ReduceKind>(inst.attrs_as_ReduceAttrs()->kind()), in[0],
                  spanOf(inst.attrs_as_ReduceAttrs()->axes()), out);
  case O::Softmax:
    return softmax(ctx, in[0], inst.attrs_as_AxisAttrs()->axis(), out);
  case O::MatMul:
    return matmul(ctx, in[0], in[1], out);
  case O::Linear:
    return linear(ctx, in[0], in[1], in.size() > 2 ? &in[2] : nullptr, out);
  case O::Embedding:
    return embedding(ctx, in[0], in[1], out);
  case O::LayerNorm:
    return layerNorm(ctx, in[0], in[1], in.size() > 2 ? &in[2] : nullptr,
                     inst.attrs_as_NormAttrs()->epsilon(), out);
  case O::RmsNorm:
    return rmsNorm(ctx, in[0], in[1], inst.attrs_as_NormAttrs()->epsilon(), out);
  case O::Attention: {
    const fb::AttentionAttrs *a = inst.attrs_as_AttentionAttrs();
    return attention(ctx, in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr, a->causal(),
                     a->scale(), out);
  }
  case O::Gelu:
    return gelu(ctx, in[0], inst.attrs_as_GeluAttrs()->tanh(), out);
  case O::Silu:
    return silu(ctx, in[0], out);
  case O::Rope:
    return rope(ctx, in[0], in[1], in[2], out);
  case O::CrossEntropy:
    return crossEntropy(ctx, in[0], in[1], ignoreOf(inst.attrs_as_CrossEntropyAttrs()), out);
  case O::Dropout: {
    const fb::DropoutAttrs *a = inst.attrs_as_DropoutAttrs();
    if (a->global_shape() && a->shard_dims()) {
      // Version 3: the shard's offset also depends on this rank's group index per dim.
      std::vector<int64_t> offset = shardOffset(mesh, rank, in[0].shape, spanOf(a->shard_offset()),
                                                shardingOf(a->shard_dims()));
      return dropoutShard(ctx, in[0], in[1], a->ratio(), a->stream(), spanOf(a->global_shape()),
                          offset, out);
    }
    if (a->global_shape())
      return dropoutShard(ctx, in[0], in[1], a->ratio(), a->stream(), spanOf(a->global_shape()),
                          spanOf(a->shard_offset()), out);
    return dropout(ctx, in[0], in[1], a->ratio(), a->stream(), out);
  }
  case O::Pad: {
    const fb::PadAttrs *a = inst.attrs_as_PadAttrs();
    return pad(ctx, in[0], spanOf(a->low()), spanOf(a->high()), spanOf(a->interior()), out);
  }
  case O::LayerNormGrad:
    return layerNormGrad(ctx, in[0], in[1], in[2], inst.attrs_as_NormAttrs()->epsilon(), outs[0],
                         outs[1], outs[2]);
  case O::RmsNormGrad:
    return rmsNormGrad(ctx, in[0], in[1], in[2], inst.attrs_as_NormAttrs()->epsilon(), outs[0],
                       outs[1]);
  case O::AttentionGrad: {
    const fb::AttentionAttrs *a = inst.attrs_as_AttentionAttrs();
    bool masked = in.size() > 4;
    return attentionGrad(ctx, in[0], in[1], in[2], in[3], masked ? &in[4] : nullptr, a->causal(),
                         a->scale(), outs[0], outs[1], outs[2], masked ? &outs[3] : nullptr);
  }
  case O::GeluGrad:
    return geluGrad(ctx, in[0], in[1], inst.attrs_as_GeluAttrs()->tanh(), out);
  case O::SoftmaxGrad:
    return softmaxGrad(ctx, in[0], in[1], inst.attrs_as_AxisAttrs()->axis(), out);
  case O::CrossEntropyGrad:
    return crossEntropyGrad(ctx, in[0], in[1], in[2], ignoreOf(inst.attrs_as_CrossEntropyAttrs()),
                            out);
  case O::EmbeddingGrad:
    return embeddingGrad(ctx, in[0], in[1], out);
  case O::AdamW: {
    const fb::AdamWAttrs *a = inst.attrs_as_AdamWAttrs();
    AdamWConfig config{a->beta1(), a->beta2(), a->eps(), a->weight_decay()};
    return adamw(ctx, in[0], in[1], in[2], in[3], in[4], in[5], config, outs[0], outs[1], outs[2]);
  }
  case O::GlobalNorm:
    return globalNorm(ctx, in, out);
  case O::ClipByNorm:
    return clipByNorm(ctx, in[0], in[1], inst.attrs_as_ClipAttrs()->max_norm(), out);
  case O::AllReduce:
  case O::AllGather:
  case O::ReduceScatter:
  case O::AllToAll:
  case O::ShardSlice:
  case O::Send:
  case O::Recv:
    break; // dispatchComm
  }
  return Status::error("opcode " + std::to_string(int(op)) +
                       " is not supported by the CUDA executor");
}

} // namespace megac::runtime::cuda::exec
