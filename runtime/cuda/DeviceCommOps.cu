// Device collectives along a tensor dim, pipeline transfers and the vocab-parallel embedding and
// cross-entropy (DeviceCommOps.h), mirroring runtime/exec/CommOps.cpp.
#include "runtime/cuda/DeviceCommOps.h"

#include "runtime/cuda/kernels/KernelCommon.cuh"
#include "runtime/exec/CollectiveLayout.h"
#include "runtime/exec/MoeRoutes.h"

#include <string>
#include <vector>

namespace megac::runtime::cuda::devcomm {

using detail::blocksFor;

namespace {

using collective::expectIndexDtype;
using collective::expectSameDtype;
using collective::expectSplit;

Status fail(const char *op, const std::string &message) { return collective::opError(op, message); }

/// CollectiveLayout's block layout as the relayout kernels see it: block g of outer row o is the
/// rowBytes at BlockLayout::pieceOffset(o, g, blocks, rowBytes).
struct Blocks {
  size_t outer = 1, blocks = 1, rowBytes = 0;

  static Blocks of(std::span<const int64_t> shape, int64_t dim, size_t blocks, DType dtype) {
    collective::BlockLayout b = collective::BlockLayout::of(shape, dim, blocks, dtype);
    return {b.outer, b.blocks, b.pieceRowBytes()};
  }
};

enum class Layout { pack, unpack, slice };

/// pack: pieces[g][o] = whole[o][g]; unpack: whole[o][g] = pieces[g][o]; slice: out[o] =
/// whole[o][block]. Indices are in units of U (rowUnits per block row); i runs over the pieces'
/// order (g major) for pack/unpack and over out for slice.
template <typename U>
__global__ void relayKernel(const U *__restrict__ src, U *__restrict__ dst, int64_t outer,
                            int64_t blocks, int64_t rowUnits, int64_t block, Layout layout,
                            int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t e = i % rowUnits, t = i / rowUnits;
    if (layout == Layout::slice) {
      dst[i] = src[collective::BlockLayout::pieceOffset(t, block, blocks, rowUnits) + e];
      continue;
    }
    int64_t o = t % outer, g = t / outer;
    int64_t whole = collective::BlockLayout::pieceOffset(o, g, blocks, rowUnits) + e;
    if (layout == Layout::pack)
      dst[i] = src[whole];
    else
      dst[whole] = src[i];
  }
}

template <typename U>
Status launchRelay(const Context &ctx, const void *src, void *dst, const Blocks &b, int64_t block,
                   Layout layout) {
  int64_t rowUnits = static_cast<int64_t>(b.rowBytes / sizeof(U));
  int64_t total = static_cast<int64_t>(b.outer) * rowUnits *
                  (layout == Layout::slice ? 1 : static_cast<int64_t>(b.blocks));
  if (total == 0)
    return Status::ok();
  relayKernel<U><<<blocksFor(total), 256, 0, ctx.stream>>>(
      static_cast<const U *>(src), static_cast<U *>(dst), static_cast<int64_t>(b.outer),
      static_cast<int64_t>(b.blocks), rowUnits, block, layout, total);
  return launchStatus("block relayout");
}

/// Moves the blocks with the widest unit that the row size and both addresses allow.
Status relay(const Context &ctx, const void *src, void *dst, const Blocks &b, int64_t block,
             Layout layout) {
  uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                    static_cast<uintptr_t>(b.rowBytes);
  if (align % 8 == 0)
    return launchRelay<uint64_t>(ctx, src, dst, b, block, layout);
  if (align % 4 == 0)
    return launchRelay<uint32_t>(ctx, src, dst, b, block, layout);
  if (align % 2 == 0)
    return launchRelay<uint16_t>(ctx, src, dst, b, block, layout);
  return launchRelay<uint8_t>(ctx, src, dst, b, block, layout);
}

std::pair<size_t, int64_t> groupOf(const NcclCommunicator &nccl, std::span<const uint32_t> axes) {
  return collective::groupOf(nccl.mesh(), nccl.rank(), axes);
}

Status checkAxes(const char *op, const NcclCommunicator &nccl, std::span<const uint32_t> axes) {
  for (uint32_t a : axes)
    if (a >= nccl.mesh().axisSizes.size())
      return fail(op, "mesh axis " + std::to_string(a) + " does not exist (the mesh has " +
                          std::to_string(nccl.mesh().axisSizes.size()) + " axes)");
  return Status::ok();
}

StatusOr<void *> scratchFor(const Context &ctx, size_t bytes) {
  if (!ctx.scratch)
    return Status::error("no scratch allocator in the CUDA context");
  return ctx.scratch(bytes == 0 ? 1 : bytes);
}

StatusOr<int> peerOf(const NcclCommunicator &nccl, uint32_t axis, int64_t shift) {
  return collective::peerOf(nccl.mesh(), nccl.rank(), axis, shift);
}

/// Raises `error` for every index outside [0, limit) that is not `ignore` (when hasIgnore).
template <typename I>
__global__ void checkRangeKernel(const I *__restrict__ ids, int64_t n, int64_t limit,
                                 bool hasIgnore, int64_t ignore, int *errors, DeviceError error) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t id = static_cast<int64_t>(ids[i]);
    if (!(hasIgnore && id == ignore) && (id < 0 || id >= limit))
      detail::raise(errors, error);
  }
}

