// The attention pattern of mega-input-raise: matmul(q, k^T) -> scale -> mask -> softmax ->
// matmul(., v) over [b, h, s, d] becomes mega.attention over [b, s, h, d]; the rank-3 batched
// forms (baddbmm, softmax and bmm over [b*h, s, t]: GPT-NeoX, OPT, BLOOM) are lifted to rank 4.
#include "passes/input/RaiseUtils.h"

#include "ir/MegaOps.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;

namespace megac::passes {

namespace {

/// Fill values at or below this mask a score out (exp underflows to 0 in every float type).
constexpr double kMaskedFill = -1e4;

/// The boolean values of a constant i1 tensor, or nullopt.
std::optional<std::vector<bool>> boolConstant(Value v) {
  auto constant = v.getDefiningOp<mega::ConstantOp>();
  auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : DenseElementsAttr();
  if (!dense || !dense.getElementType().isInteger(1))
    return std::nullopt;
  std::vector<bool> values;
  for (bool b : dense.getValues<bool>())
    values.push_back(b);
  return values;
}

/// True when `keep` (row-major, its last two dims [s, t]) keeps exactly the keys j <= i + t - s
/// for each query i, in every leading slice: the causal mask mega.attention's flag means.
bool isCausal(const std::vector<bool> &keep, ArrayRef<int64_t> shape, int64_t s, int64_t t) {
  if (shape.size() < 2 || shape[shape.size() - 2] != s || shape.back() != t)
    return false;
  for (size_t k = 0; k < keep.size(); ++k) {
    int64_t j = int64_t(k) % t, i = (int64_t(k) / t) % s;
    if (keep[k] != (j <= i + t - s))
      return false;
  }
  return true;
}

/// The scores chain between matmul(q, k^T) and softmax.
struct ScoreChain {
  double scale = 1.0;
  bool causal = false;
  /// Additive mask before broadcasting (rank <= 4), or where-mask parts to build one from.
  Value additive;
  /// Further additive terms (BLOOM: the ALiBi bias and the causal mask), summed into one mask.
  SmallVector<Value> moreAdditive;
  Value whereCond, whereFill;
  /// The where's fill as the softmax sees it: scales after a where-mask scale it too (GPT-J
  /// divides the masked scores by sqrt(d)).
  double fill = 0;
  bool whereKeepsTrue = true;
  mega::SoftmaxOp softmax;
};

/// Follows single uses from the scores to the softmax: constant scales first, then at most one
/// additive mask and one where-mask.
std::optional<ScoreChain> followScores(Value scores) {
  ScoreChain chain;
  bool masked = false, whereSeen = false;
  Value cur = scores;
  while (true) {
    if (!cur.hasOneUse())
      return std::nullopt;
    Operation *user = *cur.getUsers().begin();
    if (auto softmax = dyn_cast<mega::SoftmaxOp>(user)) {
      int64_t axis = softmax.getAxis();
      if (axis != -1 && axis != 3)
        return std::nullopt;
      chain.softmax = softmax;
      return chain;
    }
    // A positive scale after a where-mask alone scales its fill, which must stay a mask value.
    auto scaleBy = [&](double factor) {
      if (masked && (chain.additive || !(factor > 0) || !(chain.fill * factor <= kMaskedFill)))
        return false;
      chain.scale *= factor;
      chain.fill *= factor;
      return true;
    };
    if (auto mul = dyn_cast<mega::MulOp>(user)) {
      Value other = mul.getLhs() == cur ? mul.getRhs() : mul.getLhs();
      auto c = splatValue(other);
      if (!c || other == cur || !scaleBy(*c))
        return std::nullopt;
    } else if (auto div = dyn_cast<mega::DivOp>(user)) {
      auto c = div.getLhs() == cur ? splatValue(div.getRhs()) : std::nullopt;
      if (!c || *c == 0 || !scaleBy(1.0 / *c))
        return std::nullopt;
    } else if (auto add = dyn_cast<mega::AddOp>(user)) {
      Value other = add.getLhs() == cur ? add.getRhs() : add.getLhs();
      if (other == cur)
        return std::nullopt;
      if (chain.additive)
        chain.moreAdditive.push_back(stripBroadcast(other));
      else
        chain.additive = stripBroadcast(other);
      masked = true;
    } else if (auto max = dyn_cast<mega::MaxOp>(user)) {
      // OPT's clamp max(scores, finfo.min) after the mask: the identity on every score a
      // softmax weighs (a fully masked row aside, which no causal row is).
      Value other = max.getLhs() == cur ? max.getRhs() : max.getLhs();
      auto floor = splatValue(other);
      if (!floor || !(*floor <= -1e30) || other == cur)
        return std::nullopt;
    } else if (auto where = dyn_cast<mega::WhereOp>(user)) {
      if (whereSeen || where.getCond() == cur)
        return std::nullopt;
      chain.whereKeepsTrue = where.getTrueValue() == cur;
      chain.whereFill = chain.whereKeepsTrue ? where.getFalseValue() : where.getTrueValue();
      auto fill = splatValue(chain.whereFill);
      if (!fill || !(*fill <= kMaskedFill))
        return std::nullopt;
      chain.fill = *fill;
      chain.whereCond = stripBroadcast(where.getCond());
      whereSeen = masked = true;
    } else {
      return std::nullopt;
    }
    cur = user->getResult(0);
  }
}

/// `v` reshaped to rank 4 with leading unit dims (masks broadcast to [b, h, s, t]).
Value toRank4(PatternRewriter &rewriter, Location loc, Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getRank() == 4)
    return v;
  SmallVector<int64_t> shape(4 - type.getRank(), 1);
  shape.append(type.getShape().begin(), type.getShape().end());
  return mega::ReshapeOp::create(rewriter, loc, RankedTensorType::get(shape, type.getElementType()),
                                 v);
}

struct RaiseAttention : OpRewritePattern<mega::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mega::MatmulOp qk, PatternRewriter &rewriter) const override {
    Value qh = qk.getLhs(), kt = qk.getRhs();
    auto qs = shapeOf(qh), ks = shapeOf(kt), ss = shapeOf(qk.getResult());
    // k and v have the query's heads, or one head broadcast over them (multi-query attention,
    // Falcon's): mega.attention takes hk = 1 key/value head as it is.
    if (qs.size() != 4 || ks.size() != 4 || qs[0] != ks[0] || (qs[1] != ks[1] && ks[1] != 1))
      return failure();
    std::optional<ScoreChain> chain = followScores(qk.getResult());
    if (!chain)
      return failure();
    Value probs = chain->softmax.getResult();
    auto pv =
        probs.hasOneUse() ? dyn_cast<mega::MatmulOp>(*probs.getUsers().begin()) : mega::MatmulOp();
    if (!pv || pv.getLhs() != probs)
      return failure();
    Value vh = pv.getRhs();
    auto vs = shapeOf(vh);
    if (vs.size() != 4 || vs[0] != qs[0] || vs[1] != ks[1] || vs[2] != ss[3])
      return failure();
    int64_t s = ss[2], t = ss[3], d = qs[3];
    if (!(chain->scale > 0))
      return failure();

