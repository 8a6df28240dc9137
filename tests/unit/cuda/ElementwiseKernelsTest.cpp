// The CUDA elementwise kernels (runtime/cuda/kernels/Elementwise.cu) against the CPU reference
// kernels: unary, binary, compare, where, cast, gelu, geluGrad, dropout, dropoutShard.
#include "tests/unit/cuda/ElementwiseTestUtil.h"

#include <limits>

namespace megac::runtime::cuda::test {
namespace {

using cpu::BinaryOp;
using cpu::ComparePredicate;
using cpu::UnaryOp;

std::string label(const char *op, DType dtype, const std::vector<int64_t> &shape) {
  return std::string(op) + " " + dtypeName(dtype) + " " + shapeName(shape);
}

using ElementwiseKernels = CudaKernelTest;

// ---- Unary ----------------------------------------------------------------------------------

TEST_F(ElementwiseKernels, UnaryFloatMatchesCpu) {
  const UnaryOp ops[] = {UnaryOp::Neg,  UnaryOp::Abs,   UnaryOp::Exp,     UnaryOp::Log,
                         UnaryOp::Tanh, UnaryOp::Erf,   UnaryOp::Sigmoid, UnaryOp::Relu,
                         UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Sin,     UnaryOp::Cos};
  uint32_t seed = 1;
  for (UnaryOp op : ops)
    for (DType dtype : floatDtypes())
      for (const auto &shape : testShapes()) {
        bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt;
        Tensor x(dtype, shape), out(dtype, shape), ref(dtype, shape);
        fillUniform(x, positive ? 0.05 : -4.0, 4.0, seed++);
        x.upload();
        out.poison();
        ASSERT_OK(unary(ctx, op, x.devRef(), out.devRef()));
        ASSERT_OK(cpuReference({x.hostRef()}, {ref.hostRef()},
                               [&](auto in, auto outs) { return cpu::unary(op, in[0], outs[0]); }));
        sync();
        expectClose(dtype, out.download(), ref.host, toleranceFor(dtype),
                    label(cpu::unaryOpName(op), dtype, shape));
      }
}

TEST_F(ElementwiseKernels, UnaryIntegerAndNotExact) {
  for (DType dtype : {DType::i64, DType::i32})
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu}) {
      Tensor x(dtype, {1000}), out(dtype, {1000}), ref(dtype, {1000});
      fillUniform(x, -1000000, 1000000, 7);
      // The wrap-around cases: min and max.
      if (dtype == DType::i64) {
        reinterpret_cast<int64_t *>(x.host.data())[0] = std::numeric_limits<int64_t>::min();
        reinterpret_cast<int64_t *>(x.host.data())[1] = std::numeric_limits<int64_t>::max();
      } else {
        reinterpret_cast<int32_t *>(x.host.data())[0] = std::numeric_limits<int32_t>::min();
        reinterpret_cast<int32_t *>(x.host.data())[1] = std::numeric_limits<int32_t>::max();
      }
      x.upload();
      ASSERT_OK(unary(ctx, op, x.devRef(), out.devRef()));
      ASSERT_OK(cpu::unary(op, x.hostRef(), ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host, label(cpu::unaryOpName(op), dtype, {1000}));
    }
  Tensor b(DType::i1, {1001}), out(DType::i1, {1001}), ref(DType::i1, {1001});
  fillUniform(b, 0, 1, 3);
  b.host[5] = 7; // any nonzero byte is true
  b.upload();
  ASSERT_OK(unary(ctx, UnaryOp::Not, b.devRef(), out.devRef()));
  ASSERT_OK(cpu::unary(UnaryOp::Not, b.hostRef(), ref.hostRef()));
  sync();
  expectExact(DType::i1, out.download(), ref.host, "Not");
}

// ---- Binary ---------------------------------------------------------------------------------

TEST_F(ElementwiseKernels, BinaryFloatMatchesCpu) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                          BinaryOp::Pow, BinaryOp::Min, BinaryOp::Max};
  uint32_t seed = 100;
  for (BinaryOp op : ops)
    for (DType dtype : floatDtypes())
      for (const auto &shape : testShapes()) {
        Tensor a(dtype, shape), b(dtype, shape), out(dtype, shape), ref(dtype, shape);
        if (op == BinaryOp::Pow) {
          fillUniform(a, 0.5, 2.0, seed++);
          fillUniform(b, -2.0, 2.0, seed++);
        } else {
          fillUniform(a, -3.0, 3.0, seed++);
          fillUniform(b, 0.25, 3.0, seed++);        // away from 0 for Div
          for (int64_t i = 0; i < b.size(); i += 2) // and of both signs
            setAt(dtype, b.host.data(), i, -valueAt(dtype, b.host.data(), i));
        }
        if (a.size() > 3 && (op == BinaryOp::Min || op == BinaryOp::Max)) {
          setAt(dtype, a.host.data(), 1, std::nan("")); // NaN propagates from either side
          setAt(dtype, b.host.data(), 2, std::nan(""));
        }
        a.upload();
        b.upload();
        out.poison();
        ASSERT_OK(binary(ctx, op, a.devRef(), b.devRef(), out.devRef()));
        ASSERT_OK(
            cpuReference({a.hostRef(), b.hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
              return cpu::binary(op, in[0], in[1], outs[0]);
            }));
        sync();
        expectClose(dtype, out.download(), ref.host, toleranceFor(dtype),
                    label(cpu::binaryOpName(op), dtype, shape));
      }
}

