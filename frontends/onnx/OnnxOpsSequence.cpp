// ONNX sequence ops: SplitToSequence, SequenceEmpty, SequenceConstruct, SequenceInsert,
// SequenceAt, SequenceLength and ConcatFromSequence. A sequence is a list of tensor values held
// by the importer (ValueInfo::sequence), so these ops rearrange values at import time: the IR
// sees the slices, reshapes and concats they amount to (torch.onnx's repeat_interleave with a
// dynamic batch is SplitToSequence + Loop + ConcatFromSequence, GPT-J's rotary tables).
#include "frontends/onnx/OnnxOps.h"

using namespace mlir;

namespace megac::onnx_import {

namespace {

ValueInfo tensorInfo(Value v) {
  ValueInfo info;
  info.value = v;
  info.type = Emitter::typeOf(v);
  info.shape = Emitter::shapeOf(v);
  return info;
}

ValueInfo constantInfo(ConstTensor t) {
  ValueInfo info;
  info.type = t.type;
  info.shape = t.shape;
  info.constant = std::make_shared<const ConstTensor>(std::move(t));
  return info;
}

void setSequence(NodeContext &c, std::vector<ValueInfo> items) {
  ValueInfo info;
  info.sequence = std::make_shared<const std::vector<ValueInfo>>(std::move(items));
  c.setOutputInfo(0, std::move(info));
}

/// A position input (scalar, may be negative) normalized into [0, size] (`insert`) or
/// [0, size).
FailureOr<int64_t> position(NodeContext &c, int i, int64_t size, bool insert) {
  auto pos = c.intsInput(i, "position");
  if (failed(pos))
    return failure();
  if (pos->size() != 1)
    return c.fail("position must be a scalar");
  int64_t p = (*pos)[0], limit = insert ? size + 1 : size;
  if (p < 0)
    p += size;
  if (p < 0 || p >= limit)
    return c.fail("position " + Twine((*pos)[0]) + " is out of range for a sequence of " +
                  Twine(size));
  return p;
}

LogicalResult splitToSequenceOp(NodeContext &c) {
  const Shape &in = c.shape(0);
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), c.rank(0), "axis");
  if (failed(axis))
    return failure();
  int64_t dim = in[*axis];
  std::vector<int64_t> sizes;
  bool keepDims = true;
  if (!c.hasInput(1)) {
    sizes.assign(dim, 1);
    keepDims = c.attrInt("keepdims", 1) != 0;
  } else {
    auto split = c.intsInput(1, "split");
    if (failed(split))
      return failure();
    if (c.rank(1) == 0) { // chunks of one size, the last one shorter
      int64_t chunk = (*split)[0];
      if (chunk <= 0)
        return c.fail("split size must be positive");
      for (int64_t at = 0; at < dim; at += chunk)
        sizes.push_back(std::min(chunk, dim - at));
    } else {
      sizes = *split;
      int64_t total = 0;
      for (int64_t s : sizes) {
        if (s < 0)
          return c.fail("split sizes must not be negative");
        total += s;
      }
      if (total != dim)
        return c.fail("split sizes " + shapeStr(sizes) + " do not add up to " + Twine(dim));
    }
  }
  const ConstTensor *constant = c.constant(0);
  FailureOr<Value> x = failure();
  if (!constant) {
    if (c.failed())
      return failure();
    x = c.value(0);
    if (failed(x))
      return failure();
  }
  std::vector<ValueInfo> items;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    std::vector<SliceDim> dims;
    Shape piece = in, squeezed;
    for (int64_t d = 0; d < c.rank(0); ++d) {
      dims.push_back(d == *axis ? SliceDim{offset, 1, size} : SliceDim{0, 1, in[d]});
      if (d != *axis || keepDims)
        squeezed.push_back(d == *axis ? size : in[d]);
    }
    piece[*axis] = size;
    offset += size;
    if (constant) {
      Folded f = slice(*constant, dims);
      if (f.ok())
        f = reshape(f.tensor, squeezed);
      if (!f.ok())
        return c.fail(f.error);
      items.push_back(constantInfo(std::move(f.tensor)));
      continue;
    }
    std::vector<int64_t> starts, limits, strides;
    for (const SliceDim &d : dims) {
      starts.push_back(d.start);
      limits.push_back(d.start + d.count);
      strides.push_back(1);
    }
    OpBuilder &b = c.builder();
    Value v = mega::SliceOp::create(b, c.loc(), c.tensorType(piece, c.type(0)), *x,
                                    b.getDenseI64ArrayAttr(starts), b.getDenseI64ArrayAttr(limits),
                                    b.getDenseI64ArrayAttr(strides));
    items.push_back(tensorInfo(c.reshape(v, squeezed)));
  }
  setSequence(c, std::move(items));
  return success();
}

LogicalResult sequenceEmptyOp(NodeContext &c) {
  setSequence(c, {});
  return success();
}

