// CPU reference kernels that reduce along dims: Reduce, Softmax and CrossEntropy.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cpu/VectorMath.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace megac::runtime::cpu {

using namespace detail;

namespace {

/// Element offsets (in x) of every index of the sub-box spanned by `dims`, row-major.
std::vector<int64_t> offsetsOf(const std::vector<int64_t> &dims, std::span<const int64_t> shape,
                               const std::vector<int64_t> &strides) {
  std::vector<int64_t> sizes;
  for (int64_t d : dims)
    sizes.push_back(shape[d]);
  int64_t count = product(sizes);
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(dims.size(), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    offsets.push_back(offset);
    for (size_t k = dims.size(); k-- > 0;) {
      offset += strides[dims[k]];
      if (++index[k] < sizes[k])
        break;
      offset -= strides[dims[k]] * sizes[k];
      index[k] = 0;
    }
  }
  return offsets;
}

/// One output element: the reduction of x[base + offset(r)] for r in [0, count).
template <typename T, typename Offset>
T reduceOne(ReduceKind kind, const T *x, int64_t base, int64_t count, Offset offset) {
  if constexpr (std::is_floating_point_v<T>) {
    if (kind == ReduceKind::sum || kind == ReduceKind::mean) {
      double acc = 0.0;
      for (int64_t r = 0; r < count; ++r)
        acc += static_cast<double>(x[base + offset(r)]);
      if (kind == ReduceKind::mean)
        acc /= static_cast<double>(count); // 0/0 = NaN for an empty mean, as torch
      return static_cast<T>(acc);
    }
    T best = x[base + offset(0)];
    for (int64_t r = 0; r < count; ++r) {
      T v = x[base + offset(r)];
      if (v != v)
        return v; // NaN propagates
      if (kind == ReduceKind::max ? v > best : v < best)
        best = v;
    }
    return best;
  } else {
    if (kind == ReduceKind::sum || kind == ReduceKind::mean) {
      uint64_t acc = 0; // wraps instead of overflowing
      for (int64_t r = 0; r < count; ++r)
        acc += static_cast<uint64_t>(static_cast<int64_t>(x[base + offset(r)]));
      int64_t sum = static_cast<int64_t>(acc);
      return static_cast<T>(kind == ReduceKind::mean ? sum / count : sum);
    }
    T best = x[base + offset(0)];
    for (int64_t r = 0; r < count; ++r) {
      T v = x[base + offset(r)];
      if (kind == ReduceKind::max ? v > best : v < best)
        best = v;
    }
    return best;
  }
}

/// Sum or mean over the leading `rows` rows of x viewed as [rows, cols] (the kept dims trailing:
/// a bias gradient summed over [b, s]). Each output column adds its rows in ascending order in
/// double, the same order and arithmetic as reduceOne over the offset table, so the bits are
/// those of the strided loop; but it streams x row by row (the strided loop touched one element
/// per cache line per row, 69 ms of a mid GPT's step for its bias gradients). Columns are split
/// over the kernel threads in blocks of kBlock double accumulators.
template <typename T>
void sumLeadingRows(ReduceKind kind, const T *x, int64_t rows, int64_t cols, T *y) {
  constexpr int64_t kBlock = 256;
  parallelFor((cols + kBlock - 1) / kBlock, grainFor(rows * kBlock),
              [&](int64_t begin, int64_t end) {
                double acc[kBlock];
                for (int64_t blk = begin; blk < end; ++blk) {
                  int64_t c0 = blk * kBlock, width = std::min(kBlock, cols - c0);
                  std::fill(acc, acc + width, 0.0);
                  for (int64_t r = 0; r < rows; ++r) {
                    const T *row = x + r * cols + c0;
                    for (int64_t j = 0; j < width; ++j)
                      acc[j] += static_cast<double>(row[j]);
                  }
                  for (int64_t j = 0; j < width; ++j)
                    y[c0 + j] = static_cast<T>(
                        kind == ReduceKind::mean ? acc[j] / static_cast<double>(rows) : acc[j]);
                }
              });
}

} // namespace

