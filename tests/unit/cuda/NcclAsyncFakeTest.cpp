// NcclCommunicator's asynchronous operations and its all-to-all-v on the CPU, against the fake
// NCCL (FakeNccl.h): the order of calls on the compute and communication streams (a start waits
// for the compute work on the communication stream and returns; a finish makes the compute
// stream wait, never the host), a start that returns before its peer has posted, several
// collectives in flight finished in any order, receives posted ahead (from a peer and, device to
// device, from itself), the watchdog naming an in-flight collective that never completes, an
// asynchronous error surfacing at the next finish, and the all-to-all-v's count exchange.
#include "FakeNccl.h"
#include "FakeRanks.h"
#include "runtime/cuda/NcclCommunicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using megac::runtime::cuda::fake::FakeRanks;
using megac::runtime::cuda::fake::filled;
using megac::runtime::cuda::fake::meshOf;

namespace {

const std::vector<uint32_t> kAll = {0};

/// One rank tells the others that it got somewhere.
class Signal {
public:
  void set() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return set_; });
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// A start: the communication stream waits for the compute work, the all-reduce is enqueued on
// it, an event is recorded after it, and nothing waits on the compute stream or the host. The
// finish adds exactly one wait of the compute stream on the communication stream.
TEST(NcclAsyncFake, StartAndFinishOrderStreamsWithEventsOnly) {
  FakeRanks ranks(meshOf({2}));
  std::vector<std::vector<std::string>> started(2), finished(2);
  std::vector<std::vector<float>> out(2);
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    std::vector<float> in = {float(r + 1), 10.0f};
    out[r].assign(2, -1.0f);
    ranks.apis[r]->clearCalls();
    RETURN_IF_ERROR(
        c.startAllReduce(3, kAll, in.data(), out[r].data(), 2, DType::f32, comm::ReduceKind::sum));
    started[r] = ranks.apis[r]->calls();
    ranks.apis[r]->clearCalls();
    RETURN_IF_ERROR(c.finish(3));
    finished[r] = ranks.apis[r]->calls();
    return c.drain();
  });
  EXPECT_ALL_OK(status);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(started[r], (std::vector<std::string>{"record@compute", "comm waits compute",
                                                    "allReduce@comm", "record@comm"}))
        << "rank " << r;
    EXPECT_EQ(finished[r], (std::vector<std::string>{"compute waits comm"})) << "rank " << r;
    EXPECT_EQ(out[r], (std::vector<float>{3.0f, 20.0f}));
  }
}

// Rank 1 posts its all-reduce only after rank 0's start has returned: a start that waited for
// its collective would time out here. Rank 0's output is unwritten when its start returns.
TEST(NcclAsyncFake, StartReturnsBeforeThePeerPosts) {
  FakeRanks ranks(meshOf({2}));
  Signal rank0Started;
  std::vector<float> atReturn;
  std::vector<std::vector<float>> out(2, std::vector<float>(1, -1.0f));
  auto status = ranks.run(
      [&](int r, NcclCommunicator &c) -> Status {
        float in = float(r + 1);
        if (r == 1)
          rank0Started.wait();
        Status s =
            c.startAllReduce(0, kAll, &in, out[r].data(), 1, DType::f32, comm::ReduceKind::sum);
        if (r == 0) {
          atReturn = out[0];
          rank0Started.set(); // also on failure: rank 1 must not wait forever
        }
        RETURN_IF_ERROR(s);
        RETURN_IF_ERROR(c.finish(0));
        return c.drain();
      },
      std::chrono::seconds(2));
  EXPECT_ALL_OK(status);
  EXPECT_EQ(atReturn, (std::vector<float>{-1.0f}));
  EXPECT_EQ(out[0], (std::vector<float>{3.0f}));
  EXPECT_EQ(out[1], (std::vector<float>{3.0f}));
}

