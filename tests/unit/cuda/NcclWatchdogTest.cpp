// NCCL's watchdog on a device (runtime/cuda/NcclCommunicator.h, Timeouts): a world of two ranks
// whose rank 1 never joins. Rank 0's part of the collective that creates the world
// (ncclCommInitRankConfig, non-blocking) must fail within --comm-timeout with an error naming
// the rank, the operation and the group, after ncclCommAbort, instead of hanging. One GPU is
// enough: the withheld rank never touches a device. (A withheld all-reduce between two live
// ranks needs two GPUs, as NCCL refuses two ranks on one device.)
#include "runtime/cuda/NcclCommunicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;

namespace {

/// Rank 0 of a two-rank mesh whose only call is the all-gather of the NCCL id: rank 1's block
/// is a copy of rank 0's, as if it had joined the bootstrap (it never joins NCCL).
class WithheldPeerHost final : public comm::Communicator {
public:
  WithheldPeerHost() : mesh_{{"dp"}, {2}} {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const comm::Mesh &mesh() const override { return mesh_; }
  Status allGather(std::span<const uint32_t>, const void *in, void *out,
                   size_t bytesPerRank) override {
    std::memcpy(out, in, bytesPerRank);
    std::memcpy(static_cast<char *>(out) + bytesPerRank, in, bytesPerRank);
    return Status::ok();
  }
  Status allReduce(std::span<const uint32_t>, void *, size_t, DType, comm::ReduceKind) override {
    return Status::error("unused");
  }
  Status reduceScatter(std::span<const uint32_t>, const void *, void *, size_t, DType,
                       comm::ReduceKind) override {
    return Status::error("unused");
  }
  Status allToAll(std::span<const uint32_t>, const void *, void *, size_t) override {
    return Status::error("unused");
  }
  Status send(int, int, const void *, size_t) override { return Status::error("unused"); }
  Status recv(int, int, void *, size_t) override { return Status::error("unused"); }
  Status flushSends() override { return Status::ok(); }
  Status barrier() override { return Status::ok(); }

private:
  comm::Mesh mesh_;
};

TEST(NcclWatchdog, WithheldRankFailsTheOthersWithinTheTimeout) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  WithheldPeerHost host;
  auto start = std::chrono::steady_clock::now();
  auto nccl = NcclCommunicator::create(host.mesh(), 0, &host, stream, std::chrono::seconds(3));
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(nccl.isOk()) << "rank 0 joined a world whose rank 1 never came";
  const std::string &m = nccl.status().message();
  EXPECT_NE(m.find("rank 0: NCCL ncclCommInitRankConfig of the world (2 ranks) did not complete "
                   "within 3 s (a peer did not make the matching call)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("were aborted"), std::string::npos) << m;
  EXPECT_GE(waited, 3.0);
  EXPECT_LT(waited, 60.0) << "the abort itself hung";
  std::printf("withheld rank: rank 0 failed after %.1f s: %s\n", waited, m.c_str());
  cudaStreamDestroy(stream);
}

} // namespace
