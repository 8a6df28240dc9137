// A test communicator that knows its mesh and rank and fails every collective and transfer, for
// fakes that implement only the few calls the code under test makes (they override those).
#pragma once

#include "runtime/comm/Communicator.h"

#include <string>
#include <utility>

namespace megac::runtime::test {

class StubCommunicator : public comm::Communicator {
public:
  /// `who` names the fake in the errors of the calls it does not implement.
  StubCommunicator(comm::Mesh mesh, int rank, std::string who)
      : mesh_(std::move(mesh)), rank_(rank), who_(std::move(who)) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(mesh_.size()); }
  const comm::Mesh &mesh() const override { return mesh_; }
  Status allReduce(std::span<const uint32_t>, void *, size_t, DType, comm::ReduceKind) override {
    return unused("allReduce");
  }
  Status allGather(std::span<const uint32_t>, const void *, void *, size_t) override {
    return unused("allGather");
  }
  Status reduceScatter(std::span<const uint32_t>, const void *, void *, size_t, DType,
                       comm::ReduceKind) override {
    return unused("reduceScatter");
  }
  Status allToAll(std::span<const uint32_t>, const void *, void *, size_t) override {
    return unused("allToAll");
  }
  Status allToAllV(std::span<const uint32_t>, const void *, std::span<const size_t>, void *,
                   std::span<const size_t>) override {
    return unused("allToAllV");
  }
  Status send(int, int, const void *, size_t) override { return unused("send"); }
  Status recv(int, int, void *, size_t) override { return unused("recv"); }
  Status flushSends() override { return unused("flushSends"); }
  Status barrier() override { return unused("barrier"); }

private:
  Status unused(const char *call) const {
    return Status::error(who_ + ": " + call + " is not implemented by this fake");
  }
  comm::Mesh mesh_;
  int rank_;
  std::string who_;
};

} // namespace megac::runtime::test
