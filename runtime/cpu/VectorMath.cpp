// The f32 array loops of VectorMath.h and AdamW's (AdamWElements.h), compiled for AVX-512F, AVX2
// and baseline x86-64 and picked at load time (GCC/Clang function multiversioning); elsewhere,
// once for the target. This file is built with -ftree-vectorize -fvect-cost-model=dynamic
// -fno-trapping-math -fno-math-errno -ffp-contract=off (runtime/CMakeLists.txt): the loops
// vectorise at -O2 and no level contracts a*b+c into an FMA, so all give the same bits.
#include "runtime/cpu/VectorMath.h"

#include "runtime/cpu/AdamWElements.h"

#include <limits>
#include <numbers>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define MEGAC_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MEGAC_VECTOR_CLONES
#endif

namespace megac::runtime::cpu::vmath {

namespace {

// The loops run in blocks of kLanes elements through a local array: every block loads its inputs
// before it stores, so an output may be an input (in place), and the compiler needs no alias
// check to vectorise a block. The tail runs the same scalar function element by element.
constexpr int64_t kLanes = 16;

inline float geluErf(float v) {
  constexpr float kRsqrt2 = static_cast<float>(std::numbers::sqrt2 / 2);
  return v * 0.5f * (1.0f + erfF32(v * kRsqrt2));
}

inline float geluErfSlope(float v) {
  // d/dx x Phi(x) = Phi(x) + x phi(x).
  constexpr float kRsqrt2 = static_cast<float>(std::numbers::sqrt2 / 2);
  constexpr float kInvSqrt2Pi =
      static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
  return 0.5f * (1.0f + erfF32(v * kRsqrt2)) + v * kInvSqrt2Pi * expF32(-0.5f * v * v);
}

} // namespace

MEGAC_VECTOR_CLONES void geluErfF32(const float *x, float *y, int64_t n) {
  int64_t body = n / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes) {
    float out[kLanes];
    for (int64_t k = 0; k < kLanes; ++k)
      out[k] = geluErf(x[j + k]);
    for (int64_t k = 0; k < kLanes; ++k)
      y[j + k] = out[k];
  }
  for (int64_t j = body; j < n; ++j)
    y[j] = geluErf(x[j]);
}

MEGAC_VECTOR_CLONES void geluErfGradF32(const float *dy, const float *x, float *dx, int64_t n) {
  int64_t body = n / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes) {
    float out[kLanes];
    for (int64_t k = 0; k < kLanes; ++k)
      out[k] = dy[j + k] * geluErfSlope(x[j + k]);
    for (int64_t k = 0; k < kLanes; ++k)
      dx[j + k] = out[k];
  }
  for (int64_t j = body; j < n; ++j)
    dx[j] = dy[j] * geluErfSlope(x[j]);
}

MEGAC_VECTOR_CLONES double expShiftSumF32(const float *x, float shift, float *y, int64_t n) {
  double lane[kLanes] = {};
  int64_t body = n / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes) {
    float e[kLanes];
    for (int64_t k = 0; k < kLanes; ++k)
      e[k] = expF32(x[j + k] - shift);
    for (int64_t k = 0; k < kLanes; ++k)
      lane[k] += static_cast<double>(e[k]);
    for (int64_t k = 0; k < kLanes; ++k)
      y[j + k] = e[k];
  }
  double sum = 0.0;
  for (int64_t k = 0; k < kLanes; ++k)
    sum += lane[k];
  for (int64_t j = body; j < n; ++j) {
    y[j] = expF32(x[j] - shift);
    sum += static_cast<double>(y[j]);
  }
  return sum;
}

MEGAC_VECTOR_CLONES void scaleF32(float *y, float scale, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] *= scale;
}

MEGAC_VECTOR_CLONES float maxF32(const float *x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lane[kLanes];
  for (int64_t k = 0; k < kLanes; ++k)
    lane[k] = kNegInf;
  int64_t body = n / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) {
      float v = x[j + k];
      lane[k] = v > lane[k] || v != v ? v : lane[k];
    }
  float best = kNegInf;
  for (int64_t k = 0; k < kLanes; ++k)
    best = lane[k] > best || lane[k] != lane[k] ? lane[k] : best;
  for (int64_t j = body; j < n; ++j)
    best = x[j] > best || x[j] != x[j] ? x[j] : best;
  return best;
}

MEGAC_VECTOR_CLONES void softmaxGradRowF32(const float *p, float *dp, int64_t n) {
  double lane[kLanes] = {};
  int64_t body = n / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) {
      float pj = p[j + k];
      lane[k] += pj != 0.0f ? static_cast<double>(pj) * static_cast<double>(dp[j + k]) : 0.0;
    }
  double dot = 0.0;
  for (int64_t k = 0; k < kLanes; ++k)
    dot += lane[k];
  for (int64_t j = body; j < n; ++j)
    if (p[j] != 0.0f)
      dot += static_cast<double>(p[j]) * static_cast<double>(dp[j]);
  float dotF = static_cast<float>(dot);
  for (int64_t j = 0; j < n; ++j)
    dp[j] = p[j] != 0.0f ? p[j] * (dp[j] - dotF) : 0.0f;
}

} // namespace megac::runtime::cpu::vmath

namespace megac::runtime::cpu::detail {

// AdamW is bound by its double divides and square roots (3 and 1 an element): 8 doubles a
// vector on AVX-512 against 2 in SSE2. Blocks through local arrays, as above, since the outputs
// may be the inputs.
MEGAC_VECTOR_CLONES void adamwElementsF32(const AdamWArrays<float> &a, int64_t begin, int64_t end,
                                          const AdamWStep &s, float clip) {
  constexpr int64_t kBlock = 16;
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) {
    float p[kBlock], m[kBlock], v[kBlock];
    for (int64_t k = 0; k < kBlock; ++k)
      adamwElement(a.p[i + k], a.g[i + k], a.m[i + k], a.v[i + k], s, clip, p[k], m[k], v[k]);
    for (int64_t k = 0; k < kBlock; ++k) {
      a.pOut[i + k] = p[k];
      a.mOut[i + k] = m[k];
      a.vOut[i + k] = v[k];
    }
  }
  for (; i < end; ++i)
    adamwElement(a.p[i], a.g[i], a.m[i], a.v[i], s, clip, a.pOut[i], a.mOut[i], a.vOut[i]);
}

} // namespace megac::runtime::cpu::detail
