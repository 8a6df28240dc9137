// Lowering a single-rank mega function to a FlatBuffers plan: buffers, liveness, instructions.
#include "codegen/PlanWriter.h"

#include "codegen/MemoryPlanner.h"
#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"
#include "runtime/plan/plan_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace megac::codegen {

namespace {

namespace fb = flatbuffers;
namespace pl = megac::plan;
using mlir::failure;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::success;
using mlir::Value;

// Constant bytes are copied from MLIR's host-order storage; plans are little-endian.
static_assert(std::endian::native == std::endian::little, "codegen assumes a little-endian host");

constexpr const char *kProducer = "megac 0.1";
/// Optional module attribute: the #mega.mesh a single-rank plan runs on (one device).
constexpr const char *kModuleMeshAttr = "mega.mesh";

std::optional<pl::DType> dtypeOf(mlir::Type type) {
  if (type.isF64())
    return pl::DType::f64;
  if (type.isF32())
    return pl::DType::f32;
  if (type.isBF16())
    return pl::DType::bf16;
  if (type.isF16())
    return pl::DType::f16;
  if (type.isSignlessInteger(64))
    return pl::DType::i64;
  if (type.isSignlessInteger(32))
    return pl::DType::i32;
  if (type.isSignlessInteger(1))
    return pl::DType::i1;
  return std::nullopt;
}

uint64_t dtypeBytes(pl::DType dtype) {
  switch (dtype) {
  case pl::DType::f64:
  case pl::DType::i64:
    return 8;
  case pl::DType::f32:
  case pl::DType::i32:
    return 4;
  case pl::DType::bf16:
  case pl::DType::f16:
    return 2;
  case pl::DType::i1:
    return 1;
  }
  return 0;
}

/// "name (file:line)", "name", "file:line" or "" from an MLIR location.
std::string locationString(mlir::Location loc) {
  if (auto name = mlir::dyn_cast<mlir::NameLoc>(loc)) {
    std::string child = locationString(name.getChildLoc());
    std::string text = name.getName().str();
    return child.empty() ? text : text + " (" + child + ")";
  }
  if (auto file = mlir::dyn_cast<mlir::FileLineColRange>(loc))
    return file.getFilename().str() + ":" + std::to_string(file.getStartLine());
  if (auto call = mlir::dyn_cast<mlir::CallSiteLoc>(loc))
    return locationString(call.getCallee());
  if (auto fused = mlir::dyn_cast<mlir::FusedLoc>(loc)) {
    std::string text;
    for (mlir::Location part : fused.getLocations()) {
      std::string piece = locationString(part);
      if (!piece.empty())
        text += (text.empty() ? "" : "; ") + piece;
    }
    return text;
  }
  if (auto opaque = mlir::dyn_cast<mlir::OpaqueLoc>(loc))
    return locationString(opaque.getFallbackLocation());
  return {};
}

pl::ComparePredicate comparePredicate(mega::ComparePredicate predicate) {
  switch (predicate) {
  case mega::ComparePredicate::eq:
    return pl::ComparePredicate::eq;
  case mega::ComparePredicate::ne:
    return pl::ComparePredicate::ne;
  case mega::ComparePredicate::lt:
    return pl::ComparePredicate::lt;
  case mega::ComparePredicate::le:
    return pl::ComparePredicate::le;
  case mega::ComparePredicate::gt:
    return pl::ComparePredicate::gt;
  case mega::ComparePredicate::ge:
    return pl::ComparePredicate::ge;
  }
  return pl::ComparePredicate::eq;
}

pl::ReduceKind reduceKind(mega::ReduceKind kind) {
  switch (kind) {
  case mega::ReduceKind::sum:
    return pl::ReduceKind::sum;
  case mega::ReduceKind::mean:
    return pl::ReduceKind::mean;
  case mega::ReduceKind::max:
    return pl::ReduceKind::max;
  case mega::ReduceKind::min:
    return pl::ReduceKind::min;
  }
  return pl::ReduceKind::sum;
}

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

struct ParameterInfo {
  std::string name;
  uint32_t buffer = 0;
  pl::InitKind init = pl::InitKind::none;
  double initStd = 0.0;
};

struct PortInfo {
  std::string name;
  uint32_t buffer = 0;
};

struct ConstantInfo {
  uint32_t buffer = 0;
  fb::Offset<fb::Vector<uint8_t>> data;
};

/// Lowers one function into the program tables; attribute tables and constant bytes go into the
/// builder as they are met, everything else is serialized by finish().
class ProgramLowering {
public:
  ProgramLowering(mlir::func::FuncOp func, fb::FlatBufferBuilder &fbb)
      : func_(func), fbb_(fbb), asmState_(func) {}

