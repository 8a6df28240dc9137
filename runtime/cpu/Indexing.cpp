// CPU reference kernels of the element-indexing ops: CumSum, GatherElements, ScatterElements
// and ScatterND (ONNX semantics; see Kernels.h), and their shape checks (ShapeChecks.h), which
// the CUDA kernels share.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/ShapeChecks.h"
#include "support/IndexMath.h"

#include <type_traits>

namespace megac::runtime::cpu {

namespace detail {

namespace {
Status checkAxis(const char *op, int64_t axis, size_t rank) {
  if (axis < 0 || axis >= int64_t(rank))
    return fail(op, "axis " + std::to_string(axis) + " is out of range for rank " +
                        std::to_string(rank));
  return Status::ok();
}
} // namespace

StatusOr<AxisGeometry> checkCumSum(const TensorRef &x, int64_t axis, const TensorRef &out) {
  RETURN_IF_ERROR(checkAxis("CumSum", axis, x.shape.size()));
  RETURN_IF_ERROR(expectShape("CumSum", "output", out, x.shape));
  RETURN_IF_ERROR(expectDtype("CumSum", "output", out, x.dtype));
  AxisGeometry g;
  for (int64_t d = 0; d < int64_t(x.shape.size()); ++d)
    (d < axis ? g.outer : d == axis ? g.dim : g.inner) *= x.shape[d];
  return g;
}

Status checkElementIndexing(const char *op, const TensorRef &data, const TensorRef &indices,
                            const TensorRef *updates, int64_t axis, const TensorRef &out) {
  RETURN_IF_ERROR(expectIndexDtype(op, "indices", indices));
  RETURN_IF_ERROR(checkAxis(op, axis, data.shape.size()));
  if (indices.shape.size() != data.shape.size())
    return fail(op, "indices " + shapeString(indices.shape) + " must have the data's rank " +
                        std::to_string(data.shape.size()));
  for (size_t d = 0; d < data.shape.size(); ++d)
    if (int64_t(d) != axis && indices.shape[d] > data.shape[d])
      return fail(op, "indices " + shapeString(indices.shape) + " exceed the data " +
                          shapeString(data.shape) + " on dim " + std::to_string(d));
  if (updates) {
    RETURN_IF_ERROR(expectShape(op, "updates", *updates, indices.shape));
    RETURN_IF_ERROR(expectDtype(op, "updates", *updates, data.dtype));
  }
  RETURN_IF_ERROR(expectShape(op, "output", out, updates ? data.shape : indices.shape));
  return expectDtype(op, "output", out, data.dtype);
}

StatusOr<ScatterNdGeometry> checkScatterNd(const TensorRef &data, const TensorRef &indices,
                                           const TensorRef &updates, const TensorRef &out) {
  const char *op = "ScatterND";
  RETURN_IF_ERROR(expectIndexDtype(op, "indices", indices));
  int64_t rank = int64_t(data.shape.size());
  int64_t k = indices.shape.empty() ? 0 : indices.shape.back();
  if (k < 1 || k > rank)
    return fail(op, "indices " + shapeString(indices.shape) +
                        " must end in a tuple size from 1 to the data's rank " +
                        std::to_string(rank));
  std::vector<int64_t> want(indices.shape.begin(), indices.shape.end() - 1);
  want.insert(want.end(), data.shape.begin() + k, data.shape.end());
  RETURN_IF_ERROR(expectShape(op, "updates", updates, want));
  RETURN_IF_ERROR(expectDtype(op, "updates", updates, data.dtype));
  RETURN_IF_ERROR(expectShape(op, "output", out, data.shape));
  RETURN_IF_ERROR(expectDtype(op, "output", out, data.dtype));
  ScatterNdGeometry g;
  g.k = k;
  g.slice = product(data.shape.subspan(k));
  g.tuples = product(indices.shape.first(indices.shape.size() - 1));
  return g;
}

} // namespace detail

using namespace detail;

namespace {

/// Index element j of `indices`, for a dim of size n: in [-n, n), wrapped to [0, n).
StatusOr<int64_t> wrappedIndex(const char *op, const TensorRef &indices, int64_t j, int64_t n,
                               int64_t axis) {
  int64_t idx = loadIndex(indices, j);
  if (idx < -n || idx >= n)
    return fail(op, "index " + std::to_string(idx) + " (element " + std::to_string(j) +
                        " of the indices) is out of range for axis " + std::to_string(axis) +
                        " of size " + std::to_string(n));
  return idx < 0 ? idx + n : idx;
}

template <typename T> T addWrapping(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(U(a) + U(b));
  } else {
    return a + b;
  }
}

} // namespace

