// Ring attention's block kernels (runtime/cpu/RingAttention.h) against the dense causal
// Attention and AttentionGrad: cp ranks simulated in one process, each holding its 2 load-balanced
// chunks of a sequence, its blocks visited in ring order (its own, then the previous rank's, ...);
// the backward's dk and dv accumulated as they travel. MHA, GQA, MQA at cp 2 and 4, f64 and f32.
#include "runtime/cpu/RingAttention.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/plan/RingScratch.h"

#include "CpAttentionFixtures.h"
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

/// Rows `positions` of x [b, S, h, d] along dim 1.
HostTensor rows(const HostTensor &x, const std::vector<int64_t> &positions) {
  int64_t b = x.shape[0], seq = x.shape[1], inner = x.shape[2] * x.shape[3];
  auto n = static_cast<int64_t>(positions.size());
  HostTensor out = HostTensor::zeros(x.dtype, {b, n, x.shape[2], x.shape[3]});
  size_t row = size_t(inner) * dtypeSize(x.dtype);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out.bytes.data() + size_t(bi * n + i) * row,
                  x.bytes.data() + size_t(bi * seq + positions[size_t(i)]) * row, row);
  return out;
}

double at(const HostTensor &t, size_t i) {
  return t.dtype == DType::f32 ? double(reinterpret_cast<const float *>(t.bytes.data())[i])
                               : reinterpret_cast<const double *>(t.bytes.data())[i];
}

/// |got - want| <= atol + rtol |want|, elementwise.
void expectClose(const HostTensor &got, const HostTensor &want, double atol, double rtol,
                 const std::string &what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  size_t n = got.bytes.size() / dtypeSize(got.dtype), bad = 0;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double e = std::abs(at(got, i) - at(want, i)) - (atol + rtol * std::abs(at(want, i)));
    if (e > 0 || std::isnan(at(got, i)))
      ++bad;
    worst = std::max(worst, e);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements off (worst excess "
                     << worst << ")";
}

struct Case {
  const char *name;
  int64_t b, h, hk, d, seq, cp;
};

/// The additive key padding mask [b, 1, 1, seq] in the original order: row 0 padded on the left
/// (positions 0..2: its first queries see only padding), the others on the right (the last 2).
HostTensor paddingMask(DType dtype, int64_t b, int64_t seq) {
  std::vector<double> m;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t p = 0; p < seq; ++p)
      m.push_back((bi == 0 ? p < 3 : p >= seq - 2) ? -std::numeric_limits<double>::infinity()
                                                   : 0.0);
  std::vector<int64_t> shape{b, 1, 1, seq};
  return dtype == DType::f32 ? f32(shape, std::vector<float>(m.begin(), m.end())) : f64(shape, m);
}

/// Entries `positions` of a key mask [b, 1, 1, seq] along its last dim.
HostTensor maskKeys(const HostTensor &m, const std::vector<int64_t> &positions) {
  int64_t b = m.shape[0], seq = m.shape[3];
  auto n = static_cast<int64_t>(positions.size());
  HostTensor out = HostTensor::zeros(m.dtype, {b, 1, 1, n});
  size_t e = dtypeSize(m.dtype);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out.bytes.data() + size_t(bi * n + i) * e,
                  m.bytes.data() + size_t(bi * seq + positions[size_t(i)]) * e, e);
  return out;
}

