// The backend-independent half of an executor: one rank's program read from the plan (its
// buffers, functions and their ports, inputs set by name, parameters and state) and every
// Executor query that needs only those tables. A backend (CpuExecutor, cuda::CudaExecutor)
// adds the memory: it allocates the arena, copies tensors in and out, zeroes state and runs a
// function's instructions.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/plan_generated.h"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace megac::runtime::exec {

std::span<const int64_t> spanOf(const flatbuffers::Vector<int64_t> *v);
std::span<const uint32_t> spanOf(const flatbuffers::Vector<uint32_t> *v);
std::vector<uint32_t> vectorOf(const flatbuffers::Vector<uint32_t> *v);
/// "a, b, c" ("none" when empty), for error messages.
std::string joinNames(const std::vector<std::string> &names);

/// A buffer of the program's arena.
struct BufferInfo {
  DType dtype;
  std::span<const int64_t> shape; // points into the plan's bytes
  uint64_t offset;
  uint64_t bytes;
};

struct Port {
  std::string name;
  uint32_t buffer;
  std::vector<uint32_t> partialAxes; // outputs of partitioned plans
};

struct Function {
  std::string name;
  const megac::plan::Function *plan;
  std::vector<Port> inputs, outputs;
};

/// A value set by setInput, shared by every function with an input of that name.
struct InputSlot {
  uint32_t buffer; // the first port's buffer: its dtype and shape are the input's
  std::optional<HostTensor> value;
};

/// A parameter or state buffer.
struct Named {
  std::string name;
  uint32_t buffer;
  const void *plan; // its plan::Parameter or plan::StateBuffer
};

class ProgramExecutor : public Executor {
public:
  Status setInput(std::string_view name, const HostTensor &value) override;
  Status setInput(std::string_view name, HostTensor &&value) override;
  StatusOr<HostTensor> takeInput(std::string_view name) override;
  Status run(std::string_view function) override;
  Status run() override;
  StatusOr<HostTensor> output(std::string_view name) const override;
  std::vector<std::string> functionNames() const override;
  std::vector<std::string> inputNames(std::string_view function = {}) const override;
  std::vector<std::string> outputNames(std::string_view function = {}) const override;
  StatusOr<TensorInfo> inputInfo(std::string_view name) const override;
  std::vector<std::string> parameterNames() const override { return names(params_); }
  std::vector<std::string> stateNames() const override { return names(state_); }
  StatusOr<HostTensor> parameter(std::string_view name) const override;
  StatusOr<HostTensor> state(std::string_view name) const override;
  Status setParameter(std::string_view name, const HostTensor &value) override;
  Status setState(std::string_view name, const HostTensor &value) override;
  uint64_t arenaBytes() const override { return program_->arena_bytes(); }
  int rank() const override { return rank_; }
  std::vector<int64_t> coords() const override { return comm_->mesh().coordsOf(rank_); }
  comm::Communicator &communicator() const override { return *comm_; }
  StatusOr<ShardInfo> parameterShard(std::string_view name) const override;
  StatusOr<ShardInfo> stateShard(std::string_view name) const override;
  StatusOr<std::vector<uint32_t>> statePartialAxes(std::string_view name) const override;
  StatusOr<std::vector<uint32_t>> outputPartialAxes(std::string_view name) const override;
  std::vector<schedule::ScheduleStep> schedule() const override;

protected:
  /// Reads rank options.rank's (or options.comm's rank's) program into the tables; without
  /// options.comm, makes the one-rank view of the plan's mesh. Errors name the plan (source_).
  Status loadProgram(const LoadedPlan &plan, const ExecutorOptions &options);

  /// Backend: runs function `index` (every input set); sets lastRun_ = index on success.
  virtual Status runFunction(size_t index) = 0;
  /// Backend: a host copy of a buffer.
  virtual StatusOr<HostTensor> copyOut(uint32_t buffer) const = 0;
  /// Backend: writes `value` (already checked: the buffer's dtype, shape and bytes) into it.
  virtual Status copyIn(uint32_t buffer, const HostTensor &value) = 0;