TEST_F(ElementwiseKernels, BinaryIntegerExactAndDivideByZero) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                          BinaryOp::Div, BinaryOp::Min, BinaryOp::Max};
  for (DType dtype : {DType::i64, DType::i32})
    for (BinaryOp op : ops) {
      std::vector<int64_t> shape = {3, 333};
      Tensor a(dtype, shape), b(dtype, shape), out(dtype, shape), ref(dtype, shape);
      double big = dtype == DType::i64 ? 4e18 : 2e9;
      fillUniform(a, -big, big, 11);
      fillUniform(b, -big, big, 12);
      for (int64_t i = 0; i < b.size(); i += 3) // small divisors too
        setAt(dtype, b.host.data(), i, static_cast<double>(i % 7) - 3.0);
      for (int64_t i = 0; i < b.size(); ++i)
        if (valueAt(dtype, b.host.data(), i) == 0)
          setAt(dtype, b.host.data(), i, 5);
      // min / -1 and min * -1 wrap.
      double lo = dtype == DType::i64 ? -9223372036854775808.0 : -2147483648.0;
      setAt(dtype, a.host.data(), 0, lo);
      setAt(dtype, b.host.data(), 0, -1);
      a.upload();
      b.upload();
      ASSERT_OK(binary(ctx, op, a.devRef(), b.devRef(), out.devRef()));
      ASSERT_OK(cpu::binary(op, a.hostRef(), b.hostRef(), ref.hostRef()));
      EXPECT_EQ(takeError(), 0);
      expectExact(dtype, out.download(), ref.host, label(cpu::binaryOpName(op), dtype, shape));
    }
  // Integer Div by zero: the device flag, not a Status; the other elements are still right.
  Tensor a(DType::i32, {4}), b(DType::i32, {4}), out(DType::i32, {4});
  int32_t av[] = {7, -7, 9, 1}, bv[] = {2, 2, 0, -1};
  std::memcpy(a.host.data(), av, sizeof av);
  std::memcpy(b.host.data(), bv, sizeof bv);
  a.upload();
  b.upload();
  ASSERT_OK(binary(ctx, BinaryOp::Div, a.devRef(), b.devRef(), out.devRef()));
  EXPECT_EQ(takeError(), static_cast<int>(DeviceError::divideByZero));
  std::vector<uint8_t> got = out.download();
  const int32_t *g = reinterpret_cast<const int32_t *>(got.data());
  EXPECT_EQ(g[0], 3);
  EXPECT_EQ(g[1], -3);
  EXPECT_EQ(g[3], -1);
  // The CPU reports it as an error naming Div.
  EXPECT_FALSE(cpu::binary(BinaryOp::Div, a.hostRef(), b.hostRef(), out.hostRef()).isOk());
}

