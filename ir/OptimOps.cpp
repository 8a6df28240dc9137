// Verifier and cost of the multi-tensor optimizer op (ir/MegaOptimOps.td).
#include "ir/MegaCost.h"
#include "ir/MegaOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>

using namespace mlir;
using namespace mega;

LogicalResult AdamWUpdateMultiOp::verify() {
  size_t tensors = getTensors().size();
  if (tensors == 0 || tensors % 4 != 0)
    return emitOpError() << "takes four tensors (param, grad, exp_avg, exp_avg_sq) per "
                         << "parameter after lr and step, got " << tensors;
  size_t n = getNumParams();
  if (getUpdated().size() != 3 * n)
    return emitOpError() << "has " << getUpdated().size() << " results for " << n
                         << " parameters; it returns three (param, exp_avg, exp_avg_sq) each";
  if (getWeightDecays().size() != static_cast<int64_t>(n))
    return emitOpError() << "has " << getWeightDecays().size() << " weight_decays for " << n
                         << " parameters; give one each";
  auto inUnit = [](const APFloat &x) {
    double d = x.convertToDouble();
    return d >= 0.0 && d < 1.0;
  };
  if (!inUnit(getBeta1()) || !inUnit(getBeta2()))
    return emitOpError() << "beta1 and beta2 must be in [0, 1)";
  if (!(getEps().convertToDouble() > 0))
    return emitOpError() << "eps must be > 0";
  for (size_t k = 0; k < n; ++k) {
    auto p = cast<RankedTensorType>(getParam(k).getType());
    Value operands[] = {getGrad(k), getExpAvg(k), getExpAvgSq(k)};
    for (Value v : operands)
      if (cast<RankedTensorType>(v.getType()).getShape() != p.getShape())
        return emitOpError() << "parameter " << k << ": param, grad and moments must share one "
                             << "shape; param is " << p;
    // As adamw_update: the moments have the parameter's element type.
    if (getExpAvg(k).getType() != p || getExpAvgSq(k).getType() != p)
      return emitOpError() << "parameter " << k << ": the moments must have the parameter's type "
                           << p;
    if (getNewParam(k).getType() != p || getNewExpAvg(k).getType() != p ||
        getNewExpAvgSq(k).getType() != p)
      return emitOpError() << "parameter " << k << ": results must have the parameter's type " << p;
    double decay = getWeightDecays()[k];
    if (!(decay >= 0.0))
      return emitOpError() << "parameter " << k << ": weight decay must be >= 0, got " << decay;
  }
  if (static_cast<bool>(getNorm()) != getMaxNorm().has_value())
    return emitOpError() << "clips with a norm operand and a max_norm together, or with neither";
  if (Value norm = getNorm()) {
    double maxNorm = getMaxNorm()->convertToDouble();
    if (!(maxNorm > 0.0) || !std::isfinite(maxNorm))
      return emitOpError() << "max_norm must be finite and > 0, got " << maxNorm;
    // As clip_by_norm: the coefficient is computed in the gradient's type.
    Type normType = getElementTypeOrSelf(norm.getType());
    for (size_t k = 0; k < n; ++k)
      if (getElementTypeOrSelf(getGrad(k).getType()) != normType)
        return emitOpError() << "parameter " << k << ": the gradient's element type must be the "
                             << "clip norm's " << normType;
  }
  return success();
}

// adamw_update's 16 per element, over every parameter (and the clip's multiply).
int64_t AdamWUpdateMultiOp::getFlops() {
  int64_t n = 0;
  for (size_t k = 0; k < getNumParams(); ++k)
    n += (getNorm() ? 17 : 16) * cost::numElements(getParam(k).getType());
  return n;
}
