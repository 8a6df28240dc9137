// Gradient rules of the mixture-of-experts ops (ir/MegaMoeOps.td). Dispatch and combine are
// adjoint to each other; both routing-weight gradients are moe_row_dot; moe_matmul's input
// gradient is moe_matmul with the weight transposed, its weight gradient
// moe_matmul_weight_grad. Every rule keeps the forward's routing weights as the activity mask,
// so the backward computes the same rows the forward did.
#include "ir/GradientEmitter.h"

using namespace mlir;
using namespace mega;
using namespace mega::grad;

// The choice is piecewise constant: no gradient.
LogicalResult TopKMaskOp::buildGradient(OpBuilder &, ArrayRef<Value>,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(Value());
  return success();
}

// y[e,t] = w[t,e] x[t] (active rows): dx[t] = sum_e w[t,e] dy[e,t] = moe_combine(dy, w);
// dw[t,e] = dot(dy[e,t], x[t]) on active entries.
LogicalResult MoeDispatchOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Value g = resultGrads[0], x = getInput(), w = getWeights();
  operandGrads.push_back(MoeCombineOp::create(b, getLoc(), x.getType(), g, w));
  operandGrads.push_back(MoeRowDotOp::create(b, getLoc(), w.getType(), g, x, w));
  return success();
}

// y[t] = sum_e w[t,e] x[e,t]: dx[e,t] = w[t,e] dy[t] = moe_dispatch(dy, w);
// dw[t,e] = dot(x[e,t], dy[t]) on active entries (x is 0 on the others).
LogicalResult MoeCombineOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Value g = resultGrads[0], x = getInput(), w = getWeights();
  operandGrads.push_back(MoeDispatchOp::create(b, getLoc(), x.getType(), g, w));
  operandGrads.push_back(MoeRowDotOp::create(b, getLoc(), w.getType(), x, g, w));
  return success();
}

// y[e,t] = x[e,t] W[e]^T: dx[e,t] = dy[e,t] W[e] (moe_matmul with the weight transposed),
// dW[e] = sum_t dy[e,t]^T x[e,t]. Transposed (y = x W[e]): dx = dy W[e]^T, dW[e] = x^T dy.
// The routing weights only select rows: no gradient.
LogicalResult MoeMatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Value g = resultGrads[0], x = getInput(), w = getWeight(), mask = getWeights();
  bool transposed = getTransposeWeight();
  operandGrads.push_back(MoeMatmulOp::create(b, getLoc(), x.getType(), g, w, mask, getTopk(),
                                             !transposed, getGlobalExpertsAttr()));
  Value lhs = transposed ? x : g, rhs = transposed ? g : x;
  operandGrads.push_back(MoeMatmulWeightGradOp::create(b, getLoc(), w.getType(), lhs, rhs, mask,
                                                       getTopk(), getGlobalExpertsAttr()));
  operandGrads.push_back(Value());
  return success();
}

// Identity on the input; the aux term's gradient is the loss's seed, which the autodiff pass
// gives it (passes/training/TrainingAutodiff.cpp), not the input's gradient.
LogicalResult AddAuxLossOp::buildGradient(OpBuilder &, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(resultGrads.empty() ? Value() : resultGrads[0]);
  operandGrads.push_back(Value());
  return success();
}

// The identity globally: the gradient goes back the other way over the same routing.
LogicalResult MoeExchangeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  auto back = MoeExchangeOp::create(b, getLoc(), getInput().getType(), resultGrads[0],
                                    getTokenMask(), getExpertMask(), getMesh(), getAxes(),
                                    !getToExperts());
  operandGrads.append({back.getResult(), Value(), Value()});
  return success();
}
