// The memory planner: no two simultaneously live buffers overlap, dead space is reused, the
// peak is reported, aliases share bytes, and malformed requests are refused.
#include "codegen/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace megac::codegen;

namespace {

BufferRequest temp(uint64_t bytes, int64_t def, int64_t lastUse) {
  BufferRequest r;
  r.bytes = bytes;
  r.def = def;
  r.lastUse = lastUse;
  return r;
}

BufferRequest pinned(uint64_t bytes) {
  BufferRequest r;
  r.bytes = bytes;
  r.pinned = true;
  return r;
}

uint64_t aligned(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

/// The root request of an alias chain.
size_t rootOf(const std::vector<BufferRequest> &requests, size_t i) {
  while (requests[i].aliasOf)
    i = *requests[i].aliasOf;
  return i;
}

/// Live interval of request i's storage (the union over its alias group), or nullopt if pinned.
std::optional<std::pair<int64_t, int64_t>> storageInterval(const std::vector<BufferRequest> &rs,
                                                           size_t i) {
  size_t root = rootOf(rs, i);
  int64_t def = INT64_MAX, last = INT64_MIN;
  for (size_t j = 0; j < rs.size(); ++j) {
    if (rootOf(rs, j) != root)
      continue;
    if (rs[j].pinned)
      return std::nullopt;
    def = std::min(def, rs[j].def);
    last = std::max(last, rs[j].lastUse);
  }
  return std::make_pair(def, last);
}

/// Checks every pair of requests: storages live at the same time never share a byte; alias
/// groups share an offset; everything is aligned and below the peak.
void expectValid(const std::vector<BufferRequest> &rs, const MemoryPlan &plan) {
  ASSERT_EQ(plan.offsets.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kArenaAlignment, 0u) << "buffer " << i;
    EXPECT_LE(plan.offsets[i] + rs[i].bytes, plan.arenaBytes) << "buffer " << i;
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    for (size_t j = i + 1; j < rs.size(); ++j) {
      if (rootOf(rs, i) == rootOf(rs, j)) {
        EXPECT_EQ(plan.offsets[i], plan.offsets[j]) << "aliases " << i << ", " << j;
        continue;
      }
      if (rs[i].bytes == 0 || rs[j].bytes == 0)
        continue;
      auto a = storageInterval(rs, i), b = storageInterval(rs, j);
      bool live = !a || !b || (a->first <= b->second && b->first <= a->second);
      if (!live)
        continue;
      bool disjoint = plan.offsets[i] + rs[i].bytes <= plan.offsets[j] ||
                      plan.offsets[j] + rs[j].bytes <= plan.offsets[i];
      EXPECT_TRUE(disjoint) << "buffers " << i << " [" << plan.offsets[i] << ", +" << rs[i].bytes
                            << ") and " << j << " [" << plan.offsets[j] << ", +" << rs[j].bytes
                            << ") are live together and overlap";
    }
  }
}

MemoryPlan planOrFail(const std::vector<BufferRequest> &rs) {
  MemoryPlanResult result = planMemory(rs);
  EXPECT_TRUE(result.plan) << result.error;
  return result.plan.value_or(MemoryPlan{});
}

} // namespace

TEST(MemoryPlanner, ChainReusesDeadBuffers) {
  // x0 -> x1 -> x2 -> x3 -> x4, each read only by the next instruction: two live at a time.
  std::vector<BufferRequest> rs;
  for (int64_t i = 0; i < 5; ++i)
    rs.push_back(temp(1000, i, i + 1));
  MemoryPlan plan = planOrFail(rs);
  expectValid(rs, plan);
  EXPECT_EQ(plan.arenaBytes, 2 * aligned(1000));
  EXPECT_EQ(plan.totalBytes, 5 * aligned(1000));
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3]);
}

