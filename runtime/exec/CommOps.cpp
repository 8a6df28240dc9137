// Collectives along a tensor dim, pipeline transfers and the vocab-parallel embedding and
// cross-entropy (CommOps.h).
#include "runtime/exec/CommOps.h"

#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/VectorMath.h"
#include "runtime/exec/CollectiveLayout.h"
#include "runtime/exec/MoeRoutes.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace megac::runtime::commops {

namespace detail = cpu::detail;
using detail::dispatchFloat;
using detail::expectIndexDtype;
using detail::fail;
using detail::loadIndex;

namespace {

using collective::expectSameDtype;
using collective::expectSplit;

/// The collectives' block layout (CollectiveLayout.h) with host copies between the whole tensor
/// and its pieces laid out one after another.
struct Blocks : collective::BlockLayout {
  static Blocks of(std::span<const int64_t> shape, int64_t dim, size_t blocks, DType dtype) {
    return {BlockLayout::of(shape, dim, blocks, dtype)};
  }
  const uint8_t *at(const void *whole, size_t o, size_t g) const {
    return static_cast<const uint8_t *>(whole) + pieceOffset(o, g);
  }
  /// whole -> pieces laid out one after another.
  void pack(const void *whole, void *pieces) const {
    auto *dst = static_cast<uint8_t *>(pieces);
    for (size_t g = 0; g < blocks; ++g)
      for (size_t o = 0; o < outer; ++o, dst += pieceRowBytes())
        detail::copyBytes(dst, at(whole, o, g), pieceRowBytes());
  }
  /// pieces -> whole.
  void unpack(const void *pieces, void *whole) const {
    const auto *src = static_cast<const uint8_t *>(pieces);
    for (size_t g = 0; g < blocks; ++g)
      for (size_t o = 0; o < outer; ++o, src += pieceRowBytes())
        detail::copyBytes(const_cast<uint8_t *>(at(whole, o, g)), src, pieceRowBytes());
  }
};

/// The group's size and this rank's index in it.
std::pair<size_t, int64_t> groupOf(const comm::Communicator &comm, std::span<const uint32_t> axes) {
  return collective::groupOf(comm.mesh(), comm.rank(), axes);
}

} // namespace

Status allReduce(comm::Communicator &comm, std::span<const uint32_t> axes, comm::ReduceKind kind,
                 const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("AllReduce", x, out));
  if (x.numElements() != out.numElements())
    return fail("AllReduce", "the output " + shapeString(out.shape) + " differs from the input " +
                                 shapeString(x.shape));
  if (out.data != x.data)
    detail::copyBytes(out.data, x.data, x.byteSize());
  return comm.allReduce(axes, out.data, static_cast<size_t>(out.numElements()), out.dtype, kind);
}

Status allGather(comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                 const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("AllGather", x, out));
  auto [size, index] = groupOf(comm, axes);
  RETURN_IF_ERROR(expectSplit("AllGather", out, x, dim, size, "output", "input"));
  std::vector<uint8_t> pieces(x.byteSize() * size);
  RETURN_IF_ERROR(comm.allGather(axes, x.data, pieces.data(), x.byteSize()));
  Blocks::of(out.shape, dim, size, out.dtype).unpack(pieces.data(), out.data);
  return Status::ok();
}

Status reduceScatter(comm::Communicator &comm, std::span<const uint32_t> axes,
                     comm::ReduceKind kind, int64_t dim, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("ReduceScatter", x, out));
  auto [size, index] = groupOf(comm, axes);
  RETURN_IF_ERROR(expectSplit("ReduceScatter", x, out, dim, size, "input", "output"));
  std::vector<uint8_t> pieces(x.byteSize());
  Blocks::of(x.shape, dim, size, x.dtype).pack(x.data, pieces.data());
  return comm.reduceScatter(axes, pieces.data(), out.data, static_cast<size_t>(out.numElements()),
                            out.dtype, kind);
}

