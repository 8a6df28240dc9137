// The mixture-of-experts block of transformers' MixtralSparseMoeBlock, as torch.onnx exports it
// (a per-expert loop over NonZero, whose shape depends on the data), recognised on the ONNX graph
// at its router's TopK and replaced by mega's MoE ops (topk_mask, moe_dispatch, moe_matmul,
// moe_combine) before any of its nodes is imported.
//
// The block (its pattern is in OnnxMoeMatcher.h) raises to (m the 0/1 choice, gates the
// renormalised probabilities of the chosen experts):
//
//   m = topk_mask(p, k); gates = p*m / reduce_sum(p*m, -1, keepdims) (or p*m)
//   X = moe_dispatch(x, m); g = moe_matmul(X, W1, m); u = moe_matmul(X, W3, m)
//   out = moe_combine(moe_matmul(silu(g) * u, W2, m), gates)
//
// with W1 = concat of the E experts' W1_e reshaped to [1, ffn, h] (the experts stay separate
// parameters; folded weights stack to [E, h, ffn] with transpose_weight).
#include "frontends/onnx/OnnxMoeMatcher.h"
#include "frontends/onnx/OnnxOps.h"

#include "ir/MegaOps.h"

#include "mlir/IR/Diagnostics.h"

#include <algorithm>

using namespace mlir;

namespace megac::onnx_import {

namespace {

/// The experts' weights stacked (each stays its own parameter): [E, out, in], or [E, in, out]
/// with `transposed` (moe_matmul's transpose_weight) when every expert's is stored transposed.
struct Stacked {
  Value weight;
  bool transposed;
};

FailureOr<Stacked> stackWeights(GraphImporter &g, NodeContext &c, const MoeBlock &block,
                                MoeWeight MoeExpert::*which) {
  bool transposed =
      llvm::all_of(block.expert, [&](const MoeExpert &e) { return (e.*which).transposed; });
  Type elem;
  SmallVector<Value> parts;
  Shape one;
  for (const MoeExpert &e : block.expert) {
    const std::string &name = (e.*which).name;
    auto w = g.materializeValue(g.values.at(name), c.loc(), name);
    if (failed(w))
      return failure();
    Type t = mlir::cast<RankedTensorType>(w->getType()).getElementType();
    if (elem && t != elem)
      return c.fail("expert weight '" + name + "' has another element type than the others");
    elem = t;
    Value v = (e.*which).transposed && !transposed ? c.transpose(*w, {1, 0}) : *w;
    auto shape = mlir::cast<RankedTensorType>(v.getType()).getShape();
    one = {1, shape[0], shape[1]};
    parts.push_back(c.reshape(v, one));
  }
  auto type = RankedTensorType::get({int64_t(parts.size()), one[1], one[2]}, elem);
  Value w =
      mega::ConcatOp::create(c.builder(), c.loc(), type, parts, c.builder().getI64IntegerAttr(0));
  return Stacked{w, transposed};
}

} // namespace

LogicalResult GraphImporter::importMoeBlock(NodeContext &c, int64_t index) {
  if (index < 0 || index >= graph_.node_size() || &graph_.node(int(index)) != &c.node())
    return c.fail("is supported only as the router of a mixture-of-experts block in the main "
                  "graph, not inside a Loop body");
  MoeMatcher matcher(*this, graph_, int(index), opset_);
  auto block = matcher.match();
  if (failed(block))
    return c.fail("is supported only as the router of a mixture-of-experts block "
                  "(transformers' MixtralSparseMoeBlock); the error above says where this one "
                  "differs");
  auto skip = matcher.region(*block);
  if (failed(skip))
    return failure();

  Location loc = c.loc();
  OpBuilder &b = builder;
  auto x = materializeValue(values.at(block->tokens), loc, block->tokens);
  auto p = materializeValue(values.at(block->probs), loc, block->probs);
  if (failed(x) || failed(p))
    return failure();
  auto xType = mlir::cast<RankedTensorType>(x->getType());
  auto pType = mlir::cast<RankedTensorType>(p->getType());
  int64_t T = xType.getDimSize(0), H = xType.getDimSize(1), E = block->experts, K = block->k;
  Type elem = xType.getElementType();

  // Router: the 0/1 choice and the (renormalised) probabilities of the chosen experts, in the
  // probabilities' type, then cast to the tokens' type (routing_weights.to(hidden.dtype)).
  Value m = mega::TopKMaskOp::create(b, loc, pType, *p, b.getI64IntegerAttr(K));
  Value gates = mega::MulOp::create(b, loc, pType, *p, m);
  if (block->renormalize) {
    Value sum = Emitter{c}.reduce(mega::ReduceKind::sum, gates, {1}, /*keepDims=*/true);
    gates = mega::DivOp::create(b, loc, pType, gates, c.broadcast(sum, {T, E}));
  }
  m = c.cast(m, elemTypeOf(xType));
  gates = c.cast(gates, elemTypeOf(xType));

  // The experts' weights, stacked.
  auto w1 = stackWeights(*this, c, *block, &MoeExpert::w1);
  auto w3 = stackWeights(*this, c, *block, &MoeExpert::w3);
  auto w2 = stackWeights(*this, c, *block, &MoeExpert::w2);
  if (failed(w1) || failed(w3) || failed(w2))
    return failure();
  for (const Stacked *w : {&*w1, &*w3, &*w2})
    if (mlir::cast<RankedTensorType>(w->weight.getType()).getElementType() != elem)
      return c.fail("has expert weights of another element type than the tokens they multiply");
  int64_t F = mlir::cast<RankedTensorType>(w1->weight.getType()).getDimSize(w1->transposed ? 2 : 1);

  auto routed = [&](int64_t d) { return RankedTensorType::get({E, T, d}, elem); };
  // Built from named attributes: moe_matmul's other attributes keep their defaults (all experts
  // local).
  auto grouped = [&](Value in, const Stacked &w, int64_t out) -> Value {
    SmallVector<NamedAttribute> attrs{b.getNamedAttr("topk", b.getI64IntegerAttr(K))};
    if (w.transposed)
      attrs.push_back(b.getNamedAttr("transpose_weight", b.getBoolAttr(true)));
    return mega::MoeMatmulOp::create(b, loc, TypeRange{routed(out)}, ValueRange{in, w.weight, m},
                                     attrs);
  };
  Value dispatched = mega::MoeDispatchOp::create(b, loc, routed(H), *x, m);
  Value g = grouped(dispatched, *w1, F);
  Value u = grouped(dispatched, *w3, F);
  Value a = mega::MulOp::create(b, loc, routed(F), mega::SiluOp::create(b, loc, routed(F), g), u);
  Value y = grouped(a, *w2, H);
  Value out = mega::MoeCombineOp::create(b, loc, xType, y, gates);

  ValueInfo info;
  info.value = out;
  info.type = elemTypeOf(xType);
  info.shape = {T, H};
  values[block->output] = info;
  skipped_.insert(skip->begin(), skip->end());
  return success();
}

} // namespace megac::onnx_import