TEST_F(ElementwiseKernels, AndOrExact) {
  for (BinaryOp op : {BinaryOp::And, BinaryOp::Or}) {
    Tensor a(DType::i1, {777}), b(DType::i1, {777}), out(DType::i1, {777}), ref(DType::i1, {777});
    fillUniform(a, 0, 1, 21);
    fillUniform(b, 0, 1, 22);
    a.host[3] = 2; // nonzero bytes are true
    a.upload();
    b.upload();
    ASSERT_OK(binary(ctx, op, a.devRef(), b.devRef(), out.devRef()));
    ASSERT_OK(cpu::binary(op, a.hostRef(), b.hostRef(), ref.hostRef()));
    sync();
    expectExact(DType::i1, out.download(), ref.host, cpu::binaryOpName(op));
  }
}

// ---- Compare, Where -------------------------------------------------------------------------

TEST_F(ElementwiseKernels, CompareExact) {
  const ComparePredicate preds[] = {ComparePredicate::eq, ComparePredicate::ne,
                                    ComparePredicate::lt, ComparePredicate::le,
                                    ComparePredicate::gt, ComparePredicate::ge};
  for (DType dtype :
       {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i1})
    for (ComparePredicate pred : preds) {
      std::vector<int64_t> shape = {5, 201};
      Tensor a(dtype, shape), b(dtype, shape), out(DType::i1, shape), ref(DType::i1, shape);
      // Few distinct values, so ties are common.
      fillUniform(a, 0, dtype == DType::i1 ? 1 : 3, 31);
      fillUniform(b, 0, dtype == DType::i1 ? 1 : 3, 32);
      if (isFloatDtype(dtype)) {
        for (int64_t i = 0; i < a.size(); ++i) { // whole numbers: exact ties
          setAt(dtype, a.host.data(), i, std::floor(valueAt(dtype, a.host.data(), i)));
          setAt(dtype, b.host.data(), i, std::floor(valueAt(dtype, b.host.data(), i)));
        }
        setAt(dtype, a.host.data(), 0, std::nan(""));
      }
      a.upload();
      b.upload();
      ASSERT_OK(compare(ctx, pred, a.devRef(), b.devRef(), out.devRef()));
      ASSERT_OK(cpuReference({a.hostRef(), b.hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
        return cpu::compare(pred, in[0], in[1], outs[0]);
      }));
      sync();
      expectExact(DType::i1, out.download(), ref.host,
                  label("Compare", dtype, shape) + " pred " + std::to_string(int(pred)));
    }
}

