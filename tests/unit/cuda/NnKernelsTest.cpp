// The CUDA GEMM, norm, silu, rope, reduction, softmax and cross-entropy kernels against the CPU reference
// kernels on random inputs (fixed seeds). Half types are compared with the CPU's f32 result on
// the same (already rounded) inputs, rounded once (cpu::computeInF32).
//
// Tolerances, per dtype:
// - GEMMs: f32 accumulates in f32 on both sides in different orders over k <= 128 terms of
//   size <= 1: 2e-4 absolute; f64 1e-10; bf16/f16 inputs are exact in f32 and accumulate in f32,
//   so the difference is the output's rounding (2^-8 bf16, 2^-11 f16 relative) plus the
//   reference's own rounding: 2e-2 for bf16, 5e-3 for f16.
// - Norms, reductions, softmax, cross entropy: both sides compute in double and round once, so
//   f32 agrees to 1e-5 and f64 to 1e-12 (summation order only); half types to one rounding of
//   the output: 2e-2 bf16, 5e-3 f16.
#include "NnTestUtil.h"

#include <algorithm>
#include <cstring>

namespace megac::runtime::cuda::test {
namespace {

Tolerance gemmTolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-10, 1e-10};
  case DType::f32:
    return {2e-4, 1e-4};
  case DType::bf16:
    return {2e-2, 2e-2};
  default:
    return {5e-3, 5e-3};
  }
}

Tolerance exactishTolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-12, 1e-12};
  case DType::f32:
    return {1e-5, 1e-5};
  case DType::bf16:
    return {2e-2, 2e-2};
  case DType::f16:
    return {5e-3, 5e-3};
  default:
    return {0, 0};
  }
}

std::string name(const char *op, DType dtype, const std::vector<int64_t> &shape) {
  return std::string(op) + " " + dtypeName(dtype) + " " + shapeString(shape);
}

using NnKernels = NnKernelTest;

// ---- GEMMs -----------------------------------------------------------------------------------

TEST_F(NnKernels, MatMulMatchesCpuWithBatchBroadcasting) {
  struct Case {
    std::vector<int64_t> lhs, rhs, out;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 4}, {5, 4}},                   // plain
      {{3, 5, 7}, {7, 4}, {3, 5, 4}},             // one rhs: folded into m
      {{1, 5, 7}, {3, 7, 4}, {3, 5, 4}},          // lhs broadcast: stride 0
      {{2, 3, 5, 7}, {3, 7, 4}, {2, 3, 5, 4}},    // outer loop over 2
      {{4, 1, 5, 7}, {1, 3, 7, 4}, {4, 3, 5, 4}}, // both broadcast
      {{2, 2, 3, 33, 65}, {2, 1, 3, 65, 17}, {2, 2, 3, 33, 17}},
      {{64, 128}, {128, 96}, {64, 96}},
      {{2, 0}, {0, 3}, {2, 3}}, // k = 0: zeros
  };
  uint32_t seed = 1;
  for (DType dtype : floatDtypes())
    for (const Case &c : cases) {
      auto a = random(dtype, c.lhs, seed++), b = random(dtype, c.rhs, seed++);
      auto out = output(dtype, c.out);
      ASSERT_OK(matmul(ctx, a->devRef(), b->devRef(), out->devRef()));
      sync();
      expectMatchesCpu(
          {a.get(), b.get()}, {out.get()},
          [](auto in, auto outs) { return cpu::matmul(in[0], in[1], outs[0]); },
          gemmTolerance(dtype), name("MatMul", dtype, c.lhs) + " x " + shapeString(c.rhs));
      // Again: the cached plan gives the same bits.
      auto again = output(dtype, c.out);
      ASSERT_OK(matmul(ctx, a->devRef(), b->devRef(), again->devRef()));
      sync();
      expectExact(dtype, again->download(), out->download(), "MatMul repeated");
    }
}

