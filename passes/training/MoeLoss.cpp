// The mixture-of-experts load-balancing loss, z-loss and metrics (MoeLoss.h, docs/moe.md).
#include "passes/training/MoeLoss.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <string>

using namespace mlir;

namespace megac::passes {

namespace {

constexpr StringLiteral kRowNormalizer = "row_normalizer";

/// The router's top-k choice behind a dispatch's routing weights: the mega.topk_mask reached
/// through the ops computing them (capacity dropping, casts), nearest first; null if none.
mega::TopKMaskOp routerChoice(Value weights) {
  llvm::SetVector<Value> seen;
  seen.insert(weights);
  for (size_t i = 0; i < seen.size() && i < 64; ++i) {
    Operation *def = seen[i].getDefiningOp();
    if (!def)
      continue;
    if (auto topk = dyn_cast<mega::TopKMaskOp>(def))
      return topk;
    for (Value operand : def->getOperands())
      seen.insert(operand);
  }
  return nullptr;
}

struct Builder {
  OpBuilder &b;
  Location loc;

  RankedTensorType type(ArrayRef<int64_t> shape, Type element) {
    return RankedTensorType::get(shape, element);
  }
  Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }
  ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

  Value castTo(Value v, Type element) {
    if (elementOf(v) == element)
      return v;
    return mega::CastOp::create(b, loc, type(shapeOf(v), element), v);
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (shapeOf(v) == shape)
      return v;
    return mega::ReshapeOp::create(b, loc, type(shape, elementOf(v)), v);
  }
  /// Sums over `axes` (dropped).
  Value sum(Value v, ArrayRef<int64_t> axes) {
    SmallVector<int64_t> kept;
    for (auto [d, n] : llvm::enumerate(shapeOf(v)))
      if (!llvm::is_contained(axes, int64_t(d)))
        kept.push_back(n);
    return mega::ReduceOp::create(b, loc, type(kept, elementOf(v)), mega::ReduceKind::sum, v,
                                  axes, false);
  }
  Value sumAll(Value v) {
    auto axes = llvm::to_vector(llvm::seq<int64_t>(0, shapeOf(v).size()));
    return axes.empty() ? v : sum(v, axes);
  }
  Value mul(Value x, Value y) { return mega::MulOp::create(b, loc, x.getType(), x, y); }
  Value add(Value x, Value y) { return mega::AddOp::create(b, loc, x.getType(), x, y); }
  Value sub(Value x, Value y) { return mega::SubOp::create(b, loc, x.getType(), x, y); }
  Value scalar(Type element, double value) {
    auto t = type({}, element);
    APFloat f(value);
    bool lost = false;
    f.convert(cast<FloatType>(element).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return mega::ConstantOp::create(b, loc, DenseElementsAttr::get(t, f));
  }
  /// log(sum(exp(x))) over the last dim, stabilised by the row maximum: [..., E] -> [...].
  Value logSumExp(Value x) {
    ArrayRef<int64_t> s = shapeOf(x);
    int64_t last = static_cast<int64_t>(s.size()) - 1;
    SmallVector<int64_t> keep(s);
    keep.back() = 1;
    Value max = mega::ReduceOp::create(b, loc, type(keep, elementOf(x)), mega::ReduceKind::max, x,
                                       ArrayRef<int64_t>{last}, true);
    Value shifted = sub(x, mega::BroadcastOp::create(b, loc, x.getType(), max));
    Value e = mega::ExpOp::create(b, loc, x.getType(), shifted);
    Value total = mega::ReduceOp::create(b, loc, type(keep, elementOf(x)), mega::ReduceKind::sum,
                                         e, ArrayRef<int64_t>{last}, true);
    Value lse = add(mega::LogOp::create(b, loc, total.getType(), total), max);
    return reshape(lse, s.drop_back());
  }
};

} // namespace

LogicalResult addMoeLosses(func::FuncOp fb, int64_t rows, const MoeLossOptions &options) {
  SmallVector<mega::MoeDispatchOp> layers;
  fb.walk([&](mega::MoeDispatchOp d) { layers.push_back(d); });
  if (layers.empty())
    return success();
  MLIRContext *ctx = fb.getContext();
  auto ret = cast<func::ReturnOp>(fb.getBody().front().getTerminator());
  Type lossElement = cast<RankedTensorType>(ret.getOperand(0).getType()).getElementType();

  // 1 / rows of the global batch, fed by the runtime.
  unsigned nArgs = fb.getNumArguments();
  auto inputAttrs = DictionaryAttr::get(
      ctx, {NamedAttribute(StringAttr::get(ctx, mega::kInputAttr),
                           StringAttr::get(ctx, kRowNormalizer))});
  if (failed(fb.insertArgument(nArgs, RankedTensorType::get({}, lossElement), inputAttrs,
                               fb.getLoc())))
    return fb.emitError() << "mega-training-loss: cannot add the input " << kRowNormalizer;
  Value rowNormalizer = fb.getArgument(nArgs);

  SmallVector<Value> loads, dropped, terms;
  for (mega::MoeDispatchOp dispatch : layers) {
    Value routing = dispatch.getWeights();
    mega::TopKMaskOp choice = routerChoice(routing);
    if (!choice)
      return dispatch.emitError()
             << "mega-training-loss: cannot find the router's choice (a mega.topk_mask) behind "
                "this dispatch's routing weights, so its load-balancing loss has no "
                "probabilities; build the routing weights from mega.topk_mask";
    OpBuilder b(dispatch);
    Builder e{b, dispatch.getLoc()};
    Value probs = choice.getInput();
    Type element = e.elementOf(probs);
    ArrayRef<int64_t> w = e.shapeOf(routing);
    int64_t experts = w.back(), tokens = 1;
    for (int64_t n : w.drop_back())
      tokens *= n;
    if (rows < 1 || tokens % rows != 0)
      return dispatch.emitError() << "mega-training-loss: " << tokens
                                  << " routed tokens do not split into the batch's " << rows
                                  << " sequences (the load-balancing loss is per sequence)";
    int64_t seq = tokens / rows;
    auto k = static_cast<double>(choice.getK());
    Value mask = e.castTo(routing, element);
    Value p = e.reshape(probs, {rows, seq, experts});
    Value m = e.reshape(mask, {rows, seq, experts});
    // Per sequence: sum_e (sum_s p) (sum_s m); then over the rows, per global-batch sequence.
    Value perRow = e.sum(e.mul(e.sum(p, {1}), e.sum(m, {1})), {1});
    Value normalizer = e.castTo(rowNormalizer, element);
    Value term;
    if (options.auxCoeff != 0) {
      double scale = options.auxCoeff * double(experts) / (k * double(seq) * double(seq));
      term = e.mul(e.mul(e.sum(perRow, {0}), e.scalar(element, scale)), normalizer);
    }
    if (options.zCoeff != 0) {
      auto softmax = probs.getDefiningOp<mega::SoftmaxOp>();
      if (!softmax)
        return choice.emitError() << "mega-training-loss: the router z-loss needs the router "
                                     "logits, but this top-k's probabilities are not a "
                                     "mega.softmax";
      Value lse = e.logSumExp(softmax.getInput());
      Value z = e.mul(e.mul(e.sumAll(e.mul(lse, lse)), e.scalar(element, options.zCoeff / double(seq))),
                      normalizer);
      term = term ? e.add(term, z) : z;
    }
    if (term) {
      Value x = dispatch.getInput();
      auto attach = mega::AddAuxLossOp::create(b, dispatch.getLoc(), x.getType(), x, term);
      dispatch.getInputMutable().assign(attach.getResult());
      terms.push_back(e.castTo(term, lossElement));
    }
    // Metrics: assignments per expert, and those capacity dropped.
    Value load = e.castTo(e.sum(mask, llvm::to_vector(llvm::seq<int64_t>(0, w.size() - 1))),
                        lossElement);
    loads.push_back(e.reshape(load, {1, experts}));
    Value chosen = e.castTo(e.sumAll(choice.getResult()), lossElement);
    dropped.push_back(e.sub(chosen, e.sumAll(load)));
  }

  OpBuilder b(ret);
  Builder e{b, ret.getLoc()};
  int64_t experts = e.shapeOf(loads.front()).back();
  bool sameExperts = llvm::all_of(loads, [&](Value l) { return e.shapeOf(l).back() == experts; });
  if (!sameExperts)
    return layers.front().emitError()
           << "mega-training-loss: MoE layers with different expert counts are not supported "
              "(the load metric is one [layers, experts] table)";
  auto layerCount = static_cast<int64_t>(loads.size());
  Value load = loads.size() == 1
                   ? loads.front()
                   : Value(mega::ConcatOp::create(b, ret.getLoc(),
                                                  e.type({layerCount, experts}, lossElement),
                                                  loads, 0));
  // Sums of partial values stay partial: no collective here, the runtime reduces each output.
  Value drops = dropped.front();
  for (size_t i = 1; i < dropped.size(); ++i)
    drops = e.add(drops, dropped[i]);
  Value aux = terms.empty() ? e.scalar(lossElement, 0.0) : terms.front();
  for (size_t i = 1; i < terms.size(); ++i)
    aux = e.add(aux, terms[i]);

  SmallVector<Value> results(ret.getOperands());
  results.append({load, drops, aux});
  func::ReturnOp::create(b, ret.getLoc(), results);
  SmallVector<DictionaryAttr> attrs;
  for (unsigned i = 0; i < fb.getNumResults(); ++i) {
    DictionaryAttr dict = fb.getResultAttrDict(i);
    attrs.push_back(dict ? dict : DictionaryAttr::get(ctx));
  }
  for (StringRef name : {"moe.load", "moe.dropped", "moe.aux_loss"})
    attrs.push_back(DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, mega::kOutputAttr), StringAttr::get(ctx, name))}));
  ret.erase();
  fb.setType(FunctionType::get(ctx, fb.getArgumentTypes(), ValueRange(results).getTypes()));
  fb.setAllResultAttrs(attrs);
  return success();
}

} // namespace megac::passes
