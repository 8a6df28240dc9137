// Checked arithmetic for sizes read from files and command lines: an element count or byte size
// that overflows, or a tensor larger than any host holds, is an error, never a wrapped value.
#pragma once

#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <span>

namespace megac {

/// The most bytes one tensor read from a file or built from a stored shape may hold (1 TiB): a
/// larger shape is a corrupt or hostile size field, refused before anything is allocated.
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 40;

/// a*b, a+b; nullopt when the result does not fit int64_t.
std::optional<int64_t> checkedMul(int64_t a, int64_t b);
std::optional<int64_t> checkedAdd(int64_t a, int64_t b);

/// The product of `shape` (1 for a scalar); an error for a negative dimension or a product past
/// int64_t.
StatusOr<int64_t> checkedNumElements(std::span<const int64_t> shape);

/// numElements(shape) * elementSize; an error when that overflows or exceeds `limit` bytes.
StatusOr<uint64_t> checkedByteSize(std::span<const int64_t> shape, size_t elementSize,
                                   uint64_t limit = kMaxTensorBytes);

/// HostTensor::zeros for a shape not built by megac itself (a file's, a command line's): the
/// size is checked first, so a huge or overflowing shape is an error rather than a crash.
StatusOr<HostTensor> checkedZeros(DType dtype, std::span<const int64_t> shape);

} // namespace megac
