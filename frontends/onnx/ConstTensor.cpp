// Constant tensors of the ONNX importer: element types and the elementwise folding kernels.
#include "frontends/onnx/ConstTensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace megac::onnx_import {

namespace {

const char *const kTypeNames[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                  "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                  "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                  "COMPLEX128", "BFLOAT16"};

std::string tooBig(const Shape &shape) {
  return "constant of shape " + shapeStr(shape) + " is too large to fold (over " +
         std::to_string(kMaxFoldElements) + " elements)";
}

} // namespace

std::vector<int64_t> rowMajorStrides(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

Folded allocateFolded(ElemType type, const Shape &shape) {
  int64_t n = checkedNumElements(shape);
  if (n < 0 || n > kMaxFoldElements)
    return Folded::fail(tooBig(shape));
  Folded r;
  r.tensor.type = type;
  r.tensor.shape = shape;
  if (isFloatType(type))
    r.tensor.floats.assign(n, 0.0);
  else
    r.tensor.ints.assign(n, 0);
  return r;
}

std::vector<int64_t> broadcastIndex(const Shape &from, const Shape &to) {
  std::vector<int64_t> index(checkedNumElements(to));
  auto fromStrides = rowMajorStrides(from);
  int64_t offset = int64_t(to.size()) - int64_t(from.size());
  forEachPosition(
      to,
      [&](int64_t d, int64_t coord) {
        return d >= offset && from[d - offset] != 1 ? coord * fromStrides[d - offset] : 0;
      },
      [&](int64_t i, int64_t src) { index[i] = src; });
  return index;
}

namespace {

bool sameTypes(const ConstTensor &a, const ConstTensor &b) { return a.type == b.type; }

std::string typeMismatch(const char *op, const ConstTensor &a, const ConstTensor &b) {
  return std::string(op) + ": operand types differ (" + elemTypeName(int(a.type)) + " vs " +
         elemTypeName(int(b.type)) + ")";
}

double applyUnary(UnaryFn fn, double x) {
  switch (fn) {
  case UnaryFn::neg:
    return -x;
  case UnaryFn::abs:
    return std::fabs(x);
  case UnaryFn::exp:
    return std::exp(x);
  case UnaryFn::log:
    return std::log(x);
  case UnaryFn::sqrt:
    return std::sqrt(x);
  case UnaryFn::reciprocal:
    return 1.0 / x;
  case UnaryFn::tanh:
    return std::tanh(x);
  case UnaryFn::erf:
    return std::erf(x);
  case UnaryFn::sigmoid:
    return 1.0 / (1.0 + std::exp(-x));
  case UnaryFn::relu:
    return x > 0 ? x : 0.0;
  case UnaryFn::floor:
    return std::floor(x);
  case UnaryFn::ceil:
    return std::ceil(x);
  case UnaryFn::round:
    return std::nearbyint(x); // ONNX Round: half to even, the default rounding mode
  case UnaryFn::sign:
    return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
  case UnaryFn::sin:
    return std::sin(x);
  case UnaryFn::cos:
    return std::cos(x);
  case UnaryFn::identity:
    return x;
  }
  return x;
}

double applyBinary(BinaryFn fn, double a, double b) {
  switch (fn) {
  case BinaryFn::add:
    return a + b;
  case BinaryFn::sub:
    return a - b;
  case BinaryFn::mul:
    return a * b;
  case BinaryFn::div:
    return a / b;
  case BinaryFn::pow:
    return std::pow(a, b);
  case BinaryFn::min:
    return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
  case BinaryFn::max:
    return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
  case BinaryFn::fmod:
    return std::fmod(a, b);
  case BinaryFn::mod: {
    double r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
  }
  return a;
}

/// Integer arithmetic in 64 bits with wrap-around (via unsigned), then wrapped to the type.
/// Returns false for division by zero.
bool applyIntBinary(BinaryFn fn, int64_t a, int64_t b, int64_t &out) {
  auto ua = uint64_t(a), ub = uint64_t(b);
  switch (fn) {
  case BinaryFn::add:
    out = int64_t(ua + ub);
    return true;
  case BinaryFn::sub:
    out = int64_t(ua - ub);
    return true;
  case BinaryFn::mul:
    out = int64_t(ua * ub);
    return true;
  case BinaryFn::div:
    if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1))
      return false;
    out = a / b; // truncates toward zero, like C and ONNX's reference
    return true;
  case BinaryFn::pow: {
    if (b < 0) {
      out = (a == 1) ? 1 : (a == -1) ? ((b % 2) ? -1 : 1) : 0;
      return true;
    }
    uint64_t result = 1, base = ua;
    for (int64_t e = b; e > 0; e >>= 1) {
      if (e & 1)
        result *= base;
      base *= base;
    }
    out = int64_t(result);
    return true;
  }
  case BinaryFn::min:
    out = std::min(a, b);
    return true;
  case BinaryFn::max:
    out = std::max(a, b);
    return true;
  case BinaryFn::fmod:
  case BinaryFn::mod:
    if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1))
      return false;
    out = a % b;
    if (fn == BinaryFn::mod && out != 0 && ((out < 0) != (b < 0)))
      out += b;
    return true;
  }
  return false;
}

} // namespace

