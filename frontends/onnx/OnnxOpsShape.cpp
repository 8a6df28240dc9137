// ONNX ops with run-time inputs that move data or contract it: Gather, MatMul, Gemm,
// LayerNormalization, Reshape/Squeeze/Unsqueeze/Flatten, Transpose, Slice/Split, Concat,
// Expand, Tile, Trilu; and the op tables.
#include "frontends/onnx/OnnxOps.h"

#include "ir/ShapeRules.h"

#include <algorithm>

using namespace mlir;

namespace megac::onnx_import {

namespace {

mega::shape::Dims dims(const Shape &s) { return {s.data(), s.size()}; }

LogicalResult gatherOp(NodeContext &c) {
  if (!isMegaElemType(c.type(0)))
    return c.fail("data of element type " + elemTypeName(int(c.type(0))) + " is not supported");
  int64_t rank = c.rank(0);
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), rank, "axis");
  if (failed(axis))
    return failure();
  int64_t dim = c.shape(0)[*axis];
  Value indices;
  if (const ConstTensor *idx = c.constant(1)) {
    if (idx->isFloat() || idx->type == ElemType::boolean)
      return c.fail("indices must be integers");
    // Negative indices count from the end; fold them so the op sees [0, dim).
    ConstTensor normalized = ConstTensor::fromInts(ElemType::i64, idx->shape, idx->ints);
    for (int64_t &i : normalized.ints) {
      if (i < -dim || i >= dim)
        return c.fail("index " + Twine(i) + " is out of range for dim " + Twine(*axis) +
                      " of size " + Twine(dim));
      if (i < 0)
        i += dim;
    }
    indices = c.materialize(normalized);
  } else {
    if (c.failed())
      return failure();
    if (c.type(1) != ElemType::i64 && c.type(1) != ElemType::i32)
      return c.fail("run-time indices must be INT64 or INT32, not " + elemTypeName(int(c.type(1))));
    auto v = c.value(1);
    if (failed(v))
      return failure();
    indices = *v;
  }
  auto data = c.value(0);
  if (failed(data))
    return failure();
  auto r = mega::shape::gather(dims(c.shape(0)), dims(c.shape(1)), *axis);
  if (!r.ok())
    return c.fail(r.error);
  c.setOutput(0, mega::GatherOp::create(c.builder(), c.loc(), c.tensorType(r.shape, c.type(0)),
                                        *data, indices, c.builder().getI64IntegerAttr(*axis)));
  return success();
}

/// mega.matmul of a and b (rank >= 2 each), or an error.
FailureOr<Value> matmul(NodeContext &c, Value a, Value b) {
  Shape sa = Emitter::shapeOf(a), sb = Emitter::shapeOf(b);
  auto r = mega::shape::matmul(dims(sa), dims(sb));
  if (!r.ok())
    return c.fail(r.error);
  return Value(mega::MatmulOp::create(c.builder(), c.loc(),
                                      c.tensorType(r.shape, Emitter::typeOf(a)), a, b));
}

LogicalResult matmulOp(NodeContext &c) {
  if (failed(requireFloat(c, 0)) || failed(requireSameType(c, 0, 1)))
    return failure();
  auto a = c.value(0), b = c.value(1);
  if (failed(a) || failed(b))
    return failure();
  Shape sa = c.shape(0), sb = c.shape(1);
  if (sa.empty() || sb.empty())
    return c.fail("operands must have rank >= 1");
  // numpy: a 1-D lhs is a row vector, a 1-D rhs a column vector; their unit dims are dropped.
  Value lhs = sa.size() == 1 ? c.reshape(*a, {1, sa[0]}) : *a;
  Value rhs = sb.size() == 1 ? c.reshape(*b, {sb[0], 1}) : *b;
  auto y = matmul(c, lhs, rhs);
  if (failed(y))
    return failure();
  Shape out = Emitter::shapeOf(*y);
  if (sb.size() == 1)
    out.pop_back();
  if (sa.size() == 1)
    out.erase(out.end() - (sb.size() == 1 ? 1 : 2));
  c.setOutput(0, c.reshape(*y, out));
  return success();
}

