// Folding kernels of the ONNX importer for the element-indexing ops: CumSum, GatherElements,
// ScatterElements and ScatterND on constant tensors (position ids and masks built from
// constants), with the semantics of the run-time kernels (runtime/cpu/Indexing.cpp).
#include "frontends/onnx/ConstTensor.h"
#include "support/IndexMath.h"

namespace megac::onnx_import {

namespace {

std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Copies element `from` of `src` into element `to` of `dst` (same element kind).
void copyElement(const ConstTensor &src, int64_t from, ConstTensor &dst, int64_t to) {
  if (src.isFloat())
    dst.floats[to] = src.floats[from];
  else
    dst.ints[to] = src.ints[from];
}

void addElement(const ConstTensor &src, int64_t from, ConstTensor &dst, int64_t to) {
  if (src.isFloat())
    dst.floats[to] += src.floats[from];
  else
    dst.ints[to] = int64_t(uint64_t(dst.ints[to]) + uint64_t(src.ints[from]));
}

/// Index element j of `indices` for a dim of size n, wrapped to [0, n), or an error message.
std::string wrapIndex(const ConstTensor &indices, int64_t j, int64_t n, int64_t &idx) {
  idx = indices.getInt(j);
  if (idx < -n || idx >= n)
    return "index " + std::to_string(idx) + " is out of range for a dim of size " +
           std::to_string(n);
  if (idx < 0)
    idx += n;
  return {};
}

std::string checkElementIndices(const ConstTensor &data, const ConstTensor &indices, int64_t axis) {
  if (indices.isFloat() || indices.type == ElemType::boolean)
    return "indices must be integers";
  if (indices.rank() != data.rank())
    return "indices " + shapeStr(indices.shape) + " must have the data's rank " +
           std::to_string(data.rank());
  if (axis < 0 || axis >= data.rank())
    return "axis " + std::to_string(axis) + " is out of range";
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape[d] > data.shape[d])
      return "indices " + shapeStr(indices.shape) + " exceed the data " + shapeStr(data.shape);
  return {};
}

} // namespace

Folded cumsum(const ConstTensor &x, int64_t axis, bool exclusive, bool reverse) {
  if (axis < 0 || axis >= x.rank())
    return Folded::fail("axis " + std::to_string(axis) + " is out of range");
  if (x.type == ElemType::boolean)
    return Folded::fail("CumSum of booleans is not defined");
  Folded r{x, {}};
  auto [outer, dim, inner] = splitAtAxis(x.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double fsum = 0;
      uint64_t isum = 0;
      for (int64_t k = 0; k < dim; ++k) {
        int64_t at = (o * dim + (reverse ? dim - 1 - k : k)) * inner + i;
        if (x.isFloat()) {
          double v = x.floats[at];
          r.tensor.floats[at] = exclusive ? fsum : fsum + v;
          fsum += v;
        } else {
          uint64_t v = uint64_t(x.ints[at]);
          r.tensor.ints[at] = int64_t(exclusive ? isum : isum + v);
          isum += v;
        }
      }
    }
  return r;
}

Folded gatherElements(const ConstTensor &data, const ConstTensor &indices, int64_t axis) {
  if (std::string e = checkElementIndices(data, indices, axis); !e.empty())
    return Folded::fail(e);
  Folded r = allocateFolded(data.type, indices.shape);
  if (!r.ok())
    return r;
  std::vector<int64_t> strides = stridesOf(data.shape);
  for (int64_t j = 0; j < indices.numElements(); ++j) {
    int64_t idx = 0;
    if (std::string e = wrapIndex(indices, j, data.shape[axis], idx); !e.empty())
      return Folded::fail(e);
    copyElement(data, elementOffset(indices.shape, strides, j, axis, idx), r.tensor, j);
  }
  return r;
}

Folded scatterElements(const ConstTensor &data, const ConstTensor &indices,
                       const ConstTensor &updates, int64_t axis, bool accumulate) {
  if (std::string e = checkElementIndices(data, indices, axis); !e.empty())
    return Folded::fail(e);
  if (updates.shape != indices.shape || updates.type != data.type)
    return Folded::fail("updates must have the indices' shape and the data's type");
  Folded r{data, {}};
  std::vector<int64_t> strides = stridesOf(data.shape);
  for (int64_t j = 0; j < indices.numElements(); ++j) {
    int64_t idx = 0;
    if (std::string e = wrapIndex(indices, j, data.shape[axis], idx); !e.empty())
      return Folded::fail(e);
    int64_t at = elementOffset(indices.shape, strides, j, axis, idx);
    (accumulate ? addElement : copyElement)(updates, j, r.tensor, at);
  }
  return r;
}

Folded scatterNd(const ConstTensor &data, const ConstTensor &indices, const ConstTensor &updates,
                 bool accumulate) {
  if (indices.isFloat() || indices.type == ElemType::boolean)
    return Folded::fail("indices must be integers");
  int64_t k = indices.rank() ? indices.shape.back() : 0;
  if (k < 1 || k > data.rank())
    return Folded::fail("indices " + shapeStr(indices.shape) +
                        " must end in a tuple size from 1 to the data's rank");
  Shape want(indices.shape.begin(), indices.shape.end() - 1);
  want.insert(want.end(), data.shape.begin() + k, data.shape.end());
  if (updates.shape != want || updates.type != data.type)
    return Folded::fail("updates must have shape " + shapeStr(want) + " and the data's type");
  Folded r{data, {}};
  int64_t slice = 1;
  for (int64_t d = k; d < data.rank(); ++d)
    slice *= data.shape[d];
  int64_t tuples = indices.numElements() / k;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t row = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t idx = 0;
      if (std::string e = wrapIndex(indices, t * k + j, data.shape[j], idx); !e.empty())
        return Folded::fail(e);
      row = row * data.shape[j] + idx;
    }
    for (int64_t e = 0; e < slice; ++e)
      (accumulate ? addElement : copyElement)(updates, t * slice + e, r.tensor, row * slice + e);
  }
  return r;
}

} // namespace megac::onnx_import
