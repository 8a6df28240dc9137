// The elementwise formulas the CPU reference kernels (runtime/cpu/Elementwise.cpp) and the CUDA
// kernels (runtime/cuda/kernels/Elementwise.cu) share, written once: the float formula of each
// Unary and Binary opcode (expanded from runtime/cuda/kernels/ElementwiseMath.def) and the
// element conversions of Cast. MEGAC_HD marks them `__host__ __device__` under nvcc and is empty
// for the host compiler; tests/unit/runtime/ElementwiseFormulasTest.cpp checks them on the host
// against the CPU kernels.
#pragma once

#include "support/Float16.h"
#include "support/HostTensor.h"

// <math.h>, not only <cmath>: its global exp, sqrt, ... overloads take a float to expf, sqrtf, ...
// on the host, as std::exp does, and CUDA's global overloads do the same on the device.
#include <math.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#ifdef __CUDACC__
#define MEGAC_HD __host__ __device__ __forceinline__
#else
#define MEGAC_HD inline
#endif

// megacUnaryNeg(x), ..., megacBinaryMax(a, b): one function template a formula, in the compute
// type T, at global scope so that `exp`, `sqrt`, ... are the float and double overloads.
#define MEGAC_CUDA_UNARY(Name, ...)                                                                \
  template <typename T> MEGAC_HD T megacUnary##Name(T x) { return __VA_ARGS__; }
#define MEGAC_CUDA_BINARY(Name, ...)                                                               \
  template <typename T> MEGAC_HD T megacBinary##Name(T a, T b) { return __VA_ARGS__; }
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY

namespace megac::runtime::elementwise {

/// Two's-complement negation without signed overflow.
template <typename T> MEGAC_HD T wrapNeg(T v) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(v));
}

/// Truncates toward zero and saturates; NaN becomes 0 (C++ leaves these undefined).
template <typename I> MEGAC_HD I truncSaturate(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min()); // -2^(bits-1)
  if (v != v)
    return 0;
  if (v <= lo)
    return std::numeric_limits<I>::min();
  if (v >= -lo)
    return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

/// Bits for castLoad and castStore on the host: the host's conversions of the 16-bit floats
/// (support/Float16.h).
struct HostBits {
  static float bf16ToFloat(uint16_t bits) { return megac::bf16ToFloat(bits); }
  static float halfToFloat(uint16_t bits) { return megac::halfToFloat(bits); }
  static uint16_t floatToBf16(float value) { return megac::floatToBf16(value); }
  static uint16_t floatToHalf(float value) { return megac::floatToHalf(value); }
};

/// An element of dtype D as a C++ value: float/double for floats (16-bit ones widened to
/// float), int64_t for integers and i1. Bits converts the 16-bit floats (static
/// bf16ToFloat, halfToFloat, floatToBf16, floatToHalf: the host's or the device's).
template <DType D, typename Bits> MEGAC_HD auto castLoad(const void *p, int64_t i) {
  if constexpr (D == DType::f64)
    return static_cast<const double *>(p)[i];
  else if constexpr (D == DType::f32)
    return static_cast<const float *>(p)[i];
  else if constexpr (D == DType::bf16)
    return Bits::bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  else if constexpr (D == DType::f16)
    return Bits::halfToFloat(static_cast<const uint16_t *>(p)[i]);
  else if constexpr (D == DType::i64)
    return static_cast<const int64_t *>(p)[i];
  else if constexpr (D == DType::i32)
    return static_cast<int64_t>(static_cast<const int32_t *>(p)[i]);
  else
    return static_cast<int64_t>(static_cast<const uint8_t *>(p)[i] != 0);
}

/// Stores castLoad's value v as an element of dtype D (floats to integers by truncSaturate).
template <DType D, typename Bits, typename V> MEGAC_HD void castStore(void *p, int64_t i, V v) {
  constexpr bool fromFloat = std::is_floating_point_v<V>;
  if constexpr (D == DType::f64)
    static_cast<double *>(p)[i] = static_cast<double>(v);
  else if constexpr (D == DType::f32)
    static_cast<float *>(p)[i] = static_cast<float>(v);
  else if constexpr (D == DType::bf16)
    static_cast<uint16_t *>(p)[i] = Bits::floatToBf16(static_cast<float>(v));
  else if constexpr (D == DType::f16)
    static_cast<uint16_t *>(p)[i] = Bits::floatToHalf(static_cast<float>(v));
  else if constexpr (D == DType::i64) {
    if constexpr (fromFloat)
      static_cast<int64_t *>(p)[i] = truncSaturate<int64_t>(v);
    else
      static_cast<int64_t *>(p)[i] = int64_t(v);
  } else if constexpr (D == DType::i32) {
    if constexpr (fromFloat)
      static_cast<int32_t *>(p)[i] = truncSaturate<int32_t>(v);
    else
      static_cast<int32_t *>(p)[i] = int32_t(v);
  } else
    static_cast<uint8_t *>(p)[i] = v != 0;
}

} // namespace megac::runtime::elementwise
