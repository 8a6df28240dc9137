// Shape rules of the mega ops, in plain C++.
#include "ir/ShapeRules.h"

#include <algorithm>
#include <sstream>

namespace mega::shape {

std::string str(Dims shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t numElements(Dims shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

Result broadcast(Dims a, Dims b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return Result::fail("shapes " + str(a) + " and " + str(b) + " do not broadcast (dim " +
                          std::to_string(i) + ": " + std::to_string(da) + " vs " +
                          std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return {out, {}};
}

std::string checkBroadcastsTo(Dims from, Dims to) {
  if (from.size() > to.size())
    return "cannot broadcast " + str(from) + " to lower rank " + str(to);
  size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[i + offset])
      return "cannot broadcast " + str(from) + " to " + str(to) + " (dim " + std::to_string(i) +
             " is " + std::to_string(from[i]) + ", not 1 or " + std::to_string(to[i + offset]) +
             ")";
  return {};
}

Result matmul(Dims lhs, Dims rhs) {
  if (lhs.size() < 2 || rhs.size() < 2)
    return Result::fail("matmul operands need rank >= 2, got " + str(lhs) + " and " + str(rhs));
  int64_t k = lhs.back(), k2 = rhs[rhs.size() - 2];
  if (k != k2)
    return Result::fail("matmul contraction dims differ: " + str(lhs) + " has k = " +
                        std::to_string(k) + ", " + str(rhs) + " has k = " + std::to_string(k2));
  Result batch = broadcast(lhs.subspan(0, lhs.size() - 2), rhs.subspan(0, rhs.size() - 2));
  if (!batch.ok())
    return Result::fail("matmul batch dims: " + batch.error);
  batch.shape.push_back(lhs[lhs.size() - 2]);
  batch.shape.push_back(rhs.back());
  return batch;
}

Result gather(Dims data, Dims indices, int64_t axis) {
  auto a = normalizeAxis(axis, data.size());
  if (!a)
    return Result::fail("gather axis " + std::to_string(axis) + " is out of range for " +
                        str(data));
  Shape out(data.begin(), data.begin() + *a);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + *a + 1, data.end());
  return {out, {}};
}

Result reduce(Dims input, Dims axes, bool keepDims) {
  if (axes.empty())
    return Result::fail("reduce needs at least one axis");
  std::vector<bool> reduced(input.size(), false);
  for (int64_t axis : axes) {
    auto a = normalizeAxis(axis, input.size());
    if (!a)
      return Result::fail("reduce axis " + std::to_string(axis) + " is out of range for " +
                          str(input));
    if (reduced[*a])
      return Result::fail("reduce axis " + std::to_string(axis) + " is listed twice");
    reduced[*a] = true;
  }
  Shape out;
  for (size_t i = 0; i < input.size(); ++i) {
    if (!reduced[i])
      out.push_back(input[i]);
    else if (keepDims)
      out.push_back(1);
  }
  return {out, {}};
}

Result transpose(Dims input, Dims perm) {
  if (perm.size() != input.size())
    return Result::fail("transpose permutation " + str(perm) + " has " +
                        std::to_string(perm.size()) + " entries for rank " +
                        std::to_string(input.size()));
  std::vector<bool> seen(input.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)input.size() || seen[p])
      return Result::fail("transpose permutation " + str(perm) + " is not a permutation of 0.." +
                          std::to_string(input.size() - 1));
    seen[p] = true;
    out.push_back(input[p]);
  }
  return {out, {}};
}

Result slice(Dims input, Dims starts, Dims limits, Dims strides) {
  size_t rank = input.size();
  if (starts.size() != rank || limits.size() != rank || strides.size() != rank)
    return Result::fail("slice starts/limits/strides need " + std::to_string(rank) +
                        " entries each for " + str(input));
  Shape out;
  for (size_t d = 0; d < rank; ++d) {
    if (strides[d] < 1)
      return Result::fail("slice stride " + std::to_string(strides[d]) + " on dim " +
                          std::to_string(d) + " must be >= 1");
    if (starts[d] < 0 || starts[d] > limits[d] || limits[d] > input[d])
      return Result::fail("slice dim " + std::to_string(d) + " needs 0 <= start (" +
                          std::to_string(starts[d]) + ") <= limit (" + std::to_string(limits[d]) +
                          ") <= size (" + std::to_string(input[d]) + ")");
    // ceil((limit - start) / stride), without overflowing for huge strides.
    out.push_back(limits[d] == starts[d] ? 0 : (limits[d] - starts[d] - 1) / strides[d] + 1);
  }
  return {out, {}};
}

