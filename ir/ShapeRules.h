// Shape rules of the mega ops, in plain C++: shared by the op verifiers and the graph DSL.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mega::shape {

using Shape = std::vector<int64_t>;
using Dims = std::span<const int64_t>;

/// A result shape, or why there is none (a message without location, naming the op).
struct Result {
  Shape shape;
  std::string error;
  bool ok() const { return error.empty(); }
  static Result fail(std::string message) { return {{}, std::move(message)}; }
};

/// "[2, 8, 64]".
std::string str(Dims shape);
int64_t numElements(Dims shape);
/// Maps a possibly negative axis into [0, rank), or nullopt when out of range.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);

/// numpy broadcasting of two shapes.
Result broadcast(Dims a, Dims b);
/// Empty when `from` broadcasts to `to` (aligned from the right), else why not.
std::string checkBroadcastsTo(Dims from, Dims to);

Result matmul(Dims lhs, Dims rhs);
Result gather(Dims data, Dims indices, int64_t axis);
Result reduce(Dims input, Dims axes, bool keepDims);
Result transpose(Dims input, Dims perm);
Result slice(Dims input, Dims starts, Dims limits, Dims strides);
Result concat(const std::vector<Shape> &inputs, int64_t axis);
Result pad(Dims input, Dims low, Dims high, Dims interior);

Result linear(Dims input, Dims weight, std::optional<Shape> bias);
Result embedding(Dims table, Dims ids);
/// Empty when `weight` (and `bias`) fit a norm over the last dim of `input`.
std::string checkNormParams(const char *op, Dims input, Dims weight, std::optional<Shape> bias);
Result attention(Dims query, Dims key, Dims value, std::optional<Shape> mask);
/// Why attention's position operands are malformed (empty when fine): query positions [s] and
/// key positions [t] for query [b, s, h, d] and key [b, t, hk, d], both or neither, and never
/// with `causal` (they are causal masking by global positions); a mask may come with them.
std::string checkAttentionPositions(Dims query, Dims key, std::optional<Shape> queryPositions,
                                    std::optional<Shape> keyPositions, bool mask, bool causal);
/// Why `rope(input, cos, sin)` is malformed (empty when it is fine): input [..., d] with d even,
/// cos and sin of one shape that broadcasts to the input's and ends in d.
std::string checkRope(Dims input, Dims cos, Dims sin);
Result crossEntropy(Dims logits, Dims labels);

// Mixture of experts (ir/MegaMoeOps.td): tokens t... are leading dims, routing weights [t..., E],
// routed tensors [E, t..., h].
/// moe_dispatch(input [t..., h], weights [t..., E]) -> [E, t..., h].
Result moeDispatch(Dims input, Dims weights);
/// moe_combine(input [E, t..., h], weights [t..., E]) -> [t..., h].
Result moeCombine(Dims input, Dims weights);
/// moe_matmul(input [E, t..., in], weight [E, out, in] (transposed: [E, in, out]), weights)
/// -> [E, t..., out].
Result moeMatmul(Dims input, Dims weight, Dims weights, bool transposeWeight);
/// moe_row_dot(input [E, t..., h], other [t..., h], weights [t..., E]) -> [t..., E].
Result moeRowDot(Dims input, Dims other, Dims weights);
/// moe_matmul_weight_grad(lhs [E, t..., p], rhs [E, t..., q], weights) -> [E, p, q].
Result moeMatmulWeightGrad(Dims lhs, Dims rhs, Dims weights);

} // namespace mega::shape
