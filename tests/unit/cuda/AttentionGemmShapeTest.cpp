// The GEMM path of CUDA attention (runtime/cuda/kernels/AttentionGemmShape.h) run on the host:
// its chunk walk (the kernel's own, forEachAttentionChunk) and cuBLASLt descriptors through a
// naive column-major strided GEMM, its softmax rows as AttentionGemm.cu computes them, all in
// double, against the CPU kernels in f64, forward and backward, for MHA, GQA and MQA, s != t
// both ways (causal rows that see no key), single-query decoding, head dims that differ, chunks
// of fewer heads than hk and chunks of query rows (as a small scratch cap would cut them).
// Runs without a GPU: the layouts are what it checks; the device runs the same descriptors.
//
// Tolerance: both sides compute in double over at most a few hundred terms of O(1) values:
// 1e-12 absolute and relative.
#include "runtime/cuda/kernels/AttentionGemmShape.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/kernels/AttentionTiling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace megac::runtime::cuda {
namespace {

using cpu::TensorRef;

/// What cuBLASLt computes for `g` (alpha 1; beta 1 with `accumulate`, else 0).
void emulate(const StridedGemm &g, const double *A, const double *B, double *D, bool accumulate) {
  ASSERT_GE(g.lda, g.transA ? g.inner : g.rows);
  ASSERT_GE(g.ldb, g.transB ? g.cols : g.inner);
  ASSERT_GE(g.ldd, g.rows);
  for (int64_t bt = 0; bt < g.batch; ++bt) {
    const double *a = A + bt * g.strideA, *b = B + bt * g.strideB;
    double *d = D + bt * g.strideD;
    for (int64_t j = 0; j < g.cols; ++j)
      for (int64_t i = 0; i < g.rows; ++i) {
        double sum = 0.0;
        for (int64_t l = 0; l < g.inner; ++l) {
          double av = g.transA ? a[l + i * g.lda] : a[i + l * g.lda];
          double bv = g.transB ? b[j + l * g.ldb] : b[l + j * g.ldb];
          sum += av * bv;
        }
        d[i + j * g.ldd] = sum + (accumulate ? d[i + j * g.ldd] : 0.0);
      }
  }
}

struct Rows {
  std::vector<double> p, ds; // [rows][t]
};

/// softmaxRows (without dP) or softmaxGradRows (with dP) of AttentionGemm.cu, in double: rows
/// [n][c.rows], query index c.i0 + r % c.rows.
Rows softmaxRows(const AttentionShape &a, const AttentionChunk &c, const std::vector<double> &S,
                 const std::vector<double> *dP) {
  int64_t rows = c.n * c.rows;
  Rows out{std::vector<double>(rows * a.t, 0.0), std::vector<double>(rows * a.t, 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    int64_t visible = tiling::attnVisible(a.causal, a.s, a.t, c.i0 + r % c.rows);
    double m = -INFINITY, sum = 0.0, delta = 0.0;
    for (int64_t j = 0; j < visible; ++j)
      m = std::max(m, S[r * a.t + j] * a.scale);
    for (int64_t j = 0; j < visible; ++j)
      sum += std::exp(S[r * a.t + j] * a.scale - m);
    double inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (int64_t j = 0; j < visible; ++j) {
      out.p[r * a.t + j] = std::exp(S[r * a.t + j] * a.scale - m) * inv;
      if (dP)
        delta += out.p[r * a.t + j] * (*dP)[r * a.t + j];
    }
    if (dP)
      for (int64_t j = 0; j < visible; ++j)
        out.ds[r * a.t + j] = a.scale * out.p[r * a.t + j] * ((*dP)[r * a.t + j] - delta);
  }
  return out;
}

struct Tensors {
  std::vector<double> q, k, v, dout;
};

/// AttentionGemm.cu's forward, on the host: the same chunk walk, descriptors and rows.
std::vector<double> forward(const AttentionShape &a, const Tensors &x,
                            const GemmAttentionTiles &tiles) {
  std::vector<double> out(a.b * a.s * a.h * a.dv, NAN);
  Status walked = forEachAttentionChunk(
      a, tiles,
      [&](const AttentionChunk &c) {
        std::vector<double> S(c.n * c.rows * a.t, NAN);
        emulate(attentionScoresGemm(a, c, a.d, DType::f64), x.k.data() + c.k, x.q.data() + c.q,
                S.data(), false);
        Rows r = softmaxRows(a, c, S, nullptr);
        emulate(attentionOutputGemm(a, c, DType::f64), x.v.data() + c.v, r.p.data(),
                out.data() + c.o, false);
        return Status::ok();
      },
      [](int64_t, int64_t, int64_t) { return Status::ok(); });
  EXPECT_TRUE(walked.isOk());
  return out;
}

struct Grads {
  std::vector<double> dq, dk, dv;
};

/// AttentionGemm.cu's backward, on the host; `viaF32` as the half types take it.
Grads backward(const AttentionShape &a, const Tensors &x, const GemmAttentionTiles &tiles,
               bool viaF32) {
  Grads out{std::vector<double>(x.q.size(), NAN), std::vector<double>(x.k.size(), NAN),
            std::vector<double>(x.v.size(), NAN)};
  std::vector<double> dkSum(tiles.heads * a.t * a.d, NAN), dvSum(tiles.heads * a.t * a.dv, NAN);
  Status walked = forEachAttentionChunk(
      a, tiles,
      [&](const AttentionChunk &c) {
        std::vector<double> S(c.n * c.rows * a.t, NAN), dP(c.n * c.rows * a.t, NAN);
        emulate(attentionScoresGemm(a, c, a.d, DType::f64), x.k.data() + c.k, x.q.data() + c.q,
                S.data(), false);
        emulate(attentionScoresGemm(a, c, a.dv, DType::f64), x.v.data() + c.v,
                x.dout.data() + c.o, dP.data(), false);
        Rows r = softmaxRows(a, c, S, &dP);
        emulate(attentionKeyGradGemm(a, c, a.dv, DType::f64, viaF32), x.dout.data() + c.o,
                r.p.data(), viaF32 ? dvSum.data() : out.dv.data() + c.v, c.adds());
        emulate(attentionKeyGradGemm(a, c, a.d, DType::f64, viaF32), x.q.data() + c.q,
                r.ds.data(), viaF32 ? dkSum.data() : out.dk.data() + c.k, c.adds());
        emulate(attentionQueryGradGemm(a, c, DType::f64), x.k.data() + c.k, r.ds.data(),
                out.dq.data() + c.q, false);
        return Status::ok();
      },
      [&](int64_t bi, int64_t kh0, int64_t n) { // scatterHeads
        if (!viaF32)
          return Status::ok();
        AttentionChunk c = gemmAttentionChunk(a, bi, 0, kh0, n, 0, a.s);
        for (int64_t head = 0; head < n; ++head)
          for (int64_t j = 0; j < a.t; ++j) {
            for (int64_t col = 0; col < a.d; ++col)
              out.dk[c.k + j * a.hk * a.d + head * a.d + col] =
                  dkSum[(head * a.t + j) * a.d + col];
            for (int64_t col = 0; col < a.dv; ++col)
              out.dv[c.v + j * a.hk * a.dv + head * a.dv + col] =
                  dvSum[(head * a.t + j) * a.dv + col];
          }
        return Status::ok();
      });
  EXPECT_TRUE(walked.isOk());
  return out;
}

std::vector<double> randomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double &x : v)
    x = u(rng);
  return v;
}

