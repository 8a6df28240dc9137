// AdamW's element loop, shared by the per-tensor kernel (Optim.cpp) and the multi-tensor one
// (OptimMulti.cpp) so the two compute the same bits element for element.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

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

/// One element: double math from the stored values, m and v rounded to T before the parameter
/// update reads them, each result rounded once. The gradient is read as g * clip rounded to T,
/// ClipByNorm's product (clip = 1, no clipping, leaves every g as it is: x * 1 is x in IEEE
/// arithmetic, NaN included). Straight-line IEEE operations: a vectorised loop of it gives the
/// scalar loop's bits when nothing contracts them into FMAs.
template <typename T>
inline void adamwElement(T p, T g, T m, T v, const AdamWStep &s, T clip, T &pOut, T &mOut,
                         T &vOut) {
  double pi = static_cast<double>(p), gi = static_cast<double>(static_cast<T>(g * clip));
  double mi = static_cast<double>(m), vi = static_cast<double>(v);
  pi -= s.rate * s.wd * pi;
  T mNew = static_cast<T>(s.b1 * mi + (1.0 - s.b1) * gi);
  T vNew = static_cast<T>(s.b2 * vi + (1.0 - s.b2) * gi * gi);
  double mHat = static_cast<double>(mNew) / s.bias1;
  double vHat = static_cast<double>(vNew) / s.bias2;
  pi -= s.rate * mHat / (std::sqrt(vHat) + s.eps);
  pOut = static_cast<T>(pi);
  mOut = mNew;
  vOut = vNew;
}

/// adamwElements for f32, vectorised for AVX-512F, AVX2 and SSE2 (VectorMath.cpp: the same
/// bits as the scalar loop on every level).
void adamwElementsF32(const AdamWArrays<float> &a, int64_t begin, int64_t end, const AdamWStep &s,
                      float clip);

/// Elements [begin, end) of one tensor, each as adamwElement computes it; the outputs may be the
/// inputs.
template <typename T>
void adamwElements(const AdamWArrays<T> &a, int64_t begin, int64_t end, const AdamWStep &s,
                   T clip = T(1)) {
  if constexpr (std::is_same_v<T, float>) {
    adamwElementsF32(a, begin, end, s, clip);
  } else {
    for (int64_t i = begin; i < end; ++i) // reads everything at i before writing anything
      adamwElement(a.p[i], a.g[i], a.m[i], a.v[i], s, clip, a.pOut[i], a.mOut[i], a.vOut[i]);
  }
}

} // namespace megac::runtime::cpu::detail