Status reduce(ReduceKind kind, const TensorRef &x, std::span<const int64_t> axes,
              const TensorRef &out) {
  const char *name = "Reduce";
  ASSIGN_OR_RETURN(ReduceGeometry g, checkReduce(kind, x, axes, out));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> keptDims, reducedDims;
  for (int64_t d = 0; d < rank; ++d)
    (g.reduced[size_t(d)] ? reducedDims : keptDims).push_back(d);
  std::vector<int64_t> strides = stridesOf(x.shape);
  std::vector<int64_t> outer = offsetsOf(keptDims, x.shape, strides);
  int64_t count = g.count;
  // Reduced dims that are the trailing ones are one contiguous run per output element (a
  // global norm over every element, a mean over the last dim): no offset table for those.
  bool trailing = reducedDims.empty() || reducedDims.front() == rank - int64_t(reducedDims.size());
  // Reduced dims that are the leading ones (and some dims kept): x is [count, outer] row-major.
  bool leading = !reducedDims.empty() && !keptDims.empty() &&
                 reducedDims.back() == int64_t(reducedDims.size()) - 1;
  bool rowSums = leading && count > 0 && (kind == ReduceKind::sum || kind == ReduceKind::mean) &&
                 (x.dtype == DType::f32 || x.dtype == DType::f64);
  std::vector<int64_t> inner;
  if (!trailing && !rowSums)
    inner = offsetsOf(reducedDims, x.shape, strides);
  return dispatchNumeric(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *in = x.as<const T>();
    T *y = out.as<T>();
    if constexpr (std::is_floating_point_v<T>) {
      if (rowSums) {
        sumLeadingRows<T>(kind, in, count, int64_t(outer.size()), y);
        return Status::ok();
      }
    }
    // Output elements are independent (each reduces in its own fixed order): split them.
    parallelFor(int64_t(outer.size()), grainFor(count), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        y[o] = trailing ? reduceOne<T>(kind, in, outer[o], count, [](int64_t r) { return r; })
                        : reduceOne<T>(kind, in, outer[o], count,
                                       [&](int64_t r) { return inner[size_t(r)]; });
    });
    return Status::ok();
  });
}

Status softmax(const TensorRef &x, int64_t axis, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Softmax", "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape("Softmax", "output", out, x.shape));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (axis < 0 || axis >= rank)
    return fail("Softmax", "axis " + std::to_string(axis) + " is out of range for rank " +
                               std::to_string(rank));
  int64_t outer = product(x.shape.subspan(0, axis)), n = x.shape[axis];
  int64_t inner = product(x.shape.subspan(axis + 1));
  return dispatchFloat("Softmax", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Every (o, i) row is independent: split them over the kernel threads.
    parallelFor(outer * inner, grainFor(4 * n), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        int64_t o = row / inner, i = row % inner;
        const T *in = x.as<const T>() + o * n * inner + i;
        T *y = out.as<T>() + o * n * inner + i;
        double m = rowMax(in, n, inner);
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j)
          sum += std::exp(static_cast<double>(in[j * inner]) - m);
        double inv = 1.0 / sum;
        for (int64_t j = 0; j < n; ++j)
          y[j * inner] = static_cast<T>(std::exp(static_cast<double>(in[j * inner]) - m) * inv);
      }
    });
    return Status::ok();
  });
}

Status crossEntropy(const TensorRef &logits, const TensorRef &labels,
                    std::optional<int64_t> ignoreIndex, const TensorRef &out) {
  const char *name = "CrossEntropy";
  RETURN_IF_ERROR(expectDtype(name, "output", out, logits.dtype));
  RETURN_IF_ERROR(expectIndexDtype(name, "labels", labels));
  if (logits.shape.empty())
    return fail(name, "logits must have a class dim, not shape []");
  std::span<const int64_t> rows = logits.shape.first(logits.shape.size() - 1);
  RETURN_IF_ERROR(expectShape(name, "labels", labels, rows));
  RETURN_IF_ERROR(expectShape(name, "output", out, rows));
  int64_t vocab = logits.shape.back(), count = labels.numElements();
  return dispatchFloat(name, logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < count; ++r) {
      int64_t label = loadIndex(labels, r);
      if (!(ignoreIndex && label == *ignoreIndex) && (label < 0 || label >= vocab))
        return fail(name, "label " + std::to_string(label) + " (element " + std::to_string(r) +
                              " of the labels) is outside [0, " + std::to_string(vocab) + ")");
    }
    // Rows are independent: split them over the kernel threads.
    parallelFor(count, grainFor(4 * vocab), [&](int64_t begin, int64_t end) {
      std::vector<float> e(std::is_same_v<T, float> ? static_cast<size_t>(vocab) : 0);
      for (int64_t r = begin; r < end; ++r) {
        int64_t label = loadIndex(labels, r);
        if (ignoreIndex && label == *ignoreIndex) {
          out.as<T>()[r] = T(0);
          continue;
        }
        const T *row = logits.as<const T>() + r * vocab;
        double m = vmath::contiguousRowMax(row, vocab);
        double sum = 0.0;
        if constexpr (std::is_same_v<T, float>) // the vectorised exp (VectorMath.h), in f32
          sum = vmath::expShiftSumF32(row, static_cast<float>(m), e.data(), vocab);
        else
          for (int64_t j = 0; j < vocab; ++j)
            sum += std::exp(static_cast<double>(row[j]) - m);
        out.as<T>()[r] = static_cast<T>(m + std::log(sum) - static_cast<double>(row[label]));
      }
    });
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
