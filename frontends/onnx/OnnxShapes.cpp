// The shape-determining arguments of ONNX ops (Reshape's shape, Slice's starts/ends, Split's
// sizes, reduction axes, ...), read per opset and checked, for both folding and conversion.
#include "frontends/onnx/OnnxGraph.h"

#include <algorithm>
#include <limits>

using namespace mlir;

namespace megac::onnx_import {

namespace {

/// Axes from the attribute (before `inputSince`) or from input `index` (from it on).
FailureOr<std::optional<std::vector<int64_t>>> axesArg(NodeContext &c, int64_t inputSince,
                                                       int index) {
  if (c.opset() < inputSince)
    return c.attrInts("axes");
  if (!c.hasInput(index))
    return std::optional<std::vector<int64_t>>();
  auto axes = c.intsInput(index, "axes");
  if (failed(axes))
    return failure();
  return std::optional<std::vector<int64_t>>(*axes);
}

/// Normalizes and checks uniqueness of `axes` for `rank`.
FailureOr<std::vector<int64_t>> normalizeAxes(NodeContext &c, std::vector<int64_t> axes,
                                              int64_t rank) {
  for (int64_t &a : axes) {
    auto n = c.normalizeAxis(a, rank, "axis");
    if (failed(n))
      return failure();
    a = *n;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return c.fail("axes must not repeat");
  return axes;
}

} // namespace

FailureOr<Shape> reshapeTarget(NodeContext &c) {
  std::vector<int64_t> spec;
  if (c.opset() < 5) {
    auto attr = c.attrInts("shape");
    if (!attr)
      return c.fail("needs a 'shape' attribute");
    spec = *attr;
  } else {
    auto in = c.intsInput(1, "shape");
    if (failed(in))
      return failure();
    spec = *in;
  }
  bool allowZero = c.attrInt("allowzero", 0) != 0;
  const Shape &input = c.shape(0);
  Shape out(spec.size());
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      if (inferred >= 0)
        return c.fail("the shape " + shapeStr(spec) + " has more than one -1");
      inferred = int64_t(i);
      continue;
    }
    if (d == 0 && !allowZero) {
      if (i >= input.size())
        return c.fail("the shape " + shapeStr(spec) + " copies dim " + std::to_string(i) +
                      " (0), which input " + shapeStr(input) + " does not have");
      d = input[i];
    }
    if (d < 0)
      return c.fail("the shape " + shapeStr(spec) + " has a negative dim");
    out[i] = d;
    if (checkedNumElements({known, d}) < 0)
      return c.fail("the shape " + shapeStr(spec) + " is too large");
    known *= d;
  }
  int64_t total = checkedNumElements(input);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0)
      return c.fail("cannot infer the -1 in " + shapeStr(spec) + " for input " + shapeStr(input));
    out[inferred] = total / known;
  } else if (known != total) {
    return c.fail("cannot reshape " + shapeStr(input) + " to " + shapeStr(out));
  }
  return out;
}

FailureOr<Shape> flattenTarget(NodeContext &c) {
  const Shape &input = c.shape(0);
  int64_t rank = int64_t(input.size());
  int64_t axis = c.attrInt("axis", 1);
  if (axis < -rank || axis > rank)
    return c.fail("axis " + std::to_string(axis) + " is out of range for rank " +
                  std::to_string(rank));
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < axis ? outer : inner) *= input[d];
  return Shape{outer, inner};
}

FailureOr<Shape> squeezeTarget(NodeContext &c) {
  const Shape &input = c.shape(0);
  auto axes = axesArg(c, 13, 1);
  if (failed(axes))
    return failure();
  std::vector<bool> drop(input.size(), false);
  if (!*axes) {
    for (size_t d = 0; d < input.size(); ++d)
      drop[d] = input[d] == 1;
  } else {
    auto normalized = normalizeAxes(c, **axes, int64_t(input.size()));
    if (failed(normalized))
      return failure();
    for (int64_t a : *normalized) {
      if (input[a] != 1)
        return c.fail("cannot squeeze dim " + std::to_string(a) + " of size " +
                      std::to_string(input[a]) + " in " + shapeStr(input));
      drop[a] = true;
    }
  }
  Shape out;
  for (size_t d = 0; d < input.size(); ++d)
    if (!drop[d])
      out.push_back(input[d]);
  return out;
}