// Mixed-precision gradient accumulation (issue 30): bf16/f16 operands, read transposed or not,
// accumulated into an f32 accumulator (out = acc + op(lhs) op(rhs), in place and into another
// buffer). The products of half inputs are exact in f32 and both sides sum them in f32 and add
// the f32 accumulator without rounding to half, so they differ by f32 summation order alone, as
// f32 GEMMs do: gemmTolerance(f32). A product rounded to half would be off by ~2^-9 |out|
// (~1e-2 here), far outside it.
TEST_F(NnKernels, MatMulAccumulatesHalfOperandsIntoF32) {
  struct Case {
    std::vector<int64_t> lhs, rhs, out;
    bool tl, tr;
  };
  const std::vector<Case> cases = {
      {{7, 5}, {7, 4}, {5, 4}, true, false}, // a weight gradient: g^T x
      {{5, 7}, {4, 7}, {5, 4}, false, true},
      {{64, 96}, {64, 48}, {96, 48}, true, false},   // k = 64
      {{2, 7, 5}, {2, 4, 7}, {2, 5, 4}, true, true}, // batched, both transposed
  };
  uint32_t seed = 100;
  for (DType dtype : {DType::bf16, DType::f16})
    for (const Case &c : cases)
      for (bool inPlace : {false, true}) {
        auto a = random(dtype, c.lhs, seed++), b = random(dtype, c.rhs, seed++);
        auto acc = random(DType::f32, c.out, seed++);
        auto separate = output(DType::f32, c.out);
        Tensor &out = inPlace ? *acc : *separate;
        TensorRef accRef = acc->devRef();
        cpu::MatMulFlags flags{c.tl, c.tr};
        ASSERT_OK(matmul(ctx, a->devRef(), b->devRef(), out.devRef(), flags, &accRef));
        sync();
        // acc's host copy still holds the accumulator as uploaded.
        expectMatchesCpu(
            {a.get(), b.get(), acc.get()}, {&out},
            [&](auto in, auto outs) { return cpu::matmul(in[0], in[1], outs[0], flags, &in[2]); },
            gemmTolerance(DType::f32),
            name("MatMul accumulate", dtype, c.lhs) + " x " + shapeString(c.rhs) +
                (inPlace ? " in place" : ""));
      }
  // An f32 output of half operands without an accumulator: refused.
  auto a = random(DType::bf16, {3, 4}, 1), b = random(DType::bf16, {4, 2}, 2);
  auto wide = output(DType::f32, {3, 2});
  Status s = matmul(ctx, a->devRef(), b->devRef(), wide->devRef());
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MatMul: output is f32, expected bf16"), std::string::npos)
      << s.message();
}

TEST_F(NnKernels, LinearMatchesCpuWithAndWithoutBias) {
  struct Case {
    std::vector<int64_t> x;
    int64_t out;
  };
  const std::vector<Case> cases = {{{2, 3, 17}, 9}, {{64, 128}, 96}, {{1, 1}, 1}, {{5, 0}, 3}};
  uint32_t seed = 100;
  for (DType dtype : floatDtypes())
    for (const Case &c : cases)
      for (bool withBias : {false, true}) {
        int64_t in = c.x.back();
        auto x = random(dtype, c.x, seed++), w = random(dtype, {c.out, in}, seed++);
        auto bias = random(dtype, {c.out}, seed++);
        std::vector<int64_t> outShape = c.x;
        outShape.back() = c.out;
        auto out = output(dtype, outShape);
        TensorRef biasRef = bias->devRef();
        ASSERT_OK(
            linear(ctx, x->devRef(), w->devRef(), withBias ? &biasRef : nullptr, out->devRef()));
        sync();
        expectMatchesCpu(
            {x.get(), w.get(), bias.get()}, {out.get()},
            [withBias](auto ins, auto outs) {
              return cpu::linear(ins[0], ins[1], withBias ? &ins[2] : nullptr, outs[0]);
            },
            gemmTolerance(dtype),
            name("Linear", dtype, c.x) + (withBias ? " with bias" : " without bias"));
      }
}

TEST_F(NnKernels, GemmShapeErrorsNameTheOp) {
  Tensor a(DType::f32, {2, 3}), b(DType::f32, {4, 5}), out(DType::f32, {2, 5});
  Status s = matmul(ctx, a.devRef(), b.devRef(), out.devRef());
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("MatMul: contraction dims differ", 0), 0u) << s.message();
  Tensor w(DType::f32, {5, 4});
  s = linear(ctx, a.devRef(), w.devRef(), nullptr, out.devRef());
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("Linear: weight must be [out, in]", 0), 0u) << s.message();
}

