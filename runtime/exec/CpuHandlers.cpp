// The CPU backend's handler of each plan opcode: Unary and Binary rows of the opcode table
// (runtime/plan/Opcodes.def) register the CPU elementwise kernel of their name; every other
// opcode registers its handler below (OpcodeTableTest checks that none is missing).
#include "runtime/exec/CpuHandlers.h"

#include "runtime/cpu/HalfCompute.h"
#include "runtime/exec/CommOps.h"
#include "runtime/exec/Parameters.h"
#include "runtime/exec/ProgramExecutor.h"
#include "runtime/exec/RingAttention.h"
#include "runtime/plan/Opcodes.h"

#include <array>
#include <cstring>
#include <optional>
#include <vector>

namespace megac::runtime::exec {

namespace fb = megac::plan;

namespace {

using O = fb::Opcode;
using Table = std::array<CpuHandler, fb::kOpcodeCount>;

comm::ReduceKind commKind(fb::ReduceKind kind) {
  return kind == fb::ReduceKind::max ? comm::ReduceKind::max : comm::ReduceKind::sum;
}

std::optional<int64_t> ignoreOf(const fb::CrossEntropyAttrs *a) {
  return a->has_ignore_index() ? std::optional<int64_t>(a->ignore_index()) : std::nullopt;
}

/// The vocab split of a vocab-parallel Embedding/EmbeddingGrad (empty: the whole table).
std::span<const uint32_t> vocabAxes(const fb::EmbeddingAttrs *a) {
  return a ? spanOf(a->vocab_axes()) : std::span<const uint32_t>();
}

Status needsComm(const CpuCall &c) {
  return Status::error(std::string(fb::EnumNameOpcode(c.inst.op())) +
                       " needs the rank's communicator");
}

CpuHandler &at(Table &t, O op) { return t[*fb::opcodeIndex(op)]; }

/// A handler of the opcodes that only move data between ranks (halves handled by the comm ops).
void comm(Table &t, O op, Status (*run)(const CpuCall &)) {
  at(t, op) = {run, /*computeInF32=*/false, /*communicates=*/true};
}

/// A handler that moves or converts half storage itself.
void storage(Table &t, O op, Status (*run)(const CpuCall &)) {
  at(t, op) = {run, /*computeInF32=*/false, /*communicates=*/false};
}

void math(Table &t, O op, Status (*run)(const CpuCall &)) { at(t, op) = {run, true, false}; }

void elementwiseAndDataMovement(Table &t) {
  math(t, O::Compare, [](const CpuCall &c) {
    return cpu::compare(
        static_cast<cpu::ComparePredicate>(c.inst.attrs_as_CompareAttrs()->predicate()), c.in[0],
        c.in[1], c.out[0]);
  });
  storage(t, O::Where,
          [](const CpuCall &c) { return cpu::where(c.in[0], c.in[1], c.in[2], c.out[0]); });
  storage(t, O::Copy, [](const CpuCall &c) { return cpu::copy(c.in[0], c.out[0]); });
  storage(t, O::Cast, [](const CpuCall &c) { return cpu::cast(c.in[0], c.out[0]); });
  storage(t, O::Transpose, [](const CpuCall &c) {
    return cpu::transpose(c.in[0], spanOf(c.inst.attrs_as_TransposeAttrs()->perm()), c.out[0]);
  });
  storage(t, O::Slice, [](const CpuCall &c) {
    const fb::SliceAttrs *a = c.inst.attrs_as_SliceAttrs();
    return cpu::slice(c.in[0], spanOf(a->starts()), spanOf(a->strides()), c.out[0]);
  });
  storage(t, O::Concat, [](const CpuCall &c) {
    return cpu::concat(c.in, c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  });
  storage(t, O::Broadcast, [](const CpuCall &c) { return cpu::broadcast(c.in[0], c.out[0]); });
  storage(t, O::Gather, [](const CpuCall &c) {
    return cpu::gather(c.in[0], c.in[1], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  });
  storage(t, O::GatherElements, [](const CpuCall &c) {
    return cpu::gatherElements(c.in[0], c.in[1], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  });
  math(t, O::ScatterElements, [](const CpuCall &c) {
    const fb::ScatterAttrs *a = c.inst.attrs_as_ScatterAttrs();
    return cpu::scatterElements(c.in[0], c.in[1], c.in[2], a->axis(), a->accumulate(), c.out[0]);
  });
  math(t, O::ScatterND, [](const CpuCall &c) {
    return cpu::scatterNd(c.in[0], c.in[1], c.in[2], c.inst.attrs_as_ScatterAttrs()->accumulate(),
                          c.out[0]);
  });
  math(t, O::CumSum, [](const CpuCall &c) {
    const fb::CumSumAttrs *a = c.inst.attrs_as_CumSumAttrs();
    return cpu::cumsum(c.in[0], a->axis(), a->exclusive(), a->reverse(), c.out[0]);
  });
  math(t, O::TopKMask, [](const CpuCall &c) {
    return cpu::topkMask(c.in[0], c.inst.attrs_as_TopKAttrs()->k(), c.out[0]);
  });
  math(t, O::MoeDispatch,
       [](const CpuCall &c) { return cpu::moeDispatch(c.in[0], c.in[1], c.out[0]); });
  math(t, O::MoeCombine,
       [](const CpuCall &c) { return cpu::moeCombine(c.in[0], c.in[1], c.out[0]); });
  math(t, O::MoeMatmul, [](const CpuCall &c) {
    return cpu::moeMatmul(c.in[0], c.in[1], c.in[2],
                          c.inst.attrs_as_MoeMatmulAttrs()->transpose_weight(), c.out[0]);
  });
  math(t, O::MoeRowDot,
       [](const CpuCall &c) { return cpu::moeRowDot(c.in[0], c.in[1], c.in[2], c.out[0]); });
  math(t, O::MoeMatmulWeightGrad, [](const CpuCall &c) {
    return cpu::moeMatmulWeightGrad(c.in[0], c.in[1], c.in[2], c.out[0],
                                    c.in.size() > 3 ? &c.in[3] : nullptr);
  });
  storage(t, O::Pad, [](const CpuCall &c) {
    const fb::PadAttrs *a = c.inst.attrs_as_PadAttrs();
    return cpu::pad(c.in[0], spanOf(a->low()), spanOf(a->high()), spanOf(a->interior()), c.out[0]);
  });
  math(t, O::Gelu, [](const CpuCall &c) {
    return cpu::gelu(c.in[0], c.inst.attrs_as_GeluAttrs()->tanh(), c.out[0]);
  });
  math(t, O::Silu, [](const CpuCall &c) { return cpu::silu(c.in[0], c.out[0]); });
  math(t, O::Dropout, [](const CpuCall &c) -> Status {
    const fb::DropoutAttrs *a = c.inst.attrs_as_DropoutAttrs();
    if (a->global_shape() && a->shard_dims()) {
      // Version 3: the shard's offset also depends on this rank's group index per dim.
      if (!c.comm)
        return needsComm(c);
      std::vector<int64_t> offset =
          shardOffset(c.comm->mesh(), c.rank, c.in[0].shape, spanOf(a->shard_offset()),
                      shardingOf(a->shard_dims()));
      return cpu::dropoutShard(c.in[0], c.in[1], a->ratio(), a->stream(), spanOf(a->global_shape()),
                               offset, c.out[0]);
    }
    if (a->global_shape())
      return cpu::dropoutShard(c.in[0], c.in[1], a->ratio(), a->stream(), spanOf(a->global_shape()),
                               spanOf(a->shard_offset()), c.out[0]);
    return cpu::dropout(c.in[0], c.in[1], a->ratio(), a->stream(), c.out[0]);
  });
}

void reductionsAndCoarseOps(Table &t) {
  math(t, O::Reduce, [](const CpuCall &c) {
    const fb::ReduceAttrs *a = c.inst.attrs_as_ReduceAttrs();
    return cpu::reduce(static_cast<cpu::ReduceKind>(a->kind()), c.in[0], spanOf(a->axes()),
                       c.out[0]);
  });
  math(t, O::Softmax, [](const CpuCall &c) {
    return cpu::softmax(c.in[0], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  });
  math(t, O::MatMul, [](const CpuCall &c) {
    const fb::MatMulAttrs *a = c.inst.attrs_as_MatMulAttrs(); // optional: plain lhs x rhs
    cpu::MatMulFlags flags{a && a->transpose_lhs(), a && a->transpose_rhs()};
    return cpu::matmul(c.in[0], c.in[1], c.out[0], flags, c.in.size() > 2 ? &c.in[2] : nullptr);
  });
  math(t, O::Linear, [](const CpuCall &c) {
    return cpu::linear(c.in[0], c.in[1], c.in.size() > 2 ? &c.in[2] : nullptr, c.out[0]);
  });
  // Vocab-parallel (EmbeddingAttrs with vocab_axes): masked lookup and a partial sum.
  storage(t, O::Embedding, [](const CpuCall &c) -> Status {
    std::span<const uint32_t> axes = vocabAxes(c.inst.attrs_as_EmbeddingAttrs());
    if (axes.empty())
      return cpu::embedding(c.in[0], c.in[1], c.out[0]);
    if (!c.comm)
      return needsComm(c);
    return commops::vocabEmbedding(*c.comm, axes, c.in[0], c.in[1], c.out[0]);
  });
  math(t, O::LayerNorm, [](const CpuCall &c) {
    return cpu::layerNorm(c.in[0], c.in[1], c.in.size() > 2 ? &c.in[2] : nullptr,
                          c.inst.attrs_as_NormAttrs()->epsilon(), c.out[0]);
  });
  math(t, O::RmsNorm, [](const CpuCall &c) {
    return cpu::rmsNorm(c.in[0], c.in[1], c.inst.attrs_as_NormAttrs()->epsilon(), c.out[0]);
  });
  math(t, O::Attention, [](const CpuCall &c) {
    const fb::AttentionAttrs *a = c.inst.attrs_as_AttentionAttrs();
    if (c.in.size() >= 5) { // [mask,] query and key positions (Opcodes.def: PositionPair)
      size_t at = c.in.size() - 2;
      return cpu::attention(c.in[0], c.in[1], c.in[2], at == 4 ? &c.in[3] : nullptr, a->causal(),
                            a->scale(), c.out[0], {&c.in[at], &c.in[at + 1]});
    }
    return cpu::attention(c.in[0], c.in[1], c.in[2], c.in.size() > 3 ? &c.in[3] : nullptr,
                          a->causal(), a->scale(), c.out[0]);
  });
  // Context parallelism's ring: the kernel exchanges key/value blocks over ring_axes itself;
  // its last output is the plan's scratch for the blocks in flight (runtime/plan/RingScratch.h).
  math(t, O::RingAttention, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::AttentionAttrs *a = c.inst.attrs_as_AttentionAttrs();
    bool masked = c.in.size() == 6; // q, k, v, [key mask,] positions (Opcodes.def)
    size_t at = c.in.size() - 2;
    return commops::ringAttention(*c.comm, spanOf(a->ring_axes()), c.in[0], c.in[1], c.in[2],
                                  masked ? &c.in[3] : nullptr, c.in[at], c.in[at + 1], a->scale(),
                                  c.out[0], c.out.back());
  });
  math(t, O::RingAttentionGrad, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::AttentionAttrs *a = c.inst.attrs_as_AttentionAttrs();
    bool masked = c.in.size() == 7; // dout, q, k, v, [key mask,] positions; dmask before scratch
    size_t at = c.in.size() - 2;
    return commops::ringAttentionGrad(*c.comm, spanOf(a->ring_axes()), c.in[0], c.in[1], c.in[2],
                                      c.in[3], masked ? &c.in[4] : nullptr, c.in[at], c.in[at + 1],
                                      a->scale(), c.out[0], c.out[1], c.out[2],
                                      masked ? &c.out[3] : nullptr, c.out.back());
  });
  math(t, O::Rope, [](const CpuCall &c) { return cpu::rope(c.in[0], c.in[1], c.in[2], c.out[0]); });
  // Vocab-parallel (vocab_axes): max, sum and target logit reduced over the group.
  math(t, O::CrossEntropy, [](const CpuCall &c) -> Status {
    const fb::CrossEntropyAttrs *a = c.inst.attrs_as_CrossEntropyAttrs();
    std::span<const uint32_t> axes = spanOf(a->vocab_axes());
    if (axes.empty())
      return cpu::crossEntropy(c.in[0], c.in[1], ignoreOf(a), c.out[0]);
    if (!c.comm)
      return needsComm(c);
    return commops::vocabCrossEntropy(*c.comm, axes, c.in[0], c.in[1], ignoreOf(a), c.out[0]);
  });
}

void backwardAndOptimizer(Table &t) {
  math(t, O::LayerNormGrad, [](const CpuCall &c) {
    return cpu::layerNormGrad(c.in[0], c.in[1], c.in[2], c.inst.attrs_as_NormAttrs()->epsilon(),
                              c.out[0], c.out[1], c.out[2]);
  });
  math(t, O::RmsNormGrad, [](const CpuCall &c) {
    return cpu::rmsNormGrad(c.in[0], c.in[1], c.in[2], c.inst.attrs_as_NormAttrs()->epsilon(),
                            c.out[0], c.out[1]);
  });
  math(t, O::AttentionGrad, [](const CpuCall &c) {
    const fb::AttentionAttrs *a = c.inst.attrs_as_AttentionAttrs();
    if (c.in.size() >= 6) { // [mask,] query and key positions (Opcodes.def: PositionPair)
      bool withMask = c.in.size() == 7;
      size_t at = c.in.size() - 2;
      return cpu::attentionGrad(c.in[0], c.in[1], c.in[2], c.in[3], withMask ? &c.in[4] : nullptr,
                                a->causal(), a->scale(), c.out[0], c.out[1], c.out[2],
                                withMask ? &c.out[3] : nullptr, {&c.in[at], &c.in[at + 1]});
    }
    bool masked = c.in.size() > 4;
    return cpu::attentionGrad(c.in[0], c.in[1], c.in[2], c.in[3], masked ? &c.in[4] : nullptr,
                              a->causal(), a->scale(), c.out[0], c.out[1], c.out[2],
                              masked ? &c.out[3] : nullptr);
  });
  math(t, O::GeluGrad, [](const CpuCall &c) {
    return cpu::geluGrad(c.in[0], c.in[1], c.inst.attrs_as_GeluAttrs()->tanh(), c.out[0]);
  });
  math(t, O::SoftmaxGrad, [](const CpuCall &c) {
    return cpu::softmaxGrad(c.in[0], c.in[1], c.inst.attrs_as_AxisAttrs()->axis(), c.out[0]);
  });
  math(t, O::CrossEntropyGrad, [](const CpuCall &c) -> Status {
    const fb::CrossEntropyAttrs *a = c.inst.attrs_as_CrossEntropyAttrs();
    std::span<const uint32_t> axes = spanOf(a->vocab_axes());
    if (axes.empty())
      return cpu::crossEntropyGrad(c.in[0], c.in[1], c.in[2], ignoreOf(a), c.out[0]);
    if (!c.comm)
      return needsComm(c);
    return commops::vocabCrossEntropyGrad(*c.comm, axes, c.in[0], c.in[1], c.in[2], ignoreOf(a),
                                          c.out[0]);
  });
  math(t, O::EmbeddingGrad, [](const CpuCall &c) -> Status {
    std::span<const uint32_t> axes = vocabAxes(c.inst.attrs_as_EmbeddingAttrs());
    if (axes.empty())
      return cpu::embeddingGrad(c.in[0], c.in[1], c.out[0]);
    if (!c.comm)
      return needsComm(c);
    return commops::vocabEmbeddingGrad(*c.comm, axes, c.in[0], c.in[1], c.out[0]);
  });
  math(t, O::AdamW, [](const CpuCall &c) {
    const fb::AdamWAttrs *a = c.inst.attrs_as_AdamWAttrs();
    cpu::AdamWConfig config{a->beta1(), a->beta2(), a->eps(), a->weight_decay()};
    return cpu::adamw(c.in[0], c.in[1], c.in[2], c.in[3], c.in[4], c.in[5], config, c.out[0],
                      c.out[1], c.out[2]);
  });
  math(t, O::AdamWMulti, [](const CpuCall &c) {
    const fb::AdamWMultiAttrs *a = c.inst.attrs_as_AdamWMultiAttrs();
    // inputs lr, step, then (p, g, m, v) per tensor (then the clip's norm); outputs (p, m, v) per
    // tensor (validated).
    std::vector<cpu::AdamWTensor> tensors((c.in.size() - 2) / 4);
    for (size_t k = 0; k < tensors.size(); ++k) {
      const cpu::TensorRef *in = &c.in[2 + 4 * k], *out = &c.out[3 * k];
      tensors[k] = {in[0],  in[1],  in[2],
                    in[3],  out[0], out[1],
                    out[2], a->weight_decays()->Get(static_cast<flatbuffers::uoffset_t>(k))};
    }
    cpu::AdamWConfig config{a->beta1(), a->beta2(), a->eps(), 0.0};
    // max_norm > 0: the clip's norm is the last input.
    const cpu::TensorRef *norm = a->max_norm() > 0 ? &c.in.back() : nullptr;
    return cpu::adamwMulti(tensors, c.in[0], c.in[1], config, norm, a->max_norm());
  });
  math(t, O::GlobalNorm, [](const CpuCall &c) { return cpu::globalNorm(c.in, c.out[0]); });
  math(t, O::ClipByNorm, [](const CpuCall &c) {
    return cpu::clipByNorm(c.in[0], c.in[1], c.inst.attrs_as_ClipAttrs()->max_norm(), c.out[0]);
  });
}

/// Collectives and transfers move or reduce half values themselves (a reduction in f32,
/// rounded once).
void collectives(Table &t) {
  comm(t, O::AllReduce, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return commops::allReduce(*c.comm, spanOf(a->axes()), commKind(a->kind()), c.in[0], c.out[0]);
  });
  comm(t, O::AllGather, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return commops::allGather(*c.comm, spanOf(a->axes()), a->dim(), c.in[0], c.out[0]);
  });
  comm(t, O::ReduceScatter, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return commops::reduceScatter(*c.comm, spanOf(a->axes()), commKind(a->kind()), a->dim(),
                                  c.in[0], c.out[0]);
  });
  comm(t, O::AllToAll, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return commops::allToAll(*c.comm, spanOf(a->axes()), a->dim(), a->concat_dim(), c.in[0],
                             c.out[0]);
  });
  comm(t, O::MoeAllToAll, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return commops::moeAllToAll(*c.comm, spanOf(a->axes()), a->dim(), c.in[0], c.in[1], c.in[2],
                                c.out[0]);
  });
  // Asynchronous collectives: a start posts and registers its handle under its output buffer;
  // CollectiveDone waits for it (writing that buffer) and copies it on unless in place.
  comm(t, O::AllReduceStart, [](const CpuCall &c) -> Status {
    if (!c.comm || !c.inFlight)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    ASSIGN_OR_RETURN(auto handle, commops::startAllReduce(*c.comm, spanOf(a->axes()),
                                                          commKind(a->kind()), c.in[0], c.out[0]));
    return c.inFlight->add(c.inst.outputs()->Get(0), std::move(handle));
  });
  comm(t, O::AllGatherStart, [](const CpuCall &c) -> Status {
    if (!c.comm || !c.inFlight)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    ASSIGN_OR_RETURN(auto handle, commops::startAllGather(*c.comm, spanOf(a->axes()), a->dim(),
                                                          c.in[0], c.out[0]));
    return c.inFlight->add(c.inst.outputs()->Get(0), std::move(handle));
  });
  comm(t, O::ReduceScatterStart, [](const CpuCall &c) -> Status {
    if (!c.comm || !c.inFlight)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    ASSIGN_OR_RETURN(auto handle,
                     commops::startReduceScatter(*c.comm, spanOf(a->axes()), commKind(a->kind()),
                                                 a->dim(), c.in[0], c.out[0]));
    return c.inFlight->add(c.inst.outputs()->Get(0), std::move(handle));
  });
  storage(t, O::CollectiveDone, [](const CpuCall &c) -> Status {
    if (!c.inFlight)
      return needsComm(c);
    RETURN_IF_ERROR(c.inFlight->complete(c.inst.inputs()->Get(0)));
    if (c.out[0].data != c.in[0].data)
      std::memcpy(c.out[0].data, c.in[0].data, c.in[0].byteSize());
    return Status::ok();
  });
  // No communication: this rank's slice, traced as a kernel.
  storage(t, O::ShardSlice, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::CollectiveAttrs *a = c.inst.attrs_as_CollectiveAttrs();
    return commops::shardSlice(*c.comm, spanOf(a->axes()), a->dim(), c.in[0], c.out[0]);
  });
  comm(t, O::Send, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::P2PAttrs *a = c.inst.attrs_as_P2PAttrs();
    return commops::send(*c.comm, a->axis(), a->shift(), a->tag(), c.in[0]);
  });
  comm(t, O::Recv, [](const CpuCall &c) -> Status {
    if (!c.comm)
      return needsComm(c);
    const fb::P2PAttrs *a = c.inst.attrs_as_P2PAttrs();
    return commops::recv(*c.comm, a->axis(), a->shift(), a->tag(), c.out[0]);
  });
}

