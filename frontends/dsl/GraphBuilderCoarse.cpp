// The graph DSL's coarse ops: linear, embedding, norms, attention, gelu, cumsum, the
// mixture-of-experts ops and cross-entropy, each checked by its ir/ShapeRules rule.
#include "frontends/dsl/GraphBuilderImpl.h"

using namespace mlir;

namespace megac::dsl {

//===----------------------------------------------------------------------===//
// Coarse ops
//===----------------------------------------------------------------------===//

Tensor GraphBuilder::linear(const Tensor &x, const Tensor &weight, std::optional<Tensor> bias,
                            Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weight}, loc) || (bias && !I.usable({&*bias}, loc)))
    return {};
  std::optional<rules::Shape> biasShape;
  if (bias)
    biasShape = bias->shape();
  rules::Result r = rules::linear(dims(x.shape()), dims(weight.shape()), biasShape);
  if (!I.check(r, loc))
    return {};
  auto op = mega::LinearOp::create(I.b, I.location(loc), I.tensorType(r.shape, x.dtype()),
                                   I.value(x), I.value(weight), bias ? I.value(*bias) : Value());
  return I.wrap(op.getResult(), r.shape, x.dtype());
}

Tensor GraphBuilder::embedding(const Tensor &table, const Tensor &ids, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&table, &ids}, loc))
    return {};
  if (!isInt(ids.dtype()))
    return I.fail("embedding ids must be i32 or i64", loc), Tensor{};
  rules::Result r = rules::embedding(dims(table.shape()), dims(ids.shape()));
  if (!I.check(r, loc))
    return {};
  auto op = mega::EmbeddingOp::create(I.b, I.location(loc), I.tensorType(r.shape, table.dtype()),
                                      I.value(table), I.value(ids), ArrayAttr());
  return I.wrap(op.getResult(), r.shape, table.dtype());
}

Tensor GraphBuilder::layerNorm(const Tensor &x, const Tensor &weight, std::optional<Tensor> bias,
                               double epsilon, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weight}, loc) || (bias && !I.usable({&*bias}, loc)))
    return {};
  std::optional<rules::Shape> biasShape;
  if (bias)
    biasShape = bias->shape();
  if (!I.check(
          rules::checkNormParams("layer_norm", dims(x.shape()), dims(weight.shape()), biasShape),
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
  std::optional<rules::Shape> maskShape;
  if (options.mask)
    maskShape = options.mask->shape();
  rules::Result r = rules::attention(dims(q.shape()), dims(k.shape()), dims(v.shape()), maskShape);
  if (!I.check(r, loc))
    return {};
  auto op = mega::AttentionOp::create(
      I.b, I.location(loc), I.tensorType(r.shape, q.dtype()), I.value(q), I.value(k), I.value(v),
      options.mask ? I.value(*options.mask) : Value(),
      options.causal ? I.b.getUnitAttr() : UnitAttr(),
      options.scale ? I.b.getF64FloatAttr(*options.scale) : FloatAttr());
  return I.wrap(op.getResult(), r.shape, q.dtype());
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

Tensor GraphBuilder::moeDispatch(const Tensor &x, const Tensor &weights, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x, &weights}, loc) || !I.check(moeDtypes("moe_dispatch", {&x, &weights}), loc))
    return {};
  rules::Result r = rules::moeDispatch(dims(x.shape()), dims(weights.shape()));
  if (!I.check(r, loc))
    return {};
  auto op = mega::MoeDispatchOp::create(I.b, I.location(loc), I.tensorType(r.shape, x.dtype()),
                                        I.value(x), I.value(weights));
  return I.wrap(op.getResult(), r.shape, x.dtype());
}

Tensor GraphBuilder::moeCombine(const Tensor &y, const Tensor &weights, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&y, &weights}, loc) || !I.check(moeDtypes("moe_combine", {&y, &weights}), loc))
    return {};
  rules::Result r = rules::moeCombine(dims(y.shape()), dims(weights.shape()));
  if (!I.check(r, loc))
    return {};
  auto op = mega::MoeCombineOp::create(I.b, I.location(loc), I.tensorType(r.shape, y.dtype()),
                                       I.value(y), I.value(weights));
  return I.wrap(op.getResult(), r.shape, y.dtype());
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
  rules::Result r = rules::crossEntropy(dims(logits.shape()), dims(labels.shape()));
  if (!I.check(r, loc))
    return {};
  auto op =
      mega::CrossEntropyOp::create(I.b, I.location(loc), I.tensorType(r.shape, logits.dtype()),
                                   I.value(logits), I.value(labels), IntegerAttr(), ArrayAttr());
  return I.wrap(op.getResult(), r.shape, logits.dtype());
}

} // namespace megac::dsl
