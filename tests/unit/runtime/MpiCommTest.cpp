// MpiCommunicator on 4 ranks (run by ctest under `mpirun -np 4`, label mpi): closed-form results
// of every collective over sub-groups of the mesh [dp = 2, tp = 2] (rank = tp + 2 dp), ring
// transfers, and a collective one member skips, which times out with the op and group named.
#include "runtime/comm/MpiCommunicator.h"
#include "support/Float16.h"
#include "tests/unit/runtime/MpiWorld.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>
#include <thread>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::comm;

namespace {

Mesh mesh() { return Mesh{{"dp", "tp"}, {2, 2}}; }

Communicator &world() { return megac::runtime::comm::testing::mpiWorld(mesh()); }

const uint32_t kDp[] = {0}, kTp[] = {1}, kAll[] = {0, 1};

TEST(MpiComm, RunsOnFourRanks) {
  ASSERT_EQ(world().size(), 4) << "run under mpirun -np 4";
  EXPECT_EQ(world().mesh().coordsOf(world().rank()),
            (std::vector<int64_t>{world().rank() / 2, world().rank() % 2}));
}

TEST(MpiComm, AllReduceOfRankIds) {
  int r = world().rank(), dp = r / 2, tp = r % 2;
  double all = r;
  ASSERT_TRUE(world().allReduce(kAll, &all, 1, DType::f64, ReduceKind::sum).isOk());
  EXPECT_EQ(all, 0 + 1 + 2 + 3);
  float overTp[2] = {float(r), float(10 * r)};
  ASSERT_TRUE(world().allReduce(kTp, overTp, 2, DType::f32, ReduceKind::sum).isOk());
  EXPECT_EQ(overTp[0], 4 * dp + 1); // ranks 2dp and 2dp+1
  EXPECT_EQ(overTp[1], 10 * (4 * dp + 1));
  int64_t maxDp = r;
  ASSERT_TRUE(world().allReduce(kDp, &maxDp, 1, DType::i64, ReduceKind::max).isOk());
  EXPECT_EQ(maxDp, 2 + tp);
  // bf16: 1.5 r is exact; the sum over all ranks (9) too.
  uint16_t half = floatToBf16(1.5f * r);
  ASSERT_TRUE(world().allReduce(kAll, &half, 1, DType::bf16, ReduceKind::sum).isOk());
  EXPECT_EQ(bf16ToFloat(half), 9.0f);
}

// From 64 KiB a blocking all_reduce is a reduce-scatter of element blocks and an all-gather
// (MpiCommunicator.cpp reduceScatterThenGather). Its bits must be the whole-message algorithm's:
// each element summed over the members in group order in the accumulator (f32 in double, bf16 in
// f32) and rounded once, the same on every member; counts that the group size does not divide
// leave uneven blocks.
TEST(MpiComm, LargeAllReduceSumsInGroupOrderOnEveryMember) {
  int r = world().rank(), dp = r / 2;
  auto value = [](int rank, size_t i) {
    // Magnitudes 1e-3 .. 1e7: the f32 sums depend on their order and on the accumulator.
    return float((rank + 1) * 1e-3 * std::sin(double(i))) + (i % 7 == rank ? 1e7f : 0.0f);
  };
  for (size_t count : {size_t(40001), size_t(16384 + 3)}) {
    std::vector<float> all(count), tp(count);
    for (size_t i = 0; i < count; ++i)
      all[i] = tp[i] = value(r, i);
    ASSERT_TRUE(world().allReduce(kAll, all.data(), count, DType::f32, ReduceKind::sum).isOk());
    ASSERT_TRUE(world().allReduce(kTp, tp.data(), count, DType::f32, ReduceKind::sum).isOk());
    for (size_t i = 0; i < count; ++i) {
      double wantAll = value(0, i), wantTp = value(2 * dp, i);
      for (int m = 1; m < 4; ++m)
        wantAll += value(m, i);
      wantTp += value(2 * dp + 1, i);
      ASSERT_EQ(all[i], float(wantAll)) << "element " << i << " of " << count;
      ASSERT_EQ(tp[i], float(wantTp)) << "element " << i << " of " << count;
    }
  }
  // bf16 (64 KiB = 32768 elements; one more): summed in f32, rounded once.
  const size_t count = 32769;
  std::vector<uint16_t> half(count);
  for (size_t i = 0; i < count; ++i)
    half[i] = floatToBf16(value(r, i));
  ASSERT_TRUE(world().allReduce(kAll, half.data(), count, DType::bf16, ReduceKind::sum).isOk());
  for (size_t i = 0; i < count; ++i) {
    float want = bf16ToFloat(floatToBf16(value(0, i)));
    for (int m = 1; m < 4; ++m)
      want += bf16ToFloat(floatToBf16(value(m, i)));
    ASSERT_EQ(half[i], floatToBf16(want)) << "bf16 element " << i;
  }
}

TEST(MpiComm, AllGatherInGroupOrder) {
  int r = world().rank(), tp = r % 2;
  int64_t mine[2] = {r, 10 * r}, out[4] = {};
  ASSERT_TRUE(world().allGather(kDp, mine, out, sizeof(mine)).isOk());
  // The dp group of tp coordinate t is ranks t, 2 + t, in that order.
  EXPECT_EQ(std::vector<int64_t>(out, out + 4),
            (std::vector<int64_t>{tp, 10 * tp, 2 + tp, 10 * (2 + tp)}));
}

TEST(MpiComm, ReduceScatterKeepsTheGroupIndexBlock) {
  int r = world().rank(), dp = r / 2, tp = r % 2;
  float in[2][3];
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 3; ++i)
      in[j][i] = float(100 * r + 10 * j + i);
  float out[3] = {};
  ASSERT_TRUE(world().reduceScatter(kTp, in, out, 3, DType::f32, ReduceKind::sum).isOk());
  for (int i = 0; i < 3; ++i) // members 2dp, 2dp+1; block tp
    EXPECT_EQ(out[i], float(100 * (2 * dp) + 100 * (2 * dp + 1) + 2 * (10 * tp + i)));
}

