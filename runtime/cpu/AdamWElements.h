// AdamW's element loop, shared by the per-tensor kernel (Optim.cpp) and the multi-tensor one
// (OptimMulti.cpp) so the two compute the same bits element for element.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace megac::runtime::cpu::detail {

/// One step's scalars: lr, the betas, eps, the tensor's weight decay and the bias corrections
/// 1 - beta^t, all in double.
struct AdamWStep {
  double rate, b1, b2, eps, wd, bias1, bias2;
};

/// One tensor's p, g, m, v and the p, m, v it writes (which may be the inputs' memory).
template <typename T> struct AdamWArrays {
  const T *p, *g, *m, *v;
  T *pOut, *mOut, *vOut;
};

/// Elements [begin, end) of one tensor: double math from the stored values, m and v rounded to
/// T before the parameter update reads them, each result rounded once. The gradient is read as
/// g * clip rounded to T, ClipByNorm's product (clip = 1, no clipping, leaves every g as it is:
/// x * 1 is x in IEEE arithmetic, NaN included).
template <typename T>
void adamwElements(const AdamWArrays<T> &a, int64_t begin, int64_t end, const AdamWStep &s,
                   T clip = T(1)) {
  const T *ps = a.p, *gs = a.g, *ms = a.m, *vs = a.v;
  T *pd = a.pOut, *md = a.mOut, *vd = a.vOut;
  const double rate = s.rate, b1 = s.b1, b2 = s.b2, eps = s.eps, wd = s.wd;
  const double bias1 = s.bias1, bias2 = s.bias2;
#if defined(__SSE2__) && !defined(__FMA__) // FMA builds contract the scalar loop
  // Two elements at a time in SSE2 doubles: the same IEEE operations in the same order as
  // the scalar loop below (no FMA), so the same bits, with half the divides and square roots
  // issued.
  if constexpr (std::is_same_v<T, float>) {
    const __m128d kDecay = _mm_set1_pd(rate * wd), kRate = _mm_set1_pd(rate);
    const __m128d kB1 = _mm_set1_pd(b1), kC1 = _mm_set1_pd(1.0 - b1);
    const __m128d kB2 = _mm_set1_pd(b2), kC2 = _mm_set1_pd(1.0 - b2);
    const __m128d kBias1 = _mm_set1_pd(bias1), kBias2 = _mm_set1_pd(bias2);
    const __m128d kEps = _mm_set1_pd(eps);
    const __m128 kClip = _mm_set1_ps(clip);
    auto load2f = [](const float *at) {
      return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(at)));
    };
    auto load2 = [&](const float *at) { return _mm_cvtps_pd(load2f(at)); };
    auto store2 = [](float *at, __m128 x) {
      _mm_storel_epi64(reinterpret_cast<__m128i *>(at), _mm_castps_si128(x));
    };
    for (; begin + 2 <= end; begin += 2) {
      __m128d pi = load2(ps + begin), gi = _mm_cvtps_pd(_mm_mul_ps(load2f(gs + begin), kClip));
      __m128d mi = load2(ms + begin), vi = load2(vs + begin);
      pi = _mm_sub_pd(pi, _mm_mul_pd(kDecay, pi));
      __m128 mNew = _mm_cvtpd_ps(_mm_add_pd(_mm_mul_pd(kB1, mi), _mm_mul_pd(kC1, gi)));
      __m128 vNew =
          _mm_cvtpd_ps(_mm_add_pd(_mm_mul_pd(kB2, vi), _mm_mul_pd(_mm_mul_pd(kC2, gi), gi)));
      __m128d mHat = _mm_div_pd(_mm_cvtps_pd(mNew), kBias1);
      __m128d vHat = _mm_div_pd(_mm_cvtps_pd(vNew), kBias2);
      pi = _mm_sub_pd(pi, _mm_div_pd(_mm_mul_pd(kRate, mHat), _mm_add_pd(_mm_sqrt_pd(vHat), kEps)));
      store2(md + begin, mNew);
      store2(vd + begin, vNew);
      store2(pd + begin, _mm_cvtpd_ps(pi));
    }
  }
#endif
  for (int64_t i = begin; i < end; ++i) {
    // Read everything at i before writing anything: the outputs may be the inputs.
    double pi = static_cast<double>(ps[i]), gi = static_cast<double>(static_cast<T>(gs[i] * clip));
    double mi = static_cast<double>(ms[i]), vi = static_cast<double>(vs[i]);
    pi -= rate * wd * pi;
    T mNew = static_cast<T>(b1 * mi + (1.0 - b1) * gi);
    T vNew = static_cast<T>(b2 * vi + (1.0 - b2) * gi * gi);
    double mHat = static_cast<double>(mNew) / bias1;
    double vHat = static_cast<double>(vNew) / bias2;
    pi -= rate * mHat / (std::sqrt(vHat) + eps);
    md[i] = mNew;
    vd[i] = vNew;
    pd[i] = static_cast<T>(pi);
  }
}

} // namespace megac::runtime::cpu::detail
