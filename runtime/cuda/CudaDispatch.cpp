// The CUDA executor's instruction dispatch (CudaDispatch.h): a handler per opcode, filled from
// the opcode table (runtime/plan/Opcodes.def) — Unary and Binary opcodes call the elementwise
// kernel of their name where kernels/ElementwiseMath.def has its formula, the others register
// their cuda:: kernel or device collective below — and the per-instruction scratch memory.
#include "runtime/cuda/CudaDispatch.h"

#include "runtime/cuda/CudaTry.h"
#include "runtime/cuda/DeviceCommOps.h"
#include "runtime/exec/Parameters.h"
#include "runtime/exec/ProgramExecutor.h"
#include "runtime/plan/Opcodes.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

namespace megac::runtime::cuda::exec {

namespace fb = megac::plan;

namespace {

using runtime::exec::spanOf;
using runtime::exec::vectorOf;

comm::ReduceKind commKind(fb::ReduceKind kind) {
  return kind == fb::ReduceKind::max ? comm::ReduceKind::max : comm::ReduceKind::sum;
}

std::optional<int64_t> ignoreOf(const fb::CrossEntropyAttrs *a) {
  return a->has_ignore_index() ? std::optional<int64_t>(a->ignore_index()) : std::nullopt;
}

} // namespace

/// Opcodes that need the NCCL communicator: collectives, transfers, vocab-parallel ops.
bool needsNccl(const fb::Instruction &inst) {
  if (fb::opcodeHas(inst.op(), fb::opflag::Collective) ||
      fb::opcodeHas(inst.op(), fb::opflag::PointToPoint))
    return true;
  // Vocab-parallel Embedding, EmbeddingGrad, CrossEntropy and CrossEntropyGrad.
  if (const fb::EmbeddingAttrs *a = inst.attrs_as_EmbeddingAttrs())
    return a->vocab_axes() && a->vocab_axes()->size() > 0;
  if (const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs())
    return a->vocab_axes() && a->vocab_axes()->size() > 0;
  return false;
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

/// One instruction on the device (dispatch's arguments).
struct CudaCall {
  const fb::Instruction &inst;
  const std::vector<TensorRef> &in, &out;
  const Context &ctx;
  NcclCommunicator *nccl;
  const comm::Mesh &mesh;
  int rank;
};
using Handler = Status (*)(const CudaCall &c);
using Table = std::array<Handler, fb::kOpcodeCount>;
using O = fb::Opcode;

Handler &at(Table &t, O op) { return t[*fb::opcodeIndex(op)]; }

/// Attention by query/key positions (context parallelism's causal masking by global position,
/// docs/context-parallel.md): the CPU backend runs it; the fused CUDA kernel does not yet.
Status positionsRefused(const char *op) {
  return Status::error(std::string(op) + " with query/key positions (context parallelism) is "
                                         "not supported by the CUDA backend yet; run --cp with "
                                         "--backend cpu");
}

/// The local kernel, or with vocab_axes the device collective version (over NCCL).
bool vocabParallel(const CudaCall &c) { return c.nccl && needsNccl(c.inst); }

void elementwiseAndDataMovement(Table &t) {
  at(t, O::Compare) = [](const CudaCall &c) {
    return compare(c.ctx,
                   static_cast<ComparePredicate>(c.inst.attrs_as_CompareAttrs()->predicate()),
                   c.in[0], c.in[1], c.out[0]);
  };
  at(t, O::Where) = [](const CudaCall &c) {
    return where(c.ctx, c.in[0], c.in[1], c.in[2], c.out[0]);
  };
  at(t, O::Copy) = [](const CudaCall &c) { return copy(c.ctx, c.in[0], c.out[0]); };
  at(t, O::Transpose) = [](const CudaCall &c) {
    return transpose(c.ctx, c.in[0], spanOf(c.inst.attrs_as_TransposeAttrs()->perm()), c.out[0]);
  };
  at(t, O::Slice) = [](const CudaCall &c) {
    const fb::SliceAttrs *a = c.inst.attrs_as_SliceAttrs();
    return slice(c.ctx, c.in[0], spanOf(a->starts()), spanOf(a->strides()), c.out[0]);
  };
  at(t, O::Concat) = [](const CudaCall &c) {
    return concat(c.ctx, c.in, c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  };
  at(t, O::Broadcast) = [](const CudaCall &c) { return broadcast(c.ctx, c.in[0], c.out[0]); };
  at(t, O::Cast) = [](const CudaCall &c) { return cast(c.ctx, c.in[0], c.out[0]); };
  at(t, O::Gather) = [](const CudaCall &c) {
    return gather(c.ctx, c.in[0], c.in[1], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  };
  at(t, O::GatherElements) = [](const CudaCall &c) {
    return gatherElements(c.ctx, c.in[0], c.in[1], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  };
  at(t, O::ScatterElements) = [](const CudaCall &c) {
    const fb::ScatterAttrs *a = c.inst.attrs_as_ScatterAttrs();
    return scatterElements(c.ctx, c.in[0], c.in[1], c.in[2], a->axis(), a->accumulate(), c.out[0]);
  };
  at(t, O::ScatterND) = [](const CudaCall &c) {
    return scatterNd(c.ctx, c.in[0], c.in[1], c.in[2], c.inst.attrs_as_ScatterAttrs()->accumulate(),
                     c.out[0]);
  };
  at(t, O::CumSum) = [](const CudaCall &c) {
    const fb::CumSumAttrs *a = c.inst.attrs_as_CumSumAttrs();
    return cumsum(c.ctx, c.in[0], a->axis(), a->exclusive(), a->reverse(), c.out[0]);
  };
  at(t, O::Pad) = [](const CudaCall &c) {
    const fb::PadAttrs *a = c.inst.attrs_as_PadAttrs();
    return pad(c.ctx, c.in[0], spanOf(a->low()), spanOf(a->high()), spanOf(a->interior()),
               c.out[0]);
  };
  at(t, O::Gelu) = [](const CudaCall &c) {
    return gelu(c.ctx, c.in[0], c.inst.attrs_as_GeluAttrs()->tanh(), c.out[0]);
  };
  at(t, O::Silu) = [](const CudaCall &c) { return silu(c.ctx, c.in[0], c.out[0]); };
  at(t, O::Dropout) = [](const CudaCall &c) {
    const fb::DropoutAttrs *a = c.inst.attrs_as_DropoutAttrs();
    if (a->global_shape() && a->shard_dims()) {
      // Version 3: the shard's offset also depends on this rank's group index per dim.
      std::vector<int64_t> offset = shardOffset(
          c.mesh, c.rank, c.in[0].shape, spanOf(a->shard_offset()), shardingOf(a->shard_dims()));
      return dropoutShard(c.ctx, c.in[0], c.in[1], a->ratio(), a->stream(),
                          spanOf(a->global_shape()), offset, c.out[0]);
    }
    if (a->global_shape())
      return dropoutShard(c.ctx, c.in[0], c.in[1], a->ratio(), a->stream(),
                          spanOf(a->global_shape()), spanOf(a->shard_offset()), c.out[0]);
    return dropout(c.ctx, c.in[0], c.in[1], a->ratio(), a->stream(), c.out[0]);
  };
}

void reductionsAndCoarseOps(Table &t) {
  at(t, O::Reduce) = [](const CudaCall &c) {
    const fb::ReduceAttrs *a = c.inst.attrs_as_ReduceAttrs();
    return reduce(c.ctx, static_cast<ReduceKind>(a->kind()), c.in[0], spanOf(a->axes()), c.out[0]);
  };
  at(t, O::Softmax) = [](const CudaCall &c) {
    return softmax(c.ctx, c.in[0], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  };
  at(t, O::MatMul) = [](const CudaCall &c) {
    const fb::MatMulAttrs *a = c.inst.attrs_as_MatMulAttrs(); // optional: plain lhs x rhs
    MatMulFlags flags{a && a->transpose_lhs(), a && a->transpose_rhs()};
    return matmul(c.ctx, c.in[0], c.in[1], c.out[0], flags, c.in.size() > 2 ? &c.in[2] : nullptr);
  };
  at(t, O::Linear) = [](const CudaCall &c) {
    return linear(c.ctx, c.in[0], c.in[1], c.in.size() > 2 ? &c.in[2] : nullptr, c.out[0]);
  };
  at(t, O::Embedding) = [](const CudaCall &c) {
    if (vocabParallel(c))
      return devcomm::vocabEmbedding(*c.nccl, c.ctx,
                                     spanOf(c.inst.attrs_as_EmbeddingAttrs()->vocab_axes()),
                                     c.in[0], c.in[1], c.out[0]);
    return embedding(c.ctx, c.in[0], c.in[1], c.out[0]);
  };
  at(t, O::LayerNorm) = [](const CudaCall &c) {
    return layerNorm(c.ctx, c.in[0], c.in[1], c.in.size() > 2 ? &c.in[2] : nullptr,
                     c.inst.attrs_as_NormAttrs()->epsilon(), c.out[0]);
  };
  at(t, O::RmsNorm) = [](const CudaCall &c) {
    return rmsNorm(c.ctx, c.in[0], c.in[1], c.inst.attrs_as_NormAttrs()->epsilon(), c.out[0]);
  };
  at(t, O::Attention) = [](const CudaCall &c) {
    const fb::AttentionAttrs *a = c.inst.attrs_as_AttentionAttrs();
    if (c.in.size() >= 5) // [mask,] positions
      return positionsRefused("Attention");
    return attention(c.ctx, c.in[0], c.in[1], c.in[2], c.in.size() > 3 ? &c.in[3] : nullptr,
                     a->causal(), a->scale(), c.out[0]);
  };
  at(t, O::Rope) = [](const CudaCall &c) {
    return rope(c.ctx, c.in[0], c.in[1], c.in[2], c.out[0]);
  };
  at(t, O::CrossEntropy) = [](const CudaCall &c) {
    const fb::CrossEntropyAttrs *a = c.inst.attrs_as_CrossEntropyAttrs();
    if (vocabParallel(c))
      return devcomm::vocabCrossEntropy(*c.nccl, c.ctx, spanOf(a->vocab_axes()), c.in[0], c.in[1],
                                        ignoreOf(a), c.out[0]);
    return crossEntropy(c.ctx, c.in[0], c.in[1], ignoreOf(a), c.out[0]);
  };
}

void backwardAndOptimizer(Table &t) {
  at(t, O::LayerNormGrad) = [](const CudaCall &c) {
    return layerNormGrad(c.ctx, c.in[0], c.in[1], c.in[2], c.inst.attrs_as_NormAttrs()->epsilon(),
                         c.out[0], c.out[1], c.out[2]);
  };
  at(t, O::RmsNormGrad) = [](const CudaCall &c) {
    return rmsNormGrad(c.ctx, c.in[0], c.in[1], c.in[2], c.inst.attrs_as_NormAttrs()->epsilon(),
                       c.out[0], c.out[1]);
  };
  at(t, O::AttentionGrad) = [](const CudaCall &c) {
    const fb::AttentionAttrs *a = c.inst.attrs_as_AttentionAttrs();
    if (c.in.size() >= 6) // [mask,] positions
      return positionsRefused("AttentionGrad");
    bool masked = c.in.size() > 4;
    return attentionGrad(c.ctx, c.in[0], c.in[1], c.in[2], c.in[3], masked ? &c.in[4] : nullptr,
                         a->causal(), a->scale(), c.out[0], c.out[1], c.out[2],
                         masked ? &c.out[3] : nullptr);
  };
  at(t, O::GeluGrad) = [](const CudaCall &c) {
    return geluGrad(c.ctx, c.in[0], c.in[1], c.inst.attrs_as_GeluAttrs()->tanh(), c.out[0]);
  };
  at(t, O::SoftmaxGrad) = [](const CudaCall &c) {
    return softmaxGrad(c.ctx, c.in[0], c.in[1], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  };
  at(t, O::CrossEntropyGrad) = [](const CudaCall &c) {
    const fb::CrossEntropyAttrs *a = c.inst.attrs_as_CrossEntropyAttrs();
    if (vocabParallel(c))
      return devcomm::vocabCrossEntropyGrad(*c.nccl, c.ctx, spanOf(a->vocab_axes()), c.in[0],
                                            c.in[1], c.in[2], ignoreOf(a), c.out[0]);
    return crossEntropyGrad(c.ctx, c.in[0], c.in[1], c.in[2], ignoreOf(a), c.out[0]);
  };
  at(t, O::EmbeddingGrad) = [](const CudaCall &c) {
    if (vocabParallel(c))
      return devcomm::vocabEmbeddingGrad(*c.nccl, c.ctx,
                                         spanOf(c.inst.attrs_as_EmbeddingAttrs()->vocab_axes()),
                                         c.in[0], c.in[1], c.out[0]);
    return embeddingGrad(c.ctx, c.in[0], c.in[1], c.out[0]);
  };
  at(t, O::AdamW) = [](const CudaCall &c) {
    const fb::AdamWAttrs *a = c.inst.attrs_as_AdamWAttrs();
    AdamWConfig config{a->beta1(), a->beta2(), a->eps(), a->weight_decay()};
    return adamw(c.ctx, c.in[0], c.in[1], c.in[2], c.in[3], c.in[4], c.in[5], config, c.out[0],
                 c.out[1], c.out[2]);
  };
  // Tensors written in place run as multi-tensor launches (one per weight decay and dtype, of
  // up to kMultiTensors tensors each, kernels/Optim.cu); any other tensor on its own.
  at(t, O::AdamWMulti) = [](const CudaCall &c) -> Status {
    const fb::AdamWMultiAttrs *a = c.inst.attrs_as_AdamWMultiAttrs();
    size_t count = (c.in.size() - 2) / 4;
    // max_norm > 0: the clip's norm is the last input.
    const TensorRef *norm = a->max_norm() > 0 ? &c.in.back() : nullptr;
    std::vector<std::pair<double, std::vector<AdamWTensors>>> groups;
    for (size_t k = 0; k < count; ++k) {
      const TensorRef *in = &c.in[2 + 4 * k], *out = &c.out[3 * k];
      double decay = a->weight_decays()->Get(static_cast<flatbuffers::uoffset_t>(k));
      AdamWConfig config{a->beta1(), a->beta2(), a->eps(), decay};
      if (out[0].data != in[0].data || out[1].data != in[2].data || out[2].data != in[3].data) {
        RETURN_IF_ERROR(adamw(c.ctx, in[0], in[1], in[2], in[3], c.in[0], c.in[1], config, out[0],
                              out[1], out[2], norm, a->max_norm()))
            << " (tensor " << k << ")";
        continue;
      }
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto &g) { return g.first == decay; });
      if (group == groups.end())
        group = groups.emplace(groups.end(), decay, std::vector<AdamWTensors>{});
      group->second.push_back({in[0], in[1], in[2], in[3]});
    }
    for (const auto &[decay, tensors] : groups)
      RETURN_IF_ERROR(adamwMulti(c.ctx, tensors, c.in[0], c.in[1],
                                 AdamWConfig{a->beta1(), a->beta2(), a->eps(), decay}, norm,
                                 a->max_norm()));
    return Status::ok();
  };
  at(t, O::GlobalNorm) = [](const CudaCall &c) { return globalNorm(c.ctx, c.in, c.out[0]); };
  at(t, O::ClipByNorm) = [](const CudaCall &c) {
    return clipByNorm(c.ctx, c.in[0], c.in[1], c.inst.attrs_as_ClipAttrs()->max_norm(), c.out[0]);
  };
}

void mixtureOfExperts(Table &t) {
  at(t, O::TopKMask) = [](const CudaCall &c) {
    return topkMask(c.ctx, c.in[0], c.inst.attrs_as_TopKAttrs()->k(), c.out[0]);
  };
  at(t, O::MoeDispatch) = [](const CudaCall &c) {
    return moeDispatch(c.ctx, c.in[0], c.in[1], c.out[0]);
  };
  at(t, O::MoeCombine) = [](const CudaCall &c) {
    return moeCombine(c.ctx, c.in[0], c.in[1], c.out[0]);
  };
  at(t, O::MoeMatmul) = [](const CudaCall &c) {
    return moeMatmul(c.ctx, c.in[0], c.in[1], c.in[2],
                     c.inst.attrs_as_MoeMatmulAttrs()->transpose_weight(), c.out[0]);
  };
  at(t, O::MoeRowDot) = [](const CudaCall &c) {
    return moeRowDot(c.ctx, c.in[0], c.in[1], c.in[2], c.out[0]);
  };
  at(t, O::MoeMatmulWeightGrad) = [](const CudaCall &c) {
    return moeMatmulWeightGrad(c.ctx, c.in[0], c.in[1], c.in[2], c.out[0],
                               c.in.size() > 3 ? &c.in[3] : nullptr);
  };
}

/// Collectives and transfers: NCCL (dispatch checks the communicator is there).
void collectives(Table &t) {
  at(t, O::AllReduce) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::allReduce(*c.nccl, c.ctx, spanOf(a->axes()), commKind(a->kind()), c.in[0],
                              c.out[0]);
  };
  at(t, O::AllGather) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::allGather(*c.nccl, c.ctx, spanOf(a->axes()), a->dim(), c.in[0], c.out[0]);
  };
  at(t, O::ReduceScatter) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::reduceScatter(*c.nccl, c.ctx, spanOf(a->axes()), commKind(a->kind()), a->dim(),
                                  c.in[0], c.out[0]);
  };
  at(t, O::AllToAll) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::allToAll(*c.nccl, c.ctx, spanOf(a->axes()), a->dim(), a->concat_dim(), c.in[0],
                             c.out[0]);
  };
  // Expert parallelism's token exchange: the all-to-all-v over grouped ncclSend/ncclRecv.
  at(t, O::MoeAllToAll) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::moeAllToAll(*c.nccl, c.ctx, spanOf(a->axes()), a->dim(), c.in[0], c.in[1],
                                c.in[2], c.out[0]);
  };
  // Context parallelism's ring attention: not built for NCCL yet (the CUDA attention kernel
  // takes no positions); refused by name.
  at(t, O::RingAttention) = [](const CudaCall &) {
    return Status::error("RingAttention: context parallelism's ring (--cp-comm-type p2p) is not "
                         "supported by the CUDA backend yet; run it with --backend cpu");
  };
  at(t, O::RingAttentionGrad) = [](const CudaCall &) {
    return Status::error("RingAttentionGrad: context parallelism's ring (--cp-comm-type p2p) is "
                         "not supported by the CUDA backend yet; run it with --backend cpu");
  };
  // Asynchronous collectives: a start posts the collective on the communication stream under
  // its output buffer (which the plan keeps live and unread until the CollectiveDone) and
  // returns; the CollectiveDone makes the compute stream wait for it (no host wait) and copies
  // on unless in place. The host waits at the end of the function (CudaExecutor: drain).
  at(t, O::AllReduceStart) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::startAllReduce(*c.nccl, c.ctx, c.inst.outputs()->Get(0), spanOf(a->axes()),
                                   commKind(a->kind()), c.in[0], c.out[0]);
  };
  at(t, O::AllGatherStart) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::startAllGather(*c.nccl, c.ctx, c.inst.outputs()->Get(0), spanOf(a->axes()),
                                   a->dim(), c.in[0], c.out[0]);
  };
  at(t, O::ReduceScatterStart) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::startReduceScatter(*c.nccl, c.ctx, c.inst.outputs()->Get(0), spanOf(a->axes()),
                                       commKind(a->kind()), a->dim(), c.in[0], c.out[0]);
  };
  at(t, O::CollectiveDone) = [](const CudaCall &c) -> Status {
    if (!c.nccl)
      return Status::error("CollectiveDone: no collective is in flight (the function starts "
                           "none, so the executor made no NCCL communicator)");
    RETURN_IF_ERROR(devcomm::finishCollective(*c.nccl, c.inst.inputs()->Get(0)));
    if (c.out[0].data == c.in[0].data)
      return Status::ok();
    return copy(c.ctx, c.in[0], c.out[0]);
  };
  at(t, O::ShardSlice) = [](const CudaCall &c) {
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return devcomm::shardSlice(*c.nccl, c.ctx, spanOf(a->axes()), a->dim(), c.in[0], c.out[0]);
  };
  at(t, O::Send) = [](const CudaCall &c) {
    const fb::P2PAttrs *a = c.inst.attrs_as_P2PAttrs();
    return devcomm::send(*c.nccl, a->axis(), a->shift(), a->tag(), c.in[0]);
  };
  at(t, O::Recv) = [](const CudaCall &c) {
    const fb::P2PAttrs *a = c.inst.attrs_as_P2PAttrs();
    return devcomm::recv(*c.nccl, a->axis(), a->shift(), a->tag(), c.out[0]);
  };
}

