// CPU reference kernels for elementwise ops: unary and binary math, Compare, Where, Cast, Gelu
// and Dropout.
#include "runtime/cpu/ElementwiseFormulas.h"
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/VectorMath.h"
#include "runtime/init/ParamInit.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

namespace megac::runtime::cpu {

using namespace detail;

int64_t TensorRef::numElements() const { return product(shape); }

const char *unaryOpName(UnaryOp op) {
  static const char *const kNames[] = {"Neg",  "Abs",  "Exp",   "Log", "Tanh", "Erf", "Sigmoid",
                                       "Relu", "Sqrt", "Rsqrt", "Not", "Sin",  "Cos"};
  return kNames[static_cast<int>(op)];
}

const char *binaryOpName(BinaryOp op) {
  static const char *const kNames[] = {"Add", "Sub", "Mul", "Div", "Pow",
                                       "Min", "Max", "And", "Or"};
  return kNames[static_cast<int>(op)];
}

namespace {

// Elementwise loops split into contiguous element ranges over the kernel threads (each element
// is computed alone, so the result does not depend on the split; in place is fine).
constexpr int64_t kElementGrain = 1 << 14;

template <typename T, typename F> void mapUnary(const T *x, T *y, int64_t n, F f) {
  parallelFor(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = f(x[i]);
  });
}

template <typename T, typename U, typename F>
void mapBinary(const T *a, const T *b, U *y, int64_t n, F f) {
  parallelFor(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = f(a[i], b[i]);
  });
}

using elementwise::wrapNeg;

template <typename T> Status unaryTyped(UnaryOp op, const T *x, T *y, int64_t n) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
    case UnaryOp::Neg:
      mapUnary(x, y, n, [](T v) { return wrapNeg(v); });
      return Status::ok();
    case UnaryOp::Abs:
      mapUnary(x, y, n, [](T v) { return v < 0 ? wrapNeg(v) : v; });
      return Status::ok();
    case UnaryOp::Relu:
      mapUnary(x, y, n, megacUnaryRelu<T>);
      return Status::ok();
    default:
      break;
    }
  } else {
    switch (op) { // the formulas of ElementwiseMath.def, as the CUDA kernels compute them
#define MEGAC_CUDA_UNARY(Name, ...)                                                                \
  case UnaryOp::Name:                                                                              \
    mapUnary(x, y, n, megacUnary##Name<T>);                                                        \
    return Status::ok();
#define MEGAC_CUDA_BINARY(Name, ...)
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
    default:
      break;
    }
  }
  return fail(unaryOpName(op), std::string("dtype ") +
                                   (std::is_same_v<T, int64_t> ? "i64" : "i32") +
                                   " is not supported (floating point only)");
}

template <typename T> Status binaryTyped(BinaryOp op, const T *a, const T *b, T *y, int64_t n) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
    case BinaryOp::Add:
      mapBinary(a, b, y, n, [](T p, T q) { return static_cast<T>(U(p) + U(q)); });
      return Status::ok();
    case BinaryOp::Sub:
      mapBinary(a, b, y, n, [](T p, T q) { return static_cast<T>(U(p) - U(q)); });
      return Status::ok();
    case BinaryOp::Mul:
      mapBinary(a, b, y, n, [](T p, T q) { return static_cast<T>(U(p) * U(q)); });
      return Status::ok();
    case BinaryOp::Div:
      for (int64_t i = 0; i < n; ++i)
        if (b[i] == 0)
          return fail("Div", "integer division by zero at element " + std::to_string(i));
      // min / -1 overflows; it wraps to min, like the negation.
      mapBinary(a, b, y, n, [](T p, T q) { return q == -1 ? wrapNeg(p) : T(p / q); });
      return Status::ok();
    default:
      break;
    }
  } else {
    switch (op) { // the formulas of ElementwiseMath.def, as the CUDA kernels compute them
#define MEGAC_CUDA_UNARY(Name, ...)
#define MEGAC_CUDA_BINARY(Name, ...)                                                               \
  case BinaryOp::Name:                                                                             \
    mapBinary(a, b, y, n, megacBinary##Name<T>);                                                   \
    return Status::ok();
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
    default:
      break;
    }
  }
  switch (op) { // NaN-free integers: the float formulas of Min and Max hold as they are
  case BinaryOp::Min:
    mapBinary(a, b, y, n, megacBinaryMin<T>);
    return Status::ok();
  case BinaryOp::Max:
    mapBinary(a, b, y, n, megacBinaryMax<T>);
    return Status::ok();
  default:
    return fail(binaryOpName(op), "integer dtypes are not supported (floating point only)");
  }
}

} // namespace