// An all-gather and a reduce-scatter in flight together, finished in the reverse order of their
// starts, on a split group (axis 1 of a 2x2 mesh); the all-gather in place (this rank's block
// already at its index in the output, as DeviceCommOps starts it).
TEST(NcclAsyncFake, SeveralInFlightFinishedInAnyOrder) {
  FakeRanks ranks(meshOf({2, 2}));
  std::vector<std::vector<float>> gathered(4), scattered(4);
  std::vector<size_t> inFlightAfterStarts(4);
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    RETURN_IF_ERROR(c.prepare({{1}}));
    std::vector<uint32_t> axis = {1};
    int index = r % 2; // the group index on axis 1
    gathered[r].assign(4, 0.0f);
    gathered[r][2 * index] = float(r);
    gathered[r][2 * index + 1] = float(10 * r);
    std::vector<float> v = {float(r), 1.0f, 2.0f, float(-r)};
    scattered[r].assign(2, 0.0f);
    RETURN_IF_ERROR(c.startAllGather(1, axis, gathered[r].data() + 2 * index, gathered[r].data(),
                                     2 * sizeof(float)));
    RETURN_IF_ERROR(c.startReduceScatter(2, axis, v.data(), scattered[r].data(), 2, DType::f32,
                                         comm::ReduceKind::sum));
    inFlightAfterStarts[r] = c.inFlight();
    RETURN_IF_ERROR(c.finish(2));
    RETURN_IF_ERROR(c.finish(1));
    RETURN_IF_ERROR(c.drain());
    EXPECT_EQ(c.inFlight(), 0u) << "rank " << r;
    return Status::ok();
  });
  EXPECT_ALL_OK(status);
  for (int r = 0; r < 4; ++r) {
    int first = r - r % 2; // the group: {first, first + 1}
    EXPECT_EQ(inFlightAfterStarts[r], 2u);
    EXPECT_EQ(gathered[r], (std::vector<float>{float(first), float(10 * first), float(first + 1),
                                               float(10 * (first + 1))}))
        << "rank " << r;
    std::vector<float> sum = {float(2 * first + 1), 2.0f, 4.0f, float(-(2 * first + 1))};
    EXPECT_EQ(scattered[r],
              std::vector<float>(sum.begin() + 2 * (r % 2), sum.begin() + 2 * (r % 2) + 2))
        << "rank " << r;
  }
}

// A blocking all-reduce over tp while a dp all-reduce is in flight, on a 2x2 mesh (dp: axis 0,
// groups {0, 2} and {1, 3}; tp: axis 1, groups {0, 1} and {2, 3}): ranks 2 and 3 post their dp
// all-reduce only once ranks 0 and 1 have finished their tp one. On one communication stream
// the tp all-reduce of ranks 0 and 1 would queue behind their dp one, which waits for ranks 2
// and 3 (a timeout here); each group's own stream lets it complete.
TEST(NcclAsyncFake, BlockingCollectiveDoesNotQueueBehindAnotherGroupInFlight) {
  FakeRanks ranks(meshOf({2, 2}));
  std::mutex mu;
  std::condition_variable cv;
  int firstRowDone = 0;
  std::vector<float> dsum(4, -1.0f), tsum(4, -1.0f);
  auto status = ranks.run(
      [&](int r, NcclCommunicator &c) -> Status {
        RETURN_IF_ERROR(c.prepare({{0}, {1}}));
        std::vector<uint32_t> dp = {0}, tp = {1};
        float d = float(r), t = float(10 * r);
        if (r < 2) {
          Status s = c.startAllReduce(1, dp, &d, &dsum[r], 1, DType::f32, comm::ReduceKind::sum);
          if (s.isOk())
            s = c.allReduce(tp, &t, &tsum[r], 1, DType::f32, comm::ReduceKind::sum);
          {
            std::lock_guard<std::mutex> lock(mu);
            ++firstRowDone; // also on failure: ranks 2 and 3 must not wait forever
            cv.notify_all();
          }
          RETURN_IF_ERROR(s);
        } else {
          RETURN_IF_ERROR(c.allReduce(tp, &t, &tsum[r], 1, DType::f32, comm::ReduceKind::sum));
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return firstRowDone == 2; });
          }
          RETURN_IF_ERROR(
              c.startAllReduce(1, dp, &d, &dsum[r], 1, DType::f32, comm::ReduceKind::sum));
        }
        RETURN_IF_ERROR(c.finish(1));
        return c.drain();
      },
      std::chrono::seconds(3));
  EXPECT_ALL_OK(status);
  EXPECT_EQ(dsum, (std::vector<float>{2.0f, 4.0f, 2.0f, 4.0f}));
  EXPECT_EQ(tsum, (std::vector<float>{10.0f, 10.0f, 50.0f, 50.0f}));
}

// The same key twice in flight, and a finish of a key never started, are refused by name.
TEST(NcclAsyncFake, KeysAreCheckedByName) {
  FakeRanks ranks(meshOf({1}));
  std::string twice, unknown;
  auto status = ranks.run([&](int, NcclCommunicator &c) -> Status {
    float a = 1.0f, b = 0.0f;
    RETURN_IF_ERROR(c.startAllReduce(5, kAll, &a, &b, 1, DType::f32, comm::ReduceKind::sum));
    twice = c.startAllReduce(5, kAll, &a, &b, 1, DType::f32, comm::ReduceKind::sum).message();
    unknown = c.finish(6).message();
    RETURN_IF_ERROR(c.finish(5));
    return c.drain();
  });
  EXPECT_ALL_OK(status);
  EXPECT_NE(twice.find("rank 0: NCCL ncclAllReduce over [a0] (ranks 0): operation 5 is already "
                       "in flight"),
            std::string::npos)
      << twice;
  EXPECT_NE(unknown.find("finish of operation 6, which is not in flight"), std::string::npos)
      << unknown;
}

