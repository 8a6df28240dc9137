// The backward kernels against central finite differences of their forward kernels in f64
// (normwise relative error < 1e-6), their f32 versions against f64, and the closed-form cases:
// fully masked attention rows, ignored labels, repeated and out-of-range ids, Pad.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

#define EXPECT_OK(expr)                                                                            \
  do {                                                                                             \
    Status s_ = (expr);                                                                            \
    EXPECT_TRUE(s_.isOk()) << s_.message();                                                        \
  } while (0)

/// Seeded values in [lo, hi) that f32 holds exactly, so f32 and f64 runs see the same inputs.
HostTensor exactF64(std::vector<int64_t> shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<double> values;
  for (float v : randomValues<float>(static_cast<size_t>(n), seed, lo, hi))
    values.push_back(v);
  return f64(std::move(shape), values);
}

HostTensor toF32(const HostTensor &t) {
  HostTensor out = HostTensor::zeros(DType::f32, t.shape);
  Status s = cast(refOf(t), refOf(out));
  EXPECT_TRUE(s.isOk()) << s.message();
  return out;
}

HostTensor zerosLike(const HostTensor &t, DType dtype) { return HostTensor::zeros(dtype, t.shape); }

/// sum(dy * y): the scalar whose gradient with respect to y is dy.
double weighted(const HostTensor &y, const HostTensor &dy) {
  std::vector<double> a = valuesOf<double>(y), b = valuesOf<double>(dy);
  EXPECT_EQ(a.size(), b.size());
  double sum = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    sum += a[i] * b[i];
  return sum;
}

/// d loss / d x by central differences, perturbing the f64 tensor x in place (restored after).
std::vector<double> numericGrad(HostTensor &x, const std::function<double()> &loss,
                                double h = 1e-5) {
  std::vector<double> grad;
  double *data = x.data<double>();
  for (int64_t i = 0; i < x.numElements(); ++i) {
    double saved = data[i];
    data[i] = saved + h;
    double up = loss();
    data[i] = saved - h;
    double down = loss();
    data[i] = saved;
    grad.push_back((up - down) / (2 * h));
  }
  return grad;
}

/// max |got - want| <= rtol * max |want| (normwise, so tiny components do not dominate). Every
/// element of both must be finite first: a NaN compares false with everything, so a bare
/// `|got - want| > err` would pass an all-NaN gradient. The bound is written !(err <= bound) too.
void expectNormClose(const std::vector<double> &got, const std::vector<double> &want, double rtol,
                     const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what << ": no elements to compare";
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(want[i])) << what << ": expected element " << i << " is " << want[i];
    ASSERT_TRUE(std::isfinite(got[i]))
        << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
  }
  double scale = 0.0, err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    double diff = std::fabs(got[i] - want[i]);
    if (!(diff <= err)) {
      err = diff;
      worst = i;
    }
  }
  EXPECT_GT(scale, 0.0) << what << ": a gradient that is all zeros proves nothing";
  if (!(err <= rtol * scale))
    ADD_FAILURE() << what << ": element " << worst << " is " << got[worst] << ", expected "
                  << want[worst] << ": |diff| " << err << " > " << rtol << " * max |expected| "
                  << scale;
}

void expectGrad(const HostTensor &got, const std::vector<double> &numeric,
                const std::string &what) {
  expectNormClose(valuesOf<double>(got), numeric, 1e-6, what + " vs finite differences");
}

/// The f32 kernel's result against the f64 one.
void expectF32Like(const HostTensor &got32, const HostTensor &want64, const std::string &what) {
  ASSERT_EQ(got32.dtype, DType::f32) << what;
  std::vector<double> got;
  for (float v : valuesOf<float>(got32))
    got.push_back(v);
  expectNormClose(got, valuesOf<double>(want64), 2e-5, what + " in f32");
}

} // namespace

