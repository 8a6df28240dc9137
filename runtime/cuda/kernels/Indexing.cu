// CUDA kernels of the element-indexing ops: CumSum, GatherElements, ScatterElements and
// ScatterND. Host checks are the CPU kernels' (runtime/cpu/ShapeChecks.h). Each thread owns
// the outputs it writes (a CumSum line; a ScatterElements line along the axis; a ScatterND
// slice element across all tuples), so writes follow index order without atomics and the
// results are deterministic and equal to the CPU kernels'. An index out of range raises
// indexOutOfRange and is skipped.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cuda/kernels/BySize.cuh"
#include "runtime/cuda/kernels/KernelCommon.cuh"

namespace megac::runtime::cuda {

namespace {

using detail::Dims;
using detail::visitNumeric;

constexpr int kThreads = 256;

/// Sums in the storage type's compute type; integers in their own type, wrapping.
template <typename T> struct Acc {
  using type = detail::Compute<T>;
  static __device__ type load(const T *p, int64_t i) { return detail::load(p, i); }
  static __device__ void store(T *p, int64_t i, type v) { detail::store(p, i, v); }
  static __device__ type add(type a, type b) { return a + b; }
};
template <typename I> struct IntAcc {
  using type = I;
  static __device__ I load(const I *p, int64_t i) { return p[i]; }
  static __device__ void store(I *p, int64_t i, I v) { p[i] = v; }
  static __device__ I add(I a, I b) {
    using U = std::make_unsigned_t<I>;
    return static_cast<I>(U(a) + U(b));
  }
};
template <> struct Acc<int64_t> : IntAcc<int64_t> {};
template <> struct Acc<int32_t> : IntAcc<int32_t> {};

template <typename F> void byIndex(const TensorRef &indices, F &&f) {
  if (indices.dtype == DType::i64)
    f(indices.as<const int64_t>());
  else
    f(indices.as<const int32_t>());
}

Status launchStatusOf(const char *op) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    return Status::error(std::string(op) + ": kernel launch failed: " + cudaGetErrorString(error));
  return Status::ok();
}

/// A scatter's launch(T{}): by bits when it stores, in the arithmetic type of a numeric dtype
/// when it accumulates (no sum for i1); then the launch's status.
template <typename F>
Status launchScatter(const char *op, DType dtype, bool accumulate, F &&launch) {
  if (!accumulate)
    bySize(dtype, launch);
  else if (!visitNumeric(dtype, launch))
    return Status::error(std::string(op) + ": dtype " + dtypeName(dtype) + " cannot accumulate");
  return launchStatusOf(op);
}

/// Dims of an index tensor with the data's strides (for GatherElements / ScatterElements).
Dims indexDims(const TensorRef &indices, std::span<const int64_t> dataShape) {
  Dims d;
  d.rank = int(indices.shape.size());
  int64_t stride = 1;
  for (int i = d.rank - 1; i >= 0; --i) {
    d.size[i] = indices.shape[i];
    d.stride[i] = stride;
    stride *= dataShape[i];
  }
  return d;
}

/// The data offset of index element j with coordinate `axis` left out, and j's coordinate there.
__device__ __forceinline__ int64_t offsetWithout(const Dims &dims, int64_t j, int axis,
                                                 int64_t *coordinate) {
  int64_t at = 0;
  for (int d = dims.rank - 1; d >= 0; --d) {
    int64_t c = j % dims.size[d];
    j /= dims.size[d];
    if (d == axis)
      *coordinate = c;
    else
      at += c * dims.stride[d];
  }
  return at;
}

template <typename T>
__global__ void cumsumKernel(const T *x, T *out, int64_t outer, int64_t dim, int64_t inner,
                             bool exclusive, bool reverse) {
  using A = Acc<T>;
  GRID_STRIDE(line, outer * inner) {
    int64_t o = line / inner, r = line % inner;
    typename A::type sum = 0;
    for (int64_t k = 0; k < dim; ++k) {
      int64_t i = reverse ? dim - 1 - k : k;
      int64_t at = (o * dim + i) * inner + r;
      typename A::type value = A::load(x, at);
      if (!exclusive)
        sum = A::add(sum, value);
      A::store(out, at, sum);
      if (exclusive)
        sum = A::add(sum, value);
    }
  }
}

template <typename T, typename I>
__global__ void gatherElementsKernel(const T *data, const I *indices, Dims dims, int axis,
                                     int64_t dim, int64_t axisStride, T *out, int64_t n,
                                     int *errors) {
  GRID_STRIDE(j, n) {
    int64_t unused = 0;
    int64_t base = offsetWithout(dims, j, axis, &unused);
    int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < -dim || idx >= dim) {
      detail::raise(errors, DeviceError::indexOutOfRange);
      out[j] = T(0);
      continue;
    }
    out[j] = data[base + (idx < 0 ? idx + dim : idx) * axisStride];
  }
}