TEST(MemoryPlanner, PinnedBuffersComeFirstAndAreNeverShared) {
  std::vector<BufferRequest> rs = {pinned(100), temp(640, 0, 0), pinned(10), temp(640, 1, 1)};
  MemoryPlan plan = planOrFail(rs);
  expectValid(rs, plan);
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[2], 128u); // 100 rounded up to 64
  EXPECT_EQ(plan.pinnedBytes, 192u);
  // The two temporaries are never live together: they share the space above the pinned ones.
  EXPECT_EQ(plan.offsets[1], 192u);
  EXPECT_EQ(plan.offsets[3], 192u);
  EXPECT_EQ(plan.arenaBytes, 192u + 640u);
}

TEST(MemoryPlanner, BestFitPicksTheTightestGap) {
  // Largest first puts A, B, C, D, E back to back. When F is live only A, C and E are, which
  // leaves B's 512 bytes and D's 256 bytes free: F (128) takes the tighter gap, D's.
  std::vector<BufferRequest> rs = {
      temp(1024, 0, 10), // A @0
      temp(512, 0, 0),   // B @1024, dead after instruction 0
      temp(512, 0, 10),  // C @1536
      temp(256, 0, 0),   // D @2048, dead after instruction 0
      temp(256, 0, 10),  // E @2304
      temp(128, 5, 6),   // F
  };
  MemoryPlan plan = planOrFail(rs);
  expectValid(rs, plan);
  EXPECT_EQ(plan.offsets[1], 1024u);
  EXPECT_EQ(plan.offsets[3], 2048u);
  EXPECT_EQ(plan.offsets[5], 2048u);
  EXPECT_EQ(plan.arenaBytes, 2560u);
}

TEST(MemoryPlanner, AliasesShareBytesForTheUnionOfTheirLifetimes) {
  // 1 aliases 0 (a reshape) and lives until 4; 2 is defined at 3: it must not take 0's bytes
  // even though 0 itself was last read at 1.
  std::vector<BufferRequest> rs = {temp(4096, 0, 1), temp(4096, 1, 4), temp(4096, 3, 4)};
  rs[1].aliasOf = 0;
  MemoryPlan plan = planOrFail(rs);
  expectValid(rs, plan);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_NE(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.arenaBytes, 2 * 4096u);
  EXPECT_EQ(plan.totalBytes, 2 * 4096u); // one storage for the alias pair

  // An alias of a pinned buffer (a reshaped parameter) is pinned too.
  std::vector<BufferRequest> ps = {pinned(64), temp(64, 0, 0), temp(64, 1, 1)};
  ps[1].aliasOf = 0;
  MemoryPlan pinnedPlan = planOrFail(ps);
  expectValid(ps, pinnedPlan);
  EXPECT_EQ(pinnedPlan.offsets[1], 0u);
  EXPECT_EQ(pinnedPlan.offsets[2], 64u);
}

TEST(MemoryPlanner, ZeroSizedBuffersTakeNoSpace) {
  std::vector<BufferRequest> rs = {temp(0, 0, 3), temp(64, 1, 2)};
  MemoryPlan plan = planOrFail(rs);
  expectValid(rs, plan);
  EXPECT_EQ(plan.arenaBytes, 64u);
}

TEST(MemoryPlanner, RejectsMalformedRequests) {
  std::vector<BufferRequest> backwards = {temp(64, 3, 1)};
  MemoryPlanResult r = planMemory(backwards);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.error, "buffer 0 is used (1) before it is defined (3)");

  std::vector<BufferRequest> forward = {temp(64, 0, 1), temp(64, 0, 1)};
  forward[0].aliasOf = 1;
  r = planMemory(forward);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.error, "buffer 0 aliases buffer 1, which is not an earlier one");

  std::vector<BufferRequest> huge = {pinned(UINT64_MAX - 10)};
  EXPECT_FALSE(planMemory(huge).plan);

  std::vector<BufferRequest> ok = {temp(64, 0, 0)};
  r = planMemory(ok, 48);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.error, "alignment 48 is not a power of two");
}

