// CUDA elementwise kernels: unary and binary math, Compare, Where, Cast, Gelu, GeluGrad and
// Dropout. Each checks shapes and dtypes on the host exactly as its CPU reference
// (runtime/cpu/Elementwise.cpp, Grad.cpp) and launches one grid-stride kernel on ctx.stream.
// Floats: f64 computes in double, f32/bf16/f16 in float (half types rounded once on store).
#include "runtime/cpu/ElementwiseFormulas.h"
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/BySize.cuh"
#include "runtime/cuda/kernels/KernelCommon.cuh"

#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

namespace megac::runtime::cuda {

namespace {

using namespace cpu::detail;
using detail::Compute;
using detail::load;
using detail::store;
using detail::visitNumeric;

constexpr int kThreads = 256;

// ---- Dispatch ---------------------------------------------------------------------------

Status unsupportedNumeric(const char *op, DType dtype) {
  return fail(op, std::string("dtype ") + dtypeName(dtype) +
                      " is not supported (f64, f32, bf16, f16, i64, i32)");
}

// ---- Device math of Gelu: one name for float and double ---------------------------------------

__device__ __forceinline__ float dTanh(float v) { return tanhf(v); }
__device__ __forceinline__ double dTanh(double v) { return tanh(v); }
__device__ __forceinline__ float dErf(float v) { return erff(v); }
__device__ __forceinline__ double dErf(double v) { return erf(v); }

/// Element value in its compute type: Compute<T> for floats, T itself for integers.
template <typename T> using Value = std::conditional_t<std::is_integral_v<T>, T, Compute<T>>;

template <typename T> __device__ __forceinline__ Value<T> get(const T *p, int64_t i) {
  if constexpr (std::is_integral_v<T>)
    return p[i];
  else
    return load(p, i);
}
template <typename T> __device__ __forceinline__ void put(T *p, int64_t i, Value<T> v) {
  if constexpr (std::is_integral_v<T>)
    p[i] = v;
  else
    store(p, i, v);
}

using elementwise::wrapNeg;

// ---- Unary ----------------------------------------------------------------------------------

template <typename T> __global__ void unaryKernel(UnaryOp op, const T *x, T *y, int64_t n) {
  using V = Value<T>;
  GRID_STRIDE(i, n) {
    V v = get(x, i), r = V(0);
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
      case UnaryOp::Neg:
        r = wrapNeg(v);
        break;
      case UnaryOp::Abs:
        r = v < 0 ? wrapNeg(v) : v;
        break;
      case UnaryOp::Relu:
        r = megacUnaryRelu(v);
        break;
      default:
        break; // rejected on the host
      }
    } else {
      switch (op) {
#define MEGAC_CUDA_UNARY(Name, ...)                                                                \
  case UnaryOp::Name:                                                                              \
    r = megacUnary##Name(v);                                                                       \
    break;
#define MEGAC_CUDA_BINARY(Name, ...)
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
      default:
        break; // rejected on the host (hasUnaryKernel)
      }
    }
    put(y, i, r);
  }
}

__global__ void notKernel(const uint8_t *x, uint8_t *y, int64_t n) {
  GRID_STRIDE(i, n) { y[i] = !x[i]; }
}

// ---- Binary ---------------------------------------------------------------------------------

template <typename T>
__global__ void binaryKernel(BinaryOp op, const T *a, const T *b, T *y, int64_t n, int *errors) {
  using V = Value<T>;
  GRID_STRIDE(i, n) {
    V p = get(a, i), q = get(b, i), r;
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      switch (op) {
      case BinaryOp::Add:
        r = static_cast<T>(U(p) + U(q));
        break;
      case BinaryOp::Sub:
        r = static_cast<T>(U(p) - U(q));
        break;
      case BinaryOp::Mul:
        r = static_cast<T>(U(p) * U(q));
        break;
      case BinaryOp::Div:
        if (q == 0) {
          detail::raise(errors, DeviceError::divideByZero);
          r = 0;
        } else {
          r = q == -1 ? wrapNeg(p) : T(p / q); // min / -1 wraps to min
        }
        break;
      case BinaryOp::Min:
        r = q < p ? q : p;
        break;
      default: // Max
        r = q > p ? q : p;
        break;
      }
    } else {
      switch (op) {
#define MEGAC_CUDA_UNARY(Name, ...)
#define MEGAC_CUDA_BINARY(Name, ...)                                                               \
  case BinaryOp::Name:                                                                             \
    r = megacBinary##Name(p, q);                                                                   \
    break;
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
      default:
        r = V(0); // rejected on the host (hasBinaryKernel)
        break;
      }
    }
    put(y, i, r);
  }
}

