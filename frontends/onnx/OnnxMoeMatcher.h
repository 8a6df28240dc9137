// Internal to frontends/onnx/: MoeMatcher finds transformers' MixtralSparseMoeBlock on the ONNX
// graph at its router's TopK, for GraphImporter::importMoeBlock (OnnxMoe.cpp) to raise.
//
// The pattern (torch 1.13, opsets 14 and 17, eval and training mode; T tokens, E experts, top k;
// `Cast?` is an optional Cast, `a * b` a Mul in either operand order):
//
//   vals, idx = TopK(p [T, E], k, axis -1, largest)                      (the router)
//   G    = Cast?(Div(vals, ReduceSum(vals, axes [-1], keepdims)))        (renormalised; or
//          Cast?(vals) without renormalisation)
//   mask = Transpose(OneHot(idx, depth E, values [0, 1], axis -1), perm [2, 1, 0])   [E, k, T]
//   per expert e (each of 0..E-1 once):
//     slot, tok = Squeeze(Split(Transpose(NonZero(Cast?(Gather(mask, e, axis 0))), [1, 0]),
//                               [1, 1], axis 1), axes [1])                  (torch.where)
//     h  = Reshape(Gather(Unsqueeze(x [T, h], axes [0]), tok, axis 1))
//     y  = MatMul(silu(MatMul(h, Transpose(W1_e))) * MatMul(h, Transpose(W3_e)), Transpose(W2_e))
//          with silu(a) = a * Sigmoid(a), W1_e, W3_e [ffn, h] and W2_e [h, ffn] initializers
//          (constant folding stores them transposed, without the Transpose nodes)
//     r  = Reshape*(Gather(Flatten(Unsqueeze(G, axes [2]), axis 2),
//                          slot + tok * Gather(Shape(Unsqueeze(G, axes [2])), 1), axis 0))
//     z  = Cast?(y * r)
//     s  = ScatterElements(zeros, Expand?(Unsqueeze(tok, axes [1])), Expand?(z), axis 0)
//     acc_e = Add(acc_{e-1}, s), acc_{-1} = zeros              (index_add_; or a ScatterElements
//                                                              with reduction add into acc_{e-1})
//   out  = acc_last [T, h]
//
// Shape arithmetic feeding Reshape/Expand shapes inside the block is dropped with it. Everything
// computed from the routing must end in `out`; a block whose routing is used elsewhere, or whose
// nodes differ from the pattern, is an error naming the node.
#pragma once

#include "frontends/onnx/OnnxGraph.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace megac::onnx_import {

/// An expert's weight: its initializer, stored as nn.Linear's [out, in] (under a Transpose in
/// the graph) or `transposed` as [in, out] (torch.onnx's constant folding transposes it once).
struct MoeWeight {
  std::string name;
  bool transposed = false;
};

/// One matched expert: its three weights, the accumulation step that adds its output (an Add,
/// or a ScatterElements with reduction add), the step's previous accumulator and its result.
struct MoeExpert {
  int64_t index = -1;
  MoeWeight w1, w3, w2;
  int step = -1;
  std::string previous, result;
};

/// What the block computes, and where it ends.
struct MoeBlock {
  std::string tokens, probs; // x [T, h], p [T, E]
  int64_t k = 0, experts = 0;
  bool renormalize = true;
  std::vector<MoeExpert> expert; // by expert index
  std::string output;            // the last accumulator
};

class MoeMatcher {
public:
  MoeMatcher(GraphImporter &g, const onnx::GraphProto &graph, int topk, int64_t opset)
      : g_(g), graph_(graph), topk_(topk), opset_(opset) {
    for (int i = 0; i < graph.node_size(); ++i)
      for (const std::string &out : graph.node(i).output())
        if (!out.empty())
          producer_[out] = i;
    for (int i = 0; i < graph.node_size(); ++i)
      for (const std::string &in : graph.node(i).input())
        if (!in.empty())
          users_[in].push_back(i);
    for (const auto &out : graph.output())
      graphOutputs_.insert(out.name());
  }

