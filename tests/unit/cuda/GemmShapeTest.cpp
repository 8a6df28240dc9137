// MatMul's and Linear's cuBLASLt problem (runtime/cuda/kernels/GemmShape.h) run through a naive
// column-major GEMM with cuBLASLt's semantics on the host, against the CPU kernels, for every
// transpose and batch layout the plans use (2-D, folded batch, strided batch, broadcast batch
// looped on the host, Linear with and without bias). Runs without a GPU.
#include "runtime/cuda/kernels/GemmShape.h"

#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace megac::runtime::cuda {
namespace {

using cpu::TensorRef;

std::string shapeText(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t count(const std::vector<int64_t> &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// Small integers, distinct per position, so every product and sum is exact in f64.
std::vector<double> values(int64_t n, int seed) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<double>((i * 7 + seed * 13) % 11) - 5.0;
  return v;
}

/// What cuBLASLt computes for `p` (column-major, cublasLtMatmul with alpha 1, beta 0, and the
/// BIAS epilogue when `bias`): every call of the outer loop, every strided batch. D starts as NaN
/// so an element no call writes shows.
void emulateCublasLt(const GemmProblem &p, const double *A, const double *B, const double *bias,
                     double *D) {
  for (int64_t o = 0; o < p.outerCount; ++o) {
    int64_t offA = 0, offB = 0, offD = 0;
    p.offsets(o, offA, offB, offD);
    for (int64_t bt = 0; bt < p.batch; ++bt) {
      const double *a = A + offA + bt * p.strideA;
      const double *b = B + offB + bt * p.strideB;
      double *d = D + offD + bt * p.strideD;
      for (int64_t j = 0; j < p.cols; ++j)
        for (int64_t i = 0; i < p.rows; ++i) {
          double sum = 0.0;
          for (int64_t l = 0; l < p.inner; ++l) {
            double av = p.transA ? a[l + i * p.lda] : a[i + l * p.lda];
            double bv = p.transB ? b[j + l * p.ldb] : b[l + j * p.ldb];
            sum += av * bv;
          }
          d[i + j * p.ldd] = sum + (bias ? bias[i] : 0.0);
        }
    }
  }
}

/// cuBLASLt's own layout checks: a column-major matrix's leading dim covers its rows.
void expectValidLayouts(const GemmProblem &p, const std::string &what) {
  EXPECT_GE(p.lda, p.aRows()) << what;
  EXPECT_GE(p.ldb, p.bRows()) << what;
  EXPECT_GE(p.ldd, p.rows) << what;
  EXPECT_GE(p.batch, 1) << what;
  EXPECT_GE(p.outerCount, 1) << what;
}

void expectSame(const std::vector<double> &got, const std::vector<double> &want,
                const std::string &what) {
  ASSERT_EQ(got.size(), want.size());
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]) && ++wrong <= 3)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the CPU kernel gives "
                    << want[i];
  EXPECT_EQ(wrong, 0) << what;
}

/// Checks one MatMul (lhs/rhs stored transposed where `flags` say); returns its problem
/// (default-constructed after a failure).
GemmProblem checkMatMul(const std::vector<int64_t> &ls, const std::vector<int64_t> &rs,
                        const std::vector<int64_t> &os, cpu::MatMulFlags flags = {}) {
  std::string what = "MatMul " + shapeText(ls) + (flags.transposeLhs ? "^T" : "") + " x " +
                     shapeText(rs) + (flags.transposeRhs ? "^T" : "");
  std::vector<double> lhs = values(count(ls), 1), rhs = values(count(rs), 2);
  std::vector<double> want(count(os), 0.0);
  TensorRef l{DType::f64, ls, lhs.data()}, r{DType::f64, rs, rhs.data()};
  TensorRef o{DType::f64, os, want.data()};
  EXPECT_TRUE(cpu::matmul(l, r, o, flags).isOk()) << what;
  StatusOr<cpu::detail::MatMulGeometry> g =
      cpu::detail::checkMatMul(l, r, o, nullptr, flags.transposeLhs, flags.transposeRhs);
  EXPECT_TRUE(g.isOk()) << what;
  if (!g.isOk())
    return {};
  GemmProblem p = matmulProblem(*g);
  expectValidLayouts(p, what);
  std::vector<double> got(want.size(), std::numeric_limits<double>::quiet_NaN());
  const double *a = p.a == GemmOperand::Rhs ? rhs.data() : lhs.data();
  const double *b = p.b == GemmOperand::Rhs ? rhs.data() : lhs.data();
  emulateCublasLt(p, a, b, nullptr, got.data());
  expectSame(got, want,
             what + " (batch " + std::to_string(p.batch) + ", outer " +
                 std::to_string(p.outerCount) + ")");
  return p;
}

