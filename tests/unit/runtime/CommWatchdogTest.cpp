// The communication watchdog (runtime/comm/CommWatchdog.h) against a fake operation and clock:
// completion in time, expiry (aborted once, after the timeout and not before), a failure
// reported by the operation, and the pauses between polls.
#include "runtime/comm/CommWatchdog.h"

#include <gtest/gtest.h>

using namespace megac;
using namespace megac::runtime::comm;
using namespace std::chrono_literals;

namespace {

/// Time that moves only when the watchdog sleeps (and by `perPoll` at every now()).
class FakeClock final : public WatchdogClock {
public:
  std::chrono::steady_clock::time_point now() override {
    t += perPoll;
    return t;
  }
  void sleep(Duration d) override {
    t += d;
    slept += d;
    ++sleeps;
    longest = std::max(longest, d);
  }
  std::chrono::steady_clock::time_point t{};
  Duration perPoll{0}, slept{0}, longest{0};
  int sleeps = 0;
};

/// Pending for `pendingPolls` polls, then done (or failed, with `failure`); never when
/// pendingPolls < 0.
class FakeOp final : public PendingOp {
public:
  explicit FakeOp(int pendingPolls, std::string failure = "")
      : pendingPolls_(pendingPolls), failure_(std::move(failure)) {}
  State poll(std::string &why) override {
    ++polls;
    if (aborted)
      ADD_FAILURE() << "polled after abort";
    if (pendingPolls_ < 0 || polls <= pendingPolls_)
      return State::pending;
    if (!failure_.empty()) {
      why = failure_;
      return State::failed;
    }
    return State::done;
  }
  void abort() override { ++aborted; }
  int polls = 0, aborted = 0;

private:
  int pendingPolls_;
  std::string failure_;
};

const std::string kWhat = "rank 1: ncclAllReduce over [dp] (ranks 0, 1)";

TEST(CommWatchdogTest, CompletesInTimeWithoutAbort) {
  FakeClock clock;
  FakeOp op(5000);
  WatchdogOptions options;
  options.timeout = 10s;
  Status s = waitWithDeadline(op, kWhat, options, "", clock);
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(op.polls, 5001);
  EXPECT_EQ(op.aborted, 0);
  // 1000 polls spin, then pauses double from 1 us up to the 200 us cap.
  EXPECT_EQ(clock.sleeps, 4000);
  EXPECT_EQ(clock.longest, std::chrono::microseconds(200));
}

TEST(CommWatchdogTest, ExpiresAfterTheTimeoutAndAbortsOnce) {
  FakeClock clock;
  FakeOp op(-1);
  WatchdogOptions options;
  options.timeout = 3s;
  auto start = clock.t;
  Status s = waitWithDeadline(op, kWhat, options, " (the NCCL communicators were aborted)", clock);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), kWhat + " did not complete within 3 s (a peer did not make the matching "
                                 "call) (the NCCL communicators were aborted)");
  EXPECT_EQ(op.aborted, 1);
  // Not before the deadline, and not much after it (one pause at most).
  EXPECT_GE(clock.t - start, 3s);
  EXPECT_LE(clock.t - start, 3s + options.maxPause);
}

TEST(CommWatchdogTest, CompletionSeenAtTheLastPollIsNotAborted) {
  // Each now() advances 1 s: the operation completes at the poll made just before the deadline
  // check that would expire it.
  FakeClock clock;
  clock.perPoll = 1s;
  FakeOp op(2);
  WatchdogOptions options;
  options.timeout = 3s;
  Status s = waitWithDeadline(op, kWhat, options, "", clock);
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(op.aborted, 0);
}

TEST(CommWatchdogTest, AsyncErrorFailsAtOnceAndAborts) {
  FakeClock clock;
  FakeOp op(3, "unhandled system error (remote process exited)");
  WatchdogOptions options;
  Status s = waitWithDeadline(op, kWhat, options, " (aborted)", clock);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(),
            kWhat + " failed: unhandled system error (remote process exited) (aborted)");
  EXPECT_EQ(op.aborted, 1);
  EXPECT_EQ(op.polls, 4);
}

TEST(CommWatchdogTest, SystemClockExpiresForReal) {
  FakeOp op(-1);
  WatchdogOptions options;
  options.timeout = 1s;
  auto start = std::chrono::steady_clock::now();
  Status s = waitWithDeadline(op, kWhat, options);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(op.aborted, 1);
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 30.0); // generous: the machine may be loaded; only a hang fails this
}

} // namespace
