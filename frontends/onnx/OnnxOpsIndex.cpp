// ONNX element-indexing ops: CumSum, GatherElements, ScatterElements (and its opset-9 name
// Scatter) and ScatterND, each one mega op at run time and folded when its inputs are
// constants (transformers' position ids and masks built from constants).
#include "frontends/onnx/OnnxOps.h"

using namespace mlir;

namespace megac::onnx_import {

namespace {

LogicalResult emitFolded(NodeContext &c, Folded f) {
  if (!f.ok())
    return c.fail(f.error);
  c.setOutput(0, std::move(f.tensor));
  return success();
}

/// ScatterElements / ScatterND `reduction` (opset 16+): none overwrites, add accumulates.
FailureOr<bool> accumulates(NodeContext &c) {
  std::string reduction = c.attrString("reduction", "none");
  if (reduction == "none")
    return false;
  if (reduction == "add")
    return true;
  return c.fail("reduction '" + reduction + "' is not supported (none, add)");
}

/// CumSum's normalized axis, from its constant `axis` input.
FailureOr<int64_t> cumsumAxis(NodeContext &c) {
  auto axis = c.intsInput(1, "axis");
  if (failed(axis))
    return failure();
  if (axis->size() != 1)
    return c.fail("axis must hold one value");
  return c.normalizeAxis((*axis)[0], c.rank(0), "axis");
}

LogicalResult checkIndices(NodeContext &c, int i) {
  if (c.type(i) != ElemType::i64 && c.type(i) != ElemType::i32)
    return c.fail("indices must be INT64 or INT32, not " + elemTypeName(int(c.type(i))));
  return success();
}

LogicalResult checkData(NodeContext &c, int i) {
  if (!isMegaElemType(c.type(i)))
    return c.fail("data of element type " + elemTypeName(int(c.type(i))) + " is not supported");
  return success();
}

LogicalResult cumsumOp(NodeContext &c) {
  if (failed(requireNumeric(c, 0)))
    return failure();
  auto axis = cumsumAxis(c);
  auto x = c.value(0);
  if (failed(axis) || failed(x))
    return failure();
  c.setOutput(0,
              mega::CumSumOp::create(c.builder(), c.loc(), x->getType(), *x, *axis,
                                     c.attrInt("exclusive", 0) != 0, c.attrInt("reverse", 0) != 0));
  return success();
}

LogicalResult gatherElementsOp(NodeContext &c) {
  if (failed(checkData(c, 0)) || failed(checkIndices(c, 1)))
    return failure();
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), c.rank(0), "axis");
  auto data = c.value(0);
  auto indices = c.value(1);
  if (failed(axis) || failed(data) || failed(indices))
    return failure();
  if (c.rank(1) != c.rank(0))
    return c.fail("indices must have the data's rank");
  c.setOutput(0, mega::GatherElementsOp::create(c.builder(), c.loc(),
                                                c.tensorType(c.shape(1), c.type(0)), *data,
                                                *indices, *axis));
  return success();
}

LogicalResult scatterElementsOp(NodeContext &c) {
  if (failed(checkData(c, 0)) || failed(checkIndices(c, 1)) || failed(requireSameType(c, 0, 2)))
    return failure();
  auto accumulate = accumulates(c);
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), c.rank(0), "axis");
  if (failed(accumulate) || failed(axis))
    return failure();
  if (c.rank(1) != c.rank(0) || c.shape(1) != c.shape(2))
    return c.fail("indices and updates must have one shape, of the data's rank");
  auto data = c.value(0);
  auto indices = c.value(1);
  auto updates = c.value(2);
  if (failed(data) || failed(indices) || failed(updates))
    return failure();
  c.setOutput(0, mega::ScatterElementsOp::create(c.builder(), c.loc(), data->getType(), *data,
                                                 *indices, *updates, *axis, *accumulate));
  return success();
}

LogicalResult scatterNdOp(NodeContext &c) {
  if (failed(checkData(c, 0)) || failed(checkIndices(c, 1)) || failed(requireSameType(c, 0, 2)))
    return failure();
  auto accumulate = accumulates(c);
  auto data = c.value(0);
  auto indices = c.value(1);
  auto updates = c.value(2);
  if (failed(accumulate) || failed(data) || failed(indices) || failed(updates))
    return failure();
  // The op's verifier states the shape rule; check it here for a located ONNX error.
  int64_t k = c.rank(1) ? c.shape(1).back() : 0;
  Shape want;
  if (k >= 1 && k <= c.rank(0)) {
    want.assign(c.shape(1).begin(), c.shape(1).end() - 1);
    want.insert(want.end(), c.shape(0).begin() + k, c.shape(0).end());
  }
  if (want.empty() && !(k >= 1 && k <= c.rank(0)))
    return c.fail("indices must end in a tuple size from 1 to the data's rank");
  if (c.shape(2) != want)
    return c.fail("updates have shape " + shapeStr(c.shape(2)) + ", expected " + shapeStr(want));
  c.setOutput(0, mega::ScatterNdOp::create(c.builder(), c.loc(), data->getType(), *data, *indices,
                                           *updates, *accumulate));
  return success();
}

} // namespace

LogicalResult foldCumSum(NodeContext &c) {
  auto axis = cumsumAxis(c);
  const ConstTensor *x = c.constant(0);
  if (failed(axis) || !x)
    return failure();
  return emitFolded(
      c, cumsum(*x, *axis, c.attrInt("exclusive", 0) != 0, c.attrInt("reverse", 0) != 0));
}

LogicalResult foldGatherElements(NodeContext &c) {
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), c.rank(0), "axis");
  const ConstTensor *data = c.constant(0), *indices = c.constant(1);
  if (failed(axis) || !data || !indices)
    return failure();
  return emitFolded(c, gatherElements(*data, *indices, *axis));
}

LogicalResult foldScatterElements(NodeContext &c) {
  auto accumulate = accumulates(c);
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), c.rank(0), "axis");
  const ConstTensor *data = c.constant(0), *indices = c.constant(1), *updates = c.constant(2);
  if (failed(accumulate) || failed(axis) || !data || !indices || !updates)
    return failure();
  return emitFolded(c, scatterElements(*data, *indices, *updates, *axis, *accumulate));
}

LogicalResult foldScatterNd(NodeContext &c) {
  auto accumulate = accumulates(c);
  const ConstTensor *data = c.constant(0), *indices = c.constant(1), *updates = c.constant(2);
  if (failed(accumulate) || !data || !indices || !updates)
    return failure();
  return emitFolded(c, scatterNd(*data, *indices, *updates, *accumulate));
}

void addIndexHandlers(std::map<std::string, OpHandler> &h) {
  h["CumSum"] = cumsumOp;
  h["GatherElements"] = gatherElementsOp;
  h["ScatterElements"] = scatterElementsOp;
  h["Scatter"] = scatterElementsOp;
  h["ScatterND"] = scatterNdOp;
}

} // namespace megac::onnx_import
