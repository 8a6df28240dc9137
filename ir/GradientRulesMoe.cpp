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
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {MoeCombineOp::create(b, getLoc(), getInput().getType(), g, getWeights()),
            MoeRowDotOp::create(b, getLoc(), getWeights().getType(), g, getInput(), getWeights())};
  });
}

// y[t] = sum_e w[t,e] x[e,t]: dx[e,t] = w[t,e] dy[t] = moe_dispatch(dy, w);
// dw[t,e] = dot(x[e,t], dy[t]) on active entries (x is 0 on the others).
LogicalResult MoeCombineOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {MoeDispatchOp::create(b, getLoc(), getInput().getType(), g, getWeights()),
            MoeRowDotOp::create(b, getLoc(), getWeights().getType(), getInput(), g, getWeights())};
  });
}

// y[e,t] = x[e,t] W[e]^T: dx[e,t] = dy[e,t] W[e] (moe_matmul with the weight transposed),
// dW[e] = sum_t dy[e,t]^T x[e,t]. Transposed (y = x W[e]): dx = dy W[e]^T, dW[e] = x^T dy.
// The routing weights only select rows: no gradient.
LogicalResult MoeMatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    Value x = getInput(), w = getWeight(), mask = getWeights();
    bool transposed = getTransposeWeight();
    Value lhs = transposed ? x : g, rhs = transposed ? g : x;
    return {MoeMatmulOp::create(b, getLoc(), x.getType(), g, w, mask, getTopk(), !transposed,
                                getGlobalExpertsAttr()),
            MoeMatmulWeightGradOp::create(b, getLoc(), w.getType(), lhs, rhs, mask,
                                          /*accumulate=*/Value(), getTopk(),
                                          getGlobalExpertsAttr()),
            Value()};
  });
}

// Identity on the input; the aux term's gradient is the loss's seed, which the autodiff pass
// gives it (passes/training/TrainingAutodiff.cpp), not the input's gradient.
LogicalResult AddAuxLossOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [](Emitter &, Value g) -> Grads {
    return {g, Value()};
  });
}

// The identity globally: the gradient goes back the other way over the same routing.
LogicalResult MoeExchangeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    auto back = MoeExchangeOp::create(b, getLoc(), getInput().getType(), g, getTokenMask(),
                                      getExpertMask(), getMesh(), getAxes(), !getToExperts());
    return {back.getResult(), Value(), Value()};
  });
}
