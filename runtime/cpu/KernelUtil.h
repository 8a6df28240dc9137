// Internal helpers of the CPU kernels: shape checks, dtype dispatch and strided iteration.
#pragma once

#include "runtime/cpu/Kernels.h"
#include "support/Float16.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace megac::runtime::cpu::detail {

inline int64_t product(std::span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

inline bool sameShape(std::span<const int64_t> a, std::span<const int64_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

/// "Add: " + ... : every kernel error starts with the op's name.
inline Status fail(const char *op, const std::string &what) {
  return Status::error(std::string(op) + ": " + what);
}

/// Calls f(std::integral_constant<DType, d>) for the runtime dtype d (CPU and CUDA casts).
template <typename F> void withDtype(DType d, F &&f) {
  switch (d) {
  case DType::f64:
    return f(std::integral_constant<DType, DType::f64>{});
  case DType::f32:
    return f(std::integral_constant<DType, DType::f32>{});
  case DType::bf16:
    return f(std::integral_constant<DType, DType::bf16>{});
  case DType::f16:
    return f(std::integral_constant<DType, DType::f16>{});
  case DType::i64:
    return f(std::integral_constant<DType, DType::i64>{});
  case DType::i32:
    return f(std::integral_constant<DType, DType::i32>{});
  case DType::i1:
    return f(std::integral_constant<DType, DType::i1>{});
  }
}

/// Whether `d` is one of the DType values (a plan or file can carry any byte).
inline bool validDtype(DType d) {
  return static_cast<uint8_t>(d) <= static_cast<uint8_t>(DType::i1);
}

inline Status unsupportedDtype(const char *op, DType dtype) {
  if (dtype == DType::bf16 || dtype == DType::f16)
    return fail(op, std::string(op) + " on " + dtypeName(dtype) +
                        " is not supported by the CPU backend yet");
  return fail(op, std::string("dtype ") + dtypeName(dtype) + " is not supported");
}

/// Checks that `t` has exactly `shape` ("input x has shape [2] but ... expects [3]").
inline Status expectShape(const char *op, const char *what, const TensorRef &t,
                          std::span<const int64_t> shape) {
  if (!sameShape(t.shape, shape))
    return fail(op, std::string(what) + " has shape " + shapeString(t.shape) + ", expected " +
                        shapeString(shape));
  return Status::ok();
}

inline Status expectDtype(const char *op, const char *what, const TensorRef &t, DType dtype) {
  if (t.dtype != dtype)
    return fail(op,
                std::string(what) + " is " + dtypeName(t.dtype) + ", expected " + dtypeName(dtype));
  return Status::ok();
}

/// Calls f(T{}) with T = float or double for f32/f64; anything else is an error.
template <typename F> Status dispatchFloat(const char *op, DType dtype, F &&f) {
  switch (dtype) {
  case DType::f32:
    return f(float{});
  case DType::f64:
    return f(double{});
  default:
    return unsupportedDtype(op, dtype);
  }
}

/// f32 f64 i64 i32.
template <typename F> Status dispatchNumeric(const char *op, DType dtype, F &&f) {
  switch (dtype) {
  case DType::f32:
    return f(float{});
  case DType::f64:
    return f(double{});
  case DType::i64:
    return f(int64_t{});
  case DType::i32:
    return f(int32_t{});
  default:
    return unsupportedDtype(op, dtype);
  }
}

/// Reads an integer index tensor (i64 or i32) element.
inline int64_t loadIndex(const TensorRef &t, int64_t i) {
  return t.dtype == DType::i64 ? t.as<const int64_t>()[i] : t.as<const int32_t>()[i];
}

/// The largest of the n values row[0], row[stride], ... in double, a NaN winning: the shift of a
/// softmax or cross-entropy row (-inf for n == 0).
template <typename T> double rowMax(const T *row, int64_t n, int64_t stride = 1) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double v = static_cast<double>(row[j * stride]);
    if (v > m || v != v)
      m = v;
  }
  return m;
}

inline Status expectIndexDtype(const char *op, const char *what, const TensorRef &t) {
  if (t.dtype != DType::i64 && t.dtype != DType::i32)
    return fail(op, std::string(what) + " must be i64 or i32, not " + dtypeName(t.dtype));
  return Status::ok();
}

/// memcpy/memmove that accept an empty range with null pointers (an empty tensor's data), which
/// the C functions do not. copyBytes also accepts dst == src (a kernel run in place).
inline void copyBytes(void *dst, const void *src, size_t n) {
  if (n && dst != src)
    std::memcpy(dst, src, n);
}
inline void moveBytes(void *dst, const void *src, size_t n) {
  if (n)
    std::memmove(dst, src, n);
}

/// Row-major strides, in elements.
inline std::vector<int64_t> stridesOf(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

/// numpy broadcast of two shapes, or false.
inline bool broadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b,
                            std::vector<int64_t> &out) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

/// Strides (in elements of `unit`) that read `shape`, right-aligned to `target`, with 0 on
/// broadcast dims.
inline std::vector<int64_t> broadcastStrides(std::span<const int64_t> shape,
                                             std::span<const int64_t> target, int64_t unit) {
  std::vector<int64_t> strides(target.size(), 0);
  int64_t s = unit;
  for (size_t i = shape.size(); i-- > 0;) {
    size_t d = target.size() - shape.size() + i;
    strides[d] = shape[i] == 1 ? 0 : s;
    s *= shape[i];
  }
  return strides;
}

/// Copies elements of `elemSize` bytes: dst is row-major over `shape`, and the source element
/// for index (i0, i1, ...) sits at src + base + sum(i_d * srcStrides[d]) (in elements, any
/// sign). The innermost dim runs as a tight loop.
void stridedCopy(size_t elemSize, std::span<const int64_t> shape,
                 std::span<const int64_t> srcStrides, const uint8_t *src, int64_t base,
                 uint8_t *dst);

} // namespace megac::runtime::cpu::detail