TEST(MemoryPlanner, RandomProgramsNeverOverlapLiveBuffers) {
  std::mt19937_64 rng(1234);
  int reused = 0;
  for (int program = 0; program < 300; ++program) {
    int64_t length = 1 + rng() % 40;
    size_t count = 1 + rng() % 60;
    std::vector<BufferRequest> rs;
    for (size_t i = 0; i < count; ++i) {
      uint64_t bytes = rng() % 5 == 0 ? rng() % 100000 : rng() % 3000;
      if (rng() % 8 == 0) {
        rs.push_back(pinned(bytes));
      } else {
        int64_t def = rng() % length;
        rs.push_back(temp(bytes, def, def + static_cast<int64_t>(rng() % 6)));
      }
      if (i > 0 && rng() % 6 == 0)
        rs.back().aliasOf = rng() % i;
    }
    MemoryPlanResult result = planMemory(rs);
    ASSERT_TRUE(result.plan) << result.error;
    const MemoryPlan &plan = *result.plan;
    expectValid(rs, plan);
    if (HasFailure()) {
      ADD_FAILURE() << "program " << program;
      return;
    }
    // Lower bound: the most bytes live at one instruction; upper bound: no reuse at all.
    uint64_t peakLive = 0;
    for (int64_t t = 0; t < length + 6; ++t) {
      uint64_t live = 0;
      for (size_t i = 0; i < rs.size(); ++i) {
        if (rootOf(rs, i) != i)
          continue;
        auto interval = storageInterval(rs, i);
        uint64_t bytes = 0;
        for (size_t j = 0; j < rs.size(); ++j)
          if (rootOf(rs, j) == i)
            bytes = std::max(bytes, aligned(rs[j].bytes));
        if (!interval || (interval->first <= t && t <= interval->second))
          live += bytes;
      }
      peakLive = std::max(peakLive, live);
    }
    EXPECT_GE(plan.arenaBytes, peakLive);
    EXPECT_LE(plan.arenaBytes, plan.totalBytes);
    if (plan.arenaBytes < plan.totalBytes)
      ++reused;
  }
  // Random programs with short lifetimes leave plenty of room for reuse.
  EXPECT_GT(reused, 200);
}

namespace {

BufferRequest persistent(uint64_t bytes) {
  BufferRequest r;
  r.bytes = bytes;
  r.persistent = true;
  return r;
}

BufferRequest in(size_t function, BufferRequest r) {
  r.function = function;
  return r;
}

/// The root request's persistence, function and the storage's live interval decide who may
/// share bytes: persistent storages with nobody, different functions' storages freely.
void expectValidProgram(const std::vector<BufferRequest> &rs, const MemoryPlan &plan) {
  ASSERT_EQ(plan.offsets.size(), rs.size());
  auto isPersistent = [&](size_t i) { return rs[rootOf(rs, i)].persistent; };
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kArenaAlignment, 0u) << "buffer " << i;
    EXPECT_LE(plan.offsets[i] + rs[i].bytes, plan.arenaBytes) << "buffer " << i;
    if (isPersistent(i)) {
      EXPECT_LE(plan.offsets[i] + rs[i].bytes, plan.persistentBytes) << "buffer " << i;
    } else if (rs[i].bytes) {
      EXPECT_GE(plan.offsets[i], plan.persistentBytes) << "buffer " << i;
    }
  }
  for (size_t i = 0; i < rs.size(); ++i)
    for (size_t j = i + 1; j < rs.size(); ++j) {
      if (rootOf(rs, i) == rootOf(rs, j)) {
        EXPECT_EQ(plan.offsets[i], plan.offsets[j]) << "aliases " << i << ", " << j;
        continue;
      }
      if (rs[i].bytes == 0 || rs[j].bytes == 0)
        continue;
      bool together = isPersistent(i) || isPersistent(j);
      if (!together) {
        if (rs[rootOf(rs, i)].function != rs[rootOf(rs, j)].function)
          continue;
        auto a = storageInterval(rs, i), b = storageInterval(rs, j);
        together = !a || !b || (a->first <= b->second && b->first <= a->second);
      }
      if (!together)
        continue;
      bool disjoint = plan.offsets[i] + rs[i].bytes <= plan.offsets[j] ||
                      plan.offsets[j] + rs[j].bytes <= plan.offsets[i];
      EXPECT_TRUE(disjoint) << "buffers " << i << " and " << j << " overlap";
    }
}

} // namespace