  LogicalResult lower();
  /// Plans memory and writes the Program table.
  mlir::FailureOr<fb::Offset<pl::Program>> finish();

private:
  mlir::FailureOr<uint32_t> addBuffer(Value value, std::string name, mlir::Location loc);
  std::string valueName(Value value);
  uint32_t use(Value value, int64_t instruction);

  LogicalResult lowerArguments();
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerConstant(mega::ConstantOp op);
  LogicalResult lowerReturn(mlir::func::ReturnOp op);
  /// One instruction: the op's operands in order as inputs, its results as outputs.
  LogicalResult emit(Operation *op, pl::Opcode opcode, pl::Attrs attrsType = pl::Attrs::NONE,
                     fb::Offset<void> attrs = {});
  /// One instruction with AxisAttrs holding `axis` made non-negative.
  LogicalResult emitWithAxis(Operation *op, pl::Opcode opcode, int64_t axis, int64_t rank);

  mlir::func::FuncOp func_;
  fb::FlatBufferBuilder &fbb_;
  mlir::AsmState asmState_;
  llvm::DenseMap<Value, uint32_t> bufferOf_;
  std::vector<BufferInfo> buffers_;
  std::vector<InstructionInfo> instructions_;
  std::vector<ParameterInfo> parameters_;
  std::vector<PortInfo> inputs_, outputs_;
  std::vector<ConstantInfo> constants_;
};

std::string ProgramLowering::valueName(Value value) {
  std::string name;
  llvm::raw_string_ostream os(name);
  value.printAsOperand(os, asmState_);
  return name;
}

mlir::FailureOr<uint32_t> ProgramLowering::addBuffer(Value value, std::string name,
                                                     mlir::Location loc) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape())
    return mlir::emitError(loc) << "codegen needs statically shaped tensors, got "
                                << value.getType();
  auto dtype = dtypeOf(type.getElementType());
  if (!dtype)
    return mlir::emitError(loc) << "element type " << type.getElementType()
                                << " has no plan dtype (f64, f32, bf16, f16, i64, i32, i1)";
  if (auto sharding = mlir::dyn_cast_or_null<mega::ShardingAttr>(type.getEncoding());
      sharding && sharding.getMesh().getNumDevices() != 1)
    return mlir::emitError(loc) << "value of type " << type << " is laid out over "
                                << sharding.getMesh().getNumDevices()
                                << " devices; a single-rank plan needs per-rank shapes";
  BufferInfo buffer;
  buffer.name = std::move(name);
  buffer.dtype = *dtype;
  buffer.shape.assign(type.getShape().begin(), type.getShape().end());
  uint64_t elements = 1;
  for (int64_t dim : buffer.shape)
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements))
      return mlir::emitError(loc) << "tensor " << type << " is too large";
  if (__builtin_mul_overflow(elements, dtypeBytes(*dtype), &buffer.request.bytes))
    return mlir::emitError(loc) << "tensor " << type << " is too large";
  uint32_t index = buffers_.size();
  buffers_.push_back(std::move(buffer));
  bufferOf_[value] = index;
  return index;
}

