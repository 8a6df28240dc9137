// Internal to codegen/: lowering a module's funcs into one plan Program (buffers, persistent
// parameters and state, functions with their ports and instructions), then planning memory.
#pragma once

#include "codegen/MemoryPlanner.h"
#include "ir/MegaDialect.h"
#include "parallel/PipelineSchedule.h"
#include "runtime/plan/plan_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace megac::codegen::detail {

namespace fb = flatbuffers;
namespace pl = megac::plan;

std::optional<pl::DType> dtypeOf(mlir::Type type);
uint64_t dtypeBytes(pl::DType dtype);
/// "name (file:line)", "name", "file:line" or "" from an MLIR location.
std::string locationString(mlir::Location loc);

struct BufferInfo {
  std::string name;
  pl::DType dtype = pl::DType::f32;
  std::vector<int64_t> shape;
  BufferRequest request;
};

struct InstructionInfo {
  pl::Opcode op = pl::Opcode::Copy;
  std::vector<uint32_t> inputs, outputs;
  pl::Attrs attrsType = pl::Attrs::NONE;
  fb::Offset<void> attrs;
  std::string location;
};

/// How a partitioned tensor is split (docs/pipeline.md): its global shape and, per split dim,
/// the mesh axes (indices into the plan's mesh). Empty for single-rank plans.
struct ShardingInfo {
  std::vector<int64_t> globalShape;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> dims;
  std::vector<uint32_t> partialAxes;
};

struct ParameterInfo {
  std::string name;
  uint32_t buffer = 0;
  mlir::Type type;
  pl::InitKind init = pl::InitKind::none;
  double initStd = 0.0;
  bool hasInit = false;
  ShardingInfo sharding;
  std::vector<int64_t> sourceShape; // mega.source_shape; empty when the IR's shape is the model's
};

struct StateInfo {
  std::string name;
  uint32_t buffer = 0;
  mlir::Type type;
  ShardingInfo sharding;
};

struct PortInfo {
  std::string name;
  uint32_t buffer = 0;
  std::vector<uint32_t> partialAxes;
};

struct ConstantInfo {
  uint32_t buffer = 0;
  fb::Offset<fb::Vector<uint8_t>> data;
};

struct FunctionInfo {
  std::string name;
  std::vector<PortInfo> inputs, outputs;
  std::vector<InstructionInfo> instructions;
};

/// Lowers funcs one after another into one program; attribute tables and constant bytes go into
/// the builder as they are met, everything else is serialized by finish().
class ProgramLowering {
public:
  /// `mesh`: the plan's mesh when the module is partitioned (axis names resolve to its indices).
  ProgramLowering(mlir::ModuleOp module, size_t functionCount, fb::FlatBufferBuilder &fbb,
                  mega::MeshAttr mesh = {})
      : module_(module), functionCount_(functionCount), fbb_(fbb), mesh_(mesh) {}

  /// The pipeline schedule of this program's role (written by finish()).
  void setSchedule(std::vector<schedule::ScheduleStep> steps) { schedule_ = std::move(steps); }

  /// Lowers one func into the next Function of the program.
  mlir::LogicalResult lowerFunction(mlir::func::FuncOp func);
  /// Plans memory and writes the Program table.
  mlir::FailureOr<fb::Offset<pl::Program>> finish();

  // For the op lowerings (OpLowering.cpp).
  fb::FlatBufferBuilder &builder() { return fbb_; }
  /// One instruction: the op's operands in order as inputs, its results as outputs.
  mlir::LogicalResult emit(mlir::Operation *op, pl::Opcode opcode,
                           pl::Attrs attrsType = pl::Attrs::NONE, fb::Offset<void> attrs = {});
  /// One instruction with AxisAttrs holding `axis` made non-negative.
  mlir::LogicalResult emitWithAxis(mlir::Operation *op, pl::Opcode opcode, int64_t axis,
                                   int64_t rank);
  /// Mesh axis indices of axis names (an array of strings); failure if a name is not an axis.
  mlir::FailureOr<std::vector<uint32_t>> meshAxes(mlir::Operation *op, mlir::ArrayAttr names);
  /// The sharding recorded on a function argument (mega.global_shape, mega.dim_axes,
  /// mega.grad_partial).
  mlir::FailureOr<ShardingInfo> argumentSharding(mlir::BlockArgument arg);

private:
  /// A parameter or state argument that a `mega.updates` result replaces.
  struct Update {
    unsigned result; // the result index
    mlir::BlockArgument target;
    std::string name;                  // the parameter or state name
    uint32_t buffer;                   // its persistent buffer
    mlir::Value value;                 // the new value
    std::optional<int64_t> writtenAt;  // the instruction that writes it (none: a no-op)
    mlir::Operation *writer = nullptr; // the op whose instruction writes it in place, if any
  };

  mlir::FailureOr<uint32_t> addBuffer(mlir::Value value, std::string name, mlir::Location loc);
  mlir::FailureOr<BufferInfo> describeBuffer(mlir::Type type, std::string name, mlir::Location loc);
  std::string valueName(mlir::Value value);
  uint32_t use(mlir::Value value, int64_t instruction);
  std::string portName(const char *kind, unsigned index);

  mlir::LogicalResult lowerArguments();
  mlir::LogicalResult lowerPersistentArgument(mlir::BlockArgument arg, bool isParam,
                                              mlir::StringAttr name, mlir::Attribute init);
  mlir::LogicalResult collectUpdates(mlir::func::ReturnOp ret);
  mlir::LogicalResult lowerOp(mlir::Operation *op);
  mlir::LogicalResult lowerConstant(mlir::Operation *op, mlir::Value result, mlir::Attribute value);
  mlir::LogicalResult lowerReshape(mlir::Value input, mlir::Value result, mlir::Location loc);
  mlir::LogicalResult lowerReturn(mlir::func::ReturnOp op);
  mlir::LogicalResult checkUpdateOrder(mlir::func::ReturnOp op);

  mlir::ModuleOp module_;
  size_t functionCount_;
  fb::FlatBufferBuilder &fbb_;
  mega::MeshAttr mesh_;
  std::vector<schedule::ScheduleStep> schedule_;

  // The program.
  std::vector<BufferInfo> buffers_;
  std::vector<ParameterInfo> parameters_;
  std::vector<StateInfo> state_;
  llvm::StringMap<size_t> parameterIndex_, stateIndex_;
  std::vector<ConstantInfo> constants_;
  std::vector<FunctionInfo> functions_;
  llvm::StringMap<uint32_t> inputBuffers_;    // input name -> the first port's buffer
  llvm::StringMap<std::string> outputOwners_; // output name -> its function

  // The function being lowered.
  mlir::func::FuncOp func_;
  std::unique_ptr<mlir::AsmState> asmState_;
  llvm::DenseMap<mlir::Value, uint32_t> bufferOf_;
  llvm::DenseMap<mlir::Operation *, int64_t> instructionOf_;
  llvm::StringMap<mlir::BlockArgument> persistentArgs_; // this function's params and state
  llvm::SmallVector<Update> updates_;
  /// New values an in-place-capable producer writes straight into a persistent buffer.
  llvm::DenseMap<mlir::Value, size_t> updateOf_; // value -> index into updates_
};

} // namespace megac::codegen::detail