/// `padded`: with the key padding mask above, travelling with each block (and its gradient
/// accumulated per block like dk and dv), against the dense kernels with the same mask.
void checkRing(const Case &c, DType dtype, bool padded = false) {
  SCOPED_TRACE(std::string(c.name) + (dtype == DType::f32 ? " f32" : " f64") +
               (padded ? " padded" : ""));
  // Error model: the online merge rescales each row's partial sums once per block (cp blocks,
  // two halves each), a few roundings of the inputs' precision per element on values of order 1
  // (|q|,|k|,|v| <= 1.5, d <= 8): f64 within 1e-12, f32 within 2e-5 (about 170 ulps).
  double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
  int64_t seq = c.seq, cp = c.cp, s = seq / cp;
  HostTensor q = randomTensor(dtype, {c.b, seq, c.h, c.d}, 11),
             k = randomTensor(dtype, {c.b, seq, c.hk, c.d}, 12);
  HostTensor v = randomTensor(dtype, {c.b, seq, c.hk, c.d}, 13);
  HostTensor dout = randomTensor(dtype, {c.b, seq, c.h, c.d}, 14);
  const double scale = 0.4;
  // The dense reference over the whole sequence, causal (and padded).
  HostTensor mask = paddingMask(dtype, c.b, seq), dmask = HostTensor::zeros(dtype, mask.shape);
  TensorRef maskRef = refOf(mask), dmaskRef = refOf(dmask);
  const TensorRef *denseMask = padded ? &maskRef : nullptr;
  HostTensor out = HostTensor::zeros(dtype, q.shape);
  ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), denseMask, true, scale, refOf(out)).isOk());
  HostTensor dq = HostTensor::zeros(dtype, q.shape), dk = HostTensor::zeros(dtype, k.shape);
  HostTensor dv = HostTensor::zeros(dtype, v.shape);
  ASSERT_TRUE(attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), denseMask, true, scale,
                            refOf(dq), refOf(dk), refOf(dv), padded ? &dmaskRef : nullptr)
                  .isOk());

  std::vector<int64_t> order = loadBalanced(seq, cp);
  struct Rank {
    std::vector<int64_t> pos;
    HostTensor q, k, v, dout, qp, out, dq, mask;
    RingRowStats stats;
    std::vector<double> delta;
  };
  std::vector<Rank> ranks(static_cast<size_t>(cp));
  for (int64_t r = 0; r < cp; ++r) {
    Rank &x = ranks[size_t(r)];
    x.pos.assign(order.begin() + r * s, order.begin() + (r + 1) * s);
    x.q = rows(q, x.pos), x.k = rows(k, x.pos), x.v = rows(v, x.pos);
    x.dout = rows(dout, x.pos), x.qp = i64({s}, x.pos), x.mask = maskKeys(mask, x.pos);
    x.out = HostTensor::zeros(dtype, x.q.shape), x.dq = HostTensor::zeros(dtype, x.q.shape);
  }
  // Forward: rank r visits the blocks of r, r - 1, ... (the order the ring brings them).
  for (int64_t r = 0; r < cp; ++r) {
    Rank &x = ranks[size_t(r)];
    ASSERT_TRUE(ringAttentionBegin(refOf(x.q), refOf(x.out), x.stats).isOk());
    for (int64_t step = 0; step < cp; ++step) {
      const Rank &o = ranks[size_t((r - step + cp) % cp)];
      TensorRef om = refOf(o.mask);
      Status st = ringAttentionBlock(refOf(x.q), refOf(o.k), refOf(o.v), refOf(x.qp), refOf(o.qp),
                                     scale, refOf(x.out), x.stats, padded ? &om : nullptr);
      ASSERT_TRUE(st.isOk()) << st.message();
    }
    ASSERT_TRUE(ringAttentionEnd(refOf(x.out), x.stats).isOk());
    expectClose(x.out, rows(out, x.pos), tol, tol, "out of rank " + std::to_string(r));
    x.delta.assign(size_t(x.q.shape[0] * x.q.shape[1] * x.q.shape[2]), 0.0); // b·s·h rows
    ASSERT_TRUE(ringAttentionDelta(refOf(x.dout), refOf(x.out), x.delta).isOk());
  }
  // Backward: block o's dk and dv accumulate over every rank's queries.
  std::vector<HostTensor> blockDk, blockDv, blockDm;
  for (int64_t o = 0; o < cp; ++o) {
    blockDk.push_back(HostTensor::zeros(dtype, ranks[size_t(o)].k.shape));
    blockDv.push_back(HostTensor::zeros(dtype, ranks[size_t(o)].v.shape));
    blockDm.push_back(HostTensor::zeros(dtype, ranks[size_t(o)].mask.shape));
  }
  for (int64_t r = 0; r < cp; ++r) {
    Rank &x = ranks[size_t(r)];
    for (int64_t step = 0; step < cp; ++step) {
      auto oi = size_t((r - step + cp) % cp);
      const Rank &o = ranks[oi];
      TensorRef om = refOf(o.mask), odm = refOf(blockDm[oi]);
      Status st = ringAttentionGradBlock(refOf(x.dout), refOf(x.q), refOf(o.k), refOf(o.v),
                                         refOf(x.qp), refOf(o.qp), scale, x.stats, x.delta,
                                         refOf(x.dq), refOf(blockDk[oi]), refOf(blockDv[oi]),
                                         padded ? &om : nullptr, padded ? &odm : nullptr);
      ASSERT_TRUE(st.isOk()) << st.message();
    }
  }
  for (int64_t r = 0; r < cp; ++r) {
    const Rank &x = ranks[size_t(r)];
    std::string who = " of rank " + std::to_string(r);
    expectClose(x.dq, rows(dq, x.pos), tol, tol, "dq" + who);
    expectClose(blockDk[size_t(r)], rows(dk, x.pos), tol, tol, "dk" + who);
    expectClose(blockDv[size_t(r)], rows(dv, x.pos), tol, tol, "dv" + who);
    if (padded)
      expectClose(blockDm[size_t(r)], maskKeys(dmask, x.pos), tol, tol, "dmask" + who);
  }
}

} // namespace

