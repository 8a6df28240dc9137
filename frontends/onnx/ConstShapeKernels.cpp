// Folding kernels of the ONNX importer that move data: reshape, expand, transpose, slice,
// gather, concat, tile, range, trilu and reductions, with ONNX semantics on constant tensors.
#include "frontends/onnx/ConstTensor.h"
#include "support/IndexMath.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace megac::onnx_import {

std::string normalizeSlice(int64_t dim, int64_t start, int64_t end, int64_t step, SliceDim &out) {
  if (step == 0)
    return "slice step must not be 0";
  step = std::max(step, -std::numeric_limits<int64_t>::max());
  // ONNX Slice: negative indices count from the end, then clamp (INT64 extremes mean "to the
  // end" in exports).
  if (start < 0)
    start = start < -dim ? -dim - 1 : start + dim;
  if (end < 0)
    end = end < -dim ? -dim - 1 : end + dim;
  int64_t count = 0;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    if (end > start)
      count = (end - start - 1) / step + 1;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    if (dim > 0 && start > end)
      count = (start - end - 1) / (-step) + 1;
  }
  out = {start, step, count};
  return {};
}

/// out's element i := x's element src (same element type).
void copyElement(ConstTensor &out, const ConstTensor &x, int64_t i, int64_t src) {
  if (x.isFloat())
    out.floats[i] = x.floats[src];
  else
    out.ints[i] = x.ints[src];
}

/// A tensor of `outShape` whose elements are x's at the flat indices forEachPosition sums from
/// `sourceTerm`.
template <typename TermFn>
Folded copyFrom(const ConstTensor &x, const Shape &outShape, TermFn sourceTerm) {
  Folded r = allocateFolded(x.type, outShape);
  if (!r.ok())
    return r;
  forEachPosition(outShape, sourceTerm,
                  [&](int64_t i, int64_t src) { copyElement(r.tensor, x, i, src); });
  return r;
}

Folded reshape(const ConstTensor &x, const Shape &shape) {
  if (checkedNumElements(shape) != x.numElements())
    return Folded::fail("cannot reshape " + shapeStr(x.shape) + " to " + shapeStr(shape));
  Folded r{x, {}};
  r.tensor.shape = shape;
  return r;
}

Folded expand(const ConstTensor &x, const Shape &shape) {
  if (x.rank() > int64_t(shape.size()))
    return Folded::fail("cannot broadcast " + shapeStr(x.shape) + " to " + shapeStr(shape));
  for (size_t i = 0; i < x.shape.size(); ++i) {
    int64_t d = x.shape[i], t = shape[shape.size() - x.shape.size() + i];
    if (d != t && d != 1)
      return Folded::fail("cannot broadcast " + shapeStr(x.shape) + " to " + shapeStr(shape));
  }
  Folded r = allocateFolded(x.type, shape);
  if (!r.ok())
    return r;
  auto index = broadcastIndex(x.shape, shape);
  for (size_t i = 0; i < index.size(); ++i)
    copyElement(r.tensor, x, int64_t(i), index[i]);
  return r;
}

Folded transpose(const ConstTensor &x, const std::vector<int64_t> &perm) {
  int64_t rank = x.rank();
  if (int64_t(perm.size()) != rank)
    return Folded::fail("perm has " + std::to_string(perm.size()) + " entries for rank " +
                        std::to_string(rank));
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return Folded::fail("perm is not a permutation of the dims");
    seen[p] = true;
  }
  Shape outShape(rank);
  for (int64_t d = 0; d < rank; ++d)
    outShape[d] = x.shape[perm[d]];
  auto inStrides = rowMajorStrides(x.shape);
  return copyFrom(x, outShape,
                  [&](int64_t d, int64_t coord) { return coord * inStrides[perm[d]]; });
}

