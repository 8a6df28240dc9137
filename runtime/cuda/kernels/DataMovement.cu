// CUDA data-movement kernels: Copy, Transpose, Slice, Concat, Broadcast, Gather, Embedding (and
// its vocab shard), EmbeddingGrad (and its shard) and Pad. They move elements by size (any
// dtype) except the gradients, which sum. The host-side checks and geometry are the CPU
// kernels' own (runtime/cpu/ShapeChecks.h), so both backends reject the same arguments alike.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cuda/kernels/BySize.cuh"
#include "runtime/cuda/kernels/KernelCommon.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <vector>

namespace megac::runtime::cuda {

namespace {

using cpu::detail::expectDtype;
using cpu::detail::fail;
using detail::Dims;

constexpr int kThreads = 256;

/// dst[i] = src[base + offsetOf(i)] (dst row-major over dims.size): transpose, slice, broadcast.
template <typename T>
__global__ void gatherStridedKernel(const T *src, int64_t base, Dims dims, T *dst, int64_t n) {
  GRID_STRIDE(i, n) { dst[i] = src[base + detail::offsetOf(dims, i)]; }
}

/// dst[base + offsetOf(i)] = src[i] (src row-major over dims.size): pad.
template <typename T>
__global__ void scatterStridedKernel(const T *src, T *dst, int64_t base, Dims dims, int64_t n) {
  GRID_STRIDE(i, n) { dst[base + detail::offsetOf(dims, i)] = src[i]; }
}

Status rankLimit(const char *op, size_t rank) {
  if (rank > static_cast<size_t>(detail::kMaxRank))
    return fail(op, "rank " + std::to_string(rank) + " is above the CUDA kernels' " +
                        std::to_string(detail::kMaxRank));
  return Status::ok();
}

Status launchGather(const Context &ctx, const char *op, DType dtype, std::span<const int64_t> shape,
                    std::span<const int64_t> srcStrides, const void *src, int64_t base, void *dst) {
  RETURN_IF_ERROR(rankLimit(op, shape.size()));
  int64_t n = detail::elementsOf(shape);
  if (n == 0)
    return Status::ok();
  Dims dims;
  dims.rank = static_cast<int>(shape.size());
  for (int d = 0; d < dims.rank; ++d) {
    dims.size[d] = shape[d];
    dims.stride[d] = srcStrides[d];
  }
  bySize(dtype, [&](auto tag) {
    using T = decltype(tag);
    gatherStridedKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<const T *>(src), base, dims, static_cast<T *>(dst), n);
  });
  return launchStatus(op);
}

/// out[b, c, r] = x[b, r, c] for x [batch, rows, cols]: the last two dims swapped, through a
/// 32x33 shared tile so that both the reads and the writes are coalesced. Block 32x8; grid
/// (col tiles, row tiles, batches, the z dim grid-striding).
constexpr int kTile = 32;
template <typename T>
__global__ void transposeLastTwoKernel(const T *x, T *out, int64_t batch, int64_t rows,
                                       int64_t cols) {
  __shared__ T tile[kTile][kTile + 1];
  int64_t c0 = int64_t(blockIdx.x) * kTile, r0 = int64_t(blockIdx.y) * kTile;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const T *src = x + b * rows * cols;
    T *dst = out + b * rows * cols;
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
      int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols)
        tile[i][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
      int64_t c = c0 + i, r = r0 + threadIdx.x; // out row c, column r
      if (r < rows && c < cols)
        dst[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads(); // the tile is reused by the next batch
  }
}

/// out[o, prefix + r] = in[o, r] for o < outer, r < inner (in contiguous [outer, inner], out
/// rows of outInner): one Concat input.
template <typename T>
__global__ void concatKernel(const T *in, int64_t outer, int64_t inner, T *out, int64_t outInner,
                             int64_t prefix) {
  GRID_STRIDE(i, outer * inner) {
    int64_t o = i / inner, r = i % inner;
    out[o * outInner + prefix + r] = in[i];
  }
}

/// out[o, j, r] = data[o, idx(j), r]; an index outside [-dim, dim) raises and gives zero.
template <typename T, typename I>
__global__ void gatherKernel(const T *data, const I *indices, int64_t outer, int64_t count,
                             int64_t inner, int64_t dim, T *out, int *errors) {
  GRID_STRIDE(i, outer * count * inner) {
    int64_t r = i % inner, oj = i / inner;
    int64_t j = oj % count, o = oj / count;
    int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < -dim || idx >= dim) {
      detail::raise(errors, DeviceError::indexOutOfRange);
      out[i] = T(0);
      continue;
    }
    if (idx < 0)
      idx += dim;
    out[i] = data[(o * dim + idx) * inner + r];
  }
}