TEST(RingAttention, BlocksInRingOrderEqualDenseCausalAttention) {
  const Case cases[] = {
      {"cp 2, multi-head", 2, 2, 2, 4, 8, 2},
      {"cp 2, grouped-query", 1, 4, 2, 3, 12, 2},
      {"cp 4, multi-query, odd head dim", 2, 3, 1, 5, 16, 4},
      {"cp 4, grouped-query", 1, 4, 2, 8, 24, 4},
  };
  for (const Case &c : cases)
    for (DType dtype : {DType::f64, DType::f32})
      checkRing(c, dtype);
}

// Padded inputs: each block's key padding mask travels with it, and its gradient with dk and
// dv; queries that see only padding (row 0's first three) give zeros, not NaN. Same error model.
TEST(RingAttention, PaddedBlocksEqualDenseMaskedCausalAttention) {
  const Case cases[] = {
      {"cp 2, multi-head", 2, 2, 2, 4, 8, 2},
      {"cp 4, grouped-query", 2, 4, 2, 8, 24, 4},
  };
  for (const Case &c : cases)
    for (DType dtype : {DType::f64, DType::f32})
      checkRing(c, dtype, true);
}

// A block wholly after every query leaves the output and the statistics untouched (skipped).
TEST(RingAttention, FutureBlockIsSkipped) {
  HostTensor q = randomTensor(DType::f64, {1, 2, 1, 2}, 21),
             k = randomTensor(DType::f64, {1, 2, 1, 2}, 22);
  HostTensor out = HostTensor::zeros(DType::f64, q.shape);
  HostTensor qp = i64({2}, {0, 1}), kp = i64({2}, {2, 3});
  RingRowStats stats;
  ASSERT_TRUE(ringAttentionBegin(refOf(q), refOf(out), stats).isOk());
  ASSERT_TRUE(
      ringAttentionBlock(refOf(q), refOf(k), refOf(k), refOf(qp), refOf(kp), 1.0, refOf(out), stats)
          .isOk());
  for (double m : stats.max)
    EXPECT_EQ(m, -std::numeric_limits<double>::infinity());
  ASSERT_TRUE(ringAttentionEnd(refOf(out), stats).isOk());
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(at(out, i), 0.0); // a row that saw no key is 0, as Attention's
}