// ---- Norms -----------------------------------------------------------------------------------

const std::vector<std::vector<int64_t>> &normShapes() {
  static const std::vector<std::vector<int64_t>> kShapes = {
      {5, 33}, {300, 100}, {3, 1000}, {4, 1}, {2, 3, 768}};
  return kShapes;
}

TEST_F(NnKernels, LayerNormAndRmsNormMatchCpu) {
  uint32_t seed = 200;
  for (DType dtype : floatDtypes())
    for (const auto &shape : normShapes()) {
      int64_t n = shape.back();
      auto x = random(dtype, shape, seed++, -2.0, 3.0); // a nonzero mean
      auto w = random(dtype, {n}, seed++), b = random(dtype, {n}, seed++);
      for (bool withBias : {false, true}) {
        auto out = output(dtype, shape);
        TensorRef bRef = b->devRef();
        ASSERT_OK(layerNorm(ctx, x->devRef(), w->devRef(), withBias ? &bRef : nullptr, 1e-5,
                            out->devRef()));
        sync();
        expectMatchesCpu(
            {x.get(), w.get(), b.get()}, {out.get()},
            [withBias](auto in, auto outs) {
              return cpu::layerNorm(in[0], in[1], withBias ? &in[2] : nullptr, 1e-5, outs[0]);
            },
            exactishTolerance(dtype), name("LayerNorm", dtype, shape));
      }
      auto out = output(dtype, shape);
      ASSERT_OK(rmsNorm(ctx, x->devRef(), w->devRef(), 1e-6, out->devRef()));
      sync();
      expectMatchesCpu(
          {x.get(), w.get()}, {out.get()},
          [](auto in, auto outs) { return cpu::rmsNorm(in[0], in[1], 1e-6, outs[0]); },
          exactishTolerance(dtype), name("RmsNorm", dtype, shape));
    }
}

// Silu and Rope compute in the compute type (f32 for f32 and halves) on both sides; the device
// may contract a * b + c into an FMA, one rounding apart: exactishTolerance covers it.
TEST_F(NnKernels, SiluAndRopeMatchCpu) {
  uint32_t seed = 250;
  for (DType dtype : floatDtypes()) {
    for (const auto &shape : normShapes()) {
      auto x = random(dtype, shape, seed++, -6.0, 6.0);
      auto out = output(dtype, shape);
      ASSERT_OK(silu(ctx, x->devRef(), out->devRef()));
      sync();
      expectMatchesCpu(
          {x.get()}, {out.get()},
          [](auto in, auto outs) { return cpu::silu(in[0], outs[0]); },
          exactishTolerance(dtype), name("Silu", dtype, shape));
    }
    // x [b, h, s, d] with tables [s, d], [b, 1, s, d] (Hugging Face's) and x's own shape.
    std::vector<int64_t> xs = {2, 3, 5, 8};
    for (std::vector<int64_t> ts : {std::vector<int64_t>{5, 8}, {2, 1, 5, 8}, {2, 3, 5, 8}}) {
      auto x = random(dtype, xs, seed++, -2.0, 2.0);
      auto c = random(dtype, ts, seed++), s = random(dtype, ts, seed++);
      auto out = output(dtype, xs);
      ASSERT_OK(rope(ctx, x->devRef(), c->devRef(), s->devRef(), out->devRef()));
      sync();
      expectMatchesCpu(
          {x.get(), c.get(), s.get()}, {out.get()},
          [](auto in, auto outs) { return cpu::rope(in[0], in[1], in[2], outs[0]); },
          exactishTolerance(dtype), name("Rope", dtype, ts));
    }
  }
  auto x = random(DType::f32, {2, 7}, 1), t = random(DType::f32, {2, 7}, 2);
  auto out = output(DType::f32, {2, 7});
  EXPECT_FALSE(rope(ctx, x->devRef(), t->devRef(), t->devRef(), out->devRef()).isOk());
}