void checkLinear(const std::vector<int64_t> &xs, int64_t outF, bool withBias) {
  std::string what =
      "Linear " + shapeText(xs) + " -> " + std::to_string(outF) + (withBias ? " with bias" : "");
  int64_t inF = xs.back();
  std::vector<int64_t> ws{outF, inF}, bs{outF}, os = xs;
  os.back() = outF;
  std::vector<double> x = values(count(xs), 3), w = values(count(ws), 4), bias = values(outF, 5);
  std::vector<double> want(count(os), 0.0);
  TensorRef xr{DType::f64, xs, x.data()}, wr{DType::f64, ws, w.data()};
  TensorRef br{DType::f64, bs, bias.data()}, orf{DType::f64, os, want.data()};
  const TensorRef *bp = withBias ? &br : nullptr;
  ASSERT_TRUE(cpu::linear(xr, wr, bp, orf).isOk()) << what;
  StatusOr<cpu::detail::LinearGeometry> g = cpu::detail::checkLinear(xr, wr, bp, orf);
  ASSERT_TRUE(g.isOk()) << what;
  GemmProblem p = linearProblem(*g);
  expectValidLayouts(p, what);
  std::vector<double> got(want.size(), std::numeric_limits<double>::quiet_NaN());
  const double *a = p.a == GemmOperand::Rhs ? w.data() : x.data();
  const double *b = p.b == GemmOperand::Rhs ? w.data() : x.data();
  emulateCublasLt(p, a, b, withBias ? bias.data() : nullptr, got.data());
  expectSame(got, want, what);
}

TEST(GemmShape, MatMulTwoDimensional) {
  checkMatMul({3, 5}, {5, 4}, {3, 4});
  checkMatMul({1, 7}, {7, 1}, {1, 1}); // a dot product
  checkMatMul({6, 1}, {1, 3}, {6, 3}); // an outer product
  checkMatMul({4, 4}, {4, 4}, {4, 4}); // square: swapped operands keep valid layouts
}

TEST(GemmShape, MatMulFoldsTheBatchOfOneRhs) {
  GemmProblem p = checkMatMul({2, 3, 5}, {5, 4}, {2, 3, 4});
  EXPECT_EQ(p.cols, 6); // one GEMM over the 2 x 3 rows
  EXPECT_EQ(p.batch * p.outerCount, 1);
  checkMatMul({2, 2, 3, 5}, {5, 4}, {2, 2, 3, 4});
  checkMatMul({4, 3, 5}, {1, 5, 2}, {4, 3, 2}); // rhs with a batch of one
}

TEST(GemmShape, MatMulStridedBatches) {
  EXPECT_EQ(checkMatMul({2, 3, 5}, {2, 5, 4}, {2, 3, 4}).batch, 2);
  checkMatMul({2, 3, 4, 5}, {2, 3, 5, 6}, {2, 3, 4, 6});
  // Attention's scores and context: [b,h,s,d] x [b,h,d,t], [b,h,s,t] x [b,h,t,d].
  checkMatMul({2, 2, 7, 4}, {2, 2, 4, 7}, {2, 2, 7, 7});
  checkMatMul({2, 2, 7, 7}, {2, 2, 7, 4}, {2, 2, 7, 4});
  checkMatMul({3, 5}, {2, 5, 4}, {2, 3, 4}); // lhs broadcast: stride 0
}

TEST(GemmShape, MatMulBroadcastBatchesLoopedOnTheHost) {
  GemmProblem p = checkMatMul({2, 1, 3, 5}, {1, 4, 5, 6}, {2, 4, 3, 6});
  EXPECT_EQ(p.outerCount, 2); // lhs's dim 0 looped, rhs's dim 1 a strided batch
  EXPECT_EQ(p.batch, 4);
  checkMatMul({1, 2, 3, 5}, {3, 1, 5, 4}, {3, 2, 3, 4});
  checkMatMul({2, 1, 3, 5}, {3, 5, 4}, {2, 3, 3, 4});
  checkMatMul({2, 3, 1, 2, 5}, {1, 3, 4, 5, 2}, {2, 3, 4, 2, 2});
}

// Layout flags (issue 30): a transposed rhs is cuBLASLt's A transposed, a transposed lhs its B
// transposed, in 2-D, folded (rhs only: a transposed lhs cannot fold), strided and broadcast
// batches.
TEST(GemmShape, MatMulTransposedOperands) {
  const cpu::MatMulFlags lhsT{true, false}, rhsT{false, true}, both{true, true};
  checkMatMul({5, 3}, {5, 4}, {3, 4}, lhsT); // a weight gradient: g^T x
  checkMatMul({3, 5}, {4, 5}, {3, 4}, rhsT);
  checkMatMul({5, 3}, {4, 5}, {3, 4}, both);
  checkMatMul({4, 4}, {4, 4}, {4, 4}, both); // square: a lost transpose shows
  GemmProblem folded = checkMatMul({2, 3, 5}, {4, 5}, {2, 3, 4}, rhsT);
  EXPECT_EQ(folded.cols, 6);
  EXPECT_EQ(checkMatMul({2, 5, 3}, {5, 4}, {2, 3, 4}, lhsT).batch, 2); // not folded
  checkMatMul({2, 2, 4, 7}, {2, 2, 7, 4}, {2, 2, 7, 7}, both);
  checkMatMul({2, 2, 7, 4}, {2, 2, 7, 4}, {2, 2, 7, 7}, rhsT); // q k^T without the copy
  checkMatMul({2, 1, 5, 3}, {1, 4, 6, 5}, {2, 4, 3, 6}, both);
}

TEST(GemmShape, LinearWithAndWithoutBias) {
  for (bool bias : {false, true}) {
    checkLinear({4, 6}, 5, bias);
    checkLinear({2, 3, 6}, 5, bias); // leading dims fold into rows
    checkLinear({1, 1}, 1, bias);
    checkLinear({3, 4}, 4, bias); // square: a lost transpose keeps valid layouts
    checkLinear({2, 2, 2, 7}, 3, bias);
  }
}

} // namespace
} // namespace megac::runtime::cuda
