// Lowering funcs into one plan Program: arguments to parameters, state and input ports; results
// to output ports and in-place updates (mega.updates); constants and reshapes; memory planning.
#include "codegen/ProgramLowering.h"

#include "ir/MegaOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/StringSet.h"

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

namespace {

/// Result attribute: the parameter or state a result replaces (docs/training-step.md).
constexpr const char *kUpdatesAttr = "mega.updates";
/// Argument attribute: the name of a state buffer (gradient accumulator, optimizer moment).
constexpr const char *kStateAttr = "mega.state";

} // namespace

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

LogicalResult ProgramLowering::lowerPersistentArgument(mlir::BlockArgument arg, bool isParam,
                                                       mlir::StringAttr nameAttr,
                                                       mlir::Attribute init) {
  std::string name = nameAttr.str();
  mlir::Location loc = arg.getLoc();
  const char *kind = isParam ? "parameter" : "state buffer";
  if (!persistentArgs_.try_emplace(name, arg).second)
    return mlir::emitError(loc) << "two " << (isParam ? "parameters" : "state buffers")
                                << " are named '" << name << "'";
  if ((isParam ? stateIndex_ : parameterIndex_).count(name))
    return mlir::emitError(loc) << "'" << name << "' names both a parameter and a state buffer";

  ParameterInfo spec{name, 0, arg.getType(), pl::InitKind::none, 0.0, false, {}, {}};
  if (auto source = func_.getArgAttrOfType<mlir::DenseI64ArrayAttr>(arg.getArgNumber(),
                                                                    mega::kSourceShapeAttr))
    spec.sourceShape.assign(source.asArrayRef().begin(), source.asArrayRef().end());
  if (init) {
    auto attr = mlir::dyn_cast<mega::InitAttr>(init);
    if (!attr)
      return mlir::emitError(loc) << mega::kInitAttr << " of parameter '" << name
                                  << "' is not a #mega.init";
    spec.hasInit = true;
    switch (attr.getKind()) {
    case mega::InitKind::normal:
      spec.init = pl::InitKind::normal;
      spec.initStd = attr.getStddev().convertToDouble();
      break;
    case mega::InitKind::zeros:
      spec.init = pl::InitKind::zeros;
      break;
    case mega::InitKind::ones:
      spec.init = pl::InitKind::ones;
      break;
    }
  }

  auto sharding = argumentSharding(arg);
  if (failed(sharding))
    return failure();
  spec.sharding = *sharding;

  // The same name in an earlier function is the same storage.
  llvm::StringMap<size_t> &index = isParam ? parameterIndex_ : stateIndex_;
  if (auto it = index.find(name); it != index.end()) {
    ShardingInfo &split = isParam ? parameters_[it->second].sharding : state_[it->second].sharding;
    if (split.globalShape.empty())
      split.globalShape = sharding->globalShape, split.dims = sharding->dims;
    for (uint32_t axis : sharding->partialAxes)
      if (!llvm::is_contained(split.partialAxes, axis))
        split.partialAxes.push_back(axis);
    mlir::Type known = isParam ? parameters_[it->second].type : state_[it->second].type;
    uint32_t buffer = isParam ? parameters_[it->second].buffer : state_[it->second].buffer;
    if (known != arg.getType())
      return mlir::emitError(loc) << kind << " '" << name << "' is " << arg.getType()
                                  << " here but " << known << " in an earlier function";
    if (isParam && spec.hasInit) {
      ParameterInfo &param = parameters_[it->second];
      if (param.hasInit && (param.init != spec.init || param.initStd != spec.initStd))
        return mlir::emitError(loc)
               << "parameter '" << name << "' has another mega.init in an earlier function";
      param.init = spec.init;
      param.initStd = spec.initStd;
      param.hasInit = true;
    }
    bufferOf_[arg] = buffer;
    return success();
  }
  auto buffer = addBuffer(arg, name, loc);
  if (failed(buffer))
    return failure();
  buffers_[*buffer].request.persistent = true;
  spec.buffer = *buffer;
  if (isParam) {
    index[name] = parameters_.size();
    parameters_.push_back(std::move(spec));
  } else {
    index[name] = state_.size();
    state_.push_back({name, *buffer, arg.getType(), spec.sharding});
  }
  return success();
}

