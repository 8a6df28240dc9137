// CPU reference kernels that move bytes without arithmetic: Copy, Transpose, Slice, Concat,
// Broadcast, Gather, Embedding and Pad. They work on any dtype by element size.
#include "runtime/cpu/KernelUtil.h"

namespace megac::runtime::cpu {

using namespace detail;

namespace detail {

namespace {

template <typename T>
void gatherRow(const uint8_t *src, int64_t offset, int64_t stride, int64_t n, uint8_t *dst) {
  const T *s = reinterpret_cast<const T *>(src) + offset;
  T *d = reinterpret_cast<T *>(dst);
  for (int64_t i = 0; i < n; ++i)
    d[i] = s[i * stride];
}

void copyRow(size_t elemSize, const uint8_t *src, int64_t offset, int64_t stride, int64_t n,
             uint8_t *dst) {
  if (stride == 1) {
    copyBytes(dst, src + offset * static_cast<int64_t>(elemSize), n * elemSize);
    return;
  }
  switch (elemSize) {
  case 1:
    return gatherRow<uint8_t>(src, offset, stride, n, dst);
  case 2:
    return gatherRow<uint16_t>(src, offset, stride, n, dst);
  case 4:
    return gatherRow<uint32_t>(src, offset, stride, n, dst);
  default:
    return gatherRow<uint64_t>(src, offset, stride, n, dst);
  }
}

} // namespace

void stridedCopy(size_t elemSize, std::span<const int64_t> shape,
                 std::span<const int64_t> srcStrides, const uint8_t *src, int64_t base,
                 uint8_t *dst) {
  int64_t total = product(shape);
  if (total == 0)
    return;
  size_t rank = shape.size();
  if (rank == 0) {
    copyBytes(dst, src + base * static_cast<int64_t>(elemSize), elemSize);
    return;
  }
  int64_t inner = shape[rank - 1];
  std::vector<int64_t> index(rank - 1, 0);
  int64_t offset = base; // source element of the current row's start
  for (int64_t row = 0, rows = total / inner; row < rows; ++row) {
    copyRow(elemSize, src, offset, srcStrides[rank - 1], inner, dst);
    dst += inner * elemSize;
    for (size_t d = rank - 1; d-- > 0;) {
      offset += srcStrides[d];
      if (++index[d] < shape[d])
        break;
      offset -= srcStrides[d] * shape[d];
      index[d] = 0;
    }
  }
}

} // namespace detail

Status copy(const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Copy", "output", out, x.dtype));
  if (x.numElements() != out.numElements())
    return fail("Copy", "output shape " + shapeString(out.shape) + " has " +
                            std::to_string(out.numElements()) + " elements, input shape " +
                            shapeString(x.shape) + " has " + std::to_string(x.numElements()));
  moveBytes(out.data, x.data, x.byteSize());
  return Status::ok();
}

Status transpose(const TensorRef &x, std::span<const int64_t> perm, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Transpose", "output", out, x.dtype));
  size_t rank = x.shape.size();
  if (perm.size() != rank)
    return fail("Transpose", "perm has " + std::to_string(perm.size()) +
                                 " entries for an input of rank " + std::to_string(rank));
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> expected(rank), srcStrides(rank);
  std::vector<int64_t> xStrides = stridesOf(x.shape);
  for (size_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(rank) || seen[perm[i]])
      return fail("Transpose", "perm " + shapeString(perm) + " is not a permutation of 0.." +
                                   std::to_string(rank - 1));
    seen[perm[i]] = true;
    expected[i] = x.shape[perm[i]];
    srcStrides[i] = xStrides[perm[i]];
  }
  RETURN_IF_ERROR(expectShape("Transpose", "output", out, expected));
  stridedCopy(dtypeSize(x.dtype), out.shape, srcStrides, x.as<const uint8_t>(), 0,
              out.as<uint8_t>());
  return Status::ok();
}

