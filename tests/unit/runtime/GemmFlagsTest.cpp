// The CPU MatMul's layout flags (transposed lhs/rhs read by BLAS, issue 30) and its fused
// accumulation (out = acc + op(lhs) op(rhs), in place or not) against a naive double reference,
// for all four flag combinations, with batch broadcasting, in f64, f32 and bf16 (the executor's
// widened path, runtime/cpu/HalfCompute.h); and bf16/f16 operands accumulated into an f32
// accumulator (mixed-precision gradient accumulation, issue 30), called directly and as the
// executor calls it.
#include "runtime/cpu/HalfCompute.h"
#include "runtime/cpu/Kernels.h"
#include "support/Float16.h"

#include "TestUtil.h"

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

/// `m` [batch, r, c] (row-major) with its last two dims swapped: [batch, c, r].
std::vector<double> swapLastTwo(const std::vector<double> &m, int64_t batch, int64_t r, int64_t c) {
  std::vector<double> t(m.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        t[b * r * c + j * r + i] = m[b * r * c + i * c + j];
  return t;
}

/// acc + a [batch or 1, m, k] x b [k, n] (one rhs, broadcast) or [batch, k, n], in double.
std::vector<double> reference(const std::vector<double> &a, const std::vector<double> &b,
                              const std::vector<double> &acc, int64_t batch, bool batchedB,
                              int64_t m, int64_t k, int64_t n) {
  std::vector<double> out(batch * m * n);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = acc.empty() ? 0.0 : acc[p * m * n + i * n + j];
        for (int64_t e = 0; e < k; ++e)
          s += a[p * m * k + i * k + e] * b[(batchedB ? p * k * n : 0) + e * n + j];
        out[p * m * n + i * n + j] = s;
      }
  return out;
}

struct Case {
  bool tl, tr, batchedB, accumulate, inPlace;
};

/// The operands a [batch, m, k] and b ([batch,] k, n) as MatMul reads them under c's flags:
/// transpose_lhs stores a as [batch, k, m], transpose_rhs b as ([batch,] n, k).
struct Stored {
  std::vector<double> a, b;
  std::vector<int64_t> aShape, bShape;
};

Stored storedAsTheFlagsSay(const Case &c, const std::vector<double> &a,
                           const std::vector<double> &b, int64_t batch, int64_t m, int64_t k,
                           int64_t n) {
  Stored st;
  st.a = c.tl ? swapLastTwo(a, batch, m, k) : a;
  st.b = c.tr ? swapLastTwo(b, c.batchedB ? batch : 1, k, n) : b;
  st.aShape = {batch, c.tl ? k : m, c.tl ? m : k};
  st.bShape = c.tr ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
  if (c.batchedB)
    st.bShape.insert(st.bShape.begin(), batch);
  return st;
}

