// Constant tensors the ONNX importer evaluates in C++ (shape arithmetic, masks, folded
// subgraphs), and the kernels that fold ONNX ops on them. MLIR-free and protobuf-free.
#pragma once

#include "support/Float16.h" // halfToFloat, floatToHalf, bf16ToFloat, floatToBf16

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::onnx_import {

/// ONNX TensorProto.DataType, by value.
enum class ElemType : int {
  undefined = 0,
  f32 = 1,
  u8 = 2,
  i8 = 3,
  u16 = 4,
  i16 = 5,
  i32 = 6,
  i64 = 7,
  string = 8,
  boolean = 9,
  f16 = 10,
  f64 = 11,
  u32 = 12,
  u64 = 13,
  complex64 = 14,
  complex128 = 15,
  bf16 = 16,
};

/// "FLOAT", "INT64", ... (ONNX's names), or "type 42" for values outside the enum.
std::string elemTypeName(int type);
bool isKnownElemType(int type);
bool isFloatType(ElemType t);
/// Integers and bool: held in ConstTensor::ints.
bool isIntegerOrBool(ElemType t);
/// The element types the mega IR has: FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT64, INT32, BOOL.
bool isMegaElemType(ElemType t);
/// Rounds `x` to the precision of float type `t` (f32, f16, bf16; f64 unchanged).
double roundToType(ElemType t, double x);
/// Wraps an integer into the range of integer type `t` (two's complement), bool to 0/1.
int64_t wrapToType(ElemType t, int64_t x);

using Shape = std::vector<int64_t>;

/// A dense row-major tensor. Float types keep their values in `floats` (already rounded to
/// the type's precision), integer and bool types in `ints`.
struct ConstTensor {
  ElemType type = ElemType::f32;
  Shape shape;
  std::vector<double> floats;
  std::vector<int64_t> ints;

  bool isFloat() const { return isFloatType(type); }
  int64_t numElements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  double getDouble(int64_t i) const { return isFloat() ? floats[i] : double(ints[i]); }
  int64_t getInt(int64_t i) const { return isFloat() ? int64_t(floats[i]) : ints[i]; }
  /// True when every element equals the first (and there is at least one).
  bool isSplat() const;

  static ConstTensor zeros(ElemType type, Shape shape);
  static ConstTensor fromInts(ElemType type, Shape shape, std::vector<int64_t> values);
  static ConstTensor fromFloats(ElemType type, Shape shape, std::vector<double> values);
};

/// A folded tensor, or why it could not be folded (a message without location).
struct Folded {
  ConstTensor tensor;
  std::string error;
  bool ok() const { return error.empty(); }
  static Folded fail(std::string message) { return {{}, std::move(message)}; }
};

/// Tensors past this many elements are not folded (a folded subgraph that big is a bug or
/// an attack, not shape arithmetic).
inline constexpr int64_t kMaxFoldElements = int64_t(1) << 26;

/// Row-major strides of `shape`.
std::vector<int64_t> rowMajorStrides(const Shape &shape);
/// An empty tensor of `type` and `shape` with storage for its elements, or an error when it
/// is too large to fold.
Folded allocateFolded(ElemType type, const Shape &shape);
/// For each element of `to`, the flat index of its source in `from` (numpy broadcasting,
/// shapes aligned right).
std::vector<int64_t> broadcastIndex(const Shape &from, const Shape &to);

/// Product of dims, or -1 if a dim is negative or the product overflows kMaxFoldElements^2.
int64_t checkedNumElements(const Shape &shape);
/// "[2, 8, 64]".
std::string shapeStr(const Shape &shape);

/// Calls visit(i, flat) for each row-major position i of `shape`, where flat is the sum over its
/// dims d of term(d, coord) (coord: the position's coordinate along d), a flat index elsewhere.
template <typename TermFn, typename VisitFn>
void forEachPosition(const Shape &shape, TermFn term, VisitFn visit) {
  auto strides = rowMajorStrides(shape);
  int64_t n = checkedNumElements(shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, flat = 0;
    for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
      int64_t coord = rest / strides[d];
      rest %= strides[d];
      flat += term(d, coord);
    }
    visit(i, flat);
  }
}
/// numpy broadcasting, or nullopt.
std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b);

enum class UnaryFn {
  neg,
  abs,
  exp,
  log,
  sqrt,
  reciprocal,
  tanh,
  erf,
  sigmoid,
  relu,
  floor,
  ceil,
  round,
  sign,
  sin,
  cos,
  identity
};
enum class BinaryFn { add, sub, mul, div, pow, min, max, mod, fmod };
enum class CompareFn { eq, lt, le, gt, ge };
enum class LogicFn { land, lor, lxor };
enum class ReduceFn { sum, mean, max, min, prod };

Folded cast(const ConstTensor &x, ElemType to);
Folded unary(UnaryFn fn, const ConstTensor &x);
Folded binary(BinaryFn fn, const ConstTensor &a, const ConstTensor &b);
Folded compare(CompareFn fn, const ConstTensor &a, const ConstTensor &b);
Folded logical(LogicFn fn, const ConstTensor &a, const ConstTensor &b);
Folded logicalNot(const ConstTensor &x);
Folded where(const ConstTensor &cond, const ConstTensor &a, const ConstTensor &b);
Folded reshape(const ConstTensor &x, const Shape &shape);
Folded expand(const ConstTensor &x, const Shape &shape);
Folded transpose(const ConstTensor &x, const std::vector<int64_t> &perm);
/// Normalized ONNX Slice: one entry per dim (start in range, step != 0, `count` elements).
struct SliceDim {
  int64_t start = 0, step = 1, count = 0;
};
Folded slice(const ConstTensor &x, const std::vector<SliceDim> &dims);
Folded gather(const ConstTensor &data, const ConstTensor &indices, int64_t axis);
Folded concat(const std::vector<const ConstTensor *> &inputs, int64_t axis);
Folded tile(const ConstTensor &x, const std::vector<int64_t> &repeats);
Folded range(ElemType type, double start, double limit, double delta);
Folded trilu(const ConstTensor &x, int64_t k, bool upper);
/// numpy matmul: [..., m, k] x [..., k, n] with broadcast batch dims (a 1-d operand is a row or
/// column, its dim dropped from the result); float types, accumulated in double and rounded once.
Folded matmul(const ConstTensor &a, const ConstTensor &b);
/// Reduces over `axes` (normalized, unique).
Folded reduce(ReduceFn fn, const ConstTensor &x, const std::vector<int64_t> &axes, bool keepDims);
Folded argReduce(bool isMax, const ConstTensor &x, int64_t axis, bool keepDims, bool selectLast);
// Element indexing (ConstIndexKernels.cpp); axes normalized, indices in [-n, n).
Folded cumsum(const ConstTensor &x, int64_t axis, bool exclusive, bool reverse);
Folded gatherElements(const ConstTensor &data, const ConstTensor &indices, int64_t axis);
Folded scatterElements(const ConstTensor &data, const ConstTensor &indices,
                       const ConstTensor &updates, int64_t axis, bool accumulate);
Folded scatterNd(const ConstTensor &data, const ConstTensor &indices, const ConstTensor &updates,
                 bool accumulate);

/// ONNX Slice semantics for one axis of size `dim`: clamps start/end, counts elements.
/// Returns an error message for step 0.
std::string normalizeSlice(int64_t dim, int64_t start, int64_t end, int64_t step, SliceDim &out);

} // namespace megac::onnx_import