StatusOr<std::unique_ptr<comm::CommHandle>>
startAllReduce(comm::Communicator &comm, std::span<const uint32_t> axes, comm::ReduceKind kind,
               const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("AllReduceStart", x, out));
  if (x.numElements() != out.numElements())
    return fail("AllReduceStart", "the output " + shapeString(out.shape) +
                                      " differs from the input " + shapeString(x.shape));
  return comm.startAllReduce(axes, x.data, out.data, static_cast<size_t>(out.numElements()),
                             out.dtype, kind);
}

namespace {

/// An all_gather's handle: the pieces arrive one after another and are laid out along `dim`
/// at wait.
class UnpackHandle final : public comm::CommHandle {
public:
  UnpackHandle(std::unique_ptr<std::vector<uint8_t>> pieces, Blocks layout, void *out)
      : pieces_(std::move(pieces)), layout_(layout), out_(out) {}
  void setInner(std::unique_ptr<comm::CommHandle> inner) { inner_ = std::move(inner); }
  Status wait() override {
    RETURN_IF_ERROR(inner_->wait());
    layout_.unpack(pieces_->data(), out_);
    return Status::ok();
  }

private:
  std::unique_ptr<std::vector<uint8_t>> pieces_; // stable: the inner handle writes it
  Blocks layout_;
  void *out_;
  std::unique_ptr<comm::CommHandle> inner_;
};

} // namespace

StatusOr<std::unique_ptr<comm::CommHandle>> startAllGather(comm::Communicator &comm,
                                                           std::span<const uint32_t> axes,
                                                           int64_t dim, const TensorRef &x,
                                                           const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("AllGatherStart", x, out));
  auto [size, index] = groupOf(comm, axes);
  RETURN_IF_ERROR(expectSplit("AllGatherStart", out, x, dim, size, "output", "input"));
  auto pieces = std::make_unique<std::vector<uint8_t>>(x.byteSize() * size);
  uint8_t *piecesData = pieces->data();
  auto handle = std::make_unique<UnpackHandle>(
      std::move(pieces), Blocks::of(out.shape, dim, size, out.dtype), out.data);
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CommHandle> inner,
                   comm.startAllGather(axes, x.data, piecesData, x.byteSize()));
  handle->setInner(std::move(inner));
  return std::unique_ptr<comm::CommHandle>(std::move(handle));
}

StatusOr<std::unique_ptr<comm::CommHandle>>
startReduceScatter(comm::Communicator &comm, std::span<const uint32_t> axes, comm::ReduceKind kind,
                   int64_t dim, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("ReduceScatterStart", x, out));
  auto [size, index] = groupOf(comm, axes);
  RETURN_IF_ERROR(expectSplit("ReduceScatterStart", x, out, dim, size, "input", "output"));
  // The communicator copies the packed pieces when it posts them.
  std::vector<uint8_t> pieces(x.byteSize());
  Blocks::of(x.shape, dim, size, x.dtype).pack(x.data, pieces.data());
  return comm.startReduceScatter(axes, pieces.data(), out.data,
                                 static_cast<size_t>(out.numElements()), out.dtype, kind);
}

Status allToAll(comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                int64_t concatDim, const TensorRef &x, const TensorRef &out) {
  const char *name = "AllToAll";
  RETURN_IF_ERROR(expectSameDtype(name, x, out));
  auto [size, index] = groupOf(comm, axes);
  RETURN_IF_ERROR(collective::expectAllToAll(name, x, out, dim, concatDim, size));
  std::vector<uint8_t> sent(x.byteSize()), received(x.byteSize());
  Blocks::of(x.shape, dim, size, x.dtype).pack(x.data, sent.data());
  RETURN_IF_ERROR(comm.allToAll(axes, sent.data(), received.data(), x.byteSize() / size));
  Blocks::of(out.shape, concatDim, size, out.dtype).unpack(received.data(), out.data);
  return Status::ok();
}

