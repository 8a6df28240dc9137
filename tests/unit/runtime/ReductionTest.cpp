// CPU reductions against naive loops in double: Reduce (kept and dropped dims), Softmax and
// CrossEntropy.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <limits>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

TEST(Reduction, ReduceOverAxesKeptOrDropped) {
  const int64_t A = 3, B = 4, C = 5;
  std::vector<float> xs = randomValues(A * B * C, 21, -2, 2);
  HostTensor x = f32({A, B, C}, xs);
  std::vector<int64_t> axes{0, 2};
  for (ReduceKind kind : {ReduceKind::sum, ReduceKind::mean, ReduceKind::max, ReduceKind::min}) {
    std::vector<double> want(B);
    for (int64_t b = 0; b < B; ++b) {
      double acc = kind == ReduceKind::max ? -1e30 : (kind == ReduceKind::min ? 1e30 : 0.0);
      for (int64_t a = 0; a < A; ++a)
        for (int64_t c = 0; c < C; ++c) {
          double v = xs[(a * B + b) * C + c];
          acc = kind == ReduceKind::max   ? std::max(acc, v)
                : kind == ReduceKind::min ? std::min(acc, v)
                                          : acc + v;
        }
      want[b] = kind == ReduceKind::mean ? acc / (A * C) : acc;
    }
    for (std::vector<int64_t> shape : {std::vector<int64_t>{1, B, 1}, std::vector<int64_t>{B}}) {
      HostTensor out = HostTensor::zeros(DType::f32, shape);
      ASSERT_TRUE(reduce(kind, refOf(x), axes, refOf(out)).isOk());
      // The sum is accumulated in double and rounded once.
      expectClose(valuesOf<float>(out), want, 1e-7, 0, "reduce " + std::to_string(int(kind)));
    }
  }
}

TEST(Reduction, ReduceIntegersAndEdgeCases) {
  HostTensor x = i64({2, 3}, {1, 2, 3, 4, 5, 7});
  HostTensor out = HostTensor::zeros(DType::i64, {2});
  std::vector<int64_t> last{1};
  ASSERT_TRUE(reduce(ReduceKind::sum, refOf(x), last, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{6, 16}));
  ASSERT_TRUE(reduce(ReduceKind::mean, refOf(x), last, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{2, 5})); // truncated
  ASSERT_TRUE(reduce(ReduceKind::max, refOf(x), last, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{3, 7}));
  // All axes to a scalar; no axes is a copy.
  HostTensor all = HostTensor::zeros(DType::i64, {});
  ASSERT_TRUE(reduce(ReduceKind::min, refOf(x), std::vector<int64_t>{0, 1}, refOf(all)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(all)[0], 1);
  HostTensor same = HostTensor::zeros(DType::i64, {2, 3});
  ASSERT_TRUE(reduce(ReduceKind::sum, refOf(x), std::vector<int64_t>{}, refOf(same)).isOk());
  EXPECT_EQ(same.bytes, x.bytes);
  // NaN propagates through max; empty max is an error; bad shapes and axes are errors.
  HostTensor n = f32({3}, {1, NAN, 2}), no = HostTensor::zeros(DType::f32, {});
  ASSERT_TRUE(reduce(ReduceKind::max, refOf(n), std::vector<int64_t>{0}, refOf(no)).isOk());
  EXPECT_TRUE(std::isnan(valuesOf<float>(no)[0]));
  HostTensor empty = f32({2, 0}, {}), eo = HostTensor::zeros(DType::f32, {2});
  EXPECT_FALSE(reduce(ReduceKind::max, refOf(empty), last, refOf(eo)).isOk());
  ASSERT_TRUE(reduce(ReduceKind::sum, refOf(empty), last, refOf(eo)).isOk());
  EXPECT_EQ(valuesOf<float>(eo), (std::vector<float>{0, 0}));
  HostTensor wrong = HostTensor::zeros(DType::i64, {3});
  Status s = reduce(ReduceKind::sum, refOf(x), last, refOf(wrong));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("neither [2, 1]"), std::string::npos) << s.message();
  EXPECT_FALSE(reduce(ReduceKind::sum, refOf(x), std::vector<int64_t>{1, 1}, refOf(out)).isOk());
  EXPECT_FALSE(reduce(ReduceKind::sum, refOf(x), std::vector<int64_t>{2}, refOf(out)).isOk());
}