/// Runs MatMul in `dtype` (f64, f32, or bf16 through computeInF32) on operands stored as the
/// flags say and compares with the reference. Error model: f64 and f32 sum k = 7 products of
/// values in [-1, 1), so |err| <= k u sum|a||b| <= 7 * 2^-24 * 7 ~ 3e-6 in f32 (atol 1e-5; f64
/// 1e-12); bf16 rounds each input (u = 2^-8) and the result once: |err| <= (2u k + u |out|)
/// <= 2^-7 * 7 + 2^-8 * 8 ~ 0.09 worst case, atol 0.1.
void runCase(DType dtype, const Case &c) {
  const int64_t batch = 2, m = 3, k = 7, n = 5;
  std::vector<double> a = randomValues<double>(batch * m * k, 1);
  std::vector<double> b = randomValues<double>((c.batchedB ? batch : 1) * k * n, 2);
  std::vector<double> acc =
      c.accumulate ? randomValues<double>(batch * m * n, 3) : std::vector<double>{};
  // bf16 inputs are rounded before the product: the reference sees the rounded values.
  auto round = [&](std::vector<double> &v) {
    if (dtype == DType::bf16)
      for (double &x : v)
        x = bf16ToFloat(floatToBf16(static_cast<float>(x)));
  };
  round(a);
  round(b);
  round(acc);
  std::vector<double> want = reference(a, b, acc, batch, c.batchedB, m, k, n);
  const Stored st = storedAsTheFlagsSay(c, a, b, batch, m, k, n);
  auto tensor = [&](std::vector<int64_t> shape, const std::vector<double> &v) {
    if (dtype == DType::f64)
      return f64(std::move(shape), v);
    if (dtype == DType::f32)
      return f32(std::move(shape), std::vector<float>(v.begin(), v.end()));
    std::vector<uint16_t> bits;
    for (double x : v)
      bits.push_back(floatToBf16(static_cast<float>(x)));
    return makeTensor(DType::bf16, std::move(shape), bits);
  };
  HostTensor ta = tensor(st.aShape, st.a), tb = tensor(st.bShape, st.b);
  HostTensor tacc = tensor({batch, m, n}, c.accumulate ? acc : std::vector<double>(batch * m * n));
  HostTensor out = c.inPlace ? tacc : tensor({batch, m, n}, std::vector<double>(batch * m * n));
  HostTensor &target = c.inPlace ? tacc : out;
  MatMulFlags flags{c.tl, c.tr};
  bool accumulate = c.accumulate;
  std::vector<TensorRef> ins = {refOf(ta), refOf(tb)};
  if (accumulate)
    ins.push_back(refOf(tacc));
  std::vector<TensorRef> outs = {refOf(target)};
  auto kernel = [&](std::span<const TensorRef> in, std::span<const TensorRef> o) {
    return matmul(in[0], in[1], o[0], flags, accumulate ? &in[2] : nullptr);
  };
  Status s = dtype == DType::bf16 ? computeInF32(ins, outs, kernel) : kernel(ins, outs);
  ASSERT_TRUE(s.isOk()) << s.message();
  std::string what = std::string(dtypeName(dtype)) + " tl=" + std::to_string(c.tl) +
                     " tr=" + std::to_string(c.tr) + " batchedB=" + std::to_string(c.batchedB) +
                     " acc=" + std::to_string(c.accumulate) +
                     " inPlace=" + std::to_string(c.inPlace);
  if (dtype == DType::f64) {
    expectClose(valuesOf<double>(target), want, 0.0, 1e-12, what);
  } else if (dtype == DType::f32) {
    expectClose(valuesOf<float>(target), want, 0.0, 1e-5, what);
  } else {
    std::vector<double> got;
    for (uint16_t x : valuesOf<uint16_t>(target))
      got.push_back(bf16ToFloat(x));
    expectClose(got, want, 0.0, 0.1, what);
  }
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (bool tl : {false, true})
    for (bool tr : {false, true})
      for (bool batchedB : {false, true}) {
        cases.push_back({tl, tr, batchedB, false, false});
        cases.push_back({tl, tr, batchedB, true, false});
        cases.push_back({tl, tr, batchedB, true, true});
      }
  return cases;
}

} // namespace

TEST(GemmFlags, F64AllFlagCombinations) {
  for (const Case &c : allCases())
    runCase(DType::f64, c);
}

TEST(GemmFlags, F32AllFlagCombinations) {
  for (const Case &c : allCases())
    runCase(DType::f32, c);
}

TEST(GemmFlags, Bf16ThroughTheWidenedPath) {
  for (const Case &c : allCases())
    runCase(DType::bf16, c);
}

/// bf16/f16 lhs and rhs (stored as the flags say) accumulated into an f32 accumulator, in place
/// or into another buffer, called directly (matmul widens its half operands itself) or as the
/// executor calls it (computeInF32 widens them first; f32 refs pass through). Error model: the
/// operands are exactly representable (the reference sees the rounded values), a product of two
/// 8- or 11-bit significands is exact in f32, so the only errors are the f32 sum's: k = 7 terms
/// of |a||b| < 1 plus |acc| < 1, |err| <= (k + 1) u sum <= 8 * 2^-24 * 8 ~ 4e-6; atol 1e-5, as
/// f32. A product rounded to half on the way would be off by up to 2^-9 |out| (~1e-2 here).
void runMixedCase(DType half, const Case &c, bool viaExecutor) {
  const int64_t batch = 2, m = 3, k = 7, n = 5;
  auto toHalf = [&](float x) { return half == DType::bf16 ? floatToBf16(x) : floatToHalf(x); };
  auto fromHalf = [&](uint16_t x) { return half == DType::bf16 ? bf16ToFloat(x) : halfToFloat(x); };
  std::vector<double> a = randomValues<double>(batch * m * k, 11);
  std::vector<double> b = randomValues<double>((c.batchedB ? batch : 1) * k * n, 12);
  std::vector<double> acc = randomValues<double>(batch * m * n, 13);
  for (std::vector<double> *v : {&a, &b})
    for (double &x : *v)
      x = fromHalf(toHalf(static_cast<float>(x)));
  for (double &x : acc)
    x = static_cast<float>(x);
  std::vector<double> want = reference(a, b, acc, batch, c.batchedB, m, k, n);
  const Stored st = storedAsTheFlagsSay(c, a, b, batch, m, k, n);
  auto halfTensor = [&](std::vector<int64_t> shape, const std::vector<double> &v) {
    std::vector<uint16_t> bits;
    for (double x : v)
      bits.push_back(toHalf(static_cast<float>(x)));
    return makeTensor(half, std::move(shape), bits);
  };
  HostTensor ta = halfTensor(st.aShape, st.a), tb = halfTensor(st.bShape, st.b);
  HostTensor tacc = f32({batch, m, n}, std::vector<float>(acc.begin(), acc.end()));
  HostTensor out = f32({batch, m, n}, std::vector<float>(batch * m * n));
  HostTensor &target = c.inPlace ? tacc : out;
  MatMulFlags flags{c.tl, c.tr};
  std::vector<TensorRef> ins = {refOf(ta), refOf(tb), refOf(tacc)};
  std::vector<TensorRef> outs = {refOf(target)};
  auto kernel = [&](std::span<const TensorRef> in, std::span<const TensorRef> o) {
    return matmul(in[0], in[1], o[0], flags, &in[2]);
  };
  Status s = viaExecutor ? computeInF32(ins, outs, kernel) : kernel(ins, outs);
  ASSERT_TRUE(s.isOk()) << s.message();
  std::string what = std::string(dtypeName(half)) + " into f32 tl=" + std::to_string(c.tl) +
                     " tr=" + std::to_string(c.tr) + " batchedB=" + std::to_string(c.batchedB) +
                     " inPlace=" + std::to_string(c.inPlace) +
                     (viaExecutor ? " (executor)" : " (direct)");
  expectClose(valuesOf<float>(target), want, 0.0, 1e-5, what);
}