Status unary(UnaryOp op, const TensorRef &x, const TensorRef &out) {
  const char *name = unaryOpName(op);
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape(name, "output", out, x.shape));
  int64_t n = x.numElements();
  if (op == UnaryOp::Not) {
    RETURN_IF_ERROR(expectDtype(name, "input", x, DType::i1));
    mapUnary(x.as<const uint8_t>(), out.as<uint8_t>(), n, [](uint8_t v) -> uint8_t { return !v; });
    return Status::ok();
  }
  bool integerOk = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu;
  auto body = [&](auto tag) {
    using T = decltype(tag);
    return unaryTyped<T>(op, x.as<const T>(), out.as<T>(), n);
  };
  return integerOk ? dispatchNumeric(name, x.dtype, body) : dispatchFloat(name, x.dtype, body);
}

Status detail::checkElementwise(const char *op, const TensorRef &a, const TensorRef &b,
                                const TensorRef &out, DType outDtype) {
  RETURN_IF_ERROR(expectDtype(op, "rhs", b, a.dtype));
  RETURN_IF_ERROR(expectDtype(op, "output", out, outDtype));
  RETURN_IF_ERROR(expectShape(op, "rhs", b, a.shape));
  return expectShape(op, "output", out, a.shape);
}

Status binary(BinaryOp op, const TensorRef &a, const TensorRef &b, const TensorRef &out) {
  const char *name = binaryOpName(op);
  RETURN_IF_ERROR(checkElementwise(name, a, b, out, a.dtype));
  int64_t n = a.numElements();
  if (op == BinaryOp::And || op == BinaryOp::Or) {
    RETURN_IF_ERROR(expectDtype(name, "lhs", a, DType::i1));
    const uint8_t *p = a.as<const uint8_t>(), *q = b.as<const uint8_t>();
    if (op == BinaryOp::And)
      mapBinary(p, q, out.as<uint8_t>(), n,
                [](uint8_t u, uint8_t v) -> uint8_t { return (u != 0) & (v != 0); });
    else
      mapBinary(p, q, out.as<uint8_t>(), n,
                [](uint8_t u, uint8_t v) -> uint8_t { return (u != 0) | (v != 0); });
    return Status::ok();
  }
  auto body = [&](auto tag) {
    using T = decltype(tag);
    return binaryTyped<T>(op, a.as<const T>(), b.as<const T>(), out.as<T>(), n);
  };
  return op == BinaryOp::Pow ? dispatchFloat(name, a.dtype, body)
                             : dispatchNumeric(name, a.dtype, body);
}

Status compare(ComparePredicate predicate, const TensorRef &a, const TensorRef &b,
               const TensorRef &out) {
  const char *name = "Compare";
  RETURN_IF_ERROR(checkElementwise(name, a, b, out, DType::i1));
  int64_t n = a.numElements();
  auto body = [&](auto tag) {
    using T = decltype(tag);
    const T *p = a.as<const T>(), *q = b.as<const T>();
    uint8_t *y = out.as<uint8_t>();
    switch (predicate) {
    case ComparePredicate::eq:
      mapBinary(p, q, y, n, [](T u, T v) -> uint8_t { return u == v; });
      break;
    case ComparePredicate::ne:
      mapBinary(p, q, y, n, [](T u, T v) -> uint8_t { return u != v; });
      break;
    case ComparePredicate::lt:
      mapBinary(p, q, y, n, [](T u, T v) -> uint8_t { return u < v; });
      break;
    case ComparePredicate::le:
      mapBinary(p, q, y, n, [](T u, T v) -> uint8_t { return u <= v; });
      break;
    case ComparePredicate::gt:
      mapBinary(p, q, y, n, [](T u, T v) -> uint8_t { return u > v; });
      break;
    case ComparePredicate::ge:
      mapBinary(p, q, y, n, [](T u, T v) -> uint8_t { return u >= v; });
      break;
    default:
      return fail(name, "unknown predicate " + std::to_string(int(predicate)));
    }
    return Status::ok();
  };
  if (a.dtype == DType::i1) // 0/1 bytes compare as numbers
    return body(uint8_t{});
  return dispatchNumeric(name, a.dtype, body);
}