    // Decide the mask before changing anything: the causal flag when the where's keep-mask
    // is causal, else an additive mask (the where's becomes keep ? 0 : fill).
    Type element = cast<RankedTensorType>(qk.getType()).getElementType();
    bool whereToAdditive = false;
    if (chain->whereCond) {
      auto cond = boolConstant(chain->whereCond);
      std::vector<bool> keep;
      if (cond)
        for (bool b : *cond)
          keep.push_back(b == chain->whereKeepsTrue);
      if (cond && isCausal(keep, shapeOf(chain->whereCond), s, t))
        chain->causal = true;
      else if (chain->additive)
        return failure();
      else
        whereToAdditive = true;
    }
    int64_t full[4] = {qs[0], qs[1], s, t};
    auto fits = [&](Value source, bool boolean) {
      auto ms = shapeOf(source);
      if (ms.size() > 4 ||
          (!boolean && cast<RankedTensorType>(source.getType()).getElementType() != element))
        return false;
      for (size_t i = 0; i < ms.size(); ++i)
        if (ms[i] != 1 && ms[i] != full[4 - ms.size() + i])
          return false;
      return true;
    };
    if ((chain->additive || whereToAdditive) &&
        !fits(whereToAdditive ? chain->whereCond : chain->additive, whereToAdditive))
      return failure();
    for (Value more : chain->moreAdditive)
      if (!fits(more, false))
        return failure();