Folded slice(const ConstTensor &x, const std::vector<SliceDim> &dims) {
  int64_t rank = x.rank();
  if (int64_t(dims.size()) != rank)
    return Folded::fail("slice: one entry per dim expected");
  Shape outShape(rank);
  for (int64_t d = 0; d < rank; ++d)
    outShape[d] = dims[d].count;
  auto inStrides = rowMajorStrides(x.shape);
  return copyFrom(x, outShape, [&](int64_t d, int64_t coord) {
    return (dims[d].start + coord * dims[d].step) * inStrides[d];
  });
}

Folded gather(const ConstTensor &data, const ConstTensor &indices, int64_t axis) {
  int64_t rank = data.rank();
  if (axis < -rank || axis >= rank)
    return Folded::fail("Gather axis " + std::to_string(axis) + " is out of range for rank " +
                        std::to_string(rank));
  if (axis < 0)
    axis += rank;
  if (indices.isFloat() || indices.type == ElemType::boolean)
    return Folded::fail("Gather indices must be integers");
  Shape outShape(data.shape.begin(), data.shape.begin() + axis);
  outShape.insert(outShape.end(), indices.shape.begin(), indices.shape.end());
  outShape.insert(outShape.end(), data.shape.begin() + axis + 1, data.shape.end());
  Folded r = allocateFolded(data.type, outShape);
  if (!r.ok())
    return r;
  auto [outer, dim, inner] = splitAtAxis(data.shape, axis);
  int64_t count = indices.numElements();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      int64_t idx = indices.ints[k];
      if (idx < -dim || idx >= dim)
        return Folded::fail("Gather index " + std::to_string(idx) + " is out of range for dim " +
                            std::to_string(axis) + " of size " + std::to_string(dim));
      if (idx < 0)
        idx += dim;
      for (int64_t j = 0; j < inner; ++j) {
        int64_t dst = (o * count + k) * inner + j, src = (o * dim + idx) * inner + j;
        if (data.isFloat())
          r.tensor.floats[dst] = data.floats[src];
        else
          r.tensor.ints[dst] = data.ints[src];
      }
    }
  return r;
}

Folded concat(const std::vector<const ConstTensor *> &inputs, int64_t axis) {
  if (inputs.empty())
    return Folded::fail("Concat needs at least one input");
  const ConstTensor &first = *inputs.front();
  int64_t rank = first.rank();
  if (axis < -rank || axis >= rank)
    return Folded::fail("Concat axis " + std::to_string(axis) + " is out of range for rank " +
                        std::to_string(rank));
  if (axis < 0)
    axis += rank;
  Shape outShape = first.shape;
  outShape[axis] = 0;
  for (const ConstTensor *t : inputs) {
    if (t->type != first.type || t->rank() != rank)
      return Folded::fail("Concat inputs differ in type or rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t->shape[d] != first.shape[d])
        return Folded::fail("Concat inputs differ in dim " + std::to_string(d));
    outShape[axis] += t->shape[axis];
  }
  Folded r = allocateFolded(first.type, outShape);
  if (!r.ok())
    return r;
  AxisSplit split = splitAtAxis(outShape, axis);
  int64_t outer = split.outer, inner = split.inner, dst = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *t : inputs) {
      int64_t chunk = t->shape[axis] * inner;
      for (int64_t j = 0; j < chunk; ++j, ++dst) {
        if (first.isFloat())
          r.tensor.floats[dst] = t->floats[o * chunk + j];
        else
          r.tensor.ints[dst] = t->ints[o * chunk + j];
      }
    }
  return r;
}

Folded tile(const ConstTensor &x, const std::vector<int64_t> &repeats) {
  if (int64_t(repeats.size()) != x.rank())
    return Folded::fail("Tile needs one repeat count per dim");
  Shape outShape = x.shape;
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0)
      return Folded::fail("Tile repeats must be >= 0");
    if (repeats[d] > 0 && outShape[d] > kMaxFoldElements / repeats[d])
      return Folded::fail("the tiled shape " + shapeStr(outShape) + " is too large to fold");
    outShape[d] *= repeats[d];
  }
  auto inStrides = rowMajorStrides(x.shape);
  return copyFrom(x, outShape,
                  [&](int64_t d, int64_t coord) { return (coord % x.shape[d]) * inStrides[d]; });
}