/// out[j, :] = table[ids[j] - start, :] when that row is in [0, vocab); otherwise zero, and with
/// `raiseErrors` an idOutOfRange.
template <typename T, typename I>
__global__ void embeddingKernel(const T *table, const I *ids, int64_t count, int64_t hidden,
                                int64_t vocab, int64_t start, bool raiseErrors, T *out,
                                int *errors) {
  GRID_STRIDE(i, count * hidden) {
    int64_t j = i / hidden, e = i % hidden;
    int64_t row = static_cast<int64_t>(ids[j]) - start;
    if (row < 0 || row >= vocab) {
      if (raiseErrors && e == 0)
        detail::raise(errors, DeviceError::idOutOfRange);
      out[i] = T(0);
    } else {
      out[i] = table[row * hidden + e];
    }
  }
}

Status launchEmbedding(const Context &ctx, const char *name, const TensorRef &table,
                       const TensorRef &ids, int64_t start, bool raiseErrors,
                       const TensorRef &out) {
  int64_t vocab = table.shape[0], hidden = table.shape[1], count = ids.numElements();
  int64_t n = count * hidden;
  if (n == 0)
    return Status::ok();
  bySize(table.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto *idp) {
      embeddingKernel<<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
          table.as<const T>(), idp, count, hidden, vocab, start, raiseErrors, out.as<T>(),
          ctx.errors);
    };
    if (ids.dtype == DType::i64)
      go(ids.as<const int64_t>());
    else
      go(ids.as<const int32_t>());
  });
  return launchStatus(name);
}

// ---- EmbeddingGrad: sort (row, position) pairs, then one block per distinct row -------------

/// keys[j] = ids[j] - start, or `vocab` (a sentinel sorted last and skipped) when outside
/// [0, vocab), raising idOutOfRange with `raiseErrors`; positions[j] = j.
template <typename I>
__global__ void embeddingKeysKernel(const I *ids, int64_t count, int64_t start, int64_t vocab,
                                    bool raiseErrors, int64_t *keys, int64_t *positions,
                                    int *errors) {
  GRID_STRIDE(j, count) {
    int64_t row = static_cast<int64_t>(ids[j]) - start;
    if (row < 0 || row >= vocab) {
      if (raiseErrors)
        detail::raise(errors, DeviceError::idOutOfRange);
      row = vocab;
    }
    keys[j] = row;
    positions[j] = j;
  }
}

/// Block k (grid-stride over sorted slots) handles the run of equal keys starting at slot k,
/// if one starts there: dtable[key, :] = sum of dy[positions, :] over the run, in position
/// order (the sort is stable), accumulated in Compute<T> from 0. dtable is zero elsewhere.
template <typename T>
__global__ void embeddingGradRunsKernel(const int64_t *keys, const int64_t *positions,
                                        int64_t count, int64_t hidden, int64_t vocab, const T *dy,
                                        T *dtable) {
  using C = detail::Compute<T>;
  for (int64_t k = blockIdx.x; k < count; k += gridDim.x) {
    int64_t key = keys[k];
    if (key >= vocab || (k > 0 && keys[k - 1] == key))
      continue; // a sentinel, or not the start of a run
    int64_t end = k + 1;
    while (end < count && keys[end] == key)
      ++end;
    for (int64_t e = threadIdx.x; e < hidden; e += blockDim.x) {
      C sum = C(0);
      for (int64_t s = k; s < end; ++s)
        sum += detail::load(dy, positions[s] * hidden + e);
      detail::store(dtable, key * hidden + e, sum);
    }
  }
}

int bitsFor(int64_t value) { // bits to hold 0..value
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) <= value)
    ++bits;
  return bits;
}