__global__ void logicKernel(bool isAnd, const uint8_t *a, const uint8_t *b, uint8_t *y,
                            int64_t n) {
  GRID_STRIDE(i, n) {
    bool p = a[i] != 0, q = b[i] != 0;
    y[i] = isAnd ? (p && q) : (p || q);
  }
}

// ---- Compare and Where ----------------------------------------------------------------------

template <typename T>
__global__ void compareKernel(ComparePredicate pred, const T *a, const T *b, uint8_t *y,
                              int64_t n) {
  GRID_STRIDE(i, n) {
    auto u = get(a, i), v = get(b, i);
    bool r;
    switch (pred) {
    case ComparePredicate::eq:
      r = u == v;
      break;
    case ComparePredicate::ne:
      r = u != v;
      break;
    case ComparePredicate::lt:
      r = u < v;
      break;
    case ComparePredicate::le:
      r = u <= v;
      break;
    case ComparePredicate::gt:
      r = u > v;
      break;
    default:
      r = u >= v;
      break;
    }
    y[i] = r;
  }
}

template <typename T>
__global__ void whereKernel(const uint8_t *c, const T *a, const T *b, T *y, int64_t n) {
  GRID_STRIDE(i, n) { y[i] = c[i] ? a[i] : b[i]; }
}

// ---- Cast -----------------------------------------------------------------------------------

