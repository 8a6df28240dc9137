// The CPU executor: one 64-byte aligned arena per program, constants and parameters filled and
// state zeroed at creation, a function's instructions run in order on the reference kernels
// (runtime/cpu) through the per-opcode handlers of CpuHandlers.cpp. An input that nothing in a
// function writes is read where setInput left it, not copied into the arena (readsInPlace).
#include "runtime/exec/Executor.h"

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CudaExecutor.h"
#include "runtime/exec/CpuHandlers.h"
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

class CpuExecutor final : public exec::ProgramExecutor {
public:
  Status init(const LoadedPlan &plan, const ExecutorOptions &options);
  Status zeroState(std::string_view prefix) override;

private:
  cpu::TensorRef ref(uint32_t buffer) const {
    const exec::BufferInfo &b = buffers_[buffer];
    uint8_t *at = readFrom_[buffer];
    return {b.dtype, b.shape, at ? at : arena_.get() + b.offset};
  }
  /// A buffer an input read in place stands for: the input's own or a view inside its bytes.
  struct InPlaceView {
    uint32_t buffer;
    uint64_t offset; // bytes from the start of the input's value
  };
  /// The buffers through which `fn` reads `port`'s value, when every one of them may read it in
  /// the caller's HostTensor; nullopt when the value must be copied into the arena.
  std::optional<std::vector<InPlaceView>> readsInPlace(const Function &fn, const Port &port) const;
  StatusOr<HostTensor> copyOut(uint32_t buffer) const override;
  Status copyIn(uint32_t buffer, const HostTensor &value) override;
  Status runFunction(size_t index) override;
  /// `inputArgs`: the function event's args on what its inputs cost (runFunction).
  Status runFunctionTraced(size_t index, Trace::Clock::time_point start, std::string inputArgs);
  Status execute(const fb::Instruction &inst);
  std::string gemmTraceArgs(const fb::Instruction &inst) const;
  /// `, "bytes": N`: the bytes the instruction reads and writes, as the planner counts a
  /// memory-bound kernel's (tests/e2e/plan_kernels_test.py compares them): its input and output
  /// buffers, except that a slice reads only the part it writes.
  std::string operandBytesArg(const fb::Instruction &inst) const {
    uint64_t in = 0, out = 0;
    for (uint32_t b : spanOf(inst.inputs()))
      in += buffers_[b].bytes;
    for (uint32_t b : spanOf(inst.outputs()))
      out += buffers_[b].bytes;
    if (inst.op() == fb::Opcode::Slice || inst.op() == fb::Opcode::ShardSlice)
      in = out;
    return ", \"bytes\": " + std::to_string(in + out);
  }

  AlignedBytes arena_;
  /// Per function and input port, the views of it read in place (nullopt: copied in).
  std::vector<std::vector<std::optional<std::vector<InPlaceView>>>> inPlace_;
  /// Per buffer, where the running function reads it instead of the arena (null: the arena).
  std::vector<uint8_t *> readFrom_;
  std::vector<std::vector<uint64_t>> scratch_; // per output, for outputs that overlap an input
  exec::InFlight inFlight_;                    // asynchronous collectives started, not done
  /// The error when a function ended with collectives in flight (waiting for them first).
  Status endInFlight(size_t index);
  Trace *trace_ = nullptr; // ExecutorOptions::trace
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
  readFrom_.assign(buffers_.size(), nullptr);
  for (const Function &fn : functions_) {
    inPlace_.emplace_back();
    for (const Port &port : fn.inputs)
      inPlace_.back().push_back(readsInPlace(fn, port));
  }
  return zeroState("");
}

