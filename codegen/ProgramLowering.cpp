// Lowering funcs into one plan Program: buffers, constants and reshapes, each func's body (its
// signature in ProgramSignature.cpp, its ops in OpLowering.cpp); then memory planning and the
// Program table.
#include "codegen/ProgramLowering.h"

#include "ir/MegaOps.h"
#include "runtime/plan/PlanSchedule.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace megac::codegen::detail {

using mlir::failure;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::success;
using mlir::Value;

// Constant bytes are copied from MLIR's host-order storage; plans are little-endian.
static_assert(std::endian::native == std::endian::little, "codegen assumes a little-endian host");

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

std::string ProgramLowering::valueName(Value value) {
  std::string name;
  llvm::raw_string_ostream os(name);
  value.printAsOperand(os, *asmState_);
  return name;
}

std::string ProgramLowering::portName(const char *kind, unsigned index) {
  std::string name = std::string(kind) + "_" + std::to_string(index);
  // Port names are the program's, so in a module of several functions they say whose they are.
  return functionCount_ > 1 ? func_.getSymName().str() + "." + name : name;
}

mlir::FailureOr<BufferInfo> ProgramLowering::describeBuffer(mlir::Type valueType, std::string name,
                                                            mlir::Location loc) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(valueType);
  if (!type || !type.hasStaticShape())
    return mlir::emitError(loc) << "codegen needs statically shaped tensors, got " << valueType;
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
  buffer.request.function = functions_.size() - 1;
  return buffer;
}

mlir::FailureOr<uint32_t> ProgramLowering::addBuffer(Value value, std::string name,
                                                     mlir::Location loc) {
  auto buffer = describeBuffer(value.getType(), std::move(name), loc);
  if (failed(buffer))
    return failure();
  uint32_t index = buffers_.size();
  buffers_.push_back(std::move(*buffer));
  bufferOf_[value] = index;
  return index;
}

uint32_t ProgramLowering::use(Value value, int64_t instruction) {
  uint32_t index = bufferOf_.at(value);
  BufferRequest &request = buffers_[index].request;
  request.lastUse = std::max(request.lastUse, instruction);
  return index;
}

