// NcclCommunicator's logic on the CPU, against a fake NCCL (FakeNccl.h): several ranks in one
// process, one thread and one communicator each. Groups and staged sends (a recv groups only the
// sends to its own peer, so it never waits on a send to another rank: the pipeline case below
// deadlocked before), collectives over the world and over split groups, the mapping of NCCL
// errors to Status messages, and the watchdog (an asynchronous error aborts the rank's
// communicators; a peer that never joins fails within the timeout). No GPU, CUDA driver or
// libnccl is needed.
#include "FakeNccl.h"
#include "FakeRanks.h"
#include "runtime/cuda/NcclCommunicator.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <thread>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using megac::runtime::cuda::fake::FakeNccl;
using megac::runtime::cuda::fake::FakeNcclWorld;

// The real binding (runtime/cuda/NcclApi.cpp) is not linked: every communicator here gets a
// fake, and one that fell back to the real calls stops the test.
NcclApi &NcclApi::real() {
  ADD_FAILURE() << "NcclCommunicator used the real NCCL in a fake test";
  std::abort();
}

namespace {

using fake::FakeRanks;
using fake::filled;
using fake::HostStub;
using fake::IdExchange;
using fake::meshOf;

Status sendFloats(NcclCommunicator &c, int peer, const std::vector<float> &v) {
  return c.send(peer, 0, v.data(), v.size() * sizeof(float));
}
Status recvFloats(NcclCommunicator &c, int peer, std::vector<float> &v) {
  return c.recv(peer, 0, v.data(), v.size() * sizeof(float));
}

// The pipeline case: rank 0 stages a send to rank 2, then receives from rank 1; rank 2 stages a
// send to rank 0, then receives from rank 1; rank 1 sends to both. Only then does each of 0 and 2
// receive from the other. A recv that also waits on the staged sends to other peers deadlocks
// here (0 waits for 2 to receive, 2 waits for 0 to receive); with buffered sends (as
// comm::Communicator's) it completes.
TEST(NcclFake, RecvDoesNotWaitOnSendsToOtherPeers) {
  FakeRanks ranks(meshOf({3}));
  std::vector<std::vector<float>> got(3);
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    std::vector<float> a = filled(4, 10.0f + r), b = filled(4, 20.0f + r), x(4), y(4);
    if (r == 0 || r == 2) {
      int other = 2 - r;
      RETURN_IF_ERROR(sendFloats(c, other, a));
      RETURN_IF_ERROR(recvFloats(c, 1, x));
      RETURN_IF_ERROR(recvFloats(c, other, y));
      got[r] = {x[0], y[0]};
    } else {
      RETURN_IF_ERROR(sendFloats(c, 0, a));
      RETURN_IF_ERROR(sendFloats(c, 2, b));
      RETURN_IF_ERROR(c.flushSends());
    }
    return c.synchronize();
  });
  EXPECT_ALL_OK(status);
  EXPECT_FALSE(ranks.world.deadlocked()) << ranks.world.deadlockReport();
  EXPECT_EQ(got[0], (std::vector<float>{11.0f, 12.0f}));
  EXPECT_EQ(got[2], (std::vector<float>{21.0f, 10.0f}));
}

// A recv carries the staged sends to its own peer (crossing transfers progress together), in
// issue order; those to other peers wait for a flush point.
TEST(NcclFake, RecvGroupsOnlyItsPeersSendsInOrder) {
  FakeRanks ranks(meshOf({3}));
  std::vector<float> at1First(2), at1Second(2), at2(2), at0(2);
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    if (r == 0) {
      RETURN_IF_ERROR(sendFloats(c, 1, filled(2, 1.0f)));
      RETURN_IF_ERROR(sendFloats(c, 2, filled(2, 2.0f)));
      RETURN_IF_ERROR(sendFloats(c, 1, filled(2, 3.0f)));
      RETURN_IF_ERROR(recvFloats(c, 1, at0));
      RETURN_IF_ERROR(c.flushSends());
    } else if (r == 1) {
      RETURN_IF_ERROR(sendFloats(c, 0, filled(2, 4.0f)));
      RETURN_IF_ERROR(recvFloats(c, 0, at1First));
      RETURN_IF_ERROR(recvFloats(c, 0, at1Second));
    } else {
      RETURN_IF_ERROR(recvFloats(c, 0, at2));
    }
    return c.synchronize();
  });
  EXPECT_ALL_OK(status);
  EXPECT_EQ(at0, filled(2, 4.0f));
  EXPECT_EQ(at1First, filled(2, 1.0f));
  EXPECT_EQ(at1Second, filled(2, 3.0f));
  EXPECT_EQ(at2, filled(2, 2.0f));
  EXPECT_EQ(ranks.world.kernels(0), (std::vector<std::string>{"send>1 send>1 recv<1", "send>2"}));
  EXPECT_EQ(ranks.world.kernels(1), (std::vector<std::string>{"send>0 recv<0", "recv<0"}));
}