// Walks the function in order. While no instruction has written over the input's bytes, a read
// of them is a read of the input: through its own buffer or a view wholly inside it (kept, to
// be redirected too); a partial overlap, or another input port sharing the bytes, needs the
// copy. A write to the input or to one of its views (an in-place kernel) would change the
// caller's tensor: copied. Once another buffer is written over the bytes (the memory plan
// reuses them after the input's last read), later reads of the region are that buffer's and
// stay in the arena; a view read again after that, or an output port still showing the input,
// needs the copy.
std::optional<std::vector<CpuExecutor::InPlaceView>>
CpuExecutor::readsInPlace(const Function &fn, const Port &port) const {
  const BufferInfo &input = buffers_[port.buffer];
  if (!input.bytes)
    return std::nullopt;
  for (const Port &other : fn.inputs)
    if (other.buffer != port.buffer && overlaps(other.buffer, port.buffer))
      return std::nullopt;
  std::vector<InPlaceView> views = {{port.buffer, 0}};
  auto isView = [&](uint32_t b) {
    return std::any_of(views.begin(), views.end(), [&](const InPlaceView &v) { return v.buffer == b; });
  };
  bool live = true; // the bytes still hold the input
  if (fn.plan->instructions())
    for (const fb::Instruction *inst : *fn.plan->instructions()) {
      for (uint32_t b : spanOf(inst->inputs())) {
        if (!overlaps(b, port.buffer) || isView(b)) {
          if (!live && isView(b))
            return std::nullopt;
          continue;
        }
        const BufferInfo &v = buffers_[b];
        if (!live)
          continue; // a buffer written over the input's bytes after its last read
        if (v.offset < input.offset || v.offset + v.bytes > input.offset + input.bytes)
          return std::nullopt;
        views.push_back({b, v.offset - input.offset});
      }
      for (uint32_t o : spanOf(inst->outputs())) {
        if (!overlaps(o, port.buffer))
          continue;
        if (isView(o))
          return std::nullopt;
        live = false;
      }
    }
  for (const Port &out : fn.outputs)
    if (overlaps(out.buffer, port.buffer) && (live || isView(out.buffer)))
      return std::nullopt;
  return views;
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
  // An input is read in place (readsInPlace) or copied in on every run: the memory plan may
  // reuse its bytes once it is dead. The slot keeps the value until after the run.
  std::fill(readFrom_.begin(), readFrom_.end(), nullptr);
  uint64_t copied = 0, inPlace = 0;
  for (size_t i = 0; i < fn.inputs.size(); ++i) {
    const Port &port = fn.inputs[i];
    ASSIGN_OR_RETURN(const HostTensor *value, inputValue(fn, port));
    if (const auto &views = inPlace_[index][i]) {
      // Nothing writes these bytes (readsInPlace): the kernels' non-const pointer only reads.
      auto *bytes = const_cast<uint8_t *>(value->bytes.data());
      for (const InPlaceView &v : *views)
        readFrom_[v.buffer] = bytes + v.offset;
      inPlace += buffers_[port.buffer].bytes;
    } else {
      copyBytes(arena_.get() + buffers_[port.buffer].offset, value->bytes.data(),
                buffers_[port.buffer].bytes);
      copied += buffers_[port.buffer].bytes;
    }
  }
  if (tracing)
    return runFunctionTraced(index, start,
                             "\"input_bytes_copied\": " + std::to_string(copied) +
                                 ", \"input_bytes_read_in_place\": " + std::to_string(inPlace));
  if (fn.plan->instructions())
    for (size_t i = 0; i < fn.plan->instructions()->size(); ++i) {
      Status s = execute(*fn.plan->instructions()->Get(static_cast<flatbuffers::uoffset_t>(i)));
      if (!s.isOk()) {
        (void)inFlight_.completeAll(); // the first error is the one to report
        return Status::error(describeInstruction(*program_, programIndex_, index, i) + ": " +
                             s.message());
      }
    }
  RETURN_IF_ERROR(endInFlight(index));
  lastRun_ = index;
  return Status::ok();
}

