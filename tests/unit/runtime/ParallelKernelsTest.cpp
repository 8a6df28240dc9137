// The CPU kernels that split work over threads (runtime/cpu/Parallel.h) against their serial
// selves and naive references: the same bits on 1, 2 and 3 threads, the tiled transpose against
// index arithmetic, and AdamW's vectorised f32 loop (VectorMath.cpp) against the scalar formula.
#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

// Weak: a build without OpenBLAS (MEGAC_BLAS=OFF) runs the kernels on one thread only.
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;

namespace {

std::vector<float> randomFloats(size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = normal(rng);
  return v;
}

/// Runs `kernel` (which writes its outputs) on 1, 2 and 3 threads and checks that the outputs'
/// bytes agree; `outputs` are the buffers it writes.
void expectSameOnAnyThreads(const char *what, std::vector<std::vector<float> *> outputs,
                            const std::function<void()> &kernel, int maxThreads = 3) {
  if (!openblas_set_num_threads)
    GTEST_SKIP() << "built without OpenBLAS: the kernels run on one thread";
  int saved = openblas_get_num_threads();
  std::vector<std::vector<float>> first;
  for (int threads : {1, 2, 3}) {
    if (threads > maxThreads)
      break;
    openblas_set_num_threads(threads);
    for (std::vector<float> *o : outputs)
      std::fill(o->begin(), o->end(), -7.0f);
    kernel();
    if (threads == 1) {
      for (std::vector<float> *o : outputs)
        first.push_back(*o);
      continue;
    }
    for (size_t k = 0; k < outputs.size(); ++k)
      EXPECT_EQ(0, std::memcmp(first[k].data(), outputs[k]->data(), first[k].size() * 4))
          << what << ": output " << k << " differs on " << threads << " threads";
  }
  openblas_set_num_threads(saved);
}

TensorRef ref(std::vector<float> &v, const std::vector<int64_t> &shape) {
  return {DType::f32, shape, v.data()};
}

} // namespace