Table buildTable() {
  Table t;
  // Unary and Binary rows: the CPU kernel of the opcode's name (a compile error when
  // cpu::UnaryOp or cpu::BinaryOp lacks it).
#define MEGAC_CPU_Unary(Name)                                                                      \
  math(t, O::Name,                                                                                 \
       [](const CpuCall &c) { return cpu::unary(cpu::UnaryOp::Name, c.in[0], c.out[0]); });
#define MEGAC_CPU_Binary(Name)                                                                     \
  math(t, O::Name, [](const CpuCall &c) {                                                          \
    return cpu::binary(cpu::BinaryOp::Name, c.in[0], c.in[1], c.out[0]);                           \
  });
#define MEGAC_CPU_Own(Name)
#define MEGAC_OPCODE(Name, Number, MinIn, MaxIn, MinOut, MaxOut, Attrs, Kernel, Flags)             \
  MEGAC_CPU_##Kernel(Name)
#include "runtime/plan/Opcodes.def"
#undef MEGAC_OPCODE
#undef MEGAC_CPU_Own
#undef MEGAC_CPU_Binary
#undef MEGAC_CPU_Unary
  elementwiseAndDataMovement(t);
  reductionsAndCoarseOps(t);
  backwardAndOptimizer(t);
  collectives(t);
  return t;
}

} // namespace

const CpuHandler &cpuHandler(fb::Opcode op) {
  static const Table table = buildTable();
  static const CpuHandler none;
  std::optional<size_t> index = fb::opcodeIndex(op);
  return index ? table[*index] : none;
}

Status runCpuInstruction(const CpuCall &call) {
  const CpuHandler &handler = cpuHandler(call.inst.op());
  if (!handler.run)
    return Status::error("opcode " + std::to_string(int(call.inst.op())) +
                         " is not supported by the CPU executor");
  if (!handler.computeInF32 || (!cpu::anyHalf(call.in) && !cpu::anyHalf(call.out)))
    return handler.run(call);
  // bf16/f16 arithmetic: the f32 kernel on widened inputs, its results rounded once.
  return cpu::computeInF32(
      call.in, call.out,
      [&](std::span<const cpu::TensorRef> wideIn, std::span<const cpu::TensorRef> wideOut) {
        return handler.run({call.inst, wideIn, wideOut, call.comm, call.rank});
      });
}

} // namespace megac::runtime::exec