Status detail::checkWhere(const TensorRef &cond, const TensorRef &a, const TensorRef &b,
                          const TensorRef &out) {
  const char *name = "Where";
  RETURN_IF_ERROR(expectDtype(name, "condition", cond, DType::i1));
  RETURN_IF_ERROR(expectDtype(name, "false value", b, a.dtype));
  RETURN_IF_ERROR(expectDtype(name, "output", out, a.dtype));
  RETURN_IF_ERROR(expectShape(name, "true value", a, out.shape));
  RETURN_IF_ERROR(expectShape(name, "false value", b, out.shape));
  return expectShape(name, "condition", cond, out.shape);
}

Status where(const TensorRef &cond, const TensorRef &a, const TensorRef &b, const TensorRef &out) {
  RETURN_IF_ERROR(checkWhere(cond, a, b, out));
  int64_t n = out.numElements();
  const uint8_t *c = cond.as<const uint8_t>();
  auto select = [&](auto tag) {
    using T = decltype(tag);
    const T *p = a.as<const T>(), *q = b.as<const T>();
    T *y = out.as<T>();
    for (int64_t i = 0; i < n; ++i)
      y[i] = c[i] ? p[i] : q[i];
  };
  switch (dtypeSize(a.dtype)) { // by bits: any dtype
  case 1:
    select(uint8_t{});
    break;
  case 2:
    select(uint16_t{});
    break;
  case 4:
    select(uint32_t{});
    break;
  default:
    select(uint64_t{});
    break;
  }
  return Status::ok();
}

// ---- Cast ----------------------------------------------------------------------------------

namespace {

template <DType S, DType D> void castLoop(const void *x, void *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    elementwise::castStore<D, elementwise::HostBits>(
        y, i, elementwise::castLoad<S, elementwise::HostBits>(x, i));
}

} // namespace

Status cast(const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectShape("Cast", "output", out, x.shape));
  if (!validDtype(x.dtype) || !validDtype(out.dtype))
    return fail("Cast", "invalid dtype");
  int64_t n = x.numElements();
  if (x.dtype == out.dtype) {
    copyBytes(out.data, x.data, x.byteSize());
    return Status::ok();
  }
  withDtype(x.dtype, [&](auto src) {
    withDtype(out.dtype, [&](auto dst) { castLoop<src.value, dst.value>(x.data, out.data, n); });
  });
  return Status::ok();
}

// ---- Gelu, Silu and Dropout
// ----------------------------------------------------------------------

Status gelu(const TensorRef &x, bool tanh, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Gelu", "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape("Gelu", "output", out, x.shape));
  int64_t n = x.numElements();
  return dispatchFloat("Gelu", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (tanh) {
      const T kBeta = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
      const T kKappa = static_cast<T>(0.044715);
      mapUnary(x.as<const T>(), out.as<T>(), n, [&](T v) {
        T inner = kBeta * (v + kKappa * v * v * v);
        return T(0.5) * v * (T(1) + std::tanh(inner));
      });
    } else if constexpr (std::is_same_v<T, float>) { // the vectorised erf (VectorMath.h)
      const float *xs = x.as<const float>();
      float *ys = out.as<float>();
      parallelFor(n, kElementGrain, [&](int64_t begin, int64_t end) {
        vmath::geluErfF32(xs + begin, ys + begin, end - begin);
      });
    } else {
      const T kRsqrt2 = static_cast<T>(std::numbers::sqrt2 / 2);
      mapUnary(x.as<const T>(), out.as<T>(), n,
               [&](T v) { return v * T(0.5) * (T(1) + std::erf(v * kRsqrt2)); });
    }
    return Status::ok();
  });
}

Status silu(const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Silu", "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape("Silu", "output", out, x.shape));
  int64_t n = x.numElements();
  return dispatchFloat("Silu", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    mapUnary(x.as<const T>(), out.as<T>(), n, [](T v) { return v / (T(1) + std::exp(-v)); });
    return Status::ok();
  });
}