LogicalResult gemmOp(NodeContext &c) {
  if (failed(requireFloat(c, 0)) || failed(requireSameType(c, 0, 1)))
    return failure();
  if (c.hasInput(2) && failed(requireSameType(c, 0, 2)))
    return failure();
  if (c.rank(0) != 2 || c.rank(1) != 2)
    return c.fail("A and B must be matrices, got " + shapeStr(c.shape(0)) + " and " +
                  shapeStr(c.shape(1)));
  auto a = c.value(0), b = c.value(1);
  if (failed(a) || failed(b))
    return failure();
  Value lhs = c.attrInt("transA", 0) ? c.transpose(*a, {1, 0}) : *a;
  Value rhs = c.attrInt("transB", 0) ? c.transpose(*b, {1, 0}) : *b;
  auto y = matmul(c, lhs, rhs);
  if (failed(y))
    return failure();
  Emitter e{c};
  Value out = *y;
  double alpha = c.attrFloat("alpha", 1.0), beta = c.attrFloat("beta", 1.0);
  if (alpha != 1.0)
    out = e.make<mega::MulOp>(out, e.splatLike(alpha, out));
  if (c.hasInput(2) && beta != 0.0) {
    Shape shape = Emitter::shapeOf(out);
    std::string why = mega::shape::checkBroadcastsTo(dims(c.shape(2)), dims(shape));
    if (!why.empty())
      return c.fail("C: " + why);
    auto bias = c.valueAs(2, shape);
    if (failed(bias))
      return failure();
    Value scaled = beta == 1.0 ? *bias : e.make<mega::MulOp>(*bias, e.splatLike(beta, *bias));
    out = e.make<mega::AddOp>(out, scaled);
  }
  c.setOutput(0, out);
  return success();
}

LogicalResult layerNormOp(NodeContext &c) {
  if (failed(requireFloat(c, 0)) || failed(requireSameType(c, 0, 1)))
    return failure();
  if (c.hasInput(2) && failed(requireSameType(c, 0, 2)))
    return failure();
  Shape shape = c.shape(0);
  int64_t rank = int64_t(shape.size());
  if (rank == 0)
    return c.fail("needs a tensor of rank >= 1");
  auto axis = c.normalizeAxis(c.attrInt("axis", -1), rank, "axis");
  if (failed(axis))
    return failure();
  double eps = c.attrFloat("epsilon", 1e-5);
  if (!(eps > 0))
    return c.fail("epsilon must be > 0");
  // mega.layer_norm normalizes the last dim: flatten the normalized dims into one.
  Shape norm(shape.begin() + *axis, shape.end());
  Shape flat(shape.begin(), shape.begin() + *axis);
  int64_t n = checkedNumElements(norm);
  flat.push_back(n);
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto param = [&](int i) -> FailureOr<Value> {
    std::string why = mega::shape::checkBroadcastsTo(dims(c.shape(i)), dims(norm));
    if (!why.empty())
      return c.fail(Twine(i == 1 ? "Scale" : "B") + ": " + why);
    auto v = c.valueAs(i, norm);
    if (failed(v))
      return failure();
    return c.reshape(*v, {n});
  };
  auto scale = param(1);
  if (failed(scale))
    return failure();
  Value bias;
  if (c.hasInput(2)) {
    auto b = param(2);
    if (failed(b))
      return failure();
    bias = *b;
  }
  Value x2 = c.reshape(*x, flat);
  Value y = mega::LayerNormOp::create(c.builder(), c.loc(), x2.getType(), x2, *scale, bias,
                                      c.builder().getF64FloatAttr(eps));
  c.setOutput(0, c.reshape(y, shape));
  if (c.hasOutput(1) || c.hasOutput(2)) {
    // Mean and 1/stddev over the normalized dims, in the stash type (FLOAT by default).
    Emitter e{c};
    ElemType stash = c.attrInt("stash_type", 1) == 1 ? ElemType::f32 : c.type(0);
    Value xs = c.cast(x2, stash);
    int64_t last = int64_t(flat.size()) - 1;
    Shape statShape(shape.begin(), shape.begin() + *axis);
    statShape.resize(shape.size(), 1);
    Value mean = e.reduce(mega::ReduceKind::mean, xs, {last}, true);
    Value centered = e.make<mega::SubOp>(xs, c.broadcast(mean, flat));
    Value var =
        e.reduce(mega::ReduceKind::mean, e.make<mega::MulOp>(centered, centered), {last}, true);
    Value invStd = e.make<mega::RsqrtOp>(e.make<mega::AddOp>(var, e.splatLike(eps, var)));
    c.setOutput(1, c.reshape(mean, statShape));
    c.setOutput(2, c.reshape(invStd, statShape));
  }
  return success();
}