LogicalResult ProgramLowering::lowerConstant(Operation *op, Value result, mlir::Attribute value) {
  auto buffer = addBuffer(result, valueName(result), op->getLoc());
  if (failed(buffer))
    return failure();
  BufferInfo &info = buffers_[*buffer];
  // Loaded once with the program, so persistent: no function may reuse its bytes.
  info.request.persistent = true;
  uint64_t size = info.request.bytes;
  uint8_t *out = nullptr;
  fb::Offset<fb::Vector<uint8_t>> data = fbb_.CreateUninitializedVector(size, &out);
  if (auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(value)) {
    if (info.dtype == pl::DType::i1) {
      // MLIR packs i1 densely; the plan stores one byte (0 or 1) per element.
      for (auto [i, bit] : llvm::enumerate(dense.getValues<bool>()))
        out[i] = bit ? 1 : 0;
    } else {
      llvm::ArrayRef<char> raw = dense.getRawData();
      uint64_t element = dtypeBytes(info.dtype);
      if (raw.size() != (dense.isSplat() ? element : size))
        return op->emitOpError() << "constant storage holds " << raw.size()
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
      return op->emitOpError() << "resource constant '" << resource.getRawHandle().getKey()
                               << "' has no data (elided?)";
    llvm::ArrayRef<char> raw = blob->getData();
    if (info.dtype == pl::DType::i1 || raw.size() != size)
      return op->emitOpError() << "resource constant '" << resource.getRawHandle().getKey()
                               << "' holds " << raw.size() << " bytes; codegen expects " << size;
    std::memcpy(out, raw.data(), size);
  } else {
    return op->emitOpError() << "codegen supports dense and dense_resource constants, not "
                             << value;
  }
  constants_.push_back({*buffer, data});
  return success();
}

LogicalResult ProgramLowering::lowerReshape(Value input, Value result, mlir::Location loc) {
  // Values are immutable, so the result can share its input's bytes for as long as either
  // lives: no instruction, and never more memory than a copy.
  uint32_t source = bufferOf_.at(input);
  auto buffer = addBuffer(result, valueName(result), loc);
  if (failed(buffer))
    return failure();
  BufferRequest &request = buffers_[*buffer].request;
  request.aliasOf = source;
  request.def = request.lastUse = functions_.back().instructions.size();
  return success();
}

LogicalResult ProgramLowering::lowerFunction(mlir::func::FuncOp func) {
  func_ = func;
  asmState_ = std::make_unique<mlir::AsmState>(func);
  bufferOf_.clear();
  instructionOf_.clear();
  persistentArgs_.clear();
  updates_.clear();
  updateOf_.clear();
  functions_.push_back({func.getSymName().str(), {}, {}, {}});
  if (func.isExternal())
    return func.emitError() << "function @" << func.getSymName() << " has no body";
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "codegen needs a straight-line function (one block)";
  if (failed(lowerArguments()))
    return failure();
  if (failed(
          collectUpdates(mlir::cast<mlir::func::ReturnOp>(func.getBody().front().getTerminator()))))
    return failure();
  bool ok = true;
  for (Operation &op : func.getBody().front())
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
    return module_.emitError() << "memory planning failed: " << memory.error;

  std::vector<fb::Offset<pl::Buffer>> buffers;
  for (auto [i, buffer] : llvm::enumerate(buffers_))
    buffers.push_back(pl::CreateBufferDirect(fbb_, buffer.name.c_str(), buffer.dtype, &buffer.shape,
                                             memory.plan->offsets[i], buffer.request.bytes));
  // A dim whose parts are larger than its global size split evenly is a padded split (ZeRO-3's
  // padded shards): the plan records the padded size, the buffer's dim times the group size.
  auto dimShardings = [&](const ShardingInfo &info, const std::vector<int64_t> &local) {
    std::vector<fb::Offset<pl::DimSharding>> dims;
    for (const auto &[dim, axes] : info.dims) {
      int64_t parts = 1;
      for (uint32_t axis : axes)
        parts *= mesh_ ? mesh_.getAxisSizes()[axis] : 1;
      int64_t padded = dim < local.size() ? local[dim] * parts : 0;
      bool pads = dim < info.globalShape.size() && padded > info.globalShape[dim];
      dims.push_back(pl::CreateDimShardingDirect(fbb_, dim, &axes, pads ? padded : 0));
    }
    return dims;
  };
  std::vector<fb::Offset<pl::Parameter>> parameters;
  for (const ParameterInfo &param : parameters_) {
    const std::vector<int64_t> &local = buffers_[param.buffer].shape;
    const std::vector<int64_t> &shape =
        param.sharding.globalShape.empty() ? local : param.sharding.globalShape;
    std::vector<int64_t> offset(shape.size(), 0);
    auto dims = dimShardings(param.sharding, local);
    parameters.push_back(pl::CreateParameterDirect(
        fbb_, param.name.c_str(), param.buffer, &shape, &offset, param.init, param.initStd,
        dims.empty() ? nullptr : &dims, param.sourceShape.empty() ? nullptr : &param.sourceShape));
  }
  std::vector<fb::Offset<pl::Constant>> constants;
  for (const ConstantInfo &constant : constants_)
    constants.push_back(pl::CreateConstant(fbb_, constant.buffer, constant.data));
  std::vector<fb::Offset<pl::StateBuffer>> state;
  for (const StateInfo &st : state_) {
    auto dims = dimShardings(st.sharding, buffers_[st.buffer].shape);
    const std::vector<int64_t> *global =
        st.sharding.globalShape.empty() ? nullptr : &st.sharding.globalShape;
    state.push_back(pl::CreateStateBufferDirect(
        fbb_, st.name.c_str(), st.buffer, global, dims.empty() ? nullptr : &dims,
        st.sharding.partialAxes.empty() ? nullptr : &st.sharding.partialAxes));
  }
  auto ports = [&](const std::vector<PortInfo> &infos) {
    std::vector<fb::Offset<pl::Port>> out;
    for (const PortInfo &port : infos)
      out.push_back(pl::CreatePortDirect(fbb_, port.name.c_str(), port.buffer,
                                         port.partialAxes.empty() ? nullptr : &port.partialAxes));
    return out;
  };
  std::vector<fb::Offset<pl::Function>> functions;
  for (const FunctionInfo &fn : functions_) {
    std::vector<fb::Offset<pl::Port>> inputs = ports(fn.inputs), outputs = ports(fn.outputs);
    std::vector<fb::Offset<pl::Instruction>> instructions;
    for (const InstructionInfo &inst : fn.instructions)
      instructions.push_back(pl::CreateInstructionDirect(fbb_, inst.op, &inst.inputs, &inst.outputs,
                                                         inst.attrsType, inst.attrs,
                                                         inst.location.c_str()));
    functions.push_back(
        pl::CreateFunctionDirect(fbb_, fn.name.c_str(), &inputs, &outputs, &instructions));
  }
  // A one-function program keeps the function's name (as before functions existed).
  std::string name = functions_.size() == 1 ? functions_.front().name
                     : module_.getSymName() ? module_.getSymName()->str()
                                            : "main";
  std::vector<fb::Offset<pl::ScheduleStep>> steps;
  for (const schedule::ScheduleStep &step : schedule_)
    steps.push_back(pl::CreateScheduleStep(fbb_, runtime::planStepKind(step.kind),
                                           static_cast<uint32_t>(step.chunk),
                                           static_cast<uint32_t>(step.microBatch)));
  return pl::CreateProgramDirect(fbb_, name.c_str(), memory.plan->arenaBytes, &buffers, &parameters,
                                 &constants, &state, &functions, steps.empty() ? nullptr : &steps);
}

} // namespace megac::codegen::detail
