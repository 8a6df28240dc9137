// Row-major index arithmetic of the ONNX element-indexing ops (GatherElements, ScatterElements)
// and of ops along one axis, shared by the ONNX importer's folding kernels and the CPU kernels.
#pragma once

#include <cstdint>
#include <span>

namespace megac {

/// A row-major shape seen as [outer, dim, inner] around one axis.
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};
/// The split of `shape` at `axis` (in [0, rank)).
inline AxisSplit splitAtAxis(std::span<const int64_t> shape, int64_t axis) {
  AxisSplit s;
  s.dim = shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    s.outer *= shape[d];
  for (int64_t d = axis + 1; d < int64_t(shape.size()); ++d)
    s.inner *= shape[d];
  return s;
}

/// The offset in data (strides `strides`) of element j of a row-major index tensor of shape
/// `ishape`, with its coordinate along `axis` replaced by `idx`.
inline int64_t elementOffset(std::span<const int64_t> ishape, std::span<const int64_t> strides,
                             int64_t j, int64_t axis, int64_t idx) {
  int64_t offset = 0;
  for (int64_t d = int64_t(ishape.size()) - 1; d >= 0; --d) {
    int64_t c = j % ishape[d];
    j /= ishape[d];
    offset += (d == axis ? idx : c) * strides[d];
  }
  return offset;
}

} // namespace megac