template <FailureOr<Shape> (*Target)(NodeContext &)> LogicalResult reshapeOp(NodeContext &c) {
  if (!isMegaElemType(c.type(0)))
    return c.fail("element type " + elemTypeName(int(c.type(0))) + " is not supported");
  auto shape = Target(c);
  auto x = c.value(0);
  if (failed(shape) || failed(x))
    return failure();
  c.setOutput(0, c.reshape(*x, *shape));
  return success();
}

LogicalResult transposeOp(NodeContext &c) {
  auto perm = transposePerm(c);
  auto x = c.value(0);
  if (failed(perm) || failed(x))
    return failure();
  bool identity = true;
  for (size_t i = 0; i < perm->size(); ++i)
    identity &= (*perm)[i] == int64_t(i);
  c.setOutput(0, identity ? *x : c.transpose(*x, *perm));
  return success();
}

/// mega.slice of x with unit-or-larger positive steps.
Value sliceValue(NodeContext &c, Value x, const std::vector<SliceDim> &sd) {
  std::vector<int64_t> starts, limits, strides;
  Shape out;
  for (const SliceDim &d : sd) {
    starts.push_back(d.start);
    limits.push_back(d.count ? d.start + (d.count - 1) * d.step + 1 : d.start);
    strides.push_back(d.step);
    out.push_back(d.count);
  }
  OpBuilder &b = c.builder();
  return mega::SliceOp::create(b, c.loc(), c.tensorType(out, Emitter::typeOf(x)), x,
                               b.getDenseI64ArrayAttr(starts), b.getDenseI64ArrayAttr(limits),
                               b.getDenseI64ArrayAttr(strides));
}

LogicalResult sliceOp(NodeContext &c) {
  auto sd = sliceDims(c);
  auto x = c.value(0);
  if (failed(sd) || failed(x))
    return failure();
  for (const SliceDim &d : *sd)
    if (d.step < 0)
      return c.fail("negative steps on a run-time tensor are not supported (mega.slice "
                    "strides are >= 1)");
  c.setOutput(0, sliceValue(c, *x, *sd));
  return success();
}

LogicalResult splitOp(NodeContext &c) {
  auto split = splitSizes(c);
  auto x = c.value(0);
  if (failed(split) || failed(x))
    return failure();
  auto slices = splitSlices(c.shape(0), split->first, split->second);
  for (size_t k = 0; k < slices.size(); ++k)
    c.setOutput(int(k), sliceValue(c, *x, slices[k]));
  return success();
}

LogicalResult concatOp(NodeContext &c) {
  if (!c.attr("axis"))
    return c.fail("needs an 'axis' attribute");
  std::vector<Shape> shapes;
  SmallVector<Value> inputs;
  int first = -1;
  for (int i = 0; i < c.numInputs(); ++i) {
    if (!c.hasInput(i))
      continue;
    if (first < 0)
      first = i;
    if (failed(requireSameType(c, first, i)))
      return failure();
    auto v = c.value(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
    shapes.push_back(c.shape(i));
  }
  if (inputs.empty())
    return c.fail("needs at least one input");
  int64_t rank = int64_t(shapes.front().size());
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), rank, "axis");
  if (failed(axis))
    return failure();
  auto r = mega::shape::concat(shapes, *axis);
  if (!r.ok())
    return c.fail(r.error);
  if (inputs.size() == 1) {
    c.setOutput(0, inputs.front());
    return success();
  }
  c.setOutput(0, mega::ConcatOp::create(c.builder(), c.loc(), c.tensorType(r.shape, c.type(first)),
                                        inputs, c.builder().getI64IntegerAttr(*axis)));
  return success();
}