TEST(RingAttention, MalformedCallsAreErrorsNamingThem) {
  HostTensor q = randomTensor(DType::f64, {1, 4, 1, 2}, 23),
             out = HostTensor::zeros(DType::f64, q.shape);
  HostTensor good = i64({4}, {0, 1, 2, 3}), narrow = i32({4}, {0, 1, 2, 3});
  RingRowStats stats;
  Status s = ringAttentionBlock(refOf(q), refOf(q), refOf(q), refOf(good), refOf(good), 1.0,
                                refOf(out), stats);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("run ringAttentionBegin first"), std::string::npos) << s.message();
  ASSERT_TRUE(ringAttentionBegin(refOf(q), refOf(out), stats).isOk());
  s = ringAttentionBlock(refOf(q), refOf(q), refOf(q), refOf(good), refOf(narrow), 1.0, refOf(out),
                         stats);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("RingAttention: key positions are i32, expected i64"),
            std::string::npos)
      << s.message();
}

// Statistics over too few rows (a plan's scratch cut for other shapes) are refused by name.
TEST(RingAttention, StatisticsOfTheWrongSizeAreRefused) {
  HostTensor q = randomTensor(DType::f64, {1, 4, 2, 2}, 24),
             out = HostTensor::zeros(DType::f64, q.shape);
  std::vector<double> max(3), sum(3); // b·s·h = 8 rows needed
  RingRowStats stats(max, sum);
  Status s = ringAttentionBegin(refOf(q), refOf(out), stats);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("row statistics hold 3 rows"), std::string::npos) << s.message();
  std::vector<double> delta(3);
  s = ringAttentionDelta(refOf(out), refOf(out), delta);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("delta holds 3 rows"), std::string::npos) << s.message();
}

// The ring's plan scratch (runtime/plan/RingScratch.h): regions 64-byte aligned, disjoint, in
// order, each of its closed-form size; the backward adds the dk/dv blocks, the recomputed output
// and delta.
TEST(RingAttention, ScratchLayoutHoldsEveryRegion) {
  plan::RingDims d{2, 6, 4, 8, 6, 2, 8, 4}; // b, s, h, d, t, hk, dv, f32
  uint64_t kv = 2 * 6 * 2 * 8 * 4, rows = 2 * 4 * 6;
  plan::RingScratchLayout f = plan::ringScratchLayout(d, false);
  EXPECT_EQ(f.blockBytes, 8 * 6 + 2 * kv);
  EXPECT_EQ(f.rows, rows);
  plan::RingScratchLayout b = plan::ringScratchLayout(d, true);
  EXPECT_EQ(b.gradBytes, 2 * kv);
  // A padded ring's key mask [b, 1, 1, t] travels with each block, its gradient with dk, dv.
  plan::RingDims padded = d;
  padded.mask = true;
  uint64_t maskBytes = 2 * 6 * 4;
  EXPECT_EQ(plan::ringScratchLayout(padded, false).blockBytes, 8 * 6 + maskBytes + 2 * kv);
  EXPECT_EQ(plan::ringScratchLayout(padded, true).gradBytes, 2 * kv + maskBytes);
  auto aligned = [](uint64_t n) { return (n + 63) / 64 * 64; };
  std::vector<std::pair<uint64_t, uint64_t>> regions{{b.blocks[0], b.blockBytes},
                                                     {b.blocks[1], b.blockBytes},
                                                     {b.gradBlocks[0], b.gradBytes},
                                                     {b.gradBlocks[1], b.gradBytes},
                                                     {b.output, 2 * 6 * 4 * 8 * 4},
                                                     {b.max, 8 * rows},
                                                     {b.sum, 8 * rows},
                                                     {b.delta, 8 * rows}};
  uint64_t end = 0;
  for (auto [offset, bytes] : regions) {
    EXPECT_EQ(offset % 64, 0u);
    EXPECT_GE(offset, end);
    end = offset + aligned(bytes);
  }
  EXPECT_EQ(b.bytes, end);
  EXPECT_EQ(b.words(), (end + 7) / 8);
  EXPECT_EQ(f.bytes, 2 * aligned(f.blockBytes) + 2 * aligned(8 * rows));
}