Status checkRange(const Context &ctx, const TensorRef &ids, int64_t limit,
                  std::optional<int64_t> ignore, DeviceError error, const char *op) {
  int64_t n = ids.numElements();
  if (n == 0)
    return Status::ok();
  if (ids.dtype == DType::i64)
    checkRangeKernel<int64_t><<<blocksFor(n), 256, 0, ctx.stream>>>(
        static_cast<const int64_t *>(ids.data), n, limit, ignore.has_value(), ignore.value_or(0),
        ctx.errors, error);
  else
    checkRangeKernel<int32_t><<<blocksFor(n), 256, 0, ctx.stream>>>(
        static_cast<const int32_t *>(ids.data), n, limit, ignore.has_value(), ignore.value_or(0),
        ctx.errors, error);
  return launchStatus(op);
}

} // namespace

Status allReduce(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                 comm::ReduceKind kind, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("AllReduce", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("AllReduce", x, out));
  if (x.numElements() != out.numElements())
    return fail("AllReduce", "the output " + shapeString(out.shape) + " differs from the input " +
                                 shapeString(x.shape));
  return nccl.allReduce(axes, x.data, out.data, static_cast<size_t>(out.numElements()), out.dtype,
                        kind);
}

Status allGather(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                 int64_t dim, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("AllGather", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("AllGather", x, out));
  auto [size, index] = groupOf(nccl, axes);
  RETURN_IF_ERROR(expectSplit("AllGather", out, x, dim, size, "output", "input"));
  Blocks b = Blocks::of(out.shape, dim, size, out.dtype);
  if (b.outer == 1) // the blocks are already contiguous in group order
    return nccl.allGather(axes, x.data, out.data, x.byteSize());
  ASSIGN_OR_RETURN(void *pieces, scratchFor(ctx, x.byteSize() * size));
  RETURN_IF_ERROR(nccl.allGather(axes, x.data, pieces, x.byteSize()));
  return relay(ctx, pieces, out.data, b, 0, Layout::unpack);
}

Status reduceScatter(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                     comm::ReduceKind kind, int64_t dim, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("ReduceScatter", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("ReduceScatter", x, out));
  auto [size, index] = groupOf(nccl, axes);
  RETURN_IF_ERROR(expectSplit("ReduceScatter", x, out, dim, size, "input", "output"));
  Blocks b = Blocks::of(x.shape, dim, size, x.dtype);
  const void *source = x.data;
  if (b.outer != 1) {
    ASSIGN_OR_RETURN(void *pieces, scratchFor(ctx, x.byteSize()));
    RETURN_IF_ERROR(relay(ctx, x.data, pieces, b, 0, Layout::pack));
    source = pieces;
  }
  return nccl.reduceScatter(axes, source, out.data, static_cast<size_t>(out.numElements()),
                            out.dtype, kind);
}