void expectClose(const std::vector<double> &got, const std::vector<double> &want,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(got[i] - want[i]), 1e-12 + 1e-12 * std::abs(want[i]))
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

struct Case {
  AttentionShape a;
  GemmAttentionTiles tiles; // as gemmAttentionTiles cuts a call whose scores pass the cap
  std::string label() const {
    return "b" + std::to_string(a.b) + " s" + std::to_string(a.s) + " t" + std::to_string(a.t) +
           " h" + std::to_string(a.h) + " hk" + std::to_string(a.hk) + " d" + std::to_string(a.d) +
           " dv" + std::to_string(a.dv) + (a.causal ? " causal" : "") + " tiles " +
           std::to_string(tiles.heads) + " heads x " + std::to_string(tiles.rows) + " rows";
  }
};

std::vector<Case> cases() {
  auto shape = [](int64_t b, int64_t s, int64_t t, int64_t h, int64_t hk, int64_t d, int64_t dv,
                  bool causal) {
    AttentionShape a{b, s, h, d, t, hk, dv, causal, 1.0 / std::sqrt(double(d))};
    return a;
  };
  return {
      {shape(2, 7, 7, 4, 4, 8, 8, true), {4, 7}},    // MHA, every head in one chunk
      {shape(2, 7, 7, 4, 4, 8, 8, true), {3, 7}},    // MHA, a chunk of 3 then one of 1
      {shape(1, 5, 9, 6, 2, 8, 8, true), {2, 5}},    // GQA 3 per kv head, s < t
      {shape(2, 9, 5, 6, 2, 8, 8, true), {1, 9}},    // GQA, s > t: early rows see no key
      {shape(1, 6, 6, 4, 1, 4, 12, false), {1, 6}},  // MQA, d != dv, not causal
      {shape(2, 1, 11, 4, 2, 8, 8, true), {2, 1}},   // one query (decoding)
      {shape(2, 11, 11, 4, 4, 8, 8, true), {1, 4}},  // long rows: chunks of 4, 4 and 3 queries
      {shape(1, 10, 13, 6, 2, 8, 8, true), {1, 3}},  // GQA and query chunks, s < t
      {shape(1, 13, 7, 4, 2, 8, 8, true), {1, 5}},   // s > t: a first chunk that sees no key
  };
}

