// CPU contractions and coarse ops against naive double-precision references: MatMul (batch
// broadcast), Linear, LayerNorm, RmsNorm, Rope (broadcast tables) and Attention (GQA, causal
// with s < t, masks).
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <limits>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

/// Naive batched matmul with numpy batch broadcasting, in double.
std::vector<double> naiveMatmul(const std::vector<double> &a, std::vector<int64_t> as,
                                const std::vector<double> &b, std::vector<int64_t> bs,
                                std::vector<int64_t> batch) {
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  while (ab.size() < batch.size())
    ab.insert(ab.begin(), 1);
  while (bb.size() < batch.size())
    bb.insert(bb.begin(), 1);
  int64_t count = 1;
  for (int64_t d : batch)
    count *= d;
  std::vector<double> out;
  for (int64_t i = 0; i < count; ++i) {
    // Decompose i into batch coordinates and map each operand's coordinate (0 where size 1).
    int64_t rem = i, ai = 0, bi = 0, aStride = 1, bStride = 1;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t coord = rem % batch[d];
      rem /= batch[d];
      ai += (ab[d] == 1 ? 0 : coord) * aStride;
      bi += (bb[d] == 1 ? 0 : coord) * bStride;
      aStride *= ab[d];
      bStride *= bb[d];
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double acc = 0;
        for (int64_t e = 0; e < k; ++e)
          acc += a[ai * m * k + r * k + e] * b[bi * k * n + e * n + c];
        out.push_back(acc);
      }
  }
  return out;
}

} // namespace

TEST(Nn, MatMulBroadcastsBatchDims) {
  struct Case {
    std::vector<int64_t> a, b, batch;
  };
  const Case cases[] = {
      {{2, 3, 4, 5}, {5, 6}, {2, 3}},    // one rhs: folded into one gemm
      {{2, 1, 4, 5}, {3, 5, 6}, {2, 3}}, // both broadcast
      {{4, 5}, {2, 5, 6}, {2}},          // lhs broadcast
      {{3, 4, 5}, {3, 5, 6}, {3}},       // plain batch
      {{4, 5}, {5, 6}, {}},              // no batch
      {{2, 4, 5}, {1, 5, 6}, {2}},       // rhs batch of 1
  };
  uint32_t seed = 100;
  for (const Case &c : cases) {
    int64_t na = 1, nb = 1;
    for (int64_t d : c.a)
      na *= d;
    for (int64_t d : c.b)
      nb *= d;
    std::vector<double> a = randomValues<double>(na, seed++), b = randomValues<double>(nb, seed++);
    std::vector<int64_t> outShape = c.batch;
    outShape.push_back(c.a[c.a.size() - 2]);
    outShape.push_back(c.b.back());
    std::vector<double> want = naiveMatmul(a, c.a, b, c.b, c.batch);
    HostTensor ta = f64(c.a, a), tb = f64(c.b, b), out = HostTensor::zeros(DType::f64, outShape);
    ASSERT_TRUE(matmul(refOf(ta), refOf(tb), refOf(out)).isOk()) << shapeString(c.a);
    expectClose(valuesOf<double>(out), want, 1e-13, 1e-13, "f64 " + shapeString(c.a));
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
    HostTensor fa = f32(c.a, af), fb = f32(c.b, bf), fo = HostTensor::zeros(DType::f32, outShape);
    ASSERT_TRUE(matmul(refOf(fa), refOf(fb), refOf(fo)).isOk());
    // k = 5 products of values in [-1, 1]: f32 accumulation error well below 1e-5 absolute.
    expectClose(valuesOf<float>(fo), want, 1e-5, 1e-6, "f32 " + shapeString(c.a));
  }
}