std::string elemTypeName(int type) {
  if (isKnownElemType(type))
    return kTypeNames[type];
  return "type " + std::to_string(type);
}
bool isKnownElemType(int type) { return type >= 0 && type <= 16; }

bool isFloatType(ElemType t) {
  return t == ElemType::f32 || t == ElemType::f64 || t == ElemType::f16 || t == ElemType::bf16;
}
bool isIntegerOrBool(ElemType t) {
  switch (t) {
  case ElemType::u8:
  case ElemType::i8:
  case ElemType::u16:
  case ElemType::i16:
  case ElemType::i32:
  case ElemType::i64:
  case ElemType::u32:
  case ElemType::u64:
  case ElemType::boolean:
    return true;
  default:
    return false;
  }
}
bool isMegaElemType(ElemType t) {
  return isFloatType(t) || t == ElemType::i64 || t == ElemType::i32 || t == ElemType::boolean;
}

double roundToType(ElemType t, double x) {
  switch (t) {
  case ElemType::f32:
    return double(float(x));
  case ElemType::f16:
    return double(halfToFloat(floatToHalf(float(x))));
  case ElemType::bf16:
    return double(bf16ToFloat(floatToBf16(float(x))));
  default:
    return x;
  }
}

int64_t wrapToType(ElemType t, int64_t x) {
  switch (t) {
  case ElemType::u8:
    return int64_t(uint8_t(x));
  case ElemType::i8:
    return int64_t(int8_t(x));
  case ElemType::u16:
    return int64_t(uint16_t(x));
  case ElemType::i16:
    return int64_t(int16_t(x));
  case ElemType::i32:
    return int64_t(int32_t(x));
  case ElemType::u32:
    return int64_t(uint32_t(x));
  case ElemType::boolean:
    return x != 0;
  default:
    return x;
  }
}

int64_t ConstTensor::numElements() const { return checkedNumElements(shape); }

bool ConstTensor::isSplat() const {
  if (isFloat()) {
    if (floats.empty())
      return false;
    for (double v : floats)
      if (!(v == floats[0]) && !(std::isnan(v) && std::isnan(floats[0])))
        return false;
    return true;
  }
  return !ints.empty() &&
         std::all_of(ints.begin(), ints.end(), [&](int64_t v) { return v == ints[0]; });
}

ConstTensor ConstTensor::zeros(ElemType type, Shape shape) {
  ConstTensor t;
  t.type = type;
  int64_t n = checkedNumElements(shape);
  t.shape = std::move(shape);
  if (isFloatType(type))
    t.floats.assign(std::max<int64_t>(n, 0), 0.0);
  else
    t.ints.assign(std::max<int64_t>(n, 0), 0);
  return t;
}

ConstTensor ConstTensor::fromInts(ElemType type, Shape shape, std::vector<int64_t> values) {
  ConstTensor t;
  t.type = type;
  t.shape = std::move(shape);
  t.ints = std::move(values);
  return t;
}