uint32_t ProgramLowering::use(Value value, int64_t instruction) {
  uint32_t index = bufferOf_.at(value);
  BufferRequest &request = buffers_[index].request;
  request.lastUse = std::max(request.lastUse, instruction);
  return index;
}

LogicalResult ProgramLowering::lowerArguments() {
  bool ok = true;
  llvm::StringSet<> paramNames, inputNames;
  for (auto [i, arg] : llvm::enumerate(func_.getArguments())) {
    auto param = func_.getArgAttrOfType<mlir::StringAttr>(i, mega::kParamAttr);
    auto input = func_.getArgAttrOfType<mlir::StringAttr>(i, mega::kInputAttr);
    auto init = func_.getArgAttr(i, mega::kInitAttr);
    mlir::Location loc = arg.getLoc();
    if (param && input) {
      mlir::emitError(loc) << "argument " << i << " is both a parameter and an input";
      ok = false;
      continue;
    }
    if (init && !param) {
      mlir::emitError(loc) << "argument " << i << " has " << mega::kInitAttr << " but no "
                           << mega::kParamAttr << " name";
      ok = false;
      continue;
    }
    std::string name = param ? param.str() : input ? input.str() : "input_" + std::to_string(i);
    auto buffer = addBuffer(arg, name, loc);
    if (failed(buffer)) {
      ok = false;
      continue;
    }
    buffers_[*buffer].request.pinned = true;
    if (!param) {
      if (!inputNames.insert(name).second) {
        mlir::emitError(loc) << "two inputs are named '" << name << "'";
        ok = false;
      }
      inputs_.push_back({name, *buffer});
      continue;
    }
    if (!paramNames.insert(name).second) {
      mlir::emitError(loc) << "two parameters are named '" << name << "'";
      ok = false;
    }
    ParameterInfo info{name, *buffer, pl::InitKind::none, 0.0};
    if (init) {
      auto spec = mlir::dyn_cast<mega::InitAttr>(init);
      if (!spec) {
        mlir::emitError(loc) << mega::kInitAttr << " of parameter '" << name
                             << "' is not a #mega.init";
        ok = false;
        continue;
      }
      switch (spec.getKind()) {
      case mega::InitKind::normal:
        info.init = pl::InitKind::normal;
        info.initStd = spec.getStddev().convertToDouble();
        break;
      case mega::InitKind::zeros:
        info.init = pl::InitKind::zeros;
        break;
      case mega::InitKind::ones:
        info.init = pl::InitKind::ones;
        break;
      }
    }
    parameters_.push_back(std::move(info));
  }
  return mlir::success(ok);
}

LogicalResult ProgramLowering::lowerConstant(mega::ConstantOp op) {
  auto buffer = addBuffer(op.getResult(), valueName(op.getResult()), op.getLoc());
  if (failed(buffer))
    return failure();
  BufferInfo &info = buffers_[*buffer];
  info.request.pinned = true;
  uint64_t size = info.request.bytes;
  uint8_t *out = nullptr;
  fb::Offset<fb::Vector<uint8_t>> data = fbb_.CreateUninitializedVector(size, &out);
  mlir::Attribute value = op.getValue();
  if (auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(value)) {
    if (info.dtype == pl::DType::i1) {
      // MLIR packs i1 densely; the plan stores one byte (0 or 1) per element.
      for (auto [i, bit] : llvm::enumerate(dense.getValues<bool>()))
        out[i] = bit ? 1 : 0;
    } else {
      llvm::ArrayRef<char> raw = dense.getRawData();
      uint64_t element = dtypeBytes(info.dtype);
      if (raw.size() != (dense.isSplat() ? element : size))
        return op.emitOpError() << "constant storage holds " << raw.size()
                                << " bytes; codegen expects " << size;
      if (dense.isSplat()) {
        for (uint64_t at = 0; at < size; at += element)
          std::memcpy(out + at, raw.data(), element);
      } else {
        std::memcpy(out, raw.data(), size);
      }
    }
  } else if (auto resource = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(value)) {
    mlir::AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return op.emitOpError() << "resource constant '" << resource.getRawHandle().getKey()
                              << "' has no data (elided?)";
    llvm::ArrayRef<char> raw = blob->getData();
    if (info.dtype == pl::DType::i1 || raw.size() != size)
      return op.emitOpError() << "resource constant '" << resource.getRawHandle().getKey()
                              << "' holds " << raw.size() << " bytes; codegen expects " << size;
    std::memcpy(out, raw.data(), size);
  } else {
    return op.emitOpError() << "codegen supports dense and dense_resource constants, not " << value;
  }
  constants_.push_back({*buffer, data});
  return success();
}