Status moeAllToAll(comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                   const TensorRef &x, const TensorRef &tokenMask, const TensorRef &expertMask,
                   const TensorRef &out) {
  const size_t members = groupOf(comm, axes).first;
  ASSIGN_OR_RETURN(
      collective::MoeShape shape,
      collective::moeShape(dim, static_cast<int64_t>(members), x, tokenMask, expertMask, out));
  const collective::MoeRoutes routes = collective::moeRoutes(shape, tokenMask, expertMask);
  const size_t row = shape.rowBytes;
  std::vector<size_t> sendBytes, recvBytes;
  size_t sendTotal = 0, recvTotal = 0;
  for (size_t rows : routes.sendCounts())
    sendTotal += sendBytes.emplace_back(rows * row);
  for (size_t rows : routes.recvCounts())
    recvTotal += recvBytes.emplace_back(rows * row);
  auto *outBytes = static_cast<uint8_t *>(out.data);
  const auto *xBytes = static_cast<const uint8_t *>(x.data);
  std::fill(outBytes, outBytes + out.byteSize(), uint8_t(0));
  std::vector<uint8_t> sent(sendTotal), received(recvTotal);
  size_t at = 0;
  for (const std::vector<int64_t> &rows : routes.sendRows)
    for (int64_t r : rows) {
      std::memcpy(sent.data() + at, xBytes + size_t(r) * row, row);
      at += row;
    }
  RETURN_IF_ERROR(comm.allToAllV(axes, sent.data(), sendBytes, received.data(), recvBytes))
      << " (MoeAllToAll)";
  at = 0;
  for (const std::vector<int64_t> &rows : routes.recvRows)
    for (int64_t r : rows) {
      std::memcpy(outBytes + size_t(r) * row, received.data() + at, row);
      at += row;
    }
  return Status::ok();
}

Status shardSlice(const comm::Communicator &comm, std::span<const uint32_t> axes, int64_t dim,
                  const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype("ShardSlice", x, out));
  auto [size, index] = groupOf(comm, axes);
  RETURN_IF_ERROR(expectSplit("ShardSlice", x, out, dim, size, "input", "output"));
  Blocks b = Blocks::of(x.shape, dim, size, x.dtype);
  auto *dst = static_cast<uint8_t *>(out.data);
  for (size_t o = 0; o < b.outer; ++o, dst += b.pieceRowBytes())
    detail::copyBytes(dst, b.at(x.data, o, static_cast<size_t>(index)), b.pieceRowBytes());
  return Status::ok();
}

StatusOr<int> peerOf(const comm::Communicator &comm, uint32_t axis, int64_t shift) {
  return collective::peerOf(comm.mesh(), comm.rank(), axis, shift);
}

Status send(comm::Communicator &comm, uint32_t axis, int64_t shift, int64_t tag,
            const TensorRef &x) {
  ASSIGN_OR_RETURN(int peer, peerOf(comm, axis, shift));
  return comm.send(peer, static_cast<int>(tag), x.data, x.byteSize());
}

Status recv(comm::Communicator &comm, uint32_t axis, int64_t shift, int64_t tag,
            const TensorRef &out) {
  ASSIGN_OR_RETURN(int peer, peerOf(comm, axis, shift));
  return comm.recv(peer, static_cast<int>(tag), out.data, out.byteSize());
}

namespace {

/// The shard of a vocab-parallel table after the checks in order: ids' dtype, `dtypeCheck`, the
/// table's rank, and `rows` (the output or dy) being [ids.., h].
StatusOr<collective::VocabShard> vocabShard(const char *name, const char *tableName,
                                            const comm::Communicator &comm,
                                            std::span<const uint32_t> axes, const TensorRef &table,
                                            const TensorRef &ids, Status dtypeCheck,
                                            const char *rowsName, const TensorRef &rows) {
  ASSIGN_OR_RETURN(collective::VocabShard shard,
                   collective::vocabShard(name, tableName, comm.mesh(), comm.rank(), axes, table,
                                          ids, std::move(dtypeCheck)));
  std::vector<int64_t> expected(ids.shape.begin(), ids.shape.end());
  expected.push_back(shard.hidden);
  RETURN_IF_ERROR(detail::expectShape(name, rowsName, rows, expected));
  return shard;
}

Status idOutsideVocab(const char *name, int64_t id, int64_t j, int64_t vocab) {
  return fail(name, "id " + std::to_string(id) + " (element " + std::to_string(j) +
                        " of the ids) is outside the vocabulary's " + std::to_string(vocab) +
                        " rows");
}

} // namespace