Status allToAll(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                int64_t dim, int64_t concatDim, const TensorRef &x, const TensorRef &out) {
  const char *name = "AllToAll";
  RETURN_IF_ERROR(checkAxes(name, nccl, axes));
  RETURN_IF_ERROR(expectSameDtype(name, x, out));
  auto [size, index] = groupOf(nccl, axes);
  RETURN_IF_ERROR(collective::expectAllToAll(name, x, out, dim, concatDim, size));
  // x -> pieces (sent) -> received pieces -> out; NCCL needs distinct send and receive buffers.
  ASSIGN_OR_RETURN(void *sent, scratchFor(ctx, x.byteSize()));
  ASSIGN_OR_RETURN(void *received, scratchFor(ctx, x.byteSize()));
  RETURN_IF_ERROR(
      relay(ctx, x.data, sent, Blocks::of(x.shape, dim, size, x.dtype), 0, Layout::pack));
  RETURN_IF_ERROR(nccl.allToAll(axes, sent, received, x.byteSize() / size));
  return relay(ctx, received, out.data, Blocks::of(out.shape, concatDim, size, out.dtype), 0,
               Layout::unpack);
}

namespace {

/// Device memory of its own for a collective in flight (see DeviceCommOps.h), in ctx.stream
/// order.
StatusOr<void *> ownMemory(const Context &ctx, size_t bytes, const char *op) {
  void *p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, ctx.stream); e != cudaSuccess)
    return fail(op, "cudaMallocAsync of " + std::to_string(bytes) +
                        " bytes for the pieces in "
                        "flight: " +
                        cudaGetErrorString(e));
  return p;
}

Status freeOnStream(void *p, cudaStream_t stream) {
  if (cudaError_t e = cudaFreeAsync(p, stream); e != cudaSuccess)
    return Status::error(std::string("cudaFreeAsync (pieces of a collective in flight): ") +
                         cudaGetErrorString(e));
  return Status::ok();
}

} // namespace

static Status copyOnStream(const Context &ctx, void *dst, const void *src, size_t bytes,
                           const char *op) {
  if (dst == src || bytes == 0)
    return Status::ok();
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream);
      e != cudaSuccess)
    return fail(op, std::string("cudaMemcpyAsync of the input: ") + cudaGetErrorString(e));
  return Status::ok();
}

// The input is copied (on ctx.stream, before the start) to memory that stays unwritten until the
// CollectiveDone: the plan's memory planner ends the input's life at the start (the
// CollectiveDone reads only the output), so a later instruction may write over its bytes while
// NCCL still reads them. All-reduce and all-gather then run in place in their output; a
// reduce-scatter reads a copy of its own.
Status startAllReduce(NcclCommunicator &nccl, const Context &ctx, uint64_t key,
                      std::span<const uint32_t> axes, comm::ReduceKind kind, const TensorRef &x,
                      const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("AllReduceStart", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("AllReduceStart", x, out));
  if (x.numElements() != out.numElements())
    return fail("AllReduceStart", "the output " + shapeString(out.shape) +
                                      " differs from the input " + shapeString(x.shape));
  RETURN_IF_ERROR(copyOnStream(ctx, out.data, x.data, x.byteSize(), "AllReduceStart"));
  return nccl.startAllReduce(key, axes, out.data, out.data, static_cast<size_t>(out.numElements()),
                             out.dtype, kind);
}

