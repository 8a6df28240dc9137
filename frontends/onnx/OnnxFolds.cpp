// Import-time evaluation of ONNX nodes whose inputs are all constants (shape arithmetic,
// masks, position tables): the IR never sees Shape/Gather/Concat/Range chains.
#include "frontends/onnx/OnnxGraph.h"
#include "frontends/onnx/OnnxOps.h"

#include <limits>

using namespace mlir;

namespace megac::onnx_import {

namespace {

LogicalResult emit(NodeContext &c, Folded f, int output = 0) {
  if (!f.ok())
    return c.fail(f.error);
  c.setOutput(output, std::move(f.tensor));
  return success();
}

/// Input i, which nodeFolds() guarantees is a constant (decoding may still fail).
FailureOr<const ConstTensor *> in(NodeContext &c, int i) {
  if (!c.hasInput(i))
    return c.fail("input " + Twine(i) + " is missing");
  const ConstTensor *t = c.constant(i);
  if (!t)
    return failure();
  return t;
}

LogicalResult foldConstant(NodeContext &c) {
  const auto &attrs = c.node().attribute();
  if (attrs.size() != 1)
    return c.fail("needs exactly one value attribute");
  const onnx::AttributeProto &a = attrs.Get(0);
  const std::string &name = a.name();
  if (name == "value") {
    auto t = decodeTensor(a.t(), c.loc(), "Constant '" + c.node().name() + "'");
    if (failed(t))
      return failure();
    c.setOutput(0, std::move(*t));
    return success();
  }
  if (name == "value_float")
    return c.setOutput(0, ConstTensor::fromFloats(ElemType::f32, {}, {a.f()})), success();
  if (name == "value_floats")
    return c.setOutput(0, ConstTensor::fromFloats(ElemType::f32, {a.floats_size()},
                                                  {a.floats().begin(), a.floats().end()})),
           success();
  if (name == "value_int")
    return c.setOutput(0, ConstTensor::fromInts(ElemType::i64, {}, {a.i()})), success();
  if (name == "value_ints")
    return c.setOutput(0, ConstTensor::fromInts(ElemType::i64, {a.ints_size()},
                                                {a.ints().begin(), a.ints().end()})),
           success();
  return c.fail("a '" + name +
                "' constant is not supported (string and sparse constants are "
                "not tensors mega IR has)");
}

LogicalResult foldConstantOfShape(NodeContext &c) {
  auto shape = c.intsInput(0, "shape");
  if (failed(shape))
    return failure();
  ConstTensor fill = ConstTensor::fromFloats(ElemType::f32, {1}, {0.0});
  if (const auto *a = c.attr("value")) {
    auto t = decodeTensor(a->t(), c.loc(), "ConstantOfShape value");
    if (failed(t))
      return failure();
    if (t->numElements() != 1)
      return c.fail("the value attribute must have one element");
    fill = std::move(*t);
  }
  for (int64_t d : *shape)
    if (d < 0)
      return c.fail("the shape " + shapeStr(*shape) + " has a negative dim");
  return emit(c, expand(reshape(fill, Shape(shape->size(), 1)).tensor, *shape));
}

LogicalResult foldDropout(NodeContext &c) {
  if (failed(checkDropoutIsIdentity(c)))
    return failure();
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  c.setOutput(0, **x);
  if (c.hasOutput(1)) {
    ConstTensor mask = ConstTensor::zeros(ElemType::boolean, (*x)->shape);
    std::fill(mask.ints.begin(), mask.ints.end(), 1);
    c.setOutput(1, std::move(mask));
  }
  return success();
}

FailureOr<ElemType> castTarget(NodeContext &c) {
  if (c.opType() == "CastLike")
    return c.type(1);
  const auto *to = c.attr("to");
  if (!to || to->type() != onnx::AttributeProto::INT || !isKnownElemType(int(to->i())))
    return c.fail("needs an integer 'to' attribute naming a tensor type");
  ElemType t = ElemType(to->i());
  if (!isFloatType(t) && !isIntegerOrBool(t))
    return c.fail("cannot cast to " + elemTypeName(int(t)));
  return t;
}

LogicalResult foldCast(NodeContext &c) {
  auto to = castTarget(c);
  auto x = in(c, 0);
  if (failed(to) || failed(x))
    return failure();
  return emit(c, cast(**x, *to));
}

LogicalResult foldShape(NodeContext &c) {
  const Shape &shape = c.shape(0);
  int64_t rank = int64_t(shape.size());
  int64_t start = c.opset() >= 15 ? c.attrInt("start", 0) : 0;
  int64_t end = c.opset() >= 15 ? c.attrInt("end", rank) : rank;
  if (start < 0)
    start = std::max<int64_t>(start + rank, 0);
  if (end < 0)
    end = std::max<int64_t>(end + rank, 0);
  start = std::min(start, rank);
  end = std::clamp(end, start, rank);
  std::vector<int64_t> dims(shape.begin() + start, shape.begin() + end);
  int64_t n = int64_t(dims.size());
  c.setOutput(0, ConstTensor::fromInts(ElemType::i64, {n}, std::move(dims)));
  return success();
}

LogicalResult foldSize(NodeContext &c) {
  c.setOutput(0, ConstTensor::fromInts(ElemType::i64, {}, {checkedNumElements(c.shape(0))}));
  return success();
}

template <UnaryFn Fn> LogicalResult foldUnary(NodeContext &c) {
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  return emit(c, unary(Fn, **x));
}

/// Binary ops, and the variadic Sum/Min/Max/Mean folded pairwise.
template <BinaryFn Fn> LogicalResult foldBinary(NodeContext &c) {
  auto first = in(c, 0);
  if (failed(first))
    return failure();
  if (c.numInputs() == 1)
    return emit(c, unary(UnaryFn::identity, **first));
  if (c.opType() == "Mod" && c.attrInt("fmod", 0) != 0) {
    auto y = in(c, 1);
    if (failed(y))
      return failure();
    return emit(c, binary(BinaryFn::fmod, **first, **y));
  }
  Folded acc{**first, {}};
  for (int i = 1; i < c.numInputs(); ++i) {
    auto y = in(c, i);
    if (failed(y))
      return failure();
    acc = binary(Fn, acc.tensor, **y);
    if (!acc.ok())
      return emit(c, acc);
  }
  return emit(c, acc);
}

LogicalResult foldSum(NodeContext &c) { return foldBinary<BinaryFn::add>(c); }

template <CompareFn Fn> LogicalResult foldCompare(NodeContext &c) {
  auto a = in(c, 0), b = in(c, 1);
  if (failed(a) || failed(b))
    return failure();
  if ((*a)->type == ElemType::boolean && Fn == CompareFn::eq) {
    Folded x = logical(LogicFn::lxor, **a, **b);
    return x.ok() ? emit(c, logicalNot(x.tensor)) : emit(c, x);
  }
  return emit(c, compare(Fn, **a, **b));
}

template <LogicFn Fn> LogicalResult foldLogic(NodeContext &c) {
  auto a = in(c, 0), b = in(c, 1);
  if (failed(a) || failed(b))
    return failure();
  return emit(c, logical(Fn, **a, **b));
}

LogicalResult foldNot(NodeContext &c) {
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  return emit(c, logicalNot(**x));
}

LogicalResult foldWhere(NodeContext &c) {
  auto cond = in(c, 0), a = in(c, 1), b = in(c, 2);
  if (failed(cond) || failed(a) || failed(b))
    return failure();
  return emit(c, where(**cond, **a, **b));
}

LogicalResult foldIdentity(NodeContext &c) {
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  c.setOutput(0, **x);
  return success();
}

LogicalResult foldGather(NodeContext &c) {
  auto data = in(c, 0), indices = in(c, 1);
  if (failed(data) || failed(indices))
    return failure();
  return emit(c, gather(**data, **indices, c.attrInt("axis", 0)));
}

LogicalResult foldConcat(NodeContext &c) {
  if (!c.attr("axis"))
    return c.fail("needs an 'axis' attribute");
  std::vector<const ConstTensor *> inputs;
  for (int i = 0; i < c.numInputs(); ++i) {
    if (!c.hasInput(i))
      continue;
    auto t = in(c, i);
    if (failed(t))
      return failure();
    inputs.push_back(*t);
  }
  return emit(c, concat(inputs, c.attrInt("axis", 0)));
}

LogicalResult foldRange(NodeContext &c) {
  auto start = c.scalarInput(0, "start"), limit = c.scalarInput(1, "limit"),
       delta = c.scalarInput(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  return emit(c, range(c.type(0), *start, *limit, *delta));
}

template <FailureOr<Shape> (*Target)(NodeContext &)> LogicalResult foldReshapeLike(NodeContext &c) {
  auto x = in(c, 0);
  auto shape = Target(c);
  if (failed(x) || failed(shape))
    return failure();
  return emit(c, reshape(**x, *shape));
}

LogicalResult foldExpand(NodeContext &c) {
  auto x = in(c, 0);
  auto shape = expandTarget(c);
  if (failed(x) || failed(shape))
    return failure();
  return emit(c, expand(**x, *shape));
}

LogicalResult foldTile(NodeContext &c) {
  auto x = in(c, 0);
  auto repeats = tileRepeats(c);
  if (failed(x) || failed(repeats))
    return failure();
  return emit(c, tile(**x, *repeats));
}

LogicalResult foldTranspose(NodeContext &c) {
  auto x = in(c, 0);
  auto perm = transposePerm(c);
  if (failed(x) || failed(perm))
    return failure();
  return emit(c, transpose(**x, *perm));
}

LogicalResult foldSlice(NodeContext &c) {
  auto x = in(c, 0);
  auto dims = sliceDims(c);
  if (failed(x) || failed(dims))
    return failure();
  return emit(c, slice(**x, *dims));
}

LogicalResult foldSplit(NodeContext &c) {
  auto x = in(c, 0);
  auto split = splitSizes(c);
  if (failed(x) || failed(split))
    return failure();
  auto slices = splitSlices((*x)->shape, split->first, split->second);
  for (size_t k = 0; k < slices.size(); ++k)
    if (failed(emit(c, slice(**x, slices[k]), int(k))))
      return failure();
  return success();
}

LogicalResult foldMatMul(NodeContext &c) {
  auto a = in(c, 0), b = in(c, 1);
  if (failed(a) || failed(b))
    return failure();
  return emit(c, matmul(**a, **b));
}

LogicalResult foldTrilu(NodeContext &c) {
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  auto offset = triluOffset(c);
  if (failed(offset))
    return failure();
  int64_t k = *offset;
  return emit(c, trilu(**x, k, c.attrInt("upper", 1) != 0));
}

template <ReduceFn Fn> LogicalResult foldReduce(NodeContext &c) {
  auto x = in(c, 0);
  auto args = reduceArgs(c);
  if (failed(x) || failed(args))
    return failure();
  if (args->axes.empty())
    return emit(c, unary(UnaryFn::identity, **x));
  return emit(c, reduce(Fn, **x, args->axes, args->keepDims));
}

template <bool IsMax> LogicalResult foldArg(NodeContext &c) {
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  return emit(c, argReduce(IsMax, **x, c.attrInt("axis", 0), c.attrInt("keepdims", 1) != 0,
                           c.attrInt("select_last_index", 0) != 0));
}

LogicalResult foldClip(NodeContext &c) {
  auto x = in(c, 0);
  if (failed(x))
    return failure();
  Folded acc{**x, {}};
  auto bound = [&](int index, const char *attrName, BinaryFn fn) -> LogicalResult {
    ConstTensor b;
    if (c.opset() < 11) {
      if (!c.attr(attrName))
        return success();
      b = ConstTensor::fromFloats(acc.tensor.type, {}, {c.attrFloat(attrName, 0)});
    } else {
      if (!c.hasInput(index))
        return success();
      auto t = in(c, index);
      if (failed(t))
        return failure();
      b = **t;
    }
    acc = binary(fn, acc.tensor, b);
    return acc.ok() ? success() : c.fail(acc.error);
  };
  if (failed(bound(1, "min", BinaryFn::max)) || failed(bound(2, "max", BinaryFn::min)))
    return failure();
  return emit(c, acc);
}

} // namespace

LogicalResult checkDropoutIsIdentity(NodeContext &c) {
  double ratio = 0.5;
  bool training = false;
  if (c.opset() < 7) {
    training = c.attrInt("is_test", 0) == 0;
    ratio = c.attrFloat("ratio", 0.5);
  } else if (c.opset() < 12) {
    ratio = c.attrFloat("ratio", 0.5);
  } else {
    if (c.hasInput(1)) {
      auto r = c.scalarInput(1, "ratio");
      if (failed(r))
        return failure();
      ratio = *r;
    }
    if (c.hasInput(2)) {
      auto t = c.scalarInput(2, "training_mode");
      if (failed(t))
        return failure();
      training = *t != 0;
    }
  }
  if (training && ratio != 0)
    return c.fail("training-mode Dropout (ratio " + std::to_string(ratio) +
                  ") is random; export the model in eval mode");
  return success();
}

const std::map<std::string, FoldHandler> &foldHandlers() {
  static const std::map<std::string, FoldHandler> handlers = {
      {"Abs", foldUnary<UnaryFn::abs>},
      {"Add", foldBinary<BinaryFn::add>},
      {"And", foldLogic<LogicFn::land>},
      {"ArgMax", foldArg<true>},
      {"ArgMin", foldArg<false>},
      {"Cast", foldCast},
      {"CastLike", foldCast},
      {"Ceil", foldUnary<UnaryFn::ceil>},
      {"Clip", foldClip},
      {"Concat", foldConcat},
      {"Constant", foldConstant},
      {"ConstantOfShape", foldConstantOfShape},
      {"Cos", foldUnary<UnaryFn::cos>},
      {"CumSum", foldCumSum},
      {"Div", foldBinary<BinaryFn::div>},
      {"Dropout", foldDropout},
      {"Equal", foldCompare<CompareFn::eq>},
      {"Erf", foldUnary<UnaryFn::erf>},
      {"Exp", foldUnary<UnaryFn::exp>},
      {"Expand", foldExpand},
      {"Flatten", foldReshapeLike<flattenTarget>},
      {"Floor", foldUnary<UnaryFn::floor>},
      {"Gather", foldGather},
      {"GatherElements", foldGatherElements},
      {"Greater", foldCompare<CompareFn::gt>},
      {"GreaterOrEqual", foldCompare<CompareFn::ge>},
      {"Identity", foldIdentity},
      {"Less", foldCompare<CompareFn::lt>},
      {"LessOrEqual", foldCompare<CompareFn::le>},
      {"Log", foldUnary<UnaryFn::log>},
      {"MatMul", foldMatMul},
      {"Max", foldBinary<BinaryFn::max>},
      {"Min", foldBinary<BinaryFn::min>},
      {"Mod", foldBinary<BinaryFn::mod>},
      {"Mul", foldBinary<BinaryFn::mul>},
      {"Neg", foldUnary<UnaryFn::neg>},
      {"Not", foldNot},
      {"Or", foldLogic<LogicFn::lor>},
      {"Pow", foldBinary<BinaryFn::pow>},
      {"Range", foldRange},
      {"Reciprocal", foldUnary<UnaryFn::reciprocal>},
      {"ReduceMax", foldReduce<ReduceFn::max>},
      {"ReduceMean", foldReduce<ReduceFn::mean>},
      {"ReduceMin", foldReduce<ReduceFn::min>},
      {"ReduceProd", foldReduce<ReduceFn::prod>},
      {"ReduceSum", foldReduce<ReduceFn::sum>},
      {"Relu", foldUnary<UnaryFn::relu>},
      {"Reshape", foldReshapeLike<reshapeTarget>},
      {"Round", foldUnary<UnaryFn::round>},
      {"Scatter", foldScatterElements},
      {"ScatterElements", foldScatterElements},
      {"ScatterND", foldScatterNd},
      {"Shape", foldShape},
      {"Sigmoid", foldUnary<UnaryFn::sigmoid>},
      {"Sign", foldUnary<UnaryFn::sign>},
      {"Sin", foldUnary<UnaryFn::sin>},
      {"Size", foldSize},
      {"Slice", foldSlice},
      {"Split", foldSplit},
      {"Sqrt", foldUnary<UnaryFn::sqrt>},
      {"Squeeze", foldReshapeLike<squeezeTarget>},
      {"Sub", foldBinary<BinaryFn::sub>},
      {"Sum", foldSum},
      {"Tanh", foldUnary<UnaryFn::tanh>},
      {"Tile", foldTile},
      {"Transpose", foldTranspose},
      {"Trilu", foldTrilu},
      {"Unsqueeze", foldReshapeLike<unsqueezeTarget>},
      {"Where", foldWhere},
      {"Xor", foldLogic<LogicFn::lxor>},
  };
  return handlers;
}

bool foldsOnShapes(const std::string &opType) { return opType == "Shape" || opType == "Size"; }

} // namespace megac::onnx_import