TEST(AttentionGemmShape, ForwardAndBackwardMatchTheCpuKernels) {
  uint32_t seed = 7;
  for (const Case &c : cases()) {
    const AttentionShape &a = c.a;
    Tensors x{randomValues(a.b * a.s * a.h * a.d, seed), randomValues(a.b * a.t * a.hk * a.d, seed + 1),
              randomValues(a.b * a.t * a.hk * a.dv, seed + 2),
              randomValues(a.b * a.s * a.h * a.dv, seed + 3)};
    seed += 10;
    auto ref = [](std::vector<double> &v, std::vector<int64_t> shape) {
      return TensorRef{DType::f64, std::move(shape), v.data()};
    };
    std::vector<double> want(a.b * a.s * a.h * a.dv);
    ASSERT_TRUE(cpu::attention(ref(x.q, {a.b, a.s, a.h, a.d}), ref(x.k, {a.b, a.t, a.hk, a.d}),
                               ref(x.v, {a.b, a.t, a.hk, a.dv}), nullptr, a.causal, a.scale,
                               ref(want, {a.b, a.s, a.h, a.dv}))
                    .isOk());
    expectClose(forward(a, x, c.tiles), want, c.label() + " out");

    Grads wantG{std::vector<double>(x.q.size()), std::vector<double>(x.k.size()),
                std::vector<double>(x.v.size())};
    ASSERT_TRUE(cpu::attentionGrad(ref(x.dout, {a.b, a.s, a.h, a.dv}),
                                   ref(x.q, {a.b, a.s, a.h, a.d}), ref(x.k, {a.b, a.t, a.hk, a.d}),
                                   ref(x.v, {a.b, a.t, a.hk, a.dv}), nullptr, a.causal, a.scale,
                                   ref(wantG.dq, {a.b, a.s, a.h, a.d}),
                                   ref(wantG.dk, {a.b, a.t, a.hk, a.d}),
                                   ref(wantG.dv, {a.b, a.t, a.hk, a.dv}), nullptr)
                    .isOk());
    for (bool viaF32 : {false, true}) {
      if (viaF32 && a.h == a.hk && c.tiles.rows == a.s)
        continue; // one product per dk and dv: nothing sums
      Grads got = backward(a, x, c.tiles, viaF32);
      std::string what = c.label() + (viaF32 ? " (sums via scratch)" : " (sums in place)");
      expectClose(got.dq, wantG.dq, what + " dq");
      expectClose(got.dk, wantG.dk, what + " dk");
      expectClose(got.dv, wantG.dv, what + " dv");
    }
  }
}