Status embeddingGradWith(const Context &ctx, const char *name, const TensorRef &dy,
                         const TensorRef &ids, int64_t start, bool raiseErrors,
                         const TensorRef &dtable) {
  RETURN_IF_ERROR(cpu::detail::checkEmbeddingGrad(dy, ids, dtable));
  int64_t vocab = dtable.shape[0], hidden = dtable.shape[1];
  if (!detail::isFloat(dy.dtype))
    return detail::unsupportedDtype(name, dy.dtype);
  if (dtable.byteSize() &&
      cudaMemsetAsync(dtable.data, 0, dtable.byteSize(), ctx.stream) != cudaSuccess)
    return launchStatus(name);
  int64_t count = ids.numElements();
  if (count == 0 || hidden == 0)
    return launchStatus(name);
  if (count > int64_t(INT32_MAX))
    return fail(name, std::to_string(count) + " ids are more than the sort handles (2^31 - 1)");
  if (!ctx.scratch)
    return fail(name, "needs scratch memory, and the context has no allocator");
  int items = static_cast<int>(count);
  int endBit = bitsFor(vocab); // keys are in [0, vocab]
  size_t tempBytes = 0;
  if (cub::DeviceRadixSort::SortPairs(
          nullptr, tempBytes, static_cast<const int64_t *>(nullptr),
          static_cast<int64_t *>(nullptr), static_cast<const int64_t *>(nullptr),
          static_cast<int64_t *>(nullptr), items, 0, endBit, ctx.stream) != cudaSuccess)
    return launchStatus(name);
  size_t arrayBytes = static_cast<size_t>(count) * sizeof(int64_t);
  int64_t *arrays[4];
  for (int64_t *&array : arrays) {
    ASSIGN_OR_RETURN(void *memory, ctx.scratch(arrayBytes));
    array = static_cast<int64_t *>(memory);
  }
  ASSIGN_OR_RETURN(void *temp, ctx.scratch(tempBytes > 0 ? tempBytes : 1));
  int64_t *keysIn = arrays[0], *posIn = arrays[1], *keysOut = arrays[2], *posOut = arrays[3];
  unsigned blocks = detail::blocksFor(count, kThreads);
  if (ids.dtype == DType::i64)
    embeddingKeysKernel<<<blocks, kThreads, 0, ctx.stream>>>(
        ids.as<const int64_t>(), count, start, vocab, raiseErrors, keysIn, posIn, ctx.errors);
  else
    embeddingKeysKernel<<<blocks, kThreads, 0, ctx.stream>>>(
        ids.as<const int32_t>(), count, start, vocab, raiseErrors, keysIn, posIn, ctx.errors);
  RETURN_IF_ERROR(launchStatus(name));
  if (cub::DeviceRadixSort::SortPairs(temp, tempBytes, keysIn, keysOut, posIn, posOut, items, 0,
                                      endBit, ctx.stream) != cudaSuccess)
    return launchStatus(name);
  unsigned runBlocks = static_cast<unsigned>(std::min<int64_t>(count, 65535LL * 16));
  int threads = hidden >= 256 ? 256 : static_cast<int>((hidden + 31) / 32 * 32);
  detail::visitFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    embeddingGradRunsKernel<T><<<runBlocks, threads, 0, ctx.stream>>>(
        keysOut, posOut, count, hidden, vocab, dy.as<const T>(), dtable.as<T>());
  });
  return launchStatus(name);
}

} // namespace

// ---- Entry points -----------------------------------------------------------------------------

Status copy(const Context &ctx, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Copy", "output", out, x.dtype));
  if (x.numElements() != out.numElements())
    return fail("Copy", "output shape " + shapeString(out.shape) + " has " +
                            std::to_string(out.numElements()) + " elements, input shape " +
                            shapeString(x.shape) + " has " + std::to_string(x.numElements()));
  if (x.byteSize() == 0 || x.data == out.data)
    return Status::ok();
  if (cudaMemcpyAsync(out.data, x.data, x.byteSize(), cudaMemcpyDeviceToDevice, ctx.stream) !=
      cudaSuccess)
    return launchStatus("Copy");
  return Status::ok();
}

Status transpose(const Context &ctx, const TensorRef &x, std::span<const int64_t> perm,
                 const TensorRef &out) {
  ASSIGN_OR_RETURN(std::vector<int64_t> srcStrides, cpu::detail::checkTranspose(x, perm, out));
  size_t rank = x.shape.size();
  // The common case, the last two dims swapped and the rest in place: a tiled kernel.
  bool lastTwo = rank >= 2 && perm[rank - 1] == static_cast<int64_t>(rank - 2) &&
                 perm[rank - 2] == static_cast<int64_t>(rank - 1);
  for (size_t i = 0; lastTwo && i + 2 < rank; ++i)
    lastTwo = perm[i] == static_cast<int64_t>(i);
  if (lastTwo) {
    int64_t rows = x.shape[rank - 2], cols = x.shape[rank - 1];
    int64_t batch = detail::elementsOf(x.shape.first(rank - 2));
    if (rows * cols * batch == 0)
      return Status::ok();
    LaunchConfig c = detail::transposeLastTwoLaunch(batch, rows, cols, kTile);
    if (c.grid[0] > 0) {
      dim3 grid(static_cast<unsigned>(c.grid[0]), static_cast<unsigned>(c.grid[1]),
                static_cast<unsigned>(c.grid[2]));
      dim3 block(static_cast<unsigned>(c.block[0]), static_cast<unsigned>(c.block[1]));
      bySize(x.dtype, [&](auto tag) {
        using T = decltype(tag);
        transposeLastTwoKernel<T>
            <<<grid, block, 0, ctx.stream>>>(x.as<const T>(), out.as<T>(), batch, rows, cols);
      });
      return launchStatus("Transpose");
    }
  }
  return launchGather(ctx, "Transpose", x.dtype, out.shape, srcStrides, x.data, 0, out.data);
}