TEST(Nn, MatMulErrorsAndEmptyContraction) {
  HostTensor a = f32({2, 3}, std::vector<float>(6, 1)), b = f32({4, 2}, std::vector<float>(8, 1));
  HostTensor out = HostTensor::zeros(DType::f32, {2, 2});
  Status s = matmul(refOf(a), refOf(b), refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("contraction dims differ"), std::string::npos);
  HostTensor a3 = f32({2, 2, 3}, std::vector<float>(12, 1)),
             b3 = f32({3, 3, 2}, std::vector<float>(18, 1));
  EXPECT_FALSE(matmul(refOf(a3), refOf(b3), refOf(out)).isOk());
  HostTensor vec = f32({3}, {1, 2, 3});
  EXPECT_FALSE(matmul(refOf(vec), refOf(b), refOf(out)).isOk());
  // k = 0: the product is all zeros, even over garbage in the output.
  HostTensor e1 = f32({2, 0}, {}), e2 = f32({0, 3}, {});
  HostTensor eo = f32({2, 3}, {9, 9, 9, 9, 9, 9});
  ASSERT_TRUE(matmul(refOf(e1), refOf(e2), refOf(eo)).isOk());
  EXPECT_EQ(valuesOf<float>(eo), std::vector<float>(6, 0.0f));
  HostTensor i = i64({2, 2}, {1, 2, 3, 4}), io = HostTensor::zeros(DType::i64, {2, 2});
  EXPECT_FALSE(matmul(refOf(i), refOf(i), refOf(io)).isOk());
}

TEST(Nn, LinearWithAndWithoutBias) {
  const int64_t B = 2, S = 3, IN = 8, OUT = 5;
  std::vector<float> x = randomValues(B * S * IN, 51), w = randomValues(OUT * IN, 52);
  std::vector<float> bias = randomValues(OUT, 53);
  HostTensor tx = f32({B, S, IN}, x), tw = f32({OUT, IN}, w), tb = f32({OUT}, bias);
  for (bool withBias : {false, true}) {
    HostTensor out = HostTensor::zeros(DType::f32, {B, S, OUT});
    TensorRef rb = refOf(tb);
    ASSERT_TRUE(linear(refOf(tx), refOf(tw), withBias ? &rb : nullptr, refOf(out)).isOk());
    std::vector<double> want;
    for (int64_t r = 0; r < B * S; ++r)
      for (int64_t o = 0; o < OUT; ++o) {
        double acc = withBias ? bias[o] : 0.0;
        for (int64_t i = 0; i < IN; ++i)
          acc += double(x[r * IN + i]) * w[o * IN + i];
        want.push_back(acc);
      }
    expectClose(valuesOf<float>(out), want, 1e-5, 1e-6, withBias ? "bias" : "no bias");
  }
  // f64, and errors: wrong weight shape, wrong bias shape, bf16.
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end());
  HostTensor dx = f64({B * S, IN}, xd), dw = f64({OUT, IN}, wd),
             dout = HostTensor::zeros(DType::f64, {B * S, OUT});
  ASSERT_TRUE(linear(refOf(dx), refOf(dw), nullptr, refOf(dout)).isOk());
  EXPECT_NEAR(
      valuesOf<double>(dout)[7],
      [&] {
        double acc = 0;
        for (int64_t i = 0; i < IN; ++i)
          acc += xd[1 * IN + i] * wd[2 * IN + i];
        return acc;
      }(),
      1e-14);
  HostTensor badW = f32({OUT, IN + 1}, std::vector<float>(OUT * (IN + 1)));
  HostTensor out = HostTensor::zeros(DType::f32, {B, S, OUT});
  EXPECT_FALSE(linear(refOf(tx), refOf(badW), nullptr, refOf(out)).isOk());
  HostTensor badB = f32({OUT + 1}, std::vector<float>(OUT + 1));
  TensorRef rbb = refOf(badB);
  EXPECT_FALSE(linear(refOf(tx), refOf(tw), &rbb, refOf(out)).isOk());
  HostTensor hx = HostTensor::zeros(DType::bf16, {2, IN}),
             hw = HostTensor::zeros(DType::bf16, {OUT, IN});
  HostTensor ho = HostTensor::zeros(DType::bf16, {2, OUT});
  Status s = linear(refOf(hx), refOf(hw), nullptr, refOf(ho));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "Linear: Linear on bf16 is not supported by the CPU backend yet");
}

