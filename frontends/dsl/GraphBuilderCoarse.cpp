// The graph DSL's coarse ops: linear, embedding, norms, attention, gelu, cumsum, the
// mixture-of-experts ops and cross-entropy, each checked by its ir/ShapeRules rule.
#include "frontends/dsl/GraphBuilderImpl.h"

using namespace mlir;

namespace megac::dsl {

//===----------------------------------------------------------------------===//
// Coarse ops
//===----------------------------------------------------------------------===//

namespace {
/// The shape of an optional operand (a bias, a mask), for the shape rules.
std::optional<rules::Shape> shapeOf(const std::optional<Tensor> &t) {
  if (!t)
    return std::nullopt;
  return t->shape();
}
} // namespace

Tensor GraphBuilder::linear(const Tensor &x, const Tensor &weight, std::optional<Tensor> bias,
                            Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weight}, loc) || (bias && !I.usable({&*bias}, loc)))
    return {};
  return I.makeChecked<mega::LinearOp>(
      rules::linear(dims(x.shape()), dims(weight.shape()), shapeOf(bias)), x.dtype(), loc,
      I.value(x), I.value(weight), bias ? I.value(*bias) : Value());
}

Tensor GraphBuilder::embedding(const Tensor &table, const Tensor &ids, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&table, &ids}, loc))
    return {};
  if (!isInt(ids.dtype()))
    return I.fail("embedding ids must be i32 or i64", loc), Tensor{};
  return I.makeChecked<mega::EmbeddingOp>(rules::embedding(dims(table.shape()), dims(ids.shape())),
                                          table.dtype(), loc, I.value(table), I.value(ids),
                                          ArrayAttr());
}

Tensor GraphBuilder::layerNorm(const Tensor &x, const Tensor &weight, std::optional<Tensor> bias,
                               double epsilon, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weight}, loc) || (bias && !I.usable({&*bias}, loc)))
    return {};
  if (!I.check(rules::checkNormParams("layer_norm", dims(x.shape()), dims(weight.shape()),
                                      shapeOf(bias)),
               loc))
    return {};
  auto op = mega::LayerNormOp::create(I.b, I.location(loc), I.value(x).getType(), I.value(x),
                                      I.value(weight), bias ? I.value(*bias) : Value(),
                                      I.b.getF64FloatAttr(epsilon));
  return I.wrap(op.getResult(), x.shape(), x.dtype());
}

Tensor GraphBuilder::rmsNorm(const Tensor &x, const Tensor &weight, double epsilon, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weight}, loc))
    return {};
  if (!I.check(
          rules::checkNormParams("rms_norm", dims(x.shape()), dims(weight.shape()), std::nullopt),
          loc))
    return {};
  auto op = mega::RmsNormOp::create(I.b, I.location(loc), I.value(x).getType(), I.value(x),
                                    I.value(weight), I.b.getF64FloatAttr(epsilon));
  return I.wrap(op.getResult(), x.shape(), x.dtype());
}

Tensor GraphBuilder::attention(const Tensor &q, const Tensor &k, const Tensor &v,
                               const AttentionOptions &options, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&q, &k, &v}, loc) || (options.mask && !I.usable({&*options.mask}, loc)))
    return {};
  return I.makeChecked<mega::AttentionOp>(
      rules::attention(dims(q.shape()), dims(k.shape()), dims(v.shape()), shapeOf(options.mask)),
      q.dtype(), loc, I.value(q), I.value(k), I.value(v),
      options.mask ? I.value(*options.mask) : Value(),
      options.causal ? I.b.getUnitAttr() : UnitAttr(),
      options.scale ? I.b.getF64FloatAttr(*options.scale) : FloatAttr());
}

Tensor GraphBuilder::gelu(const Tensor &x, Gelu approximation, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (!isFloat(x.dtype()))
    return I.fail("gelu needs a floating-point operand", loc), Tensor{};
  auto op = mega::GeluOp::create(I.b, I.location(loc),
                                 approximation == Gelu::tanh ? mega::GeluApproximation::tanh
                                                             : mega::GeluApproximation::none,
                                 I.value(x));
  return I.wrap(op.getResult(), x.shape(), x.dtype());
}

