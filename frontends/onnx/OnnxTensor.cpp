// Decoding ONNX TensorProtos: into constant tensors (for folding), and into host tensors for
// weights, copying raw_data straight into the weight's bytes.
#include "frontends/onnx/OnnxGraph.h"

#include "mlir/IR/Diagnostics.h"

#include <cstring>

using namespace mlir;

namespace megac::onnx_import {

namespace {

/// Bytes per element in raw_data, or 0 for types with no fixed size.
size_t rawSize(ElemType t) {
  switch (t) {
  case ElemType::f32:
  case ElemType::i32:
  case ElemType::u32:
    return 4;
  case ElemType::f64:
  case ElemType::i64:
  case ElemType::u64:
  case ElemType::complex64:
    return 8;
  case ElemType::complex128:
    return 16;
  case ElemType::f16:
  case ElemType::bf16:
  case ElemType::i16:
  case ElemType::u16:
    return 2;
  case ElemType::u8:
  case ElemType::i8:
  case ElemType::boolean:
    return 1;
  default:
    return 0;
  }
}

template <typename T> T load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

LogicalResult countMismatch(Location loc, const std::string &what, const char *field, int have,
                            int64_t want, const Shape &shape) {
  return emitError(loc) << what << ": " << field << " has " << have << " values, but shape "
                        << shapeStr(shape) << " needs " << want;
}

/// Checks shared by both decoders: known type, dims >= 0, not external, and as many values
/// (raw bytes or typed field entries) as the dims need.
LogicalResult checkHeader(const onnx::TensorProto &t, Location loc, const std::string &what,
                          Shape &shape, int64_t &count) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.external_data_size() > 0)
    return emitError(loc) << what
                          << " stores its data in an external file, which is not supported; "
                             "export the model as one .onnx file";
  if (t.has_segment())
    return emitError(loc) << what << " is segmented, which is not supported";
  if (!isKnownElemType(t.data_type()) || t.data_type() == int(ElemType::undefined))
    return emitError(loc) << what << " has unknown element type " << t.data_type();
  ElemType type = ElemType(t.data_type());
  if (type == ElemType::string || type == ElemType::complex64 || type == ElemType::complex128)
    return emitError(loc) << what << " has element type " << elemTypeName(t.data_type())
                          << ", which the importer does not support";
  shape.assign(t.dims().begin(), t.dims().end());
  count = checkedNumElements(shape);
  if (count < 0)
    return emitError(loc) << what << " has an invalid shape " << shapeStr(shape);
  if (t.has_raw_data()) {
    size_t want = size_t(count) * rawSize(type);
    if (t.raw_data().size() != want)
      return emitError(loc) << what << ": raw_data has " << t.raw_data().size()
                            << " bytes, but shape " << shapeStr(shape) << " of "
                            << elemTypeName(t.data_type()) << " needs " << want;
    return success();
  }
  // Without raw_data the values are in the typed field for the element type.
  const char *field = "int32_data"; // int32, int16, int8, uint16, uint8, bool, float16, bfloat16
  int have = t.int32_data_size();
  if (type == ElemType::f32) {
    field = "float_data";
    have = t.float_data_size();
  } else if (type == ElemType::f64) {
    field = "double_data";
    have = t.double_data_size();
  } else if (type == ElemType::i64) {
    field = "int64_data";
    have = t.int64_data_size();
  } else if (type == ElemType::u32 || type == ElemType::u64) {
    field = "uint64_data";
    have = t.uint64_data_size();
  }
  if (have != count)
    return countMismatch(loc, what, field, have, count, shape);
  return success();
}

} // namespace

LogicalResult checkTensor(const onnx::TensorProto &t, Location loc, const std::string &what) {
  Shape shape;
  int64_t count = 0;
  return checkHeader(t, loc, what, shape, count);
}