TEST(Reduction, SoftmaxAlongAMiddleAxis) {
  const int64_t A = 2, N = 5, C = 3;
  std::vector<double> xs = randomValues<double>(A * N * C, 31, -5, 5);
  xs[0] = 1000; // large values must not overflow
  HostTensor x = f64({A, N, C}, xs), out = HostTensor::zeros(DType::f64, {A, N, C});
  ASSERT_TRUE(softmax(refOf(x), 1, refOf(out)).isOk());
  std::vector<double> want(xs.size());
  for (int64_t a = 0; a < A; ++a)
    for (int64_t c = 0; c < C; ++c) {
      double m = -1e300, sum = 0;
      for (int64_t j = 0; j < N; ++j)
        m = std::max(m, xs[(a * N + j) * C + c]);
      for (int64_t j = 0; j < N; ++j)
        sum += std::exp(xs[(a * N + j) * C + c] - m);
      for (int64_t j = 0; j < N; ++j)
        want[(a * N + j) * C + c] = std::exp(xs[(a * N + j) * C + c] - m) / sum;
    }
  expectClose(valuesOf<double>(out), want, 1e-13, 1e-300, "softmax f64");
  std::vector<float> xf(xs.begin(), xs.end());
  HostTensor x32 = f32({A, N, C}, xf), o32 = HostTensor::zeros(DType::f32, {A, N, C});
  ASSERT_TRUE(softmax(refOf(x32), 1, refOf(o32)).isOk());
  expectClose(valuesOf<float>(o32), want, 1e-5, 1e-12, "softmax f32");
  // A row of -inf is NaN, as in torch.softmax.
  float inf = std::numeric_limits<float>::infinity();
  HostTensor masked = f32({2, 2}, {-inf, -inf, 0, 0}), mo = HostTensor::zeros(DType::f32, {2, 2});
  ASSERT_TRUE(softmax(refOf(masked), 1, refOf(mo)).isOk());
  std::vector<float> m = valuesOf<float>(mo);
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
  EXPECT_EQ(m[2], 0.5f);
  EXPECT_FALSE(softmax(refOf(x), 3, refOf(out)).isOk());
}

TEST(Reduction, CrossEntropyIsLogsumexpMinusTheLabelLogit) {
  const int64_t B = 2, T = 3, V = 7;
  std::vector<float> logits = randomValues(B * T * V, 41, -4, 4);
  HostTensor lx = f32({B, T, V}, logits);
  HostTensor labels = i64({B, T}, {0, 6, -100, 3, 3, 1});
  HostTensor out = HostTensor::zeros(DType::f32, {B, T});
  ASSERT_TRUE(crossEntropy(refOf(lx), refOf(labels), int64_t(-100), refOf(out)).isOk());
  std::vector<int64_t> ls = valuesOf<int64_t>(labels);
  std::vector<double> want;
  for (int64_t r = 0; r < B * T; ++r) {
    if (ls[r] == -100) {
      want.push_back(0);
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < V; ++j)
      sum += std::exp(double(logits[r * V + j]));
    want.push_back(std::log(sum) - logits[r * V + ls[r]]);
  }
  expectClose(valuesOf<float>(out), want, 1e-6, 1e-7, "cross entropy");
  // i32 labels; an out-of-range label is an error naming it (with or without ignore_index).
  HostTensor l32 = i32({B, T}, {0, 1, 2, 3, 4, 5});
  ASSERT_TRUE(crossEntropy(refOf(lx), refOf(l32), std::nullopt, refOf(out)).isOk());
  HostTensor bad = i64({B, T}, {0, 1, 7, 3, 4, 5});
  Status s = crossEntropy(refOf(lx), refOf(bad), int64_t(-100), refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("label 7 (element 2"), std::string::npos) << s.message();
  HostTensor neg = i64({B, T}, {0, 1, -100, 3, 4, 5});
  s = crossEntropy(refOf(lx), refOf(neg), std::nullopt, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("label -100"), std::string::npos);
  HostTensor wrong = i64({B}, {0, 1});
  EXPECT_FALSE(crossEntropy(refOf(lx), refOf(wrong), std::nullopt, refOf(out)).isOk());
}