TEST(Grad, LayerNormGradMatchesFiniteDifferences) {
  std::vector<int64_t> shape{2, 3, 6};
  HostTensor x = exactF64(shape, 1, -2, 2), w = exactF64({6}, 2, 0.5, 1.5);
  HostTensor b = exactF64({6}, 3), dy = exactF64(shape, 4);
  const double eps = 1e-5;
  auto loss = [&] {
    HostTensor y = zerosLike(x, DType::f64);
    TensorRef bias = refOf(b);
    EXPECT_OK(layerNorm(refOf(x), refOf(w), &bias, eps, refOf(y)));
    return weighted(y, dy);
  };
  HostTensor dx = zerosLike(x, DType::f64), dw = zerosLike(w, DType::f64);
  HostTensor db = zerosLike(w, DType::f64);
  ASSERT_TRUE(
      layerNormGrad(refOf(dy), refOf(x), refOf(w), eps, refOf(dx), refOf(dw), refOf(db)).isOk());
  expectGrad(dx, numericGrad(x, loss), "dx");
  expectGrad(dw, numericGrad(w, loss), "dweight");
  expectGrad(db, numericGrad(b, loss), "dbias");

  HostTensor dx32 = zerosLike(x, DType::f32), dw32 = zerosLike(w, DType::f32);
  HostTensor db32 = zerosLike(w, DType::f32);
  ASSERT_TRUE(layerNormGrad(refOf(toF32(dy)), refOf(toF32(x)), refOf(toF32(w)), eps, refOf(dx32),
                            refOf(dw32), refOf(db32))
                  .isOk());
  expectF32Like(dx32, dx, "dx");
  expectF32Like(dw32, dw, "dweight");
  expectF32Like(db32, db, "dbias");
}

TEST(Grad, RmsNormGradMatchesFiniteDifferences) {
  std::vector<int64_t> shape{4, 5};
  HostTensor x = exactF64(shape, 5, -2, 2), w = exactF64({5}, 6, 0.5, 1.5), dy = exactF64(shape, 7);
  const double eps = 1e-6;
  auto loss = [&] {
    HostTensor y = zerosLike(x, DType::f64);
    EXPECT_OK(rmsNorm(refOf(x), refOf(w), eps, refOf(y)));
    return weighted(y, dy);
  };
  HostTensor dx = zerosLike(x, DType::f64), dw = zerosLike(w, DType::f64);
  ASSERT_TRUE(rmsNormGrad(refOf(dy), refOf(x), refOf(w), eps, refOf(dx), refOf(dw)).isOk());
  expectGrad(dx, numericGrad(x, loss), "dx");
  expectGrad(dw, numericGrad(w, loss), "dweight");

  HostTensor dx32 = zerosLike(x, DType::f32), dw32 = zerosLike(w, DType::f32);
  ASSERT_TRUE(
      rmsNormGrad(refOf(toF32(dy)), refOf(toF32(x)), refOf(toF32(w)), eps, refOf(dx32), refOf(dw32))
          .isOk());
  expectF32Like(dx32, dx, "dx");
  expectF32Like(dw32, dw, "dweight");
}

namespace {

struct AttentionCase {
  std::string name;
  int64_t b, s, t, h, hk, d, dv;
  bool causal;
  std::optional<std::vector<int64_t>> maskShape;
};

/// Every gradient of attention() for one configuration against finite differences, and f32.
void checkAttentionGrad(const AttentionCase &c) {
  SCOPED_TRACE(c.name);
  HostTensor q = exactF64({c.b, c.s, c.h, c.d}, 11, -1.5, 1.5);
  HostTensor k = exactF64({c.b, c.t, c.hk, c.d}, 12, -1.5, 1.5);
  HostTensor v = exactF64({c.b, c.t, c.hk, c.dv}, 13);
  HostTensor dout = exactF64({c.b, c.s, c.h, c.dv}, 14);
  std::optional<HostTensor> mask;
  if (c.maskShape)
    mask = exactF64(*c.maskShape, 15);
  const double scale = 0.4;
  auto loss = [&] {
    HostTensor y = zerosLike(dout, DType::f64);
    std::optional<TensorRef> m;
    if (mask)
      m = refOf(*mask);
    EXPECT_OK(
        attention(refOf(q), refOf(k), refOf(v), m ? &*m : nullptr, c.causal, scale, refOf(y)));
    return weighted(y, dout);
  };
  auto runGrad = [&](DType dtype, HostTensor &dq, HostTensor &dk, HostTensor &dv,
                     std::optional<HostTensor> &dmask) {
    auto as = [&](const HostTensor &t) { return dtype == DType::f32 ? toF32(t) : t; };
    HostTensor q2 = as(q), k2 = as(k), v2 = as(v), do2 = as(dout);
    dq = zerosLike(q, dtype);
    dk = zerosLike(k, dtype);
    dv = zerosLike(v, dtype);
    std::optional<HostTensor> m2;
    std::optional<TensorRef> mref, dmref;
    if (mask) {
      m2 = as(*mask);
      dmask = zerosLike(*mask, dtype);
      mref = refOf(*m2);
      dmref = refOf(*dmask);
    }
    return attentionGrad(refOf(do2), refOf(q2), refOf(k2), refOf(v2), mref ? &*mref : nullptr,
                         c.causal, scale, refOf(dq), refOf(dk), refOf(dv),
                         dmref ? &*dmref : nullptr);
  };
  HostTensor dq, dk, dv;
  std::optional<HostTensor> dmask;
  Status s = runGrad(DType::f64, dq, dk, dv, dmask);
  ASSERT_TRUE(s.isOk()) << s.message();
  expectGrad(dq, numericGrad(q, loss), "dq");
  expectGrad(dk, numericGrad(k, loss), "dk");
  expectGrad(dv, numericGrad(v, loss), "dv");
  if (mask)
    expectGrad(*dmask, numericGrad(*mask, loss), "dmask");

  HostTensor dq32, dk32, dv32;
  std::optional<HostTensor> dmask32;
  s = runGrad(DType::f32, dq32, dk32, dv32, dmask32);
  ASSERT_TRUE(s.isOk()) << s.message();
  expectF32Like(dq32, dq, "dq");
  expectF32Like(dk32, dk, "dk");
  expectF32Like(dv32, dv, "dv");
  if (mask)
    expectF32Like(*dmask32, *dmask, "dmask");
}

} // namespace