LogicalResult ProgramLowering::lowerReturn(mlir::func::ReturnOp op) {
  llvm::StringSet<> names;
  bool ok = true;
  for (auto [i, value] : llvm::enumerate(op.getOperands())) {
    auto name = func_.getResultAttrOfType<mlir::StringAttr>(i, mega::kOutputAttr);
    std::string text = name ? name.str() : "output_" + std::to_string(i);
    if (!names.insert(text).second) {
      op.emitOpError() << "two outputs are named '" << text << "'";
      ok = false;
    }
    uint32_t buffer = bufferOf_.at(value);
    buffers_[buffer].request.pinned = true;
    outputs_.push_back({text, buffer});
  }
  return mlir::success(ok);
}

LogicalResult ProgramLowering::emit(Operation *op, pl::Opcode opcode, pl::Attrs attrsType,
                                    fb::Offset<void> attrs) {
  int64_t index = instructions_.size();
  InstructionInfo instruction;
  instruction.op = opcode;
  instruction.attrsType = attrsType;
  instruction.attrs = attrs;
  instruction.location = locationString(op->getLoc());
  for (Value operand : op->getOperands())
    instruction.inputs.push_back(use(operand, index));
  for (Value result : op->getResults()) {
    auto buffer = addBuffer(result, valueName(result), op->getLoc());
    if (failed(buffer))
      return failure();
    buffers_[*buffer].request.def = index;
    buffers_[*buffer].request.lastUse = index;
    instruction.outputs.push_back(*buffer);
  }
  instructions_.push_back(std::move(instruction));
  return success();
}

LogicalResult ProgramLowering::emitWithAxis(Operation *op, pl::Opcode opcode, int64_t axis,
                                            int64_t rank) {
  std::optional<int64_t> normalized = mega::shape::normalizeAxis(axis, rank);
  if (!normalized)
    return op->emitOpError() << "axis " << axis << " is out of range for rank " << rank;
  auto attrs = pl::CreateAxisAttrs(fbb_, *normalized);
  return emit(op, opcode, pl::Attrs::AxisAttrs, fb::Offset<void>(attrs.o));
}