TEST_F(NnKernels, NormGradsMatchCpuAndAreDeterministic) {
  uint32_t seed = 300;
  for (DType dtype : floatDtypes())
    for (const auto &shape : normShapes()) {
      int64_t n = shape.back();
      auto x = random(dtype, shape, seed++, -2.0, 3.0), dy = random(dtype, shape, seed++);
      auto w = random(dtype, {n}, seed++);
      auto dx = output(dtype, shape), dw = output(dtype, {n}), db = output(dtype, {n});
      ASSERT_OK(layerNormGrad(ctx, dy->devRef(), x->devRef(), w->devRef(), 1e-5, dx->devRef(),
                              dw->devRef(), db->devRef()));
      sync();
      // dweight/dbias sum over up to 600 rows of O(1) terms: a looser absolute bound for halves.
      Tolerance tol = exactishTolerance(dtype);
      expectMatchesCpu(
          {dy.get(), x.get(), w.get()}, {dx.get(), dw.get(), db.get()},
          [](auto in, auto outs) {
            return cpu::layerNormGrad(in[0], in[1], in[2], 1e-5, outs[0], outs[1], outs[2]);
          },
          tol, name("LayerNormGrad", dtype, shape));
      auto dx2 = output(dtype, shape), dw2 = output(dtype, {n}), db2 = output(dtype, {n});
      ASSERT_OK(layerNormGrad(ctx, dy->devRef(), x->devRef(), w->devRef(), 1e-5, dx2->devRef(),
                              dw2->devRef(), db2->devRef()));
      sync();
      expectExact(dtype, dx2->download(), dx->download(), "LayerNormGrad dx twice");
      expectExact(dtype, dw2->download(), dw->download(), "LayerNormGrad dweight twice");
      expectExact(dtype, db2->download(), db->download(), "LayerNormGrad dbias twice");

      auto rdx = output(dtype, shape), rdw = output(dtype, {n});
      ASSERT_OK(rmsNormGrad(ctx, dy->devRef(), x->devRef(), w->devRef(), 1e-6, rdx->devRef(),
                            rdw->devRef()));
      sync();
      expectMatchesCpu(
          {dy.get(), x.get(), w.get()}, {rdx.get(), rdw.get()},
          [](auto in, auto outs) {
            return cpu::rmsNormGrad(in[0], in[1], in[2], 1e-6, outs[0], outs[1]);
          },
          tol, name("RmsNormGrad", dtype, shape));
      auto rdx2 = output(dtype, shape), rdw2 = output(dtype, {n});
      ASSERT_OK(rmsNormGrad(ctx, dy->devRef(), x->devRef(), w->devRef(), 1e-6, rdx2->devRef(),
                            rdw2->devRef()));
      sync();
      expectExact(dtype, rdw2->download(), rdw->download(), "RmsNormGrad dweight twice");
    }
}

TEST_F(NnKernels, NormShapeErrorsNameTheOp) {
  Tensor x(DType::f32, {2, 3}), w(DType::f32, {4}), out(DType::f32, {2, 3});
  Status s = layerNorm(ctx, x.devRef(), w.devRef(), nullptr, 1e-5, out.devRef());
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("LayerNorm: weight has shape [4], expected [3]", 0), 0u)
      << s.message();
}

// ---- Reduce ----------------------------------------------------------------------------------

