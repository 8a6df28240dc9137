// Small plans for the microbenchmarks: a few buffers and one instruction, repeated, built with
// FlatBuffers and run by the backend's own executor, so a measurement includes what training
// pays per instruction (dispatch, shape checks, bf16 widening on the CPU, launches on a GPU).
#pragma once

#include "runtime/exec/Executor.h"
#include "runtime/plan/plan_generated.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace megac::runtime::calibrate {

namespace fb = megac::plan;

/// Builds an instruction's attrs table (a union member) inside the plan's builder.
using AttrsFn = std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder &)>;

struct BenchInstruction {
  fb::Opcode op = fb::Opcode::Copy;
  std::vector<uint32_t> inputs, outputs;
  fb::Attrs attrsType = fb::Attrs::NONE;
  AttrsFn attrs;
};

/// What a parameter holds when the executor is created.
enum class Fill {
  random,   // uniform in [-1, 1)
  positive, // uniform in [0.01, 1) (Adam's second moment)
  ones,
};

/// One role's program: its buffers in one arena and its functions.
class BenchProgram {
public:
  struct Buffer {
    std::string name;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    uint64_t offset = 0, bytes = 0;
  };

  /// A float operand: a parameter, filled per `fill` when the executor is created (weights()).
  uint32_t param(DType dtype, std::vector<int64_t> shape, Fill fill = Fill::random);
  /// An operand stored in the plan (ids, labels, seeds, lr, step): `values` in the dtype's bytes.
  uint32_t constant(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> values);
  /// A result, after every buffer so far.
  uint32_t temp(DType dtype, std::vector<int64_t> shape);
  /// A temporary at byte `offset` (a multiple of 64) of the arena, sharing bytes with any other
  /// temporary there: functions run one at a time, so each may use the bytes for itself.
  uint32_t tempAt(DType dtype, std::vector<int64_t> shape, uint64_t offset);
  /// Adds function `name` running `instructions` in order.
  void function(std::string name, std::vector<BenchInstruction> instructions);

  const Buffer &buffer(uint32_t index) const { return buffers_[index]; }
  /// The operand bytes plus result bytes of `inst` (the IR's CostOpInterface default: every
  /// operand read once, every result written once).
  double bytesOf(const BenchInstruction &inst) const;
  /// Values for the random and positive parameters (the others start from their init spec).
  TensorMap weights(uint64_t seed) const;

private:
  friend class BenchPlan;
  uint32_t add(DType dtype, std::vector<int64_t> shape);

  struct Param {
    uint32_t buffer;
    Fill fill;
  };
  struct Constant {
    uint32_t buffer;
    std::vector<uint8_t> data;
  };
  struct Function {
    std::string name;
    std::vector<BenchInstruction> instructions;
  };
  std::vector<Buffer> buffers_;
  std::vector<Param> params_;
  std::vector<Constant> constants_;
  std::vector<Function> functions_;
};

/// A plan of `ranks` ranks: one mesh axis "world" (none for one rank), `roles` programs, every
/// rank running role 0 until assign() says otherwise.
class BenchPlan {
public:
  explicit BenchPlan(int64_t ranks = 1, int roles = 1);
  BenchProgram &program(int role = 0) { return programs_[size_t(role)]; }
  const BenchProgram &program(int role = 0) const { return programs_[size_t(role)]; }
  void assign(int64_t rank, int role) { roleOfRank_[size_t(rank)] = role; }
  int roleOf(int64_t rank) const { return roleOfRank_[size_t(rank)]; }
  std::vector<uint8_t> build() const;

private:
  int64_t ranks_;
  std::vector<BenchProgram> programs_;
  std::vector<int> roleOfRank_;
};

/// `plan` loaded into an executor of `backend` for `rank` (`comm`: the job's communicator, whose
/// mesh is the plan's; null for a one-rank plan), its parameters filled.
StatusOr<std::unique_ptr<Executor>> loadBench(const BenchPlan &plan, Backend backend,
                                              bool allowTf32, int rank, comm::Communicator *comm);

/// `values` as the bytes of a constant of `dtype` (i64, i32 or f32).
std::vector<uint8_t> constantBytes(DType dtype, const std::vector<double> &values);

} // namespace megac::runtime::calibrate
