// f32 -> f64 conversion of a model's IR and weights, for `megac train --precision fp64`.
#include "tools/megac/Precision.h"

#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/APFloat.h"

namespace megac::cli {

namespace {

std::string typeName(mlir::Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

mlir::Type toF64(mlir::Type type) {
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !tensor.getElementType().isF32())
    return type;
  return tensor.clone(mlir::Float64Type::get(type.getContext()));
}

} // namespace

std::set<std::string> floatTypesIn(mlir::ModuleOp module) {
  std::set<std::string> types;
  auto note = [&](mlir::Type type) {
    if (auto tensor = mlir::dyn_cast<mlir::TensorType>(type))
      if (mlir::isa<mlir::FloatType>(tensor.getElementType()))
        types.insert(typeName(tensor.getElementType()));
  };
  module.walk([&](mlir::Operation *op) {
    for (mlir::Type type : op->getResultTypes())
      note(type);
    for (mlir::Region &region : op->getRegions())
      for (mlir::Block &block : region)
        for (mlir::BlockArgument arg : block.getArguments())
          note(arg.getType());
  });
  return types;
}

mlir::LogicalResult convertToF64(mlir::ModuleOp module) {
  mlir::MLIRContext *ctx = module.getContext();
  mlir::Type f64 = mlir::Float64Type::get(ctx);
  mlir::WalkResult walked = module.walk([&](mlir::Operation *op) -> mlir::WalkResult {
    for (mlir::Region &region : op->getRegions())
      for (mlir::Block &block : region)
        for (mlir::BlockArgument arg : block.getArguments())
          arg.setType(toF64(arg.getType()));
    for (mlir::OpResult result : op->getResults())
      result.setType(toF64(result.getType()));
    if (auto func = mlir::dyn_cast<mlir::func::FuncOp>(op)) {
      llvm::SmallVector<mlir::Type> inputs, results;
      for (mlir::Type type : func.getArgumentTypes())
        inputs.push_back(toF64(type));
      for (mlir::Type type : func.getResultTypes())
        results.push_back(toF64(type));
      func.setFunctionType(mlir::FunctionType::get(ctx, inputs, results));
    }
    if (auto constant = mlir::dyn_cast<mega::ConstantOp>(op)) {
      auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(constant.getValue());
      if (!dense)
        return op->emitError("cannot convert this constant to f64 (not a dense elements "
                             "attribute)");
      if (dense.getElementType().isF32())
        constant.setValueAttr(dense.mapValues(f64, [](const llvm::APFloat &value) {
          llvm::APFloat wide = value;
          bool lostInfo = false;
          wide.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &lostInfo);
          return wide.bitcastToAPInt();
        }));
    }
    return mlir::WalkResult::advance();
  });
  if (walked.wasInterrupted())
    return mlir::failure();
  return mlir::verify(module);
}

void convertWeightsToF64(runtime::TensorMap &weights) {
  for (auto &[name, tensor] : weights) {
    if (tensor.dtype != runtime::DType::f32)
      continue;
    runtime::HostTensor wide = runtime::HostTensor::zeros(runtime::DType::f64, tensor.shape);
    const float *from = tensor.data<float>();
    double *to = wide.data<double>();
    for (int64_t i = 0; i < tensor.numElements(); ++i)
      to[i] = from[i];
    tensor = std::move(wide);
  }
}

} // namespace megac::cli