TEST(Grad, AttentionGradMatchesFiniteDifferences) {
  const AttentionCase cases[] = {
      {"multi-head", 2, 3, 3, 2, 2, 4, 3, false, std::nullopt},
      {"grouped-query, causal, t > s", 1, 3, 5, 4, 2, 3, 2, true, std::nullopt},
      {"multi-query with a full mask", 2, 2, 3, 2, 1, 3, 3, false,
       std::vector<int64_t>{2, 2, 2, 3}},
      {"mask broadcast over batch and heads", 2, 3, 4, 2, 2, 2, 2, true,
       std::vector<int64_t>{3, 4}},
      {"mask broadcast over queries", 2, 3, 3, 4, 2, 2, 3, false, std::vector<int64_t>{2, 1, 1, 3}},
  };
  for (const AttentionCase &c : cases)
    checkAttentionGrad(c);
}

TEST(Grad, AttentionGradOfLargerHeadsMatchesFiniteDifferences) {
  // Sizes past the gemm kernels' register blocks (odd dims, t > s, several query heads per kv
  // head), so the per-head gemms' edge handling and the GQA accumulation into dk/dv are covered.
  const AttentionCase cases[] = {
      {"grouped-query, causal, t > s, odd dims", 1, 9, 13, 4, 2, 5, 7, true, std::nullopt},
      {"multi-query with a [s,t] mask", 2, 11, 11, 3, 1, 6, 3, false, std::vector<int64_t>{11, 11}},
      {"causal with a padding mask", 2, 10, 10, 2, 2, 8, 8, true,
       std::vector<int64_t>{2, 1, 1, 10}},
  };
  for (const AttentionCase &c : cases)
    checkAttentionGrad(c);
}

TEST(Grad, AttentionGradOfFullyMaskedRowsIsZero) {
  // Causal with t < s: query i sees keys j <= i - 2, so rows 0 and 1 see nothing; the forward
  // gives zeros there, and no gradient flows through them.
  int64_t b = 1, s = 4, t = 2, h = 1, d = 3;
  HostTensor q = exactF64({b, s, h, d}, 21), k = exactF64({b, t, h, d}, 22);
  HostTensor v = exactF64({b, t, h, d}, 23), dout = exactF64({b, s, h, d}, 24);
  // An additive mask of -inf hides key 0 from query 3 too: row 3 sees key 1 only.
  const double inf = std::numeric_limits<double>::infinity();
  HostTensor mask = f64({s, t}, {0, 0, 0, 0, 0, 0, -inf, 0});
  HostTensor dq = zerosLike(q, DType::f64), dk = zerosLike(k, DType::f64);
  HostTensor dv = zerosLike(v, DType::f64), dmask = zerosLike(mask, DType::f64);
  TensorRef m = refOf(mask), dm = refOf(dmask);
  ASSERT_TRUE(attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v), &m, true, 0.5, refOf(dq),
                            refOf(dk), refOf(dv), &dm)
                  .isOk());
  // Row 2 sees key 0 only and row 3 key 1 only: a probability of 1 whatever the scores, so only
  // dv is nonzero, dv[j] = dout of the row that sees key j.
  for (const HostTensor *zero : {&dq, &dk, &dmask})
    for (double g : valuesOf<double>(*zero))
      EXPECT_EQ(g, 0.0);
  std::vector<double> gv = valuesOf<double>(dv), go = valuesOf<double>(dout);
  for (int64_t e = 0; e < d; ++e) {
    EXPECT_EQ(gv[0 * d + e], go[2 * d + e]);
    EXPECT_EQ(gv[1 * d + e], go[3 * d + e]);
  }
}

