// CPU elementwise kernels against closed forms and naive double-precision references:
// unary/binary math, Compare, Where, Cast, Gelu and Dropout.
#include "runtime/cpu/Kernels.h"
#include "runtime/init/ParamInit.h"
#include "support/Float16.h"

#include "TestUtil.h"

#include <limits>
#include <numbers>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

HostTensor like(const HostTensor &t, DType dtype) { return HostTensor::zeros(dtype, t.shape); }

/// Runs a unary op on f32 input and returns the f32 result.
std::vector<float> unaryF32(UnaryOp op, const std::vector<float> &x) {
  HostTensor in = f32({int64_t(x.size())}, x), out = like(in, DType::f32);
  Status s = unary(op, refOf(in), refOf(out));
  EXPECT_TRUE(s.isOk()) << s.message();
  return valuesOf<float>(out);
}

} // namespace

TEST(Elementwise, FloatUnaryOpsMatchDoubleFormulas) {
  std::vector<float> x = randomValues(257, 1, -4.0, 4.0);
  std::vector<float> pos = randomValues(257, 2, 0.01, 9.0);
  struct Case {
    UnaryOp op;
    const std::vector<float> *in;
    double (*ref)(double);
  };
  const Case cases[] = {
      {UnaryOp::Neg, &x, [](double v) { return -v; }},
      {UnaryOp::Abs, &x, [](double v) { return v < 0 ? -v : v; }},
      {UnaryOp::Exp, &x, [](double v) { return std::exp(v); }},
      {UnaryOp::Log, &pos, [](double v) { return std::log(v); }},
      {UnaryOp::Tanh, &x, [](double v) { return std::tanh(v); }},
      {UnaryOp::Erf, &x, [](double v) { return std::erf(v); }},
      {UnaryOp::Sigmoid, &x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {UnaryOp::Relu, &x, [](double v) { return v > 0 ? v : 0.0; }},
      {UnaryOp::Sqrt, &pos, [](double v) { return std::sqrt(v); }},
      {UnaryOp::Rsqrt, &pos, [](double v) { return 1.0 / std::sqrt(v); }},
      {UnaryOp::Sin, &x, [](double v) { return std::sin(v); }},
      {UnaryOp::Cos, &x, [](double v) { return std::cos(v); }},
  };
  for (const Case &c : cases) {
    std::vector<double> want;
    for (float v : *c.in)
      want.push_back(c.ref(v));
    // f32 transcendental functions are within a few ulps: 1e-6 relative, 1e-7 absolute near 0.
    expectClose(unaryF32(c.op, *c.in), want, 1e-6, 1e-7, unaryOpName(c.op));
    // f64 against the same formulas: only last-bit differences.
    std::vector<double> xd(c.in->begin(), c.in->end());
    HostTensor in = f64({int64_t(xd.size())}, xd), out = like(in, DType::f64);
    ASSERT_TRUE(unary(c.op, refOf(in), refOf(out)).isOk());
    expectClose(valuesOf<double>(out), want, 1e-14, 1e-300, unaryOpName(c.op));
  }
  // Sigmoid saturates instead of overflowing; Relu keeps NaN as torch.relu does.
  expectClose(unaryF32(UnaryOp::Sigmoid, {-1000.0f, 1000.0f}), std::vector<double>{0.0, 1.0}, 0, 0);
  EXPECT_TRUE(std::isnan(unaryF32(UnaryOp::Relu, {NAN})[0]));
}

TEST(Elementwise, IntegerUnaryOpsWrap) {
  int64_t mn = std::numeric_limits<int64_t>::min();
  HostTensor x = i64({4}, {-3, 5, 0, mn}), out = like(x, DType::i64);
  ASSERT_TRUE(unary(UnaryOp::Neg, refOf(x), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{3, -5, 0, mn}));
  ASSERT_TRUE(unary(UnaryOp::Abs, refOf(x), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{3, 5, 0, mn}));
  ASSERT_TRUE(unary(UnaryOp::Relu, refOf(x), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{0, 5, 0, 0}));
  HostTensor y = i32({2}, {-7, 7}), yo = like(y, DType::i32);
  ASSERT_TRUE(unary(UnaryOp::Abs, refOf(y), refOf(yo)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(yo), (std::vector<int32_t>{7, 7}));
  Status s = unary(UnaryOp::Exp, refOf(x), refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("Exp"), std::string::npos);
}

TEST(Elementwise, NotAndLogicOnI1) {
  HostTensor a = i1({4}, {0, 0, 1, 1}), b = i1({4}, {0, 1, 0, 1}), out = like(a, DType::i1);
  ASSERT_TRUE(unary(UnaryOp::Not, refOf(a), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(out), (std::vector<uint8_t>{1, 1, 0, 0}));
  ASSERT_TRUE(binary(BinaryOp::And, refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(out), (std::vector<uint8_t>{0, 0, 0, 1}));
  ASSERT_TRUE(binary(BinaryOp::Or, refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(out), (std::vector<uint8_t>{0, 1, 1, 1}));
  HostTensor f = f32({4}, {0, 1, 2, 3}), fo = like(f, DType::f32);
  EXPECT_FALSE(unary(UnaryOp::Not, refOf(f), refOf(fo)).isOk());
  EXPECT_FALSE(binary(BinaryOp::And, refOf(f), refOf(f), refOf(fo)).isOk());
}

TEST(Elementwise, FloatBinaryOpsMatchDouble) {
  std::vector<float> a = randomValues(300, 3, -3, 3), b = randomValues(300, 4, 0.5, 3);
  HostTensor ta = f32({10, 30}, a), tb = f32({10, 30}, b), out = like(ta, DType::f32);
  struct Case {
    BinaryOp op;
    double (*ref)(double, double);
  };
  const Case cases[] = {
      {BinaryOp::Add, [](double p, double q) { return p + q; }},
      {BinaryOp::Sub, [](double p, double q) { return p - q; }},
      {BinaryOp::Mul, [](double p, double q) { return p * q; }},
      {BinaryOp::Div, [](double p, double q) { return p / q; }},
      {BinaryOp::Pow, [](double p, double q) { return std::pow(std::fabs(p), q); }},
      {BinaryOp::Min, [](double p, double q) { return p < q ? p : q; }},
      {BinaryOp::Max, [](double p, double q) { return p > q ? p : q; }},
  };
  for (const Case &c : cases) {
    std::vector<float> lhs = a;
    if (c.op == BinaryOp::Pow) // a real power of a negative base is NaN; test positive bases
      for (float &v : lhs)
        v = std::fabs(v);
    HostTensor tl = f32({10, 30}, lhs);
    ASSERT_TRUE(binary(c.op, refOf(tl), refOf(tb), refOf(out)).isOk());
    std::vector<double> want;
    for (size_t i = 0; i < a.size(); ++i)
      want.push_back(c.ref(a[i], b[i]));
    // One f32 rounding of an exact (or libm-accurate) result.
    expectClose(valuesOf<float>(out), want, 2e-7, 0, binaryOpName(c.op));
  }
  // Min/Max propagate NaN from either side, like torch.minimum/maximum.
  HostTensor n1 = f32({2}, {NAN, 1}), n2 = f32({2}, {1, NAN}), no = like(n1, DType::f32);
  for (BinaryOp op : {BinaryOp::Min, BinaryOp::Max}) {
    ASSERT_TRUE(binary(op, refOf(n1), refOf(n2), refOf(no)).isOk());
    EXPECT_TRUE(std::isnan(valuesOf<float>(no)[0]) && std::isnan(valuesOf<float>(no)[1]));
  }
}

TEST(Elementwise, IntegerBinaryOps) {
  int64_t mx = std::numeric_limits<int64_t>::max(), mn = std::numeric_limits<int64_t>::min();
  HostTensor a = i64({5}, {7, -7, 7, mx, mn}), b = i64({5}, {2, 2, -2, 1, -1});
  HostTensor out = like(a, DType::i64);
  ASSERT_TRUE(binary(BinaryOp::Div, refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{3, -3, -3, mx, mn})); // trunc; wrap
  ASSERT_TRUE(binary(BinaryOp::Add, refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{9, -5, 5, mn, mx})); // wraps
  ASSERT_TRUE(binary(BinaryOp::Mul, refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{14, -14, -14, mx, mn}));
  ASSERT_TRUE(binary(BinaryOp::Min, refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{2, -7, -2, 1, mn}));
  HostTensor c = i32({3}, {10, -9, 4}), d = i32({3}, {3, 4, 0}), co = like(c, DType::i32);
  Status s = binary(BinaryOp::Div, refOf(c), refOf(d), refOf(co));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("division by zero at element 2"), std::string::npos);
  ASSERT_TRUE(binary(BinaryOp::Sub, refOf(c), refOf(d), refOf(co)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(co), (std::vector<int32_t>{7, -13, 4}));
  EXPECT_FALSE(binary(BinaryOp::Pow, refOf(c), refOf(d), refOf(co)).isOk());
}

TEST(Elementwise, BinaryChecksShapesAndDtypes) {
  HostTensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  HostTensor out = like(a, DType::f32);
  Status s = binary(BinaryOp::Add, refOf(a), refOf(b), refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "Add: rhs has shape [3, 2], expected [2, 3]");
  HostTensor c = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(binary(BinaryOp::Add, refOf(a), refOf(c), refOf(out)).isOk());
  HostTensor h = HostTensor::zeros(DType::bf16, {2, 3}),
             ho = HostTensor::zeros(DType::bf16, {2, 3});
  s = binary(BinaryOp::Mul, refOf(h), refOf(h), refOf(ho));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("Mul on bf16 is not supported by the CPU backend yet"),
            std::string::npos);
}

TEST(Elementwise, CompareEveryPredicate) {
  HostTensor a = f32({4}, {1, 2, 3, NAN}), b = f32({4}, {2, 2, 2, NAN});
  HostTensor out = like(a, DType::i1);
  const std::pair<ComparePredicate, std::vector<uint8_t>> cases[] = {
      {ComparePredicate::eq, {0, 1, 0, 0}}, {ComparePredicate::ne, {1, 0, 1, 1}},
      {ComparePredicate::lt, {1, 0, 0, 0}}, {ComparePredicate::le, {1, 1, 0, 0}},
      {ComparePredicate::gt, {0, 0, 1, 0}}, {ComparePredicate::ge, {0, 1, 1, 0}},
  };
  for (const auto &[pred, want] : cases) {
    ASSERT_TRUE(compare(pred, refOf(a), refOf(b), refOf(out)).isOk());
    EXPECT_EQ(valuesOf<uint8_t>(out), want) << int(pred);
  }
  HostTensor ia = i64({3}, {-5, 0, 9}), ib = i64({3}, {-6, 0, 10});
  ASSERT_TRUE(
      compare(ComparePredicate::lt, refOf(ia), refOf(ib), refOf(out = like(ia, DType::i1))).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(out), (std::vector<uint8_t>{0, 0, 1}));
  HostTensor ba = i1({2}, {0, 1}), bb = i1({2}, {1, 1});
  ASSERT_TRUE(
      compare(ComparePredicate::lt, refOf(ba), refOf(bb), refOf(out = like(ba, DType::i1))).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(out), (std::vector<uint8_t>{1, 0}));
  HostTensor wrong = like(a, DType::f32);
  EXPECT_FALSE(compare(ComparePredicate::eq, refOf(a), refOf(b), refOf(wrong)).isOk());
}

TEST(Elementwise, WhereSelectsAnyDtype) {
  HostTensor c = i1({2, 2}, {1, 0, 0, 1});
  HostTensor a = f32({2, 2}, {1, 2, 3, 4}), b = f32({2, 2}, {-1, -2, -3, -4});
  HostTensor out = like(a, DType::f32);
  ASSERT_TRUE(where(refOf(c), refOf(a), refOf(b), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, -2, -3, 4}));
  HostTensor ha = makeTensor(DType::bf16, {2, 2}, std::vector<uint16_t>{1, 2, 3, 4});
  HostTensor hb = makeTensor(DType::bf16, {2, 2}, std::vector<uint16_t>{9, 8, 7, 6});
  HostTensor ho = like(ha, DType::bf16);
  ASSERT_TRUE(where(refOf(c), refOf(ha), refOf(hb), refOf(ho)).isOk());
  EXPECT_EQ(valuesOf<uint16_t>(ho), (std::vector<uint16_t>{1, 8, 7, 4}));
  HostTensor ia = i64({2, 2}, {1, 2, 3, 4}), ib = i64({2, 2}, {5, 6, 7, 8}),
             io = like(ia, DType::i64);
  ASSERT_TRUE(where(refOf(c), refOf(ia), refOf(ib), refOf(io)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(io), (std::vector<int64_t>{1, 6, 7, 4}));
  HostTensor fc = f32({2, 2}, {1, 0, 0, 1});
  EXPECT_FALSE(where(refOf(fc), refOf(a), refOf(b), refOf(out)).isOk());
  HostTensor small = f32({2}, {1, 2});
  EXPECT_FALSE(where(refOf(c), refOf(small), refOf(b), refOf(out)).isOk());
}

TEST(Elementwise, CastFloatToIntTruncatesAndSaturates) {
  HostTensor x = f32({7}, {2.7f, -2.7f, 0.5f, -0.0f, 1e10f, -1e10f, NAN});
  HostTensor out = like(x, DType::i32);
  ASSERT_TRUE(cast(refOf(x), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(out),
            (std::vector<int32_t>{2, -2, 0, 0, 2147483647, -2147483647 - 1, 0}));
  HostTensor d = f64({3}, {9.3e18, -9.3e18, -3.99}), di = like(d, DType::i64);
  ASSERT_TRUE(cast(refOf(d), refOf(di)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(di), (std::vector<int64_t>{std::numeric_limits<int64_t>::max(),
                                                         std::numeric_limits<int64_t>::min(), -3}));
}

TEST(Elementwise, CastToAndFromBool) {
  HostTensor x = f32({4}, {0.0f, -0.0f, 0.25f, NAN}), b = like(x, DType::i1);
  ASSERT_TRUE(cast(refOf(x), refOf(b)).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(b), (std::vector<uint8_t>{0, 0, 1, 1}));
  HostTensor bits = i1({3}, {1, 0, 1});
  HostTensor f = like(bits, DType::f64), i = like(bits, DType::i32);
  ASSERT_TRUE(cast(refOf(bits), refOf(f)).isOk());
  ASSERT_TRUE(cast(refOf(bits), refOf(i)).isOk());
  EXPECT_EQ(valuesOf<double>(f), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(valuesOf<int32_t>(i), (std::vector<int32_t>{1, 0, 1}));
  HostTensor ints = i64({3}, {0, -4, int64_t(1) << 40}), ib = like(ints, DType::i1);
  ASSERT_TRUE(cast(refOf(ints), refOf(ib)).isOk());
  EXPECT_EQ(valuesOf<uint8_t>(ib), (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Elementwise, CastThrough16BitFormats) {
  // f32 -> bf16 rounds to nearest even; back to f32 is exact.
  float one = 1.0f, tieDown = 1.0f + std::ldexp(1.0f, -8), tieUp = 1.0f + 3 * std::ldexp(1.0f, -8);
  HostTensor x = f32({4}, {one, tieDown, tieUp, -2.5f}), bf = like(x, DType::bf16);
  ASSERT_TRUE(cast(refOf(x), refOf(bf)).isOk());
  EXPECT_EQ(valuesOf<uint16_t>(bf), (std::vector<uint16_t>{0x3f80, 0x3f80, 0x3f82, 0xc020}));
  HostTensor back = like(x, DType::f32);
  ASSERT_TRUE(cast(refOf(bf), refOf(back)).isOk());
  EXPECT_EQ(valuesOf<float>(back),
            (std::vector<float>{1.0f, 1.0f, 1.0f + std::ldexp(1.0f, -6), -2.5f}));
  // f64 -> f16 (through float, as torch): overflow to inf, subnormals, ties to even.
  HostTensor d = f64({4}, {65520.0, 65504.0, std::ldexp(1.0, -24), std::ldexp(3.0, -25)});
  HostTensor h = like(d, DType::f16);
  ASSERT_TRUE(cast(refOf(d), refOf(h)).isOk());
  EXPECT_EQ(valuesOf<uint16_t>(h), (std::vector<uint16_t>{0x7c00, 0x7bff, 0x0001, 0x0002}));
  // bf16 -> f16 and -> i32; i64 -> bf16.
  HostTensor hi = like(d, DType::i32);
  ASSERT_TRUE(cast(refOf(h), refOf(hi)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(hi), (std::vector<int32_t>{2147483647, 65504, 0, 0}));
  HostTensor ints = i64({2}, {257, -3}), ibf = like(ints, DType::bf16);
  ASSERT_TRUE(cast(refOf(ints), refOf(ibf)).isOk());
  EXPECT_EQ(bf16ToFloat(valuesOf<uint16_t>(ibf)[0]), 256.0f); // 257 ties to even: 256
  EXPECT_EQ(bf16ToFloat(valuesOf<uint16_t>(ibf)[1]), -3.0f);
  // Integer narrowing wraps modulo 2^32, as static_cast does.
  HostTensor big = i64({1}, {(int64_t(1) << 32) + 5}), narrow = like(big, DType::i32);
  ASSERT_TRUE(cast(refOf(big), refOf(narrow)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(narrow)[0], 5);
  HostTensor wrongShape = HostTensor::zeros(DType::f32, {3});
  EXPECT_FALSE(cast(refOf(big), refOf(wrongShape)).isOk());
}

TEST(Elementwise, SiluMatchesTheFormula) {
  std::vector<double> x = {-30.0, -2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 40.0};
  HostTensor tx = f64({8}, x), out = HostTensor::zeros(DType::f64, {8});
  ASSERT_TRUE(silu(refOf(tx), refOf(out)).isOk());
  std::vector<double> want;
  for (double v : x)
    want.push_back(v / (1.0 + std::exp(-v)));
  expectClose(valuesOf<double>(out), want, 1e-15, 1e-300, "f64 silu");
  // In place (the plan may reuse x's memory) and f32.
  HostTensor t32 = f32({8}, std::vector<float>(x.begin(), x.end()));
  ASSERT_TRUE(silu(refOf(t32), refOf(t32)).isOk());
  expectClose(valuesOf<float>(t32), want, 1e-6, 1e-30, "f32 silu in place");
  HostTensor ints = i64({2}, {1, 2}), outInts = HostTensor::zeros(DType::i64, {2});
  EXPECT_FALSE(silu(refOf(ints), refOf(outInts)).isOk());
}

TEST(Elementwise, GeluMatchesClosedForms) {
  // Reference values from erf/tanh in double (Python's math module: gelu(1) = Phi(1)).
  HostTensor x = f32({3}, {1.0f, -1.0f, 3.0f}), out = like(x, DType::f32);
  ASSERT_TRUE(gelu(refOf(x), false, refOf(out)).isOk());
  expectClose(valuesOf<float>(out),
              std::vector<double>{0.8413447460685429, -0.15865525393145707, 2.99595030590511}, 1e-6,
              0, "erf gelu");
  // torch.nn.functional.gelu(x, approximate='tanh') in float64.
  ASSERT_TRUE(gelu(refOf(x), true, refOf(out)).isOk());
  expectClose(valuesOf<float>(out),
              std::vector<double>{0.8411919906082768, -0.15880800939172324, 2.996362607918227},
              1e-6, 0, "tanh gelu");
  std::vector<double> xs = randomValues<double>(500, 9, -6, 6);
  HostTensor xd = f64({500}, xs), od = like(xd, DType::f64);
  for (bool approx : {false, true}) {
    ASSERT_TRUE(gelu(refOf(xd), approx, refOf(od)).isOk());
    std::vector<double> want;
    for (double v : xs)
      want.push_back(
          approx ? 0.5 * v *
                       (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)))
                 : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    // 1 + erf(x) cancels for negative x, so last-bit differences in x/sqrt2 grow ~100x there.
    expectClose(valuesOf<double>(od), want, 1e-12, 1e-300, "f64 gelu");
  }
}

namespace {

/// The dropout contract written out independently: philox word 0 against ratio * 2^32.
bool keepsByContract(uint64_t seed, int64_t stream, uint64_t i, double ratio) {
  uint32_t ctr[4] = {uint32_t(i), uint32_t(i >> 32), uint32_t(uint64_t(stream)),
                     uint32_t(uint64_t(stream) >> 32)};
  uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  uint32_t r[4];
  megac::init::philox4x32(ctr, key, r);
  return double(r[0]) >= ratio * 4294967296.0;
}

} // namespace

TEST(Elementwise, DropoutKeepsAtTheRightRateAndScales) {
  const int64_t n = 100000;
  const double ratio = 0.3;
  HostTensor x = f32({n}, std::vector<float>(n, 2.0f)), out = like(x, DType::f32);
  HostTensor seed = i64({}, {1234});
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), ratio, 7, refOf(out)).isOk());
  std::vector<float> y = valuesOf<float>(out);
  int64_t kept = 0;
  float scaled = static_cast<float>(2.0f * static_cast<float>(1.0 / (1.0 - ratio)));
  for (int64_t i = 0; i < n; ++i) {
    bool k = keepsByContract(1234, 7, uint64_t(i), ratio);
    ASSERT_EQ(y[i], k ? scaled : 0.0f) << i;
    kept += k;
  }
  // Binomial(1e5, 0.7): sd = 145, so 0.7 +- 0.005 is 3.4 sd.
  EXPECT_NEAR(double(kept) / n, 1 - ratio, 0.005);
}

TEST(Elementwise, DropoutIsDeterministicAndLayoutIndependent) {
  const int64_t n = 1000;
  std::vector<float> xs = randomValues(n, 5);
  HostTensor x = f32({n}, xs), whole = like(x, DType::f32), again = like(x, DType::f32);
  HostTensor seed = i64({}, {42});
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), 0.5, 0, refOf(whole)).isOk());
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), 0.5, 0, refOf(again)).isOk());
  EXPECT_EQ(whole.bytes, again.bytes);
  // Elements [300, 700) computed alone, with their global offset, equal that slice of the whole.
  std::vector<float> part(xs.begin() + 300, xs.begin() + 700);
  HostTensor xp = f32({400}, part), op = like(xp, DType::f32);
  ASSERT_TRUE(dropout(refOf(xp), refOf(seed), 0.5, 0, refOf(op), 300).isOk());
  std::vector<float> w = valuesOf<float>(whole);
  EXPECT_EQ(valuesOf<float>(op), std::vector<float>(w.begin() + 300, w.begin() + 700));
  // Another seed or another stream gives another mask.
  HostTensor other = like(x, DType::f32), seed2 = i64({}, {43});
  ASSERT_TRUE(dropout(refOf(x), refOf(seed2), 0.5, 0, refOf(other)).isOk());
  EXPECT_NE(other.bytes, whole.bytes);
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), 0.5, 1, refOf(other)).isOk());
  EXPECT_NE(other.bytes, whole.bytes);
}

TEST(Elementwise, DropoutEdgeRatiosAndErrors) {
  HostTensor x = f64({3}, {1, -2, 3}), out = like(x, DType::f64), seed = i64({}, {1});
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), 0.0, 0, refOf(out)).isOk());
  EXPECT_EQ(out.bytes, x.bytes);
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), 1.0, 0, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<double>(out), (std::vector<double>{0, 0, 0}));
  EXPECT_FALSE(dropout(refOf(x), refOf(seed), 1.5, 0, refOf(out)).isOk());
  EXPECT_FALSE(dropout(refOf(x), refOf(seed), kNaN, 0, refOf(out)).isOk());
  HostTensor vecSeed = i64({1}, {1});
  EXPECT_FALSE(dropout(refOf(x), refOf(vecSeed), 0.5, 0, refOf(out)).isOk());
  HostTensor fSeed = f32({}, {1});
  EXPECT_FALSE(dropout(refOf(x), refOf(fSeed), 0.5, 0, refOf(out)).isOk());
  EXPECT_EQ(dropoutKeeps(99, 3, 12345, 0.25), keepsByContract(99, 3, 12345, 0.25));
}