Status startAllGather(NcclCommunicator &nccl, const Context &ctx, uint64_t key,
                      std::span<const uint32_t> axes, int64_t dim, const TensorRef &x,
                      const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("AllGatherStart", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("AllGatherStart", x, out));
  auto [size, index] = groupOf(nccl, axes);
  RETURN_IF_ERROR(expectSplit("AllGatherStart", out, x, dim, size, "output", "input"));
  Blocks b = Blocks::of(out.shape, dim, size, out.dtype);
  const size_t bytes = x.byteSize();
  // In place: this rank's block first, at its group index (ncclAllGather's in-place form).
  auto gatherInto = [&](void *whole) -> Status {
    char *mine = static_cast<char *>(whole) + static_cast<size_t>(index) * bytes;
    RETURN_IF_ERROR(copyOnStream(ctx, mine, x.data, bytes, "AllGatherStart"));
    return nccl.startAllGather(key, axes, mine, whole, bytes);
  };
  if (b.outer == 1) // the blocks are already contiguous in group order
    return gatherInto(out.data);
  ASSIGN_OR_RETURN(void *pieces, ownMemory(ctx, bytes * size, "AllGatherStart"));
  if (Status started = gatherInto(pieces); !started.isOk()) {
    (void)freeOnStream(pieces, ctx.stream);
    return started;
  }
  Context at = ctx;
  void *whole = out.data;
  return nccl.afterFinish(key, [at, pieces, whole, b]() -> Status {
    RETURN_IF_ERROR(relay(at, pieces, whole, b, 0, Layout::unpack));
    return freeOnStream(pieces, at.stream);
  });
}

Status startReduceScatter(NcclCommunicator &nccl, const Context &ctx, uint64_t key,
                          std::span<const uint32_t> axes, comm::ReduceKind kind, int64_t dim,
                          const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("ReduceScatterStart", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("ReduceScatterStart", x, out));
  auto [size, index] = groupOf(nccl, axes);
  RETURN_IF_ERROR(expectSplit("ReduceScatterStart", x, out, dim, size, "input", "output"));
  Blocks b = Blocks::of(x.shape, dim, size, x.dtype);
  ASSIGN_OR_RETURN(void *pieces, ownMemory(ctx, x.byteSize(), "ReduceScatterStart"));
  Status packed = b.outer == 1
                      ? copyOnStream(ctx, pieces, x.data, x.byteSize(), "ReduceScatterStart")
                      : relay(ctx, x.data, pieces, b, 0, Layout::pack);
  Status started = packed.isOk() ? nccl.startReduceScatter(key, axes, pieces, out.data,
                                                           static_cast<size_t>(out.numElements()),
                                                           out.dtype, kind)
                                 : packed;
  if (!started.isOk()) {
    (void)freeOnStream(pieces, ctx.stream);
    return started;
  }
  cudaStream_t stream = ctx.stream;
  return nccl.afterFinish(key, [pieces, stream] { return freeOnStream(pieces, stream); });
}

Status finishCollective(NcclCommunicator &nccl, uint64_t key) { return nccl.finish(key); }

namespace {

/// dst row (dstRows ? dstRows[r] : r) = src row (srcRows ? srcRows[r] : r), for r < rows; rows
/// of rowUnits units U.
template <typename U>
__global__ void rowCopyKernel(const U *__restrict__ src, const int64_t *__restrict__ srcRows,
                              U *__restrict__ dst, const int64_t *__restrict__ dstRows,
                              int64_t rows, int64_t rowUnits) {
  int64_t total = rows * rowUnits;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / rowUnits, e = i % rowUnits;
    int64_t from = srcRows ? srcRows[r] : r, to = dstRows ? dstRows[r] : r;
    dst[to * rowUnits + e] = src[from * rowUnits + e];
  }
}

template <typename U>
Status launchRowCopy(const Context &ctx, const void *src, const int64_t *srcRows, void *dst,
                     const int64_t *dstRows, int64_t rows, size_t rowBytes) {
  int64_t rowUnits = static_cast<int64_t>(rowBytes / sizeof(U));
  if (rows == 0 || rowUnits == 0)
    return Status::ok();
  rowCopyKernel<U><<<blocksFor(rows * rowUnits), 256, 0, ctx.stream>>>(
      static_cast<const U *>(src), srcRows, static_cast<U *>(dst), dstRows, rows, rowUnits);
  return launchStatus("MoeAllToAll row copy");
}

