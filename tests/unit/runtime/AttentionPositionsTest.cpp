// Attention and AttentionGrad by query/key positions (causal by global position, context
// parallelism's kernels) against the dense-mask path they replace and against `causal`: the
// same probabilities bit for bit (a masked score is -inf either way, an unmasked one unchanged),
// so outputs and gradients are compared for equality in f64 and f32; and their errors.
#include "runtime/cpu/Kernels.h"

#include "CpAttentionFixtures.h"
#include "TestUtil.h"

#include <cmath>
#include <limits>
#include <numeric>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

/// The dense additive mask [s, t] of the same rule: 0 where kpos[j] <= qpos[i], else -inf.
HostTensor denseMask(DType dtype, const std::vector<int64_t> &qpos,
                     const std::vector<int64_t> &kpos) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> m;
  for (int64_t qi : qpos)
    for (int64_t kj : kpos)
      m.push_back(kj <= qi ? 0.0 : -inf);
  std::vector<int64_t> shape{int64_t(qpos.size()), int64_t(kpos.size())};
  if (dtype == DType::f32)
    return f32(shape, std::vector<float>(m.begin(), m.end()));
  return f64(shape, m);
}

void expectSameBytes(const HostTensor &got, const HostTensor &want, const char *what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  EXPECT_TRUE(got.bytes == want.bytes) << what << " differs from the dense-mask path";
}

struct Case {
  const char *name;
  int64_t b, h, hk, d, seq, cp, rank;
};

/// One cp rank's attention: its S / cp permuted queries against all S keys (in permuted order),
/// by positions and by the dense mask; forward and backward must agree exactly.
void checkAgainstDenseMask(const Case &c, DType dtype) {
  SCOPED_TRACE(std::string(c.name) + (dtype == DType::f32 ? " f32" : " f64"));
  std::vector<int64_t> order = loadBalanced(c.seq, c.cp);
  int64_t s = c.seq / c.cp, t = c.seq;
  std::vector<int64_t> qpos(order.begin() + c.rank * s, order.begin() + (c.rank + 1) * s);
  HostTensor q = randomTensor(dtype, {c.b, s, c.h, c.d}, 1),
             k = randomTensor(dtype, {c.b, t, c.hk, c.d}, 2);
  HostTensor v = randomTensor(dtype, {c.b, t, c.hk, c.d}, 3),
             dout = randomTensor(dtype, {c.b, s, c.h, c.d}, 4);
  HostTensor qp = i64({s}, qpos), kp = i64({t}, order), mask = denseMask(dtype, qpos, order);
  TensorRef qpr = refOf(qp), kpr = refOf(kp), mr = refOf(mask);
  AttentionPositions positions{&qpr, &kpr};
  const double scale = 0.3;

  HostTensor byPositions = HostTensor::zeros(dtype, q.shape), byMask = byPositions;
  ASSERT_TRUE(
      attention(refOf(q), refOf(k), refOf(v), nullptr, false, scale, refOf(byPositions), positions)
          .isOk());
  ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), &mr, false, scale, refOf(byMask)).isOk());
  expectSameBytes(byPositions, byMask, "out");

  HostTensor dq = HostTensor::zeros(dtype, q.shape), dk = HostTensor::zeros(dtype, k.shape);
  HostTensor dv = HostTensor::zeros(dtype, v.shape);
  HostTensor dqM = dq, dkM = dk, dvM = dv, dmask = HostTensor::zeros(dtype, mask.shape);
  TensorRef dmr = refOf(dmask);
  Status st = attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), nullptr, false, scale,
                            refOf(dq), refOf(dk), refOf(dv), nullptr, positions);
  ASSERT_TRUE(st.isOk()) << st.message();
  st = attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), &mr, false, scale, refOf(dqM),
                     refOf(dkM), refOf(dvM), &dmr);
  ASSERT_TRUE(st.isOk()) << st.message();
  expectSameBytes(dq, dqM, "dq");
  expectSameBytes(dk, dkM, "dk");
  expectSameBytes(dv, dvM, "dv");
  // The positions are a real causal rule: some keys are hidden from the rank's first query.
  int64_t hidden = 0;
  for (int64_t kj : order)
    hidden += kj > qpos.front();
  EXPECT_GT(hidden, 0);
}

} // namespace

