// Folding kernels of the ONNX importer: ONNX op semantics on constant tensors, in plain C++.
#include "frontends/onnx/ConstTensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace megac::onnx_import {

namespace {

const char *const kTypeNames[] = {"UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",
                                  "INT16",     "INT32",  "INT64",     "STRING",     "BOOL",
                                  "FLOAT16",   "DOUBLE", "UINT32",    "UINT64",     "COMPLEX64",
                                  "COMPLEX128", "BFLOAT16"};

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

std::string tooBig(const Shape &shape) {
  return "constant of shape " + shapeStr(shape) + " is too large to fold (over " +
         std::to_string(kMaxFoldElements) + " elements)";
}

/// An empty tensor of `type` and `shape` with storage for its elements, or an error.
Folded allocate(ElemType type, const Shape &shape) {
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

/// For each element of the broadcast result, the flat index into `from` (shape aligned right).
std::vector<int64_t> broadcastIndex(const Shape &from, const Shape &to) {
  int64_t n = checkedNumElements(to);
  std::vector<int64_t> index(n);
  auto toStrides = stridesOf(to);
  auto fromStrides = stridesOf(from);
  size_t offset = to.size() - from.size();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, src = 0;
    for (size_t d = 0; d < to.size(); ++d) {
      int64_t coord = rest / toStrides[d];
      rest %= toStrides[d];
      if (d >= offset && from[d - offset] != 1)
        src += coord * fromStrides[d - offset];
    }
    index[i] = src;
  }
  return index;
}

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

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) // inf or nan
    return uint16_t(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) // rounds to >= 65520: overflow to inf
    return uint16_t(sign | 0x7c00);
  if (absx < 0x38800000) { // subnormal or zero in half
    float a;
    std::memcpy(&a, &absx, 4);
    // Scale so the half subnormal unit (2^-24) becomes 1, round to nearest even.
    return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t mant = absx & 0x7fffff;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half;
  return uint16_t(sign | half);
}

float bf16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000)
    return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
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
  return !ints.empty() && std::all_of(ints.begin(), ints.end(), [&](int64_t v) {
    return v == ints[0];
  });
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

std::string normalizeSlice(int64_t dim, int64_t start, int64_t end, int64_t step, SliceDim &out) {
  if (step == 0)
    return "slice step must not be 0";
  step = std::max(step, -std::numeric_limits<int64_t>::max());
  // ONNX Slice: negative indices count from the end, then clamp (INT64 extremes mean "to the
  // end" in exports).
  if (start < 0)
    start = start < -dim ? -dim - 1 : start + dim;
  if (end < 0)
    end = end < -dim ? -dim - 1 : end + dim;
  int64_t count = 0;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    if (end > start)
      count = (end - start - 1) / step + 1;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    if (dim > 0 && start > end)
      count = (start - end - 1) / (-step) + 1;
  }
  out = {start, step, count};
  return {};
}