TEST(ParallelKernels, ElementwiseAndRowKernelsGiveTheSameBitsOnAnyThreads) {
  std::vector<int64_t> shape{4, 96, 307};
  size_t n = 4 * 96 * 307;
  std::vector<float> x = randomFloats(n, 3.0f, 1), dy = randomFloats(n, 1.0f, 2);
  std::vector<float> y(n), z(n);
  for (bool tanh : {false, true}) {
    expectSameOnAnyThreads("Gelu", {&y},
                           [&] { ASSERT_TRUE(gelu(ref(x, shape), tanh, ref(y, shape)).isOk()); });
    expectSameOnAnyThreads("GeluGrad", {&y}, [&] {
      ASSERT_TRUE(geluGrad(ref(dy, shape), ref(x, shape), tanh, ref(y, shape)).isOk());
    });
  }
  expectSameOnAnyThreads("Add", {&y}, [&] {
    ASSERT_TRUE(binary(BinaryOp::Add, ref(x, shape), ref(dy, shape), ref(y, shape)).isOk());
  });
  for (int64_t axis : {0, 1, 2}) {
    expectSameOnAnyThreads(
        "Softmax", {&y}, [&] { ASSERT_TRUE(softmax(ref(x, shape), axis, ref(y, shape)).isOk()); });
    expectSameOnAnyThreads("SoftmaxGrad", {&z}, [&] {
      ASSERT_TRUE(softmax(ref(x, shape), axis, ref(y, shape)).isOk());
      ASSERT_TRUE(softmaxGrad(ref(dy, shape), ref(y, shape), axis, ref(z, shape)).isOk());
    });
  }
  std::vector<int64_t> rows{4, 96}, axes{2};
  std::vector<float> sums(4 * 96);
  expectSameOnAnyThreads("Reduce", {&sums}, [&] {
    ASSERT_TRUE(reduce(ReduceKind::sum, ref(x, shape), axes, ref(sums, rows)).isOk());
  });
  // Sums and means over the leading dims (a bias gradient over [b, s]) stream the rows: each
  // column still adds its rows in ascending order in double, so the bits equal that loop's.
  for (ReduceKind kind : {ReduceKind::sum, ReduceKind::mean})
    for (int64_t lead : {1, 2}) {
      std::vector<int64_t> leadAxes(static_cast<size_t>(lead), 0),
          kept(shape.begin() + lead, shape.end());
      std::iota(leadAxes.begin(), leadAxes.end(), 0);
      int64_t rowCount = lead == 1 ? 4 : 4 * 96, cols = int64_t(n) / rowCount;
      std::vector<float> col(static_cast<size_t>(cols)), expected(static_cast<size_t>(cols));
      for (int64_t j = 0; j < cols; ++j) {
        double acc = 0.0;
        for (int64_t r = 0; r < rowCount; ++r)
          acc += double(x[size_t(r * cols + j)]);
        expected[size_t(j)] = float(kind == ReduceKind::mean ? acc / double(rowCount) : acc);
      }
      expectSameOnAnyThreads("Reduce over leading dims", {&col}, [&] {
        ASSERT_TRUE(reduce(kind, ref(x, shape), leadAxes, ref(col, kept)).isOk());
        EXPECT_EQ(0, std::memcmp(col.data(), expected.data(), col.size() * 4))
            << "lead " << lead << ": not the in-order double sum";
      });
    }
  // Attention's heads run on the kernel threads, each product on one BLAS thread, and the
  // backward's sums (dk/dv over a kv head's query heads, a broadcast mask's gradient) add in the
  // serial order: the same bits on 1, 2 and 3 threads (before, OpenBLAS's own 3-thread split
  // of the per-head products gave other bits).
  std::vector<int64_t> qShape{2, 160, 4, 16}, kvShape{2, 160, 2, 16};
  std::vector<float> q = randomFloats(2 * 160 * 4 * 16, 1.0f, 4),
                     k = randomFloats(2 * 160 * 4 * 16, 1.0f, 5),
                     v = randomFloats(2 * 160 * 4 * 16, 1.0f, 6), o(q.size()), dq(q.size()),
                     dk(k.size()), dv(v.size());
  for (int64_t kvHeads : {4, 2}) { // multi-head, then grouped queries (two per kv head)
    std::vector<int64_t> kv = kvHeads == 4 ? qShape : kvShape;
    dk.resize(size_t(2 * 160 * kvHeads * 16));
    dv.resize(dk.size());
    for (bool causal : {false, true}) {
      expectSameOnAnyThreads("Attention", {&o}, [&] {
        ASSERT_TRUE(
            attention(ref(q, qShape), ref(k, kv), ref(v, kv), nullptr, causal, 0.25, ref(o, qShape))
                .isOk());
      });
      expectSameOnAnyThreads("AttentionGrad", {&dq, &dk, &dv}, [&] {
        ASSERT_TRUE(attentionGrad(ref(o, qShape), ref(q, qShape), ref(k, kv), ref(v, kv), nullptr,
                                  causal, 0.25, ref(dq, qShape), ref(dk, kv), ref(dv, kv), nullptr)
                        .isOk());
      });
    }
    // Additive masks broadcast over batch and heads, over heads, and not at all.
    for (std::vector<int64_t> maskShape :
         std::vector<std::vector<int64_t>>{{160, 160}, {2, 1, 160, 160}, {2, 4, 160, 160}}) {
      size_t maskSize = 1;
      for (int64_t dim : maskShape)
        maskSize *= size_t(dim);
      std::vector<float> mask = randomFloats(maskSize, 1.0f, 7), dmask(maskSize);
      expectSameOnAnyThreads("Attention with a mask", {&o}, [&] {
        TensorRef m = ref(mask, maskShape);
        ASSERT_TRUE(
            attention(ref(q, qShape), ref(k, kv), ref(v, kv), &m, false, 0.25, ref(o, qShape))
                .isOk());
      });
      expectSameOnAnyThreads("AttentionGrad with a mask", {&dq, &dk, &dv, &dmask}, [&] {
        TensorRef m = ref(mask, maskShape), dm = ref(dmask, maskShape);
        ASSERT_TRUE(attentionGrad(ref(o, qShape), ref(q, qShape), ref(k, kv), ref(v, kv), &m, false,
                                  0.25, ref(dq, qShape), ref(dk, kv), ref(dv, kv), &dm)
                        .isOk());
      });
    }
  }
  // LayerNorm's rows, LayerNormGrad's rows and its weight gradients' columns are split.
  std::vector<int64_t> lastDim{307};
  std::vector<float> w = randomFloats(307, 1.0f, 8), bias = randomFloats(307, 1.0f, 9), dw(307),
                     db(307);
  expectSameOnAnyThreads("LayerNorm", {&y}, [&] {
    TensorRef b = ref(bias, lastDim);
    ASSERT_TRUE(layerNorm(ref(x, shape), ref(w, lastDim), &b, 1e-5, ref(y, shape)).isOk());
  });
  expectSameOnAnyThreads("LayerNormGrad", {&y, &dw, &db}, [&] {
    ASSERT_TRUE(layerNormGrad(ref(dy, shape), ref(x, shape), ref(w, lastDim), 1e-5, ref(y, shape),
                              ref(dw, lastDim), ref(db, lastDim))
                    .isOk());
  });
  std::vector<int64_t> labels(4 * 96);
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = i % 5 == 0 ? -100 : int64_t(i * 37 % 307);
  TensorRef labelRef{DType::i64, rows, labels.data()};
  std::vector<float> loss(4 * 96), dloss = randomFloats(4 * 96, 1.0f, 3);
  expectSameOnAnyThreads("CrossEntropy", {&loss}, [&] {
    ASSERT_TRUE(crossEntropy(ref(x, shape), labelRef, -100, ref(loss, rows)).isOk());
  });
  expectSameOnAnyThreads("CrossEntropyGrad", {&y}, [&] {
    ASSERT_TRUE(
        crossEntropyGrad(ref(dloss, rows), ref(x, shape), labelRef, -100, ref(y, shape)).isOk());
  });
  std::vector<int64_t> low{0, 2, 1}, high{1, 0, 3}, interior{0, 1, 0}, padded{5, 98 + 95, 311};
  std::vector<float> p(5 * (98 + 95) * 311);
  expectSameOnAnyThreads("Pad", {&p}, [&] {
    ASSERT_TRUE(pad(ref(x, shape), low, high, interior, ref(p, padded)).isOk());
  });
}