Tensor GraphBuilder::cumsum(const Tensor &x, int64_t axis, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (!rules::normalizeAxis(axis, x.rank()) || x.dtype() == DType::i1)
    return I.fail("cumsum axis " + std::to_string(axis) + " is out of range for " +
                      rules::str(dims(x.shape())) + " (or the input is i1)",
                  loc),
           Tensor{};
  auto op = mega::CumSumOp::create(I.b, I.location(loc), I.value(x).getType(), I.value(x), axis,
                                   false, false);
  return I.wrap(op.getResult(), x.shape(), x.dtype());
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

Tensor GraphBuilder::topkMask(const Tensor &x, int64_t k, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (!isFloat(x.dtype()) || x.rank() < 1 || k < 1 || k > x.dim(-1))
    return I.fail("topk_mask needs a floating-point tensor and 1 <= k <= its last dim (k = " +
                      std::to_string(k) + ", input " + rules::str(dims(x.shape())) + ")",
                  loc),
           Tensor{};
  auto op = mega::TopKMaskOp::create(I.b, I.location(loc), I.value(x).getType(), I.value(x), k);
  return I.wrap(op.getResult(), x.shape(), x.dtype());
}

namespace {
/// Why the MoE operands are not all of one floating type (empty when they are).
std::string moeDtypes(const char *op, std::initializer_list<const Tensor *> operands) {
  DType first = (*operands.begin())->dtype();
  for (const Tensor *t : operands)
    if (t->dtype() != first || !isFloat(t->dtype()))
      return std::string(op) + ": operands must share one floating-point type; cast first";
  return {};
}
} // namespace

template <typename OpTy>
Tensor GraphBuilder::Impl::moePair(const char *op, const Tensor &a, const Tensor &weights,
                                   rules::Result (*rule)(rules::Dims, rules::Dims),
                                   const Loc &loc) {
  if (!usable({&a, &weights}, loc) || !check(moeDtypes(op, {&a, &weights}), loc))
    return {};
  return makeChecked<OpTy>(rule(dims(a.shape()), dims(weights.shape())), a.dtype(), loc, value(a),
                           value(weights));
}

Tensor GraphBuilder::moeDispatch(const Tensor &x, const Tensor &weights, Loc loc) {
  return impl_->moePair<mega::MoeDispatchOp>("moe_dispatch", x, weights, rules::moeDispatch, loc);
}

Tensor GraphBuilder::moeCombine(const Tensor &y, const Tensor &weights, Loc loc) {
  return impl_->moePair<mega::MoeCombineOp>("moe_combine", y, weights, rules::moeCombine, loc);
}

Tensor GraphBuilder::moeMatmul(const Tensor &x, const Tensor &weight, const Tensor &weights,
                               int64_t topk, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weight, &weights}, loc) ||
      !I.check(moeDtypes("moe_matmul", {&x, &weight, &weights}), loc))
    return {};
  rules::Result r =
      rules::moeMatmul(dims(x.shape()), dims(weight.shape()), dims(weights.shape()), false);
  if (!I.check(r, loc))
    return {};
  if (topk < 1 || topk > weight.dim(0))
    return I.fail("moe_matmul topk = " + std::to_string(topk) + " must be in [1, " +
                      std::to_string(weight.dim(0)) + "]",
                  loc),
           Tensor{};
  auto op = mega::MoeMatmulOp::create(I.b, I.location(loc), I.tensorType(r.shape, x.dtype()),
                                      I.value(x), I.value(weight), I.value(weights), topk, false,
                                      mlir::IntegerAttr());
  return I.wrap(op.getResult(), r.shape, x.dtype());
}

Tensor GraphBuilder::crossEntropy(const Tensor &logits, const Tensor &labels, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&logits, &labels}, loc))
    return {};
  if (!isInt(labels.dtype()))
    return I.fail("cross_entropy labels must be i32 or i64", loc), Tensor{};
  return I.makeChecked<mega::CrossEntropyOp>(
      rules::crossEntropy(dims(logits.shape()), dims(labels.shape())), logits.dtype(), loc,
      I.value(logits), I.value(labels), IntegerAttr(), ArrayAttr());
}

} // namespace megac::dsl