LogicalResult ProgramLowering::lowerOp(Operation *op) {
  using namespace mega;
  using O = pl::Opcode;
  using A = pl::Attrs;
  auto asVoid = [](auto offset) { return fb::Offset<void>(offset.o); };
  auto rankOf = [](Value value) { return mlir::cast<mlir::ShapedType>(value.getType()).getRank(); };
  auto unsupported = [](Operation *unlowered) -> LogicalResult {
    return unlowered->emitError() << "'" << unlowered->getName()
                                  << "' cannot be lowered to a single-rank plan yet";
  };
  // An operand whose producer failed to lower was reported there; skip its users quietly.
  for (Value operand : op->getOperands())
    if (!bufferOf_.count(operand))
      return failure();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ConstantOp c) { return lowerConstant(c); })
      .Case([&](mlir::func::ReturnOp r) { return lowerReturn(r); })
      .Case([&](ReshapeOp r) -> LogicalResult {
        // Values are immutable, so the result can share its input's bytes for as long as
        // either lives: no instruction, and never more memory than a copy.
        uint32_t input = bufferOf_.at(r.getInput());
        auto buffer = addBuffer(r.getResult(), valueName(r.getResult()), r.getLoc());
        if (failed(buffer))
          return failure();
        BufferRequest &request = buffers_[*buffer].request;
        request.aliasOf = input;
        request.def = request.lastUse = instructions_.size();
        return success();
      })
      .Case([&](NegOp) { return emit(op, O::Neg); })
      .Case([&](AbsOp) { return emit(op, O::Abs); })
      .Case([&](ExpOp) { return emit(op, O::Exp); })
      .Case([&](LogOp) { return emit(op, O::Log); })
      .Case([&](TanhOp) { return emit(op, O::Tanh); })
      .Case([&](ErfOp) { return emit(op, O::Erf); })
      .Case([&](SigmoidOp) { return emit(op, O::Sigmoid); })
      .Case([&](ReluOp) { return emit(op, O::Relu); })
      .Case([&](SqrtOp) { return emit(op, O::Sqrt); })
      .Case([&](RsqrtOp) { return emit(op, O::Rsqrt); })
      .Case([&](NotOp) { return emit(op, O::Not); })
      .Case([&](AddOp) { return emit(op, O::Add); })
      .Case([&](SubOp) { return emit(op, O::Sub); })
      .Case([&](MulOp) { return emit(op, O::Mul); })
      .Case([&](DivOp) { return emit(op, O::Div); })
      .Case([&](PowOp) { return emit(op, O::Pow); })
      .Case([&](MinOp) { return emit(op, O::Min); })
      .Case([&](MaxOp) { return emit(op, O::Max); })
      .Case([&](AndOp) { return emit(op, O::And); })
      .Case([&](OrOp) { return emit(op, O::Or); })
      .Case([&](CompareOp c) {
        return emit(op, O::Compare, A::CompareAttrs,
                    asVoid(pl::CreateCompareAttrs(fbb_, comparePredicate(c.getPredicate()))));
      })
      .Case([&](WhereOp) { return emit(op, O::Where); })
      .Case([&](TransposeOp t) {
        std::vector<int64_t> perm(t.getPerm().begin(), t.getPerm().end());
        return emit(op, O::Transpose, A::TransposeAttrs,
                    asVoid(pl::CreateTransposeAttrsDirect(fbb_, &perm)));
      })
      .Case([&](SliceOp s) {
        std::vector<int64_t> starts(s.getStarts().begin(), s.getStarts().end());
        std::vector<int64_t> strides(s.getStrides().begin(), s.getStrides().end());
        return emit(op, O::Slice, A::SliceAttrs,
                    asVoid(pl::CreateSliceAttrsDirect(fbb_, &starts, &strides)));
      })
      .Case([&](ConcatOp c) {
        return emitWithAxis(op, O::Concat, c.getAxis(), rankOf(c.getResult()));
      })
      .Case([&](BroadcastOp) { return emit(op, O::Broadcast); })
      .Case([&](CastOp) { return emit(op, O::Cast); })
      .Case(
          [&](GatherOp g) { return emitWithAxis(op, O::Gather, g.getAxis(), rankOf(g.getData())); })
      .Case([&](ReduceOp r) -> LogicalResult {
        int64_t rank = rankOf(r.getInput());
        std::vector<int64_t> axes;
        for (int64_t axis : r.getAxes()) {
          std::optional<int64_t> normalized = mega::shape::normalizeAxis(axis, rank);
          if (!normalized)
            return r.emitOpError() << "axis " << axis << " is out of range for rank " << rank;
          axes.push_back(*normalized);
        }
        std::sort(axes.begin(), axes.end());
        return emit(op, O::Reduce, A::ReduceAttrs,
                    asVoid(pl::CreateReduceAttrsDirect(fbb_, reduceKind(r.getKind()), &axes)));
      })
      .Case([&](SoftmaxOp s) {
        return emitWithAxis(op, O::Softmax, s.getAxis(), rankOf(s.getInput()));
      })
      .Case([&](MatmulOp) { return emit(op, O::MatMul); })
      .Case([&](LinearOp) { return emit(op, O::Linear); })
      .Case([&](EmbeddingOp) { return emit(op, O::Embedding); })
      .Case([&](LayerNormOp n) {
        return emit(op, O::LayerNorm, A::NormAttrs,
                    asVoid(pl::CreateNormAttrs(fbb_, n.getEpsilon().convertToDouble())));
      })
      .Case([&](RmsNormOp n) {
        return emit(op, O::RmsNorm, A::NormAttrs,
                    asVoid(pl::CreateNormAttrs(fbb_, n.getEpsilon().convertToDouble())));
      })
      .Case([&](AttentionOp a) {
        int64_t headDim = mlir::cast<mlir::ShapedType>(a.getQuery().getType()).getShape().back();
        double scale = a.getScale() ? a.getScale()->convertToDouble()
                                    : 1.0 / std::sqrt(static_cast<double>(headDim));
        return emit(op, O::Attention, A::AttentionAttrs,
                    asVoid(pl::CreateAttentionAttrs(fbb_, a.getCausal(), scale)));
      })
      .Case([&](GeluOp g) {
        bool tanh = g.getApproximation() == GeluApproximation::tanh;
        return emit(op, O::Gelu, A::GeluAttrs, asVoid(pl::CreateGeluAttrs(fbb_, tanh)));
      })
      .Case([&](CrossEntropyOp c) {
        std::optional<int64_t> ignore = c.getIgnoreIndex();
        return emit(
            op, O::CrossEntropy, A::CrossEntropyAttrs,
            asVoid(pl::CreateCrossEntropyAttrs(fbb_, ignore.has_value(), ignore.value_or(0))));
      })
      .Case([&](DropoutOp d) {
        return emit(
            op, O::Dropout, A::DropoutAttrs,
            asVoid(pl::CreateDropoutAttrs(fbb_, d.getRatio().convertToDouble(), d.getStream())));
      })
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, SendOp, RecvOp, ReshardOp,
            AdamWUpdateOp, GlobalNormOp, ClipByNormOp>(unsupported)
      .Default([&](Operation *op) -> LogicalResult {
        return op->emitError() << "'" << op->getName()
                               << "' is not a mega op; codegen lowers only mega ops";
      });
}