/// One thread per index line along `axis` (all other coordinates fixed): its writes land on
/// one line of out, in index order.
template <typename T, typename I>
__global__ void scatterElementsKernel(const I *indices, const T *updates, Dims dims, int axis,
                                      int64_t dim, int64_t axisStride, bool accumulate, T *out,
                                      int *errors) {
  using A = Acc<T>;
  int64_t count = dims.size[axis];
  int64_t lines = 1;
  for (int d = 0; d < dims.rank; ++d)
    lines *= dims.size[d];
  lines /= count > 0 ? count : 1;
  int64_t inner = 1;
  for (int d = axis + 1; d < dims.rank; ++d)
    inner *= dims.size[d];
  GRID_STRIDE(line, count > 0 ? lines : 0) {
    int64_t first = (line / inner) * count * inner + line % inner; // element j with coord 0
    int64_t unused = 0;
    int64_t base = offsetWithout(dims, first, axis, &unused);
    for (int64_t c = 0; c < count; ++c) {
      int64_t j = first + c * inner;
      int64_t idx = static_cast<int64_t>(indices[j]);
      if (idx < -dim || idx >= dim) {
        detail::raise(errors, DeviceError::indexOutOfRange);
        continue;
      }
      int64_t at = base + (idx < 0 ? idx + dim : idx) * axisStride;
      if (accumulate)
        A::store(out, at, A::add(A::load(out, at), A::load(updates, j)));
      else
        out[at] = updates[j];
    }
  }
}

/// One thread per element e of a slice, across every tuple in order.
template <typename T, typename I>
__global__ void scatterNdKernel(const I *indices, const T *updates, Dims dataDims, int64_t tuples,
                                int k, int64_t slice, bool accumulate, T *out, int *errors) {
  using A = Acc<T>;
  GRID_STRIDE(e, slice) {
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t row = 0;
      bool ok = true;
      for (int j = 0; j < k; ++j) {
        int64_t n = dataDims.size[j], idx = static_cast<int64_t>(indices[t * k + j]);
        if (idx < -n || idx >= n) {
          ok = false;
          break;
        }
        row = row * n + (idx < 0 ? idx + n : idx);
      }
      if (!ok) {
        if (e == 0)
          detail::raise(errors, DeviceError::indexOutOfRange);
        continue;
      }
      int64_t at = row * slice + e;
      if (accumulate)
        A::store(out, at, A::add(A::load(out, at), A::load(updates, t * slice + e)));
      else
        out[at] = updates[t * slice + e];
    }
  }
}

Status rankLimit(const char *op, size_t rank) {
  if (rank > static_cast<size_t>(detail::kMaxRank))
    return Status::error(std::string(op) + ": rank " + std::to_string(rank) +
                         " is above the CUDA kernels' " + std::to_string(detail::kMaxRank));
  return Status::ok();
}

Status copyData(const Context &ctx, const TensorRef &data, const TensorRef &out, const char *op) {
  if (data.byteSize() == 0 || data.data == out.data)
    return Status::ok();
  cudaError_t error =
      cudaMemcpyAsync(out.data, data.data, data.byteSize(), cudaMemcpyDeviceToDevice, ctx.stream);
  if (error != cudaSuccess)
    return Status::error(std::string(op) + ": cudaMemcpyAsync: " + cudaGetErrorString(error));
  return Status::ok();
}

} // namespace

