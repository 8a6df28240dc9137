// The CPU executor: one 64-byte aligned arena per program, constants and parameters filled and
// state zeroed at creation, a function's instructions run in order on the reference kernels
// (runtime/cpu).
#include "runtime/exec/Executor.h"

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/HalfCompute.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CudaExecutor.h"
#include "runtime/exec/CommOps.h"
#include "runtime/exec/Parameters.h"
#include "runtime/exec/ProgramExecutor.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/plan_generated.h"
#include "support/Json.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

namespace megac::runtime {

namespace fb = megac::plan;
using exec::BufferInfo;
using exec::Function;
using exec::InputSlot;
using exec::Port;
using exec::spanOf;

// The kernel enums list the ops in the opcode order, so the mapping is an offset.
static_assert(int(cpu::UnaryOp::Neg) == int(fb::Opcode::Neg) &&
              int(cpu::UnaryOp::Not) == int(fb::Opcode::Not));
static_assert(int(cpu::BinaryOp::Add) == 0 &&
              int(cpu::BinaryOp::Or) == int(fb::Opcode::Or) - int(fb::Opcode::Add));
static_assert(int(cpu::ComparePredicate::ge) == int(fb::ComparePredicate::ge));
static_assert(int(cpu::ReduceKind::min) == int(fb::ReduceKind::min));

namespace {

struct FreeDeleter {
  void operator()(uint8_t *p) const { std::free(p); }
};

/// Zeroed bytes aligned to 64. calloc leaves large blocks to the OS's zero pages, so an arena
/// is not touched (or committed) until the program uses it.
class AlignedBytes {
public:
  AlignedBytes() = default;
  /// `bytes` (at least one cache line, so never null), or empty when they cannot be had.
  static AlignedBytes allocate(uint64_t bytes) {
    AlignedBytes out;
    if (bytes > (uint64_t(1) << 62)) // no machine has that much; also keeps the rounding exact
      return out;
    size_t size = static_cast<size_t>((bytes + 63) / 64 * 64);
    out.raw_.reset(static_cast<uint8_t *>(std::calloc(size + 64, 1)));
    if (out.raw_) {
      uintptr_t at = reinterpret_cast<uintptr_t>(out.raw_.get());
      out.data_ = out.raw_.get() + (64 - at % 64) % 64;
    }
    return out;
  }
  explicit operator bool() const { return data_ != nullptr; }
  uint8_t *get() const { return data_; }

private:
  std::unique_ptr<uint8_t, FreeDeleter> raw_;
  uint8_t *data_ = nullptr;
};

/// memcpy that accepts an empty range with null pointers (an empty tensor's data).
void copyBytes(void *dst, const void *src, size_t n) {
  if (n)
    std::memcpy(dst, src, n);
}

comm::ReduceKind commKind(fb::ReduceKind kind) {
  return kind == fb::ReduceKind::max ? comm::ReduceKind::max : comm::ReduceKind::sum;
}

/// Opcodes whose bf16/f16 operands go through f32 (cpu::computeInF32); the data-movement ones
/// and Cast handle half storage themselves.
bool computesOnHalf(fb::Opcode op) {
  switch (op) {
  case fb::Opcode::Cast:
  case fb::Opcode::Copy:
  case fb::Opcode::Transpose:
  case fb::Opcode::Slice:
  case fb::Opcode::Concat:
  case fb::Opcode::Broadcast:
  case fb::Opcode::Where:
  case fb::Opcode::Gather:
  case fb::Opcode::Embedding:
  case fb::Opcode::Pad:
  // Collectives move or reduce half values themselves (a reduction in f32, rounded once).
  case fb::Opcode::AllReduce:
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter:
  case fb::Opcode::AllToAll:
  case fb::Opcode::ShardSlice:
  case fb::Opcode::Send:
  case fb::Opcode::Recv:
    return false;
  default:
    return true;
  }
}

/// The opcodes that only move data between ranks (traced by the communicator).
bool communicates(fb::Opcode op) {
  switch (op) {
  case fb::Opcode::AllReduce:
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter:
  case fb::Opcode::AllToAll:
  case fb::Opcode::Send:
  case fb::Opcode::Recv:
    return true;
  default:
    return false;
  }
}

class CpuExecutor final : public exec::ProgramExecutor {
public:
  Status init(const LoadedPlan &plan, const ExecutorOptions &options);
  Status zeroState(std::string_view prefix) override;

private:
  cpu::TensorRef ref(uint32_t buffer) const {
    const exec::BufferInfo &b = buffers_[buffer];
    return {b.dtype, b.shape, arena_.get() + b.offset};
  }
  StatusOr<HostTensor> copyOut(uint32_t buffer) const override;
  Status copyIn(uint32_t buffer, const HostTensor &value) override;
  Status runFunction(size_t index) override;
  Status runFunctionTraced(size_t index, Trace::Clock::time_point start);
  Status execute(const fb::Instruction &inst);
  Status dispatch(const fb::Instruction &inst, const std::vector<cpu::TensorRef> &in,
                  const std::vector<cpu::TensorRef> &out);
  /// The opcodes that need the communicator; nullopt for the others.
  std::optional<Status> dispatchComm(const fb::Instruction &inst,
                                     const std::vector<cpu::TensorRef> &in,
                                     const std::vector<cpu::TensorRef> &out);

