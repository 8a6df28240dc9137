// A tensor in host memory that owns its bytes: what goes in and out of the runtime (inputs,
// outputs, weights), independent of plans and of MLIR.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace megac {

/// Element types, in the plan schema's order (megac.plan.DType has the same values).
enum class DType : uint8_t { f64 = 0, f32, bf16, f16, i64, i32, i1 };

/// Bytes per element (i1 is stored as one byte, 0 or 1).
size_t dtypeSize(DType dtype);
/// "f32", "bf16", ...
const char *dtypeName(DType dtype);
/// "[2, 3]" (a scalar is "[]"), for error messages.
std::string shapeString(std::span<const int64_t> shape);

struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape; // row-major; empty for a scalar
  std::vector<uint8_t> bytes; // numElements() * dtypeSize(dtype), little-endian

  int64_t numElements() const;
  /// A zero-filled tensor.
  static HostTensor zeros(DType dtype, std::vector<int64_t> shape);
  template <typename T> T *data() { return reinterpret_cast<T *>(bytes.data()); }
  template <typename T> const T *data() const { return reinterpret_cast<const T *>(bytes.data()); }
};

/// How many elements of a floating-point tensor are NaN or infinite (0 for integer dtypes).
int64_t countNonFinite(const HostTensor &tensor);

/// Named tensors: weights by parameter name, or a run's outputs.
using TensorMap = std::map<std::string, HostTensor>;

} // namespace megac