Folded cast(const ConstTensor &x, ElemType to) {
  Folded r = allocate(to, x.shape);
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
  Folded r = allocate(x.type, x.shape);
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

Folded binary(BinaryFn fn, const ConstTensor &a, const ConstTensor &b) {
  if (!sameTypes(a, b) && !(fn == BinaryFn::pow && a.isFloat()))
    return Folded::fail(typeMismatch("binary op", a, b));
  auto shape = broadcastShapes(a.shape, b.shape);
  if (!shape)
    return Folded::fail("shapes " + shapeStr(a.shape) + " and " + shapeStr(b.shape) +
                        " do not broadcast");
  Folded r = allocate(a.type, *shape);
  if (!r.ok())
    return r;
  auto ia = broadcastIndex(a.shape, *shape), ib = broadcastIndex(b.shape, *shape);
  int64_t n = int64_t(ia.size());
  if (a.isFloat()) {
    for (int64_t i = 0; i < n; ++i)
      r.tensor.floats[i] = roundToType(a.type, applyBinary(fn, a.floats[ia[i]], b.getDouble(ib[i])));
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
  auto shape = broadcastShapes(a.shape, b.shape);
  if (!shape)
    return Folded::fail("shapes " + shapeStr(a.shape) + " and " + shapeStr(b.shape) +
                        " do not broadcast");
  Folded r = allocate(ElemType::boolean, *shape);
  if (!r.ok())
    return r;
  auto ia = broadcastIndex(a.shape, *shape), ib = broadcastIndex(b.shape, *shape);
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
  auto shape = broadcastShapes(a.shape, b.shape);
  if (!shape)
    return Folded::fail("shapes " + shapeStr(a.shape) + " and " + shapeStr(b.shape) +
                        " do not broadcast");
  Folded r = allocate(ElemType::boolean, *shape);
  if (!r.ok())
    return r;
  auto ia = broadcastIndex(a.shape, *shape), ib = broadcastIndex(b.shape, *shape);
  for (size_t i = 0; i < ia.size(); ++i) {
    bool x = a.ints[ia[i]] != 0, y = b.ints[ib[i]] != 0;
    r.tensor.ints[i] = fn == LogicFn::land ? (x && y) : fn == LogicFn::lor ? (x || y) : (x != y);
  }
  return r;
}

Folded logicalNot(const ConstTensor &x) {
  if (x.type != ElemType::boolean)
    return Folded::fail("Not takes a BOOL tensor");
  Folded r = allocate(ElemType::boolean, x.shape);
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
  Folded r = allocate(a.type, *shape);
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

Folded reshape(const ConstTensor &x, const Shape &shape) {
  if (checkedNumElements(shape) != x.numElements())
    return Folded::fail("cannot reshape " + shapeStr(x.shape) + " to " + shapeStr(shape));
  Folded r{x, {}};
  r.tensor.shape = shape;
  return r;
}

Folded expand(const ConstTensor &x, const Shape &shape) {
  if (x.rank() > int64_t(shape.size()))
    return Folded::fail("cannot broadcast " + shapeStr(x.shape) + " to " + shapeStr(shape));
  for (size_t i = 0; i < x.shape.size(); ++i) {
    int64_t d = x.shape[i], t = shape[shape.size() - x.shape.size() + i];
    if (d != t && d != 1)
      return Folded::fail("cannot broadcast " + shapeStr(x.shape) + " to " + shapeStr(shape));
  }
  Folded r = allocate(x.type, shape);
  if (!r.ok())
    return r;
  auto index = broadcastIndex(x.shape, shape);
  for (size_t i = 0; i < index.size(); ++i) {
    if (x.isFloat())
      r.tensor.floats[i] = x.floats[index[i]];
    else
      r.tensor.ints[i] = x.ints[index[i]];
  }
  return r;
}

Folded transpose(const ConstTensor &x, const std::vector<int64_t> &perm) {
  int64_t rank = x.rank();
  if (int64_t(perm.size()) != rank)
    return Folded::fail("perm has " + std::to_string(perm.size()) + " entries for rank " +
                        std::to_string(rank));
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return Folded::fail("perm is not a permutation of the dims");
    seen[p] = true;
  }
  Shape outShape(rank);
  for (int64_t d = 0; d < rank; ++d)
    outShape[d] = x.shape[perm[d]];
  Folded r = allocate(x.type, outShape);
  if (!r.ok())
    return r;
  auto inStrides = stridesOf(x.shape), outStrides = stridesOf(outShape);
  int64_t n = x.numElements();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, src = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t coord = rest / outStrides[d];
      rest %= outStrides[d];
      src += coord * inStrides[perm[d]];
    }
    if (x.isFloat())
      r.tensor.floats[i] = x.floats[src];
    else
      r.tensor.ints[i] = x.ints[src];
  }
  return r;
}

Folded slice(const ConstTensor &x, const std::vector<SliceDim> &dims) {
  int64_t rank = x.rank();
  if (int64_t(dims.size()) != rank)
    return Folded::fail("slice: one entry per dim expected");
  Shape outShape(rank);
  for (int64_t d = 0; d < rank; ++d)
    outShape[d] = dims[d].count;
  Folded r = allocate(x.type, outShape);
  if (!r.ok())
    return r;
  auto inStrides = stridesOf(x.shape), outStrides = stridesOf(outShape);
  int64_t n = checkedNumElements(outShape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, src = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t coord = rest / outStrides[d];
      rest %= outStrides[d];
      src += (dims[d].start + coord * dims[d].step) * inStrides[d];
    }
    if (x.isFloat())
      r.tensor.floats[i] = x.floats[src];
    else
      r.tensor.ints[i] = x.ints[src];
  }
  return r;
}