Status rowCopy(const Context &ctx, const void *src, const int64_t *srcRows, void *dst,
               const int64_t *dstRows, int64_t rows, size_t rowBytes) {
  uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                    static_cast<uintptr_t>(rowBytes);
  if (align % 8 == 0)
    return launchRowCopy<uint64_t>(ctx, src, srcRows, dst, dstRows, rows, rowBytes);
  if (align % 4 == 0)
    return launchRowCopy<uint32_t>(ctx, src, srcRows, dst, dstRows, rows, rowBytes);
  if (align % 2 == 0)
    return launchRowCopy<uint16_t>(ctx, src, srcRows, dst, dstRows, rows, rowBytes);
  return launchRowCopy<uint8_t>(ctx, src, srcRows, dst, dstRows, rows, rowBytes);
}

/// A device tensor's bytes on the host (ctx.stream synchronized by the caller after).
Status copyToHost(const Context &ctx, const TensorRef &t, std::vector<uint8_t> &host) {
  host.resize(t.byteSize());
  if (host.empty())
    return Status::ok();
  if (cudaError_t e =
          cudaMemcpyAsync(host.data(), t.data, host.size(), cudaMemcpyDeviceToHost, ctx.stream);
      e != cudaSuccess)
    return fail("MoeAllToAll", std::string("cudaMemcpyAsync of a routing mask to the host: ") +
                                   cudaGetErrorString(e));
  return Status::ok();
}

} // namespace

Status moeAllToAll(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                   int64_t dim, const TensorRef &x, const TensorRef &tokenMask,
                   const TensorRef &expertMask, const TensorRef &out) {
  const char *name = "MoeAllToAll";
  RETURN_IF_ERROR(checkAxes(name, nccl, axes));
  auto [size, index] = groupOf(nccl, axes);
  ASSIGN_OR_RETURN(collective::MoeShape shape, collective::moeShape(dim, static_cast<int64_t>(size),
                                                                    x, tokenMask, expertMask, out));
  // The masks on the host: the compute stream is synchronized, so first every collective in
  // flight completes under the watchdog (the stream may wait on them).
  RETURN_IF_ERROR(nccl.drain()) << " (before " << name << " reads the routing masks)";
  std::vector<uint8_t> tokenHost, expertHost;
  RETURN_IF_ERROR(copyToHost(ctx, tokenMask, tokenHost));
  RETURN_IF_ERROR(copyToHost(ctx, expertMask, expertHost));
  if (cudaError_t e = cudaStreamSynchronize(ctx.stream); e != cudaSuccess)
    return fail(name,
                std::string("cudaStreamSynchronize (routing masks): ") + cudaGetErrorString(e));
  collective::MoeRoutes routes =
      collective::moeRoutes(shape, {tokenMask.dtype, tokenMask.shape, tokenHost.data()},
                            {expertMask.dtype, expertMask.shape, expertHost.data()});
  // One upload: [send rows | receive rows | bytes per member sent | the counts received].
  std::vector<size_t> sendBytes, recvBytes;
  std::vector<int64_t> table;
  for (const std::vector<int64_t> &rows : routes.sendRows) {
    table.insert(table.end(), rows.begin(), rows.end());
    sendBytes.push_back(rows.size() * shape.rowBytes);
  }
  const size_t sendRows = table.size();
  for (const std::vector<int64_t> &rows : routes.recvRows) {
    table.insert(table.end(), rows.begin(), rows.end());
    recvBytes.push_back(rows.size() * shape.rowBytes);
  }
  const size_t recvRows = table.size() - sendRows;
  for (size_t b : sendBytes)
    table.push_back(static_cast<int64_t>(b));
  table.resize(table.size() + size, 0);
  ASSIGN_OR_RETURN(void *device, scratchFor(ctx, table.size() * sizeof(int64_t)));
  auto *rowsOnDevice = static_cast<int64_t *>(device);
  // The stream is idle (synchronized above): this pageable copy waits for nothing.
  if (cudaError_t e = cudaMemcpyAsync(device, table.data(), table.size() * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, ctx.stream);
      e != cudaSuccess)
    return fail(name, std::string("cudaMemcpyAsync of the routes: ") + cudaGetErrorString(e));
  ASSIGN_OR_RETURN(void *sent, scratchFor(ctx, sendRows * shape.rowBytes));
  ASSIGN_OR_RETURN(void *received, scratchFor(ctx, recvRows * shape.rowBytes));
  RETURN_IF_ERROR(rowCopy(ctx, x.data, rowsOnDevice, sent, nullptr, static_cast<int64_t>(sendRows),
                          shape.rowBytes));
  if (cudaError_t e = cudaMemsetAsync(out.data, 0, out.byteSize(), ctx.stream); e != cudaSuccess)
    return fail(name, std::string("cudaMemsetAsync of the output: ") + cudaGetErrorString(e));
  RETURN_IF_ERROR(nccl.allToAllV(axes, sent, sendBytes, received, recvBytes,
                                 rowsOnDevice + sendRows + recvRows))
      << " (" << name << ")";
  return rowCopy(ctx, received, nullptr, out.data, rowsOnDevice + sendRows,
                 static_cast<int64_t>(recvRows), shape.rowBytes);
}