mlir::FailureOr<std::vector<uint32_t>> ProgramLowering::meshAxes(mlir::Operation *op,
                                                                 mlir::ArrayAttr names) {
  std::vector<uint32_t> axes;
  for (mlir::Attribute name : names) {
    auto text = mlir::dyn_cast<mlir::StringAttr>(name);
    std::optional<unsigned> index = text && mesh_ ? mesh_.findAxis(text.getValue()) : std::nullopt;
    if (!index)
      return op->emitError() << "mesh axis " << name << " is not an axis of the plan's mesh"
                             << (mesh_ ? "" : " (the module has no mega.mesh)");
    axes.push_back(*index);
  }
  return axes;
}

mlir::FailureOr<ShardingInfo> ProgramLowering::argumentSharding(mlir::BlockArgument arg) {
  ShardingInfo info;
  unsigned i = arg.getArgNumber();
  mlir::Operation *op = func_;
  if (auto shape = func_.getArgAttrOfType<mlir::DenseI64ArrayAttr>(i, "mega.global_shape"))
    info.globalShape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
  if (auto dims = func_.getArgAttrOfType<mlir::ArrayAttr>(i, "mega.dim_axes"))
    for (auto [d, axes] : llvm::enumerate(dims)) {
      auto names = mlir::dyn_cast<mlir::ArrayAttr>(axes);
      if (!names)
        return op->emitError() << "mega.dim_axes of argument " << i << " is not an array of arrays";
      if (names.empty())
        continue;
      auto indices = meshAxes(op, names);
      if (failed(indices))
        return mlir::failure();
      info.dims.push_back({static_cast<uint32_t>(d), *indices});
    }
  if (auto partial = func_.getArgAttrOfType<mlir::ArrayAttr>(i, "mega.grad_partial")) {
    auto indices = meshAxes(op, partial);
    if (failed(indices))
      return mlir::failure();
    info.partialAxes = *indices;
  }
  return info;
}