FailureOr<Shape> unsqueezeTarget(NodeContext &c) {
  const Shape &input = c.shape(0);
  auto axes = axesArg(c, 13, 1);
  if (failed(axes))
    return failure();
  if (!*axes)
    return c.fail("needs axes");
  int64_t rank = int64_t(input.size() + (*axes)->size());
  auto normalized = normalizeAxes(c, **axes, rank);
  if (failed(normalized))
    return failure();
  Shape out;
  size_t next = 0, k = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (k < normalized->size() && (*normalized)[k] == d) {
      out.push_back(1);
      ++k;
    } else {
      out.push_back(input[next++]);
    }
  }
  return out;
}

FailureOr<Shape> expandTarget(NodeContext &c) {
  auto shape = c.intsInput(1, "shape");
  if (failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return c.fail("the shape " + shapeStr(*shape) + " has a negative dim");
  auto out = broadcastShapes(c.shape(0), *shape);
  if (!out)
    return c.fail("cannot expand " + shapeStr(c.shape(0)) + " to " + shapeStr(*shape));
  if (checkedNumElements(*out) < 0)
    return c.fail("the expanded shape " + shapeStr(*out) + " is too large");
  return *out;
}

FailureOr<std::vector<int64_t>> transposePerm(NodeContext &c) {
  int64_t rank = c.rank(0);
  std::vector<int64_t> perm;
  if (auto attr = c.attrInts("perm")) {
    perm = *attr;
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  }
  if (int64_t(perm.size()) != rank)
    return c.fail("perm " + shapeStr(perm) + " does not match rank " + std::to_string(rank));
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return c.fail("perm " + shapeStr(perm) + " is not a permutation");
    seen[p] = true;
  }
  return perm;
}

