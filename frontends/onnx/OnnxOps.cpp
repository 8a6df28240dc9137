// ONNX ops with run-time inputs, mapped onto low-level mega ops: elementwise math, logic,
// activations (those without a mega op are spelled in mega ops), casts and reductions.
// Shape-moving and contraction ops are in OnnxOpsShape.cpp.
#include "frontends/onnx/OnnxOps.h"

#include <algorithm>

#include "ir/MegaOps.h"

#include <cmath>

using namespace mlir;

namespace megac::onnx_import {

//===----------------------------------------------------------------------===//
// Emitter
//===----------------------------------------------------------------------===//

ElemType Emitter::typeOf(Value v) { return elemTypeOf(v.getType()); }

Shape Emitter::shapeOf(Value v) {
  auto s = cast<RankedTensorType>(v.getType()).getShape();
  return Shape(s.begin(), s.end());
}

Value Emitter::splatLike(double value, Value like) {
  return c.splat(value, typeOf(like), shapeOf(like));
}

Value Emitter::compare(mega::ComparePredicate p, Value a, Value b) {
  return mega::CompareOp::create(c.builder(), c.loc(), c.tensorType(shapeOf(a), ElemType::boolean),
                                 p, a, b);
}

Value Emitter::select(Value cond, Value a, Value b) {
  return mega::WhereOp::create(c.builder(), c.loc(), a.getType(), cond, a, b);
}

Value Emitter::reduce(mega::ReduceKind kind, Value x, const std::vector<int64_t> &axes,
                      bool keepDims) {
  Shape in = shapeOf(x), out;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced)
      out.push_back(in[d]);
    else if (keepDims)
      out.push_back(1);
  }
  return mega::ReduceOp::create(c.builder(), c.loc(), c.tensorType(out, typeOf(x)), kind, x, axes,
                                keepDims);
}

LogicalResult requireFloat(NodeContext &c, int i) {
  if (isFloatType(c.type(i)))
    return success();
  return c.fail("input " + Twine(i) + " has element type " + elemTypeName(int(c.type(i))) +
                "; this op needs a float tensor (FLOAT, DOUBLE, FLOAT16, BFLOAT16)");
}

LogicalResult requireNumeric(NodeContext &c, int i) {
  ElemType t = c.type(i);
  if (isMegaElemType(t) && t != ElemType::boolean)
    return success();
  return c.fail("input " + Twine(i) + " has element type " + elemTypeName(int(t)) +
                "; this op needs FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT64 or INT32 in mega IR");
}

LogicalResult requireSameType(NodeContext &c, int i, int j) {
  if (c.type(i) == c.type(j))
    return success();
  return c.fail("inputs " + Twine(i) + " and " + Twine(j) + " have different element types (" +
                elemTypeName(int(c.type(i))) + " and " + elemTypeName(int(c.type(j))) + ")");
}

FailureOr<Shape> broadcastInputs(NodeContext &c, const std::vector<int> &inputs) {
  Shape shape;
  bool first = true;
  for (int i : inputs) {
    if (!c.hasInput(i))
      continue;
    if (first) {
      shape = c.shape(i);
      first = false;
      continue;
    }
    auto b = broadcastShapes(shape, c.shape(i));
    if (!b)
      return c.fail("input shapes " + shapeStr(shape) + " and " + shapeStr(c.shape(i)) +
                    " do not broadcast");
    shape = *b;
  }
  if (checkedNumElements(shape) < 0)
    return c.fail("the broadcast shape " + shapeStr(shape) + " is too large");
  return shape;
}

