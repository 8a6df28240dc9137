// The mesh's rank arithmetic in Megatron's order (rank = tp + T*(dp + D*pp) for axes
// [pp, dp, tp]) and the one-rank communicator.
#include "runtime/comm/Communicator.h"

#include <gtest/gtest.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::comm;

namespace {

Mesh megatron() { return Mesh{{"pp", "dp", "tp"}, {2, 3, 2}}; }

TEST(Mesh, RanksFollowMegatronOrder) {
  Mesh mesh = megatron();
  EXPECT_EQ(mesh.size(), 12);
  for (int64_t pp = 0; pp < 2; ++pp)
    for (int64_t dp = 0; dp < 3; ++dp)
      for (int64_t tp = 0; tp < 2; ++tp) {
        int64_t rank = tp + 2 * (dp + 3 * pp);
        std::vector<int64_t> coords{pp, dp, tp};
        EXPECT_EQ(mesh.coordsOf(rank), coords) << "rank " << rank;
        EXPECT_EQ(mesh.rankOf(coords), rank);
      }
}

TEST(Mesh, GroupsOverAxes) {
  Mesh mesh = megatron();
  const uint32_t tp[] = {2}, dp[] = {1}, pp[] = {0}, dpTp[] = {1, 2}, all[] = {0, 1, 2};
  // rank 9 = (pp 1, dp 1, tp 1)
  EXPECT_EQ(mesh.groupOf(9, tp), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(mesh.groupOf(9, dp), (std::vector<int64_t>{7, 9, 11}));
  EXPECT_EQ(mesh.groupOf(9, pp), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(mesh.groupOf(9, dpTp), (std::vector<int64_t>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(mesh.groupOf(9, all).size(), 12u);
  EXPECT_EQ(mesh.groupOf(9, {}), (std::vector<int64_t>{9}));
  EXPECT_EQ(mesh.indexInGroup(9, tp), 1);
  EXPECT_EQ(mesh.indexInGroup(9, dp), 1);
  EXPECT_EQ(mesh.indexInGroup(9, pp), 1);
  EXPECT_EQ(mesh.indexInGroup(9, dpTp), 3);
  EXPECT_EQ(mesh.indexInGroup(9, all), 9);
  // Every member's index is its position in the group.
  for (int64_t r = 0; r < 12; ++r) {
    std::vector<int64_t> group = mesh.groupOf(r, dpTp);
    for (size_t i = 0; i < group.size(); ++i)
      EXPECT_EQ(mesh.indexInGroup(group[i], dpTp), int64_t(i));
  }
  EXPECT_EQ(mesh.describeGroup(9, tp), "[tp] (ranks 8, 9)");
  EXPECT_EQ(mesh.describeGroup(9, dpTp), "[dp, tp] (ranks 6, 7, 8, 9, 10, 11)");
}

TEST(Mesh, NoAxesIsOneRank) {
  Mesh mesh;
  EXPECT_EQ(mesh.size(), 1);
  EXPECT_TRUE(mesh.coordsOf(0).empty());
  EXPECT_EQ(mesh.rankOf({}), 0);
  EXPECT_EQ(mesh.describeGroup(0, {}), "[] (ranks 0)");
}

TEST(SelfCommunicator, GroupsOfOneAreCopies) {
  auto comm = makeSelfCommunicator(Mesh{{"dp", "tp"}, {1, 1}});
  const uint32_t both[] = {0, 1};
  float data[3] = {1, 2, 3};
  ASSERT_TRUE(comm->allReduce(both, data, 3, DType::f32, ReduceKind::sum).isOk());
  EXPECT_EQ(data[2], 3);
  float out[3] = {};
  ASSERT_TRUE(comm->allGather(both, data, out, sizeof(data)).isOk());
  EXPECT_EQ(out[1], 2);
  ASSERT_TRUE(comm->send(0, 5, data, sizeof(data)).isOk());
  float back[3] = {};
  ASSERT_TRUE(comm->recv(0, 5, back, sizeof(back)).isOk());
  EXPECT_EQ(back[0], 1);
  Status none = comm->recv(0, 5, back, sizeof(back));
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.message(), "rank 0: recv from rank 0 (tag 5): no message was sent");
}

TEST(SelfCommunicator, LargerGroupsNeedMpi) {
  auto comm = makeSelfCommunicator(Mesh{{"dp", "tp"}, {2, 2}}, 3);
  EXPECT_EQ(comm->rank(), 3);
  const uint32_t tp[] = {1}, bad[] = {2};
  float data[1] = {1};
  Status s = comm->allReduce(tp, data, 1, DType::f32, ReduceKind::sum);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "rank 3: all_reduce over [tp] (ranks 2, 3) needs a multi-rank "
                         "communicator (run under mpirun)");
  s = comm->allReduce(bad, data, 1, DType::f32, ReduceKind::sum);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "rank 3: all_reduce over mesh axis 2, but the mesh has 2 axes");
}

} // namespace