TEST(Grad, AttentionGradRejectsBooleanMasksAndMismatchedShapes) {
  HostTensor q = exactF64({1, 2, 1, 2}, 1), dq = zerosLike(q, DType::f64);
  HostTensor dk = zerosLike(q, DType::f64), dv = zerosLike(q, DType::f64);
  HostTensor mask = i1({2, 2}, {1, 0, 1, 1}), dmask = zerosLike(mask, DType::f64);
  TensorRef m = refOf(mask), dm = refOf(dmask);
  Status s = attentionGrad(refOf(q), refOf(q), refOf(q), refOf(q), &m, false, 1.0, refOf(dq),
                           refOf(dk), refOf(dv), &dm);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("AttentionGrad: mask is i1"), std::string::npos) << s.message();
  s = attentionGrad(refOf(q), refOf(q), refOf(q), refOf(q), nullptr, false, 1.0, refOf(dq),
                    refOf(dk), refOf(dv), &dm);
  EXPECT_FALSE(s.isOk());
  HostTensor wrong = HostTensor::zeros(DType::f64, {1, 2, 1, 3});
  s = attentionGrad(refOf(q), refOf(q), refOf(q), refOf(q), nullptr, false, 1.0, refOf(wrong),
                    refOf(dk), refOf(dv), nullptr);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("dq has shape [1, 2, 1, 3], expected [1, 2, 1, 2]"), std::string::npos)
      << s.message();
}

TEST(Grad, GeluGradMatchesFiniteDifferences) {
  for (bool tanh : {false, true}) {
    SCOPED_TRACE(tanh ? "tanh" : "exact");
    HostTensor x = exactF64({3, 7}, 31, -4, 4), dy = exactF64({3, 7}, 32);
    auto loss = [&] {
      HostTensor y = zerosLike(x, DType::f64);
      EXPECT_OK(gelu(refOf(x), tanh, refOf(y)));
      return weighted(y, dy);
    };
    HostTensor dx = zerosLike(x, DType::f64);
    ASSERT_TRUE(geluGrad(refOf(dy), refOf(x), tanh, refOf(dx)).isOk());
    expectGrad(dx, numericGrad(x, loss), "dx");
    HostTensor dx32 = zerosLike(x, DType::f32);
    ASSERT_TRUE(geluGrad(refOf(toF32(dy)), refOf(toF32(x)), tanh, refOf(dx32)).isOk());
    expectF32Like(dx32, dx, "dx");
  }
}

TEST(Grad, SoftmaxGradMatchesFiniteDifferences) {
  for (int64_t axis : {0, 1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    HostTensor x = exactF64({2, 3, 4}, 41, -2, 2), dy = exactF64({2, 3, 4}, 42);
    auto forward = [&] {
      HostTensor y = zerosLike(x, DType::f64);
      EXPECT_OK(softmax(refOf(x), axis, refOf(y)));
      return y;
    };
    auto loss = [&] { return weighted(forward(), dy); };
    HostTensor y = forward(), dx = zerosLike(x, DType::f64);
    ASSERT_TRUE(softmaxGrad(refOf(dy), refOf(y), axis, refOf(dx)).isOk());
    expectGrad(dx, numericGrad(x, loss), "dx");
    HostTensor dx32 = zerosLike(x, DType::f32);
    ASSERT_TRUE(softmaxGrad(refOf(toF32(dy)), refOf(toF32(y)), axis, refOf(dx32)).isOk());
    expectF32Like(dx32, dx, "dx");
  }
}

TEST(Grad, CrossEntropyGradMatchesFiniteDifferencesAndIgnoresLabels) {
  HostTensor logits = exactF64({2, 3, 5}, 51, -3, 3), dl = exactF64({2, 3}, 52);
  HostTensor labels = i64({2, 3}, {4, -100, 0, 2, 2, -100});
  auto loss = [&] {
    HostTensor l = zerosLike(dl, DType::f64);
    EXPECT_OK(crossEntropy(refOf(logits), refOf(labels), -100, refOf(l)));
    return weighted(l, dl);
  };
  HostTensor dz = zerosLike(logits, DType::f64);
  ASSERT_TRUE(crossEntropyGrad(refOf(dl), refOf(logits), refOf(labels), -100, refOf(dz)).isOk());
  expectGrad(dz, numericGrad(logits, loss), "dlogits");
  std::vector<double> g = valuesOf<double>(dz);
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(g[1 * 5 + j], 0.0) << "ignored row 1";
    EXPECT_EQ(g[5 * 5 + j], 0.0) << "ignored row 5";
  }
  // Each kept row sums to zero: dl * (sum(softmax) - 1).
  double row0 = 0;
  for (int64_t j = 0; j < 5; ++j)
    row0 += g[j];
  EXPECT_NEAR(row0, 0.0, 1e-15);

  HostTensor dz32 = zerosLike(logits, DType::f32);
  ASSERT_TRUE(
      crossEntropyGrad(refOf(toF32(dl)), refOf(toF32(logits)), refOf(labels), -100, refOf(dz32))
          .isOk());
  expectF32Like(dz32, dz, "dlogits");

  // Without an ignore index, -100 is just out of range.
  Status s = crossEntropyGrad(refOf(dl), refOf(logits), refOf(labels), std::nullopt, refOf(dz));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("label -100 (element 1 of the labels) is outside [0, 5)"),
            std::string::npos)
      << s.message();
}