TEST_F(ElementwiseKernels, WhereExactEveryDtype) {
  for (DType dtype :
       {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i1})
    for (const auto &shape : testShapes()) {
      Tensor c(DType::i1, shape), a(dtype, shape), b(dtype, shape), out(dtype, shape),
          ref(dtype, shape);
      fillUniform(c, 0, 1, 41);
      fillUniform(a, -100, 100, 42);
      fillUniform(b, -100, 100, 43);
      c.upload();
      a.upload();
      b.upload();
      out.poison();
      ASSERT_OK(where(ctx, c.devRef(), a.devRef(), b.devRef(), out.devRef()));
      ASSERT_OK(cpu::where(c.hostRef(), a.hostRef(), b.hostRef(), ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host, label("Where", dtype, shape));
    }
}

// ---- Cast -----------------------------------------------------------------------------------

/// Values that exercise rounding, saturation, NaN and infinities in every conversion.
std::vector<double> castSpecials() {
  double inf = std::numeric_limits<double>::infinity();
  return {0.0,          -0.0,         0.5,           -0.5,       1.5,     2.5,
          -2.5,         0.99999,      1e-7,          1e-40,      -1e-45,  65504.0,
          65519.0,      65520.0,      70000.0,       -70000.0,   3e9,     -3e9,
          2147483647.0, 2147483648.0, -2147483649.0, 9.3e18,     -9.3e18, 1e30,
          -1e30,        1e300,        -1e300,        inf,        -inf,    std::nan(""),
          1.00390625,   1.01171875,   3.0000001,     16777217.0, 0.1,     -123.456};
}

TEST_F(ElementwiseKernels, CastEveryPairExact) {
  const DType dtypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16,
                          DType::i64, DType::i32, DType::i1};
  for (DType from : dtypes)
    for (DType to : dtypes) {
      std::vector<int64_t> shape = {1000};
      Tensor x(from, shape), out(to, shape), ref(to, shape);
      bool integral = !isFloatDtype(from);
      fillUniform(x, integral ? -3000000 : -3e6, integral ? 3000000 : 3e6, 51);
      if (from == DType::i64) { // extremes that round when going to float
        auto *v = reinterpret_cast<int64_t *>(x.host.data());
        v[0] = std::numeric_limits<int64_t>::min();
        v[1] = std::numeric_limits<int64_t>::max();
        v[2] = (int64_t(1) << 53) + 1;
        v[3] = int64_t(1) << 40;
        v[4] = 16777217;
        v[5] = -(int64_t(1) << 35) - 1;
      } else if (from == DType::i32) {
        auto *v = reinterpret_cast<int32_t *>(x.host.data());
        v[0] = std::numeric_limits<int32_t>::min();
        v[1] = std::numeric_limits<int32_t>::max();
        v[2] = 16777217;
        v[3] = 65519;
        v[4] = 65520;
      } else if (from != DType::i1) {
        std::vector<double> specials = castSpecials();
        for (size_t i = 0; i < specials.size(); ++i)
          setAt(from, x.host.data(), static_cast<int64_t>(i), specials[i]);
        for (int64_t i = 100; i < 200; ++i) // small values: fractions and exact halves
          setAt(from, x.host.data(), i, (i - 150) * 0.25);
      }
      x.upload();
      out.poison();
      ASSERT_OK(cast(ctx, x.devRef(), out.devRef()));
      ASSERT_OK(cpu::cast(x.hostRef(), ref.hostRef()));
      sync();
      expectExact(to, out.download(), ref.host,
                  std::string("Cast ") + dtypeName(from) + " -> " + dtypeName(to));
    }
}

// ---- Gelu, GeluGrad -------------------------------------------------------------------------

TEST_F(ElementwiseKernels, GeluAndGradMatchCpu) {
  uint32_t seed = 61;
  for (bool useTanh : {false, true})
    for (DType dtype : floatDtypes())
      for (const auto &shape : testShapes()) {
        Tensor x(dtype, shape), dy(dtype, shape), out(dtype, shape), ref(dtype, shape),
            dx(dtype, shape), dxRef(dtype, shape);
        fillUniform(x, -6.0, 6.0, seed++);
        fillUniform(dy, -2.0, 2.0, seed++);
        x.upload();
        dy.upload();
        ASSERT_OK(gelu(ctx, x.devRef(), useTanh, out.devRef()));
        ASSERT_OK(geluGrad(ctx, dy.devRef(), x.devRef(), useTanh, dx.devRef()));
        ASSERT_OK(cpuReference({x.hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
          return cpu::gelu(in[0], useTanh, outs[0]);
        }));
        ASSERT_OK(
            cpuReference({dy.hostRef(), x.hostRef()}, {dxRef.hostRef()}, [&](auto in, auto outs) {
              return cpu::geluGrad(in[0], in[1], useTanh, outs[0]);
            }));
        sync();
        Tolerance tol = toleranceFor(dtype);
        if (dtype == DType::f32) // erff/tanhf differ from glibc's by a few ulps near 0
          tol.atol = 1e-6;
        std::string what = useTanh ? " tanh" : " erf";
        expectClose(dtype, out.download(), ref.host, tol, label("Gelu", dtype, shape) + what);
        expectClose(dtype, dx.download(), dxRef.host, toleranceFor(dtype),
                    label("GeluGrad", dtype, shape) + what);
      }
}