// Rank 1 never posts its all-reduce (it stays alive, so the fake sees no deadlock): rank 0's
// finish returns at once (no host wait), and the drain fails within the timeout naming the rank,
// the NCCL call and the group, and aborts the rank's communicators.
TEST(NcclAsyncFake, WatchdogNamesTheCollectiveInFlight) {
  FakeRanks ranks(meshOf({2}));
  Signal rank0Done;
  Status finished = Status::ok();
  auto status = ranks.run(
      [&](int r, NcclCommunicator &c) -> Status {
        if (r == 1) {
          rank0Done.wait();
          return Status::ok();
        }
        float in = 1.0f, out = 0.0f;
        Status s = c.startAllReduce(9, kAll, &in, &out, 1, DType::f32, comm::ReduceKind::sum);
        if (s.isOk())
          finished = c.finish(9);
        if (s.isOk())
          s = c.drain();
        rank0Done.set();
        return s;
      },
      std::chrono::seconds(1));
  EXPECT_TRUE(finished.isOk()) << finished.message();
  ASSERT_FALSE(status[0].isOk());
  EXPECT_NE(status[0].message().find("rank 0: NCCL ncclAllReduce over [a0] (ranks 0, 1) did not "
                                     "complete within 1 s"),
            std::string::npos)
      << status[0].message();
  EXPECT_NE(status[0].message().find("were aborted"), std::string::npos) << status[0].message();
  EXPECT_GT(ranks.world.aborts(0), 0);
  EXPECT_TRUE(status[1].isOk()) << status[1].message();
}

// An asynchronous NCCL error while a collective is in flight surfaces at the next finish (which
// polls every operation in flight once), naming the operation; later calls fail at once.
TEST(NcclAsyncFake, AsyncErrorSurfacesAtTheNextFinish) {
  FakeRanks ranks(meshOf({2}));
  std::string later;
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    float in = 1.0f, out = 0.0f, in2 = 2.0f, out2 = 0.0f;
    if (r == 1)
      return Status::ok(); // never posts: rank 0's collectives stay in flight
    RETURN_IF_ERROR(c.startAllReduce(1, kAll, &in, &out, 1, DType::f32, comm::ReduceKind::sum));
    RETURN_IF_ERROR(c.startAllReduce(2, kAll, &in2, &out2, 1, DType::f32, comm::ReduceKind::max));
    ranks.world.asyncError(0, ncclRemoteError, "peer 1 vanished");
    Status s = c.finish(1);
    later = c.startAllReduce(3, kAll, &in, &out, 1, DType::f32, comm::ReduceKind::sum).message();
    return s;
  });
  ASSERT_FALSE(status[0].isOk());
  EXPECT_NE(status[0].message().find("rank 0: NCCL ncclAllReduce over [a0] (ranks 0, 1) failed: "
                                     "remote process exited or there was a network error (peer "
                                     "1 vanished)"),
            std::string::npos)
      << status[0].message();
  EXPECT_NE(later.find("an earlier failure or timeout"), std::string::npos) << later;
}