bool dropoutKeeps(uint64_t seed, int64_t stream, uint64_t index, double ratio) {
  uint64_t s = static_cast<uint64_t>(stream);
  uint32_t counter[4] = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32)};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  uint32_t r[4];
  megac::init::philox4x32(counter, key, r);
  return static_cast<double>(r[0]) >= ratio * 4294967296.0;
}

Status detail::checkDropout(const TensorRef &x, const TensorRef &seed, double ratio,
                            const TensorRef &out) {
  const char *name = "Dropout";
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape(name, "output", out, x.shape));
  RETURN_IF_ERROR(expectIndexDtype(name, "seed", seed));
  if (!seed.shape.empty())
    return fail(name, "seed must be a 0-d tensor, not shape " + shapeString(seed.shape));
  if (!(ratio >= 0.0 && ratio <= 1.0))
    return fail(name, "ratio " + std::to_string(ratio) + " is outside [0, 1]");
  return Status::ok();
}

Status detail::checkDropoutShard(const TensorRef &x, std::span<const int64_t> globalShape,
                                 std::span<const int64_t> shardOffset) {
  size_t rank = x.shape.size();
  if (globalShape.size() != rank || shardOffset.size() != rank)
    return fail("Dropout", "global shape " + shapeString(globalShape) + " and shard offset " +
                               shapeString(shardOffset) + " must have the input's rank " +
                               std::to_string(rank));
  for (size_t d = 0; d < rank; ++d)
    if (shardOffset[d] < 0 || globalShape[d] < 0 || shardOffset[d] > globalShape[d] ||
        x.shape[d] > globalShape[d] - shardOffset[d])
      return fail("Dropout", "the shard " + shapeString(x.shape) + " at offset " +
                                 shapeString(shardOffset) + " does not fit the global shape " +
                                 shapeString(globalShape));
  return Status::ok();
}

namespace {

/// Dropout with element i drawing index indexOf(i).
template <typename IndexOf>
Status dropoutWith(const TensorRef &x, const TensorRef &seed, double ratio, int64_t stream,
                   const TensorRef &out, IndexOf indexOf) {
  const char *name = "Dropout";
  RETURN_IF_ERROR(checkDropout(x, seed, ratio, out));
  uint64_t seedValue = static_cast<uint64_t>(loadIndex(seed, 0));
  int64_t n = x.numElements();
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *in = x.as<const T>();
    T *y = out.as<T>();
    if (ratio == 0.0) {
      copyBytes(y, in, x.byteSize());
      return Status::ok();
    }
    // ratio 1 keeps nothing, so the infinite scale is never applied.
    const T scale = ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
    for (int64_t i = 0; i < n; ++i)
      y[i] = dropoutKeeps(seedValue, stream, indexOf(i), ratio) ? in[i] * scale : T(0);
    return Status::ok();
  });
}

} // namespace

Status dropout(const TensorRef &x, const TensorRef &seed, double ratio, int64_t stream,
               const TensorRef &out, uint64_t firstIndex) {
  return dropoutWith(x, seed, ratio, stream, out,
                     [&](int64_t i) { return firstIndex + static_cast<uint64_t>(i); });
}

Status dropoutShard(const TensorRef &x, const TensorRef &seed, double ratio, int64_t stream,
                    std::span<const int64_t> globalShape, std::span<const int64_t> shardOffset,
                    const TensorRef &out) {
  RETURN_IF_ERROR(checkDropoutShard(x, globalShape, shardOffset));
  size_t rank = x.shape.size();
  // Global row-major strides; the shard's index walks its own shape.
  std::vector<uint64_t> globalStrides(rank);
  uint64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    globalStrides[d] = stride;
    stride *= static_cast<uint64_t>(globalShape[d]);
  }
  uint64_t base = 0;
  for (size_t d = 0; d < rank; ++d)
    base += static_cast<uint64_t>(shardOffset[d]) * globalStrides[d];
  std::vector<int64_t> index(rank, 0);
  uint64_t current = base;
  int64_t next = 0; // the local index `current` belongs to; the kernel asks in order
  return dropoutWith(x, seed, ratio, stream, out, [&](int64_t i) {
    for (; next < i; ++next)
      for (size_t d = rank; d-- > 0;) {
        current += globalStrides[d];
        if (++index[d] < x.shape[d])
          break;
        current -= globalStrides[d] * static_cast<uint64_t>(x.shape[d]);
        index[d] = 0;
      }
    return current;
  });
}

} // namespace megac::runtime::cpu