Folded range(ElemType type, double start, double limit, double delta) {
  if (delta == 0 || std::isnan(delta) || std::isnan(start) || std::isnan(limit))
    return Folded::fail("Range delta must be non-zero and the bounds numbers");
  if (!isFloatType(type) && (std::fabs(start) > 9e18 || std::fabs(delta) > 9e18))
    return Folded::fail("Range bounds are out of the integer range");
  double count = std::ceil((limit - start) / delta);
  if (!(count <= double(kMaxFoldElements)))
    return Folded::fail("Range would have more than " + std::to_string(kMaxFoldElements) +
                        " elements");
  int64_t n = std::max<int64_t>(int64_t(count), 0);
  Folded r = allocateFolded(type, {n});
  if (!r.ok())
    return r;
  for (int64_t i = 0; i < n; ++i) {
    if (isFloatType(type))
      r.tensor.floats[i] = roundToType(type, start + double(i) * delta);
    else
      r.tensor.ints[i] = wrapToType(
          type, int64_t(uint64_t(int64_t(start)) + uint64_t(i) * uint64_t(int64_t(delta))));
  }
  return r;
}

Folded trilu(const ConstTensor &x, int64_t k, bool upper) {
  if (x.rank() < 2)
    return Folded::fail("Trilu needs a tensor of rank >= 2");
  Folded r{x, {}};
  int64_t rows = x.shape[x.rank() - 2], cols = x.shape.back();
  int64_t n = x.numElements();
  for (int64_t i = 0; i < n; ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? (col - row >= k) : (col - row <= k);
    if (!keep) {
      if (x.isFloat())
        r.tensor.floats[i] = 0;
      else
        r.tensor.ints[i] = 0;
    }
  }
  return r;
}

Folded reduce(ReduceFn fn, const ConstTensor &x, const std::vector<int64_t> &axes, bool keepDims) {
  int64_t rank = x.rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) {
    if (a < 0 || a >= rank || reduced[a])
      return Folded::fail("reduction axes must be unique and in range");
    reduced[a] = true;
  }
  Shape kept = x.shape;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d])
      kept[d] = 1;
  if (x.numElements() == 0 && (fn == ReduceFn::max || fn == ReduceFn::min))
    return Folded::fail("cannot fold a max/min reduction over an empty tensor");
  Folded r = allocateFolded(x.type, kept);
  if (!r.ok())
    return r;
  int64_t outN = checkedNumElements(kept);
  std::vector<double> accF(outN, fn == ReduceFn::prod ? 1.0 : 0.0);
  std::vector<int64_t> accI(outN, fn == ReduceFn::prod ? 1 : 0);
  std::vector<bool> started(outN, false);
  auto outStrides = rowMajorStrides(kept);
  int64_t n = x.numElements();
  auto keptTerm = [&](int64_t d, int64_t coord) { return reduced[d] ? 0 : coord * outStrides[d]; };
  forEachPosition(x.shape, keptTerm, [&](int64_t i, int64_t dst) {
    if (x.isFloat()) {
      double v = x.floats[i];
      double &a = accF[dst];
      if (fn == ReduceFn::sum || fn == ReduceFn::mean)
        a += v;
      else if (fn == ReduceFn::prod)
        a *= v;
      else if (!started[dst])
        a = v;
      else
        a = fn == ReduceFn::max ? std::max(a, v) : std::min(a, v);
    } else {
      int64_t v = x.ints[i];
      int64_t &a = accI[dst];
      if (fn == ReduceFn::sum || fn == ReduceFn::mean)
        a = int64_t(uint64_t(a) + uint64_t(v));
      else if (fn == ReduceFn::prod)
        a = int64_t(uint64_t(a) * uint64_t(v));
      else if (!started[dst])
        a = v;
      else
        a = fn == ReduceFn::max ? std::max(a, v) : std::min(a, v);
    }
    started[dst] = true;
  });
  int64_t count = outN ? n / outN : 0;
  for (int64_t j = 0; j < outN; ++j) {
    if (x.isFloat())
      r.tensor.floats[j] =
          roundToType(x.type, fn == ReduceFn::mean ? accF[j] / double(count) : accF[j]);
    else
      r.tensor.ints[j] =
          wrapToType(x.type, fn == ReduceFn::mean && count ? accI[j] / count : accI[j]);
  }
  if (!keepDims) {
    Shape squeezed;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        squeezed.push_back(x.shape[d]);
    r.tensor.shape = squeezed;
  }
  return r;
}