Status cumsum(const TensorRef &x, int64_t axis, bool exclusive, bool reverse,
              const TensorRef &out) {
  ASSIGN_OR_RETURN(AxisGeometry v, checkCumSum(x, axis, out));
  return dispatchNumeric("CumSum", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *src = x.as<const T>();
    T *dst = out.as<T>();
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t r = 0; r < v.inner; ++r) {
        T sum = T(0);
        for (int64_t k = 0; k < v.dim; ++k) {
          int64_t i = reverse ? v.dim - 1 - k : k;
          int64_t at = (o * v.dim + i) * v.inner + r;
          T value = src[at]; // read first: out may be x
          if (!exclusive)
            sum = addWrapping(sum, value);
          dst[at] = sum;
          if (exclusive)
            sum = addWrapping(sum, value);
        }
      }
    return Status::ok();
  });
}

Status gatherElements(const TensorRef &data, const TensorRef &indices, int64_t axis,
                      const TensorRef &out) {
  const char *op = "GatherElements";
  RETURN_IF_ERROR(checkElementIndexing(op, data, indices, nullptr, axis, out));
  std::vector<int64_t> strides = stridesOf(data.shape);
  size_t size = dtypeSize(data.dtype);
  int64_t n = indices.numElements();
  for (int64_t j = 0; j < n; ++j) {
    ASSIGN_OR_RETURN(int64_t idx, wrappedIndex(op, indices, j, data.shape[axis], axis));
    copyBytes(out.as<uint8_t>() + j * size,
              data.as<const uint8_t>() + elementOffset(indices.shape, strides, j, axis, idx) * size,
              size);
  }
  return Status::ok();
}

Status scatterElements(const TensorRef &data, const TensorRef &indices, const TensorRef &updates,
                       int64_t axis, bool accumulate, const TensorRef &out) {
  const char *op = "ScatterElements";
  RETURN_IF_ERROR(checkElementIndexing(op, data, indices, &updates, axis, out));
  std::vector<int64_t> strides = stridesOf(data.shape);
  int64_t n = indices.numElements();
  // Every index is checked before out is written: a failed kernel leaves no partial result.
  std::vector<int64_t> offsets(n);
  for (int64_t j = 0; j < n; ++j) {
    ASSIGN_OR_RETURN(int64_t idx, wrappedIndex(op, indices, j, data.shape[axis], axis));
    offsets[j] = elementOffset(indices.shape, strides, j, axis, idx);
  }
  if (!accumulate) {
    copyBytes(out.data, data.data, data.byteSize());
    size_t size = dtypeSize(data.dtype);
    for (int64_t j = 0; j < n; ++j)
      copyBytes(out.as<uint8_t>() + offsets[j] * size, updates.as<const uint8_t>() + j * size,
                size);
    return Status::ok();
  }
  return dispatchNumeric(op, data.dtype, [&](auto tag) {
    using T = decltype(tag);
    copyBytes(out.data, data.data, data.byteSize());
    for (int64_t j = 0; j < n; ++j)
      out.as<T>()[offsets[j]] = addWrapping(out.as<T>()[offsets[j]], updates.as<const T>()[j]);
    return Status::ok();
  });
}

Status scatterNd(const TensorRef &data, const TensorRef &indices, const TensorRef &updates,
                 bool accumulate, const TensorRef &out) {
  const char *op = "ScatterND";
  ASSIGN_OR_RETURN(ScatterNdGeometry g, checkScatterNd(data, indices, updates, out));
  std::vector<int64_t> rows(g.tuples);
  for (int64_t t = 0; t < g.tuples; ++t) {
    int64_t row = 0;
    for (int64_t j = 0; j < g.k; ++j) {
      ASSIGN_OR_RETURN(int64_t idx, wrappedIndex(op, indices, t * g.k + j, data.shape[j], j));
      row = row * data.shape[j] + idx;
    }
    rows[t] = row;
  }
  if (!accumulate) {
    copyBytes(out.data, data.data, data.byteSize());
    size_t bytes = size_t(g.slice) * dtypeSize(data.dtype);
    for (int64_t t = 0; t < g.tuples; ++t)
      copyBytes(out.as<uint8_t>() + rows[t] * bytes, updates.as<const uint8_t>() + t * bytes,
                bytes);
    return Status::ok();
  }
  return dispatchNumeric(op, data.dtype, [&](auto tag) {
    using T = decltype(tag);
    copyBytes(out.data, data.data, data.byteSize());
    for (int64_t t = 0; t < g.tuples; ++t)
      for (int64_t e = 0; e < g.slice; ++e) {
        T &dst = out.as<T>()[rows[t] * g.slice + e];
        dst = addWrapping(dst, updates.as<const T>()[t * g.slice + e]);
      }
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