LogicalResult expandOp(NodeContext &c) {
  auto shape = expandTarget(c);
  if (failed(shape))
    return failure();
  auto x = c.valueAs(0, *shape);
  if (failed(x))
    return failure();
  c.setOutput(0, *x);
  return success();
}

LogicalResult tileOp(NodeContext &c) {
  auto repeats = tileRepeats(c);
  auto x = c.value(0);
  if (failed(repeats) || failed(x))
    return failure();
  // tile(x)[k * d + j] = x[j]: insert a unit dim before each, broadcast it to the repeat count.
  Shape in = c.shape(0), interleaved, expanded, out;
  for (size_t d = 0; d < in.size(); ++d) {
    interleaved.insert(interleaved.end(), {1, in[d]});
    expanded.insert(expanded.end(), {(*repeats)[d], in[d]});
    out.push_back((*repeats)[d] * in[d]);
  }
  if (out == in) {
    c.setOutput(0, *x);
    return success();
  }
  Value y = c.broadcast(c.reshape(*x, interleaved), expanded);
  c.setOutput(0, c.reshape(y, out));
  return success();
}

LogicalResult triluOp(NodeContext &c) {
  if (c.rank(0) < 2)
    return c.fail("needs a tensor of rank >= 2");
  auto offset = triluOffset(c);
  if (failed(offset))
    return failure();
  int64_t k = *offset;
  auto x = c.value(0);
  if (failed(x))
    return failure();
  Shape shape = c.shape(0);
  Shape matrix(shape.end() - 2, shape.end());
  ConstTensor ones = ConstTensor::zeros(ElemType::boolean, matrix);
  std::fill(ones.ints.begin(), ones.ints.end(), 1);
  Folded mask = trilu(ones, k, c.attrInt("upper", 1) != 0);
  if (!mask.ok())
    return c.fail(mask.error);
  Emitter e{c};
  Value keep = c.broadcast(c.materialize(mask.tensor), shape);
  c.setOutput(0, e.select(keep, *x, e.splatLike(0, *x)));
  return success();
}

} // namespace

void addShapeHandlers(std::map<std::string, OpHandler> &h) {
  h["Gather"] = gatherOp;
  h["MatMul"] = matmulOp;
  h["Gemm"] = gemmOp;
  h["LayerNormalization"] = layerNormOp;
  h["Reshape"] = reshapeOp<reshapeTarget>;
  h["Flatten"] = reshapeOp<flattenTarget>;
  h["Squeeze"] = reshapeOp<squeezeTarget>;
  h["Unsqueeze"] = reshapeOp<unsqueezeTarget>;
  h["Transpose"] = transposeOp;
  h["Slice"] = sliceOp;
  h["Split"] = splitOp;
  h["Concat"] = concatOp;
  h["Expand"] = expandOp;
  h["Tile"] = tileOp;
  h["Trilu"] = triluOp;
}

const std::map<std::string, OpHandler> &opHandlers() {
  static const std::map<std::string, OpHandler> handlers = [] {
    std::map<std::string, OpHandler> h;
    addElementwiseHandlers(h);
    addShapeHandlers(h);
    addLossHandlers(h);
    addIndexHandlers(h);
    addSequenceHandlers(h);
    return h;
  }();
  return handlers;
}

namespace {
/// Folded-only ops whose inputs are constants in every model that uses them as intended.
const char *const kAlwaysConstant[] = {"Constant", "ConstantOfShape", "Range", "Shape", "Size"};
} // namespace

std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &[name, handler] : opHandlers())
    ops.push_back(name);
  ops.insert(ops.end(), std::begin(kAlwaysConstant), std::end(kAlwaysConstant));
  ops.push_back("Loop"); // unrolled by the graph importer (OnnxLoop.cpp)
  std::sort(ops.begin(), ops.end());
  return ops;
}

std::vector<std::string> constantOnlyOnnxOps() {
  std::vector<std::string> supported = supportedOnnxOps(), ops;
  for (const auto &[name, handler] : foldHandlers())
    if (!std::binary_search(supported.begin(), supported.end(), name))
      ops.push_back(name);
  return ops;
}

} // namespace megac::onnx_import