LogicalResult ProgramLowering::lower() {
  if (func_.isExternal())
    return func_.emitError() << "function @" << func_.getSymName() << " has no body";
  if (!func_.getBody().hasOneBlock())
    return func_.emitError() << "codegen needs a straight-line function (one block)";
  bool ok = succeeded(lowerArguments());
  if (!ok)
    return failure();
  for (Operation &op : func_.getBody().front())
    if (failed(lowerOp(&op)))
      ok = false;
  return mlir::success(ok);
}

mlir::FailureOr<fb::Offset<pl::Program>> ProgramLowering::finish() {
  std::vector<BufferRequest> requests;
  requests.reserve(buffers_.size());
  for (const BufferInfo &buffer : buffers_)
    requests.push_back(buffer.request);
  MemoryPlanResult memory = planMemory(requests);
  if (!memory.plan)
    return func_.emitError() << "memory planning failed: " << memory.error;

  std::vector<fb::Offset<pl::Buffer>> buffers;
  for (auto [i, buffer] : llvm::enumerate(buffers_))
    buffers.push_back(pl::CreateBufferDirect(fbb_, buffer.name.c_str(), buffer.dtype, &buffer.shape,
                                             memory.plan->offsets[i], buffer.request.bytes));
  std::vector<fb::Offset<pl::Parameter>> parameters;
  for (const ParameterInfo &param : parameters_) {
    const std::vector<int64_t> &shape = buffers_[param.buffer].shape;
    std::vector<int64_t> offset(shape.size(), 0);
    parameters.push_back(pl::CreateParameterDirect(fbb_, param.name.c_str(), param.buffer, &shape,
                                                   &offset, param.init, param.initStd));
  }
  auto ports = [&](const std::vector<PortInfo> &infos) {
    std::vector<fb::Offset<pl::Port>> out;
    for (const PortInfo &port : infos)
      out.push_back(pl::CreatePortDirect(fbb_, port.name.c_str(), port.buffer));
    return out;
  };
  std::vector<fb::Offset<pl::Port>> inputs = ports(inputs_), outputs = ports(outputs_);
  std::vector<fb::Offset<pl::Constant>> constants;
  for (const ConstantInfo &constant : constants_)
    constants.push_back(pl::CreateConstant(fbb_, constant.buffer, constant.data));
  std::vector<fb::Offset<pl::Instruction>> instructions;
  for (const InstructionInfo &inst : instructions_)
    instructions.push_back(pl::CreateInstructionDirect(fbb_, inst.op, &inst.inputs, &inst.outputs,
                                                       inst.attrsType, inst.attrs,
                                                       inst.location.c_str()));
  std::string name = func_.getSymName().str();
  return pl::CreateProgramDirect(fbb_, name.c_str(), memory.plan->arenaBytes, &buffers, &parameters,
                                 &inputs, &outputs, &constants, &instructions);
}

