// ONNX loss ops on mega ops: SoftmaxCrossEntropyLoss (torch's F.cross_entropy) onto
// mega.cross_entropy, NegativeLogLikelihoodLoss onto a one-hot pick; with ONNX's class
// weights, ignore_index and mean/sum/none reductions.
#include "frontends/onnx/OnnxOps.h"

#include <numeric>

using namespace mlir;

namespace megac::onnx_import {

namespace {

struct LossArgs {
  Value input, labels; // scores or log-probs [N, C, D...], labels [N, D...]
  Shape labelShape;
  std::optional<int64_t> ignoreIndex;
  std::string reduction;
};

FailureOr<LossArgs> lossArgs(NodeContext &c) {
  if (failed(requireFloat(c, 0)))
    return failure();
  if (c.type(1) != ElemType::i64 && c.type(1) != ElemType::i32)
    return c.fail("labels must be INT64 or INT32, not " + elemTypeName(int(c.type(1))));
  if (c.hasInput(2) && failed(requireSameType(c, 0, 2)))
    return failure();
  const Shape &in = c.shape(0);
  if (in.size() < 2)
    return c.fail("the input must be [N, C, ...], got " + shapeStr(in));
  Shape labels(in);
  labels.erase(labels.begin() + 1);
  if (c.shape(1) != labels)
    return c.fail("labels " + shapeStr(c.shape(1)) + " do not match input " + shapeStr(in) +
                  " (expected " + shapeStr(labels) + ")");
  if (c.hasInput(2) && c.shape(2) != Shape{in[1]})
    return c.fail("weights must be [C] = [" + std::to_string(in[1]) + "], got " +
                  shapeStr(c.shape(2)));
  LossArgs args;
  args.labelShape = labels;
  if (c.attr("ignore_index"))
    args.ignoreIndex = c.attrInt("ignore_index", 0);
  args.reduction = c.attrString("reduction", "mean");
  if (args.reduction != "mean" && args.reduction != "sum" && args.reduction != "none")
    return c.fail("reduction '" + args.reduction + "' is not mean, sum or none");
  auto input = c.value(0), labelValue = c.value(1);
  if (failed(input) || failed(labelValue))
    return failure();
  args.input = *input;
  args.labels = *labelValue;
  return args;
}

/// Per-element weights: weights[label] with 0 where ignored, or 1/0 for kept/ignored without
/// class weights; null when every element counts 1.
FailureOr<Value> elementWeights(NodeContext &c, const LossArgs &args) {
  Emitter e{c};
  Value ignored;
  if (args.ignoreIndex)
    ignored = e.compare(mega::ComparePredicate::eq, args.labels,
                        e.splatLike(double(*args.ignoreIndex), args.labels));
  ElemType type = c.type(0);
  if (!c.hasInput(2)) {
    if (!ignored)
      return Value();
    Value one = c.splat(1, type, args.labelShape), zero = c.splat(0, type, args.labelShape);
    return e.select(ignored, zero, one);
  }
  auto weights = c.value(2);
  if (failed(weights))
    return failure();
  // An ignored label may lie outside [0, C): gather class 0 there, then zero it.
  Value safe = ignored ? e.select(ignored, e.splatLike(0, args.labels), args.labels) : args.labels;
  Value w = mega::GatherOp::create(c.builder(), c.loc(), c.tensorType(args.labelShape, type),
                                   *weights, safe, c.builder().getI64IntegerAttr(0));
  return ignored ? e.select(ignored, c.splat(0, type, args.labelShape), w) : w;
}

/// Applies the weights and the reduction to a per-element loss [N, D...].
FailureOr<Value> finishLoss(NodeContext &c, const LossArgs &args, Value loss, bool weighLoss) {
  Emitter e{c};
  auto weights = elementWeights(c, args);
  if (failed(weights))
    return failure();
  if (*weights && weighLoss)
    loss = e.make<mega::MulOp>(loss, *weights);
  if (args.reduction == "none")
    return loss;
  std::vector<int64_t> all(args.labelShape.size());
  std::iota(all.begin(), all.end(), 0);
  Value sum = all.empty() ? loss : e.reduce(mega::ReduceKind::sum, loss, all, false);
  if (args.reduction == "sum")
    return sum;
  Value count =
      *weights ? (all.empty() ? *weights : e.reduce(mega::ReduceKind::sum, *weights, all, false))
               : e.splatLike(double(checkedNumElements(args.labelShape)), sum);
  return e.make<mega::DivOp>(sum, count);
}

/// log_softmax over axis 1, stable: x - max - log(sum(exp(x - max))).
Value logSoftmaxAxis1(Emitter &e, Value x) {
  Shape s = Emitter::shapeOf(x);
  Value max = e.c.broadcast(e.reduce(mega::ReduceKind::max, x, {1}, true), s);
  Value shifted = e.make<mega::SubOp>(x, max);
  Value sum = e.reduce(mega::ReduceKind::sum, e.make<mega::ExpOp>(shifted), {1}, true);
  return e.make<mega::SubOp>(shifted, e.c.broadcast(e.make<mega::LogOp>(sum), s));
}

LogicalResult softmaxCrossEntropyOp(NodeContext &c) {
  auto args = lossArgs(c);
  if (failed(args))
    return failure();
  // mega.cross_entropy wants the classes last: [N, C, D...] -> [N, D..., C].
  int64_t rank = c.rank(0);
  Value logits = args->input;
  if (rank > 2) {
    std::vector<int64_t> perm{0};
    for (int64_t d = 2; d < rank; ++d)
      perm.push_back(d);
    perm.push_back(1);
    logits = c.transpose(logits, perm);
  }
  IntegerAttr ignore =
      args->ignoreIndex ? c.builder().getI64IntegerAttr(*args->ignoreIndex) : IntegerAttr();
  Value loss =
      mega::CrossEntropyOp::create(c.builder(), c.loc(), c.tensorType(args->labelShape, c.type(0)),
                                   logits, args->labels, ignore, ArrayAttr());
  auto out = finishLoss(c, *args, loss, /*weighLoss=*/c.hasInput(2));
  if (failed(out))
    return failure();
  c.setOutput(0, *out);
  if (c.hasOutput(1)) {
    Emitter e{c};
    c.setOutput(1, logSoftmaxAxis1(e, args->input));
  }
  return success();
}

LogicalResult nllLossOp(NodeContext &c) {
  auto args = lossArgs(c);
  if (failed(args))
    return failure();
  // -input[n, label, d...]: a one-hot pick along the class dim.
  Emitter e{c};
  Shape in = c.shape(0);
  int64_t classes = in[1];
  ElemType labelType = c.type(1);
  std::vector<int64_t> ids(classes);
  std::iota(ids.begin(), ids.end(), 0);
  Shape idShape(in.size(), 1), labelShape = in;
  idShape[1] = classes;
  labelShape[1] = 1;
  Value iota = c.broadcast(c.materialize(ConstTensor::fromInts(labelType, idShape, ids)), in);
  Value labels = c.broadcast(c.reshape(args->labels, labelShape), in);
  Value hot = e.compare(mega::ComparePredicate::eq, labels, iota);
  Value picked = e.reduce(mega::ReduceKind::sum,
                          e.select(hot, args->input, e.splatLike(0, args->input)), {1}, false);
  Value loss = e.make<mega::NegOp>(picked);
  // Ignored labels inside [0, C) still pick a value: the weights zero it.
  auto out = finishLoss(c, *args, loss, /*weighLoss=*/true);
  if (failed(out))
    return failure();
  c.setOutput(0, *out);
  return success();
}

} // namespace

void addLossHandlers(std::map<std::string, OpHandler> &h) {
  h["SoftmaxCrossEntropyLoss"] = softmaxCrossEntropyOp;
  h["NegativeLogLikelihoodLoss"] = nllLossOp;
}

} // namespace megac::onnx_import