Folded gather(const ConstTensor &data, const ConstTensor &indices, int64_t axis) {
  int64_t rank = data.rank();
  if (axis < -rank || axis >= rank)
    return Folded::fail("Gather axis " + std::to_string(axis) + " is out of range for rank " +
                        std::to_string(rank));
  if (axis < 0)
    axis += rank;
  if (indices.isFloat() || indices.type == ElemType::boolean)
    return Folded::fail("Gather indices must be integers");
  Shape outShape(data.shape.begin(), data.shape.begin() + axis);
  outShape.insert(outShape.end(), indices.shape.begin(), indices.shape.end());
  outShape.insert(outShape.end(), data.shape.begin() + axis + 1, data.shape.end());
  Folded r = allocate(data.type, outShape);
  if (!r.ok())
    return r;
  int64_t outer = 1, inner = 1, dim = data.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= data.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= data.shape[d];
  int64_t count = indices.numElements();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      int64_t idx = indices.ints[k];
      if (idx < -dim || idx >= dim)
        return Folded::fail("Gather index " + std::to_string(idx) + " is out of range for dim " +
                            std::to_string(axis) + " of size " + std::to_string(dim));
      if (idx < 0)
        idx += dim;
      for (int64_t j = 0; j < inner; ++j) {
        int64_t dst = (o * count + k) * inner + j, src = (o * dim + idx) * inner + j;
        if (data.isFloat())
          r.tensor.floats[dst] = data.floats[src];
        else
          r.tensor.ints[dst] = data.ints[src];
      }
    }
  return r;
}

Folded concat(const std::vector<const ConstTensor *> &inputs, int64_t axis) {
  if (inputs.empty())
    return Folded::fail("Concat needs at least one input");
  const ConstTensor &first = *inputs.front();
  int64_t rank = first.rank();
  if (axis < -rank || axis >= rank)
    return Folded::fail("Concat axis " + std::to_string(axis) + " is out of range for rank " +
                        std::to_string(rank));
  if (axis < 0)
    axis += rank;
  Shape outShape = first.shape;
  outShape[axis] = 0;
  for (const ConstTensor *t : inputs) {
    if (t->type != first.type || t->rank() != rank)
      return Folded::fail("Concat inputs differ in type or rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t->shape[d] != first.shape[d])
        return Folded::fail("Concat inputs differ in dim " + std::to_string(d));
    outShape[axis] += t->shape[axis];
  }
  Folded r = allocate(first.type, outShape);
  if (!r.ok())
    return r;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= outShape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= outShape[d];
  int64_t dst = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *t : inputs) {
      int64_t chunk = t->shape[axis] * inner;
      for (int64_t j = 0; j < chunk; ++j, ++dst) {
        if (first.isFloat())
          r.tensor.floats[dst] = t->floats[o * chunk + j];
        else
          r.tensor.ints[dst] = t->ints[o * chunk + j];
      }
    }
  return r;
}

Folded tile(const ConstTensor &x, const std::vector<int64_t> &repeats) {
  if (int64_t(repeats.size()) != x.rank())
    return Folded::fail("Tile needs one repeat count per dim");
  Shape outShape = x.shape;
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0)
      return Folded::fail("Tile repeats must be >= 0");
    if (repeats[d] > 0 && outShape[d] > kMaxFoldElements / repeats[d])
      return Folded::fail(tooBig(outShape));
    outShape[d] *= repeats[d];
  }
  Folded r = allocate(x.type, outShape);
  if (!r.ok())
    return r;
  auto inStrides = stridesOf(x.shape), outStrides = stridesOf(outShape);
  int64_t n = checkedNumElements(outShape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, src = 0;
    for (int64_t d = 0; d < x.rank(); ++d) {
      int64_t coord = rest / outStrides[d];
      rest %= outStrides[d];
      src += (coord % x.shape[d]) * inStrides[d];
    }
    if (x.isFloat())
      r.tensor.floats[i] = x.floats[src];
    else
      r.tensor.ints[i] = x.ints[src];
  }
  return r;
}

Folded range(ElemType type, double start, double limit, double delta) {
  if (delta == 0 || std::isnan(delta) || std::isnan(start) || std::isnan(limit))
    return Folded::fail("Range delta must be non-zero and the bounds numbers");
  double count = std::ceil((limit - start) / delta);
  if (!(count <= double(kMaxFoldElements)))
    return Folded::fail("Range would have more than " + std::to_string(kMaxFoldElements) +
                        " elements");
  int64_t n = std::max<int64_t>(int64_t(count), 0);
  Folded r = allocate(type, {n});
  if (!r.ok())
    return r;
  for (int64_t i = 0; i < n; ++i) {
    if (isFloatType(type))
      r.tensor.floats[i] = roundToType(type, start + double(i) * delta);
    else
      r.tensor.ints[i] = wrapToType(type, int64_t(start) + i * int64_t(delta));
  }
  return r;
}