TEST(AttentionPositions, MatchTheDenseMaskOfGlobalPositionsExactly) {
  const Case cases[] = {
      {"cp 2 rank 0, multi-head", 2, 2, 2, 4, 8, 2, 0},
      {"cp 2 rank 1, grouped-query", 1, 4, 2, 3, 8, 2, 1},
      {"cp 4 rank 2, multi-query, odd head dim", 2, 3, 1, 5, 16, 4, 2},
  };
  for (const Case &c : cases)
    for (DType dtype : {DType::f64, DType::f32})
      checkAgainstDenseMask(c, dtype);
}

// Context parallelism of padded inputs: positions and an additive key-padding mask [b, 1, 1, t]
// (0 kept, -inf padding; the keys permuted like the sequence) give the same bits as the one dense
// mask [b, 1, s, t] holding both rules; a query whose every visible key is padding (left padding
// at the start of a row) is a row of zeros, forward and backward, with no NaN.
TEST(AttentionPositions, WithAPaddingMaskMatchTheCombinedDenseMaskExactly) {
  const double inf = std::numeric_limits<double>::infinity();
  int64_t b = 2, h = 4, hk = 2, d = 3, seq = 8, cp = 2, s = seq / cp;
  std::vector<int64_t> order = loadBalanced(seq, cp); // 0 1 6 7 | 2 3 4 5
  for (int64_t rank : {0, 1})
    for (DType dtype : {DType::f64, DType::f32}) {
      SCOPED_TRACE("rank " + std::to_string(rank) + (dtype == DType::f32 ? " f32" : " f64"));
      std::vector<int64_t> qpos(order.begin() + rank * s, order.begin() + (rank + 1) * s);
      // Row 0 left-padded (positions 0..2 padding), row 1 right-padded (positions 5..7).
      auto padded = [](int64_t bi, int64_t p) { return bi == 0 ? p < 3 : p >= 5; };
      std::vector<double> pad, both;
      for (int64_t bi = 0; bi < b; ++bi) {
        for (int64_t kj : order)
          pad.push_back(padded(bi, kj) ? -inf : 0.0);
        for (int64_t qi : qpos)
          for (int64_t kj : order)
            both.push_back(kj <= qi && !padded(bi, kj) ? 0.0 : -inf);
      }
      auto tensor = [&](std::vector<int64_t> shape, const std::vector<double> &x) {
        return dtype == DType::f32 ? f32(shape, std::vector<float>(x.begin(), x.end()))
                                   : f64(shape, x);
      };
      HostTensor mask = tensor({b, 1, 1, seq}, pad), dense = tensor({b, 1, s, seq}, both);
      HostTensor q = randomTensor(dtype, {b, s, h, d}, 11),
                 k = randomTensor(dtype, {b, seq, hk, d}, 12);
      HostTensor v = randomTensor(dtype, {b, seq, hk, d}, 13),
                 dout = randomTensor(dtype, {b, s, h, d}, 14);
      HostTensor qp = i64({s}, qpos), kp = i64({seq}, order);
      TensorRef qpr = refOf(qp), kpr = refOf(kp), mr = refOf(mask), dr = refOf(dense);
      HostTensor out = HostTensor::zeros(dtype, q.shape), outDense = out;
      ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), &mr, false, 0.4, refOf(out), {&qpr, &kpr})
                      .isOk());
      ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), &dr, false, 0.4, refOf(outDense)).isOk());
      expectSameBytes(out, outDense, "out");
      HostTensor dq = HostTensor::zeros(dtype, q.shape), dk = HostTensor::zeros(dtype, k.shape);
      HostTensor dv = HostTensor::zeros(dtype, v.shape), dqD = dq, dkD = dk, dvD = dv;
      HostTensor dmask = HostTensor::zeros(dtype, mask.shape),
                 dmaskD = HostTensor::zeros(dtype, dense.shape);
      TensorRef dmr = refOf(dmask), ddr = refOf(dmaskD);
      Status st = attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), &mr, false, 0.4,
                                refOf(dq), refOf(dk), refOf(dv), &dmr, {&qpr, &kpr});
      ASSERT_TRUE(st.isOk()) << st.message();
      st = attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), &dr, false, 0.4, refOf(dqD),
                         refOf(dkD), refOf(dvD), &ddr);
      ASSERT_TRUE(st.isOk()) << st.message();
      expectSameBytes(dq, dqD, "dq");
      expectSameBytes(dk, dkD, "dk");
      expectSameBytes(dv, dvD, "dv");
      for (const HostTensor *x : {&out, &dq, &dk, &dv, &dmask})
        for (int64_t i = 0; i < x->numElements(); ++i)
          ASSERT_TRUE(std::isfinite(dtype == DType::f32 ? double(x->data<float>()[i])
                                                        : x->data<double>()[i]));
      // Rank 0's first queries (positions 0 and 1) of row 0 see only padding: zero rows.
      if (rank == 0)
        for (int64_t i = 0; i < 2 * h * d; ++i)
          EXPECT_EQ(dtype == DType::f32 ? double(out.data<float>()[i]) : out.data<double>()[i],
                    0.0);
    }
}

