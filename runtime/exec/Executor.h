// Executes one rank's program of a loaded plan on the CPU: one arena, the program's functions
// run one at a time, instructions in order; parameters and state persist across runs.
//
// A partitioned plan (docs/pipeline.md) runs one program per rank; its collectives go through
// ExecutorOptions::comm.
//
// A training step (docs/training-step.md) drives it like this:
//   executor->zeroState("grad.");
//   for each micro-batch: setInput(...); run("forward_backward"); output("loss");
//   setInput("lr", ...); setInput("step", ...); run("apply_gradients"); output("grad_norm");
#pragma once

#include "parallel/PipelineSchedule.h"
#include "runtime/plan/PlanLoader.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace megac::runtime {

namespace comm {
class Communicator;
struct Mesh;
} // namespace comm
class Trace;

/// Where a program runs: the CPU reference kernels (OpenBLAS), or one GPU (cuBLASLt, NCCL;
/// runtime/cuda, when built).
enum class Backend { cpu, cuda };
/// "cpu" / "cuda".
const char *backendName(Backend backend);

struct ExecutorOptions {
  Backend backend = Backend::cpu;
  /// The CUDA device (Backend::cuda); -1: cuda::defaultDeviceFor(rank).
  int device = -1;
  /// f32 GEMMs through TF32 tensor cores (Backend::cuda); off: exact f32.
  bool allowTf32 = false;
  /// The rank whose program runs (ignored with `comm`, whose rank it is; must then be 0 or equal).
  int rank = 0;
  /// The job's communicator, for collectives and pipeline transfers; it must outlive the
  /// executor and its mesh must be the plan's. Null: a one-rank view of the plan's mesh (groups
  /// of one rank only).
  comm::Communicator *comm = nullptr;
  /// How long a device collective may wait for its peers (Backend::cuda; NCCL's watchdog,
  /// runtime/cuda/NcclCommunicator.h): `megac train --comm-timeout`.
  std::chrono::seconds commTimeout{300};
  /// Parameter values by name. Parameters missing here are read from the plan's weights_file
  /// (if any), else initialized from their init spec with the plan's seed (runtime/init).
  const TensorMap *weights = nullptr;
  /// While it records (`megac train --trace`, runtime/exec/Trace.h): every function run and its
  /// instructions on the kernels lane, except the communication opcodes, which the communicator
  /// records when it is a tracing one (makeTracingCommunicator). Null: no tracing. Must outlive
  /// the executor.
  Trace *trace = nullptr;
};

/// A tensor's dtype and shape (an input's, as the plan expects it).
struct TensorInfo {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

/// Where this rank's shard of a parameter or state buffer lies in the whole tensor.
struct ShardInfo {
  std::vector<int64_t> globalShape;
  std::vector<int64_t> offset; // this rank's start, per dim
  std::vector<int64_t> shape;  // the shard's (local) shape: the valid box (shardBox)
  /// The buffer's shape where it is larger than the box: a padded shard (ZeRO-3), whose buffer
  /// holds the box then zeros (boxOfBuffer, bufferOfBox convert). Empty: `shape`.
  std::vector<int64_t> bufferShape = {};
};

class Executor {
public:
  static StatusOr<std::unique_ptr<Executor>> create(const LoadedPlan &plan,
                                                    const ExecutorOptions &options);
  virtual ~Executor() = default;

  /// Stores `value` for the input `name` (of any function); its dtype and shape must match the
  /// plan's. Every later run of a function with that input copies it in.
  virtual Status setInput(std::string_view name, const HostTensor &value) = 0;
  /// The same, taking `value` over instead of copying it (a stash or a received tensor the
  /// caller does not keep). By default a copy.
  virtual Status setInput(std::string_view name, HostTensor &&value) {
    return setInput(name, static_cast<const HostTensor &>(value));
  }
  /// Hands back the value last set for input `name` (no copy) and unsets it: the pipeline
  /// runner keeps what a later step reads again this way. A function reading it afterwards
  /// needs it set again.
  virtual StatusOr<HostTensor> takeInput(std::string_view name) = 0;
  /// Runs every instruction of `function`; an error names the instruction's opcode and
  /// location. Every input of the function must have been set. A failed run may leave
  /// parameters and state partly updated.
  virtual Status run(std::string_view function) = 0;
  /// Runs the program's only function, else its function "forward".
  virtual Status run() = 0;
  /// A copy of output `name`, valid from a successful run of its function until another
  /// function runs (functions share arena memory).
  virtual StatusOr<HostTensor> output(std::string_view name) const = 0;

  /// The function names, in plan order.
  virtual std::vector<std::string> functionNames() const = 0;
  /// Names of a function's inputs and outputs in plan order; with no function named, those of
  /// every function (inputs shared by several functions once).
  virtual std::vector<std::string> inputNames(std::string_view function = {}) const = 0;
  virtual std::vector<std::string> outputNames(std::string_view function = {}) const = 0;
  /// The dtype and shape input `name` must have.
  virtual StatusOr<TensorInfo> inputInfo(std::string_view name) const = 0;

  /// Parameters and state (gradient accumulators, optimizer moments), in plan order.
  virtual std::vector<std::string> parameterNames() const = 0;
  virtual std::vector<std::string> stateNames() const = 0;
  /// A copy of this rank's value (its shard) of a parameter or state buffer.
  virtual StatusOr<HostTensor> parameter(std::string_view name) const = 0;
  virtual StatusOr<HostTensor> state(std::string_view name) const = 0;
  /// Overwrites a parameter or state buffer; `value` must have its dtype and (shard) shape.
  virtual Status setParameter(std::string_view name, const HostTensor &value) = 0;
  virtual Status setState(std::string_view name, const HostTensor &value) = 0;
  /// Zeroes every state buffer whose name starts with `prefix` ("grad."; "" zeroes all).
  virtual Status zeroState(std::string_view prefix) = 0;

  /// The arena size (the planned peak, every buffer included).
  virtual uint64_t arenaBytes() const = 0;

  // ---- Partitioned plans (format version 3) ----

  /// This executor's rank and its mesh coordinates (empty for a mesh without axes).
  virtual int rank() const = 0;
  virtual std::vector<int64_t> coords() const = 0;
  /// The communicator its collectives use (ExecutorOptions::comm, or the one-rank view).
  virtual comm::Communicator &communicator() const = 0;
  /// A parameter's global shape and this rank's offset in it (from Parameter.sharding and the
  /// rank's coordinates, or shard_offset for single-rank plans).
  virtual StatusOr<ShardInfo> parameterShard(std::string_view name) const = 0;
  /// The same for a state buffer: its own global_shape and sharding when it has them; else a
  /// gradient accumulator "grad.<p>" takes parameter p's; else it is whole.
  virtual StatusOr<ShardInfo> stateShard(std::string_view name) const = 0;
  /// The mesh axes over which a state buffer (a gradient accumulator) or an output (the loss)
  /// is a partial sum; empty when it is complete.
  virtual StatusOr<std::vector<uint32_t>> statePartialAxes(std::string_view name) const = 0;
  virtual StatusOr<std::vector<uint32_t>> outputPartialAxes(std::string_view name) const = 0;
  /// The program's pipeline schedule (empty: run "forward_backward" per micro-batch).
  virtual std::vector<schedule::ScheduleStep> schedule() const = 0;
};

} // namespace megac::runtime