TEST(ParallelKernels, AdamWInPlaceGivesTheSameBitsOnAnyThreadsAndAsTheScalarFormula) {
  size_t n = 100003; // odd: a scalar tail after the pairs
  std::vector<int64_t> shape{int64_t(n)}, scalar{};
  std::vector<float> p0 = randomFloats(n, 1.0f, 4), g = randomFloats(n, 1e-2f, 5);
  std::vector<float> m0 = randomFloats(n, 1e-3f, 6), v0 = randomFloats(n, 1e-4f, 7);
  for (float &v : v0)
    v = std::fabs(v);
  p0[7] = NAN;
  g[9] = INFINITY;
  g[11] = 0.0f, m0[11] = 0.0f, v0[11] = 0.0f;
  AdamWConfig config{0.9, 0.999, 1e-6, 0.01};
  double lr = 1e-3;
  int64_t step = 3;
  TensorRef lrRef{DType::f64, scalar, &lr}, stepRef{DType::i64, scalar, &step};
  std::vector<float> p, m, v;
  expectSameOnAnyThreads("AdamW", {&p, &m, &v}, [&] {
    p = p0, m = m0, v = v0;
    ASSERT_TRUE(adamw(ref(p, shape), ref(g, shape), ref(m, shape), ref(v, shape), lrRef, stepRef,
                      config, ref(p, shape), ref(m, shape), ref(v, shape))
                    .isOk());
  });
  p = p0, m = m0, v = v0;
  ASSERT_TRUE(adamw(ref(p, shape), ref(g, shape), ref(m, shape), ref(v, shape), lrRef, stepRef,
                    config, ref(p, shape), ref(m, shape), ref(v, shape))
                  .isOk());
  double bias1 = 1.0 - std::pow(0.9, 3.0), bias2 = 1.0 - std::pow(0.999, 3.0);
  for (size_t i = 0; i < n; ++i) {
    double pi = p0[i], gi = g[i], mi = m0[i], vi = v0[i];
    pi -= lr * 0.01 * pi;
    float mNew = static_cast<float>(0.9 * mi + (1.0 - 0.9) * gi);
    float vNew = static_cast<float>(0.999 * vi + (1.0 - 0.999) * gi * gi);
    pi -= lr * (static_cast<double>(mNew) / bias1) /
          (std::sqrt(static_cast<double>(vNew) / bias2) + 1e-6);
    float pNew = static_cast<float>(pi);
    ASSERT_EQ(0, std::memcmp(&pNew, &p[i], 4)) << "param " << i;
    ASSERT_EQ(0, std::memcmp(&mNew, &m[i], 4)) << "exp_avg " << i;
    ASSERT_EQ(0, std::memcmp(&vNew, &v[i], 4)) << "exp_avg_sq " << i;
  }
}

TEST(ParallelKernels, TransposeMatchesIndexArithmeticForEveryPermutation) {
  for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{
           {37, 53}, {64, 130}, {3, 33, 70}, {2, 5, 40, 9}, {4, 64, 12, 36}}) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<int64_t> perm(shape.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      std::vector<int64_t> outShape(shape.size()), strides(shape.size());
      for (size_t d = shape.size(), s = 1; d-- > 0; s *= shape[d])
        strides[d] = int64_t(s);
      for (size_t d = 0; d < shape.size(); ++d)
        outShape[d] = shape[perm[d]];
      for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
        size_t size = dtypeSize(dtype);
        std::vector<uint8_t> x(n * size), out(n * size), expected(n * size);
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = uint8_t(i * 131 + 7);
        ASSERT_TRUE(
            transpose({dtype, shape, x.data()}, perm, {dtype, outShape, out.data()}).isOk());
        for (int64_t o = 0; o < n; ++o) {
          int64_t rest = o, from = 0;
          for (size_t d = shape.size(); d-- > 0;) {
            from += rest % outShape[d] * strides[perm[d]];
            rest /= outShape[d];
          }
          std::memcpy(&expected[o * size], &x[from * size], size);
        }
        ASSERT_EQ(expected, out) << "shape of rank " << shape.size() << ", dtype "
                                 << dtypeName(dtype);
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}