// Crossing sends between two ranks (both send, then both receive) complete: the recv carries the
// send to its peer in one group.
TEST(NcclFake, CrossingSendsAndCollectives) {
  FakeRanks ranks(meshOf({2}));
  std::vector<std::vector<float>> got(2), sums(2), maxes(2), gathered(2), scattered(2);
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    std::vector<float> mine = filled(3, 1.0f + r), theirs(3);
    RETURN_IF_ERROR(sendFloats(c, 1 - r, mine));
    RETURN_IF_ERROR(recvFloats(c, 1 - r, theirs));
    got[r] = theirs;
    std::vector<uint32_t> all = {0};
    std::vector<float> v = {float(r), float(10 * r), 5.0f, -1.0f};
    sums[r].resize(4);
    RETURN_IF_ERROR(
        c.allReduce(all, v.data(), sums[r].data(), 4, DType::f32, comm::ReduceKind::sum));
    maxes[r] = v;
    RETURN_IF_ERROR(
        c.allReduce(all, maxes[r].data(), maxes[r].data(), 4, DType::f32, comm::ReduceKind::max));
    gathered[r].resize(4);
    RETURN_IF_ERROR(c.allGather(all, v.data(), gathered[r].data(), 2 * sizeof(float)));
    scattered[r].resize(2);
    RETURN_IF_ERROR(
        c.reduceScatter(all, v.data(), scattered[r].data(), 2, DType::f32, comm::ReduceKind::sum));
    return c.synchronize();
  });
  EXPECT_ALL_OK(status);
  EXPECT_EQ(got[0], filled(3, 2.0f));
  EXPECT_EQ(got[1], filled(3, 1.0f));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sums[r], (std::vector<float>{1.0f, 10.0f, 10.0f, -2.0f}));
    EXPECT_EQ(maxes[r], (std::vector<float>{1.0f, 10.0f, 5.0f, -1.0f}));
    EXPECT_EQ(gathered[r], (std::vector<float>{0.0f, 0.0f, 1.0f, 10.0f}));
  }
  EXPECT_EQ(scattered[0], (std::vector<float>{1.0f, 10.0f}));
  EXPECT_EQ(scattered[1], (std::vector<float>{10.0f, -2.0f}));
  EXPECT_EQ(ranks.world.kernels(0)[0], "send>1 recv<1");
}

// A group over one axis of a 2x2 mesh is split from the world (collectively) and reduces only
// within the group.
TEST(NcclFake, SplitGroups) {
  FakeRanks ranks(meshOf({2, 2}));
  std::vector<float> got(4);
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    RETURN_IF_ERROR(c.prepare({{1}, {0}}));
    float v = float(r);
    std::vector<uint32_t> axis = {1};
    RETURN_IF_ERROR(c.allReduce(axis, &v, &got[r], 1, DType::f32, comm::ReduceKind::sum));
    return c.synchronize();
  });
  EXPECT_ALL_OK(status);
  EXPECT_EQ(got, (std::vector<float>{1.0f, 1.0f, 5.0f, 5.0f}));
}

// An NCCL call's error becomes the Status message: the rank, the call, the group, NCCL's string
// and its last error. The peer left waiting fails as a deadlock, not a hang.
TEST(NcclFake, CallErrorNamesRankCallAndLastError) {
  FakeRanks ranks(meshOf({2}));
  ranks.world.failNext(0, "allReduce", ncclInvalidArgument, "count mismatch");
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    float v = 1.0f;
    std::vector<uint32_t> all = {0};
    return c.allReduce(all, &v, &v, 1, DType::f32, comm::ReduceKind::sum);
  });
  ASSERT_FALSE(status[0].isOk());
  EXPECT_NE(status[0].message().find("rank 0: NCCL ncclAllReduce over"), std::string::npos)
      << status[0].message();
  EXPECT_NE(status[0].message().find("invalid argument"), std::string::npos) << status[0].message();
  EXPECT_NE(status[0].message().find("(count mismatch)"), std::string::npos) << status[0].message();
  ASSERT_FALSE(status[1].isOk());
  EXPECT_NE(status[1].message().find("deadlock"), std::string::npos) << status[1].message();
}

// An asynchronous error while a call is in flight: the watchdog aborts every communicator of the
// rank, the error names the operation, and later calls fail at once.
TEST(NcclFake, AsyncErrorAbortsTheRank) {
  FakeRanks ranks(meshOf({2}));
  std::string later;
  bool aborted = false;
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    std::vector<float> v(2);
    if (r == 1)
      return recvFloats(c, 0, v); // never sent: fails once rank 0 has gone
    ranks.world.asyncError(0, ncclRemoteError, "peer 1 vanished");
    Status s = recvFloats(c, 1, v);
    aborted = c.aborted();
    later = sendFloats(c, 1, v).message();
    return s;
  });
  ASSERT_FALSE(status[0].isOk());
  EXPECT_NE(status[0].message().find("rank 0: NCCL ncclRecv from rank 1 failed: remote process "
                                     "exited or there was a network error (peer 1 vanished)"),
            std::string::npos)
      << status[0].message();
  EXPECT_NE(status[0].message().find("were aborted"), std::string::npos) << status[0].message();
  EXPECT_TRUE(aborted);
  EXPECT_GT(ranks.world.aborts(0), 0);
  EXPECT_NE(later.find("an earlier failure or timeout"), std::string::npos) << later;
  EXPECT_FALSE(status[1].isOk());
}

// A peer that never joins (it is alive, so no deadlock is reported): the creation fails within
// the timeout, naming the rank and the call.
TEST(NcclFake, PeerThatNeverJoinsTimesOut) {
  comm::Mesh mesh = meshOf({2});
  FakeNcclWorld world(2);
  FakeNccl api(world, 0);
  IdExchange ids;
  HostStub host(mesh, 0, ids);
  auto start = std::chrono::steady_clock::now();
  auto c =
      NcclCommunicator::create(mesh, 0, &host, api.computeStream(), std::chrono::seconds(1), &api);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find(
                "rank 0: NCCL ncclCommInitRankConfig of the world (2 ranks) did not complete "
                "within 1 s"),
            std::string::npos)
      << c.status().message();
  EXPECT_LT(seconds, 10.0);
  EXPECT_GT(world.aborts(0), 0);
}

} // namespace