// ---- Dropout --------------------------------------------------------------------------------

TEST_F(ElementwiseKernels, DropoutMaskBitExact) {
  struct Case {
    DType seedDtype;
    int64_t seed;
    double ratio;
    int64_t stream;
    uint64_t firstIndex;
  };
  const Case cases[] = {
      {DType::i64, 1234, 0.1, 0, 0},
      {DType::i64, -987654321012345LL, 0.5, 7, 0},
      {DType::i32, -5, 0.3, int64_t(1) << 40, 4294967290ull}, // index crosses 2^32
      {DType::i32, 42, 0.0, 3, 0},
      {DType::i64, 42, 1.0, 3, 0},
      {DType::i64, 0x123456789abcdefLL, 0.9, -1, 123456789012345ull},
  };
  for (const Case &c : cases)
    for (DType dtype : floatDtypes())
      for (const auto &shape :
           std::vector<std::vector<int64_t>>{{}, {1}, {7}, {1000003}, {2, 3, 1, 2, 3}}) {
        Tensor x(dtype, shape), out(dtype, shape), ref(dtype, shape), seed(c.seedDtype, {});
        fillUniform(x, -2.0, 2.0, 71);
        setAt(c.seedDtype, seed.host.data(), 0, 0);
        if (c.seedDtype == DType::i64)
          *reinterpret_cast<int64_t *>(seed.host.data()) = c.seed;
        else
          *reinterpret_cast<int32_t *>(seed.host.data()) = static_cast<int32_t>(c.seed);
        x.upload();
        seed.upload();
        out.poison();
        ASSERT_OK(
            dropout(ctx, x.devRef(), seed.devRef(), c.ratio, c.stream, out.devRef(), c.firstIndex));
        ASSERT_OK(
            cpuReference({x.hostRef(), seed.hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
              return cpu::dropout(in[0], in[1], c.ratio, c.stream, outs[0], c.firstIndex);
            }));
        sync();
        expectExact(dtype, out.download(), ref.host,
                    label("Dropout", dtype, shape) + " ratio " + std::to_string(c.ratio));
      }
}

TEST_F(ElementwiseKernels, DropoutShardMatchesCpuAndGlobalMask) {
  std::vector<int64_t> global = {6, 10, 7}, offset = {2, 5, 1}, local = {3, 4, 5};
  Tensor seed(DType::i64, {});
  *reinterpret_cast<int64_t *>(seed.host.data()) = 20240607;
  seed.upload();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    Tensor x(dtype, local), out(dtype, local), ref(dtype, local);
    fillUniform(x, -1.0, 1.0, 81);
    x.upload();
    ASSERT_OK(dropoutShard(ctx, x.devRef(), seed.devRef(), 0.4, 5, global, offset, out.devRef()));
    ASSERT_OK(cpuReference({x.hostRef(), seed.hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
      return cpu::dropoutShard(in[0], in[1], 0.4, 5, global, offset, outs[0]);
    }));
    sync();
    expectExact(dtype, out.download(), ref.host, label("DropoutShard", dtype, local));
  }
  // Rank 0 shard of a rank 0 tensor.
  Tensor x(DType::f32, {}), out(DType::f32, {}), ref(DType::f32, {});
  fillUniform(x, 1.0, 2.0, 82);
  x.upload();
  ASSERT_OK(dropoutShard(ctx, x.devRef(), seed.devRef(), 0.5, 1, {}, {}, out.devRef()));
  ASSERT_OK(cpu::dropoutShard(x.hostRef(), seed.hostRef(), 0.5, 1, {}, {}, ref.hostRef()));
  sync();
  expectExact(DType::f32, out.download(), ref.host, "DropoutShard rank 0");
}

// ---- Host-side checks: errors name the op and nothing is launched ---------------------------

