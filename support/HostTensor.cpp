// Element sizes and names of the runtime's dtypes, and the HostTensor helpers.
#include "support/HostTensor.h"

#include "support/DTypeName.h"
#include "support/Float16.h"

#include <cmath>

namespace megac {

size_t dtypeSize(DType dtype) { return dtypeSizeOr(dtype, 0); }

const char *dtypeName(DType dtype) { return dtypeNameOr(dtype, "<invalid dtype>"); }

int64_t countNonFinite(const HostTensor &tensor) {
  int64_t n = tensor.numElements(), bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    switch (tensor.dtype) {
    case DType::f64:
      bad += !std::isfinite(tensor.data<double>()[i]);
      break;
    case DType::f32:
      bad += !std::isfinite(tensor.data<float>()[i]);
      break;
    case DType::bf16:
      bad += !std::isfinite(bf16ToFloat(tensor.data<uint16_t>()[i]));
      break;
    case DType::f16:
      bad += !std::isfinite(halfToFloat(tensor.data<uint16_t>()[i]));
      break;
    default:
      return 0;
    }
  }
  return bad;
}

std::string shapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<size_t>(t.numElements()) * dtypeSize(dtype), 0);
  return t;
}

} // namespace megac