TEST_F(NnKernels, ReduceMatchesCpuOverAnyAxes) {
  struct Case {
    std::vector<int64_t> shape, axes;
  };
  const std::vector<Case> cases = {
      {{4, 5, 6}, {}},  {{4, 5, 6}, {1}},       {{4, 5, 6}, {0, 2}},
      {{4, 5, 6}, {2}}, {{4, 5, 6}, {0, 1, 2}}, {{3, 5000}, {1}},
      {{5000, 3}, {0}}, {{7, 100, 9}, {0, 2}},  {{0, 3}, {1}},
  };
  const DType dtypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32};
  const ReduceKind kinds[] = {ReduceKind::sum, ReduceKind::mean, ReduceKind::max, ReduceKind::min};
  uint32_t seed = 400;
  for (DType dtype : dtypes)
    for (const Case &c : cases)
      for (ReduceKind kind : kinds)
        for (bool keep : {false, true}) {
          bool integral = dtype == DType::i64 || dtype == DType::i32;
          auto x =
              integral ? random(dtype, c.shape, seed++, -100, 100) : random(dtype, c.shape, seed++);
          std::vector<int64_t> outShape;
          for (size_t d = 0; d < c.shape.size(); ++d) {
            bool reduced = std::find(c.axes.begin(), c.axes.end(), int64_t(d)) != c.axes.end();
            if (!reduced)
              outShape.push_back(c.shape[d]);
            else if (keep)
              outShape.push_back(1);
          }
          auto out = output(dtype, outShape);
          std::vector<int64_t> axes = c.axes;
          ASSERT_OK(reduce(ctx, kind, x->devRef(), axes, out->devRef()));
          sync();
          // A sum of 5000 half values: the reference rounds its f32 result once, as we do.
          expectMatchesCpu(
              {x.get()}, {out.get()},
              [kind, axes](auto in, auto outs) { return cpu::reduce(kind, in[0], axes, outs[0]); },
              exactishTolerance(dtype),
              name("Reduce", dtype, c.shape) + " axes " + shapeString(axes) + " kind " +
                  std::to_string(int(kind)));
        }
}

TEST_F(NnKernels, ReduceMaxPropagatesNaN) {
  Tensor x(DType::f32, {2, 40});
  fillUniform(x, -1, 1, 7);
  reinterpret_cast<float *>(x.host.data())[45] = std::nanf("");
  x.upload();
  Tensor out(DType::f32, {2});
  std::vector<int64_t> axes{1};
  ASSERT_OK(reduce(ctx, ReduceKind::max, x.devRef(), axes, out.devRef()));
  sync();
  std::vector<uint8_t> got = out.download();
  EXPECT_FALSE(std::isnan(valueAt(DType::f32, got.data(), 0)));
  EXPECT_TRUE(std::isnan(valueAt(DType::f32, got.data(), 1)));
}

// ---- Softmax ---------------------------------------------------------------------------------

TEST_F(NnKernels, SoftmaxAndGradMatchCpuAlongAnyAxis) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{4, 37}, 1},   {{3, 50, 7}, 1}, {{3, 50, 7}, 0},
                                   {{2, 5000}, 1}, {{6, 1}, 1},     {{3, 50, 7}, 2}};
  uint32_t seed = 500;
  for (DType dtype : floatDtypes())
    for (const Case &c : cases) {
      auto x = random(dtype, c.shape, seed++, -4, 4);
      auto y = output(dtype, c.shape);
      ASSERT_OK(softmax(ctx, x->devRef(), c.axis, y->devRef()));
      sync();
      int64_t axis = c.axis;
      expectMatchesCpu(
          {x.get()}, {y.get()},
          [axis](auto in, auto outs) { return cpu::softmax(in[0], axis, outs[0]); },
          exactishTolerance(dtype), name("Softmax", dtype, c.shape));
      auto dy = random(dtype, c.shape, seed++), yv = random(dtype, c.shape, seed++, 0, 1);
      auto dx = output(dtype, c.shape);
      ASSERT_OK(softmaxGrad(ctx, dy->devRef(), yv->devRef(), c.axis, dx->devRef()));
      sync();
      expectMatchesCpu(
          {dy.get(), yv.get()}, {dx.get()},
          [axis](auto in, auto outs) { return cpu::softmaxGrad(in[0], in[1], axis, outs[0]); },
          exactishTolerance(dtype), name("SoftmaxGrad", dtype, c.shape));
    }
}

// ---- Cross entropy ---------------------------------------------------------------------------

/// Labels in [0, vocab) with row 2 (when there is one) set to the ignore index -100.
std::unique_ptr<Tensor> labelsFor(DType dtype, int64_t rows, int64_t vocab, uint32_t seed) {
  auto t = std::make_unique<Tensor>(dtype, std::vector<int64_t>{rows});
  fillUniform(*t, 0, double(vocab - 1), seed);
  if (rows > 2)
    setAt(dtype, t->host.data(), 2, -100);
  t->upload();
  return t;
}