TEST(MpiComm, AllToAllTransposesBlocks) {
  int r = world().rank();
  int32_t in[4], out[4] = {};
  for (int j = 0; j < 4; ++j)
    in[j] = 10 * r + j;
  ASSERT_TRUE(world().allToAll(kAll, in, out, sizeof(int32_t)).isOk());
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(out[j], 10 * j + r);
}

TEST(MpiComm, SendRecvRingBothWays) {
  int r = world().rank(), next = (r + 1) % 4, prev = (r + 3) % 4;
  // 1 MiB each way, both sends posted before either receive: send must not block.
  std::vector<int32_t> forward(1 << 18, r), backward(1 << 18, 100 + r);
  ASSERT_TRUE(world().send(next, 1, forward.data(), forward.size() * 4).isOk());
  ASSERT_TRUE(world().send(prev, 2, backward.data(), backward.size() * 4).isOk());
  forward.assign(forward.size(), -1); // send copied the data
  std::vector<int32_t> fromPrev(1 << 18), fromNext(1 << 18);
  ASSERT_TRUE(world().recv(prev, 1, fromPrev.data(), fromPrev.size() * 4).isOk());
  ASSERT_TRUE(world().recv(next, 2, fromNext.data(), fromNext.size() * 4).isOk());
  EXPECT_EQ(fromPrev.front(), prev);
  EXPECT_EQ(fromPrev.back(), prev);
  EXPECT_EQ(fromNext.back(), 100 + next);
  ASSERT_TRUE(world().flushSends().isOk());
  ASSERT_TRUE(world().barrier().isOk());
}

TEST(MpiComm, BadArgumentsAreErrors) {
  const uint32_t bad[] = {2};
  float x = 0;
  Status s = world().allReduce(bad, &x, 1, DType::f32, ReduceKind::sum);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "rank " + std::to_string(world().rank()) +
                             ": all_reduce over mesh axis 2, but the mesh has 2 axes");
  s = world().send(7, 0, &x, 4);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("no such rank (the job has 4)"), std::string::npos) << s.message();
}

TEST(MpiComm, WrongMeshSizeIsAnError) {
  auto made = MpiCommunicator::create(Mesh{{"dp"}, {3}}, std::chrono::seconds(5));
  ASSERT_FALSE(made.isOk());
  EXPECT_EQ(made.status().message(), "rank " + std::to_string(world().rank()) +
                                         ": the job has 4 MPI ranks but the mesh has 3");
}

// Run alone (its own ctest entry): rank 3 joins the tp all-reduce 4 s late, so rank 2 (its
// group) times out after 2 s; ranks 0 and 1 (the other group) finish. Rank 3's late arrival
// then completes the posted operation, so the job still ends cleanly.
TEST(MpiTimeout, ASkippedCollectiveNamesTheOpAndGroup) {
  Communicator &patient = world();
  auto made = MpiCommunicator::create(mesh(), std::chrono::seconds(2));
  ASSERT_TRUE(made.isOk()) << made.status().message();
  Communicator &quick = **made;
  int r = quick.rank();
  static float value[4]; // outlives the test: MPI may complete the timed-out call later
  value[0] = float(r);
  if (r == 3)
    std::this_thread::sleep_for(std::chrono::seconds(4));
  Status s = quick.allReduce(kTp, value, 1, DType::f32, ReduceKind::sum);
  if (r == 2) {
    ASSERT_FALSE(s.isOk());
    EXPECT_EQ(s.message(), "rank 2: all_reduce over [tp] (ranks 2, 3) (4 bytes per rank) did "
                           "not complete within 2 s (a peer did not make the matching call)");
  } else {
    EXPECT_TRUE(s.isOk()) << s.message();
    if (r < 2) {
      EXPECT_EQ(value[0], 1.0f);
    }
  }
  ASSERT_TRUE(patient.barrier().isOk());
}

} // namespace