FailureOr<ConstTensor> decodeTensor(const onnx::TensorProto &t, Location loc,
                                    const std::string &what) {
  Shape shape;
  int64_t count = 0;
  if (failed(checkHeader(t, loc, what, shape, count)))
    return failure();
  if (count > kMaxFoldElements)
    return emitError(loc) << what << " has " << count << " elements, too many to use as a constant";
  ElemType type = ElemType(t.data_type());
  ConstTensor c = ConstTensor::zeros(type, shape);
  if (t.has_raw_data()) {
    const char *p = t.raw_data().data();
    size_t step = rawSize(type);
    for (int64_t i = 0; i < count; ++i, p += step) {
      switch (type) {
      case ElemType::f32:
        c.floats[i] = load<float>(p);
        break;
      case ElemType::f64:
        c.floats[i] = load<double>(p);
        break;
      case ElemType::f16:
        c.floats[i] = halfToFloat(load<uint16_t>(p));
        break;
      case ElemType::bf16:
        c.floats[i] = bf16ToFloat(load<uint16_t>(p));
        break;
      case ElemType::i64:
      case ElemType::u64:
        c.ints[i] = load<int64_t>(p);
        break;
      case ElemType::i32:
        c.ints[i] = load<int32_t>(p);
        break;
      case ElemType::u32:
        c.ints[i] = load<uint32_t>(p);
        break;
      case ElemType::i16:
        c.ints[i] = load<int16_t>(p);
        break;
      case ElemType::u16:
        c.ints[i] = load<uint16_t>(p);
        break;
      case ElemType::i8:
        c.ints[i] = load<int8_t>(p);
        break;
      case ElemType::u8:
        c.ints[i] = load<uint8_t>(p);
        break;
      case ElemType::boolean:
        c.ints[i] = load<uint8_t>(p) != 0;
        break;
      default:
        break;
      }
    }
    return c;
  }
  switch (type) {
  case ElemType::f32:
    for (int64_t i = 0; i < count; ++i)
      c.floats[i] = t.float_data(int(i));
    break;
  case ElemType::f64:
    for (int64_t i = 0; i < count; ++i)
      c.floats[i] = t.double_data(int(i));
    break;
  case ElemType::f16:
  case ElemType::bf16:
    for (int64_t i = 0; i < count; ++i) {
      auto bits = uint16_t(t.int32_data(int(i)));
      c.floats[i] = type == ElemType::f16 ? halfToFloat(bits) : bf16ToFloat(bits);
    }
    break;
  case ElemType::i64:
    for (int64_t i = 0; i < count; ++i)
      c.ints[i] = t.int64_data(int(i));
    break;
  case ElemType::u32:
  case ElemType::u64:
    for (int64_t i = 0; i < count; ++i)
      c.ints[i] = wrapToType(type, int64_t(t.uint64_data(int(i))));
    break;
  default: // int32, int16, int8, uint16, uint8, bool live in int32_data
    for (int64_t i = 0; i < count; ++i)
      c.ints[i] = wrapToType(type, t.int32_data(int(i)));
    break;
  }
  return c;
}

FailureOr<HostTensor> decodeWeight(onnx::TensorProto &t, Location loc) {
  std::string what = "initializer '" + t.name() + "'";
  Shape shape;
  int64_t count = 0;
  if (failed(checkHeader(t, loc, what, shape, count)))
    return failure();
  ElemType type = ElemType(t.data_type());
  HostTensor h;
  h.shape = shape;
  switch (type) {
  case ElemType::f32:
    h.dtype = DType::f32;
    break;
  case ElemType::f64:
    h.dtype = DType::f64;
    break;
  case ElemType::f16:
    h.dtype = DType::f16;
    break;
  case ElemType::bf16:
    h.dtype = DType::bf16;
    break;
  default:
    return emitError(loc) << what << " is a weight but has element type "
                          << elemTypeName(t.data_type());
  }
  size_t elem = rawSize(type);
  if (t.has_raw_data()) {
    // The bulk of a model: one copy, no per-element work; the proto's copy is freed.
    h.bytes.assign(t.raw_data().begin(), t.raw_data().end());
    std::string().swap(*t.mutable_raw_data());
    return h;
  }
  h.bytes.resize(size_t(count) * elem);
  if (h.bytes.empty())
    return h;
  if (type == ElemType::f32) {
    std::memcpy(h.bytes.data(), t.float_data().data(), h.bytes.size());
  } else if (type == ElemType::f64) {
    std::memcpy(h.bytes.data(), t.double_data().data(), h.bytes.size());
  } else {
    for (int64_t i = 0; i < count; ++i) {
      auto bits = uint16_t(t.int32_data(int(i)));
      std::memcpy(h.bytes.data() + 2 * i, &bits, 2);
    }
  }
  return h;
}

} // namespace megac::onnx_import