Status shardSlice(const NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                  int64_t dim, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(checkAxes("ShardSlice", nccl, axes));
  RETURN_IF_ERROR(expectSameDtype("ShardSlice", x, out));
  auto [size, index] = groupOf(nccl, axes);
  RETURN_IF_ERROR(expectSplit("ShardSlice", x, out, dim, size, "input", "output"));
  return relay(ctx, x.data, out.data, Blocks::of(x.shape, dim, size, x.dtype), index,
               Layout::slice);
}

Status send(NcclCommunicator &nccl, uint32_t axis, int64_t shift, int64_t tag, const TensorRef &x) {
  ASSIGN_OR_RETURN(int peer, peerOf(nccl, axis, shift));
  return nccl.send(peer, static_cast<int>(tag), x.data, x.byteSize());
}

Status recv(NcclCommunicator &nccl, uint32_t axis, int64_t shift, int64_t tag,
            const TensorRef &out) {
  ASSIGN_OR_RETURN(int peer, peerOf(nccl, axis, shift));
  return nccl.recv(peer, static_cast<int>(tag), out.data, out.byteSize());
}

namespace {

/// Vocab-parallel Embedding or EmbeddingGrad (tableName "the table" or "dtable"): the checks,
/// `kernel(start)` on this rank's shard, then the ids' range over the whole vocabulary.
template <typename Kernel>
Status onVocabShard(const char *name, const char *tableName, const NcclCommunicator &nccl,
                    const Context &ctx, std::span<const uint32_t> axes, const TensorRef &table,
                    const TensorRef &ids, Kernel &&kernel) {
  RETURN_IF_ERROR(checkAxes(name, nccl, axes));
  ASSIGN_OR_RETURN(collective::VocabShard shard,
                   collective::vocabShard(name, tableName, nccl.mesh(), nccl.rank(), axes, table,
                                          ids, Status::ok()));
  RETURN_IF_ERROR(kernel(shard.start));
  return checkRange(ctx, ids, shard.vocab, std::nullopt, DeviceError::idOutOfRange, name);
}

} // namespace

Status vocabEmbedding(const NcclCommunicator &nccl, const Context &ctx,
                      std::span<const uint32_t> axes, const TensorRef &table, const TensorRef &ids,
                      const TensorRef &out) {
  return onVocabShard("Embedding", "the table", nccl, ctx, axes, table, ids,
                      [&](int64_t start) { return embeddingShard(ctx, table, ids, start, out); });
}

Status vocabEmbeddingGrad(const NcclCommunicator &nccl, const Context &ctx,
                          std::span<const uint32_t> axes, const TensorRef &dy, const TensorRef &ids,
                          const TensorRef &dtable) {
  return onVocabShard("EmbeddingGrad", "dtable", nccl, ctx, axes, dtable, ids, [&](int64_t start) {
    return embeddingShardGrad(ctx, dy, ids, start, dtable);
  });
}