TEST(Nn, LayerNormMatchesTheFormula) {
  const int64_t R = 6, N = 16;
  // Offset values stress the variance computation (mean >> spread).
  std::vector<float> x = randomValues(R * N, 61, 99, 101), w = randomValues(N, 62, 0.5, 1.5);
  std::vector<float> b = randomValues(N, 63);
  HostTensor tx = f32({2, 3, N}, x), tw = f32({N}, w), tb = f32({N}, b);
  const double eps = 1e-5;
  for (bool withBias : {false, true}) {
    HostTensor out = HostTensor::zeros(DType::f32, {2, 3, N});
    TensorRef rb = refOf(tb);
    ASSERT_TRUE(layerNorm(refOf(tx), refOf(tw), withBias ? &rb : nullptr, eps, refOf(out)).isOk());
    std::vector<double> want;
    for (int64_t r = 0; r < R; ++r) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < N; ++j)
        mean += x[r * N + j];
      mean /= N;
      for (int64_t j = 0; j < N; ++j)
        var += (x[r * N + j] - mean) * (x[r * N + j] - mean);
      var /= N; // biased
      for (int64_t j = 0; j < N; ++j)
        want.push_back((x[r * N + j] - mean) / std::sqrt(var + eps) * w[j] + (withBias ? b[j] : 0));
    }
    expectClose(valuesOf<float>(out), want, 1e-5, 1e-6, "layer norm");
  }
  HostTensor badW = f32({N + 1}, std::vector<float>(N + 1));
  HostTensor out = HostTensor::zeros(DType::f32, {2, 3, N});
  EXPECT_FALSE(layerNorm(refOf(tx), refOf(badW), nullptr, eps, refOf(out)).isOk());
  EXPECT_FALSE(layerNorm(refOf(tx), refOf(tw), nullptr, -1.0, refOf(out)).isOk());
}

TEST(Nn, RmsNormMatchesTheFormula) {
  const int64_t R = 4, N = 10;
  std::vector<double> x = randomValues<double>(R * N, 71, -3, 3), w = randomValues<double>(N, 72);
  HostTensor tx = f64({R, N}, x), tw = f64({N}, w), out = HostTensor::zeros(DType::f64, {R, N});
  ASSERT_TRUE(rmsNorm(refOf(tx), refOf(tw), 1e-6, refOf(out)).isOk());
  std::vector<double> want;
  for (int64_t r = 0; r < R; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < N; ++j)
      ms += x[r * N + j] * x[r * N + j];
    ms /= N;
    for (int64_t j = 0; j < N; ++j)
      want.push_back(x[r * N + j] / std::sqrt(ms + 1e-6) * w[j]);
  }
  expectClose(valuesOf<double>(out), want, 1e-13, 1e-15, "rms norm");
}

