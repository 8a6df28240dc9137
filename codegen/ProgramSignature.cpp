// Lowering a func's signature: arguments to parameters, state and input ports (with the
// shardings they carry); results to output ports and in-place updates (mega.updates), each
// read of a replaced value checked to come before its overwrite.
#include "codegen/ProgramLowering.h"

#include "ir/MegaOps.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringSet.h"

namespace megac::codegen::detail {

using mlir::failure;
using mlir::LogicalResult;
using mlir::success;

namespace {

/// Result attribute: the parameter or state a result replaces (docs/training-step.md).
constexpr const char *kUpdatesAttr = "mega.updates";
/// Argument attribute: the name of a state buffer (gradient accumulator, optimizer moment).
constexpr const char *kStateAttr = "mega.state";

} // namespace

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
    llvm::SmallVector<mlir::Value> old{update.target};
    for (size_t k = 0; k < old.size(); ++k) {
      for (mlir::OpOperand &operand : old[k].getUses()) {
        mlir::Operation *reader = operand.getOwner();
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

} // namespace megac::codegen::detail