Table buildTable() {
  Table t{};
  // Unary and Binary rows: the elementwise kernel of the opcode's name, where the device has it
  // (a formula in kernels/ElementwiseMath.def).
#define MEGAC_CUDA_Unary(Name)                                                                     \
  if (hasUnaryKernel(UnaryOp::Name))                                                               \
    at(t, O::Name) = [](const CudaCall &c) {                                                       \
      return unary(c.ctx, UnaryOp::Name, c.in[0], c.out[0]);                                       \
    };
#define MEGAC_CUDA_Binary(Name)                                                                    \
  if (hasBinaryKernel(BinaryOp::Name))                                                             \
    at(t, O::Name) = [](const CudaCall &c) {                                                       \
      return binary(c.ctx, BinaryOp::Name, c.in[0], c.in[1], c.out[0]);                            \
    };
#define MEGAC_CUDA_Own(Name)
#define MEGAC_OPCODE(Name, Number, MinIn, MaxIn, MinOut, MaxOut, Attrs, Kernel, Flags)             \
  MEGAC_CUDA_##Kernel(Name)
#include "runtime/plan/Opcodes.def"
#undef MEGAC_OPCODE
#undef MEGAC_CUDA_Own
#undef MEGAC_CUDA_Binary
#undef MEGAC_CUDA_Unary
  elementwiseAndDataMovement(t);
  reductionsAndCoarseOps(t);
  backwardAndOptimizer(t);
  mixtureOfExperts(t);
  collectives(t);
  return t;
}

const Table &table() {
  static const Table t = buildTable();
  return t;
}

} // namespace

bool hasHandler(fb::Opcode op) {
  std::optional<size_t> index = fb::opcodeIndex(op);
  return index && table()[*index] != nullptr;
}

Status dispatch(const fb::Instruction &inst, const std::vector<TensorRef> &in,
                const std::vector<TensorRef> &outs, const Context &ctx, NcclCommunicator *nccl,
                const comm::Mesh &mesh, int rank) {
  std::optional<size_t> index = fb::opcodeIndex(inst.op());
  Handler handler = index ? table()[*index] : nullptr;
  if (!handler)
    return Status::error("opcode " + std::to_string(int(inst.op())) +
                         " is not supported by the CUDA executor");
  if (needsNccl(inst) && !nccl)
    return Status::error("no NCCL communicator (internal: the plan scan missed this opcode)");
  return handler({inst, in, outs, ctx, nccl, mesh, rank});
}

} // namespace megac::runtime::cuda::exec