LogicalResult sequenceConstructOp(NodeContext &c) {
  std::vector<ValueInfo> items;
  for (int i = 0; i < c.numInputs(); ++i) {
    if (c.input(i).sequence)
      return c.fail("input " + Twine(i) + " is a sequence, not a tensor");
    items.push_back(c.input(i));
  }
  setSequence(c, std::move(items));
  return success();
}

LogicalResult sequenceInsertOp(NodeContext &c) {
  auto seq = c.sequence(0);
  if (failed(seq))
    return failure();
  if (c.input(1).sequence)
    return c.fail("the inserted value is a sequence, not a tensor");
  std::vector<ValueInfo> items = **seq;
  int64_t at = int64_t(items.size());
  if (c.hasInput(2)) {
    auto p = position(c, 2, at, /*insert=*/true);
    if (failed(p))
      return failure();
    at = *p;
  }
  items.insert(items.begin() + at, c.input(1));
  setSequence(c, std::move(items));
  return success();
}

LogicalResult sequenceAtOp(NodeContext &c) {
  auto seq = c.sequence(0);
  if (failed(seq))
    return failure();
  auto p = position(c, 1, int64_t((*seq)->size()), /*insert=*/false);
  if (failed(p))
    return failure();
  c.setOutputInfo(0, (**seq)[*p]);
  return success();
}

LogicalResult sequenceLengthOp(NodeContext &c) {
  auto seq = c.sequence(0);
  if (failed(seq))
    return failure();
  c.setOutput(0, ConstTensor::fromInts(ElemType::i64, {}, {int64_t((*seq)->size())}));
  return success();
}

LogicalResult concatFromSequenceOp(NodeContext &c) {
  auto seq = c.sequence(0);
  if (failed(seq))
    return failure();
  const std::vector<ValueInfo> &items = **seq;
  if (items.empty())
    return c.fail("cannot concatenate an empty sequence (its element shape is unknown)");
  bool newAxis = c.attrInt("new_axis", 0) != 0;
  int64_t rank = int64_t(items[0].shape.size()) + (newAxis ? 1 : 0);
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), rank, "axis");
  if (failed(axis))
    return failure();
  // Each element with its new axis, then one concat (folded when every element is constant).
  std::vector<Shape> shapes;
  for (const ValueInfo &item : items) {
    if (item.type != items[0].type || item.shape.size() != items[0].shape.size())
      return c.fail("sequence elements differ in element type or rank");
    Shape s = item.shape;
    if (newAxis)
      s.insert(s.begin() + *axis, 1);
    shapes.push_back(s);
  }
  Shape out = shapes[0];
  out[*axis] = 0;
  for (const Shape &s : shapes) {
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis && s[d] != out[d])
        return c.fail("sequence elements " + shapeStr(shapes[0]) + " and " + shapeStr(s) +
                      " differ outside the axis");
    out[*axis] += s[*axis];
  }
  bool allConstant = true;
  for (const ValueInfo &item : items)
    allConstant = allConstant && item.isConstant();
  // A copy of the items lets constantOf/materializeValue fill in their decoded forms.
  std::vector<ValueInfo> owned = items;
  if (allConstant) {
    std::vector<ConstTensor> pieces;
    for (size_t k = 0; k < owned.size(); ++k) {
      ValueInfo &item = owned[k];
      if (!item.constant)
        return c.fail("sequence element " + Twine(k) + " is an undecoded initializer");
      Folded f = reshape(*item.constant, shapes[k]);
      if (!f.ok())
        return c.fail(f.error);
      pieces.push_back(std::move(f.tensor));
    }
    std::vector<const ConstTensor *> ptrs;
    for (const ConstTensor &t : pieces)
      ptrs.push_back(&t);
    Folded f = concat(ptrs, *axis);
    if (!f.ok())
      return c.fail(f.error);
    c.setOutput(0, std::move(f.tensor));
    return success();
  }
  SmallVector<Value> values;
  for (size_t k = 0; k < owned.size(); ++k) {
    Value v = owned[k].value;
    if (!v && !owned[k].constant)
      return c.fail("sequence element " + Twine(k) + " is an undecoded initializer");
    if (!v)
      v = c.materialize(*owned[k].constant);
    values.push_back(c.reshape(v, shapes[k]));
  }
  OpBuilder &b = c.builder();
  c.setOutput(0, mega::ConcatOp::create(b, c.loc(), c.tensorType(out, items[0].type), values,
                                        b.getI64IntegerAttr(*axis)));
  return success();
}

} // namespace

void addSequenceHandlers(std::map<std::string, OpHandler> &h) {
  h["SplitToSequence"] = splitToSequenceOp;
  h["SequenceEmpty"] = sequenceEmptyOp;
  h["SequenceConstruct"] = sequenceConstructOp;
  h["SequenceInsert"] = sequenceInsertOp;
  h["SequenceAt"] = sequenceAtOp;
  h["SequenceLength"] = sequenceLengthOp;
  h["ConcatFromSequence"] = concatFromSequenceOp;
}

} // namespace megac::onnx_import
