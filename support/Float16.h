// bfloat16 and IEEE half conversions (round to nearest even), shared by the readers and kernels.
//
// Both 16-bit types are storage formats: arithmetic happens in float. Converting a double goes
// through float first, as PyTorch's c10::BFloat16 and c10::Half constructors do.
#pragma once

#include <bit>
#include <cstdint>

namespace megac {

inline float bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

inline uint16_t floatToBf16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, make it quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
  // mantissa bumps the exponent, which is what rounding up to the next binade (or inf) needs.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float halfToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) // inf or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) { // zero or subnormal: mantissa * 2^-24, exact in float
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t floatToHalf(float value) {
  // After F. Giesen's float_to_half_fast3_rtne: exact round to nearest even, including
  // subnormals (done by a float addition, which rounds to nearest even) and overflow to inf.
  uint32_t u = std::bit_cast<uint32_t>(value);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t out;
  if (u >= 0x47800000u) {                      // >= 65536, inf or NaN
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u; // NaN -> quiet NaN; everything else -> inf
  } else if (u < 0x38800000u) {                // below 2^-14: subnormal half or zero
    constexpr uint32_t kDenormMagic = ((127 - 15) + (23 - 10) + 1) << 23;
    float f = std::bit_cast<float>(u) + std::bit_cast<float>(kDenormMagic);
    out = static_cast<uint16_t>(std::bit_cast<uint32_t>(f) - kDenormMagic);
  } else {
    uint32_t mantissaOdd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xfffu; // rebias the exponent, round (part 1)
    u += mantissaOdd;                         // ties to even (part 2)
    out = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

} // namespace megac