/// Device ports of runtime/io/Float16.h's conversions, bit for bit (NaN payloads included).
__device__ __forceinline__ uint16_t floatToBf16Bits(float value) {
  uint32_t u = __float_as_uint(value);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ uint16_t floatToHalfBits(float value) {
  uint32_t u = __float_as_uint(value);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t out;
  if (u >= 0x47800000u) {
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 0x38800000u) {
    constexpr uint32_t kDenormMagic = ((127 - 15) + (23 - 10) + 1) << 23;
    float f = __fadd_rn(__uint_as_float(u), __uint_as_float(kDenormMagic));
    out = static_cast<uint16_t>(__float_as_uint(f) - kDenormMagic);
  } else {
    uint32_t mantissaOdd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xfffu;
    u += mantissaOdd;
    out = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}
__device__ __forceinline__ float bf16BitsToFloat(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
__device__ __forceinline__ float halfBitsToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) // inf or NaN (payload kept)
    return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) { // zero or subnormal: mantissa * 2^-24, exact in float
    float magnitude = __fmul_rn(static_cast<float>(mantissa), 0x1p-24f);
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// The device's conversions of the 16-bit floats for elementwise::castLoad and castStore.
struct DeviceBits {
  static __device__ __forceinline__ float bf16ToFloat(uint16_t bits) {
    return bf16BitsToFloat(bits);
  }
  static __device__ __forceinline__ float halfToFloat(uint16_t bits) {
    return halfBitsToFloat(bits);
  }
  static __device__ __forceinline__ uint16_t floatToBf16(float value) {
    return floatToBf16Bits(value);
  }
  static __device__ __forceinline__ uint16_t floatToHalf(float value) {
    return floatToHalfBits(value);
  }
};

template <DType S, DType D> __global__ void castKernel(const void *x, void *y, int64_t n) {
  GRID_STRIDE(i, n) {
    elementwise::castStore<D, DeviceBits>(y, i, elementwise::castLoad<S, DeviceBits>(x, i));
  }
}


// ---- Gelu, GeluGrad, Dropout ----------------------------------------------------------------

template <typename T> __global__ void geluKernel(const T *x, T *y, int64_t n, bool useTanh) {
  using C = Compute<T>;
  // The constants rounded to the compute type, as the CPU's f32/f64 kernel.
  const C kBeta = static_cast<C>(0.79788456080286535588); // sqrt(2/pi)
  const C kKappa = static_cast<C>(0.044715);
  const C kRsqrt2 = static_cast<C>(0.70710678118654752440); // sqrt(2)/2
  GRID_STRIDE(i, n) {
    C v = load(x, i);
    C r;
    if (useTanh) {
      C inner = kBeta * (v + kKappa * v * v * v);
      r = C(0.5) * v * (C(1) + dTanh(inner));
    } else {
      r = v * C(0.5) * (C(1) + dErf(v * kRsqrt2));
    }
    store(y, i, r);
  }
}

/// The slope in double for every dtype, as the CPU's GeluGrad computes it.
template <typename T>
__global__ void geluGradKernel(const T *dy, const T *x, T *dx, int64_t n, bool useTanh) {
  const double kBeta = 0.79788456080286535588, kKappa = 0.044715;
  const double kInvSqrt2Pi = 0.39894228040143267794; // 1/sqrt(2 pi)
  GRID_STRIDE(i, n) {
    double v = static_cast<double>(load(x, i)), slope;
    if (useTanh) {
      double th = tanh(kBeta * (v + kKappa * v * v * v));
      slope = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * kBeta * (1.0 + 3.0 * kKappa * v * v);
    } else {
      // d/dx x Phi(x) = Phi(x) + x phi(x); erf(v / sqrt 2) as the CPU writes it.
      slope = 0.5 * (1.0 + erf(v / 1.41421356237309504880)) + v * kInvSqrt2Pi * exp(-0.5 * v * v);
    }
    double r = static_cast<double>(load(dy, i)) * slope;
    store(dx, i, static_cast<Compute<T>>(r));
  }
}

/// philox4x32-10, exactly init::philox4x32.
__device__ __forceinline__ uint32_t philoxFirstWord(uint32_t c0, uint32_t c1, uint32_t c2,
                                                     uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0 = __umulhi(kM0, c0), lo0 = kM0 * c0;
    uint32_t hi1 = __umulhi(kM1, c2), lo1 = kM1 * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return c0;
}

/// Where element i's mask index comes from: firstIndex + i, or (shard) its row-major index in
/// the global tensor, base + sum(index_d * globalStride_d) over the shard's dims.
struct MaskIndex {
  uint64_t base = 0;
  bool shard = false;
  detail::Dims dims; // shard: size = the shard's shape, stride = the global strides
};

__device__ __forceinline__ uint64_t maskIndexOf(const MaskIndex &m, int64_t i) {
  if (!m.shard)
    return m.base + static_cast<uint64_t>(i);
  uint64_t at = m.base;
  int64_t rest = i;
  for (int d = m.dims.rank - 1; d >= 0; --d) {
    int64_t size = m.dims.size[d];
    at += static_cast<uint64_t>(rest % size) * static_cast<uint64_t>(m.dims.stride[d]);
    rest /= size;
  }
  return at;
}

template <typename T>
__global__ void dropoutKernel(const T *x, T *y, int64_t n, const void *seed, bool seedI64,
                              uint64_t stream, double threshold, Compute<T> scale, MaskIndex mi) {
  uint64_t s = seedI64 ? static_cast<uint64_t>(*static_cast<const int64_t *>(seed))
                       : static_cast<uint64_t>(
                             static_cast<int64_t>(*static_cast<const int32_t *>(seed)));
  uint32_t k0 = static_cast<uint32_t>(s), k1 = static_cast<uint32_t>(s >> 32);
  GRID_STRIDE(i, n) {
    uint64_t index = maskIndexOf(mi, i);
    uint32_t r = philoxFirstWord(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                 static_cast<uint32_t>(stream),
                                 static_cast<uint32_t>(stream >> 32), k0, k1);
    bool keep = static_cast<double>(r) >= threshold;
    store(y, i, keep ? load(x, i) * scale : Compute<T>(0));
  }
}

Status dropoutWith(const Context &ctx, const TensorRef &x, const TensorRef &seed, double ratio,
                   int64_t stream, const TensorRef &out, const MaskIndex &mi) {
  const char *name = "Dropout";
  RETURN_IF_ERROR(cpu::detail::checkDropout(x, seed, ratio, out));
  if (!detail::isFloat(x.dtype))
    return detail::unsupportedDtype(name, x.dtype);
  int64_t n = x.numElements();
  if (n == 0)
    return Status::ok();
  if (ratio == 0.0) {
    if (out.data != x.data &&
        cudaMemcpyAsync(out.data, x.data, x.byteSize(), cudaMemcpyDeviceToDevice, ctx.stream) !=
            cudaSuccess)
      return launchStatus(name);
    return Status::ok();
  }
  detail::visitFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const C scale = ratio < 1.0 ? static_cast<C>(1.0 / (1.0 - ratio)) : C(0);
    dropoutKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const T>(), out.as<T>(), n, seed.data, seed.dtype == DType::i64,
        static_cast<uint64_t>(stream), ratio * 4294967296.0, scale, mi);
  });
  return launchStatus(name);
}

} // namespace