Status slice(const Context &ctx, const TensorRef &x, std::span<const int64_t> starts,
             std::span<const int64_t> strides, const TensorRef &out) {
  ASSIGN_OR_RETURN(cpu::detail::SliceSource src, cpu::detail::sliceSource(x, starts, strides, out));
  if (out.numElements() == 0)
    return Status::ok();
  return launchGather(ctx, "Slice", x.dtype, out.shape, src.strides, x.data, src.base, out.data);
}

Status concat(const Context &ctx, std::span<const TensorRef> inputs, int64_t axis,
              const TensorRef &out) {
  ASSIGN_OR_RETURN(cpu::detail::ConcatGeometry geometry,
                   cpu::detail::checkConcat(inputs, axis, out));
  int64_t outer = geometry.outer, outInner = geometry.outInner;
  int64_t prefix = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef &in = inputs[i];
    int64_t inner = geometry.inner[i];
    int64_t n = outer * inner;
    if (n > 0)
      bySize(out.dtype, [&](auto tag) {
        using T = decltype(tag);
        concatKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
            in.as<const T>(), outer, inner, out.as<T>(), outInner, prefix);
      });
    RETURN_IF_ERROR(launchStatus("Concat"));
    prefix += inner;
  }
  return Status::ok();
}

Status broadcast(const Context &ctx, const TensorRef &x, const TensorRef &out) {
  ASSIGN_OR_RETURN(std::vector<int64_t> srcStrides, cpu::detail::checkBroadcast(x, out));
  return launchGather(ctx, "Broadcast", x.dtype, out.shape, srcStrides, x.data, 0, out.data);
}

Status gather(const Context &ctx, const TensorRef &data, const TensorRef &indices, int64_t axis,
              const TensorRef &out) {
  ASSIGN_OR_RETURN(cpu::detail::GatherGeometry g,
                   cpu::detail::checkGather(data, indices, axis, out));
  int64_t outer = g.outer, dim = g.dim, count = g.count, inner = g.inner;
  int64_t n = outer * count * inner;
  if (n == 0)
    return Status::ok();
  bySize(data.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto *idx) {
      gatherKernel<<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
          data.as<const T>(), idx, outer, count, inner, dim, out.as<T>(), ctx.errors);
    };
    if (indices.dtype == DType::i64)
      go(indices.as<const int64_t>());
    else
      go(indices.as<const int32_t>());
  });
  return launchStatus("Gather");
}

Status embedding(const Context &ctx, const TensorRef &table, const TensorRef &ids,
                 const TensorRef &out) {
  RETURN_IF_ERROR(cpu::detail::checkEmbedding(table, ids, out));
  return launchEmbedding(ctx, "Embedding", table, ids, 0, true, out);
}

Status embeddingShard(const Context &ctx, const TensorRef &table, const TensorRef &ids,
                      int64_t vocabStart, const TensorRef &out) {
  RETURN_IF_ERROR(cpu::detail::checkEmbedding(table, ids, out));
  if (vocabStart < 0)
    return fail("Embedding", "vocab start " + std::to_string(vocabStart) + " is negative");
  return launchEmbedding(ctx, "Embedding", table, ids, vocabStart, false, out);
}

Status embeddingGrad(const Context &ctx, const TensorRef &dy, const TensorRef &ids,
                     const TensorRef &dtable) {
  return embeddingGradWith(ctx, "EmbeddingGrad", dy, ids, 0, true, dtable);
}

Status embeddingShardGrad(const Context &ctx, const TensorRef &dy, const TensorRef &ids,
                          int64_t vocabStart, const TensorRef &dtable) {
  if (vocabStart < 0)
    return fail("EmbeddingGrad", "vocab start " + std::to_string(vocabStart) + " is negative");
  return embeddingGradWith(ctx, "EmbeddingGrad", dy, ids, vocabStart, false, dtable);
}

Status pad(const Context &ctx, const TensorRef &x, std::span<const int64_t> low,
           std::span<const int64_t> high, std::span<const int64_t> interior, const TensorRef &out) {
  ASSIGN_OR_RETURN(cpu::detail::PadTarget target,
                   cpu::detail::checkPad(x, low, high, interior, out));
  size_t rank = x.shape.size();
  RETURN_IF_ERROR(rankLimit("Pad", rank));
  if (out.byteSize() && cudaMemsetAsync(out.data, 0, out.byteSize(), ctx.stream) != cudaSuccess)
    return launchStatus("Pad");
  int64_t count = x.numElements();
  if (count == 0)
    return Status::ok();
  Dims dims;
  dims.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    dims.size[d] = x.shape[d];
    dims.stride[d] = target.strides[d];
  }
  bySize(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    scatterStridedKernel<T><<<detail::blocksFor(count, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const T>(), out.as<T>(), target.base, dims, count);
  });
  return launchStatus("Pad");
}

} // namespace megac::runtime::cuda