Status vocabEmbedding(const comm::Communicator &comm, std::span<const uint32_t> axes,
                      const TensorRef &table, const TensorRef &ids, const TensorRef &out) {
  const char *name = "Embedding";
  ASSIGN_OR_RETURN(collective::VocabShard shard,
                   vocabShard(name, "the table", comm, axes, table, ids,
                              expectSameDtype(name, table, out), "output", out));
  int64_t start = shard.start, local = shard.local;
  size_t rowBytes = static_cast<size_t>(shard.hidden) * dtypeSize(table.dtype);
  for (int64_t j = 0; j < ids.numElements(); ++j) {
    int64_t id = loadIndex(ids, j);
    if (id < 0 || id >= shard.vocab)
      return idOutsideVocab(name, id, j, shard.vocab);
    auto *dst = static_cast<uint8_t *>(out.data) + j * rowBytes;
    if (id >= start && id < start + local)
      detail::copyBytes(dst, static_cast<const uint8_t *>(table.data) + (id - start) * rowBytes,
                        rowBytes);
    else
      std::memset(dst, 0, rowBytes);
  }
  return Status::ok();
}

Status vocabEmbeddingGrad(const comm::Communicator &comm, std::span<const uint32_t> axes,
                          const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable) {
  const char *name = "EmbeddingGrad";
  ASSIGN_OR_RETURN(collective::VocabShard shard,
                   vocabShard(name, "dtable", comm, axes, dtable, ids,
                              detail::expectDtype(name, "dtable", dtable, dy.dtype), "dy", dy));
  int64_t start = shard.start, local = shard.local, hidden = shard.hidden;
  int64_t count = ids.numElements();
  for (int64_t j = 0; j < count; ++j) {
    int64_t id = loadIndex(ids, j);
    if (id < 0 || id >= shard.vocab)
      return idOutsideVocab(name, id, j, shard.vocab);
  }
  return dispatchFloat(name, dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *out = dtable.as<T>();
    std::fill(out, out + local * hidden, T(0));
    // Positions in order, as cpu::embeddingGrad: the shard's rows equal the unsharded ones.
    for (int64_t j = 0; j < count; ++j) {
      int64_t id = loadIndex(ids, j);
      if (id < start || id >= start + local)
        continue;
      T *row = out + (id - start) * hidden;
      const T *src = dy.as<const T>() + j * hidden;
      for (int64_t e = 0; e < hidden; ++e)
        row[e] += src[e];
    }
    return Status::ok();
  });
}