TEST(GemmFlags, HalfOperandsAccumulateIntoF32) {
  for (DType half : {DType::bf16, DType::f16})
    for (const Case &c : allCases())
      if (c.accumulate)
        for (bool viaExecutor : {false, true})
          runMixedCase(half, c, viaExecutor);
}

TEST(GemmFlags, MixedDtypesNeedAnF32Accumulator) {
  std::vector<uint16_t> bits(12, floatToBf16(0.5f));
  HostTensor a = makeTensor(DType::bf16, {3, 4}, bits), b = makeTensor(DType::bf16, {4, 3}, bits);
  HostTensor wide = f32({3, 3}, std::vector<float>(9));
  // No accumulator: a bf16 product has a bf16 output.
  Status s = matmul(refOf(a), refOf(b), refOf(wide));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MatMul: output is f32, expected bf16"), std::string::npos)
      << s.message();
  // An f64 accumulator: only f32 takes half operands.
  HostTensor acc64 = f64({3, 3}, std::vector<double>(9)),
             out64 = f64({3, 3}, std::vector<double>(9));
  TensorRef acc64Ref = refOf(acc64);
  s = matmul(refOf(a), refOf(b), refOf(out64), {}, &acc64Ref);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MatMul: output is f64, expected bf16"), std::string::npos)
      << s.message();
  // An f32 output over a bf16 accumulator.
  HostTensor accHalf = makeTensor(DType::bf16, {3, 3}, std::vector<uint16_t>(9));
  TensorRef accHalfRef = refOf(accHalf);
  s = matmul(refOf(a), refOf(b), refOf(wide), {}, &accHalfRef);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MatMul: accumulator is bf16, expected f32"), std::string::npos)
      << s.message();
}

TEST(GemmFlags, TransposedContractionMismatchIsNamed) {
  HostTensor a = f32({3, 4}, randomValues<float>(12, 1)),
             b = f32({5, 4}, randomValues<float>(20, 2));
  HostTensor out = f32({4, 5}, std::vector<float>(20));
  // lhs read transposed is [4, 3]: k = 3, but rhs [5, 4] read plain has k = 5.
  Status s = matmul(refOf(a), refOf(b), refOf(out), MatMulFlags{true, false});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("(transposed)"), std::string::npos) << s.message();
  // Both transposed: [3, 4]^T [4, 3]^T = [4, 3] [3, 4] -> [4, 4].
  HostTensor good = f32({4, 4}, std::vector<float>(16));
  HostTensor rhs = f32({4, 3}, randomValues<float>(12, 3));
  EXPECT_TRUE(matmul(refOf(a), refOf(rhs), refOf(good), MatMulFlags{true, true}).isOk());
}

TEST(GemmFlags, AccumulatorOfAnotherShapeIsRefused) {
  HostTensor a = f32({2, 3}, randomValues<float>(6, 1)),
             b = f32({3, 4}, randomValues<float>(12, 2));
  HostTensor out = f32({2, 4}, std::vector<float>(8)), acc = f32({4, 2}, std::vector<float>(8));
  TensorRef accRef = refOf(acc);
  Status s = matmul(refOf(a), refOf(b), refOf(out), {}, &accRef);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("accumulator"), std::string::npos) << s.message();
}