Folded argReduce(bool isMax, const ConstTensor &x, int64_t axis, bool keepDims, bool selectLast) {
  int64_t rank = x.rank();
  if (axis < -rank || axis >= rank)
    return Folded::fail("axis out of range");
  if (axis < 0)
    axis += rank;
  if (x.shape[axis] == 0)
    return Folded::fail("cannot take the arg max/min of an empty dim");
  Shape kept = x.shape;
  kept[axis] = 1;
  Folded r = allocateFolded(ElemType::i64, kept);
  if (!r.ok())
    return r;
  auto [outer, dim, inner] = splitAtAxis(x.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      double bestValue = x.getDouble(o * dim * inner + j);
      for (int64_t k = 1; k < dim; ++k) {
        double v = x.getDouble((o * dim + k) * inner + j);
        bool better = isMax ? (selectLast ? v >= bestValue : v > bestValue)
                            : (selectLast ? v <= bestValue : v < bestValue);
        if (better) {
          best = k;
          bestValue = v;
        }
      }
      r.tensor.ints[o * inner + j] = best;
    }
  if (!keepDims)
    r.tensor.shape.erase(r.tensor.shape.begin() + axis);
  return r;
}

Folded matmul(const ConstTensor &a, const ConstTensor &b) {
  if (!a.isFloat() || !b.isFloat() || a.type != b.type)
    return Folded::fail("MatMul folds float operands of one type");
  if (a.rank() == 0 || b.rank() == 0)
    return Folded::fail("MatMul operands must have rank >= 1");
  // Promote 1-d operands as numpy does: a [k] is [1, k], b [k] is [k, 1]; dropped at the end.
  Shape as = a.rank() == 1 ? Shape{1, a.shape[0]} : a.shape;
  Shape bs = b.rank() == 1 ? Shape{b.shape[0], 1} : b.shape;
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    return Folded::fail("MatMul contracts " + std::to_string(k) + " with " +
                        std::to_string(bs[bs.size() - 2]));
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  std::optional<Shape> batch = broadcastShapes(aBatch, bBatch);
  if (!batch)
    return Folded::fail("MatMul batch dims do not broadcast");
  Shape outShape = *batch;
  if (a.rank() > 1)
    outShape.push_back(m);
  if (b.rank() > 1)
    outShape.push_back(n);
  Folded r = allocateFolded(a.type, outShape);
  if (!r.ok())
    return r;
  int64_t batches = 1;
  for (int64_t d : *batch)
    batches *= d;
  auto batchOffset = [&](const Shape &own, int64_t index) {
    // Element offset of batch `index` (row-major over `batch`) in an operand with batch dims
    // `own`, right-aligned and broadcast.
    int64_t offset = 0, stride = 1;
    size_t rank = batch->size();
    for (size_t d = 0; d < rank; ++d) {
      size_t fromEnd = rank - 1 - d;
      int64_t coord = index % (*batch)[fromEnd];
      index /= (*batch)[fromEnd];
      if (d < own.size()) {
        int64_t size = own[own.size() - 1 - d];
        offset += (size == 1 ? 0 : coord) * stride;
        stride *= size;
      }
    }
    return offset;
  };
  for (int64_t t = 0; t < batches; ++t) {
    const double *x = a.floats.data() + batchOffset(aBatch, t) * m * k;
    const double *y = b.floats.data() + batchOffset(bBatch, t) * k * n;
    double *z = r.tensor.floats.data() + t * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += x[i * k + p] * y[p * n + j];
        z[i * n + j] = roundToType(a.type, sum);
      }
  }
  return r;
}

} // namespace megac::onnx_import