namespace {

/// Per row of logits [..., V/G]: the group's max, and its sum of exp(x - max) and (with
/// `target`) the target's logit; each of `rows` statistics of `statType`.
struct VocabStats {
  TensorRef max, sum, target;
};

/// The shared part of the loss and its gradient: checks, label range, and the reduced stats.
StatusOr<VocabStats> vocabStats(const char *name, NcclCommunicator &nccl, const Context &ctx,
                                std::span<const uint32_t> axes, const TensorRef &logits,
                                const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                                int64_t &start) {
  RETURN_IF_ERROR(checkAxes(name, nccl, axes));
  RETURN_IF_ERROR(expectIndexDtype(name, "labels", labels));
  if (logits.shape.empty())
    return fail(name, "logits must have a class dim, not shape []");
  std::span<const int64_t> rowsShape = logits.shape.first(logits.shape.size() - 1);
  if (!std::equal(rowsShape.begin(), rowsShape.end(), labels.shape.begin(), labels.shape.end()))
    return fail(name,
                "labels must be " + shapeString(rowsShape) + ", not " + shapeString(labels.shape));
  if (!detail::isFloat(logits.dtype))
    return detail::unsupportedDtype(name, logits.dtype);
  auto [size, index] = groupOf(nccl, axes);
  int64_t local = logits.shape.back();
  start = index * local;
  RETURN_IF_ERROR(checkRange(ctx, labels, local * static_cast<int64_t>(size), ignoreIndex,
                             DeviceError::labelOutOfRange, name));
  DType statType = logits.dtype == DType::f64 ? DType::f64 : DType::f32;
  size_t rows = static_cast<size_t>(labels.numElements());
  size_t bytes = rows * dtypeSize(statType);
  // [max | sum | target]: sum and target are contiguous, so one all-reduce sums both.
  ASSIGN_OR_RETURN(void *stats, scratchFor(ctx, 3 * bytes));
  auto *base = static_cast<uint8_t *>(stats);
  VocabStats s{{statType, labels.shape, base},
               {statType, labels.shape, base + bytes},
               {statType, labels.shape, base + 2 * bytes}};
  RETURN_IF_ERROR(crossEntropyShardStats(ctx, logits, labels, start, s.max, s.target));
  RETURN_IF_ERROR(
      nccl.allReduce(axes, s.max.data, s.max.data, rows, statType, comm::ReduceKind::max));
  RETURN_IF_ERROR(crossEntropyShardSumExp(ctx, logits, s.max, s.sum));
  RETURN_IF_ERROR(
      nccl.allReduce(axes, s.sum.data, s.sum.data, 2 * rows, statType, comm::ReduceKind::sum));
  return s;
}

} // namespace

Status vocabCrossEntropy(NcclCommunicator &nccl, const Context &ctx, std::span<const uint32_t> axes,
                         const TensorRef &logits, const TensorRef &labels,
                         std::optional<int64_t> ignoreIndex, const TensorRef &out) {
  const char *name = "CrossEntropy";
  if (out.dtype != logits.dtype)
    return fail(name, std::string("the output must be ") + dtypeName(logits.dtype) + ", not " +
                          dtypeName(out.dtype));
  int64_t start = 0;
  ASSIGN_OR_RETURN(VocabStats s,
                   vocabStats(name, nccl, ctx, axes, logits, labels, ignoreIndex, start));
  return crossEntropyShardLoss(ctx, s.max, s.sum, s.target, labels, ignoreIndex, out);
}

Status vocabCrossEntropyGrad(NcclCommunicator &nccl, const Context &ctx,
                             std::span<const uint32_t> axes, const TensorRef &dloss,
                             const TensorRef &logits, const TensorRef &labels,
                             std::optional<int64_t> ignoreIndex, const TensorRef &dlogits) {
  const char *name = "CrossEntropyGrad";
  int64_t start = 0;
  ASSIGN_OR_RETURN(VocabStats s,
                   vocabStats(name, nccl, ctx, axes, logits, labels, ignoreIndex, start));
  return crossEntropyShardGrad(ctx, dloss, logits, labels, start, s.max, s.sum, ignoreIndex,
                               dlogits);
}

} // namespace megac::runtime::cuda::devcomm
