// Context parallelism's two K/V exchanges in the planner (issue 32): the layout's variant
// (Layout::cpRing) changes the cost and the memory on a stack that runs both, the search tries
// both and keeps the best of the other for the report, a pin keeps one, and a stack with one
// variant runs it whatever the layout asks.
#include "planner/CostModel.h"

#include "tests/unit/planner/PlannerTestShapes.h"

#include <gtest/gtest.h>

namespace megac::planner {
namespace {

using testing::llama31_8b;

StackProfile stack(const char *name) { return *stackProfile(name, false); }
Cluster cluster(const char *spec) { return *parseCluster(spec, nullptr); }

Layout cpLayout(int64_t cp, bool ring) {
  Layout l{2, 1, 8 / (2 * cp), 1, 1, true, 0, Recompute::selective, Precision::bf16};
  l.cp = cp;
  l.cpRing = ring;
  return l;
}

// megac at cp 4 on one node: the ring holds blocks of S/cp (and, backward, its dK/dV blocks,
// the recomputed output and the row statistics) where all-gather-kv holds the whole sequence's
// K/V; its backward re-runs the forward ring (one more forward attention).
TEST(CpVariantTest, MegacCostsEachExchange) {
  TransformerShape s = llama31_8b(32768);
  Cluster c = cluster("h100-sxm:1x8");
  std::string why;
  auto gather = estimate(s, c, 8, cpLayout(4, false), &why, stack("megac"));
  ASSERT_TRUE(gather) << why;
  auto ring = estimate(s, c, 8, cpLayout(4, true), &why, stack("megac"));
  ASSERT_TRUE(ring) << why;
  // Local kv heads 8 / tp 2 = 4 of 128: the pair K, V of the whole sequence, bf16.
  double pair = 2.0 * 32768 * 4 * 128 * 2;
  double block = pair / 4, rows = 32768.0 / 4 * (32 / 2);
  double ringKv = 4 * block + rows * 128 * 2 + 3 * rows * 8;
  EXPECT_NEAR(gather->workspaceBytes - ring->workspaceBytes, pair - ringKv, 1.0);
  EXPECT_GT(ring->attentionSeconds, gather->attentionSeconds); // the statistics' ring
  EXPECT_NE(ring->cpCommSeconds, gather->cpCommSeconds);
}

// Megatron-Core runs the ring only: a layout asking for all-gather-kv costs the same.
TEST(CpVariantTest, OneVariantStackRunsItsOwn) {
  TransformerShape s = llama31_8b(32768);
  Cluster c = cluster("h100-sxm:1x8");
  std::string why;
  auto asked = estimate(s, c, 8, cpLayout(4, false), &why, stack("megatron-core"));
  auto ring = estimate(s, c, 8, cpLayout(4, true), &why, stack("megatron-core"));
  ASSERT_TRUE(asked && ring) << why;
  EXPECT_EQ(asked->stepSeconds, ring->stepSeconds);
  EXPECT_EQ(asked->totalBytes, ring->totalBytes);
}

// The search tries both on megac and reports the other variant's best; a pin keeps one; a pin
// of a variant the stack lacks leaves no cp layout and says why.
TEST(CpVariantTest, SearchTriesBothAndPinsOne) {
  TransformerShape s = llama31_8b(131072);
  Cluster c = cluster("h100-sxm:4x8");
  SearchResult r = search(s, c, 32, Pins{}, 5, stack("megac"));
  ASSERT_TRUE(r.bestWithCp);
  ASSERT_TRUE(r.bestOtherCpVariant);
  EXPECT_NE(r.bestWithCp->layout.cpRing, r.bestOtherCpVariant->layout.cpRing);
  EXPECT_GT(r.bestOtherCpVariant->layout.cp, 1);
  EXPECT_LE(r.bestWithCp->cost.stepSeconds, r.bestOtherCpVariant->cost.stepSeconds);

  for (bool ring : {false, true}) {
    SCOPED_TRACE(ring ? "pinned p2p" : "pinned all_gather");
    Pins pins;
    pins.cp = 8;
    pins.cpRing = ring;
    SearchResult p = search(s, c, 32, pins, 5, stack("megac"));
    ASSERT_FALSE(p.best.empty());
    for (const PlanCandidate &candidate : p.best)
      EXPECT_EQ(candidate.layout.cpRing, ring);
    EXPECT_FALSE(p.bestOtherCpVariant);
  }

  Pins gather;
  gather.cp = 8;
  gather.cpRing = false;
  SearchResult none = search(s, c, 32, gather, 5, stack("megatron-core"));
  EXPECT_TRUE(none.best.empty());
  EXPECT_NE(none.why.find("no all-gather"), std::string::npos) << none.why;
  SearchResult own = search(s, c, 32, Pins{}, 5, stack("megatron-core"));
  ASSERT_TRUE(own.bestWithCp);
  EXPECT_TRUE(own.bestWithCp->layout.cpRing);
  EXPECT_FALSE(own.bestOtherCpVariant);
}

} // namespace
} // namespace megac::planner