FailureOr<std::vector<SliceDim>> sliceDims(NodeContext &c) {
  const Shape &input = c.shape(0);
  int64_t rank = int64_t(input.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    auto s = c.attrInts("starts"), e = c.attrInts("ends");
    if (!s || !e)
      return c.fail("needs 'starts' and 'ends' attributes");
    starts = *s;
    ends = *e;
    if (auto a = c.attrInts("axes"))
      axes = *a;
  } else {
    auto s = c.intsInput(1, "starts");
    if (failed(s))
      return failure();
    auto e = c.intsInput(2, "ends");
    if (failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (c.hasInput(3)) {
      auto a = c.intsInput(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (c.hasInput(4)) {
      auto st = c.intsInput(4, "steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(int64_t(i));
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return c.fail("starts, ends, axes and steps must have the same length");
  std::vector<SliceDim> dims(rank);
  std::vector<bool> seen(rank, false);
  for (int64_t d = 0; d < rank; ++d)
    dims[d] = {0, 1, input[d]};
  for (size_t i = 0; i < starts.size(); ++i) {
    auto axis = c.normalizeAxis(axes[i], rank, "slice axis");
    if (failed(axis))
      return failure();
    if (seen[*axis])
      return c.fail("slice axis " + std::to_string(*axis) + " is given twice");
    seen[*axis] = true;
    std::string why = normalizeSlice(input[*axis], starts[i], ends[i], steps[i], dims[*axis]);
    if (!why.empty())
      return c.fail(why);
  }
  return dims;
}

FailureOr<std::pair<int64_t, std::vector<int64_t>>> splitSizes(NodeContext &c) {
  const Shape &input = c.shape(0);
  auto axis = c.normalizeAxis(c.attrInt("axis", 0), int64_t(input.size()), "axis");
  if (failed(axis))
    return failure();
  std::vector<int64_t> sizes;
  if (c.opset() < 13) {
    if (auto attr = c.attrInts("split"))
      sizes = *attr;
  } else if (c.hasInput(1)) {
    auto in = c.intsInput(1, "split");
    if (failed(in))
      return failure();
    sizes = *in;
  }
  int64_t dim = input[*axis], outputs = c.numOutputs();
  if (outputs < 1)
    return c.fail("has no outputs");
  if (sizes.empty()) {
    if (dim % outputs != 0)
      return c.fail("dim " + std::to_string(*axis) + " of size " + std::to_string(dim) +
                    " does not split evenly into " + std::to_string(outputs) + " outputs");
    sizes.assign(outputs, dim / outputs);
  }
  if (int64_t(sizes.size()) != outputs)
    return c.fail("has " + std::to_string(sizes.size()) + " split sizes for " +
                  std::to_string(outputs) + " outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || s > dim)
      return c.fail("split sizes " + shapeStr(sizes) + " do not fit dim of size " +
                    std::to_string(dim));
    total += s;
  }
  if (total != dim)
    return c.fail("split sizes " + shapeStr(sizes) + " do not add up to " + std::to_string(dim));
  return std::make_pair(*axis, sizes);
}

FailureOr<int64_t> triluOffset(NodeContext &c) {
  if (!c.hasInput(1))
    return int64_t(0);
  auto k = c.scalarInput(1, "k");
  if (failed(k))
    return failure();
  return int64_t(*k);
}

std::vector<std::vector<SliceDim>> splitSlices(const Shape &shape, int64_t axis,
                                               const std::vector<int64_t> &sizes) {
  std::vector<std::vector<SliceDim>> slices;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    std::vector<SliceDim> dims;
    for (int64_t d = 0; d < int64_t(shape.size()); ++d)
      dims.push_back(d == axis ? SliceDim{offset, 1, size} : SliceDim{0, 1, shape[d]});
    offset += size;
    slices.push_back(std::move(dims));
  }
  return slices;
}

FailureOr<ReduceArgs> reduceArgs(NodeContext &c) {
  // ReduceSum takes axes as an input from opset 13; the other reductions from opset 18.
  int64_t since = c.opType() == "ReduceSum" ? 13 : 18;
  auto axes = axesArg(c, since, 1);
  if (failed(axes))
    return failure();
  int64_t rank = c.rank(0);
  ReduceArgs args;
  args.keepDims = c.attrInt("keepdims", 1) != 0;
  if (!*axes || (*axes)->empty()) {
    if (c.attrInt("noop_with_empty_axes", 0) != 0)
      return args; // identity
    for (int64_t d = 0; d < rank; ++d)
      args.axes.push_back(d);
    return args;
  }
  auto normalized = normalizeAxes(c, **axes, rank);
  if (failed(normalized))
    return failure();
  args.axes = *normalized;
  return args;
}

FailureOr<std::vector<int64_t>> tileRepeats(NodeContext &c) {
  auto repeats = c.intsInput(1, "repeats");
  if (failed(repeats))
    return failure();
  if (int64_t(repeats->size()) != c.rank(0))
    return c.fail("has " + std::to_string(repeats->size()) + " repeats for rank " +
                  std::to_string(c.rank(0)));
  Shape out = c.shape(0);
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t r = (*repeats)[d];
    if (r < 0)
      return c.fail("repeats must be >= 0");
    if (r > 0 && out[d] > std::numeric_limits<int32_t>::max() / r)
      return c.fail("the tiled shape is too large");
    out[d] *= r;
  }
  if (checkedNumElements(out) < 0)
    return c.fail("the tiled shape is too large");
  return *repeats;
}

} // namespace megac::onnx_import