namespace {

/// Per row of logits [..., V/G]: the group's max and sum of exp(x - max), and the target's logit
/// (when `target` is given), each reduced over the group in double. The rows run on the kernel
/// threads with the whole-vocabulary kernels' arithmetic (cpu::crossEntropy): f32 logits through
/// the vectorised exp (VectorMath.h) shifted by the f32 max, the sum in double; other dtypes
/// through std::exp in double. With `exps` (f32 only: the gradient's output) each row's exps stay
/// there for the caller to scale, so the gradient computes them once, as cpu::crossEntropyGrad.
struct VocabStats {
  std::vector<double> max, sum, target;
};

template <typename T>
StatusOr<VocabStats> vocabStats(comm::Communicator &comm, std::span<const uint32_t> axes,
                                const TensorRef &logits, const TensorRef &labels,
                                std::optional<int64_t> ignoreIndex, bool withTarget,
                                int64_t start, T *exps = nullptr) {
  int64_t local = logits.shape.back(), count = labels.numElements();
  const T *all = logits.as<const T>();
  VocabStats s;
  s.max.assign(static_cast<size_t>(count), 0.0);
  detail::parallelFor(count, detail::grainFor(local), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      s.max[r] = cpu::vmath::contiguousRowMax(all + r * local, local);
  });
  RETURN_IF_ERROR(
      comm.allReduce(axes, s.max.data(), s.max.size(), DType::f64, comm::ReduceKind::max));
  // Sums and target logits travel in one all-reduce: [sum..., target...].
  std::vector<double> both(static_cast<size_t>(count) * (withTarget ? 2 : 1), 0.0);
  detail::parallelFor(count, detail::grainFor(4 * local), [&](int64_t begin, int64_t end) {
    std::vector<float> e(std::is_same_v<T, float> && !exps ? static_cast<size_t>(local) : 0);
    for (int64_t r = begin; r < end; ++r) {
      const T *row = all + r * local;
      if constexpr (std::is_same_v<T, float>)
        both[r] = cpu::vmath::expShiftSumF32(row, static_cast<float>(s.max[r]),
                                             exps ? exps + r * local : e.data(), local);
      else {
        double sum = 0.0;
        for (int64_t j = 0; j < local; ++j)
          sum += std::exp(static_cast<double>(row[j]) - s.max[r]);
        both[r] = sum;
      }
      int64_t label = loadIndex(labels, r);
      if (withTarget && !(ignoreIndex && label == *ignoreIndex) && label >= start &&
          label < start + local)
        both[count + r] = static_cast<double>(row[label - start]);
    }
  });
  RETURN_IF_ERROR(
      comm.allReduce(axes, both.data(), both.size(), DType::f64, comm::ReduceKind::sum));
  s.sum.assign(both.begin(), both.begin() + count);
  if (withTarget)
    s.target.assign(both.begin() + count, both.end());
  return s;
}

/// Runs `row(T(), r, label, stats)` for every row r of the logits (as T, a float dtype) after
/// vocabStats, the rows split over the kernel threads (`row` writes row r's outputs only).
template <typename Row>
Status forEachRow(const char *name, comm::Communicator &comm, std::span<const uint32_t> axes,
                  const TensorRef &logits, const TensorRef &labels,
                  std::optional<int64_t> ignoreIndex, bool withTarget, int64_t start, Row &&row,
                  const TensorRef *exps = nullptr) {
  return dispatchFloat(name, logits.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    T *expsOut = nullptr;
    if constexpr (std::is_same_v<T, float>)
      expsOut = exps ? exps->as<float>() : nullptr;
    ASSIGN_OR_RETURN(VocabStats s, vocabStats<T>(comm, axes, logits, labels, ignoreIndex,
                                                 withTarget, start, expsOut));
    int64_t local = logits.shape.back();
    detail::parallelFor(labels.numElements(), detail::grainFor(4 * local),
                        [&](int64_t begin, int64_t end) {
                          for (int64_t r = begin; r < end; ++r)
                            row(tag, r, loadIndex(labels, r), s);
                        });
    return Status::ok();
  });
}

/// Shapes and label range of a vocab-parallel cross-entropy; returns the shard's start.
StatusOr<int64_t> checkVocabLoss(const char *name, const comm::Communicator &comm,
                                 std::span<const uint32_t> axes, const TensorRef &logits,
                                 const TensorRef &labels, std::optional<int64_t> ignoreIndex) {
  RETURN_IF_ERROR(expectIndexDtype(name, "labels", labels));
  if (logits.shape.empty())
    return fail(name, "logits must have a class dim, not shape []");
  RETURN_IF_ERROR(
      detail::expectShape(name, "labels", labels, logits.shape.first(logits.shape.size() - 1)));
  auto [size, index] = groupOf(comm, axes);
  int64_t local = logits.shape.back(), vocab = local * static_cast<int64_t>(size);
  for (int64_t r = 0; r < labels.numElements(); ++r) {
    int64_t label = loadIndex(labels, r);
    if (!(ignoreIndex && label == *ignoreIndex) && (label < 0 || label >= vocab))
      return fail(name, "label " + std::to_string(label) + " (element " + std::to_string(r) +
                            " of the labels) is outside [0, " + std::to_string(vocab) + ")");
  }
  return index * local;
}

} // namespace

