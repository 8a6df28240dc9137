// Lets the CUDA C of fused kernels (runtime/cuda/Fusion.cpp) compile as host C++, for the unit
// test that runs the generated code against the CPU kernels without a GPU: one thread of one
// block, so the grid-stride loop visits every element in order; bit casts by memcpy; bf16/f16
// conversions from runtime/io/Float16.h (the generated source uses PTX cvt on a device).
#pragma once

#include "support/Float16.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <math.h>

#define __global__
#define __device__
#define __forceinline__ inline

struct MegacEmulatedDim {
  unsigned x;
};
inline constexpr MegacEmulatedDim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}
inline long long __double_as_longlong(double d) {
  long long v;
  std::memcpy(&v, &d, sizeof v);
  return v;
}
inline float megac_host_h2f(unsigned short h) { return megac::halfToFloat(h); }
inline unsigned short megac_host_f2h(float f) { return megac::floatToHalf(f); }

/// A generated kernel built for the host: `run` calls it with the group's buffers (inputs,
/// then outputs) and the element count.
struct EmulatedKernel {
  const char *name;
  void (*run)(void *const *pointers, long long n);
};
extern const EmulatedKernel kEmulatedKernels[];
extern const size_t kEmulatedKernelCount;