TEST(AttentionPositions, IdentityPositionsAreCausal) {
  int64_t b = 2, s = 7, h = 2, d = 4;
  HostTensor q = randomTensor(DType::f64, {b, s, h, d}, 5),
             k = randomTensor(DType::f64, {b, s, h, d}, 6);
  HostTensor v = randomTensor(DType::f64, {b, s, h, d}, 7),
             dout = randomTensor(DType::f64, {b, s, h, d}, 8);
  std::vector<int64_t> iota(s);
  std::iota(iota.begin(), iota.end(), 0);
  HostTensor pos = i64({s}, iota);
  TensorRef pr = refOf(pos);
  HostTensor byPositions = HostTensor::zeros(DType::f64, q.shape), causal = byPositions;
  ASSERT_TRUE(
      attention(refOf(q), refOf(k), refOf(v), nullptr, false, 0.5, refOf(byPositions), {&pr, &pr})
          .isOk());
  ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), nullptr, true, 0.5, refOf(causal)).isOk());
  expectSameBytes(byPositions, causal, "out");
  HostTensor dq = HostTensor::zeros(DType::f64, q.shape), dk = dq, dv = dq;
  HostTensor dqC = dq, dkC = dq, dvC = dq;
  ASSERT_TRUE(attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), nullptr, false, 0.5,
                            refOf(dq), refOf(dk), refOf(dv), nullptr, {&pr, &pr})
                  .isOk());
  ASSERT_TRUE(attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), nullptr, true, 0.5,
                            refOf(dqC), refOf(dkC), refOf(dvC), nullptr)
                  .isOk());
  expectSameBytes(dq, dqC, "dq");
  expectSameBytes(dk, dkC, "dk");
  expectSameBytes(dv, dvC, "dv");
}

TEST(AttentionPositions, MalformedPositionsAreErrorsNamingThem) {
  HostTensor q = randomTensor(DType::f64, {1, 4, 1, 2}, 9),
             out = HostTensor::zeros(DType::f64, q.shape);
  HostTensor good = i64({4}, {0, 1, 2, 3}), shortPos = i64({3}, {0, 1, 2});
  HostTensor narrow = i32({4}, {0, 1, 2, 3});
  TensorRef g = refOf(good), sp = refOf(shortPos), nr = refOf(narrow);
  auto message = [&](AttentionPositions p, bool causal) {
    Status s = attention(refOf(q), refOf(q), refOf(q), nullptr, causal, 1.0, refOf(out), p);
    return s.isOk() ? std::string("ok") : s.message();
  };
  EXPECT_NE(message({&g, nullptr}, false).find("both or neither"), std::string::npos);
  EXPECT_NE(message({&g, &g}, true).find("not with causal"), std::string::npos);
  EXPECT_NE(message({&g, &sp}, false).find("key positions [3] must be [4]"), std::string::npos);
  EXPECT_NE(message({&nr, &g}, false).find("query positions are i32, expected i64"),
            std::string::npos);
  EXPECT_EQ(message({&g, &g}, false), "ok");
  HostTensor dq = HostTensor::zeros(DType::f64, q.shape), dk = dq, dv = dq;
  Status s = attentionGrad(refOf(q), refOf(q), refOf(q), refOf(q), nullptr, false, 1.0, refOf(dq),
                           refOf(dk), refOf(dv), nullptr, {&g, &sp});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("AttentionGrad: key positions [3] must be [4]"), std::string::npos)
      << s.message();
}