TEST(Nn, RopeMatchesRotateHalf) {
  // x [b, h, s, d] with tables [b, 1, s, d] and [s, d]; halves of the tables differ, so a swap
  // of the halves would show.
  const int64_t B = 2, H = 3, S = 4, D = 6;
  std::vector<double> x = randomValues<double>(B * H * S * D, 81, -2, 2);
  for (std::vector<int64_t> tableShape : {std::vector<int64_t>{B, 1, S, D}, {S, D}, {D}}) {
    int64_t n = 1;
    for (int64_t v : tableShape)
      n *= v;
    std::vector<double> c = randomValues<double>(n, 82, -1, 1), s = randomValues<double>(n, 83);
    HostTensor tx = f64({B, H, S, D}, x), tc = f64(tableShape, c), ts = f64(tableShape, s);
    HostTensor out = HostTensor::zeros(DType::f64, {B, H, S, D});
    ASSERT_TRUE(rope(refOf(tx), refOf(tc), refOf(ts), refOf(out)).isOk());
    std::vector<double> want;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j < D; ++j) {
            const double *xr = &x[((b * H + h) * S + i) * D];
            int64_t t = tableShape.size() == 4   ? (b * S + i) * D
                        : tableShape.size() == 2 ? i * D
                                                 : 0;
            double rotated = j < D / 2 ? -xr[j + D / 2] : xr[j - D / 2];
            want.push_back(xr[j] * c[t + j] + rotated * s[t + j]);
          }
    expectClose(valuesOf<double>(out), want, 1e-14, 1e-15, "rope");
  }
}

/// `s` failed with a message containing `what`.
static void expectError(const Status &s, const std::string &what) {
  ASSERT_FALSE(s.isOk()) << "expected an error containing: " << what;
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(Nn, RopeErrors) {
  HostTensor x = f32({2, 5}, randomValues(10, 1)), t = f32({2, 5}, randomValues(10, 2));
  HostTensor out = HostTensor::zeros(DType::f32, {2, 5});
  expectError(rope(refOf(x), refOf(t), refOf(t), refOf(out)),
              "Rope: x [2, 5] must end in an even head dim");
  HostTensor x4 = f32({2, 4}, randomValues(8, 1)), t3 = f32({3, 4}, randomValues(12, 2));
  HostTensor out4 = HostTensor::zeros(DType::f32, {2, 4});
  expectError(rope(refOf(x4), refOf(t3), refOf(t3), refOf(out4)),
              "Rope: tables [3, 4] must broadcast to x [2, 4]");
  expectError(rope(refOf(x4), refOf(x4), refOf(x4), refOf(x4)), "must not alias x");
}

namespace {

struct AttentionCase {
  int64_t b, s, t, h, hk, d, dv;
  bool causal;
  std::vector<int64_t> maskShape; // empty: no mask
  bool boolMask = false;
};

/// softmax(scale * Q K^T + mask) V per (batch, head), written with explicit matrices.
std::vector<double> naiveAttention(const AttentionCase &c, const std::vector<double> &q,
                                   const std::vector<double> &k, const std::vector<double> &v,
                                   const std::vector<double> &mask, double scale) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<int64_t> ms = c.maskShape;
  while (!ms.empty() && ms.size() < 4)
    ms.insert(ms.begin(), 1);
  auto maskAt = [&](int64_t bi, int64_t hi, int64_t i, int64_t j) {
    int64_t idx[4] = {bi, hi, i, j}, off = 0;
    for (int d = 0; d < 4; ++d)
      off = off * ms[d] + (ms[d] == 1 ? 0 : idx[d]);
    return mask[off];
  };
  std::vector<double> out(c.b * c.s * c.h * c.dv, 0.0);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t hi = 0; hi < c.h; ++hi) {
      int64_t kvh = hi / (c.h / c.hk);
      std::vector<std::vector<double>> scores(c.s, std::vector<double>(c.t));
      for (int64_t i = 0; i < c.s; ++i)
        for (int64_t j = 0; j < c.t; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e)
            dot += q[((bi * c.s + i) * c.h + hi) * c.d + e] *
                   k[((bi * c.t + j) * c.hk + kvh) * c.d + e];
          double sc = scale * dot;
          if (!ms.empty()) {
            double m = maskAt(bi, hi, i, j);
            sc = c.boolMask ? (m != 0 ? sc : -inf) : sc + m;
          }
          if (c.causal && j > i + (c.t - c.s))
            sc = -inf;
          scores[i][j] = sc;
        }
      for (int64_t i = 0; i < c.s; ++i) {
        double m = -inf;
        for (double sc : scores[i])
          m = std::max(m, sc);
        if (m == -inf)
          continue; // fully masked: zeros
        double sum = 0;
        for (double sc : scores[i])
          sum += std::exp(sc - m);
        for (int64_t j = 0; j < c.t; ++j) {
          double p = std::exp(scores[i][j] - m) / sum;
          for (int64_t e = 0; e < c.dv; ++e)
            out[((bi * c.s + i) * c.h + hi) * c.dv + e] +=
                p * v[((bi * c.t + j) * c.hk + kvh) * c.dv + e];
        }
      }
    }
  return out;
}