    Location loc = pv.getLoc();
    rewriter.setInsertionPoint(pv);
    Value mask = chain->additive;
    if (whereToAdditive) {
      auto type = RankedTensorType::get(shapeOf(chain->whereCond), element);
      double fill = chain->fill;
      Value zero = mega::ConstantOp::create(
          rewriter, loc, type, DenseElementsAttr::get(type, rewriter.getFloatAttr(element, 0)));
      Value filled = mega::ConstantOp::create(
          rewriter, loc, type, DenseElementsAttr::get(type, rewriter.getFloatAttr(element, fill)));
      mask = chain->whereKeepsTrue
                 ? mega::WhereOp::create(rewriter, loc, type, chain->whereCond, zero, filled)
                 : mega::WhereOp::create(rewriter, loc, type, chain->whereCond, filled, zero);
    }
    if (mask)
      mask = toRank4(rewriter, loc, mask);
    if (!chain->moreAdditive.empty()) {
      // One mask: the terms broadcast to [b, h, s, t] and summed in their order.
      auto fullType = RankedTensorType::get(full, element);
      auto broadcastFull = [&](Value v) -> Value {
        v = toRank4(rewriter, loc, v);
        if (shapeOf(v) == ArrayRef<int64_t>(full))
          return v;
        return mega::BroadcastOp::create(rewriter, loc, fullType, v);
      };
      mask = broadcastFull(mask);
      for (Value more : chain->moreAdditive)
        mask = mega::AddOp::create(rewriter, loc, fullType, mask, broadcastFull(more));
    }

    // [b, h, s, d] -> [b, s, h, d]; k^T [b, h, d, t] -> [b, t, h, d].
    Value q = transposeThrough(rewriter, loc, qh, {0, 2, 1, 3});
    Value k = transposeThrough(rewriter, loc, kt, {0, 3, 1, 2});
    Value v = transposeThrough(rewriter, loc, vh, {0, 2, 1, 3});
    FloatAttr scaleAttr;
    if (std::fabs(chain->scale * std::sqrt(double(d)) - 1.0) > 1e-6)
      scaleAttr = rewriter.getF64FloatAttr(chain->scale);
    auto outShape = shapeOf(pv.getResult());
    auto resultType = RankedTensorType::get({outShape[0], outShape[2], outShape[1], outShape[3]},
                                            cast<RankedTensorType>(pv.getType()).getElementType());
    auto attention = mega::AttentionOp::create(rewriter, loc, resultType, q, k, v, mask,
                                               chain->causal, scaleAttr);
    rewriter.replaceOp(pv, transposeThrough(rewriter, loc, attention.getResult(), {0, 2, 1, 3}));
    return success();
  }
};

/// GPT-NeoX's baddbmm scores: matmul(reshape(q), transpose(reshape(k))) over [b*h, s, d], scaled
/// by constants, plus a zero bias, then reshaped to [b, h, s, t]. Rewritten as the same matmul
/// and scales over [b, h, s, d], so that RaiseAttention sees the usual rank-4 chain.
struct LiftBatchedScores : OpRewritePattern<mega::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mega::MatmulOp qk, PatternRewriter &rewriter) const override {
    auto q3 = qk.getLhs().getDefiningOp<mega::ReshapeOp>();
    auto kt3 = qk.getRhs().getDefiningOp<mega::TransposeOp>();
    if (!q3 || !kt3 || shapeOf(qk.getResult()).size() != 3 ||
        kt3.getPerm() != ArrayRef<int64_t>{0, 2, 1})
      return failure();
    auto k3 = kt3.getInput().getDefiningOp<mega::ReshapeOp>();
    if (!k3)
      return failure();
    Value q4 = q3.getInput(), k4 = k3.getInput();
    auto qs = shapeOf(q4), ks = shapeOf(k4);
    if (qs.size() != 4 || ks.size() != 4 || qs[0] != ks[0] || qs[1] != ks[1] || qs[3] != ks[3] ||
        qs[0] * qs[1] != shapeOf(qk.getResult())[0])
      return failure();
    // Constant scales, zero biases and at most one bias [b*h, 1 or s, t] after the scales
    // (BLOOM's ALiBi), up to the reshape back to [b, h, s, t].
    double scale = 1.0;
    Value bias;
    Value cur = qk.getResult();
    mega::ReshapeOp back;
    while (!back) {
      if (!cur.hasOneUse())
        return failure();
      Operation *user = *cur.getUsers().begin();
      if (auto reshape = dyn_cast<mega::ReshapeOp>(user)) {
        back = reshape;
        continue;
      }
      auto mul = dyn_cast<mega::MulOp>(user);
      auto add = dyn_cast<mega::AddOp>(user);
      Value other = !mul && !add                 ? Value()
                    : user->getOperand(0) == cur ? user->getOperand(1)
                                                 : user->getOperand(0);
      if (!other || other == cur)
        return failure();
      std::optional<double> c = splatValue(other);
      if (add && !c && !bias) {
        bias = stripBroadcast(other);
      } else if (!c || (add && *c != 0.0) || (mul && bias)) {
        return failure();
      } else if (mul) {
        scale *= *c;
      }
      cur = user->getResult(0);
    }
    auto out = shapeOf(back.getResult());
    if (out.size() != 4 || out[0] != qs[0] || out[1] != qs[1])
      return failure();
    auto element = cast<RankedTensorType>(qk.getType()).getElementType();
    SmallVector<int64_t> biasShape;
    if (bias) {
      auto bs = shapeOf(bias);
      if (bs.size() != 3 || bs[0] != out[0] * out[1] || (bs[1] != 1 && bs[1] != out[2]) ||
          bs[2] != out[3] || cast<RankedTensorType>(bias.getType()).getElementType() != element)
        return failure();
      biasShape = {out[0], out[1], bs[1], bs[2]};
    }