Result concat(const std::vector<Shape> &inputs, int64_t axis) {
  if (inputs.empty())
    return Result::fail("concat needs at least one input");
  const Shape &first = inputs.front();
  auto a = normalizeAxis(axis, first.size());
  if (!a)
    return Result::fail("concat axis " + std::to_string(axis) + " is out of range for " +
                        str(first));
  Shape out = first;
  out[*a] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape &s = inputs[i];
    if (s.size() != first.size())
      return Result::fail("concat input " + std::to_string(i) + " " + str(s) +
                          " has another rank than " + str(first));
    for (size_t d = 0; d < s.size(); ++d)
      if ((int64_t)d != *a && s[d] != first[d])
        return Result::fail("concat input " + std::to_string(i) + " " + str(s) + " differs from " +
                            str(first) + " on dim " + std::to_string(d) +
                            ", which is not the concat axis");
    out[*a] += s[*a];
  }
  return {out, {}};
}

Result pad(Dims input, Dims low, Dims high, Dims interior) {
  size_t rank = input.size();
  if (low.size() != rank || high.size() != rank || interior.size() != rank)
    return Result::fail("pad low/high/interior need " + std::to_string(rank) +
                        " entries each for " + str(input));
  Shape out;
  for (size_t d = 0; d < rank; ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      return Result::fail("pad amounts on dim " + std::to_string(d) + " must be >= 0");
    int64_t gaps = input[d] > 0 ? input[d] - 1 : 0;
    out.push_back(low[d] + high[d] + input[d] + gaps * interior[d]);
  }
  return {out, {}};
}

Result linear(Dims input, Dims weight, std::optional<Shape> bias) {
  if (input.empty())
    return Result::fail("linear input must have rank >= 1");
  if (weight.size() != 2)
    return Result::fail("linear weight must be [out, in], got " + str(weight));
  if (weight[1] != input.back())
    return Result::fail("linear weight " + str(weight) +
                        " expects in = " + std::to_string(weight[1]) + " but the input " +
                        str(input) + " has last dim " + std::to_string(input.back()));
  if (bias && (bias->size() != 1 || (*bias)[0] != weight[0]))
    return Result::fail("linear bias " + str(*bias) + " must be [" + std::to_string(weight[0]) +
                        "] to match weight " + str(weight));
  Shape out(input.begin(), input.end());
  out.back() = weight[0];
  return {out, {}};
}

Result embedding(Dims table, Dims ids) {
  if (table.size() != 2)
    return Result::fail("embedding table must be [vocab, hidden], got " + str(table));
  Shape out(ids.begin(), ids.end());
  out.push_back(table[1]);
  return {out, {}};
}

std::string checkNormParams(const char *op, Dims input, Dims weight, std::optional<Shape> bias) {
  if (input.empty())
    return std::string(op) + " input must have rank >= 1";
  Shape expected{input.back()};
  if (weight.size() != 1 || weight[0] != input.back())
    return std::string(op) + " weight " + str(weight) + " must be " + str(expected) +
           " to match the last dim of " + str(input);
  if (bias && (bias->size() != 1 || (*bias)[0] != input.back()))
    return std::string(op) + " bias " + str(*bias) + " must be " + str(expected) +
           " to match the last dim of " + str(input);
  return {};
}

std::string checkRope(Dims input, Dims cos, Dims sin) {
  if (input.empty() || input.back() % 2 != 0)
    return "rope input " + str(input) + " must end in an even head dim (it rotates halves)";
  if (cos.size() != sin.size() || !std::equal(cos.begin(), cos.end(), sin.begin()))
    return "rope cos " + str(cos) + " and sin " + str(sin) + " must have one shape";
  if (cos.empty() || cos.back() != input.back())
    return "rope tables " + str(cos) + " must end in the input's head dim " +
           std::to_string(input.back());
  std::string why = checkBroadcastsTo(cos, input);
  return why.empty() ? why : "rope tables: " + why;
}

Result attention(Dims q, Dims k, Dims v, std::optional<Shape> mask) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return Result::fail("attention query/key/value must be [batch, seq, heads, head_dim], got " +
                        str(q) + ", " + str(k) + ", " + str(v));
  if (k[0] != q[0] || v[0] != q[0])
    return Result::fail("attention batch sizes differ: query " + str(q) + ", key " + str(k) +
                        ", value " + str(v));
  if (k[1] != v[1] || k[2] != v[2])
    return Result::fail("attention key " + str(k) + " and value " + str(v) +
                        " differ in sequence length or heads");
  if (k[3] != q[3])
    return Result::fail("attention query " + str(q) + " and key " + str(k) + " differ in head_dim");
  if (k[2] < 1 || q[2] % k[2] != 0)
    return Result::fail("attention key/value heads (" + std::to_string(k[2]) +
                        ") must divide query heads (" + std::to_string(q[2]) + ")");
  if (mask) {
    Shape scores{q[0], q[2], q[1], k[1]};
    std::string why = checkBroadcastsTo(*mask, scores);
    if (!why.empty())
      return Result::fail("attention mask must broadcast to [batch, heads, seq, kv_seq] = " +
                          str(scores) + ": " + why);
  }
  return {{q[0], q[1], q[2], v[3]}, {}};
}

