// The formulas the CPU and CUDA elementwise kernels share (runtime/cpu/ElementwiseFormulas.h,
// from runtime/cuda/kernels/ElementwiseMath.def), compiled for the host: each Unary and Binary
// formula and Cast's element conversions, bit for bit against the CPU kernels, for every op the
// .def has a line for. The CUDA side expands the same text; it needs no device here.
#include "runtime/cpu/ElementwiseFormulas.h"
#include "runtime/cpu/Kernels.h"
#include "support/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace megac;
using namespace megac::runtime;

namespace {

/// Finite, infinite, NaN, signed zeros, subnormals and values around the kinks of the formulas.
template <typename T> std::vector<T> specials() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {T(0),      -T(0),         T(1),           T(-1),           T(0.5),
                      T(-0.5),   T(2),          T(-3.25),       T(1e-3),         T(-1e-3),
                      T(7.5),    T(-7.5),       T(30),          T(-30),          T(100),
                      T(-100),   L::min(),      -L::min(),      L::denorm_min(), L::max(),
                      -L::max(), L::infinity(), -L::infinity(), L::quiet_NaN(),  -L::quiet_NaN()};
  for (int i = 0; i < 64; ++i) // a sweep of ordinary values
    v.push_back(static_cast<T>(-8.0 + 0.25 * i + 1.0 / 3.0));
  return v;
}

template <typename T> DType dtypeOf() {
  if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::i64;
  else
    return DType::i32;
}

template <typename T> bool sameBits(T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }

template <typename T> cpu::TensorRef refTo(std::vector<T> &v, const std::vector<int64_t> &shape) {
  return {dtypeOf<T>(), shape, v.data()};
}

/// The CPU kernel's unary op on x, element by element against formula.
template <typename T> void expectUnary(cpu::UnaryOp op, T (*formula)(T), std::vector<T> x) {
  std::vector<int64_t> shape{int64_t(x.size())};
  std::vector<T> y(x.size());
  Status s = cpu::unary(op, refTo(x, shape), refTo(y, shape));
  ASSERT_TRUE(s.isOk()) << s.message();
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_TRUE(sameBits(y[i], formula(x[i]))) << cpu::unaryOpName(op) << "(" << x[i] << "): CPU "
                                               << y[i] << ", formula " << formula(x[i]);
}

/// The CPU kernel's binary op on every pair of a and b against formula.
template <typename T>
void expectBinary(cpu::BinaryOp op, T (*formula)(T, T), const std::vector<T> &values) {
  std::vector<T> a, b;
  for (T p : values)
    for (T q : values) {
      a.push_back(p);
      b.push_back(q);
    }
  std::vector<int64_t> shape{int64_t(a.size())};
  std::vector<T> y(a.size());
  Status s = cpu::binary(op, refTo(a, shape), refTo(b, shape), refTo(y, shape));
  ASSERT_TRUE(s.isOk()) << s.message();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(sameBits(y[i], formula(a[i], b[i])))
        << cpu::binaryOpName(op) << "(" << a[i] << ", " << b[i] << "): CPU " << y[i] << ", formula "
        << formula(a[i], b[i]);
}

template <typename T> std::vector<T> integers() {
  using L = std::numeric_limits<T>;
  return {T(0), T(1), T(-1), T(7), T(-7), T(123456), L::max(), L::min(), T(L::min() + 1)};
}

} // namespace