void checkAttention(const AttentionCase &c, uint32_t seed) {
  std::vector<double> q = randomValues<double>(c.b * c.s * c.h * c.d, seed, -2, 2);
  std::vector<double> k = randomValues<double>(c.b * c.t * c.hk * c.d, seed + 1, -2, 2);
  std::vector<double> v = randomValues<double>(c.b * c.t * c.hk * c.dv, seed + 2, -2, 2);
  int64_t maskCount = 1;
  for (int64_t d : c.maskShape)
    maskCount *= d;
  std::vector<double> mask =
      randomValues<double>(c.maskShape.empty() ? 0 : maskCount, seed + 3, -3, 1);
  if (c.boolMask)
    for (size_t i = 0; i < mask.size(); ++i)
      mask[i] = (i % 3 != 1) ? 1.0 : 0.0;
  double scale = 1.0 / std::sqrt(double(c.d));
  std::vector<double> want = naiveAttention(c, q, k, v, mask, scale);
  std::string what = "b" + std::to_string(c.b) + " s" + std::to_string(c.s) + " t" +
                     std::to_string(c.t) + " h" + std::to_string(c.h) + "/" + std::to_string(c.hk) +
                     (c.causal ? " causal" : "") + " mask " + shapeString(c.maskShape);
  std::vector<int64_t> outShape{c.b, c.s, c.h, c.dv};
  for (DType dtype : {DType::f64, DType::f32}) {
    auto tensor = [&](std::vector<int64_t> shape, const std::vector<double> &vals) {
      if (dtype == DType::f64)
        return f64(shape, vals);
      return f32(shape, std::vector<float>(vals.begin(), vals.end()));
    };
    HostTensor tq = tensor({c.b, c.s, c.h, c.d}, q), tk = tensor({c.b, c.t, c.hk, c.d}, k);
    HostTensor tv = tensor({c.b, c.t, c.hk, c.dv}, v), out = HostTensor::zeros(dtype, outShape);
    HostTensor tm;
    if (!c.maskShape.empty())
      tm = c.boolMask ? i1(c.maskShape, std::vector<uint8_t>(mask.begin(), mask.end()))
                      : tensor(c.maskShape, mask);
    TensorRef rm = refOf(tm);
    Status s = attention(refOf(tq), refOf(tk), refOf(tv), c.maskShape.empty() ? nullptr : &rm,
                         c.causal, scale, refOf(out));
    ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
    if (dtype == DType::f64) {
      expectClose(valuesOf<double>(out), want, 1e-12, 1e-12, "f64 " + what);
    } else {
      // Inputs rounded to f32 move scores by ~1e-7 relative; outputs are O(1).
      expectClose(valuesOf<float>(out), want, 1e-5, 2e-6, "f32 " + what);
    }
  }
}

} // namespace

TEST(Nn, AttentionMatchesExplicitSoftmaxQKV) {
  checkAttention({2, 4, 4, 2, 2, 8, 8, false, {}}, 1);
}

TEST(Nn, AttentionGroupedQueryHeads) {
  checkAttention({1, 5, 5, 4, 2, 6, 3, false, {}}, 11); // 2 query heads per kv head, dv != d
  checkAttention({2, 3, 3, 6, 1, 4, 4, true, {}}, 12);  // multi-query
}