StatusOr<SliceSource> detail::sliceSource(const TensorRef &x, std::span<const int64_t> starts,
                                          std::span<const int64_t> strides,
                                          const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Slice", "output", out, x.dtype));
  size_t rank = x.shape.size();
  if (starts.size() != rank || strides.size() != rank || out.shape.size() != rank)
    return fail("Slice", "starts " + shapeString(starts) + ", strides " + shapeString(strides) +
                             " and output " + shapeString(out.shape) +
                             " must all have the input's rank " + std::to_string(rank));
  SliceSource src;
  src.strides.resize(rank);
  std::vector<int64_t> xStrides = stridesOf(x.shape);
  bool empty = out.numElements() == 0;
  for (size_t d = 0; d < rank; ++d) {
    int64_t size = out.shape[d], dim = x.shape[d];
    if (strides[d] == 0)
      return fail("Slice", "stride 0 in dim " + std::to_string(d));
    if (!empty) {
      int64_t span, last;
      bool overflow = __builtin_mul_overflow(size - 1, strides[d], &span) ||
                      __builtin_add_overflow(starts[d], span, &last);
      if (starts[d] < 0 || starts[d] >= dim || overflow || last < 0 || last >= dim)
        return fail("Slice", "dim " + std::to_string(d) + ": " + std::to_string(size) +
                                 " elements from " + std::to_string(starts[d]) + " by stride " +
                                 std::to_string(strides[d]) + " leave the input's extent " +
                                 std::to_string(dim));
      src.base += starts[d] * xStrides[d];
    }
    src.strides[d] = strides[d] * xStrides[d];
  }
  return src;
}

Status slice(const TensorRef &x, std::span<const int64_t> starts, std::span<const int64_t> strides,
             const TensorRef &out) {
  ASSIGN_OR_RETURN(SliceSource src, sliceSource(x, starts, strides, out));
  if (out.numElements() != 0)
    stridedCopy(dtypeSize(x.dtype), out.shape, src.strides, x.as<const uint8_t>(), src.base,
                out.as<uint8_t>());
  return Status::ok();
}

Status concat(std::span<const TensorRef> inputs, int64_t axis, const TensorRef &out) {
  if (inputs.empty())
    return fail("Concat", "no inputs");
  size_t rank = out.shape.size();
  if (axis < 0 || axis >= static_cast<int64_t>(rank))
    return fail("Concat", "axis " + std::to_string(axis) + " is out of range for rank " +
                              std::to_string(rank));
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef &in = inputs[i];
    std::string which = "input " + std::to_string(i);
    RETURN_IF_ERROR(expectDtype("Concat", which.c_str(), in, out.dtype));
    bool ok = in.shape.size() == rank;
    for (size_t d = 0; ok && d < rank; ++d)
      ok = static_cast<int64_t>(d) == axis || in.shape[d] == out.shape[d];
    if (!ok)
      return fail("Concat", which + " has shape " + shapeString(in.shape) +
                                ", which does not match output " + shapeString(out.shape) +
                                " outside axis " + std::to_string(axis));
    total += in.shape[axis];
  }
  if (total != out.shape[axis])
    return fail("Concat", "inputs add up to " + std::to_string(total) + " along axis " +
                              std::to_string(axis) + " but the output has " +
                              std::to_string(out.shape[axis]));
  int64_t outer = product(out.shape.subspan(0, axis));
  size_t elem = dtypeSize(out.dtype);
  uint8_t *dst = out.as<uint8_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (const TensorRef &in : inputs) {
      size_t chunk = static_cast<size_t>(product(in.shape.subspan(axis))) * elem;
      copyBytes(dst, in.as<const uint8_t>() + o * chunk, chunk);
      dst += chunk;
    }
  return Status::ok();
}

Status broadcast(const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Broadcast", "output", out, x.dtype));
  size_t rank = out.shape.size(), xRank = x.shape.size();
  if (xRank > rank)
    return fail("Broadcast", "cannot broadcast " + shapeString(x.shape) + " to lower rank " +
                                 shapeString(out.shape));
  std::vector<int64_t> xStrides = stridesOf(x.shape), srcStrides(rank, 0);
  for (size_t i = 0; i < xRank; ++i) {
    size_t d = rank - xRank + i;
    if (x.shape[i] == out.shape[d])
      srcStrides[d] = x.shape[i] == 1 ? 0 : xStrides[i];
    else if (x.shape[i] != 1)
      return fail("Broadcast",
                  "cannot broadcast " + shapeString(x.shape) + " to " + shapeString(out.shape));
  }
  stridedCopy(dtypeSize(x.dtype), out.shape, srcStrides, x.as<const uint8_t>(), 0,
              out.as<uint8_t>());
  return Status::ok();
}

