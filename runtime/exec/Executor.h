// Executes one rank's program of a loaded plan on the CPU: one arena, instructions in order.
#pragma once

#include "runtime/Status.h"
#include "runtime/io/HostTensor.h"
#include "runtime/plan/PlanLoader.h"

#include <memory>
#include <string>
#include <string_view>

namespace megac::runtime {

struct ExecutorOptions {
  int rank = 0;
  /// Parameter values by name. Parameters missing here are read from the plan's weights_file
  /// (if any), else initialized from their init spec with the plan's seed (runtime/init).
  const TensorMap *weights = nullptr;
};

class Executor {
public:
  static StatusOr<std::unique_ptr<Executor>> create(const LoadedPlan &plan,
                                                    const ExecutorOptions &options);
  virtual ~Executor() = default;

  /// Copies `value` into the input `name`; its dtype and shape must match the plan's.
  virtual Status setInput(std::string_view name, const HostTensor &value) = 0;
  /// Runs every instruction; an error names the instruction's opcode and location.
  virtual Status run() = 0;
  /// A copy of output `name` after run().
  virtual StatusOr<HostTensor> output(std::string_view name) const = 0;
  /// Names of the program's inputs and outputs, in plan order.
  virtual std::vector<std::string> inputNames() const = 0;
  virtual std::vector<std::string> outputNames() const = 0;
  /// The arena size (the planned peak, every buffer included).
  virtual uint64_t arenaBytes() const = 0;
};

} // namespace megac::runtime