LogicalResult ProgramLowering::lowerArguments() {
  bool ok = true;
  llvm::StringSet<> inputNames;
  for (auto [i, arg] : llvm::enumerate(func_.getArguments())) {
    auto param = func_.getArgAttrOfType<mlir::StringAttr>(i, mega::kParamAttr);
    auto input = func_.getArgAttrOfType<mlir::StringAttr>(i, mega::kInputAttr);
    auto state = func_.getArgAttrOfType<mlir::StringAttr>(i, kStateAttr);
    auto init = func_.getArgAttr(i, mega::kInitAttr);
    mlir::Location loc = arg.getLoc();
    if (int(bool(param)) + int(bool(input)) + int(bool(state)) > 1) {
      mlir::emitError(loc) << "argument " << i << " is more than one of a parameter ("
                           << mega::kParamAttr << "), an input (" << mega::kInputAttr
                           << ") and a state buffer (" << kStateAttr << ")";
      ok = false;
      continue;
    }
    if (init && !param) {
      mlir::emitError(loc) << "argument " << i << " has " << mega::kInitAttr << " but no "
                           << mega::kParamAttr << " name";
      ok = false;
      continue;
    }
    if (param || state) {
      ok &= succeeded(lowerPersistentArgument(arg, bool(param), param ? param : state, init));
      continue;
    }
    std::string name = input ? input.str() : portName("input", i);
    auto buffer = addBuffer(arg, name, loc);
    if (failed(buffer)) {
      ok = false;
      continue;
    }
    buffers_[*buffer].request.pinned = true;
    if (!inputNames.insert(name).second) {
      mlir::emitError(loc) << "two inputs are named '" << name << "'";
      ok = false;
      continue;
    }
    // One name in several functions is one input: the caller sets it once.
    auto [known, inserted] = inputBuffers_.try_emplace(name, *buffer);
    if (!inserted) {
      const BufferInfo &a = buffers_[known->second], &b = buffers_[*buffer];
      if (a.dtype != b.dtype || a.shape != b.shape) {
        mlir::emitError(loc) << "input '" << name << "' is " << arg.getType()
                             << " here but has another type in an earlier function";
        ok = false;
        continue;
      }
    }
    functions_.back().inputs.push_back({name, *buffer, {}});
  }
  return mlir::success(ok);
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

LogicalResult ProgramLowering::collectUpdates(mlir::func::ReturnOp ret) {
  bool ok = true;
  llvm::StringSet<> targets;
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    mlir::Attribute attr = func_.getResultAttr(i, kUpdatesAttr);
    if (!attr)
      continue;
    auto name = mlir::dyn_cast<mlir::StringAttr>(attr);
    if (!name) {
      ret.emitOpError() << "result " << i << ": " << kUpdatesAttr << " must be a string";
      ok = false;
      continue;
    }
    auto arg = persistentArgs_.find(name.getValue());
    if (arg == persistentArgs_.end()) {
      ret.emitOpError() << "result " << i << " updates '" << name.getValue() << "', which is not a "
                        << mega::kParamAttr << " or " << kStateAttr << " argument of @"
                        << func_.getSymName();
      ok = false;
      continue;
    }
    if (!targets.insert(name.getValue()).second) {
      ret.emitOpError() << "two results update '" << name.getValue() << "'";
      ok = false;
      continue;
    }
    if (value.getType() != arg->second.getType()) {
      ret.emitOpError() << "result " << i << " of type " << value.getType() << " updates '"
                        << name.getValue() << "' of type " << arg->second.getType();
      ok = false;
      continue;
    }
    if (value == arg->second) // returning the parameter itself leaves it as it is
      continue;
    Update update{static_cast<unsigned>(i),
                  arg->second,
                  name.str(),
                  bufferOf_.at(arg->second),
                  value,
                  std::nullopt,
                  nullptr};
    // A value an instruction produces may be written in place by it; the first update of a
    // value claims it (a second one of the same value copies).
    if (mlir::isa<mlir::OpResult>(value) && !updateOf_.count(value))
      updateOf_[value] = updates_.size();
    updates_.push_back(std::move(update));
  }
  return mlir::success(ok);
}

LogicalResult ProgramLowering::lowerReturn(mlir::func::ReturnOp op) {
  FunctionInfo &fn = functions_.back();
  bool ok = true;
  // Updates no instruction wrote in place: a Copy each, after every other instruction.
  for (Update &update : updates_) {
    if (update.writtenAt)
      continue;
    int64_t index = fn.instructions.size();
    InstructionInfo copy;
    copy.op = pl::Opcode::Copy;
    copy.inputs = {use(update.value, index)};
    copy.outputs = {update.buffer};
    copy.location = locationString(op.getLoc());
    fn.instructions.push_back(std::move(copy));
    update.writtenAt = index;
  }
  llvm::StringSet<> names;
  for (auto [i, value] : llvm::enumerate(op.getOperands())) {
    auto name = func_.getResultAttrOfType<mlir::StringAttr>(i, mega::kOutputAttr);
    if (!name && func_.getResultAttr(i, kUpdatesAttr))
      continue; // only an update
    std::string text = name ? name.str() : portName("output", i);
    if (!names.insert(text).second) {
      op.emitOpError() << "two outputs are named '" << text << "'";
      ok = false;
      continue;
    }
    if (auto [owner, inserted] = outputOwners_.try_emplace(text, func_.getSymName().str());
        !inserted) {
      op.emitOpError() << "output '" << text << "' is also an output of @" << owner->second
                       << "; output names are unique across the module";
      ok = false;
      continue;
    }
    uint32_t buffer = bufferOf_.at(value);
    buffers_[buffer].request.pinned = true;
    std::vector<uint32_t> partial;
    if (auto axes = func_.getResultAttrOfType<mlir::ArrayAttr>(i, "mega.partial_axes")) {
      auto indices = meshAxes(op, axes);
      if (failed(indices)) {
        ok = false;
        continue;
      }
      partial = *indices;
    }
    fn.outputs.push_back({text, buffer, partial});
  }
  return mlir::success(ok && succeeded(checkUpdateOrder(op)));
}