namespace {

LogicalResult requireBool(NodeContext &c, int i) {
  if (c.type(i) == ElemType::boolean)
    return success();
  return c.fail("input " + Twine(i) + " must be BOOL, not " + elemTypeName(int(c.type(i))));
}

using InputCheck = LogicalResult (*)(NodeContext &, int);

/// Checks input 0 with `check` (none when null), then sets output 0 to fn(input 0); `fn`
/// reports its own errors.
LogicalResult mapInput(NodeContext &c, InputCheck check,
                       const std::function<FailureOr<Value>(Emitter &, Value)> &fn) {
  if (check && failed(check(c, 0)))
    return failure();
  auto x = c.value(0);
  if (failed(x))
    return failure();
  Emitter e{c};
  auto y = fn(e, *x);
  if (failed(y))
    return failure();
  c.setOutput(0, *y);
  return success();
}

/// Broadcasts `inputs` to their common shape, then sets output 0 to fn(those values).
LogicalResult mapBroadcast(NodeContext &c, const std::vector<int> &inputs,
                           const std::function<Value(Emitter &, ArrayRef<Value>)> &fn) {
  auto shape = broadcastInputs(c, inputs);
  if (failed(shape))
    return failure();
  SmallVector<Value> values;
  bool ok = true;
  for (int i : inputs) { // every input is materialized, as before, even after a failure
    auto v = c.valueAs(i, *shape);
    if (failed(v))
      ok = false;
    else
      values.push_back(*v);
  }
  if (!ok)
    return failure();
  Emitter e{c};
  c.setOutput(0, fn(e, values));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// Combines all inputs with OpTy, broadcasting them to their common shape first.
template <typename OpTy>
FailureOr<Value> combineInputs(NodeContext &c, bool floatOnly, bool sameTypes) {
  std::vector<int> inputs;
  for (int i = 0; i < c.numInputs(); ++i) {
    if (!c.hasInput(i))
      return c.fail("input " + Twine(i) + " is missing");
    // Pow's exponent may be an integer tensor (cast to the base's type below).
    bool needsFloat = floatOnly && (sameTypes || i == 0);
    if (failed(needsFloat ? requireFloat(c, i) : requireNumeric(c, i)))
      return failure();
    if (sameTypes && failed(requireSameType(c, 0, i)))
      return failure();
    inputs.push_back(i);
  }
  if (inputs.empty())
    return c.fail("needs at least one input");
  auto shape = broadcastInputs(c, inputs);
  if (failed(shape))
    return failure();
  Emitter e{c};
  auto acc = c.valueAs(0, *shape);
  if (failed(acc))
    return failure();
  Value result = *acc;
  for (size_t k = 1; k < inputs.size(); ++k) {
    auto rhs = c.valueAs(inputs[k], *shape);
    if (failed(rhs))
      return failure();
    // Pow's exponent may have another type (an integer power of a float base).
    result = e.make<OpTy>(result, c.cast(*rhs, c.type(0)));
  }
  return result;
}

/// Add, Sub, Mul, Div, Pow and the variadic Sum, Min, Max (numpy broadcasting made explicit).
template <typename OpTy, bool FloatOnly = false> LogicalResult binaryOp(NodeContext &c) {
  bool isPow = std::is_same_v<OpTy, mega::PowOp>;
  auto r = combineInputs<OpTy>(c, FloatOnly, !isPow);
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult meanOp(NodeContext &c) {
  auto sum = combineInputs<mega::AddOp>(c, /*floatOnly=*/true, /*sameTypes=*/true);
  if (failed(sum))
    return failure();
  Emitter e{c};
  c.setOutput(0, e.make<mega::DivOp>(*sum, e.splatLike(double(c.numInputs()), *sum)));
  return success();
}

template <typename OpTy, bool FloatOnly = true> LogicalResult unaryOp(NodeContext &c) {
  return mapInput(c, FloatOnly ? requireFloat : requireNumeric,
                  [](Emitter &e, Value x) { return e.make<OpTy>(x); });
}

/// Float inputs only; `fn` spells the op in mega ops.
LogicalResult composite(NodeContext &c, const std::function<Value(Emitter &, Value)> &fn) {
  return mapInput(c, requireFloat, fn);
}

LogicalResult reluOp(NodeContext &c) {
  if (isFloatType(c.type(0)))
    return unaryOp<mega::ReluOp>(c);
  return mapInput(c, requireNumeric,
                  [](Emitter &e, Value x) { return e.make<mega::MaxOp>(x, e.splatLike(0, x)); });
}

LogicalResult reciprocalOp(NodeContext &c) {
  return composite(c,
                   [](Emitter &e, Value x) { return e.make<mega::DivOp>(e.splatLike(1, x), x); });
}

LogicalResult signOp(NodeContext &c) {
  return mapInput(c, requireNumeric, [](Emitter &e, Value x) {
    Value zero = e.splatLike(0, x);
    Value negative =
        e.select(e.compare(mega::ComparePredicate::lt, x, zero), e.splatLike(-1, x), zero);
    return e.select(e.compare(mega::ComparePredicate::gt, x, zero), e.splatLike(1, x), negative);
  });
}

/// x >= 0 ? x : negative(x), for the ReLU family.
Value piecewise(Emitter &e, Value x, Value negative, bool strict = true) {
  Value zero = e.splatLike(0, x);
  auto p = strict ? mega::ComparePredicate::lt : mega::ComparePredicate::le;
  return e.select(e.compare(p, x, zero), negative, x);
}

Value expm1Scaled(Emitter &e, Value x, double alpha) {
  Value em1 = e.make<mega::SubOp>(e.make<mega::ExpOp>(x), e.splatLike(1, x));
  return e.make<mega::MulOp>(em1, e.splatLike(alpha, x));
}

LogicalResult leakyReluOp(NodeContext &c) {
  double alpha = c.attrFloat("alpha", 0.01);
  return composite(c, [&](Emitter &e, Value x) {
    return piecewise(e, x, e.make<mega::MulOp>(x, e.splatLike(alpha, x)));
  });
}

LogicalResult eluOp(NodeContext &c) {
  double alpha = c.attrFloat("alpha", 1.0);
  return composite(c,
                   [&](Emitter &e, Value x) { return piecewise(e, x, expm1Scaled(e, x, alpha)); });
}

LogicalResult seluOp(NodeContext &c) {
  double alpha = c.attrFloat("alpha", 1.67326319217681884765625);
  double gamma = c.attrFloat("gamma", 1.05070102214813232421875);
  return composite(c, [&](Emitter &e, Value x) {
    Value y = piecewise(e, x, expm1Scaled(e, x, alpha), /*strict=*/false);
    return e.make<mega::MulOp>(y, e.splatLike(gamma, x));
  });
}

LogicalResult celuOp(NodeContext &c) {
  double alpha = c.attrFloat("alpha", 1.0);
  return composite(c, [&](Emitter &e, Value x) {
    Value zero = e.splatLike(0, x);
    Value scaled = e.make<mega::DivOp>(x, e.splatLike(alpha, x));
    Value neg = e.make<mega::MinOp>(zero, expm1Scaled(e, scaled, alpha));
    return e.make<mega::AddOp>(e.make<mega::MaxOp>(zero, x), neg);
  });
}

LogicalResult thresholdedReluOp(NodeContext &c) {
  double alpha = c.attrFloat("alpha", 1.0);
  return composite(c, [&](Emitter &e, Value x) {
    Value above = e.compare(mega::ComparePredicate::gt, x, e.splatLike(alpha, x));
    return e.select(above, x, e.splatLike(0, x));
  });
}

Value hardSigmoid(Emitter &e, Value x, double alpha, double beta) {
  Value y =
      e.make<mega::AddOp>(e.make<mega::MulOp>(x, e.splatLike(alpha, x)), e.splatLike(beta, x));
  return e.make<mega::MaxOp>(e.make<mega::MinOp>(y, e.splatLike(1, x)), e.splatLike(0, x));
}

LogicalResult hardSigmoidOp(NodeContext &c) {
  double alpha = c.attrFloat("alpha", 0.2), beta = c.attrFloat("beta", 0.5);
  return composite(c, [&](Emitter &e, Value x) { return hardSigmoid(e, x, alpha, beta); });
}

LogicalResult hardSwishOp(NodeContext &c) {
  return composite(c, [](Emitter &e, Value x) {
    return e.make<mega::MulOp>(x, hardSigmoid(e, x, 1.0 / 6.0, 0.5));
  });
}

Value softplus(Emitter &e, Value x) {
  return e.make<mega::LogOp>(e.make<mega::AddOp>(e.make<mega::ExpOp>(x), e.splatLike(1, x)));
}

LogicalResult softplusOp(NodeContext &c) { return composite(c, softplus); }

LogicalResult softsignOp(NodeContext &c) {
  return composite(c, [](Emitter &e, Value x) {
    Value denom = e.make<mega::AddOp>(e.make<mega::AbsOp>(x), e.splatLike(1, x));
    return e.make<mega::DivOp>(x, denom);
  });
}

LogicalResult mishOp(NodeContext &c) {
  return composite(c, [](Emitter &e, Value x) {
    return e.make<mega::MulOp>(x, e.make<mega::TanhOp>(softplus(e, x)));
  });
}

LogicalResult preluOp(NodeContext &c) {
  if (failed(requireFloat(c, 0)) || failed(requireSameType(c, 0, 1)))
    return failure();
  return mapBroadcast(c, {0, 1}, [](Emitter &e, ArrayRef<Value> v) {
    return piecewise(e, v[0], e.make<mega::MulOp>(v[0], v[1]));
  });
}

LogicalResult clipOp(NodeContext &c) {
  return mapInput(c, requireNumeric, [&](Emitter &e, Value x) -> FailureOr<Value> {
    Value y = x;
    Shape shape = c.shape(0);
    auto bound = [&](int index, const char *attrName, bool isMin) -> LogicalResult {
      Value b;
      if (c.opset() < 11) {
        if (!c.attr(attrName))
          return success();
        b = e.splatLike(c.attrFloat(attrName, 0), y);
      } else {
        if (!c.hasInput(index))
          return success();
        if (failed(requireSameType(c, 0, index)))
          return failure();
        if (!c.shape(index).empty() && checkedNumElements(c.shape(index)) != 1)
          return c.fail("Clip bounds must be scalars");
        auto v = c.valueAs(index, {});
        if (failed(v))
          return failure();
        b = c.broadcast(*v, shape);
      }
      y = isMin ? e.make<mega::MaxOp>(y, b) : e.make<mega::MinOp>(y, b);
      return success();
    };
    if (failed(bound(1, "min", true)) || failed(bound(2, "max", false)))
      return failure();
    return y;
  });
}

//===----------------------------------------------------------------------===//
// Logic and selection
//===----------------------------------------------------------------------===//

Value logicalXor(Emitter &e, Value a, Value b) {
  Value notA = mega::NotOp::create(e.c.builder(), e.c.loc(), a.getType(), a);
  Value notB = mega::NotOp::create(e.c.builder(), e.c.loc(), b.getType(), b);
  return e.make<mega::OrOp>(e.make<mega::AndOp>(a, notB), e.make<mega::AndOp>(notA, b));
}

template <mega::ComparePredicate P> LogicalResult compareOp(NodeContext &c) {
  if (failed(requireSameType(c, 0, 1)))
    return failure();
  bool boolEq = c.type(0) == ElemType::boolean && P == mega::ComparePredicate::eq;
  if (!boolEq && failed(requireNumeric(c, 0)))
    return failure();
  return mapBroadcast(c, {0, 1}, [boolEq](Emitter &e, ArrayRef<Value> v) {
    return boolEq ? e.make<mega::NotOp>(logicalXor(e, v[0], v[1])) : e.compare(P, v[0], v[1]);
  });
}

template <int Kind> LogicalResult logicOp(NodeContext &c) {
  if (failed(requireBool(c, 0)) || failed(requireBool(c, 1)))
    return failure();
  return mapBroadcast(c, {0, 1}, [](Emitter &e, ArrayRef<Value> v) {
    return Kind == 0   ? e.make<mega::AndOp>(v[0], v[1])
           : Kind == 1 ? e.make<mega::OrOp>(v[0], v[1])
                       : logicalXor(e, v[0], v[1]);
  });
}

LogicalResult notOp(NodeContext &c) {
  return mapInput(c, requireBool, [](Emitter &e, Value x) { return e.make<mega::NotOp>(x); });
}

LogicalResult whereOp(NodeContext &c) {
  if (failed(requireBool(c, 0)) || failed(requireSameType(c, 1, 2)))
    return failure();
  if (!isMegaElemType(c.type(1)))
    return c.fail("values of element type " + elemTypeName(int(c.type(1))) + " are not supported");
  return mapBroadcast(c, {0, 1, 2},
                      [](Emitter &e, ArrayRef<Value> v) { return e.select(v[0], v[1], v[2]); });
}

//===----------------------------------------------------------------------===//
// Casts and identities
//===----------------------------------------------------------------------===//

LogicalResult castOp(NodeContext &c) {
  ElemType to;
  if (c.opType() == "CastLike") {
    to = c.type(1);
  } else {
    const auto *attr = c.attr("to");
    if (!attr || attr->type() != onnx::AttributeProto::INT || !isKnownElemType(int(attr->i())))
      return c.fail("needs an integer 'to' attribute naming a tensor type");
    to = ElemType(attr->i());
  }
  if (!isMegaElemType(to))
    return c.fail("cannot cast to " + elemTypeName(int(to)) +
                  ", which mega IR has no tensors of (it has FLOAT, DOUBLE, FLOAT16, BFLOAT16, "
                  "INT64, INT32, BOOL)");
  if (!isMegaElemType(c.type(0)))
    return c.fail("cannot cast from " + elemTypeName(int(c.type(0))));
  return mapInput(c, nullptr, [&](Emitter &e, Value x) {
    // ONNX casts numbers to BOOL as "!= 0"; mega.cast does not define that direction.
    if (to == ElemType::boolean && c.type(0) != ElemType::boolean)
      return e.compare(mega::ComparePredicate::ne, x, e.splatLike(0, x));
    return c.cast(x, to);
  });
}

LogicalResult identityOp(NodeContext &c) {
  return mapInput(c, nullptr, [](Emitter &, Value x) { return x; });
}

LogicalResult dropoutOp(NodeContext &c) {
  if (failed(checkDropoutIsIdentity(c)))
    return failure();
  auto x = c.value(0);
  if (failed(x))
    return failure();
  c.setOutput(0, *x);
  if (c.hasOutput(1)) {
    ConstTensor mask = ConstTensor::zeros(ElemType::boolean, c.shape(0));
    std::fill(mask.ints.begin(), mask.ints.end(), 1);
    c.setOutput(1, std::move(mask));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

enum class ReduceForm { sum, mean, max, min, sumSquare, l1, l2, logSum, logSumExp };

template <ReduceForm Form> LogicalResult reduceOp(NodeContext &c) {
  bool needsFloat = Form == ReduceForm::mean || Form == ReduceForm::l2 ||
                    Form == ReduceForm::logSum || Form == ReduceForm::logSumExp;
  if (failed(needsFloat ? requireFloat(c, 0) : requireNumeric(c, 0)))
    return failure();
  auto args = reduceArgs(c);
  auto x = c.value(0);
  if (failed(args) || failed(x))
    return failure();
  Emitter e{c};
  Value in = *x;
  if (Form == ReduceForm::sumSquare || Form == ReduceForm::l2)
    in = e.make<mega::MulOp>(in, in);
  else if (Form == ReduceForm::l1)
    in = e.make<mega::AbsOp>(in);
  else if (Form == ReduceForm::logSumExp)
    in = e.make<mega::ExpOp>(in);
  if (args->axes.empty()) { // noop_with_empty_axes: the transform alone
    c.setOutput(0, in);
    return success();
  }
  mega::ReduceKind kind = Form == ReduceForm::mean  ? mega::ReduceKind::mean
                          : Form == ReduceForm::max ? mega::ReduceKind::max
                          : Form == ReduceForm::min ? mega::ReduceKind::min
                                                    : mega::ReduceKind::sum;
  Value r = e.reduce(kind, in, args->axes, args->keepDims);
  if (Form == ReduceForm::l2)
    r = e.make<mega::SqrtOp>(r);
  else if (Form == ReduceForm::logSum || Form == ReduceForm::logSumExp)
    r = e.make<mega::LogOp>(r);
  c.setOutput(0, r);
  return success();
}

/// Softmax and LogSoftmax; before opset 13 they work on the input flattened to 2-D at `axis`.
template <bool Log> LogicalResult softmaxOp(NodeContext &c) {
  if (failed(requireFloat(c, 0)))
    return failure();
  int64_t rank = c.rank(0);
  if (rank == 0)
    return c.fail("needs a tensor of rank >= 1");
  auto axis = c.normalizeAxis(c.attrInt("axis", c.opset() < 13 ? 1 : -1), rank, "axis");
  auto x = c.value(0);
  if (failed(axis) || failed(x))
    return failure();
  Emitter e{c};
  Shape shape = c.shape(0);
  Value in = *x;
  int64_t along = *axis;
  if (c.opset() < 13 && *axis != rank - 1) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < *axis ? outer : inner) *= shape[d];
    in = c.reshape(in, {outer, inner});
    along = 1;
  }
  Value y;
  if (!Log) {
    y = mega::SoftmaxOp::create(c.builder(), c.loc(), in.getType(), in,
                                c.builder().getI64IntegerAttr(along));
  } else {
    // x - max - log(sum(exp(x - max))), stable for large logits.
    Shape s = Emitter::shapeOf(in);
    Value max = c.broadcast(e.reduce(mega::ReduceKind::max, in, {along}, true), s);
    Value shifted = e.make<mega::SubOp>(in, max);
    Value sum = e.reduce(mega::ReduceKind::sum, e.make<mega::ExpOp>(shifted), {along}, true);
    y = e.make<mega::SubOp>(shifted, c.broadcast(e.make<mega::LogOp>(sum), s));
  }
  c.setOutput(0, c.reshape(y, shape));
  return success();
}

} // namespace

void addElementwiseHandlers(std::map<std::string, OpHandler> &h) {
  h["Add"] = binaryOp<mega::AddOp>;
  h["Sub"] = binaryOp<mega::SubOp>;
  h["Mul"] = binaryOp<mega::MulOp>;
  h["Div"] = binaryOp<mega::DivOp>;
  h["Pow"] = binaryOp<mega::PowOp, true>;
  h["Min"] = binaryOp<mega::MinOp>;
  h["Max"] = binaryOp<mega::MaxOp>;
  h["Sum"] = binaryOp<mega::AddOp>;
  h["Mean"] = meanOp;
  h["Neg"] = unaryOp<mega::NegOp, false>;
  h["Abs"] = unaryOp<mega::AbsOp, false>;
  h["Exp"] = unaryOp<mega::ExpOp>;
  h["Log"] = unaryOp<mega::LogOp>;
  h["Tanh"] = unaryOp<mega::TanhOp>;
  h["Erf"] = unaryOp<mega::ErfOp>;
  h["Sigmoid"] = unaryOp<mega::SigmoidOp>;
  h["Sqrt"] = unaryOp<mega::SqrtOp>;
  h["Sin"] = unaryOp<mega::SinOp>;
  h["Cos"] = unaryOp<mega::CosOp>;
  h["Relu"] = reluOp;
  h["Reciprocal"] = reciprocalOp;
  h["Sign"] = signOp;
  h["LeakyRelu"] = leakyReluOp;
  h["Elu"] = eluOp;
  h["Selu"] = seluOp;
  h["Celu"] = celuOp;
  h["ThresholdedRelu"] = thresholdedReluOp;
  h["HardSigmoid"] = hardSigmoidOp;
  h["HardSwish"] = hardSwishOp;
  h["Softplus"] = softplusOp;
  h["Softsign"] = softsignOp;
  h["Mish"] = mishOp;
  h["PRelu"] = preluOp;
  h["Clip"] = clipOp;
  h["Equal"] = compareOp<mega::ComparePredicate::eq>;
  h["Less"] = compareOp<mega::ComparePredicate::lt>;
  h["LessOrEqual"] = compareOp<mega::ComparePredicate::le>;
  h["Greater"] = compareOp<mega::ComparePredicate::gt>;
  h["GreaterOrEqual"] = compareOp<mega::ComparePredicate::ge>;
  h["And"] = logicOp<0>;
  h["Or"] = logicOp<1>;
  h["Xor"] = logicOp<2>;
  h["Not"] = notOp;
  h["Where"] = whereOp;
  h["Cast"] = castOp;
  h["CastLike"] = castOp;
  h["Identity"] = identityOp;
  h["Dropout"] = dropoutOp;
  h["ReduceSum"] = reduceOp<ReduceForm::sum>;
  h["ReduceMean"] = reduceOp<ReduceForm::mean>;
  h["ReduceMax"] = reduceOp<ReduceForm::max>;
  h["ReduceMin"] = reduceOp<ReduceForm::min>;
  h["ReduceSumSquare"] = reduceOp<ReduceForm::sumSquare>;
  h["ReduceL1"] = reduceOp<ReduceForm::l1>;
  h["ReduceL2"] = reduceOp<ReduceForm::l2>;
  h["ReduceLogSum"] = reduceOp<ReduceForm::logSum>;
  h["ReduceLogSumExp"] = reduceOp<ReduceForm::logSumExp>;
  h["Softmax"] = softmaxOp<false>;
  h["LogSoftmax"] = softmaxOp<true>;
}

} // namespace megac::onnx_import