TEST_F(NnKernels, CrossEntropyAndGradMatchCpu) {
  uint32_t seed = 600;
  for (DType dtype : floatDtypes())
    for (DType labelType : {DType::i64, DType::i32})
      for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{6, 50}, {4, 3000}, {1, 1}}) {
        auto logits = random(dtype, {rows, vocab}, seed++, -5, 5);
        auto labels = labelsFor(labelType, rows, vocab, seed++);
        std::optional<int64_t> ignore = -100;
        auto loss = output(dtype, {rows});
        ASSERT_OK(crossEntropy(ctx, logits->devRef(), labels->devRef(), ignore, loss->devRef()));
        sync();
        std::string what = name("CrossEntropy", dtype, {rows, vocab});
        expectMatchesCpu(
            {logits.get(), labels.get()}, {loss.get()},
            [ignore](auto in, auto outs) {
              return cpu::crossEntropy(in[0], in[1], ignore, outs[0]);
            },
            exactishTolerance(dtype), what);
        auto dloss = random(dtype, {rows}, seed++);
        auto dlogits = output(dtype, {rows, vocab});
        ASSERT_OK(crossEntropyGrad(ctx, dloss->devRef(), logits->devRef(), labels->devRef(), ignore,
                                   dlogits->devRef()));
        sync();
        expectMatchesCpu(
            {dloss.get(), logits.get(), labels.get()}, {dlogits.get()},
            [ignore](auto in, auto outs) {
              return cpu::crossEntropyGrad(in[0], in[1], in[2], ignore, outs[0]);
            },
            exactishTolerance(dtype), what + " grad");
        EXPECT_EQ(takeError(), 0) << what;
      }
}

TEST_F(NnKernels, CrossEntropyLabelOutOfRangeSetsTheErrorCode) {
  auto logits = random(DType::f32, {3, 10}, 1);
  Tensor labels(DType::i64, {3});
  int64_t values[3] = {1, 10, 2}; // 10 == V: out of range
  std::memcpy(labels.host.data(), values, sizeof(values));
  labels.upload();
  auto loss = output(DType::f32, {3});
  ASSERT_OK(crossEntropy(ctx, logits->devRef(), labels.devRef(), std::nullopt, loss->devRef()));
  EXPECT_EQ(takeError(), int(DeviceError::labelOutOfRange));
  std::vector<uint8_t> got = loss->download();
  EXPECT_EQ(valueAt(DType::f32, got.data(), 1), 0.0);
  EXPECT_GT(valueAt(DType::f32, got.data(), 0), 0.0);

  auto dloss = random(DType::f32, {3}, 2);
  auto dlogits = output(DType::f32, {3, 10});
  ASSERT_OK(crossEntropyGrad(ctx, dloss->devRef(), logits->devRef(), labels.devRef(), std::nullopt,
                             dlogits->devRef()));
  EXPECT_EQ(takeError(), int(DeviceError::labelOutOfRange));
  got = dlogits->download();
  for (int64_t j = 0; j < 10; ++j)
    EXPECT_EQ(valueAt(DType::f32, got.data(), 10 + j), 0.0) << j;
  // A label equal to the ignore index is not an error.
  ASSERT_OK(crossEntropy(ctx, logits->devRef(), labels.devRef(), 10, loss->devRef()));
  EXPECT_EQ(takeError(), 0);
}

/// Copies columns [c0, c0 + n) of a [rows, cols] host tensor into a new tensor (uploaded).
std::unique_ptr<Tensor> columns(const Tensor &t, int64_t c0, int64_t n) {
  int64_t rows = t.shape()[0], cols = t.shape()[1];
  size_t es = dtypeSize(t.dtype());
  auto out = std::make_unique<Tensor>(t.dtype(), std::vector<int64_t>{rows, n});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out->host.data() + r * n * es, t.host.data() + (r * cols + c0) * es, n * es);
  out->upload();
  return out;
}