TEST(ElementwiseFormulas, UnaryFloatFormulasAreTheCpuKernels) {
  int ops = 0;
#define MEGAC_CUDA_UNARY(Name, ...)                                                                \
  expectUnary<float>(cpu::UnaryOp::Name, megacUnary##Name<float>, specials<float>());              \
  expectUnary<double>(cpu::UnaryOp::Name, megacUnary##Name<double>, specials<double>());           \
  ++ops;
#define MEGAC_CUDA_BINARY(Name, ...)
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
  EXPECT_EQ(ops, 12); // every UnaryOp but Not (i1 logic)
}

TEST(ElementwiseFormulas, BinaryFloatFormulasAreTheCpuKernels) {
  int ops = 0;
#define MEGAC_CUDA_UNARY(Name, ...)
#define MEGAC_CUDA_BINARY(Name, ...)                                                               \
  expectBinary<float>(cpu::BinaryOp::Name, megacBinary##Name<float>, specials<float>());           \
  expectBinary<double>(cpu::BinaryOp::Name, megacBinary##Name<double>, specials<double>());        \
  ++ops;
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
  EXPECT_EQ(ops, 7); // every BinaryOp but And and Or (i1 logic)
}

// A float formula computes in float (expf, sqrtf, ...), as std::exp(float) does, not in double
// rounded once at the end: the overloads <math.h> brings to global scope.
TEST(ElementwiseFormulas, FloatFormulasCallTheFloatOverloads) {
  for (float x : specials<float>()) {
    EXPECT_TRUE(sameBits(megacUnaryExp(x), std::exp(x))) << x;
    EXPECT_TRUE(sameBits(megacUnaryLog(x), std::log(x))) << x;
    EXPECT_TRUE(sameBits(megacUnaryTanh(x), std::tanh(x))) << x;
    EXPECT_TRUE(sameBits(megacUnaryErf(x), std::erf(x))) << x;
    EXPECT_TRUE(sameBits(megacUnarySqrt(x), std::sqrt(x))) << x;
    EXPECT_TRUE(sameBits(megacUnarySin(x), std::sin(x))) << x;
    EXPECT_TRUE(sameBits(megacUnaryCos(x), std::cos(x))) << x;
    EXPECT_TRUE(sameBits(megacUnaryAbs(x), std::fabs(x))) << x;
    EXPECT_TRUE(sameBits(megacBinaryPow(x, 1.5f), std::pow(x, 1.5f))) << x;
  }
}

// The integer kernels share Relu, Min and Max (no NaN to propagate) and wrapNeg.
TEST(ElementwiseFormulas, IntegerFormulasAreTheCpuKernels) {
  expectUnary<int64_t>(cpu::UnaryOp::Relu, megacUnaryRelu<int64_t>, integers<int64_t>());
  expectUnary<int32_t>(cpu::UnaryOp::Relu, megacUnaryRelu<int32_t>, integers<int32_t>());
  expectUnary<int64_t>(cpu::UnaryOp::Neg, elementwise::wrapNeg<int64_t>, integers<int64_t>());
  expectUnary<int32_t>(cpu::UnaryOp::Neg, elementwise::wrapNeg<int32_t>, integers<int32_t>());
  expectBinary<int64_t>(cpu::BinaryOp::Min, megacBinaryMin<int64_t>, integers<int64_t>());
  expectBinary<int32_t>(cpu::BinaryOp::Max, megacBinaryMax<int32_t>, integers<int32_t>());
}

namespace {

using elementwise::HostBits;

/// Source bytes of dtype d: the specials (and integers) as d stores them.
std::vector<uint8_t> castSource(DType d) {
  std::vector<double> values = specials<double>();
  for (double v : {1e10, -1e10, 3e9, -3e9, 9.3e18, -9.3e18, 65504.0, 70000.0})
    values.push_back(v);
  std::vector<uint8_t> bytes(values.size() * dtypeSize(d));
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    switch (d) {
    case DType::f64:
      std::memcpy(&bytes[i * 8], &v, 8);
      break;
    case DType::f32: {
      float f = static_cast<float>(v);
      std::memcpy(&bytes[i * 4], &f, 4);
      break;
    }
    case DType::bf16:
    case DType::f16: {
      uint16_t h = d == DType::bf16 ? floatToBf16(float(v)) : floatToHalf(float(v));
      std::memcpy(&bytes[i * 2], &h, 2);
      break;
    }
    case DType::i64: {
      int64_t k = elementwise::truncSaturate<int64_t>(v);
      std::memcpy(&bytes[i * 8], &k, 8);
      break;
    }
    case DType::i32: {
      int32_t k = elementwise::truncSaturate<int32_t>(v);
      std::memcpy(&bytes[i * 4], &k, 4);
      break;
    }
    default:
      bytes[i] = v != 0 && v == v;
      break;
    }
  }
  return bytes;
}

template <DType S, DType D> std::vector<uint8_t> castByFormula(const std::vector<uint8_t> &x) {
  int64_t n = static_cast<int64_t>(x.size() / dtypeSize(S));
  std::vector<uint8_t> y(static_cast<size_t>(n) * dtypeSize(D));
  for (int64_t i = 0; i < n; ++i)
    elementwise::castStore<D, HostBits>(y.data(), i,
                                        elementwise::castLoad<S, HostBits>(x.data(), i));
  return y;
}

template <DType S> void expectCastsFrom() {
  std::vector<uint8_t> x = castSource(S);
  std::vector<int64_t> shape{static_cast<int64_t>(x.size() / dtypeSize(S))};
  auto check = [&]<DType D>() {
    std::vector<uint8_t> y(static_cast<size_t>(shape[0]) * dtypeSize(D));
    Status s = cpu::cast({S, shape, x.data()}, {D, shape, y.data()});
    ASSERT_TRUE(s.isOk()) << s.message();
    if constexpr (S != D) { // the same dtype is a copy, not the formulas
      EXPECT_EQ(y, (castByFormula<S, D>(x))) << dtypeName(S) << " -> " << dtypeName(D);
    }
  };
  check.template operator()<DType::f64>();
  check.template operator()<DType::f32>();
  check.template operator()<DType::bf16>();
  check.template operator()<DType::f16>();
  check.template operator()<DType::i64>();
  check.template operator()<DType::i32>();
  check.template operator()<DType::i1>();
}

} // namespace

TEST(ElementwiseFormulas, CastConversionsAreTheCpuKernel) {
  expectCastsFrom<DType::f64>();
  expectCastsFrom<DType::f32>();
  expectCastsFrom<DType::bf16>();
  expectCastsFrom<DType::f16>();
  expectCastsFrom<DType::i64>();
  expectCastsFrom<DType::i32>();
  expectCastsFrom<DType::i1>();
}