    Location loc = qk.getLoc();
    rewriter.setInsertionPoint(back);
    auto ktType = RankedTensorType::get({ks[0], ks[1], ks[3], ks[2]}, element);
    Value kt = mega::TransposeOp::create(rewriter, loc, ktType, k4,
                                         rewriter.getDenseI64ArrayAttr({0, 1, 3, 2}));
    auto scoresType = RankedTensorType::get(out, element);
    Value scores = mega::MatmulOp::create(rewriter, loc, scoresType, q4, kt);
    if (scale != 1.0) {
      Value c = mega::ConstantOp::create(
          rewriter, loc, scoresType,
          DenseElementsAttr::get(scoresType, rewriter.getFloatAttr(element, scale)));
      scores = mega::MulOp::create(rewriter, loc, scoresType, scores, c);
    }
    if (bias) {
      Value b4 =
          mega::ReshapeOp::create(rewriter, loc, RankedTensorType::get(biasShape, element), bias);
      if (biasShape[2] != out[2])
        b4 = mega::BroadcastOp::create(rewriter, loc, scoresType, b4);
      scores = mega::AddOp::create(rewriter, loc, scoresType, scores, b4);
    }
    rewriter.replaceOp(back, scores);
    return success();
  }
};

/// BLOOM's probabilities-times-values over [b*h, s, t] x [b*h, t, d]: both operands reshaped
/// from rank 4 and the result reshaped back to [b, h, s, d]. Rewritten as the rank-4 matmul.
struct LiftBatchedValues : OpRewritePattern<mega::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mega::MatmulOp pv, PatternRewriter &rewriter) const override {
    auto p3 = pv.getLhs().getDefiningOp<mega::ReshapeOp>();
    auto v3 = pv.getRhs().getDefiningOp<mega::ReshapeOp>();
    if (!p3 || !v3 || shapeOf(pv.getResult()).size() != 3 || !pv.getResult().hasOneUse() ||
        !p3.getInput().getDefiningOp<mega::SoftmaxOp>())
      return failure();
    auto back = dyn_cast<mega::ReshapeOp>(*pv.getResult().getUsers().begin());
    Value p4 = p3.getInput(), v4 = v3.getInput();
    auto ps = shapeOf(p4), vs = shapeOf(v4);
    if (!back || ps.size() != 4 || vs.size() != 4 || ps[0] != vs[0] || ps[1] != vs[1] ||
        ps[3] != vs[2])
      return failure();
    auto out = shapeOf(back.getResult());
    if (out.size() != 4 || out[0] != ps[0] || out[1] != ps[1] || out[2] != ps[2] || out[3] != vs[3])
      return failure();
    rewriter.setInsertionPoint(back);
    rewriter.replaceOpWithNewOp<mega::MatmulOp>(back, back.getType(), p4, v4);
    return success();
  }
};

/// OPT's softmax over [b*h, s, t] of scores reshaped from [b, h, s, t]: the softmax runs on the
/// rank-4 scores (the same rows), reshaped after.
struct LiftBatchedSoftmax : OpRewritePattern<mega::SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mega::SoftmaxOp softmax, PatternRewriter &rewriter) const override {
    auto reshape = softmax.getInput().getDefiningOp<mega::ReshapeOp>();
    auto in = reshape ? shapeOf(reshape.getInput()) : ArrayRef<int64_t>();
    auto out = shapeOf(softmax.getResult());
    int64_t axis = softmax.getAxis();
    if (!reshape || in.size() != 4 || out.size() != 3 || (axis != -1 && axis != 2) ||
        out[0] != in[0] * in[1] || out[1] != in[2] || out[2] != in[3])
      return failure();
    Value lifted = mega::SoftmaxOp::create(rewriter, softmax.getLoc(), reshape.getInput().getType(),
                                           reshape.getInput(), rewriter.getI64IntegerAttr(3));
    rewriter.replaceOpWithNewOp<mega::ReshapeOp>(softmax, softmax.getType(), lifted);
    return success();
  }
};

} // namespace

void populateAttentionPattern(RewritePatternSet &patterns) {
  patterns.add<RaiseAttention, LiftBatchedScores, LiftBatchedValues, LiftBatchedSoftmax>(
      patterns.getContext());
}

} // namespace megac::passes