TEST(MemoryPlanner, FunctionsShareTheBytesAbovePersistentStorage) {
  // Two persistent buffers; function 0 needs 2 x 640 at once, function 1 one 1024 and a pinned
  // input: the arena is the persistent region plus the larger function.
  std::vector<BufferRequest> rs = {
      persistent(100),         // 0: a parameter @0
      in(0, pinned(64)),       // 1: function 0's input @192
      in(0, temp(640, 0, 1)),  // 2
      in(0, temp(640, 1, 2)),  // 3: live with 2 at instruction 1
      persistent(64),          // 4: a state buffer @128
      in(1, pinned(64)),       // 5: function 1's input, at function 0's input bytes
      in(1, temp(1024, 0, 0)), // 6
      in(1, temp(64, 0, 1)),   // 7: an alias of the parameter, below
  };
  rs[7].aliasOf = 0;
  MemoryPlan plan = planOrFail(rs);
  expectValidProgram(rs, plan);
  EXPECT_EQ(plan.persistentBytes, 192u);
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[4], 128u);
  EXPECT_EQ(plan.offsets[1], 192u);
  EXPECT_EQ(plan.offsets[5], 192u);
  EXPECT_EQ(plan.offsets[7], 0u); // an alias of a persistent buffer is part of it
  EXPECT_EQ(plan.pinnedBytes, 256u);
  EXPECT_EQ(plan.arenaBytes, 256u + 2 * 640u);
  EXPECT_EQ(plan.totalBytes, 192u + 64 + 2 * 640 + 64 + 1024);
}

TEST(MemoryPlanner, RejectsAliasesAcrossFunctions) {
  std::vector<BufferRequest> rs = {in(0, temp(64, 0, 1)), in(1, temp(64, 0, 1))};
  rs[1].aliasOf = 0;
  MemoryPlanResult r = planMemory(rs);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.error, "buffer 1 of function 1 aliases buffer 0 of function 0");
  std::vector<BufferRequest> ps = {in(0, temp(64, 0, 1)), persistent(64)};
  ps[1].aliasOf = 0;
  r = planMemory(ps);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.error, "buffer 1 is persistent but aliases buffer 0, which is not");
}

TEST(MemoryPlanner, RandomProgramsOfSeveralFunctionsNeverOverlapLiveBuffers) {
  std::mt19937_64 rng(99);
  for (int program = 0; program < 200; ++program) {
    size_t functions = 1 + rng() % 3, count = 1 + rng() % 50;
    std::vector<BufferRequest> rs;
    for (size_t i = 0; i < count; ++i) {
      uint64_t bytes = rng() % 3000;
      size_t function = rng() % functions;
      switch (rng() % 6) {
      case 0:
        rs.push_back(persistent(bytes));
        break;
      case 1:
        rs.push_back(in(function, pinned(bytes)));
        break;
      default: {
        int64_t def = rng() % 20;
        rs.push_back(in(function, temp(bytes, def, def + static_cast<int64_t>(rng() % 6))));
      }
      }
      // Aliases only where they are legal: of a persistent root or within the function.
      if (i > 0 && !rs.back().persistent && rng() % 5 == 0) {
        size_t target = rng() % i;
        const BufferRequest &root = rs[rootOf(rs, target)];
        if (root.persistent || root.function == rs.back().function)
          rs.back().aliasOf = target;
      }
    }
    MemoryPlanResult result = planMemory(rs);
    ASSERT_TRUE(result.plan) << result.error;
    expectValidProgram(rs, *result.plan);
    if (HasFailure()) {
      ADD_FAILURE() << "program " << program;
      return;
    }
  }
}
