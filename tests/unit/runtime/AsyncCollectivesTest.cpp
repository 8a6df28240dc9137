// Asynchronous collectives (Communicator::start*) of the MPI communicator on 2 ranks (ctest
// runs it under `mpirun -np 2`, label mpi): start, compute, wait gives the blocking call's
// result bit for bit (f64, f32, bf16; sum and max), several may be in flight at once, the
// emulated link delays completion by at least its alpha-beta time (a point-to-point transfer's
// from when both sides posted), and an async collective a
// peer never starts times out naming the rank, the operation and the group.
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/exec/CommOps.h"
#include "support/Float16.h"
#include "tests/unit/runtime/MpiWorld.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::comm;

namespace {

Mesh mesh() { return Mesh{{"dp"}, {2}}; }

Communicator &world() { return megac::runtime::comm::testing::mpiWorld(mesh()); }

const uint32_t kDp[] = {0};

/// Values whose sums round (so a different reduction order would change bits), per rank.
std::vector<double> values(size_t n, int seed) {
  std::mt19937_64 rng(1234 + seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double &x : v)
    x = u(rng) * std::pow(10.0, int(rng() % 7) - 3);
  return v;
}

/// A compute kernel's worth of work between start and wait.
double compute() {
  double acc = 0;
  for (int i = 1; i < 2000000; ++i)
    acc += 1.0 / i;
  return acc;
}

TEST(AsyncCollectives, RunsOnTwoRanks) { ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2"; }

TEST(AsyncCollectives, AllReduceEqualsBlockingBitForBit) {
  const size_t n = 100003;
  std::vector<double> x = values(n, world().rank());
  for (ReduceKind kind : {ReduceKind::sum, ReduceKind::max}) {
    std::vector<double> blocking = x, async(n, 0.0);
    ASSERT_TRUE(world().allReduce(kDp, blocking.data(), n, DType::f64, kind).isOk());
    auto h = world().startAllReduce(kDp, x.data(), async.data(), n, DType::f64, kind);
    ASSERT_TRUE(h.isOk()) << h.status().message();
    EXPECT_GT(compute(), 0);
    ASSERT_TRUE((*h)->wait().isOk());
    EXPECT_EQ(std::memcmp(blocking.data(), async.data(), n * sizeof(double)), 0);
  }
  // f32 (reduced in double, rounded once) and bf16 (in f32).
  std::vector<float> f(n), fb(n), fa(n);
  std::vector<uint16_t> b(n), bb(n), ba(n);
  for (size_t i = 0; i < n; ++i) {
    f[i] = fb[i] = float(x[i]);
    b[i] = bb[i] = floatToBf16(float(x[i]));
  }
  ASSERT_TRUE(world().allReduce(kDp, fb.data(), n, DType::f32, ReduceKind::sum).isOk());
  ASSERT_TRUE(world().allReduce(kDp, bb.data(), n, DType::bf16, ReduceKind::sum).isOk());
  auto hf = world().startAllReduce(kDp, f.data(), fa.data(), n, DType::f32, ReduceKind::sum);
  auto hb = world().startAllReduce(kDp, b.data(), ba.data(), n, DType::bf16, ReduceKind::sum);
  ASSERT_TRUE(hf.isOk() && hb.isOk());
  std::fill(f.begin(), f.end(), 0.0f); // the inputs may be reused once started
  EXPECT_GT(compute(), 0);
  ASSERT_TRUE((*hb)->wait().isOk()); // completed out of start order
  ASSERT_TRUE((*hf)->wait().isOk());
  EXPECT_EQ(fa, fb);
  EXPECT_EQ(ba, bb);
}

TEST(AsyncCollectives, GatherAndReduceScatterAlongADimEqualBlocking) {
  int r = world().rank();
  // x [3, 4, 5] per rank; gather along dim 1 -> [3, 8, 5]; reduce-scatter that along dim 1.
  std::vector<int64_t> xs{3, 4, 5}, gs{3, 8, 5};
  std::vector<double> x = values(60, 10 + r), blocking(120), async(120);
  cpu::TensorRef xr{DType::f64, xs, x.data()}, br{DType::f64, gs, blocking.data()},
      ar{DType::f64, gs, async.data()};
  ASSERT_TRUE(commops::allGather(world(), kDp, 1, xr, br).isOk());
  auto h = commops::startAllGather(world(), kDp, 1, xr, ar);
  ASSERT_TRUE(h.isOk()) << h.status().message();
  EXPECT_GT(compute(), 0);
  ASSERT_TRUE((*h)->wait().isOk());
  EXPECT_EQ(blocking, async);

  std::vector<double> whole = values(120, 20 + r), rb(60), ra(60);
  cpu::TensorRef wr{DType::f64, gs, whole.data()}, rbr{DType::f64, xs, rb.data()},
      rar{DType::f64, xs, ra.data()};
  ASSERT_TRUE(commops::reduceScatter(world(), kDp, ReduceKind::sum, 1, wr, rbr).isOk());
  auto hr = commops::startReduceScatter(world(), kDp, ReduceKind::sum, 1, wr, rar);
  ASSERT_TRUE(hr.isOk()) << hr.status().message();
  EXPECT_GT(compute(), 0);
  ASSERT_TRUE((*hr)->wait().isOk());
  EXPECT_EQ(std::memcmp(rb.data(), ra.data(), 60 * sizeof(double)), 0);
}

TEST(AsyncCollectives, EmulatedLinkDelaysCompletionByItsAlphaBetaTime) {
  // 1 MB/s and 5 ms latency: an all-reduce of 40 KB over 2 ranks is 2 steps x 5 ms + 40 KB / 1
  // MB/s = 50 ms; an all-gather of 40 KB blocks 5 ms + 40 ms. Lower bounds only: completion
  // never comes before the link time (sleep_until), however loaded the machine is.
  LinkEmulation link{1e6, 5e-3};
  EXPECT_DOUBLE_EQ(link.emulatedSeconds(true, 2, 40000), 0.05);
  EXPECT_DOUBLE_EQ(link.emulatedSeconds(false, 2, 40000), 0.045);
  auto made = MpiCommunicator::create(mesh(), std::chrono::seconds(60), link);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  Communicator &slow = **made;
  std::vector<double> x(5000, 1.0 + slow.rank()), out(5000);
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(slow.allReduce(kDp, x.data(), 5000, DType::f64, ReduceKind::sum).isOk());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_EQ(x[0], 3.0);
  start = std::chrono::steady_clock::now();
  auto h = slow.startAllReduce(kDp, x.data(), out.data(), 5000, DType::f64, ReduceKind::sum);
  ASSERT_TRUE(h.isOk());
  ASSERT_TRUE((*h)->wait().isOk());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_EQ(out[0], 6.0);
  EXPECT_FALSE(MpiCommunicator::create(mesh(), std::chrono::seconds(1), {-1, 0}).isOk());
  ASSERT_TRUE(world().barrier().isOk());
}

TEST(AsyncCollectives, EmulatedLinkCarriesAGroupsCollectivesOneAtATime) {
  // Three 50 ms all-reduces posted back to back over the same group (buckets): the link carries
  // them in turn, so the last completes no earlier than 150 ms after the first was posted, not
  // 50 ms as three links would. A blocking one posted after them queues too (+50 ms).
  LinkEmulation link{1e6, 5e-3};
  auto made = MpiCommunicator::create(mesh(), std::chrono::seconds(60), link);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  Communicator &slow = **made;
  std::vector<std::vector<double>> in(3, std::vector<double>(5000, 1.0)), out = in;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<CommHandle>> handles;
  for (int b = 0; b < 3; ++b) {
    auto h = slow.startAllReduce(kDp, in[b].data(), out[b].data(), 5000, DType::f64,
                                 ReduceKind::sum);
    ASSERT_TRUE(h.isOk()) << h.status().message();
    handles.push_back(std::move(h).value());
  }
  std::vector<double> x(5000, 1.0);
  ASSERT_TRUE(slow.allReduce(kDp, x.data(), 5000, DType::f64, ReduceKind::sum).isOk());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  for (auto &h : handles)
    ASSERT_TRUE(h->wait().isOk());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_EQ(out[2][0], 2.0);
  EXPECT_EQ(x[0], 2.0);
  ASSERT_TRUE(world().barrier().isOk());
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(AsyncCollectives, EmulatedLinkTransferStartsWhenBothSidesPosted) {
  // 1 MB/s and 5 ms latency: a 40 KB message takes 5 ms + 40 ms. It starts when both the send
  // and the receive are posted (a rendezvous): a receive posted early completes no earlier than
  // the send's post + 45 ms, one posted late no earlier than its own post + 45 ms; the sender's
  // flushSends returns no earlier than its post + 45 ms. The sender writes its post time (this
  // machine's monotonic clock, which both processes read) into the message. Lower bounds only.
  LinkEmulation link{1e6, 5e-3};
  EXPECT_DOUBLE_EQ(link.transferSeconds(40000), 0.045);
  auto made = MpiCommunicator::create(mesh(), std::chrono::seconds(60), link);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  Communicator &slow = **made;
  const int64_t transferNs = 45'000'000;
  std::vector<int64_t> message(5000), got(5000);
  for (size_t i = 1; i < message.size(); ++i)
    message[i] = int64_t(i) * 7;
  // Early receive: rank 1 posts, computes; rank 0 sends 100 ms later.
  if (slow.rank() == 1) {
    int64_t posted = nowNs();
    auto h = slow.startRecv(0, 11, got.data(), got.size() * sizeof(int64_t));
    ASSERT_TRUE(h.isOk()) << h.status().message();
    EXPECT_GT(compute(), 0);
    ASSERT_TRUE((*h)->wait().isOk());
    int64_t done = nowNs();
    EXPECT_GE(done, std::max(got[0], posted) + transferNs);
    EXPECT_EQ(got[4999], 4999 * 7);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    message[0] = nowNs();
    ASSERT_TRUE(slow.send(1, 11, message.data(), message.size() * sizeof(int64_t)).isOk());
    ASSERT_TRUE(slow.flushSends().isOk());
    EXPECT_GE(nowNs(), message[0] + transferNs);
  }
  // Late receive: rank 0 sends at once; rank 1 posts its (blocking) receive 100 ms later.
  if (slow.rank() == 0) {
    message[0] = nowNs();
    ASSERT_TRUE(slow.send(1, 12, message.data(), message.size() * sizeof(int64_t)).isOk());
    ASSERT_TRUE(slow.flushSends().isOk());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int64_t posted = nowNs();
    ASSERT_TRUE(slow.recv(0, 12, got.data(), got.size() * sizeof(int64_t)).isOk());
    EXPECT_GE(nowNs(), posted + transferNs);
    EXPECT_EQ(got[1], 7);
  }
  // A message of the wrong size is an error naming its size (the stamp not counted).
  if (slow.rank() == 0) {
    ASSERT_TRUE(slow.send(1, 13, message.data(), 16).isOk());
    ASSERT_TRUE(slow.flushSends().isOk());
  } else {
    auto h = slow.startRecv(0, 13, got.data(), 24);
    ASSERT_TRUE(h.isOk());
    Status s = (*h)->wait();
    EXPECT_EQ(s.message(), "rank 1: recv from rank 0 (tag 13, 24 bytes): the message has 16 "
                           "bytes");
  }
  ASSERT_TRUE(world().barrier().isOk());
}

TEST(AsyncCollectivesTimeout, AnAsyncCollectiveAPeerSkipsNamesTheOpAndGroup) {
  auto made = MpiCommunicator::create(mesh(), std::chrono::seconds(2));
  ASSERT_TRUE(made.isOk()) << made.status().message();
  Communicator &quick = **made;
  int r = quick.rank();
  static float value[1], out[1]; // outlive the test: MPI may complete the timed-out call later
  value[0] = float(r);
  if (r == 1)
    std::this_thread::sleep_for(std::chrono::seconds(4));
  auto h = quick.startAllReduce(kDp, value, out, 1, DType::f32, ReduceKind::sum);
  ASSERT_TRUE(h.isOk());
  Status s = (*h)->wait();
  if (r == 0) {
    ASSERT_FALSE(s.isOk());
    EXPECT_EQ(s.message(), "rank 0: all_reduce over [dp] (ranks 0, 1) (4 bytes per rank) "
                           "(started asynchronously) did not complete within 2 s (a peer did "
                           "not make the matching call)");
  } else {
    EXPECT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(out[0], 1.0f);
  }
  ASSERT_TRUE(world().barrier().isOk());
}

} // namespace