  mlir::FailureOr<MoeBlock> match();
  /// The nodes to leave out of the import: the block's region and what only it used.
  mlir::FailureOr<std::set<int>> region(const MoeBlock &block);

private:
  const onnx::NodeProto &node(int i) const { return graph_.node(i); }
  const onnx::NodeProto &topk() const { return node(topk_); }
  /// The producing node of `value`, or -1 (graph inputs, initializers).
  int def(const std::string &value) const {
    auto it = producer_.find(value);
    return it == producer_.end() ? -1 : it->second;
  }
  /// def(value) when it is an `op` node, else -1.
  int defOp(const std::string &value, const char *op) const {
    int d = def(value);
    return d >= 0 && node(d).op_type() == op ? d : -1;
  }
  const std::vector<int> &uses(const std::string &value) const {
    static const std::vector<int> kNone;
    auto it = users_.find(value);
    return it == users_.end() ? kNone : it->second;
  }
  /// The users of `value` that are `op` nodes.
  std::vector<int> usesOp(const std::string &value, const char *op) const {
    std::vector<int> found;
    for (int u : uses(value))
      if (node(u).op_type() == op)
        found.push_back(u);
    return found;
  }

  static const onnx::AttributeProto *attr(const onnx::NodeProto &n, const char *name) {
    for (const auto &a : n.attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  static int64_t attrInt(const onnx::NodeProto &n, const char *name, int64_t fallback) {
    const auto *a = attr(n, name);
    return a ? a->i() : fallback;
  }
  static std::string attrString(const onnx::NodeProto &n, const char *name) {
    const auto *a = attr(n, name);
    return a ? a->s() : std::string();
  }

  /// The value of `name` when it is known at import time: an imported constant, or the output
  /// of a Constant node not imported yet.
  std::optional<ConstTensor> constant(const std::string &name);
  std::optional<std::vector<int64_t>> ints(const std::string &name) {
    auto c = constant(name);
    if (!c || c->isFloat())
      return std::nullopt;
    return c->ints;
  }
  /// The axes of a Squeeze/Unsqueeze/ReduceSum node (input 1 or the attribute, by opset).
  std::optional<std::vector<int64_t>> axes(const onnx::NodeProto &n, int64_t inputSince);
  /// Whether `n` is an Unsqueeze/Squeeze of exactly `axis` (or its negative form for `rank`).
  bool hasAxis(const onnx::NodeProto &n, int64_t axis, int64_t rank);
  bool isZeros(const std::string &value);
  bool isInitializer(const std::string &value) const;

  /// Emits "cannot raise the mixture-of-experts block of TopK node 'K': node 'N' (Op) <why>"
  /// at node `at`.
  mlir::LogicalResult refuse(int at, const mlir::Twine &why);

  mlir::LogicalResult matchRouter(MoeBlock &b);
  mlir::LogicalResult matchExpert(MoeBlock &b, int selector, std::string &gates);
  /// The weight of MatMul `mm`'s input 1: W of `Transpose(W, perm [1, 0])`, or a transposed
  /// initializer; its [out, in] shape checked where `out` >= 0.
  mlir::FailureOr<MoeWeight> linearWeight(int mm, int64_t out, int64_t in);
  mlir::LogicalResult matchWeight(MoeBlock &b, const std::string &r, const std::string &slot,
                                  const std::string &tok, std::string &gates);
  mlir::LogicalResult matchAccumulation(MoeBlock &b);

  GraphImporter &g_;
  const onnx::GraphProto &graph_;
  int topk_;
  int64_t opset_;
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> users_;
  std::set<std::string> graphOutputs_;
  std::map<std::string, ConstTensor> decoded_;
  std::string mask_; // [E, k, T]
  int64_t tokens_ = 0, hidden_ = 0, ffn_ = -1;
};

} // namespace megac::onnx_import