  AlignedBytes arena_;
  std::vector<std::vector<uint64_t>> scratch_; // per output, for outputs that overlap an input
  Trace *trace_ = nullptr;                     // ExecutorOptions::trace
};

Status CpuExecutor::init(const LoadedPlan &plan, const ExecutorOptions &options) {
  RETURN_IF_ERROR(loadProgram(plan, options));
  trace_ = options.trace;
  arena_ = AlignedBytes::allocate(program_->arena_bytes());
  if (!arena_)
    return Status::error("plan " + source_ + ": cannot allocate the " +
                         describeProgram(*program_, programIndex_) + " arena of " +
                         std::to_string(program_->arena_bytes()) + " bytes");
  if (program_->constants())
    for (const fb::Constant *c : *program_->constants())
      if (c->data())
        copyBytes(arena_.get() + buffers_[c->buffer()].offset, c->data()->data(),
                  c->data()->size());
  RETURN_IF_ERROR(fillParameters(plan_, programIndex_, rank_, arena_.get(), options.weights))
      << " (plan " << source_ << ", " << describeProgram(*program_, programIndex_) << ")";
  return zeroState("");
}

StatusOr<HostTensor> CpuExecutor::copyOut(uint32_t buffer) const {
  const exec::BufferInfo &b = buffers_[buffer];
  HostTensor t;
  t.dtype = b.dtype;
  t.shape.assign(b.shape.begin(), b.shape.end());
  t.bytes.assign(arena_.get() + b.offset, arena_.get() + b.offset + b.bytes);
  return t;
}

Status CpuExecutor::copyIn(uint32_t buffer, const HostTensor &value) {
  copyBytes(arena_.get() + buffers_[buffer].offset, value.bytes.data(), buffers_[buffer].bytes);
  return Status::ok();
}

Status CpuExecutor::zeroState(std::string_view prefix) {
  for (const exec::Named &s : state_)
    if (std::string_view(s.name).starts_with(prefix) && buffers_[s.buffer].bytes)
      std::memset(arena_.get() + buffers_[s.buffer].offset, 0, buffers_[s.buffer].bytes);
  return Status::ok();
}

Status CpuExecutor::runFunction(size_t index) {
  lastRun_.reset();
  const Function &fn = functions_[index];
  const bool tracing = trace_ && trace_->recording();
  Trace::Clock::time_point start = tracing ? Trace::Clock::now() : Trace::Clock::time_point();
  // Inputs are copied in on every run: the memory plan may reuse their bytes once they are dead.
  for (const Port &port : fn.inputs) {
    const InputSlot &slot = inputs_.at(port.name);
    if (!slot.value)
      return Status::error("input '" + port.name + "' was not set before running function '" +
                           fn.name + "'");
    copyBytes(arena_.get() + buffers_[port.buffer].offset, slot.value->bytes.data(),
              buffers_[port.buffer].bytes);
  }
  if (tracing)
    return runFunctionTraced(index, start);
  if (fn.plan->instructions())
    for (size_t i = 0; i < fn.plan->instructions()->size(); ++i) {
      Status s = execute(*fn.plan->instructions()->Get(static_cast<flatbuffers::uoffset_t>(i)));
      if (!s.isOk())
        return Status::error(describeInstruction(*program_, programIndex_, index, i) + ": " +
                             s.message());
    }
  lastRun_ = index;
  return Status::ok();
}

// runFunction's instruction loop, recording the function and each instruction on the trace's
// kernels lane (communication opcodes are the tracing communicator's to record).
Status CpuExecutor::runFunctionTraced(size_t index, Trace::Clock::time_point start) {
  const Function &fn = functions_[index];
  trace_->setFunction(fn.name);
  std::string function = "\"function\": " + json::quote(fn.name) + ", \"index\": ";
  Status status = Status::ok();
  if (fn.plan->instructions())
    for (size_t i = 0; i < fn.plan->instructions()->size() && status.isOk(); ++i) {
      const fb::Instruction &inst =
          *fn.plan->instructions()->Get(static_cast<flatbuffers::uoffset_t>(i));
      Trace::Clock::time_point begin = Trace::Clock::now();
      status = execute(inst);
      if (!status.isOk())
        status = Status::error(describeInstruction(*program_, programIndex_, index, i) + ": " +
                               status.message());
      else if (!communicates(inst.op()))
        trace_->add(TraceLane::kernels, fb::EnumNameOpcode(inst.op()), "kernel", begin,
                    Trace::Clock::now(), function + std::to_string(i));
    }
  trace_->setFunction("");
  trace_->add(TraceLane::kernels, fn.name, "function", start, Trace::Clock::now());
  if (status.isOk())
    lastRun_ = index;
  return status;
}

Status CpuExecutor::execute(const fb::Instruction &inst) {
  std::vector<cpu::TensorRef> in, out;
  if (inst.inputs())
    for (uint32_t b : *inst.inputs())
      in.push_back(ref(b));
  // Kernels assume outputs do not overlap inputs, except in place (exactly an input's bytes)
  // for the opcodes that allow it; anything else is computed into scratch and copied over.
  bool inPlace = fb::writesInPlace(inst.op());
  std::vector<std::pair<size_t, uint32_t>> viaScratch; // (output position, buffer)
  std::span<const uint32_t> outputs = spanOf(inst.outputs()), inputs = spanOf(inst.inputs());
  scratch_.resize(std::max<size_t>(scratch_.size(), outputs.size()));
  for (uint32_t o : outputs) {
    bool conflict = false;
    for (uint32_t b : inputs)
      conflict = conflict || (overlaps(b, o) && !(inPlace && sameBytes(b, o)));
    if (!conflict) {
      out.push_back(ref(o));
      continue;
    }
    const BufferInfo &ob = buffers_[o];
    std::vector<uint64_t> &scratch = scratch_[out.size()];
    scratch.resize(std::max<size_t>(scratch.size(), (ob.bytes + 7) / 8));
    viaScratch.emplace_back(out.size(), o);
    out.push_back({ob.dtype, ob.shape, scratch.data()});
  }
  if (computesOnHalf(inst.op()) && (cpu::anyHalf(in) || cpu::anyHalf(out))) {
    // bf16/f16 arithmetic: the f32 kernel on widened inputs, its results rounded once.
    RETURN_IF_ERROR(cpu::computeInF32(
        in, out,
        [&](std::span<const cpu::TensorRef> wideIn, std::span<const cpu::TensorRef> wideOut) {
          return dispatch(inst, {wideIn.begin(), wideIn.end()}, {wideOut.begin(), wideOut.end()});
        }));
  } else {
    RETURN_IF_ERROR(dispatch(inst, in, out));
  }
  for (auto [position, o] : viaScratch)
    copyBytes(arena_.get() + buffers_[o].offset, scratch_[position].data(), buffers_[o].bytes);
  return Status::ok();
}

std::optional<Status> CpuExecutor::dispatchComm(const fb::Instruction &inst,
                                                const std::vector<cpu::TensorRef> &in,
                                                const std::vector<cpu::TensorRef> &outs) {
  using O = fb::Opcode;
  comm::Communicator &c = *comm_;
  switch (inst.op()) {
  case O::AllReduce: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return commops::allReduce(c, spanOf(a->axes()), commKind(a->kind()), in[0], outs[0]);
  }
  case O::AllGather: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return commops::allGather(c, spanOf(a->axes()), a->dim(), in[0], outs[0]);
  }
  case O::ReduceScatter: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return commops::reduceScatter(c, spanOf(a->axes()), commKind(a->kind()), a->dim(), in[0],
                                  outs[0]);
  }
  case O::AllToAll: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return commops::allToAll(c, spanOf(a->axes()), a->dim(), a->concat_dim(), in[0], outs[0]);
  }
  case O::ShardSlice: {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    return commops::shardSlice(c, spanOf(a->axes()), a->dim(), in[0], outs[0]);
  }
  case O::Send: {
    const fb::P2PAttrs *a = inst.attrs_as_P2PAttrs();
    return commops::send(c, a->axis(), a->shift(), a->tag(), in[0]);
  }
  case O::Recv: {
    const fb::P2PAttrs *a = inst.attrs_as_P2PAttrs();
    return commops::recv(c, a->axis(), a->shift(), a->tag(), outs[0]);
  }
  case O::Embedding:
  case O::EmbeddingGrad: {
    const fb::EmbeddingAttrs *a = inst.attrs_as_EmbeddingAttrs();
    if (!a || !a->vocab_axes() || a->vocab_axes()->size() == 0)
      return std::nullopt;
    if (inst.op() == O::Embedding)
      return commops::vocabEmbedding(c, spanOf(a->vocab_axes()), in[0], in[1], outs[0]);
    return commops::vocabEmbeddingGrad(c, spanOf(a->vocab_axes()), in[0], in[1], outs[0]);
  }
  case O::CrossEntropy:
  case O::CrossEntropyGrad: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    if (!a->vocab_axes() || a->vocab_axes()->size() == 0)
      return std::nullopt;
    std::optional<int64_t> ignore;
    if (a->has_ignore_index())
      ignore = a->ignore_index();
    if (inst.op() == O::CrossEntropy)
      return commops::vocabCrossEntropy(c, spanOf(a->vocab_axes()), in[0], in[1], ignore, outs[0]);
    return commops::vocabCrossEntropyGrad(c, spanOf(a->vocab_axes()), in[0], in[1], in[2], ignore,
                                          outs[0]);
  }
  default:
    return std::nullopt;
  }
}