  /// The error when `value` does not have buffer's dtype, shape and byte size; `what` names it.
  Status checkFits(uint32_t buffer, const HostTensor &value, const std::string &what) const;
  static const Named *find(const std::vector<Named> &list, std::string_view name);
  /// The value set for `port`, an input of `fn`; the error names both when none was set.
  StatusOr<const HostTensor *> inputValue(const Function &fn, const Port &port) const;
  bool overlaps(uint32_t a, uint32_t b) const {
    const BufferInfo &x = buffers_[a], &y = buffers_[b];
    return x.bytes && y.bytes && x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
  }
  bool sameBytes(uint32_t a, uint32_t b) const {
    return buffers_[a].offset == buffers_[b].offset && buffers_[a].bytes == buffers_[b].bytes;
  }
  /// An instruction's tensors as its kernel takes them (see tensorsOf).
  struct InstructionTensors {
    std::vector<cpu::TensorRef> in, out;
    std::vector<std::pair<size_t, uint32_t>> viaScratch; // (output position, its buffer)
  };
  /// The tensors of `inst`'s buffers, each `ref(buffer)`. Kernels assume outputs do not overlap
  /// inputs, except in place (exactly an input's bytes) for the opcodes that allow it; any other
  /// such output is computed into `scratch(position, bytes)` (a StatusOr<void *>) and listed in
  /// viaScratch, for the backend to copy over after the kernel.
  template <typename Ref, typename Scratch>
  StatusOr<InstructionTensors> tensorsOf(const megac::plan::Instruction &inst, Ref &&ref,
                                         Scratch &&scratch) const {
    InstructionTensors t;
    std::span<const uint32_t> outputs = spanOf(inst.outputs()), inputs = spanOf(inst.inputs());
    for (uint32_t b : inputs)
      t.in.push_back(ref(b));
    bool inPlace = megac::plan::writesInPlace(inst.op());
    // A MatMul with an accumulator may write over that input (its last) alone.
    bool accumulates = megac::plan::accumulatesInPlace(inst.op(), static_cast<int>(inputs.size()));
    for (uint32_t o : outputs) {
      bool conflict = false;
      for (size_t j = 0; j < inputs.size(); ++j) {
        uint32_t b = inputs[j];
        bool mayAlias = inPlace || (accumulates && j + 1 == inputs.size());
        conflict = conflict || (overlaps(b, o) && !(mayAlias && sameBytes(b, o)));
      }
      if (!conflict) {
        t.out.push_back(ref(o));
        continue;
      }
      const BufferInfo &ob = buffers_[o];
      ASSIGN_OR_RETURN(void *memory, scratch(t.out.size(), ob.bytes));
      t.viaScratch.emplace_back(t.out.size(), o);
      t.out.push_back({ob.dtype, ob.shape, memory});
    }
    return t;
  }
  const megac::plan::Instruction &instruction(const Function &f, size_t i) const {
    return *f.plan->instructions()->Get(static_cast<flatbuffers::uoffset_t>(i));
  }

  LoadedPlan plan_;    // a copy: the executor may outlive the caller's plan
  std::string source_; // "'path'" or "(from memory)", for messages
  const megac::plan::Program *program_ = nullptr;
  size_t programIndex_ = 0;
  std::vector<BufferInfo> buffers_;
  std::vector<Function> functions_;
  std::map<std::string, InputSlot, std::less<>> inputs_;
  std::vector<Named> params_, state_;
  std::optional<size_t> lastRun_; // the function whose outputs are in the arena
  int rank_ = 0;
  std::unique_ptr<comm::Communicator> ownComm_; // the one-rank view, without options.comm
  comm::Communicator *comm_ = nullptr;

private:
  static std::vector<std::string> names(const std::vector<Named> &list);
};

} // namespace megac::runtime::exec