TEST_F(ElementwiseKernels, ShapeAndDtypeErrorsMatchCpuWithoutLaunching) {
  // Null device pointers: a launch would fault, so a clean sync below shows none happened.
  std::vector<int64_t> s3 = {3}, s4 = {4}, s0 = {};
  TensorRef f3{DType::f32, s3, nullptr}, f4{DType::f32, s4, nullptr};
  TensorRef d3{DType::f64, s3, nullptr}, b3{DType::i1, s3, nullptr};
  TensorRef i3{DType::i32, s3, nullptr}, seed{DType::i64, s0, nullptr};
  TensorRef seedBad{DType::f32, s0, nullptr};
  auto same = [](const Status &gpu, const Status &cpu, const char *op) {
    EXPECT_FALSE(gpu.isOk()) << op;
    EXPECT_FALSE(cpu.isOk()) << op;
    EXPECT_EQ(gpu.message(), cpu.message());
    EXPECT_EQ(gpu.message().rfind(op, 0), 0u) << gpu.message();
  };
  same(unary(ctx, UnaryOp::Exp, f3, f4), cpu::unary(UnaryOp::Exp, f3, f4), "Exp");
  same(unary(ctx, UnaryOp::Exp, f3, d3), cpu::unary(UnaryOp::Exp, f3, d3), "Exp");
  same(unary(ctx, UnaryOp::Not, f3, f3), cpu::unary(UnaryOp::Not, f3, f3), "Not");
  same(binary(ctx, BinaryOp::Add, f3, f4, f3), cpu::binary(BinaryOp::Add, f3, f4, f3), "Add");
  same(binary(ctx, BinaryOp::Mul, f3, d3, f3), cpu::binary(BinaryOp::Mul, f3, d3, f3), "Mul");
  same(binary(ctx, BinaryOp::And, f3, f3, f3), cpu::binary(BinaryOp::And, f3, f3, f3), "And");
  same(compare(ctx, ComparePredicate::lt, f3, f3, f3),
       cpu::compare(ComparePredicate::lt, f3, f3, f3), "Compare");
  same(compare(ctx, ComparePredicate::lt, f3, f4, b3),
       cpu::compare(ComparePredicate::lt, f3, f4, b3), "Compare");
  same(where(ctx, f3, f3, f3, f3), cpu::where(f3, f3, f3, f3), "Where");
  same(where(ctx, b3, f3, f4, f3), cpu::where(b3, f3, f4, f3), "Where");
  same(cast(ctx, f3, TensorRef{DType::i32, s4, nullptr}),
       cpu::cast(f3, TensorRef{DType::i32, s4, nullptr}), "Cast");
  same(gelu(ctx, f3, false, f4), cpu::gelu(f3, false, f4), "Gelu");
  same(geluGrad(ctx, f4, f3, true, f3), cpu::geluGrad(f4, f3, true, f3), "GeluGrad");
  same(dropout(ctx, f3, seed, 1.5, 0, f3), cpu::dropout(f3, seed, 1.5, 0, f3), "Dropout");
  same(dropout(ctx, f3, seedBad, 0.5, 0, f3), cpu::dropout(f3, seedBad, 0.5, 0, f3), "Dropout");
  same(dropout(ctx, f3, seed, 0.5, 0, f4), cpu::dropout(f3, seed, 0.5, 0, f4), "Dropout");
  std::vector<int64_t> g = {2}, o = {0};
  same(dropoutShard(ctx, f3, seed, 0.5, 0, g, o, f3), cpu::dropoutShard(f3, seed, 0.5, 0, g, o, f3),
       "Dropout");
  // Dtypes the CUDA kernels do not take are errors naming the op.
  Status s = unary(ctx, UnaryOp::Exp, i3, i3);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("Exp", 0), 0u) << s.message();
  s = binary(ctx, BinaryOp::Pow, i3, i3, i3);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("Pow", 0), 0u) << s.message();
  sync();
  EXPECT_EQ(takeError(), 0);
}

} // namespace
} // namespace megac::runtime::cuda::test