TEST(Grad, EmbeddingGradScatterAddsAndMatchesFiniteDifferences) {
  HostTensor table = exactF64({5, 3}, 61), dy = exactF64({2, 3, 3}, 62);
  HostTensor ids = i64({2, 3}, {1, 4, 1, 0, 1, 3}); // row 1 three times, row 2 never
  auto loss = [&] {
    HostTensor y = zerosLike(dy, DType::f64);
    EXPECT_OK(embedding(refOf(table), refOf(ids), refOf(y)));
    return weighted(y, dy);
  };
  HostTensor dt = HostTensor::zeros(DType::f64, {5, 3});
  ASSERT_TRUE(embeddingGrad(refOf(dy), refOf(ids), refOf(dt)).isOk());
  expectGrad(dt, numericGrad(table, loss), "dtable");
  std::vector<double> g = valuesOf<double>(dt), d = valuesOf<double>(dy);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(g[2 * 3 + e], 0.0) << "an unused row";
    EXPECT_EQ(g[1 * 3 + e], (d[0 * 3 + e] + d[2 * 3 + e]) + d[4 * 3 + e]) << "in position order";
  }
  HostTensor dt32 = HostTensor::zeros(DType::f32, {5, 3});
  ASSERT_TRUE(
      embeddingGrad(refOf(toF32(dy)), refOf(i32({2, 3}, {1, 4, 1, 0, 1, 3})), refOf(dt32)).isOk());
  expectF32Like(dt32, dt, "dtable");

  Status s = embeddingGrad(refOf(dy), refOf(i64({2, 3}, {1, 4, 5, 0, 1, 3})), refOf(dt));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("EmbeddingGrad: id 5 (element 2 of the ids) is outside the table's 5 "
                             "rows"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(embeddingGrad(refOf(dy), refOf(i64({2, 3}, {1, -1, 0, 0, 1, 3})), refOf(dt)).isOk());
}

TEST(Pad, PadsLowHighAndInterior) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor out = HostTensor::zeros(DType::f32, {4, 6});
  std::vector<int64_t> low{1, 0}, high{1, 1}, interior{0, 1};
  ASSERT_TRUE(pad(refOf(x), low, high, interior, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{0, 0, 0, 0, 0, 0, //
                                                      1, 0, 2, 0, 3, 0, //
                                                      4, 0, 5, 0, 6, 0, //
                                                      0, 0, 0, 0, 0, 0}));
  // Any dtype; an empty input gives all padding.
  HostTensor ids = i64({0}, {}), padded = HostTensor::zeros(DType::i64, {3});
  std::vector<int64_t> l1{2}, h1{1}, i1v{5};
  ASSERT_TRUE(pad(refOf(ids), l1, h1, i1v, refOf(padded)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(padded), (std::vector<int64_t>{0, 0, 0}));
  Status s = pad(refOf(x), low, high, interior, refOf(padded));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("Pad: output is i64, expected f32"), std::string::npos) << s.message();
  HostTensor wrong = HostTensor::zeros(DType::f32, {4, 5});
  s = pad(refOf(x), low, high, interior, refOf(wrong));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("output has shape [4, 5], expected [4, 6]"), std::string::npos)
      << s.message();
  std::vector<int64_t> negative{-1, 0};
  EXPECT_FALSE(pad(refOf(x), negative, high, interior, refOf(out)).isOk());
}
