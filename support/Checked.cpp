// Checked element counts and byte sizes (Checked.h).
#include "support/Checked.h"

#include <cstdio>
#include <string>

namespace megac {

std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out))
    return std::nullopt;
  return out;
}

std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out))
    return std::nullopt;
  return out;
}

StatusOr<int64_t> checkedNumElements(std::span<const int64_t> shape) {
  bool hasZero = false;
  for (int64_t d : shape) {
    if (d < 0)
      return Status::error("shape " + shapeString(shape) + " has a negative dimension");
    hasZero |= d == 0;
  }
  if (hasZero) // the product is 0 even where a partial product would overflow
    return int64_t(0);
  int64_t n = 1;
  for (int64_t d : shape) {
    std::optional<int64_t> next = checkedMul(n, d);
    if (!next)
      return Status::error("shape " + shapeString(shape) +
                           " has more elements than a 64-bit count holds");
    n = *next;
  }
  return n;
}

namespace {

std::string humanBytes(uint64_t bytes) {
  const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double v = double(bytes);
  while (v >= 1024 && u < 6)
    v /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

} // namespace

StatusOr<uint64_t> checkedByteSize(std::span<const int64_t> shape, size_t elementSize,
                                   uint64_t limit) {
  ASSIGN_OR_RETURN(int64_t n, checkedNumElements(shape));
  uint64_t bytes;
  if (__builtin_mul_overflow(uint64_t(n), uint64_t(elementSize), &bytes))
    return Status::error("shape " + shapeString(shape) + " of " + std::to_string(elementSize) +
                         "-byte elements has more bytes than a 64-bit size holds");
  if (bytes > limit)
    return Status::error("shape " + shapeString(shape) + " of " + std::to_string(elementSize) +
                         "-byte elements needs " + humanBytes(bytes) + ", more than the " +
                         humanBytes(limit) + " one tensor may hold");
  return bytes;
}

StatusOr<HostTensor> checkedZeros(DType dtype, std::span<const int64_t> shape) {
  ASSIGN_OR_RETURN(uint64_t bytes, checkedByteSize(shape, dtypeSize(dtype)));
  HostTensor t;
  t.dtype = dtype;
  t.shape.assign(shape.begin(), shape.end());
  t.bytes.assign(size_t(bytes), 0);
  return t;
}

} // namespace megac
