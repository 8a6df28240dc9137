// CPU reference kernels that move bytes without arithmetic: Copy, Transpose, Slice, Concat,
// Broadcast, Gather, Embedding and Pad. They work on any dtype by element size.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/ShapeChecks.h"

#ifdef __SSE2__
#include <xmmintrin.h>
#endif

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

/// A transpose block: dst[i * dstStrideP + j] = src[i + j * srcStrideL] for i < np, j < nl
/// (it moves the source's innermost dim), in 32 x 32 tiles so that both sides stay in cache;
/// 4-byte elements go through 4 x 4 SSE2 register transposes inside a tile.
template <typename T>
void tiledTranspose(const uint8_t *src, uint8_t *dst, int64_t np, int64_t nl, int64_t srcStrideL,
                    int64_t dstStrideP, int64_t srcOffset, int64_t dstOffset) {
  constexpr int64_t kTile = 32;
  const T *s = reinterpret_cast<const T *>(src) + srcOffset;
  T *d = reinterpret_cast<T *>(dst) + dstOffset;
  for (int64_t i0 = 0; i0 < np; i0 += kTile)
    for (int64_t j0 = 0; j0 < nl; j0 += kTile) {
      int64_t i1 = std::min(np, i0 + kTile), j1 = std::min(nl, j0 + kTile);
      int64_t i = i0;
#ifdef __SSE2__
      if constexpr (sizeof(T) == 4) {
        int64_t j4 = j0 + (j1 - j0) / 4 * 4;
        for (; i + 4 <= i1; i += 4) {
          for (int64_t j = j0; j < j4; j += 4) {
            const float *at = reinterpret_cast<const float *>(s + i + j * srcStrideL);
            __m128 r0 = _mm_loadu_ps(at), r1 = _mm_loadu_ps(at + srcStrideL);
            __m128 r2 = _mm_loadu_ps(at + 2 * srcStrideL), r3 = _mm_loadu_ps(at + 3 * srcStrideL);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            float *to = reinterpret_cast<float *>(d + i * dstStrideP + j);
            _mm_storeu_ps(to, r0);
            _mm_storeu_ps(to + dstStrideP, r1);
            _mm_storeu_ps(to + 2 * dstStrideP, r2);
            _mm_storeu_ps(to + 3 * dstStrideP, r3);
          }
          for (int64_t ii = i; ii < i + 4; ++ii)
            for (int64_t j = j4; j < j1; ++j)
              d[ii * dstStrideP + j] = s[ii + j * srcStrideL];
        }
      }
#endif
      for (; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          d[i * dstStrideP + j] = s[i + j * srcStrideL];
    }
}

/// Offset (in elements) of row-major index `flat` of `shape` under `strides`.
int64_t offsetOf(std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t flat) {
  int64_t offset = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    offset += (flat % shape[d]) * strides[d];
    flat /= shape[d];
  }
  return offset;
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
  // A transpose that brings a unit-stride source dim p forward: copy 2-D tiles of (p, last)
  // per index of the other dims, instead of reading the source a column at a time.
  size_t p = rank;
  if (srcStrides[rank - 1] != 1 && inner >= 8 && (elemSize == 4 || elemSize == 8))
    for (size_t d = 0; d + 1 < rank; ++d)
      if (srcStrides[d] == 1 && shape[d] >= 8)
        p = d;
  if (p < rank) {
    std::vector<int64_t> outerShape, outerSrc, outerDst;
    std::vector<int64_t> dstStrides = stridesOf(shape);
    for (size_t d = 0; d + 1 < rank; ++d)
      if (d != p) {
        outerShape.push_back(shape[d]);
        outerSrc.push_back(srcStrides[d]);
        outerDst.push_back(dstStrides[d]);
      }
    int64_t outer = product(outerShape), np = shape[p];
    // Parallel over (outer block, 32-row band of p): each writes its own rows of dst.
    int64_t bands = (np + 31) / 32;
    parallelFor(outer * bands, grainFor(32 * inner), [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        int64_t o = item / bands, i0 = (item % bands) * 32, rows = std::min<int64_t>(32, np - i0);
        int64_t srcOffset = base + offsetOf(outerShape, outerSrc, o) + i0;
        int64_t dstOffset = offsetOf(outerShape, outerDst, o) + i0 * dstStrides[p];
        if (elemSize == 4)
          tiledTranspose<uint32_t>(src, dst, rows, inner, srcStrides[rank - 1], dstStrides[p],
                                   srcOffset, dstOffset);
        else
          tiledTranspose<uint64_t>(src, dst, rows, inner, srcStrides[rank - 1], dstStrides[p],
                                   srcOffset, dstOffset);
      }
    });
    return;
  }
  int64_t rows = total / inner;
  std::span<const int64_t> rowShape = shape.first(rank - 1);
  parallelFor(rows, grainFor(inner), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(rank - 1, 0); // row `begin`'s index
    int64_t flat = begin;
    for (size_t d = rank - 1; d-- > 0;) {
      index[d] = flat % shape[d];
      flat /= shape[d];
    }
    int64_t offset = base + offsetOf(rowShape, srcStrides.first(rank - 1), begin);
    uint8_t *out = dst + begin * inner * elemSize;
    for (int64_t row = begin; row < end; ++row) {
      copyRow(elemSize, src, offset, srcStrides[rank - 1], inner, out);
      out += inner * elemSize;
      for (size_t d = rank - 1; d-- > 0;) {
        offset += srcStrides[d];
        if (++index[d] < shape[d])
          break;
        offset -= srcStrides[d] * shape[d];
        index[d] = 0;
      }
    }
  });
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
  ASSIGN_OR_RETURN(std::vector<int64_t> srcStrides, checkTranspose(x, perm, out));
  stridedCopy(dtypeSize(x.dtype), out.shape, srcStrides, x.as<const uint8_t>(), 0,
              out.as<uint8_t>());
  return Status::ok();
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
  ASSIGN_OR_RETURN(ConcatGeometry geometry, checkConcat(inputs, axis, out));
  size_t elem = dtypeSize(out.dtype);
  uint8_t *dst = out.as<uint8_t>();
  for (int64_t o = 0; o < geometry.outer; ++o)
    for (size_t i = 0; i < inputs.size(); ++i) {
      size_t chunk = static_cast<size_t>(geometry.inner[i]) * elem;
      copyBytes(dst, inputs[i].as<const uint8_t>() + o * chunk, chunk);
      dst += chunk;
    }
  return Status::ok();
}