// A receive posted ahead: rank 1 posts it before rank 0 has sent anything and returns; the
// finish orders the compute stream after it. Rank 1's transfer runs on the communication stream
// and never on the host.
TEST(NcclAsyncFake, ReceivePostedAheadOfTheSend) {
  FakeRanks ranks(meshOf({2}));
  Signal posted;
  std::vector<float> got(3, 0.0f);
  std::vector<std::string> calls;
  auto status = ranks.run([&](int r, NcclCommunicator &c) -> Status {
    if (r == 0) {
      posted.wait();
      std::vector<float> v = {1.0f, 2.0f, 3.0f};
      RETURN_IF_ERROR(c.send(1, 4, v.data(), v.size() * sizeof(float)));
      RETURN_IF_ERROR(c.flushSends());
      return c.synchronize();
    }
    ranks.apis[1]->clearCalls();
    Status s = c.startRecv(77, 0, 4, got.data(), got.size() * sizeof(float));
    posted.set(); // also on failure: rank 0 must not wait forever
    RETURN_IF_ERROR(s);
    RETURN_IF_ERROR(c.finish(77));
    calls = ranks.apis[1]->calls();
    return c.drain();
  });
  EXPECT_ALL_OK(status);
  EXPECT_EQ(got, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(calls, (std::vector<std::string>{"record@compute", "comm waits compute", "recv<0@comm",
                                             "record@comm", "compute waits comm"}));
}

// A send to itself and its receive posted ahead: the staged copy and the receive are device to
// device copies on the communication stream; nothing goes through the host.
TEST(NcclAsyncFake, ReceiveFromItselfIsDeviceToDevice) {
  FakeRanks ranks(meshOf({1}));
  std::vector<float> got(2, 0.0f);
  std::vector<std::string> calls;
  auto status = ranks.run([&](int, NcclCommunicator &c) -> Status {
    ranks.apis[0]->clearCalls();
    std::vector<float> v = {5.0f, 6.0f};
    RETURN_IF_ERROR(c.send(0, 8, v.data(), v.size() * sizeof(float)));
    RETURN_IF_ERROR(c.startRecv(1, 0, 8, got.data(), got.size() * sizeof(float)));
    RETURN_IF_ERROR(c.finish(1));
    RETURN_IF_ERROR(c.drain());
    calls = ranks.apis[0]->calls();
    return Status::ok();
  });
  EXPECT_ALL_OK(status);
  EXPECT_EQ(got, (std::vector<float>{5.0f, 6.0f}));
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "copy D2D@comm"), 2);
  for (const std::string &call : calls)
    EXPECT_TRUE(call.find("H2D") == std::string::npos && call.find("D2H") == std::string::npos &&
                call.find("host waits") == std::string::npos)
        << call;
}

/// Runs an all-to-all-v on 3 ranks where rank r sends (r + 1) * (j + 1) floats of value
/// 100 r + j to member j; `expect(r, j)` is the count rank r announces it expects from j.
std::vector<Status> allToAllV(FakeRanks &ranks, const std::function<size_t(int, int)> &expect,
                              std::vector<std::vector<float>> &got) {
  got.assign(3, {});
  return ranks.run([&](int r, NcclCommunicator &c) -> Status {
    std::vector<float> in;
    std::vector<size_t> sendBytes, recvBytes;
    std::vector<int64_t> counts(6, 0); // [sent | received], "device" memory in the fake
    for (int j = 0; j < 3; ++j) {
      size_t n = size_t(r + 1) * size_t(j + 1);
      in.insert(in.end(), n, float(100 * r + j));
      sendBytes.push_back(n * sizeof(float));
      counts[j] = static_cast<int64_t>(n * sizeof(float));
      recvBytes.push_back(expect(r, j) * sizeof(float));
    }
    size_t total = 0;
    for (size_t b : recvBytes)
      total += b;
    got[r].assign(total / sizeof(float), -1.0f);
    return c.allToAllV(kAll, in.data(), sendBytes, got[r].data(), recvBytes, counts.data());
  });
}

// The counts travel first (one group of 8-byte transfers with every member, itself included),
// then the rows (one group); rank r receives from j, in member order, (j + 1) * (r + 1) values
// 100 j + r.
TEST(NcclAsyncFake, AllToAllVExchangesCountsThenRows) {
  FakeRanks ranks(meshOf({3}));
  std::vector<std::vector<float>> got;
  auto status = allToAllV(
      ranks, [](int r, int j) { return size_t(j + 1) * size_t(r + 1); }, got);
  EXPECT_ALL_OK(status);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> want;
    for (int j = 0; j < 3; ++j)
      want.insert(want.end(), size_t(j + 1) * size_t(r + 1), float(100 * j + r));
    EXPECT_EQ(got[r], want) << "rank " << r;
    std::vector<std::string> kernels = ranks.world.kernels(r);
    ASSERT_EQ(kernels.size(), 2u) << "rank " << r;
    EXPECT_EQ(kernels[0], "send>0 recv<0 send>1 recv<1 send>2 recv<2");
    EXPECT_EQ(kernels[1], "send>0 recv<0 send>1 recv<1 send>2 recv<2");
  }
}

// A rank whose routing disagrees with its peer's: the count exchange names the peer and both
// counts before any row moves.
TEST(NcclAsyncFake, AllToAllVCountMismatchNamesThePeer) {
  FakeRanks ranks(meshOf({3}));
  std::vector<std::vector<float>> got;
  auto status = allToAllV(
      ranks,
      [](int r, int j) { return size_t(j + 1) * size_t(r + 1) + (r == 1 && j == 2 ? 1 : 0); }, got);
  ASSERT_FALSE(status[1].isOk());
  EXPECT_NE(status[1].message().find("rank 1: NCCL all-to-all-v over [a0] (ranks 0, 1, 2): rank 2 "
                                     "sends 24 bytes, this rank expects 28"),
            std::string::npos)
      << status[1].message();
  EXPECT_EQ(ranks.world.kernels(1).size(), 1u); // the counts only
}

} // namespace
