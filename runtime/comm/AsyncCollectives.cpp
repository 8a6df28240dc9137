// Communicator's default asynchronous collectives (the blocking operation run at start into a
// private buffer), its default asynchronous receive (the blocking one run at wait) and the
// emulated link's alpha-beta times (Communicator.h).
#include "runtime/comm/Communicator.h"

#include <cstring>
#include <vector>

namespace megac::runtime::comm {

namespace {

/// A collective already complete: wait() copies its result out.
class ReadyHandle final : public CommHandle {
public:
  ReadyHandle(std::vector<uint8_t> result, void *out) : result_(std::move(result)), out_(out) {}
  Status wait() override {
    if (!result_.empty())
      std::memcpy(out_, result_.data(), result_.size());
    result_.clear();
    return Status::ok();
  }

private:
  std::vector<uint8_t> result_;
  void *out_;
};

/// A receive not yet posted: wait() runs the blocking one.
class DeferredRecv final : public CommHandle {
public:
  DeferredRecv(Communicator &comm, int peer, int tag, void *data, size_t bytes)
      : comm_(comm), peer_(peer), tag_(tag), data_(data), bytes_(bytes) {}
  Status wait() override { return comm_.recv(peer_, tag_, data_, bytes_); }

private:
  Communicator &comm_;
  int peer_, tag_;
  void *data_;
  size_t bytes_;
};

size_t groupSize(const Communicator &comm, std::span<const uint32_t> axes) {
  return comm.mesh().groupOf(comm.rank(), axes).size();
}

} // namespace

double LinkEmulation::emulatedSeconds(bool allReduce, size_t group, size_t bytes) const {
  if (!enabled() || group <= 1)
    return 0;
  double g = static_cast<double>(group), n = static_cast<double>(bytes);
  double steps = allReduce ? 2 * (g - 1) : g - 1;
  double wire = allReduce ? 2 * (g - 1) / g * n : (g - 1) * n;
  return steps * latencySeconds + wire / bytesPerSecond;
}

double LinkEmulation::transferSeconds(size_t bytes) const {
  if (!enabled())
    return 0;
  return latencySeconds + static_cast<double>(bytes) / bytesPerSecond;
}

StatusOr<std::unique_ptr<CommHandle>> Communicator::startRecv(int peer, int tag, void *data,
                                                              size_t bytes) {
  return std::unique_ptr<CommHandle>(new DeferredRecv(*this, peer, tag, data, bytes));
}

StatusOr<std::unique_ptr<CommHandle>> Communicator::startAllReduce(std::span<const uint32_t> axes,
                                                                   const void *in, void *out,
                                                                   size_t count, DType dtype,
                                                                   ReduceKind kind) {
  const auto *bytes = static_cast<const uint8_t *>(in);
  std::vector<uint8_t> result(bytes, bytes + count * dtypeSize(dtype));
  RETURN_IF_ERROR(allReduce(axes, result.data(), count, dtype, kind));
  return std::unique_ptr<CommHandle>(new ReadyHandle(std::move(result), out));
}

StatusOr<std::unique_ptr<CommHandle>> Communicator::startAllGather(std::span<const uint32_t> axes,
                                                                   const void *in, void *out,
                                                                   size_t bytesPerRank) {
  std::vector<uint8_t> result(bytesPerRank * groupSize(*this, axes));
  RETURN_IF_ERROR(allGather(axes, in, result.data(), bytesPerRank));
  return std::unique_ptr<CommHandle>(new ReadyHandle(std::move(result), out));
}

StatusOr<std::unique_ptr<CommHandle>>
Communicator::startReduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                                 size_t countPerRank, DType dtype, ReduceKind kind) {
  std::vector<uint8_t> result(countPerRank * dtypeSize(dtype));
  RETURN_IF_ERROR(reduceScatter(axes, in, result.data(), countPerRank, dtype, kind));
  return std::unique_ptr<CommHandle>(new ReadyHandle(std::move(result), out));
}

} // namespace megac::runtime::comm