TEST_F(NnKernels, VocabParallelCrossEntropyPiecesMatchCpuOverTwoShards) {
  const int64_t rows = 6, vocab = 50, split = 20;
  uint32_t seed = 700;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
    auto logits = random(dtype, {rows, vocab}, seed++, -5, 5);
    auto labels = labelsFor(DType::i64, rows, vocab, seed++);
    std::optional<int64_t> ignore = -100;
    std::unique_ptr<Tensor> shards[2] = {columns(*logits, 0, split),
                                         columns(*logits, split, vocab - split)};
    const int64_t starts[2] = {0, split};
    // Per shard row max and target logit; combined on the host as the collectives would.
    Tensor gmax(stats, {rows}), target(stats, {rows}), sum(stats, {rows});
    for (int64_t r = 0; r < rows; ++r) {
      setAt(stats, gmax.host.data(), r, -INFINITY);
      setAt(stats, target.host.data(), r, 0);
      setAt(stats, sum.host.data(), r, 0);
    }
    for (int sIdx = 0; sIdx < 2; ++sIdx) {
      Tensor rowMax(stats, {rows}), tl(stats, {rows});
      ASSERT_OK(crossEntropyShardStats(ctx, shards[sIdx]->devRef(), labels->devRef(), starts[sIdx],
                                       rowMax.devRef(), tl.devRef()));
      sync();
      std::vector<uint8_t> m = rowMax.download(), t = tl.download();
      for (int64_t r = 0; r < rows; ++r) {
        setAt(stats, gmax.host.data(), r,
              std::max(valueAt(stats, gmax.host.data(), r), valueAt(stats, m.data(), r)));
        setAt(stats, target.host.data(), r,
              valueAt(stats, target.host.data(), r) + valueAt(stats, t.data(), r));
      }
    }
    gmax.upload();
    target.upload();
    for (int sIdx = 0; sIdx < 2; ++sIdx) {
      Tensor part(stats, {rows});
      ASSERT_OK(crossEntropyShardSumExp(ctx, shards[sIdx]->devRef(), gmax.devRef(), part.devRef()));
      sync();
      std::vector<uint8_t> p = part.download();
      for (int64_t r = 0; r < rows; ++r)
        setAt(stats, sum.host.data(), r,
              valueAt(stats, sum.host.data(), r) + valueAt(stats, p.data(), r));
    }
    sum.upload();
    auto loss = output(dtype, {rows});
    ASSERT_OK(crossEntropyShardLoss(ctx, gmax.devRef(), sum.devRef(), target.devRef(),
                                    labels->devRef(), ignore, loss->devRef()));
    sync();
    std::string what = std::string("vocab-parallel cross entropy ") + dtypeName(dtype);
    expectMatchesCpu(
        {logits.get(), labels.get()}, {loss.get()},
        [ignore](auto in, auto outs) { return cpu::crossEntropy(in[0], in[1], ignore, outs[0]); },
        exactishTolerance(dtype), what);
    // Gradients per shard, joined, against the full gradient.
    auto dloss = random(dtype, {rows}, seed++);
    Tensor joined(dtype, {rows, vocab});
    size_t es = dtypeSize(dtype);
    for (int sIdx = 0; sIdx < 2; ++sIdx) {
      int64_t n = shards[sIdx]->shape()[1];
      auto part = output(dtype, {rows, n});
      ASSERT_OK(crossEntropyShardGrad(ctx, dloss->devRef(), shards[sIdx]->devRef(),
                                      labels->devRef(), starts[sIdx], gmax.devRef(), sum.devRef(),
                                      ignore, part->devRef()));
      sync();
      std::vector<uint8_t> p = part->download();
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(joined.host.data() + (r * vocab + starts[sIdx]) * es, p.data() + r * n * es,
                    n * es);
    }
    joined.upload();
    expectMatchesCpu(
        {dloss.get(), logits.get(), labels.get()}, {&joined},
        [ignore](auto in, auto outs) {
          return cpu::crossEntropyGrad(in[0], in[1], in[2], ignore, outs[0]);
        },
        exactishTolerance(dtype), what + " grad");
  }
}

} // namespace
} // namespace megac::runtime::cuda::test