Status vocabCrossEntropy(comm::Communicator &comm, std::span<const uint32_t> axes,
                         const TensorRef &logits, const TensorRef &labels,
                         std::optional<int64_t> ignoreIndex, const TensorRef &out) {
  const char *name = "CrossEntropy";
  RETURN_IF_ERROR(detail::expectDtype(name, "output", out, logits.dtype));
  ASSIGN_OR_RETURN(int64_t start, checkVocabLoss(name, comm, axes, logits, labels, ignoreIndex));
  RETURN_IF_ERROR(detail::expectShape(name, "output", out, labels.shape));
  return forEachRow(name, comm, axes, logits, labels, ignoreIndex, true, start,
                    [&](auto tag, int64_t r, int64_t label, const VocabStats &s) {
                      using T = decltype(tag);
                      out.as<T>()[r] =
                          ignoreIndex && label == *ignoreIndex
                              ? T(0)
                              : static_cast<T>(s.max[r] + std::log(s.sum[r]) - s.target[r]);
                    });
}

Status vocabCrossEntropyGrad(comm::Communicator &comm, std::span<const uint32_t> axes,
                             const TensorRef &dloss, const TensorRef &logits,
                             const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                             const TensorRef &dlogits) {
  const char *name = "CrossEntropyGrad";
  ASSIGN_OR_RETURN(int64_t start, checkVocabLoss(name, comm, axes, logits, labels, ignoreIndex));
  RETURN_IF_ERROR(detail::expectDtype(name, "dloss", dloss, logits.dtype));
  RETURN_IF_ERROR(detail::expectShape(name, "dloss", dloss, labels.shape));
  RETURN_IF_ERROR(detail::expectDtype(name, "dlogits", dlogits, logits.dtype));
  RETURN_IF_ERROR(detail::expectShape(name, "dlogits", dlogits, logits.shape));
  int64_t local = logits.shape.back();
  return forEachRow(name, comm, axes, logits, labels, ignoreIndex, false, start,
                    [&](auto tag, int64_t r, int64_t label, const VocabStats &s) {
                      using T = decltype(tag);
                      T *out = dlogits.as<T>() + r * local;
                      if (ignoreIndex && label == *ignoreIndex) {
                        std::fill(out, out + local, T(0));
                        return;
                      }
                      const T *row = logits.as<const T>() + r * local;
                      double dl = static_cast<double>(dloss.as<const T>()[r]);
                      if constexpr (std::is_same_v<T, float>) {
                        // As cpu::crossEntropyGrad: the exps (vocabStats left them in the
                        // output), dl p_j in f32, the label's dl (p - 1) from its exp in double.
                        bool here = label >= start && label < start + local;
                        double labelExp = here ? static_cast<double>(out[label - start]) : 0.0;
                        cpu::vmath::scaleF32(out, static_cast<float>(dl / s.sum[r]), local);
                        if (here)
                          out[label - start] = static_cast<float>(dl * (labelExp / s.sum[r] - 1.0));
                        return;
                      }
                      for (int64_t j = 0; j < local; ++j) {
                        double p = std::exp(static_cast<double>(row[j]) - s.max[r]) / s.sum[r];
                        out[j] = static_cast<T>(dl * (p - (j + start == label ? 1.0 : 0.0)));
                      }
                    },
                    &dlogits);
}

} // namespace megac::runtime::commops