LogicalResult ProgramLowering::checkUpdateOrder(mlir::func::ReturnOp ret) {
  // Every read of a replaced value (the argument, or a reshape sharing its bytes) must come
  // before the instruction that overwrites it; the return op reads after every instruction.
  bool ok = true;
  for (const Update &update : updates_) {
    llvm::SmallVector<Value> old{update.target};
    for (size_t k = 0; k < old.size(); ++k) {
      for (mlir::OpOperand &operand : old[k].getUses()) {
        Operation *reader = operand.getOwner();
        if (auto reshape = mlir::dyn_cast<mega::ReshapeOp>(reader)) {
          old.push_back(reshape.getResult());
          continue;
        }
        bool late;
        if (reader == ret.getOperation()) {
          unsigned result = operand.getOperandNumber();
          // Returning the argument as its own update is no read.
          auto self = func_.getResultAttrOfType<mlir::StringAttr>(result, kUpdatesAttr);
          late = !(self && self.getValue() == update.name && old[k] == update.target);
        } else {
          auto at = instructionOf_.find(reader);
          late = at != instructionOf_.end() && at->second > *update.writtenAt;
        }
        if (!late)
          continue;
        mlir::InFlightDiagnostic diag =
            reader == ret.getOperation()
                ? ret.emitOpError()
                      << "result " << operand.getOperandNumber() << " reads the old value of '"
                      << update.name << "', which result " << update.result
                      << " replaces (mega.updates) before the function returns"
                : reader->emitError() << "reads the old value of '" << update.name
                                      << "' after it is updated in place (mega.updates on result "
                                      << update.result << "); read it before the update";
        if (update.writer)
          diag.attachNote(update.writer->getLoc()) << "'" << update.name << "' is overwritten here";
        ok = false;
      }
    }
  }
  return mlir::success(ok);
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
  auto dimShardings = [&](const ShardingInfo &info) {
    std::vector<fb::Offset<pl::DimSharding>> dims;
    for (const auto &[dim, axes] : info.dims)
      dims.push_back(pl::CreateDimShardingDirect(fbb_, dim, &axes));
    return dims;
  };
  std::vector<fb::Offset<pl::Parameter>> parameters;
  for (const ParameterInfo &param : parameters_) {
    const std::vector<int64_t> &local = buffers_[param.buffer].shape;
    const std::vector<int64_t> &shape =
        param.sharding.globalShape.empty() ? local : param.sharding.globalShape;
    std::vector<int64_t> offset(shape.size(), 0);
    auto dims = dimShardings(param.sharding);
    parameters.push_back(pl::CreateParameterDirect(
        fbb_, param.name.c_str(), param.buffer, &shape, &offset, param.init, param.initStd,
        dims.empty() ? nullptr : &dims,
        param.sourceShape.empty() ? nullptr : &param.sourceShape));
  }
  std::vector<fb::Offset<pl::Constant>> constants;
  for (const ConstantInfo &constant : constants_)
    constants.push_back(pl::CreateConstant(fbb_, constant.buffer, constant.data));
  std::vector<fb::Offset<pl::StateBuffer>> state;
  for (const StateInfo &st : state_)
  {
    auto dims = dimShardings(st.sharding);
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
    steps.push_back(pl::CreateScheduleStep(
        fbb_,
        step.kind == schedule::StepKind::backward ? pl::StepKind::Backward : pl::StepKind::Forward,
        static_cast<uint32_t>(step.chunk), static_cast<uint32_t>(step.microBatch)));
  return pl::CreateProgramDirect(fbb_, name.c_str(), memory.plan->arenaBytes, &buffers, &parameters,
                                 &constants, &state, &functions, steps.empty() ? nullptr : &steps);
}

} // namespace megac::codegen::detail