std::string checkAttentionPositions(Dims q, Dims k, std::optional<Shape> queryPositions,
                                    std::optional<Shape> keyPositions, bool mask, bool causal) {
  if (!queryPositions && !keyPositions)
    return {};
  if (!queryPositions || !keyPositions)
    return "attention takes query and key positions together (both or neither)";
  if (causal)
    return "attention positions are causal masking by global position: give them instead of "
           "`causal`, not with it";
  if (q.size() != 4 || k.size() != 4)
    return {}; // attention() reports the ranks
  if (*queryPositions != Shape{q[1]} || *keyPositions != Shape{k[1]})
    return "attention positions must be [seq] = [" + std::to_string(q[1]) + "] and [kv_seq] = [" +
           std::to_string(k[1]) + "], got " + str(*queryPositions) + " and " + str(*keyPositions);
  return {};
}

Result crossEntropy(Dims logits, Dims labels) {
  if (logits.empty())
    return Result::fail("cross_entropy logits must have rank >= 1");
  if (labels.size() + 1 != logits.size() ||
      !std::equal(labels.begin(), labels.end(), logits.begin()))
    return Result::fail("cross_entropy labels " + str(labels) + " must be the logits " +
                        str(logits) + " without the vocab dim");
  return {Shape(labels.begin(), labels.end()), {}};
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

namespace {

/// Why `weights` is not [t..., E] for the tokens `tokens` (empty when it is).
std::string checkRouting(const char *op, Dims tokens, Dims weights) {
  if (weights.size() != tokens.size() + 1 || !std::equal(tokens.begin(), tokens.end(),
                                                          weights.begin()))
    return std::string(op) + " routing weights " + str(weights) + " must be [tokens..., experts]" +
           " with the tokens " + str(tokens);
  return {};
}

/// Why `routed` is not [E, t..., h] for the routing weights [t..., E] (empty when it is).
std::string checkRouted(const char *op, Dims routed, Dims weights) {
  if (routed.size() != weights.size() + 1 || routed[0] != weights.back() ||
      !std::equal(weights.begin(), weights.end() - 1, routed.begin() + 1))
    return std::string(op) + " input " + str(routed) +
           " must be [experts, tokens..., features] for the routing weights " + str(weights);
  return {};
}

} // namespace

Result moeDispatch(Dims input, Dims weights) {
  if (input.size() < 2)
    return Result::fail("moe_dispatch input must be [tokens..., hidden], got " + str(input));
  if (std::string e = checkRouting("moe_dispatch", input.first(input.size() - 1), weights);
      !e.empty())
    return Result::fail(e);
  Shape out{weights.back()};
  out.insert(out.end(), input.begin(), input.end());
  return {out, {}};
}

Result moeCombine(Dims input, Dims weights) {
  if (weights.size() < 2)
    return Result::fail("moe_combine routing weights must be [tokens..., experts], got " +
                        str(weights));
  if (std::string e = checkRouted("moe_combine", input, weights); !e.empty())
    return Result::fail(e);
  return {Shape(input.begin() + 1, input.end()), {}};
}

Result moeMatmul(Dims input, Dims weight, Dims weights, bool transposeWeight) {
  if (weights.size() < 2)
    return Result::fail("moe_matmul routing weights must be [tokens..., experts], got " +
                        str(weights));
  if (std::string e = checkRouted("moe_matmul", input, weights); !e.empty())
    return Result::fail(e);
  int64_t in = transposeWeight ? 1 : 2, out = transposeWeight ? 2 : 1;
  if (weight.size() != 3 || weight[0] != input[0] || weight[in] != input.back())
    return Result::fail("moe_matmul weight " + str(weight) + " must be [" +
                        std::to_string(input[0]) + (transposeWeight ? ", in, out" : ", out, in") +
                        "] with in = " + std::to_string(input.back()) + " for the input " +
                        str(input));
  Shape result(input.begin(), input.end());
  result.back() = weight[out];
  return {result, {}};
}

Result moeRowDot(Dims input, Dims other, Dims weights) {
  if (weights.size() < 2)
    return Result::fail("moe_row_dot routing weights must be [tokens..., experts], got " +
                        str(weights));
  if (std::string e = checkRouted("moe_row_dot", input, weights); !e.empty())
    return Result::fail(e);
  if (!std::equal(other.begin(), other.end(), input.begin() + 1, input.end()))
    return Result::fail("moe_row_dot other " + str(other) + " must be [tokens..., features] of " +
                        "the input " + str(input));
  return {Shape(weights.begin(), weights.end()), {}};
}

Result moeMatmulWeightGrad(Dims lhs, Dims rhs, Dims weights) {
  if (weights.size() < 2)
    return Result::fail("moe_matmul_weight_grad routing weights must be [tokens..., experts], "
                        "got " + str(weights));
  for (Dims side : {lhs, rhs})
    if (std::string e = checkRouted("moe_matmul_weight_grad", side, weights); !e.empty())
      return Result::fail(e);
  return {Shape{lhs[0], lhs.back(), rhs.back()}, {}};
}

} // namespace mega::shape