// ---- Entry points -----------------------------------------------------------------------------

bool hasUnaryKernel(UnaryOp op) {
  switch (op) {
  case UnaryOp::Not:
#define MEGAC_CUDA_UNARY(Name, ...) case UnaryOp::Name:
#define MEGAC_CUDA_BINARY(Name, ...)
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
    return true;
  default:
    return false;
  }
}

bool hasBinaryKernel(BinaryOp op) {
  switch (op) {
  case BinaryOp::And:
  case BinaryOp::Or:
#define MEGAC_CUDA_UNARY(Name, ...)
#define MEGAC_CUDA_BINARY(Name, ...) case BinaryOp::Name:
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
    return true;
  default:
    return false;
  }
}

Status unary(const Context &ctx, UnaryOp op, const TensorRef &x, const TensorRef &out) {
  const char *name = cpu::unaryOpName(op);
  if (!hasUnaryKernel(op))
    return fail(name,
                "has no CUDA kernel (no formula in runtime/cuda/kernels/ElementwiseMath.def)");
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape(name, "output", out, x.shape));
  int64_t n = x.numElements();
  if (op == UnaryOp::Not) {
    RETURN_IF_ERROR(expectDtype(name, "input", x, DType::i1));
    if (n)
      notKernel<<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
          x.as<const uint8_t>(), out.as<uint8_t>(), n);
    return launchStatus(name);
  }
  bool integerOk = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu;
  if (!detail::isFloat(x.dtype)) {
    if (!integerOk)
      return detail::unsupportedDtype(name, x.dtype);
    if (x.dtype != DType::i64 && x.dtype != DType::i32)
      return unsupportedNumeric(name, x.dtype);
  }
  if (n == 0)
    return Status::ok();
  visitNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    unaryKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        op, x.as<const T>(), out.as<T>(), n);
  });
  return launchStatus(name);
}

Status binary(const Context &ctx, BinaryOp op, const TensorRef &a, const TensorRef &b,
              const TensorRef &out) {
  const char *name = cpu::binaryOpName(op);
  if (!hasBinaryKernel(op))
    return fail(name,
                "has no CUDA kernel (no formula in runtime/cuda/kernels/ElementwiseMath.def)");
  RETURN_IF_ERROR(cpu::detail::checkElementwise(name, a, b, out, a.dtype));
  int64_t n = a.numElements();
  if (op == BinaryOp::And || op == BinaryOp::Or) {
    RETURN_IF_ERROR(expectDtype(name, "lhs", a, DType::i1));
    if (n)
      logicKernel<<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
          op == BinaryOp::And, a.as<const uint8_t>(), b.as<const uint8_t>(), out.as<uint8_t>(), n);
    return launchStatus(name);
  }
  if (op == BinaryOp::Pow && !detail::isFloat(a.dtype))
    return detail::unsupportedDtype(name, a.dtype);
  if (!detail::isFloat(a.dtype) && a.dtype != DType::i64 && a.dtype != DType::i32)
    return unsupportedNumeric(name, a.dtype);
  if (n == 0)
    return Status::ok();
  visitNumeric(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    binaryKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        op, a.as<const T>(), b.as<const T>(), out.as<T>(), n, ctx.errors);
  });
  return launchStatus(name);
}

Status compare(const Context &ctx, ComparePredicate predicate, const TensorRef &a,
               const TensorRef &b, const TensorRef &out) {
  const char *name = "Compare";
  RETURN_IF_ERROR(cpu::detail::checkElementwise(name, a, b, out, DType::i1));
  if (static_cast<unsigned>(predicate) > static_cast<unsigned>(ComparePredicate::ge))
    return fail(name, "unknown predicate " + std::to_string(int(predicate)));
  bool i1 = a.dtype == DType::i1;
  if (!i1 && !detail::isFloat(a.dtype) && a.dtype != DType::i64 && a.dtype != DType::i32)
    return unsupportedNumeric(name, a.dtype);
  int64_t n = a.numElements();
  if (n == 0)
    return Status::ok();
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    compareKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        predicate, a.as<const T>(), b.as<const T>(), out.as<uint8_t>(), n);
  };
  if (i1) // 0/1 bytes compare as numbers
    launch(uint8_t{});
  else
    visitNumeric(a.dtype, launch);
  return launchStatus(name);
}