Status cumsum(const Context &ctx, const TensorRef &x, int64_t axis, bool exclusive, bool reverse,
              const TensorRef &out) {
  ASSIGN_OR_RETURN(cpu::detail::AxisGeometry g, cpu::detail::checkCumSum(x, axis, out));
  int64_t lines = g.outer * g.inner;
  if (lines == 0 || g.dim == 0)
    return Status::ok();
  bool known = visitNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    cumsumKernel<<<detail::blocksFor(lines, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const T>(), out.as<T>(), g.outer, g.dim, g.inner, exclusive, reverse);
  });
  if (!known)
    return Status::error(std::string("CumSum: dtype ") + dtypeName(x.dtype) + " is not supported");
  return launchStatusOf("CumSum");
}

Status gatherElements(const Context &ctx, const TensorRef &data, const TensorRef &indices,
                      int64_t axis, const TensorRef &out) {
  const char *op = "GatherElements";
  RETURN_IF_ERROR(cpu::detail::checkElementIndexing(op, data, indices, nullptr, axis, out));
  RETURN_IF_ERROR(rankLimit(op, data.shape.size()));
  int64_t n = indices.numElements();
  if (n == 0)
    return Status::ok();
  Dims dims = indexDims(indices, data.shape);
  int64_t axisStride = dims.stride[axis];
  bySize(data.dtype, [&](auto tag) {
    using T = decltype(tag);
    byIndex(indices, [&](auto *idx) {
      gatherElementsKernel<<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
          data.as<const T>(), idx, dims, int(axis), data.shape[axis], axisStride, out.as<T>(), n,
          ctx.errors);
    });
  });
  return launchStatusOf(op);
}

Status scatterElements(const Context &ctx, const TensorRef &data, const TensorRef &indices,
                       const TensorRef &updates, int64_t axis, bool accumulate,
                       const TensorRef &out) {
  const char *op = "ScatterElements";
  RETURN_IF_ERROR(cpu::detail::checkElementIndexing(op, data, indices, &updates, axis, out));
  RETURN_IF_ERROR(rankLimit(op, data.shape.size()));
  RETURN_IF_ERROR(copyData(ctx, data, out, op));
  int64_t n = indices.numElements();
  if (n == 0)
    return Status::ok();
  Dims dims = indexDims(indices, data.shape);
  int64_t lines = n / indices.shape[axis];
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    byIndex(indices, [&](auto *idx) {
      scatterElementsKernel<<<detail::blocksFor(lines, kThreads), kThreads, 0, ctx.stream>>>(
          idx, updates.as<const T>(), dims, int(axis), data.shape[axis], dims.stride[axis],
          accumulate, out.as<T>(), ctx.errors);
    });
  };
  return launchScatter(op, data.dtype, accumulate, launch);
}

Status scatterNd(const Context &ctx, const TensorRef &data, const TensorRef &indices,
                 const TensorRef &updates, bool accumulate, const TensorRef &out) {
  const char *op = "ScatterND";
  ASSIGN_OR_RETURN(cpu::detail::ScatterNdGeometry g,
                   cpu::detail::checkScatterNd(data, indices, updates, out));
  RETURN_IF_ERROR(rankLimit(op, data.shape.size()));
  RETURN_IF_ERROR(copyData(ctx, data, out, op));
  if (g.tuples == 0 || g.slice == 0)
    return Status::ok();
  Dims dims;
  dims.rank = int(data.shape.size());
  for (int d = 0; d < dims.rank; ++d)
    dims.size[d] = data.shape[d];
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    byIndex(indices, [&](auto *idx) {
      scatterNdKernel<<<detail::blocksFor(g.slice, kThreads), kThreads, 0, ctx.stream>>>(
          idx, updates.as<const T>(), dims, g.tuples, int(g.k), g.slice, accumulate, out.as<T>(),
          ctx.errors);
    });
  };
  return launchScatter(op, data.dtype, accumulate, launch);
}

} // namespace megac::runtime::cuda