mlir::FailureOr<mlir::func::FuncOp> selectFunction(mlir::ModuleOp module, const std::string &name) {
  llvm::SmallVector<mlir::func::FuncOp> funcs(module.getOps<mlir::func::FuncOp>());
  if (!name.empty()) {
    for (mlir::func::FuncOp func : funcs)
      if (func.getSymName() == name)
        return func;
    return module.emitError() << "no function @" << name << " in the module";
  }
  if (funcs.size() != 1)
    return module.emitError() << "the module has " << funcs.size()
                              << " functions; name the one to compile";
  return funcs.front();
}

} // namespace

mlir::FailureOr<std::vector<uint8_t>> writePlan(mlir::ModuleOp module,
                                                const CodegenOptions &options) {
  auto func = selectFunction(module, options.function);
  if (failed(func))
    return failure();

  std::vector<std::string> axisNames{"dp"};
  std::vector<int64_t> axisSizes{1};
  if (mlir::Attribute attr = module->getAttr(kModuleMeshAttr)) {
    auto mesh = mlir::dyn_cast<mega::MeshAttr>(attr);
    if (!mesh)
      return module.emitError() << kModuleMeshAttr << " is not a #mega.mesh";
    if (mesh.getNumDevices() != 1)
      return module.emitError() << "the module's mesh has " << mesh.getNumDevices()
                                << " devices; codegen writes single-rank plans only";
    axisNames.clear();
    axisSizes.assign(mesh.getAxisSizes().begin(), mesh.getAxisSizes().end());
    for (mlir::StringAttr axis : mesh.getAxisNames())
      axisNames.push_back(axis.str());
  }

  fb::FlatBufferBuilder fbb(1 << 16);
  ProgramLowering lowering(*func, fbb);
  if (failed(lowering.lower()))
    return failure();
  auto program = lowering.finish();
  if (failed(program))
    return failure();

  std::vector<fb::Offset<pl::Program>> programs{*program};
  std::vector<int64_t> coords(axisSizes.size(), 0);
  std::vector<fb::Offset<pl::RankEntry>> ranks{pl::CreateRankEntryDirect(fbb, 0, &coords)};
  std::vector<fb::Offset<fb::String>> axisNameOffsets;
  for (const std::string &axis : axisNames)
    axisNameOffsets.push_back(fbb.CreateString(axis));
  auto mesh = pl::CreateMeshDirect(fbb, &axisNameOffsets, &axisSizes);
  auto plan =
      pl::CreatePlanDirect(fbb, static_cast<uint32_t>(pl::FormatVersion::Current), kProducer, mesh,
                           &programs, &ranks, options.weightsFile.c_str(), options.seed);
  pl::FinishPlanBuffer(fbb, plan);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

} // namespace megac::codegen