ConstTensor ConstTensor::fromFloats(ElemType type, Shape shape, std::vector<double> values) {
  ConstTensor t;
  t.type = type;
  t.shape = std::move(shape);
  for (double &v : values)
    v = roundToType(type, v);
  t.floats = std::move(values);
  return t;
}

int64_t checkedNumElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > (std::numeric_limits<int64_t>::max() / 4) / d)
      return -1;
    n *= d;
  }
  return n;
}

std::string shapeStr(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Folded cast(const ConstTensor &x, ElemType to) {
  Folded r = allocateFolded(to, x.shape);
  if (!r.ok())
    return r;
  int64_t n = x.numElements();
  for (int64_t i = 0; i < n; ++i) {
    if (isFloatType(to)) {
      r.tensor.floats[i] = roundToType(to, x.getDouble(i));
    } else if (x.isFloat()) {
      double v = x.floats[i];
      if (to == ElemType::boolean) {
        r.tensor.ints[i] = v != 0;
      } else {
        // Out-of-range and NaN conversions are undefined in C++; saturate them.
        if (std::isnan(v))
          v = 0;
        v = std::clamp(v, -9.2233720368547758e18, 9.2233720368547748e18);
        r.tensor.ints[i] = wrapToType(to, int64_t(v));
      }
    } else {
      r.tensor.ints[i] = wrapToType(to, x.ints[i]);
    }
  }
  return r;
}

Folded unary(UnaryFn fn, const ConstTensor &x) {
  Folded r = allocateFolded(x.type, x.shape);
  if (!r.ok())
    return r;
  int64_t n = x.numElements();
  if (x.isFloat()) {
    for (int64_t i = 0; i < n; ++i)
      r.tensor.floats[i] = roundToType(x.type, applyUnary(fn, x.floats[i]));
    return r;
  }
  if (x.type == ElemType::boolean && fn != UnaryFn::identity)
    return Folded::fail("cannot fold this op on BOOL");
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = x.ints[i];
    switch (fn) {
    case UnaryFn::neg:
      v = int64_t(0 - uint64_t(v));
      break;
    case UnaryFn::abs:
      v = v < 0 ? int64_t(0 - uint64_t(v)) : v;
      break;
    case UnaryFn::relu:
      v = std::max<int64_t>(v, 0);
      break;
    case UnaryFn::sign:
      v = (v > 0) - (v < 0);
      break;
    case UnaryFn::floor:
    case UnaryFn::ceil:
    case UnaryFn::round:
    case UnaryFn::identity:
      break;
    default:
      return Folded::fail("cannot fold this op on integer tensors");
    }
    r.tensor.ints[i] = wrapToType(x.type, v);
  }
  return r;
}

namespace {

/// Allocates `r` (of `type`, at a's and b's broadcast shape) and each of its elements' source
/// indices in a and b; false, with r holding the error, when the shapes do not broadcast or the
/// result is too large to fold.
bool broadcastPair(const ConstTensor &a, const ConstTensor &b, ElemType type, Folded &r,
                   std::vector<int64_t> &ia, std::vector<int64_t> &ib) {
  auto shape = broadcastShapes(a.shape, b.shape);
  if (!shape) {
    r = Folded::fail("shapes " + shapeStr(a.shape) + " and " + shapeStr(b.shape) +
                     " do not broadcast");
    return false;
  }
  r = allocateFolded(type, *shape);
  if (!r.ok())
    return false;
  ia = broadcastIndex(a.shape, *shape);
  ib = broadcastIndex(b.shape, *shape);
  return true;
}

} // namespace

