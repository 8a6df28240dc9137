// The mesh's rank arithmetic (row-major coordinates, groups over axes) and the one-rank
// communicator.
#include "runtime/comm/Communicator.h"

#include <cstring>
#include <deque>
#include <map>

namespace megac::runtime::comm {

int64_t Mesh::size() const {
  int64_t n = 1;
  for (int64_t s : axisSizes)
    n *= s;
  return n;
}

std::vector<int64_t> Mesh::coordsOf(int64_t rank) const {
  std::vector<int64_t> coords(axisSizes.size());
  for (size_t a = axisSizes.size(); a-- > 0;) {
    coords[a] = rank % axisSizes[a];
    rank /= axisSizes[a];
  }
  return coords;
}

int64_t Mesh::rankOf(std::span<const int64_t> coords) const {
  int64_t rank = 0;
  for (size_t a = 0; a < axisSizes.size(); ++a)
    rank = rank * axisSizes[a] + (a < coords.size() ? coords[a] : 0);
  return rank;
}

std::vector<int64_t> Mesh::groupOf(int64_t rank, std::span<const uint32_t> axes) const {
  std::vector<int64_t> coords = coordsOf(rank);
  int64_t count = 1;
  for (uint32_t a : axes)
    count *= axisSizes[a];
  std::vector<int64_t> members;
  members.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    // Member i: the row-major index i unpacked over `axes` (the last axis fastest).
    int64_t rest = i;
    for (size_t k = axes.size(); k-- > 0;) {
      coords[axes[k]] = rest % axisSizes[axes[k]];
      rest /= axisSizes[axes[k]];
    }
    members.push_back(rankOf(coords));
  }
  return members;
}

int64_t Mesh::indexInGroup(int64_t rank, std::span<const uint32_t> axes) const {
  std::vector<int64_t> coords = coordsOf(rank);
  int64_t index = 0;
  for (uint32_t a : axes)
    index = index * axisSizes[a] + coords[a];
  return index;
}

std::string Mesh::describeGroup(int64_t rank, std::span<const uint32_t> axes) const {
  std::string text = "[";
  for (size_t k = 0; k < axes.size(); ++k) {
    uint32_t a = axes[k];
    text += (k ? ", " : "") + (a < axisNames.size() ? axisNames[a] : "axis " + std::to_string(a));
  }
  text += "] (ranks ";
  std::vector<int64_t> members = groupOf(rank, axes);
  for (size_t i = 0; i < members.size(); ++i)
    text += (i ? ", " : "") + std::to_string(members[i]);
  return text + ")";
}

namespace {

/// A job of one rank (or one rank's view of a larger mesh, for tests and tools): collectives
/// over groups of one are copies; larger groups are an error; a send to itself is queued for
/// its own recv.
class SelfCommunicator final : public Communicator {
public:
  SelfCommunicator(Mesh mesh, int rank) : mesh_(std::move(mesh)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return 1; }
  const Mesh &mesh() const override { return mesh_; }

  Status allReduce(std::span<const uint32_t> axes, void *, size_t, DType, ReduceKind) override {
    return single(axes, "all_reduce");
  }
  Status allGather(std::span<const uint32_t> axes, const void *in, void *out,
                   size_t bytesPerRank) override {
    RETURN_IF_ERROR(single(axes, "all_gather"));
    copy(out, in, bytesPerRank);
    return Status::ok();
  }
  Status reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                       size_t countPerRank, DType dtype, ReduceKind) override {
    RETURN_IF_ERROR(single(axes, "reduce_scatter"));
    copy(out, in, countPerRank * dtypeSize(dtype));
    return Status::ok();
  }
  Status allToAll(std::span<const uint32_t> axes, const void *in, void *out,
                  size_t bytesPerRank) override {
    RETURN_IF_ERROR(single(axes, "all_to_all"));
    copy(out, in, bytesPerRank);
    return Status::ok();
  }
  Status allToAllV(std::span<const uint32_t> axes, const void *in,
                   std::span<const size_t> sendBytes, void *out,
                   std::span<const size_t> recvBytes) override {
    RETURN_IF_ERROR(single(axes, "all_to_all_v"));
    if (sendBytes.size() != 1 || recvBytes.size() != 1 || sendBytes[0] != recvBytes[0])
      return Status::error("rank " + std::to_string(rank_) +
                           ": all_to_all_v over one rank sends and receives one block");
    copy(out, in, sendBytes[0]);
    return Status::ok();
  }
  Status send(int peer, int tag, const void *data, size_t bytes) override {
    if (peer != rank_)
      return Status::error("rank " + std::to_string(rank_) + ": send to rank " +
                           std::to_string(peer) + " in a one-rank job (no MPI communicator)");
    const auto *p = static_cast<const uint8_t *>(data);
    loopback_[tag].emplace_back(p, p + bytes);
    return Status::ok();
  }
  Status recv(int peer, int tag, void *data, size_t bytes) override {
    std::string what = "rank " + std::to_string(rank_) + ": recv from rank " +
                       std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
    if (peer != rank_)
      return Status::error(what + " in a one-rank job (no MPI communicator)");
    auto it = loopback_.find(tag);
    if (it == loopback_.end() || it->second.empty())
      return Status::error(what + ": no message was sent");
    if (it->second.front().size() != bytes)
      return Status::error(what + ": the message has " + std::to_string(it->second.front().size()) +
                           " bytes, expected " + std::to_string(bytes));
    copy(data, it->second.front().data(), bytes);
    it->second.pop_front();
    return Status::ok();
  }
  Status flushSends() override { return Status::ok(); }
  Status barrier() override { return Status::ok(); }

private:
  static void copy(void *dst, const void *src, size_t n) {
    if (n && dst != src)
      std::memmove(dst, src, n);
  }
  Status single(std::span<const uint32_t> axes, const char *op) const {
    for (uint32_t a : axes)
      if (a >= mesh_.axisSizes.size())
        return Status::error("rank " + std::to_string(rank_) + ": " + op + " over mesh axis " +
                             std::to_string(a) + ", but the mesh has " +
                             std::to_string(mesh_.axisSizes.size()) + " axes");
    if (mesh_.groupOf(rank_, axes).size() != 1)
      return Status::error("rank " + std::to_string(rank_) + ": " + op + " over " +
                           mesh_.describeGroup(rank_, axes) +
                           " needs a multi-rank communicator (run under mpirun)");
    return Status::ok();
  }

  Mesh mesh_;
  int rank_;
  std::map<int, std::deque<std::vector<uint8_t>>> loopback_;
};

} // namespace

std::unique_ptr<Communicator> makeSelfCommunicator(Mesh mesh) {
  return std::make_unique<SelfCommunicator>(std::move(mesh), 0);
}

std::unique_ptr<Communicator> makeSelfCommunicator(Mesh mesh, int rank) {
  return std::make_unique<SelfCommunicator>(std::move(mesh), rank);
}

} // namespace megac::runtime::comm
