// The CPU executor: one 64-byte aligned arena per program, constants and parameters filled at
// creation, instructions run in order on the reference kernels (runtime/cpu).
#include "runtime/exec/Executor.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Parameters.h"
#include "runtime/plan/plan_generated.h"

#include <cstdlib>
#include <cstring>
#include <optional>

namespace megac::runtime {

namespace fb = megac::plan;

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
using AlignedBytes = std::unique_ptr<uint8_t, FreeDeleter>;

/// `bytes` zeroed bytes aligned to 64 (at least one cache line, so never null).
AlignedBytes allocateAligned(uint64_t bytes) {
  if (bytes > (uint64_t(1) << 62)) // no machine has that much; also keeps the rounding exact
    return nullptr;
  size_t size = static_cast<size_t>((bytes + 63) / 64 * 64);
  if (size == 0)
    size = 64;
  auto *p = static_cast<uint8_t *>(std::aligned_alloc(64, size));
  if (p)
    std::memset(p, 0, size);
  return AlignedBytes(p);
}

/// memcpy that accepts an empty range with null pointers (an empty tensor's data).
void copyBytes(void *dst, const void *src, size_t n) {
  if (n)
    std::memcpy(dst, src, n);
}

std::span<const int64_t> spanOf(const flatbuffers::Vector<int64_t> *v) {
  if (!v)
    return {};
  return {v->data(), v->size()};
}

struct BufferInfo {
  DType dtype;
  std::span<const int64_t> shape; // points into the plan's bytes
  uint64_t offset;
  uint64_t bytes;
};

struct Port {
  std::string name;
  uint32_t buffer;
};

class CpuExecutor final : public Executor {
public:
  Status init(const LoadedPlan &plan, const ExecutorOptions &options);

  Status setInput(std::string_view name, const HostTensor &value) override;
  Status run() override;
  StatusOr<HostTensor> output(std::string_view name) const override;
  std::vector<std::string> inputNames() const override { return names(inputs_); }
  std::vector<std::string> outputNames() const override { return names(outputs_); }
  uint64_t arenaBytes() const override { return program_->arena_bytes(); }

private:
  static std::vector<std::string> names(const std::vector<Port> &ports) {
    std::vector<std::string> out;
    for (const Port &p : ports)
      out.push_back(p.name);
    return out;
  }
  cpu::TensorRef ref(uint32_t buffer, uint8_t *base) const {
    const BufferInfo &b = buffers_[buffer];
    return {b.dtype, b.shape, base + b.offset};
  }
  bool overlaps(uint32_t a, uint32_t b) const {
    const BufferInfo &x = buffers_[a], &y = buffers_[b];
    return x.bytes && y.bytes && x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
  }
  Status execute(const fb::Instruction &inst);
  Status dispatch(const fb::Instruction &inst, const std::vector<cpu::TensorRef> &in,
                  const cpu::TensorRef &out);

  LoadedPlan plan_; // a copy: the executor may outlive the caller's plan
  const fb::Program *program_ = nullptr;
  size_t programIndex_ = 0;
  std::vector<BufferInfo> buffers_;
  AlignedBytes arena_;
  std::vector<Port> inputs_, outputs_;
  std::vector<std::optional<HostTensor>> inputValues_; // copied into the arena by each run()
  std::vector<uint64_t> scratch_;                      // for outputs that overlap an input
  bool ran_ = false;
};

Status CpuExecutor::init(const LoadedPlan &plan, const ExecutorOptions &options) {
  plan_ = plan;
  const fb::Plan &p = plan_.plan();
  std::string source = plan_.path().empty() ? "(from memory)" : "'" + plan_.path() + "'";
  size_t ranks = p.ranks()->size();
  if (options.rank < 0 || static_cast<size_t>(options.rank) >= ranks)
    return Status::error("plan " + source + ": rank " + std::to_string(options.rank) +
                         " is not in the rank table (" + std::to_string(ranks) + " ranks)");
  programIndex_ = p.ranks()->Get(static_cast<flatbuffers::uoffset_t>(options.rank))->role();
  program_ = p.programs()->Get(static_cast<flatbuffers::uoffset_t>(programIndex_));
  if (program_->buffers())
    for (const fb::Buffer *b : *program_->buffers())
      buffers_.push_back(
          {static_cast<DType>(b->dtype()), spanOf(b->shape()), b->offset(), b->bytes()});
  arena_ = allocateAligned(program_->arena_bytes());
  if (!arena_)
    return Status::error("plan " + source + ": cannot allocate the " +
                         describeProgram(*program_, programIndex_) + " arena of " +
                         std::to_string(program_->arena_bytes()) + " bytes");
  if (program_->constants())
    for (const fb::Constant *c : *program_->constants())
      if (c->data())
        copyBytes(arena_.get() + buffers_[c->buffer()].offset, c->data()->data(),
                  c->data()->size());
  RETURN_IF_ERROR(fillParameters(plan_, programIndex_, arena_.get(), options.weights))
      << " (plan " << source << ", " << describeProgram(*program_, programIndex_) << ")";
  if (program_->inputs())
    for (const fb::Port *port : *program_->inputs())
      inputs_.push_back({port->name()->str(), port->buffer()});
  if (program_->outputs())
    for (const fb::Port *port : *program_->outputs())
      outputs_.push_back({port->name()->str(), port->buffer()});
  inputValues_.resize(inputs_.size());
  return Status::ok();
}

Status CpuExecutor::setInput(std::string_view name, const HostTensor &value) {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].name != name)
      continue;
    const BufferInfo &b = buffers_[inputs_[i].buffer];
    if (value.dtype != b.dtype ||
        !std::equal(value.shape.begin(), value.shape.end(), b.shape.begin(), b.shape.end()))
      return Status::error("input '" + std::string(name) + "' must be " + dtypeName(b.dtype) + " " +
                           shapeString(b.shape) + ", got " + dtypeName(value.dtype) + " " +
                           shapeString(value.shape));
    if (value.bytes.size() != b.bytes)
      return Status::error("input '" + std::string(name) + "' has " +
                           std::to_string(value.bytes.size()) + " bytes, expected " +
                           std::to_string(b.bytes));
    inputValues_[i] = value;
    return Status::ok();
  }
  std::string known;
  for (const Port &p : inputs_)
    known += (known.empty() ? "" : ", ") + p.name;
  return Status::error("the program has no input '" + std::string(name) +
                       "' (inputs: " + (known.empty() ? "none" : known) + ")");
}