Folded binary(BinaryFn fn, const ConstTensor &a, const ConstTensor &b) {
  if (!sameTypes(a, b) && !(fn == BinaryFn::pow && a.isFloat()))
    return Folded::fail(typeMismatch("binary op", a, b));
  Folded r;
  std::vector<int64_t> ia, ib;
  if (!broadcastPair(a, b, a.type, r, ia, ib))
    return r;
  int64_t n = int64_t(ia.size());
  if (a.isFloat()) {
    for (int64_t i = 0; i < n; ++i)
      r.tensor.floats[i] =
          roundToType(a.type, applyBinary(fn, a.floats[ia[i]], b.getDouble(ib[i])));
    return r;
  }
  if (a.type == ElemType::boolean)
    return Folded::fail("arithmetic on BOOL tensors is not defined");
  for (int64_t i = 0; i < n; ++i) {
    int64_t v;
    if (!applyIntBinary(fn, a.ints[ia[i]], b.ints[ib[i]], v))
      return Folded::fail("integer division by zero");
    r.tensor.ints[i] = wrapToType(a.type, v);
  }
  return r;
}

Folded compare(CompareFn fn, const ConstTensor &a, const ConstTensor &b) {
  if (!sameTypes(a, b))
    return Folded::fail(typeMismatch("comparison", a, b));
  Folded r;
  std::vector<int64_t> ia, ib;
  if (!broadcastPair(a, b, ElemType::boolean, r, ia, ib))
    return r;
  for (size_t i = 0; i < ia.size(); ++i) {
    bool v;
    auto cmp = [&](auto x, auto y) {
      switch (fn) {
      case CompareFn::eq:
        return x == y;
      case CompareFn::lt:
        return x < y;
      case CompareFn::le:
        return x <= y;
      case CompareFn::gt:
        return x > y;
      case CompareFn::ge:
        return x >= y;
      }
      return false;
    };
    if (a.isFloat())
      v = cmp(a.floats[ia[i]], b.floats[ib[i]]);
    else
      v = cmp(a.ints[ia[i]], b.ints[ib[i]]);
    r.tensor.ints[i] = v;
  }
  return r;
}

Folded logical(LogicFn fn, const ConstTensor &a, const ConstTensor &b) {
  if (a.type != ElemType::boolean || b.type != ElemType::boolean)
    return Folded::fail("logical ops take BOOL tensors");
  Folded r;
  std::vector<int64_t> ia, ib;
  if (!broadcastPair(a, b, ElemType::boolean, r, ia, ib))
    return r;
  for (size_t i = 0; i < ia.size(); ++i) {
    bool x = a.ints[ia[i]] != 0, y = b.ints[ib[i]] != 0;
    r.tensor.ints[i] = fn == LogicFn::land ? (x && y) : fn == LogicFn::lor ? (x || y) : (x != y);
  }
  return r;
}

Folded logicalNot(const ConstTensor &x) {
  if (x.type != ElemType::boolean)
    return Folded::fail("Not takes a BOOL tensor");
  Folded r = allocateFolded(ElemType::boolean, x.shape);
  if (!r.ok())
    return r;
  for (size_t i = 0; i < x.ints.size(); ++i)
    r.tensor.ints[i] = x.ints[i] == 0;
  return r;
}

Folded where(const ConstTensor &cond, const ConstTensor &a, const ConstTensor &b) {
  if (cond.type != ElemType::boolean)
    return Folded::fail("Where's condition must be BOOL");
  if (!sameTypes(a, b))
    return Folded::fail(typeMismatch("Where", a, b));
  auto ab = broadcastShapes(a.shape, b.shape);
  auto shape = ab ? broadcastShapes(cond.shape, *ab) : std::nullopt;
  if (!shape)
    return Folded::fail("Where's operand shapes do not broadcast");
  Folded r = allocateFolded(a.type, *shape);
  if (!r.ok())
    return r;
  auto ic = broadcastIndex(cond.shape, *shape), ia = broadcastIndex(a.shape, *shape),
       ib = broadcastIndex(b.shape, *shape);
  for (size_t i = 0; i < ic.size(); ++i) {
    bool c = cond.ints[ic[i]] != 0;
    if (a.isFloat())
      r.tensor.floats[i] = c ? a.floats[ia[i]] : b.floats[ib[i]];
    else
      r.tensor.ints[i] = c ? a.ints[ia[i]] : b.ints[ib[i]];
  }
  return r;
}

} // namespace megac::onnx_import