Folded trilu(const ConstTensor &x, int64_t k, bool upper) {
  if (x.rank() < 2)
    return Folded::fail("Trilu needs a tensor of rank >= 2");
  Folded r{x, {}};
  int64_t rows = x.shape[x.rank() - 2], cols = x.shape.back();
  int64_t n = x.numElements();
  for (int64_t i = 0; i < n; ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? (col - row >= k) : (col - row <= k);
    if (!keep) {
      if (x.isFloat())
        r.tensor.floats[i] = 0;
      else
        r.tensor.ints[i] = 0;
    }
  }
  return r;
}

Folded reduce(ReduceFn fn, const ConstTensor &x, const std::vector<int64_t> &axes,
              bool keepDims) {
  int64_t rank = x.rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) {
    if (a < 0 || a >= rank || reduced[a])
      return Folded::fail("reduction axes must be unique and in range");
    reduced[a] = true;
  }
  Shape kept = x.shape;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d])
      kept[d] = 1;
  if (x.numElements() == 0 && (fn == ReduceFn::max || fn == ReduceFn::min))
    return Folded::fail("cannot fold a max/min reduction over an empty tensor");
  Folded r = allocate(x.type, kept);
  if (!r.ok())
    return r;
  int64_t outN = checkedNumElements(kept);
  std::vector<double> accF(outN, fn == ReduceFn::prod ? 1.0 : 0.0);
  std::vector<int64_t> accI(outN, fn == ReduceFn::prod ? 1 : 0);
  std::vector<bool> started(outN, false);
  auto inStrides = stridesOf(x.shape), outStrides = stridesOf(kept);
  int64_t n = x.numElements();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, dst = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t coord = rest / inStrides[d];
      rest %= inStrides[d];
      if (!reduced[d])
        dst += coord * outStrides[d];
    }
    if (x.isFloat()) {
      double v = x.floats[i];
      double &a = accF[dst];
      if (fn == ReduceFn::sum || fn == ReduceFn::mean)
        a += v;
      else if (fn == ReduceFn::prod)
        a *= v;
      else if (!started[dst])
        a = v;
      else
        a = fn == ReduceFn::max ? std::max(a, v) : std::min(a, v);
    } else {
      int64_t v = x.ints[i];
      int64_t &a = accI[dst];
      if (fn == ReduceFn::sum || fn == ReduceFn::mean)
        a = int64_t(uint64_t(a) + uint64_t(v));
      else if (fn == ReduceFn::prod)
        a = int64_t(uint64_t(a) * uint64_t(v));
      else if (!started[dst])
        a = v;
      else
        a = fn == ReduceFn::max ? std::max(a, v) : std::min(a, v);
    }
    started[dst] = true;
  }
  int64_t count = outN ? n / outN : 0;
  for (int64_t j = 0; j < outN; ++j) {
    if (x.isFloat())
      r.tensor.floats[j] =
          roundToType(x.type, fn == ReduceFn::mean ? accF[j] / double(count) : accF[j]);
    else
      r.tensor.ints[j] = wrapToType(x.type, fn == ReduceFn::mean && count ? accI[j] / count
                                                                          : accI[j]);
  }
  if (!keepDims) {
    Shape squeezed;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        squeezed.push_back(x.shape[d]);
    r.tensor.shape = squeezed;
  }
  return r;
}

Folded argReduce(bool isMax, const ConstTensor &x, int64_t axis, bool keepDims, bool selectLast) {
  int64_t rank = x.rank();
  if (axis < -rank || axis >= rank)
    return Folded::fail("axis out of range");
  if (axis < 0)
    axis += rank;
  if (x.shape[axis] == 0)
    return Folded::fail("cannot take the arg max/min of an empty dim");
  Shape kept = x.shape;
  kept[axis] = 1;
  Folded r = allocate(ElemType::i64, kept);
  if (!r.ok())
    return r;
  int64_t outer = 1, inner = 1, dim = x.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      double bestValue = x.getDouble(o * dim * inner + j);
      for (int64_t k = 1; k < dim; ++k) {
        double v = x.getDouble((o * dim + k) * inner + j);
        bool better = isMax ? (selectLast ? v >= bestValue : v > bestValue)
                            : (selectLast ? v <= bestValue : v < bestValue);
        if (better) {
          best = k;
          bestValue = v;
        }
      }
      r.tensor.ints[o * inner + j] = best;
    }
  if (!keepDims)
    r.tensor.shape.erase(r.tensor.shape.begin() + axis);
  return r;
}

} // namespace megac::onnx_import
