// The bookkeeping that the CPU collectives (CommOps.cpp) and the device ones
// (runtime/cuda/DeviceCommOps.cu) share, written once: a group's size and this rank's index in
// it, a pipeline peer, the block layout of a tensor cut along one dim and the checks (and their
// messages) on the shapes a collective takes. Plain host C++; the one offset the device kernels
// compute too is MEGAC_HOST_DEVICE.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#if defined(__CUDACC__)
#define MEGAC_HOST_DEVICE __host__ __device__
#else
#define MEGAC_HOST_DEVICE
#endif

namespace megac::runtime::collective {

using cpu::TensorRef;

/// "AllGather: " + what: every collective's error starts with the op's name.
inline Status opError(const char *op, const std::string &what) {
  return Status::error(std::string(op) + ": " + what);
}

/// A tensor viewed as [outer, n, inner] around one dim, cut into `blocks` equal pieces of that
/// dim (n divides by blocks): piece g of outer row o is the pieceRowBytes() at
/// pieceOffset(o, g, blocks, pieceRowBytes()), and piece g in all is [outer, n / blocks, inner].
struct BlockLayout {
  size_t outer = 1, n = 1, inner = 1, elementSize = 1, blocks = 1;

  static BlockLayout of(std::span<const int64_t> shape, int64_t dim, size_t blocks, DType dtype) {
    BlockLayout b;
    for (int64_t d = 0; d < dim; ++d)
      b.outer *= static_cast<size_t>(shape[d]);
    b.n = static_cast<size_t>(shape[dim]);
    for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
      b.inner *= static_cast<size_t>(shape[d]);
    b.elementSize = dtypeSize(dtype);
    b.blocks = blocks;
    return b;
  }
  size_t pieceRowBytes() const { return n / blocks * inner * elementSize; }
  /// Where piece g of outer row o starts in the whole tensor, in units of which a piece row
  /// holds `row` (bytes on the host; the device moves wider units).
  template <typename I> MEGAC_HOST_DEVICE static I pieceOffset(I o, I g, I blocks, I row) {
    return (o * blocks + g) * row;
  }
  size_t pieceOffset(size_t o, size_t g) const {
    return pieceOffset<size_t>(o, g, blocks, pieceRowBytes());
  }
};

/// The group's size and this rank's index in it.
inline std::pair<size_t, int64_t> groupOf(const comm::Mesh &mesh, int64_t rank,
                                          std::span<const uint32_t> axes) {
  return {mesh.groupOf(rank, axes).size(), mesh.indexInGroup(rank, axes)};
}

/// The peer of `rank`: its coordinates with coordinate `axis` moved by `shift`.
inline StatusOr<int> peerOf(const comm::Mesh &mesh, int64_t rank, uint32_t axis, int64_t shift) {
  std::vector<int64_t> coords = mesh.coordsOf(rank);
  if (axis >= coords.size())
    return Status::error("mesh axis " + std::to_string(axis) + " does not exist");
  coords[axis] += shift;
  if (coords[axis] < 0 || coords[axis] >= mesh.axisSizes[axis])
    return Status::error("rank " + std::to_string(rank) + " has no peer " + std::to_string(shift) +
                         " along mesh axis " + std::to_string(axis) + " (size " +
                         std::to_string(mesh.axisSizes[axis]) + ")");
  return static_cast<int>(mesh.rankOf(coords));
}

inline Status expectSameDtype(const char *op, const TensorRef &x, const TensorRef &out) {
  if (x.dtype != out.dtype)
    return opError(op, std::string("the output is ") + dtypeName(out.dtype) + ", the input " +
                           dtypeName(x.dtype));
  return Status::ok();
}

inline Status expectIndexDtype(const char *op, const char *what, const TensorRef &t) {
  if (t.dtype != DType::i64 && t.dtype != DType::i32)
    return opError(op, std::string(what) + " must be i64 or i32, not " + dtypeName(t.dtype));
  return Status::ok();
}

/// Checks that `big`'s dim `dim` is the group size times `small`'s and the other dims agree.
inline Status expectSplit(const char *op, const TensorRef &big, const TensorRef &small, int64_t dim,
                          size_t groupSize, const char *bigName, const char *smallName) {
  bool ok = big.shape.size() == small.shape.size() && dim >= 0 &&
            dim < static_cast<int64_t>(big.shape.size());
  for (size_t d = 0; ok && d < big.shape.size(); ++d)
    ok = static_cast<int64_t>(d) == dim
             ? big.shape[d] == small.shape[d] * static_cast<int64_t>(groupSize)
             : big.shape[d] == small.shape[d];
  if (!ok)
    return opError(op, std::string("the ") + bigName + " " + shapeString(big.shape) +
                           " is not the " + smallName + " " + shapeString(small.shape) +
                           " with dim " + std::to_string(dim) + " times the group's " +
                           std::to_string(groupSize) + " ranks");
  return Status::ok();
}

/// AllToAll's shapes: x's `dim` divides over the group and out is x with that dim divided and
/// `concatDim` multiplied by the group size.
inline Status expectAllToAll(const char *op, const TensorRef &x, const TensorRef &out, int64_t dim,
                             int64_t concatDim, size_t groupSize) {
  int64_t rank = static_cast<int64_t>(x.shape.size()), size = static_cast<int64_t>(groupSize);
  if (dim < 0 || dim >= rank || concatDim < 0 || concatDim >= rank)
    return opError(op, "dims " + std::to_string(dim) + " and " + std::to_string(concatDim) +
                           " must be in [0, " + std::to_string(rank) + ")");
  std::vector<int64_t> want(x.shape.begin(), x.shape.end());
  if (want[dim] % size != 0)
    return opError(op, "dim " + std::to_string(dim) + " of " + shapeString(x.shape) +
                           " does not divide over " + std::to_string(size) + " ranks");
  want[dim] /= size;
  want[concatDim] *= size;
  if (want.size() != out.shape.size() || !std::equal(want.begin(), want.end(), out.shape.begin()))
    return opError(op,
                   "the output is " + shapeString(out.shape) + ", expected " + shapeString(want));
  return Status::ok();
}

/// This rank's vocab shard of a table [V/G, h]: rows [start, start + local) of the vocabulary's
/// `vocab` rows.
struct VocabShard {
  int64_t local = 0, hidden = 0, start = 0, vocab = 0;
};

/// The shard of vocab-parallel Embedding (tableName "the table") or EmbeddingGrad ("dtable")
/// after the checks in order: ids' dtype, the caller's `dtypeCheck`, the table's rank.
inline StatusOr<VocabShard> vocabShard(const char *op, const char *tableName,
                                       const comm::Mesh &mesh, int64_t rank,
                                       std::span<const uint32_t> axes, const TensorRef &table,
                                       const TensorRef &ids, Status dtypeCheck) {
  RETURN_IF_ERROR(expectIndexDtype(op, "ids", ids));
  RETURN_IF_ERROR(dtypeCheck);
  if (table.shape.size() != 2)
    return opError(op, std::string(tableName) + " must be [V, h], not " + shapeString(table.shape));
  auto [size, index] = groupOf(mesh, rank, axes);
  VocabShard s;
  s.local = table.shape[0];
  s.hidden = table.shape[1];
  s.start = index * s.local;
  s.vocab = s.local * static_cast<int64_t>(size);
  return s;
}

} // namespace megac::runtime::collective