Status CpuExecutor::dispatch(const fb::Instruction &inst, const std::vector<cpu::TensorRef> &in,
                             const std::vector<cpu::TensorRef> &outs) {
  using O = fb::Opcode;
  O op = inst.op();
  if (std::optional<Status> done = dispatchComm(inst, in, outs))
    return std::move(*done);
  const cpu::TensorRef &out = outs[0];
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
    return cpu::unary(static_cast<cpu::UnaryOp>(op), in[0], out);
  case O::Add:
  case O::Sub:
  case O::Mul:
  case O::Div:
  case O::Pow:
  case O::Min:
  case O::Max:
  case O::And:
  case O::Or:
    return cpu::binary(static_cast<cpu::BinaryOp>(int(op) - int(O::Add)), in[0], in[1], out);
  case O::Compare:
    return cpu::compare(
        static_cast<cpu::ComparePredicate>(inst.attrs_as_CompareAttrs()->predicate()), in[0], in[1],
        out);
  case O::Where:
    return cpu::where(in[0], in[1], in[2], out);
  case O::Copy:
    return cpu::copy(in[0], out);
  case O::Transpose:
    return cpu::transpose(in[0], spanOf(inst.attrs_as_TransposeAttrs()->perm()), out);
  case O::Slice:
    return cpu::slice(in[0], spanOf(inst.attrs_as_SliceAttrs()->starts()),
                      spanOf(inst.attrs_as_SliceAttrs()->strides()), out);
  case O::Concat:
    return cpu::concat(in, inst.attrs_as_AxisAttrs()->axis(), out);
  case O::Broadcast:
    return cpu::broadcast(in[0], out);
  case O::Cast:
    return cpu::cast(in[0], out);
  case O::Gather:
    return cpu::gather(in[0], in[1], inst.attrs_as_AxisAttrs()->axis(), out);
  case O::Reduce:
    return cpu::reduce(static_cast<cpu::ReduceKind>(inst.attrs_as_ReduceAttrs()->kind()), in[0],
                       spanOf(inst.attrs_as_ReduceAttrs()->axes()), out);
  case O::Softmax:
    return cpu::softmax(in[0], inst.attrs_as_AxisAttrs()->axis(), out);
  case O::MatMul:
    return cpu::matmul(in[0], in[1], out);
  case O::Linear:
    return cpu::linear(in[0], in[1], in.size() > 2 ? &in[2] : nullptr, out);
  case O::Embedding:
    return cpu::embedding(in[0], in[1], out);
  case O::LayerNorm:
    return cpu::layerNorm(in[0], in[1], in.size() > 2 ? &in[2] : nullptr,
                          inst.attrs_as_NormAttrs()->epsilon(), out);
  case O::RmsNorm:
    return cpu::rmsNorm(in[0], in[1], inst.attrs_as_NormAttrs()->epsilon(), out);
  case O::Attention: {
    const fb::AttentionAttrs *a = inst.attrs_as_AttentionAttrs();
    return cpu::attention(in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr, a->causal(),
                          a->scale(), out);
  }
  case O::Gelu:
    return cpu::gelu(in[0], inst.attrs_as_GeluAttrs()->tanh(), out);
  case O::Silu:
    return cpu::silu(in[0], out);
  case O::Rope:
    return cpu::rope(in[0], in[1], in[2], out);
  case O::CrossEntropy: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    std::optional<int64_t> ignore;
    if (a->has_ignore_index())
      ignore = a->ignore_index();
    return cpu::crossEntropy(in[0], in[1], ignore, out);
  }
  case O::Dropout: {
    const fb::DropoutAttrs *a = inst.attrs_as_DropoutAttrs();
    if (a->global_shape() && a->shard_dims()) {
      // Version 3: the shard's offset also depends on this rank's group index per dim.
      std::vector<int64_t> offset =
          shardOffset(comm_->mesh(), rank_, in[0].shape, spanOf(a->shard_offset()),
                      shardingOf(a->shard_dims()));
      return cpu::dropoutShard(in[0], in[1], a->ratio(), a->stream(), spanOf(a->global_shape()),
                               offset, out);
    }
    if (a->global_shape())
      return cpu::dropoutShard(in[0], in[1], a->ratio(), a->stream(), spanOf(a->global_shape()),
                               spanOf(a->shard_offset()), out);
    return cpu::dropout(in[0], in[1], a->ratio(), a->stream(), out);
  }
  case O::Pad: {
    const fb::PadAttrs *a = inst.attrs_as_PadAttrs();
    return cpu::pad(in[0], spanOf(a->low()), spanOf(a->high()), spanOf(a->interior()), out);
  }
  case O::LayerNormGrad:
    return cpu::layerNormGrad(in[0], in[1], in[2], inst.attrs_as_NormAttrs()->epsilon(), outs[0],
                              outs[1], outs[2]);
  case O::RmsNormGrad:
    return cpu::rmsNormGrad(in[0], in[1], in[2], inst.attrs_as_NormAttrs()->epsilon(), outs[0],
                            outs[1]);
  case O::AttentionGrad: {
    const fb::AttentionAttrs *a = inst.attrs_as_AttentionAttrs();
    bool masked = in.size() > 4;
    return cpu::attentionGrad(in[0], in[1], in[2], in[3], masked ? &in[4] : nullptr, a->causal(),
                              a->scale(), outs[0], outs[1], outs[2], masked ? &outs[3] : nullptr);
  }
  case O::GeluGrad:
    return cpu::geluGrad(in[0], in[1], inst.attrs_as_GeluAttrs()->tanh(), out);
  case O::SoftmaxGrad:
    return cpu::softmaxGrad(in[0], in[1], inst.attrs_as_AxisAttrs()->axis(), out);
  case O::CrossEntropyGrad: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    std::optional<int64_t> ignore;
    if (a->has_ignore_index())
      ignore = a->ignore_index();
    return cpu::crossEntropyGrad(in[0], in[1], in[2], ignore, out);
  }
  case O::EmbeddingGrad:
    return cpu::embeddingGrad(in[0], in[1], out);
  case O::AdamW: {
    const fb::AdamWAttrs *a = inst.attrs_as_AdamWAttrs();
    cpu::AdamWConfig config{a->beta1(), a->beta2(), a->eps(), a->weight_decay()};
    return cpu::adamw(in[0], in[1], in[2], in[3], in[4], in[5], config, outs[0], outs[1], outs[2]);
  }
  case O::GlobalNorm:
    return cpu::globalNorm(in, out);
  case O::ClipByNorm:
    return cpu::clipByNorm(in[0], in[1], inst.attrs_as_ClipAttrs()->max_norm(), out);
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
                       " is not supported by the CPU executor");
}

} // namespace

const char *backendName(Backend backend) { return backend == Backend::cuda ? "cuda" : "cpu"; }

StatusOr<std::unique_ptr<Executor>> Executor::create(const LoadedPlan &plan,
                                                     const ExecutorOptions &options) {
  if (options.backend == Backend::cuda)
    return cuda::createCudaExecutor(plan, options);
  auto executor = std::make_unique<CpuExecutor>();
  RETURN_IF_ERROR(executor->init(plan, options));
  return std::unique_ptr<Executor>(std::move(executor));
}

} // namespace megac::runtime