Status gather(const TensorRef &data, const TensorRef &indices, int64_t axis, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Gather", "output", out, data.dtype));
  RETURN_IF_ERROR(expectIndexDtype("Gather", "indices", indices));
  int64_t rank = static_cast<int64_t>(data.shape.size());
  if (axis < 0 || axis >= rank)
    return fail("Gather", "axis " + std::to_string(axis) + " is out of range for data of rank " +
                              std::to_string(rank));
  std::vector<int64_t> expected(data.shape.begin(), data.shape.begin() + axis);
  expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
  expected.insert(expected.end(), data.shape.begin() + axis + 1, data.shape.end());
  RETURN_IF_ERROR(expectShape("Gather", "output", out, expected));
  int64_t dim = data.shape[axis], count = indices.numElements();
  for (int64_t j = 0; j < count; ++j) {
    int64_t idx = loadIndex(indices, j);
    if (idx < -dim || idx >= dim)
      return fail("Gather", "index " + std::to_string(idx) + " (element " + std::to_string(j) +
                                " of the indices) is out of range for axis " +
                                std::to_string(axis) + " of size " + std::to_string(dim));
  }
  int64_t outer = product(data.shape.subspan(0, axis));
  size_t chunk = static_cast<size_t>(product(data.shape.subspan(axis + 1))) * dtypeSize(data.dtype);
  const uint8_t *src = data.as<const uint8_t>();
  uint8_t *dst = out.as<uint8_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t idx = loadIndex(indices, j);
      if (idx < 0)
        idx += dim;
      copyBytes(dst, src + (o * dim + idx) * chunk, chunk);
      dst += chunk;
    }
  return Status::ok();
}

Status embedding(const TensorRef &table, const TensorRef &ids, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Embedding", "output", out, table.dtype));
  RETURN_IF_ERROR(expectIndexDtype("Embedding", "ids", ids));
  if (table.shape.size() != 2)
    return fail("Embedding", "table must be [V, h], not " + shapeString(table.shape));
  int64_t vocab = table.shape[0], hidden = table.shape[1];
  std::vector<int64_t> expected(ids.shape.begin(), ids.shape.end());
  expected.push_back(hidden);
  RETURN_IF_ERROR(expectShape("Embedding", "output", out, expected));
  int64_t count = ids.numElements();
  size_t row = static_cast<size_t>(hidden) * dtypeSize(table.dtype);
  for (int64_t j = 0; j < count; ++j) {
    int64_t id = loadIndex(ids, j);
    if (id < 0 || id >= vocab)
      return fail("Embedding", "id " + std::to_string(id) + " (element " + std::to_string(j) +
                                   " of the ids) is outside the table's " + std::to_string(vocab) +
                                   " rows");
    copyBytes(out.as<uint8_t>() + j * row, table.as<const uint8_t>() + id * row, row);
  }
  return Status::ok();
}

Status pad(const TensorRef &x, std::span<const int64_t> low, std::span<const int64_t> high,
           std::span<const int64_t> interior, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Pad", "output", out, x.dtype));
  size_t rank = x.shape.size();
  if (low.size() != rank || high.size() != rank || interior.size() != rank)
    return fail("Pad", "low " + shapeString(low) + ", high " + shapeString(high) +
                           " and interior " + shapeString(interior) +
                           " must have the input's rank " + std::to_string(rank));
  std::vector<int64_t> expected(rank), dstStrides = stridesOf(out.shape);
  for (size_t d = 0; d < rank; ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      return fail("Pad", "dim " + std::to_string(d) + " has a negative amount (low " +
                             std::to_string(low[d]) + ", high " + std::to_string(high[d]) +
                             ", interior " + std::to_string(interior[d]) + ")");
    int64_t n = x.shape[d];
    expected[d] = low[d] + high[d] + n + (n > 0 ? (n - 1) * interior[d] : 0);
  }
  RETURN_IF_ERROR(expectShape("Pad", "output", out, expected));
  if (out.byteSize())
    std::memset(out.data, 0, out.byteSize());
  int64_t count = x.numElements();
  if (count == 0)
    return Status::ok();
  // Element (i0, i1, ...) of x lands at (low + i * (interior + 1)) per dim.
  size_t elem = dtypeSize(x.dtype);
  std::vector<int64_t> index(rank, 0), step(rank);
  int64_t at = 0;
  for (size_t d = 0; d < rank; ++d) {
    step[d] = (interior[d] + 1) * dstStrides[d];
    at += low[d] * dstStrides[d];
  }
  const uint8_t *src = x.as<const uint8_t>();
  uint8_t *dst = out.as<uint8_t>();
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + at * elem, src + i * elem, elem);
    for (size_t d = rank; d-- > 0;) {
      at += step[d];
      if (++index[d] < x.shape[d])
        break;
      at -= step[d] * x.shape[d];
      index[d] = 0;
    }
  }
  return Status::ok();
}

} // namespace megac::runtime::cpu