TEST(Nn, AttentionCausalWithFewerQueriesThanKeys) {
  checkAttention({1, 3, 5, 2, 2, 4, 4, true, {}}, 21); // query i sees keys <= i + 2
  checkAttention({2, 4, 4, 2, 1, 4, 4, true, {}}, 22);
}

TEST(Nn, AttentionMaskBroadcasts) {
  checkAttention({2, 3, 4, 2, 2, 4, 4, false, {3, 4}}, 31);       // [s, t]
  checkAttention({2, 3, 4, 2, 2, 4, 4, false, {2, 1, 1, 4}}, 32); // [b, 1, 1, t] padding mask
  checkAttention({2, 3, 4, 2, 2, 4, 4, true, {2, 2, 3, 4}}, 33);  // full, with causal
  checkAttention({1, 3, 4, 2, 1, 4, 4, false, {1, 4}, true}, 34); // boolean, broadcast rows
}

TEST(Nn, AttentionLargerHeads) {
  // Past the gemm kernels' register blocks: odd dims, GQA, t > s, causal and masks together.
  checkAttention({2, 17, 23, 4, 2, 9, 11, true, {}}, 41);
  checkAttention({1, 33, 33, 3, 1, 16, 16, true, {33, 33}}, 42);
  checkAttention({2, 19, 21, 2, 2, 7, 5, false, {2, 1, 19, 21}, true}, 43); // boolean
}

TEST(Nn, AttentionFullyMaskedRowIsZero) {
  const double inf = std::numeric_limits<double>::infinity();
  // s = 3 > t = 2 with causal: query 0 may see keys j <= 0 + (2 - 3) = -1, i.e. none.
  HostTensor q = f64({1, 3, 1, 2}, {1, 2, 3, 4, 5, 6}), k = f64({1, 2, 1, 2}, {1, 0, 0, 1});
  HostTensor v = f64({1, 2, 1, 2}, {10, 20, 30, 40}),
             out = HostTensor::zeros(DType::f64, {1, 3, 1, 2});
  ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), nullptr, true, 1.0, refOf(out)).isOk());
  std::vector<double> y = valuesOf<double>(out);
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 10.0); // query 1 sees key 0 only
  EXPECT_EQ(y[3], 20.0);
  // An additive mask of -inf everywhere: zeros, not NaN.
  HostTensor mask = f64({2}, {-inf, -inf});
  TensorRef rm = refOf(mask);
  ASSERT_TRUE(attention(refOf(q), refOf(k), refOf(v), &rm, false, 1.0, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<double>(out), std::vector<double>(6, 0.0));
}

TEST(Nn, AttentionShapeErrors) {
  HostTensor q = f32({1, 2, 3, 4}, std::vector<float>(24)),
             k = f32({1, 2, 2, 4}, std::vector<float>(16));
  HostTensor v = f32({1, 2, 2, 4}, std::vector<float>(16)),
             out = HostTensor::zeros(DType::f32, {1, 2, 3, 4});
  Status s = attention(refOf(q), refOf(k), refOf(v), nullptr, false, 0.5, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("2 kv heads do not divide 3 query heads"), std::string::npos);
  HostTensor k3 = f32({1, 2, 3, 4}, std::vector<float>(24)),
             v3 = f32({1, 2, 3, 4}, std::vector<float>(24));
  HostTensor badMask = f32({3, 3}, std::vector<float>(9));
  TensorRef rm = refOf(badMask);
  s = attention(refOf(q), refOf(k3), refOf(v3), &rm, false, 0.5, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("does not broadcast"), std::string::npos);
  HostTensor intMask = i64({2}, {0, 0});
  TensorRef ri = refOf(intMask);
  EXPECT_FALSE(attention(refOf(q), refOf(k3), refOf(v3), &ri, false, 0.5, refOf(out)).isOk());
  EXPECT_FALSE(attention(refOf(q), refOf(k3), refOf(v3), nullptr, false, NAN, refOf(out)).isOk());
}