// A GEMM instruction's shape for its trace event (`, "gemm": [m, n, k, batch]`, C[m,n] =
// A[m,k]·B[k,n]; a lhs with leading dims against a 2-D rhs is one GEMM of their rows), what
// tests/e2e/plan_kernels_test.py compares with the planner's inventory; "" for other opcodes.
std::string CpuExecutor::gemmTraceArgs(const fb::Instruction &inst) const {
  std::span<const uint32_t> in = spanOf(inst.inputs()), out = spanOf(inst.outputs());
  if (in.size() < 2 || out.empty())
    return "";
  auto numel = [](std::span<const int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  };
  std::span<const int64_t> a = buffers_[in[0]].shape, b = buffers_[in[1]].shape;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  if (inst.op() == fb::Opcode::Linear && !a.empty() && b.size() == 2) {
    k = a.back(), n = b[0], m = numel(a) / std::max<int64_t>(k, 1); // x·wᵀ, w [out, in]
  } else if (inst.op() == fb::Opcode::MatMul && a.size() >= 2 && b.size() >= 2) {
    const fb::MatMulAttrs *attrs = inst.attrs_as_MatMulAttrs();
    bool ta = attrs && attrs->transpose_lhs(), tb = attrs && attrs->transpose_rhs();
    int64_t rows = ta ? a[a.size() - 1] : a[a.size() - 2];
    k = ta ? a[a.size() - 2] : a[a.size() - 1];
    n = tb ? b[b.size() - 2] : b[b.size() - 1];
    if (b.size() == 2 && !ta) // leading dims of the lhs are rows of one GEMM
      m = numel(a) / std::max<int64_t>(k, 1);
    else
      m = rows, batch = numel(buffers_[out[0]].shape) / std::max<int64_t>(m * n, 1);
  } else {
    return "";
  }
  return ", \"gemm\": [" + std::to_string(m) + ", " + std::to_string(n) + ", " +
         std::to_string(k) + ", " + std::to_string(batch) + "]";
}

// runFunction's instruction loop, recording the function and each instruction on the trace's
// kernels lane (communication opcodes are the tracing communicator's to record).
Status CpuExecutor::runFunctionTraced(size_t index, Trace::Clock::time_point start,
                                      std::string inputArgs) {
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
      else if (!exec::cpuHandler(inst.op()).communicates)
        trace_->add(TraceLane::kernels, fb::EnumNameOpcode(inst.op()), "kernel", begin,
                    Trace::Clock::now(),
                    function + std::to_string(i) + operandBytesArg(inst) + gemmTraceArgs(inst));
    }
  trace_->setFunction("");
  trace_->add(TraceLane::kernels, fn.name, "function", start, Trace::Clock::now(),
              std::move(inputArgs));
  if (!status.isOk())
    (void)inFlight_.completeAll();
  else
    status = endInFlight(index);
  if (status.isOk())
    lastRun_ = index;
  return status;
}

Status CpuExecutor::endInFlight(size_t index) {
  if (inFlight_.empty())
    return Status::ok();
  size_t count = inFlight_.size();
  RETURN_IF_ERROR(inFlight_.completeAll());
  return Status::error(functions_[index].name + " ended with " + std::to_string(count) +
                       " collective(s) in flight: every start needs its CollectiveDone in the "
                       "same function (plan " +
                       source_ + ")");
}

Status CpuExecutor::execute(const fb::Instruction &inst) {
  scratch_.resize(std::max<size_t>(scratch_.size(), spanOf(inst.outputs()).size()));
  ASSIGN_OR_RETURN(InstructionTensors t,
                   tensorsOf(
                       inst, [this](uint32_t b) { return ref(b); },
                       [this](size_t position, uint64_t bytes) -> StatusOr<void *> {
                         std::vector<uint64_t> &scratch = scratch_[position];
                         scratch.resize(std::max<size_t>(scratch.size(), (bytes + 7) / 8));
                         return static_cast<void *>(scratch.data());
                       }));
  RETURN_IF_ERROR(exec::runCpuInstruction({inst, t.in, t.out, comm_, rank_, &inFlight_}));
  for (auto [position, o] : t.viaScratch)
    copyBytes(arena_.get() + buffers_[o].offset, t.out[position].data, buffers_[o].bytes);
  return Status::ok();
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
