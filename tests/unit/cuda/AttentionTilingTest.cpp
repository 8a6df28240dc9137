// The fused attention kernels' tiling emulated on the host (runtime/cuda/kernels/
// AttentionTiling.h): for many shapes, the (query, key) pairs each kernel's loops visit and keep
// against a brute-force causal mask, and the block reduction's combining pattern against a serial
// sum and max. Runs without a GPU.
#include "runtime/cuda/kernels/AttentionTiling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace megac::runtime::cuda {
namespace {

using namespace tiling;

struct Case {
  int64_t s, t;
  bool causal;
};

std::string describe(const Case &c, int rows, int tile) {
  return "s " + std::to_string(c.s) + ", t " + std::to_string(c.t) + (c.causal ? ", causal" : "") +
         ", " + std::to_string(rows) + " rows per block, tiles of " + std::to_string(tile);
}

/// The mask every kernel must implement: key j is visible to query i iff j < t and, when causal,
/// j <= i + (t - s) (the queries are the last s of the t positions).
bool bruteVisible(const Case &c, int64_t i, int64_t j) {
  return i >= 0 && i < c.s && j >= 0 && j < c.t && (!c.causal || j <= i + (c.t - c.s));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t sizes[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200};
  for (int64_t s : sizes)
    for (int64_t t : sizes)
      for (bool causal : {false, true})
        out.push_back({s, t, causal});
  return out;
}

/// Counts per (i, j) of the pairs a query-tiled kernel (flashForward, flashGradQ and their WMMA
/// versions) keeps: a block per `rows` queries from q0, key tiles of `tile` from 0 while
/// k0 < attnKeyEnd, a pair kept when i < s and j < attnVisible(i) (what the kernels test).
/// `emptyTiles` counts visited tiles in which no pair is kept (work past the limits).
std::vector<int> queryTiledPairs(const Case &c, int rows, int tile, int &emptyTiles) {
  std::vector<int> seen(c.s * c.t, 0);
  emptyTiles = 0;
  for (int64_t q0 = 0; q0 < c.s; q0 += rows) {
    int64_t kEnd = attnKeyEnd(c.causal, c.s, c.t, q0, rows);
    for (int64_t k0 = 0; k0 < kEnd; k0 += tile) {
      int kept = 0;
      for (int64_t i = q0; i < q0 + rows; ++i) {
        if (i >= c.s)
          break;
        int64_t vis = attnVisible(c.causal, c.s, c.t, i);
        for (int64_t j = k0; j < k0 + tile; ++j)
          if (j < vis) {
            ++seen[i * c.t + j];
            ++kept;
          }
      }
      emptyTiles += kept == 0;
    }
  }
  return seen;
}

/// The same for the key-tiled kernels (flashGradKV and its WMMA version): a block per `rows` keys
/// from k0, query tiles of `tile` from attnQueryStart to s, a pair kept when j < t, i < s and
/// j < attnVisible(i).
std::vector<int> keyTiledPairs(const Case &c, int rows, int tile, int &emptyTiles) {
  std::vector<int> seen(c.s * c.t, 0);
  emptyTiles = 0;
  for (int64_t k0 = 0; k0 < c.t; k0 += rows) {
    for (int64_t i0 = attnQueryStart(c.causal, c.s, c.t, k0); i0 < c.s; i0 += tile) {
      int kept = 0;
      for (int64_t j = k0; j < k0 + rows && j < c.t; ++j)
        for (int64_t i = i0; i < i0 + tile; ++i)
          if (i < c.s && j < attnVisible(c.causal, c.s, c.t, i)) {
            ++seen[i * c.t + j];
            ++kept;
          }
      emptyTiles += kept == 0;
    }
  }
  return seen;
}

/// Every pair of the brute-force mask kept exactly once, no other pair kept; with causal, no
/// tile visited in which nothing is kept.
void expectMatchesMask(const Case &c, const std::vector<int> &seen, int emptyTiles,
                       const std::string &what) {
  int wrong = 0;
  for (int64_t i = 0; i < c.s; ++i)
    for (int64_t j = 0; j < c.t; ++j) {
      int want = bruteVisible(c, i, j) ? 1 : 0;
      if (seen[i * c.t + j] != want && ++wrong <= 3)
        ADD_FAILURE() << what << ": pair (q " << i << ", k " << j << ") kept " << seen[i * c.t + j]
                      << " times, the mask says " << want;
    }
  EXPECT_EQ(wrong, 0) << what;
  // A tile with nothing visible for any row is work past the limits (only causal skips tiles;
  // without causal a short s or t can still leave a padded tile, which is not wasted).
  if (c.causal) {
    EXPECT_EQ(emptyTiles, 0) << what << ": tiles visited past the causal limit";
  }
}

TEST(AttentionTiling, VisibleIsTheBruteForceMask) {
  for (const Case &c : cases())
    for (int64_t i = 0; i < c.s; ++i) {
      int64_t count = 0;
      for (int64_t j = 0; j < c.t; ++j)
        count += bruteVisible(c, i, j);
      // The visible keys are a prefix: the count is the limit.
      ASSERT_EQ(attnVisible(c.causal, c.s, c.t, i), count)
          << "s " << c.s << ", t " << c.t << ", causal " << c.causal << ", query " << i;
    }
}

TEST(AttentionTiling, ForwardAndGradQVisitEveryVisiblePairOnce) {
  // (rows per block, key tile): the SIMT kernels and the WMMA kernels.
  const int shapes[][2] = {{kSimtBQ, kSimtBK}, {kWmmaBQ, kWmmaBK}};
  for (const Case &c : cases())
    for (const auto &shape : shapes) {
      int empty = 0;
      std::vector<int> seen = queryTiledPairs(c, shape[0], shape[1], empty);
      expectMatchesMask(c, seen, empty, "query-tiled, " + describe(c, shape[0], shape[1]));
      if (HasFailure())
        return;
    }
}

TEST(AttentionTiling, GradKVVisitsEveryVisiblePairOnce) {
  // (keys per block, query tile): flashGradKV (16 keys, tiles of 32) and flashGradKVWmma (64, 64).
  const int shapes[][2] = {{kSimtBQ, kSimtBK}, {kWmmaBQ, kWmmaBK}};
  for (const Case &c : cases())
    for (const auto &shape : shapes) {
      int empty = 0;
      std::vector<int> seen = keyTiledPairs(c, shape[0], shape[1], empty);
      expectMatchesMask(c, seen, empty, "key-tiled, " + describe(c, shape[0], shape[1]));
      if (HasFailure())
        return;
    }
}

TEST(AttentionTiling, TheGpt13BShapeTilesExactly) {
  // seq 2048, causal self-attention: one check at the benchmark's size (rows per block 64).
  Case c{2048, 2048, true};
  int empty = 0;
  std::vector<int> seen = queryTiledPairs(c, kWmmaBQ, kWmmaBK, empty);
  expectMatchesMask(c, seen, empty, "query-tiled, " + describe(c, kWmmaBQ, kWmmaBK));
  seen = keyTiledPairs(c, kWmmaBQ, kWmmaBK, empty);
  expectMatchesMask(c, seen, empty, "key-tiled, " + describe(c, kWmmaBQ, kWmmaBK));
}

// ---- Block reduction ---------------------------------------------------------------------------

/// blockReduce (BlockReduce.cuh) emulated lane by lane: each warp's xor-shuffle tree, the warps'
/// partials, then warp 0's lanes combining per reducePartialSlot / reduceTakesPartner; returns
/// what lane 0 of warp 0 broadcasts. Every warp of the second stage computes the same; lane 0's
/// value is what __shfl_sync(.., 0) hands every thread.
template <typename A, typename Op> A emulateBlockReduce(const std::vector<A> &v, Op op) {
  int threads = static_cast<int>(v.size()), warps = threads / 32;
  std::vector<A> partial(32);
  for (int w = 0; w < warps; ++w) {
    std::vector<A> lanes(v.begin() + w * 32, v.begin() + (w + 1) * 32);
    for (int o = 16; o > 0; o >>= 1) {
      std::vector<A> next(32);
      for (int lane = 0; lane < 32; ++lane)
        next[lane] = op(lanes[lane], lanes[lane ^ o]);
      lanes = next;
    }
    for (int lane = 0; lane < 32; ++lane) // every lane of the warp holds the warp's total
      EXPECT_TRUE(lanes[lane] == lanes[0] || (lanes[lane] != lanes[lane] && lanes[0] != lanes[0]))
          << "warp " << w << " lane " << lane;
    partial[w] = lanes[0];
  }
  std::vector<A> r(32);
  for (int lane = 0; lane < 32; ++lane)
    r[lane] = partial[detail::reducePartialSlot(lane, warps)];
  for (int o = 16; o > 0; o >>= 1) {
    std::vector<A> next = r;
    for (int lane = 0; lane < 32; ++lane)
      if (detail::reduceTakesPartner(lane, o, warps))
        next[lane] = op(r[lane], r[lane ^ o]);
    r = next;
  }
  return r[0];
}

TEST(BlockReduce, TreeGivesTheSerialSumAndMaxForEveryBlockSize) {
  // Every block size the kernels may use (a multiple of 32 up to 1024; rowThreads gives 32..256).
  // Integers make any order exact, so the tree must give the serial sum itself; distinct values
  // per lane make a lost or doubled partial show.
  for (int threads = 32; threads <= 1024; threads += 32) {
    std::vector<int64_t> v(threads);
    int64_t sum = 0, best = std::numeric_limits<int64_t>::min();
    for (int i = 0; i < threads; ++i) {
      v[i] = (int64_t(i) * 7919 % 1009) + (int64_t(1) << (i % 20)); // distinct-ish, no symmetry
      sum += v[i];
      best = std::max(best, v[i]);
    }
    auto add = [](int64_t a, int64_t b) { return a + b; };
    auto max = [](int64_t a, int64_t b) { return a > b ? a : b; };
    ASSERT_EQ(emulateBlockReduce(v, add), sum) << threads << " threads";
    ASSERT_EQ(emulateBlockReduce(v, max), best) << threads << " threads";
    // The maximum in the last warp, and alone: a dropped last partial shows.
    std::vector<int64_t> last(threads, 0);
    last[threads - 1] = 5;
    ASSERT_EQ(emulateBlockReduce(last, max), 5) << threads << " threads";
    ASSERT_EQ(emulateBlockReduce(last, add), 5) << threads << " threads";
  }
}

TEST(BlockReduce, MaxPropagatesNaNFromAnyLane) {
  auto maxNaN = [](float a, float b) { return (a != a || a > b) ? a : b; };
  for (int threads : {32, 64, 96, 128, 256, 1024})
    for (int at : {0, 31, threads - 1}) {
      std::vector<float> v(threads, 1.0f);
      v[at] = std::nanf("");
      EXPECT_TRUE(std::isnan(emulateBlockReduce(v, maxNaN)))
          << threads << " threads, NaN at " << at;
    }
}

// ---- Launch sizes and shared memory against the H200 -------------------------------------------

/// Every fused attention launch for one problem, checked against the H200's limits.
void expectAttentionLaunchesFit(const AttnLaunchShape &shape, const std::string &what) {
  for (AttnKernel k : {AttnKernel::Forward, AttnKernel::GradQ, AttnKernel::GradKV}) {
    LaunchConfig c = attnLaunch(k, shape);
    EXPECT_EQ(launchLimitError(c), "") << what << ", kernel " << static_cast<int>(k);
    EXPECT_EQ(c.block[0], kAttnThreads);
    // The grid covers every query (or key) tile exactly.
    int64_t rows = shape.tensorCores ? kWmmaBQ : kSimtBQ;
    int64_t count = k == AttnKernel::GradKV ? shape.t : shape.s;
    EXPECT_GE(c.grid[0] * rows, count) << what;
    EXPECT_LT((c.grid[0] - 1) * rows, count) << what;
  }
}

TEST(AttentionLaunch, FitsTheH200ForTheTestAndBenchmarkShapes) {
  struct Problem {
    int64_t b, s, h, t, hk, d;
    const char *name;
  };
  const Problem problems[] = {
      // scripts/device-check.sh's benchmark: GPT 1.3B (hidden 2048, seq 2048) at micro-batch 4,
      // as 16 heads of 128 or 32 of 64 (and micro-batch 8 for headroom); GPT-2 124M (12 heads
      // of 64, seq 1024) at micro-batch 16.
      {4, 2048, 16, 2048, 16, 128, "gpt-1.3b heads 16 mb 4"},
      {8, 2048, 16, 2048, 16, 128, "gpt-1.3b heads 16 mb 8"},
      {4, 2048, 32, 2048, 32, 64, "gpt-1.3b heads 32 mb 4"},
      {16, 1024, 12, 1024, 12, 64, "gpt2-124m mb 16"},
      // The unit tests' and executor tests' shapes (small, odd, grouped-query).
      {2, 32, 4, 32, 4, 16, "test gpt"},
      {3, 17, 4, 33, 2, 40, "test gqa odd"},
      {1, 1, 1, 1, 1, 1, "one"},
      // The largest batch and heads the host checks let through (attentionArgs: <= 65535).
      {65535, 64, 65535, 64, 65535, 128, "grid y/z at the limit"},
  };
  for (const Problem &p : problems)
    for (size_t es : {size_t(4), size_t(2)}) {
      int64_t w = p.d;
      int D = w <= 32 ? 32 : (w <= 64 ? 64 : 128);
      AttnLaunchShape shape{p.b, p.s, p.h, p.t, p.hk, D, es, es == 2};
      expectAttentionLaunchesFit(shape, std::string(p.name) + (es == 2 ? " bf16" : " f32"));
    }
}

TEST(AttentionLaunch, SharedMemoryOfEveryHeadDimFits) {
  for (int D : {32, 64, 128})
    for (size_t es : {size_t(2), size_t(4)}) {
      AttnLaunchShape shape{1, 1, 1, 1, 1, D, es, es == 2};
      for (AttnKernel k : {AttnKernel::Forward, AttnKernel::GradQ, AttnKernel::GradKV})
        EXPECT_LE(attnLaunch(k, shape).smem, kMaxDynamicSmemBytes) << "D " << D << " es " << es;
    }
  // The biggest, spelled out: the WMMA dK/dV kernel at D 128 in bf16.
  EXPECT_EQ(wmmaGradKVBytes(128, 2), size_t(190976));
}

TEST(LaunchLimits, RefuseWhatTheH200Refuses) {
  LaunchConfig ok;
  EXPECT_EQ(launchLimitError(ok), "");
  LaunchConfig c = ok;
  c.grid[1] = 65536;
  EXPECT_NE(launchLimitError(c), "");
  c = ok;
  c.grid[0] = int64_t(1) << 31;
  EXPECT_NE(launchLimitError(c), "");
  c = ok;
  c.block[0] = 1025;
  EXPECT_NE(launchLimitError(c), "");
  c = ok;
  c.smem = 227 * 1024 + 1;
  EXPECT_NE(launchLimitError(c), "");
}

TEST(LaunchLimits, GenericHelpersFitForTheBenchmarkShapes) {
  // The element-wise and row kernels launch blocksFor(n) x 256, rowBlocks(rows) x rowThreads(n)
  // (up to 256 threads). GPT 1.3B at micro-batch 8 (the benchmark runs 4): logits 8*2048*50257
  // elements, the attention fallback's probabilities 8*32*2048*2048, rows 8*2048 (norms) and
  // 8*32*2048 (softmax).
  const int64_t ns[] = {0,
                        1,
                        255,
                        257,
                        int64_t(8) * 2048 * 50257,
                        int64_t(8) * 32 * 2048 * 2048,
                        int64_t(24) * 2048 * 2048 * 12,
                        int64_t(1) << 40};
  for (int64_t n : ns) {
    LaunchConfig c;
    c.grid[0] = detail::blocksFor(n);
    c.block[0] = 256;
    EXPECT_EQ(launchLimitError(c), "") << "blocksFor(" << n << ")";
    LaunchConfig r;
    r.grid[0] = detail::rowBlocks(n);
    r.block[0] = detail::rowThreads(n);
    EXPECT_EQ(launchLimitError(r), "") << "rowBlocks/rowThreads(" << n << ")";
    EXPECT_EQ(r.block[0] % 32, 0);
  }
}

TEST(LaunchLimits, TransposeNormAndGroupedGemmFitForTheBenchmarkShapes) {
  // Transposes of the last two dims: GPT 1.3B weights [2048, 8192], the embedding [50257, 2048],
  // attention's [mb * heads, 2048, 64]; a batch past grid.z; tiles past grid.y (gather instead).
  struct T3 {
    int64_t batch, rows, cols;
  };
  for (T3 t : {T3{1, 2048, 8192}, T3{1, 50257, 2048}, T3{8 * 32, 2048, 64}, T3{1000000, 3, 5},
               T3{1, 65535 * 32, 7}}) {
    LaunchConfig c = detail::transposeLastTwoLaunch(t.batch, t.rows, t.cols);
    ASSERT_GT(c.grid[0], 0) << t.rows << " rows";
    EXPECT_EQ(launchLimitError(c), "") << t.batch << " x " << t.rows << " x " << t.cols;
    EXPECT_GE(c.grid[0] * 32, t.cols);
    EXPECT_GE(c.grid[1] * 32, t.rows);
  }
  EXPECT_EQ(detail::transposeLastTwoLaunch(1, 65535 * 32 + 1, 7).grid[0], 0); // gathered instead
  // Norm gradients: rows = micro-batch 8 x seq 2048, hidden 2048; and far more rows.
  for (int64_t rows : {int64_t(1), int64_t(33), int64_t(8) * 2048, int64_t(1) << 40}) {
    LaunchConfig c = detail::normParamPartialsLaunch(rows, 2048);
    EXPECT_EQ(launchLimitError(c), "") << rows << " rows";
    detail::NormChunks k = detail::normGradChunks(rows);
    EXPECT_LE(k.chunks, 1024);
    EXPECT_GE(k.chunks * k.rowsPerChunk, rows);
  }
  // Grouped GEMM: 8 experts over 16384 tokens x 8192, and sizes past every cap.
  for (int64_t scale : {int64_t(1), int64_t(1) << 30}) {
    LaunchConfig c = detail::groupedGemmLaunch(8 * scale, 16384 * scale, 8192 * scale, 64, 64, 256);
    EXPECT_EQ(launchLimitError(c), "") << "scale " << scale;
  }
}

} // namespace
} // namespace megac::runtime::cuda