Status broadcast(const TensorRef &x, const TensorRef &out) {
  ASSIGN_OR_RETURN(std::vector<int64_t> srcStrides, checkBroadcast(x, out));
  stridedCopy(dtypeSize(x.dtype), out.shape, srcStrides, x.as<const uint8_t>(), 0,
              out.as<uint8_t>());
  return Status::ok();
}

Status gather(const TensorRef &data, const TensorRef &indices, int64_t axis, const TensorRef &out) {
  ASSIGN_OR_RETURN(GatherGeometry g, checkGather(data, indices, axis, out));
  int64_t dim = g.dim, count = g.count;
  for (int64_t j = 0; j < count; ++j) {
    int64_t idx = loadIndex(indices, j);
    if (idx < -dim || idx >= dim)
      return fail("Gather", "index " + std::to_string(idx) + " (element " + std::to_string(j) +
                                " of the indices) is out of range for axis " +
                                std::to_string(axis) + " of size " + std::to_string(dim));
  }
  size_t chunk = static_cast<size_t>(g.inner) * dtypeSize(data.dtype);
  const uint8_t *src = data.as<const uint8_t>();
  uint8_t *dst = out.as<uint8_t>();
  for (int64_t o = 0; o < g.outer; ++o)
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
  RETURN_IF_ERROR(checkEmbedding(table, ids, out));
  int64_t vocab = table.shape[0], hidden = table.shape[1];
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
  ASSIGN_OR_RETURN(PadTarget target, checkPad(x, low, high, interior, out));
  if (out.byteSize())
    std::memset(out.data, 0, out.byteSize());
  int64_t count = x.numElements();
  if (count == 0)
    return Status::ok();
  size_t rank = x.shape.size(), elem = dtypeSize(x.dtype);
  const std::vector<int64_t> &step = target.strides;
  const uint8_t *src = x.as<const uint8_t>();
  uint8_t *dst = out.as<uint8_t>();
  if (rank == 0) {
    std::memcpy(dst + target.base * elem, src, elem);
    return Status::ok();
  }
  // Row by row over x's last dim (one memcpy when that dim has no interior padding); rows are
  // independent, so they are split over the kernel threads.
  int64_t inner = x.shape[rank - 1], innerStep = step[rank - 1];
  std::span<const int64_t> rowShape = x.shape.first(rank - 1);
  std::span<const int64_t> rowSteps = std::span<const int64_t>(step).first(rank - 1);
  parallelFor(count / inner, grainFor(inner), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t at = target.base + offsetOf(rowShape, rowSteps, row);
      const uint8_t *from = src + row * inner * elem;
      if (innerStep == 1) {
        std::memcpy(dst + at * elem, from, inner * elem);
        continue;
      }
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(dst + (at + j * innerStep) * elem, from + j * elem, elem);
    }
  });
  return Status::ok();
}

} // namespace megac::runtime::cpu
