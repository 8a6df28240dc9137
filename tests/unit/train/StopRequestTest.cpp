// StopRequest (runtime/train/StopRequest.h): the recording signal handler, the wall-time limit
// and the all-reduce that makes every rank take the same decision.
#include "runtime/train/StopRequest.h"

#include <gtest/gtest.h>

#include <csignal>

namespace megac::runtime::train {
namespace {

using Clock = StopRequest::Clock;

TEST(StopRequestTest, SignalsHandledUnderMpirunAndAlone) {
  EXPECT_EQ(stopSignals(true), (std::vector<int>{SIGUSR1, SIGUSR2}));
  EXPECT_EQ(stopSignals(false), (std::vector<int>{SIGUSR1, SIGUSR2, SIGTERM, SIGINT}));
}

TEST(StopRequestTest, RecordsTheFirstSignalOnly) {
  ASSERT_TRUE(installStopSignalHandler({SIGUSR1, SIGUSR2}).isOk());
  clearStopSignal();
  EXPECT_EQ(receivedStopSignal(), 0);
  std::raise(SIGUSR2); // handled: the process goes on
  std::raise(SIGUSR1);
  EXPECT_EQ(receivedStopSignal(), SIGUSR2);
  auto t0 = Clock::now();
  EXPECT_EQ(StopRequest(true, std::nullopt, t0).local(t0).signal, SIGUSR2);
  // Without --exit-signal-handler a recorded signal does not stop the run.
  EXPECT_FALSE(StopRequest(false, std::nullopt, t0).local(t0).stop());
  EXPECT_FALSE(StopRequest(false, std::nullopt, t0).enabled());
  clearStopSignal();
  EXPECT_FALSE(StopRequest(true, std::nullopt, t0).local(t0).stop());
}

TEST(StopRequestTest, TimeLimitPassesAtExactlyTheDuration) {
  auto t0 = Clock::now();
  StopRequest stop(false, 0.5, t0); // 30 s
  EXPECT_TRUE(stop.enabled());
  EXPECT_FALSE(stop.local(t0 + std::chrono::milliseconds(29999)).timeLimit);
  EXPECT_TRUE(stop.local(t0 + std::chrono::seconds(30)).timeLimit);
  EXPECT_EQ(stop.local(t0 + std::chrono::seconds(31)).reason(0.5), "the time limit of 0.5 minutes");
}

TEST(StopRequestTest, ReasonNamesSignalAndLimit) {
  EXPECT_EQ((StopDecision{SIGTERM, false}).reason(std::nullopt), "SIGTERM");
  EXPECT_EQ((StopDecision{SIGUSR2, true}).reason(2.0), "SIGUSR2 and the time limit of 2 minutes");
  EXPECT_EQ(signalName(40), "signal 40");
}

/// Rank 0 of a job whose other ranks' requests are given: allReduce MAX-combines them, and the
/// test checks the call is over every mesh axis, in f64, MAX, two values.
class PeersCommunicator : public comm::Communicator {
public:
  PeersCommunicator(comm::Mesh mesh, std::vector<std::array<double, 2>> peers)
      : mesh_(std::move(mesh)), peers_(std::move(peers)) {}
  int rank() const override { return 0; }
  int size() const override { return int(mesh_.size()); }
  const comm::Mesh &mesh() const override { return mesh_; }
  Status allReduce(std::span<const uint32_t> axes, void *data, size_t count, DType dtype,
                   comm::ReduceKind kind) override {
    EXPECT_EQ(std::vector<uint32_t>(axes.begin(), axes.end()), (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(dtype, DType::f64);
    EXPECT_EQ(kind, comm::ReduceKind::max);
    ++calls;
    auto *v = static_cast<double *>(data);
    for (const auto &p : peers_)
      for (size_t i = 0; i < 2; ++i)
        v[i] = std::max(v[i], p[i]);
    return Status::ok();
  }
  Status allGather(std::span<const uint32_t>, const void *, void *, size_t) override {
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
  int calls = 0;

private:
  comm::Mesh mesh_;
  std::vector<std::array<double, 2>> peers_;
};

TEST(StopRequestTest, RanksAgreeOnAnyRanksRequest) {
  clearStopSignal();
  comm::Mesh mesh{{"dp", "tp"}, {2, 2}};
  auto t0 = Clock::now();
  StopRequest stop(true, 10.0, t0);
  // Nobody asks: no stop.
  PeersCommunicator quiet(mesh, {{0, 0}, {0, 0}, {0, 0}});
  StatusOr<StopDecision> d = stop.agree(quiet, t0);
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_FALSE(d->stop());
  EXPECT_EQ(quiet.calls, 1);
  // Rank 2 was signalled, rank 3 passed its time limit: this rank stops for both reasons.
  PeersCommunicator asked(mesh, {{0, 0}, {double(SIGUSR2), 0}, {0, 1}});
  d = stop.agree(asked, t0);
  ASSERT_TRUE(d.isOk());
  EXPECT_EQ(d->signal, SIGUSR2);
  EXPECT_TRUE(d->timeLimit);
}

TEST(StopRequestTest, OneRankAgreesWithItself) {
  comm::Mesh mesh{{"dp"}, {1}};
  std::unique_ptr<comm::Communicator> self = comm::makeSelfCommunicator(mesh);
  auto t0 = Clock::now();
  StatusOr<StopDecision> d = StopRequest(false, 1.0, t0).agree(*self, t0 + std::chrono::minutes(2));
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_TRUE(d->timeLimit);
  EXPECT_EQ(d->signal, 0);
}

} // namespace
} // namespace megac::runtime::train