TEST(AttentionGemmShape, ChunksFitTheScratchCap) {
  // The 1.3B GPT of the device benchmark: 16 heads of 2048 x 2048 scores, 12 bytes each under
  // bf16 (48 MiB a head): all 16 in one chunk (768 MiB, within 1 GiB).
  AttentionShape gpt{4, 2048, 16, 128, 2048, 16, 128, true, 0.0884};
  EXPECT_TRUE(gemmAttentionFits(gpt, DType::bf16));
  GemmAttentionTiles tiles = gemmAttentionTiles(gpt, DType::bf16);
  EXPECT_EQ(tiles.heads, 16);
  EXPECT_EQ(tiles.rows, 2048);
  EXPECT_EQ(gemmAttentionBytesPerScore(DType::bf16), 12);
  EXPECT_EQ(gemmAttentionBytesPerScore(DType::f32), 16);
  EXPECT_FALSE(gemmAttentionSumsViaF32(gpt, tiles, DType::bf16));
  // Seq 8192: 768 MiB a head under bf16, one per chunk. Seq 32768: 12 GiB a head: one head and
  // 2730 query rows per chunk (1 GiB / (32768 x 12 B)), whose dk and dv sum in f32.
  AttentionShape longer = gpt;
  longer.s = longer.t = 8192;
  tiles = gemmAttentionTiles(longer, DType::bf16);
  EXPECT_EQ(tiles.heads, 1);
  EXPECT_EQ(tiles.rows, 8192);
  longer.s = longer.t = 32768;
  EXPECT_TRUE(gemmAttentionFits(longer, DType::bf16));
  tiles = gemmAttentionTiles(longer, DType::bf16);
  EXPECT_EQ(tiles.heads, 1);
  EXPECT_EQ(tiles.rows, 2730);
  EXPECT_LE(tiles.rows * longer.t * 12, int64_t(kGemmAttentionScratchBytes));
  EXPECT_TRUE(gemmAttentionSumsViaF32(longer, tiles, DType::bf16));
  EXPECT_FALSE(gemmAttentionSumsViaF32(longer, tiles, DType::f32));
  // Neither f64 nor an empty dim.
  EXPECT_FALSE(gemmAttentionFits(gpt, DType::f64));
  AttentionShape empty = gpt;
  empty.t = 0;
  EXPECT_FALSE(gemmAttentionFits(empty, DType::bf16));
}

TEST(AttentionGemmShape, ThePathFromTheEnvironment) {
  AttentionPath byDefault = attentionPathFrom(nullptr, nullptr);
  EXPECT_TRUE(byDefault.gemm);
  EXPECT_EQ(byDefault.capBytes, kGemmAttentionScratchBytes);
  EXPECT_TRUE(byDefault.error.empty());
  EXPECT_TRUE(attentionPathFrom("auto", "").gemm);
  AttentionPath flash = attentionPathFrom("flash", "65536");
  EXPECT_FALSE(flash.gemm);
  EXPECT_EQ(flash.capBytes, 65536u);
  EXPECT_TRUE(flash.error.empty());
  EXPECT_EQ(attentionPathFrom("gemm", nullptr).error,
            "MEGAC_CUDA_ATTENTION='gemm' is not auto or flash (auto: cuBLASLt GEMMs with the "
            "scores in scratch; flash: the fused kernels, nothing of size s*t stored)");
  for (const char *bad : {"0", "-5", "1e9", "64k", "99999999999999999999"})
    EXPECT_EQ(attentionPathFrom(nullptr, bad).error.rfind(
                  std::string("MEGAC_CUDA_ATTENTION_SCRATCH='") + bad +
                      "' is not a positive number of bytes",
                  0),
              0u)
        << bad;
}

} // namespace
} // namespace megac::runtime::cuda