Status CpuExecutor::run() {
  ran_ = false;
  // Inputs are copied in on every run: the memory plan may reuse their bytes once they are dead.
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (!inputValues_[i])
      return Status::error("input '" + inputs_[i].name + "' was not set before run()");
    const BufferInfo &b = buffers_[inputs_[i].buffer];
    copyBytes(arena_.get() + b.offset, inputValues_[i]->bytes.data(), b.bytes);
  }
  if (program_->instructions())
    for (size_t i = 0; i < program_->instructions()->size(); ++i) {
      Status s = execute(*program_->instructions()->Get(static_cast<flatbuffers::uoffset_t>(i)));
      if (!s.isOk())
        return Status::error(describeInstruction(*program_, programIndex_, i) + ": " + s.message());
    }
  ran_ = true;
  return Status::ok();
}

StatusOr<HostTensor> CpuExecutor::output(std::string_view name) const {
  for (const Port &p : outputs_) {
    if (p.name != name)
      continue;
    if (!ran_)
      return Status::error("output '" + std::string(name) + "' read before a successful run()");
    const BufferInfo &b = buffers_[p.buffer];
    HostTensor t;
    t.dtype = b.dtype;
    t.shape.assign(b.shape.begin(), b.shape.end());
    t.bytes.assign(arena_.get() + b.offset, arena_.get() + b.offset + b.bytes);
    return t;
  }
  return Status::error("the program has no output '" + std::string(name) + "'");
}

Status CpuExecutor::execute(const fb::Instruction &inst) {
  uint32_t outBuffer = inst.outputs()->Get(0);
  std::vector<cpu::TensorRef> in;
  bool overlap = false;
  for (uint32_t b : *inst.inputs()) {
    in.push_back(ref(b, arena_.get()));
    overlap = overlap || overlaps(b, outBuffer);
  }
  if (!overlap)
    return dispatch(inst, in, ref(outBuffer, arena_.get()));
  // Kernels assume outputs do not alias inputs; compute into scratch and copy over.
  const BufferInfo &ob = buffers_[outBuffer];
  scratch_.resize(std::max<size_t>(scratch_.size(), (ob.bytes + 7) / 8));
  cpu::TensorRef out{ob.dtype, ob.shape, scratch_.data()};
  RETURN_IF_ERROR(dispatch(inst, in, out));
  copyBytes(arena_.get() + ob.offset, scratch_.data(), ob.bytes);
  return Status::ok();
}

Status CpuExecutor::dispatch(const fb::Instruction &inst, const std::vector<cpu::TensorRef> &in,
                             const cpu::TensorRef &out) {
  using O = fb::Opcode;
  O op = inst.op();
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
  case O::CrossEntropy: {
    const fb::CrossEntropyAttrs *a = inst.attrs_as_CrossEntropyAttrs();
    std::optional<int64_t> ignore;
    if (a->has_ignore_index())
      ignore = a->ignore_index();
    return cpu::crossEntropy(in[0], in[1], ignore, out);
  }
  case O::Dropout: {
    const fb::DropoutAttrs *a = inst.attrs_as_DropoutAttrs();
    return cpu::dropout(in[0], in[1], a->ratio(), a->stream(), out);
  }
  }
  return Status::error("opcode " + std::to_string(int(op)) +
                       " is not supported by the CPU executor");
}

} // namespace

StatusOr<std::unique_ptr<Executor>> Executor::create(const LoadedPlan &plan,
                                                     const ExecutorOptions &options) {
  auto executor = std::make_unique<CpuExecutor>();
  RETURN_IF_ERROR(executor->init(plan, options));
  return std::unique_ptr<Executor>(std::move(executor));
}

} // namespace megac::runtime