Status where(const Context &ctx, const TensorRef &cond, const TensorRef &a, const TensorRef &b,
             const TensorRef &out) {
  const char *name = "Where";
  RETURN_IF_ERROR(cpu::detail::checkWhere(cond, a, b, out));
  int64_t n = out.numElements();
  if (n == 0)
    return Status::ok();
  auto launch = [&](auto tag) { // by bits: any dtype
    using T = decltype(tag);
    whereKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        cond.as<const uint8_t>(), a.as<const T>(), b.as<const T>(), out.as<T>(), n);
  };
  bySize(a.dtype, launch);
  return launchStatus(name);
}

Status cast(const Context &ctx, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectShape("Cast", "output", out, x.shape));
  if (!validDtype(x.dtype) || !validDtype(out.dtype))
    return fail("Cast", "invalid dtype");
  int64_t n = x.numElements();
  if (n == 0)
    return Status::ok();
  if (x.dtype == out.dtype) {
    if (out.data != x.data &&
        cudaMemcpyAsync(out.data, x.data, x.byteSize(), cudaMemcpyDeviceToDevice, ctx.stream) !=
            cudaSuccess)
      return launchStatus("Cast");
    return Status::ok();
  }
  withDtype(x.dtype, [&](auto src) {
    withDtype(out.dtype, [&](auto dst) {
      castKernel<src.value, dst.value>
          <<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(x.data, out.data, n);
    });
  });
  return launchStatus("Cast");
}

Status gelu(const Context &ctx, const TensorRef &x, bool tanh, const TensorRef &out) {
  RETURN_IF_ERROR(expectLike("Gelu", x, out, "output"));
  int64_t n = x.numElements();
  return detail::launchFloat("Gelu", x.dtype, n, [&](auto tag) {
    using T = decltype(tag);
    geluKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const T>(), out.as<T>(), n, tanh);
  });
}

Status geluGrad(const Context &ctx, const TensorRef &dy, const TensorRef &x, bool tanh,
                const TensorRef &dx) {
  const char *name = "GeluGrad";
  RETURN_IF_ERROR(expectLike(name, x, dy, "dy"));
  RETURN_IF_ERROR(expectLike(name, x, dx, "dx"));
  int64_t n = x.numElements();
  return detail::launchFloat(name, x.dtype, n, [&](auto tag) {
    using T = decltype(tag);
    geluGradKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        dy.as<const T>(), x.as<const T>(), dx.as<T>(), n, tanh);
  });
}

Status dropout(const Context &ctx, const TensorRef &x, const TensorRef &seed, double ratio,
               int64_t stream, const TensorRef &out, uint64_t firstIndex) {
  MaskIndex mi;
  mi.base = firstIndex;
  return dropoutWith(ctx, x, seed, ratio, stream, out, mi);
}

Status dropoutShard(const Context &ctx, const TensorRef &x, const TensorRef &seed, double ratio,
                    int64_t stream, std::span<const int64_t> globalShape,
                    std::span<const int64_t> shardOffset, const TensorRef &out) {
  RETURN_IF_ERROR(cpu::detail::checkDropoutShard(x, globalShape, shardOffset));
  size_t rank = x.shape.size();
  if (rank > static_cast<size_t>(detail::kMaxRank))
    return fail("Dropout", "rank " + std::to_string(rank) + " is above the CUDA kernels' " +
                               std::to_string(detail::kMaxRank));
  MaskIndex mi;
  mi.shard = true;
  mi.dims.rank = static_cast<int>(rank);
  uint64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    mi.dims.size[d] = x.shape[d];
    mi.dims.stride[d] = static_cast<int64_t>(stride);
    mi.base += static_cast<uint64_t>(shardOffset[d]) * stride;
    stride *= static_cast<uint64_t>(globalShape[d]);
  }
  return dropoutWith(ctx, x, seed, ratio, stream, out, mi);
}

} // namespace megac::runtime::cuda
