// mega-input-raise: raises decomposed LayerNorm, GELU, linear and embedding patterns (and,
// from AttentionPattern.cpp, attention) into coarse mega ops, and drops trivial ops.
#include "passes/input/Passes.h"
#include "passes/input/RaiseUtils.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_INPUTRAISE
#include "passes/input/Passes.h.inc"

//===----------------------------------------------------------------------===//
// Matching helpers
//===----------------------------------------------------------------------===//

std::optional<double> splatValue(Value v) {
  while (Operation *op = v.getDefiningOp()) {
    if (isa<mega::BroadcastOp, mega::ReshapeOp>(op)) {
      v = op->getOperand(0);
      continue;
    }
    auto constant = dyn_cast<mega::ConstantOp>(op);
    if (!constant)
      return std::nullopt;
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense || !dense.isSplat())
      return std::nullopt;
    Type e = dense.getElementType();
    if (isa<FloatType>(e))
      return dense.getSplatValue<APFloat>().convertToDouble();
    if (e.isInteger(1))
      return dense.getSplatValue<bool>() ? 1.0 : 0.0;
    if (isa<IntegerType>(e))
      return double(dense.getSplatValue<APInt>().getSExtValue());
    return std::nullopt;
  }
  return std::nullopt;
}

bool isSplat(Value v, double want, double relTol) {
  auto got = splatValue(v);
  return got && std::fabs(*got - want) <= relTol * std::max(1.0, std::fabs(want));
}

Value stripBroadcast(Value v) {
  while (auto b = v.getDefiningOp<mega::BroadcastOp>())
    v = b.getInput();
  return v;
}

bool isParameter(Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return false;
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  return func && arg.getOwner()->isEntryBlock() &&
         func.getArgAttr(arg.getArgNumber(), mega::kParamAttr);
}

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

Value transposeThrough(PatternRewriter &rewriter, Location loc, Value v, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> p(perm.begin(), perm.end());
  // transpose(transpose(src, q), p) == transpose(src, q[p[i]]).
  while (auto t = v.getDefiningOp<mega::TransposeOp>()) {
    ArrayRef<int64_t> q = t.getPerm();
    for (int64_t &i : p)
      i = q[i];
    v = t.getInput();
  }
  bool identity = true;
  for (size_t i = 0; i < p.size(); ++i)
    identity &= p[i] == int64_t(i);
  if (identity)
    return v;
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape;
  for (int64_t i : p)
    shape.push_back(type.getShape()[i]);
  return mega::TransposeOp::create(rewriter, loc,
                                   RankedTensorType::get(shape, type.getElementType()), v,
                                   rewriter.getDenseI64ArrayAttr(p));
}

namespace {

Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

/// The operand of a commutative binary op that is not `v`, or null.
Value otherOperand(Operation *op, Value v) {
  if (op->getNumOperands() != 2)
    return {};
  if (op->getOperand(0) == v)
    return op->getOperand(1);
  if (op->getOperand(1) == v)
    return op->getOperand(0);
  return {};
}

/// The single user of `v`, if it is an OpTy.
template <typename OpTy> OpTy singleUser(Value v) {
  return v.hasOneUse() ? dyn_cast<OpTy>(*v.getUsers().begin()) : OpTy();
}

//===----------------------------------------------------------------------===//
// Trivial ops
//===----------------------------------------------------------------------===//

/// A broadcast, reshape or transpose to the same type is its input; chains collapse.
struct FoldBroadcast : OpRewritePattern<mega::BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::BroadcastOp op, PatternRewriter &rewriter) const override {
    if (op.getInput().getType() == op.getType()) {
      rewriter.replaceOp(op, op.getInput());
      return success();
    }
    if (auto inner = op.getInput().getDefiningOp<mega::BroadcastOp>()) {
      rewriter.replaceOpWithNewOp<mega::BroadcastOp>(op, op.getType(), inner.getInput());
      return success();
    }
    return failure();
  }
};

struct FoldReshape : OpRewritePattern<mega::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::ReshapeOp op, PatternRewriter &rewriter) const override {
    if (op.getInput().getType() == op.getType()) {
      rewriter.replaceOp(op, op.getInput());
      return success();
    }
    if (auto inner = op.getInput().getDefiningOp<mega::ReshapeOp>()) {
      rewriter.replaceOpWithNewOp<mega::ReshapeOp>(op, op.getType(), inner.getInput());
      return success();
    }
    return failure();
  }
};

struct FoldTranspose : OpRewritePattern<mega::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::TransposeOp op, PatternRewriter &rewriter) const override {
    bool identity = true;
    for (size_t i = 0; i < op.getPerm().size(); ++i)
      identity &= op.getPerm()[i] == int64_t(i);
    if (!identity && !op.getInput().getDefiningOp<mega::TransposeOp>())
      return failure();
    rewriter.replaceOp(op, transposeThrough(rewriter, op.getLoc(), op.getInput(), op.getPerm()));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// LayerNorm
//===----------------------------------------------------------------------===//

/// `r` is `reduce mean` of `input` over its last dim, keeping it.
bool isLastDimMean(mega::ReduceOp r, Value input) {
  if (!r || r.getInput() != input || r.getKind() != mega::ReduceKind::mean || !r.getKeepDims())
    return false;
  int64_t rank = int64_t(shapeOf(input).size());
  return r.getAxes().size() == 1 && (r.getAxes()[0] == rank - 1 || r.getAxes()[0] == -1);
}

/// A norm parameter for a last dim of size h: a value [h], or [1, ..., 1, h] reshaped to [h].
Value normParam(PatternRewriter &rewriter, Location loc, Value v, int64_t h, Type element) {
  v = stripBroadcast(v);
  auto shape = shapeOf(v);
  if (shape.empty() || shape.back() != h || elementOf(v) != element)
    return {};
  for (size_t i = 0; i + 1 < shape.size(); ++i)
    if (shape[i] != 1)
      return {};
  if (shape.size() == 1)
    return v;
  return mega::ReshapeOp::create(rewriter, loc, RankedTensorType::get({h}, element), v);
}

/// (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* w] [+ b] over the last dim.
struct RaiseLayerNorm : OpRewritePattern<mega::DivOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::DivOp div, PatternRewriter &rewriter) const override {
    Value centered = div.getLhs();
    auto sub = centered.getDefiningOp<mega::SubOp>();
    if (!sub)
      return failure();
    Value x = sub.getLhs();
    if (shapeOf(x).empty() || x.getType() != div.getType() ||
        !isLastDimMean(stripBroadcast(sub.getRhs()).getDefiningOp<mega::ReduceOp>(), x))
      return failure();
    auto sqrt = stripBroadcast(div.getRhs()).getDefiningOp<mega::SqrtOp>();
    auto addEps = sqrt ? sqrt.getInput().getDefiningOp<mega::AddOp>() : mega::AddOp();
    if (!addEps)
      return failure();
    std::optional<double> eps;
    mega::ReduceOp var;
    for (int i = 0; i < 2 && !var; ++i) {
      eps = splatValue(addEps->getOperand(i));
      var = addEps->getOperand(1 - i).getDefiningOp<mega::ReduceOp>();
    }
    if (!eps || !(*eps > 0) || !var)
      return failure();
    Value squared = var.getInput();
    bool isSquare = false;
    if (auto pow = squared.getDefiningOp<mega::PowOp>())
      isSquare = pow.getLhs() == centered && isSplat(pow.getRhs(), 2.0, 1e-6);
    else if (auto mul = squared.getDefiningOp<mega::MulOp>())
      isSquare = mul.getLhs() == centered && mul.getRhs() == centered;
    if (!isSquare || !isLastDimMean(var, squared))
      return failure();

    // The affine part, when the normalized value feeds only it.
    int64_t h = shapeOf(x).back();
    Type element = elementOf(x);
    Operation *last = div;
    Value weight, bias;
    if (auto mul = singleUser<mega::MulOp>(div.getResult())) {
      rewriter.setInsertionPoint(mul);
      Value other = otherOperand(mul, div.getResult());
      if (other && other != div.getResult() &&
          (weight = normParam(rewriter, mul.getLoc(), other, h, element)))
        last = mul;
    }
    if (last != div.getOperation()) {
      if (auto add = singleUser<mega::AddOp>(last->getResult(0))) {
        rewriter.setInsertionPoint(add);
        Value other = otherOperand(add, last->getResult(0));
        if (other && (bias = normParam(rewriter, add.getLoc(), other, h, element)))
          last = add;
      }
    }
    rewriter.setInsertionPoint(last);
    if (!weight) {
      auto type = RankedTensorType::get({h}, element);
      weight = mega::ConstantOp::create(
          rewriter, div.getLoc(), type,
          DenseElementsAttr::get(type, rewriter.getFloatAttr(element, 1.0)));
    }
    auto ln = mega::LayerNormOp::create(rewriter, last->getLoc(), x.getType(), x, weight, bias,
                                        rewriter.getF64FloatAttr(*eps));
    rewriter.replaceOp(last, ln.getResult());
    return success();
  }
};

/// `r` is 1 / sqrt(mean(x^2) + eps) (as 1 / sqrt, or rsqrt) over the last dim of `x`; returns
/// eps.
std::optional<double> matchInverseRms(Value r, Value x) {
  Value root;
  if (auto rsqrt = r.getDefiningOp<mega::RsqrtOp>()) {
    root = rsqrt.getInput();
  } else if (auto div = r.getDefiningOp<mega::DivOp>(); div && isSplat(div.getLhs(), 1.0, 1e-6)) {
    auto sqrt = div.getRhs().getDefiningOp<mega::SqrtOp>();
    if (!sqrt)
      return std::nullopt;
    root = sqrt.getInput();
  } else {
    return std::nullopt;
  }
  auto add = root.getDefiningOp<mega::AddOp>();
  if (!add)
    return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    auto eps = splatValue(add->getOperand(i));
    auto mean = add->getOperand(1 - i).getDefiningOp<mega::ReduceOp>();
    if (!eps || !(*eps > 0) || !mean)
      continue;
    Value squared = mean.getInput();
    bool isSquare = false;
    if (auto pow = squared.getDefiningOp<mega::PowOp>())
      isSquare = pow.getLhs() == x && isSplat(pow.getRhs(), 2.0, 1e-6);
    else if (auto mul = squared.getDefiningOp<mega::MulOp>())
      isSquare = mul.getLhs() == x && mul.getRhs() == x;
    if (isSquare && isLastDimMean(mean, squared))
      return eps;
  }
  return std::nullopt;
}

/// x * (1 / sqrt(mean(x^2) + eps)) [* w] over the last dim (T5's norm) -> mega.rms_norm.
struct RaiseRmsNorm : OpRewritePattern<mega::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::MulOp mul, PatternRewriter &rewriter) const override {
    Value x;
    std::optional<double> eps;
    for (int i = 0; i < 2 && !eps; ++i) {
      x = mul->getOperand(i);
      if (x.getType() == mul.getType() && !shapeOf(x).empty())
        eps = matchInverseRms(stripBroadcast(mul->getOperand(1 - i)), x);
    }
    if (!eps)
      return failure();
    int64_t h = shapeOf(x).back();
    Type element = elementOf(x);
    Operation *last = mul;
    Value weight;
    if (auto scale = singleUser<mega::MulOp>(mul.getResult())) {
      rewriter.setInsertionPoint(scale);
      Value other = otherOperand(scale, mul.getResult());
      if (other && other != mul.getResult() &&
          (weight = normParam(rewriter, scale.getLoc(), other, h, element)))
        last = scale;
    }
    rewriter.setInsertionPoint(last);
    if (!weight) {
      auto type = RankedTensorType::get({h}, element);
      weight = mega::ConstantOp::create(
          rewriter, mul.getLoc(), type,
          DenseElementsAttr::get(type, rewriter.getFloatAttr(element, 1.0)));
    }
    auto norm = mega::RmsNormOp::create(rewriter, last->getLoc(), x.getType(), x, weight,
                                        rewriter.getF64FloatAttr(*eps));
    rewriter.replaceOp(last, norm.getResult());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// GELU
//===----------------------------------------------------------------------===//

/// The factors of a product tree rooted at `v` (interior products used only in it).
void collectFactors(Value v, bool root, SmallVectorImpl<Value> &factors) {
  auto mul = v.getDefiningOp<mega::MulOp>();
  if (mul && (root || v.hasOneUse())) {
    collectFactors(mul.getLhs(), false, factors);
    collectFactors(mul.getRhs(), false, factors);
    return;
  }
  factors.push_back(v);
}

/// `u` is x / sqrt(2) or x * (1 / sqrt(2)).
bool isErfArgument(Value u, Value x) {
  if (auto div = u.getDefiningOp<mega::DivOp>())
    return div.getLhs() == x && isSplat(div.getRhs(), std::sqrt(2.0));
  if (auto mul = u.getDefiningOp<mega::MulOp>())
    return otherOperand(mul, x) && isSplat(otherOperand(mul, x), 1.0 / std::sqrt(2.0));
  return false;
}

/// `v` is x^3, as pow(x, 3) or a product of three x.
bool isCube(Value v, Value x) {
  if (auto pow = v.getDefiningOp<mega::PowOp>())
    return pow.getLhs() == x && isSplat(pow.getRhs(), 3.0, 1e-6);
  SmallVector<Value> factors;
  collectFactors(v, true, factors);
  return factors.size() == 3 && llvm::all_of(factors, [&](Value f) { return f == x; });
}

/// `u` is sqrt(2/pi) * (x + 0.044715 * x^3), factors in any order.
bool isTanhArgument(Value u, Value x) {
  SmallVector<Value> factors;
  collectFactors(u, true, factors);
  double scale = 1;
  Value inner;
  for (Value f : factors) {
    if (auto s = splatValue(f))
      scale *= *s;
    else if (inner)
      return false;
    else
      inner = f;
  }
  auto add = inner ? inner.getDefiningOp<mega::AddOp>() : mega::AddOp();
  if (!add || std::fabs(scale - std::sqrt(2.0 / M_PI)) > 1e-3)
    return false;
  Value cubic = otherOperand(add, x);
  if (!cubic)
    return false;
  SmallVector<Value> terms;
  collectFactors(cubic, true, terms);
  double k = 1;
  SmallVector<Value> rest;
  for (Value t : terms) {
    if (auto s = splatValue(t))
      k *= *s;
    else
      rest.push_back(t);
  }
  if (std::fabs(k - 0.044715) > 1e-5)
    return false;
  if (rest.size() == 1)
    return isCube(rest[0], x);
  return rest.size() == 3 && llvm::all_of(rest, [&](Value t) { return t == x; });
}

/// 0.5 * x * (1 + erf(x / sqrt 2)) and 0.5 * x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct RaiseGelu : OpRewritePattern<mega::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::MulOp root, PatternRewriter &rewriter) const override {
    if (!isa<FloatType>(elementOf(root.getResult())))
      return failure();
    SmallVector<Value> factors, others;
    collectFactors(root.getResult(), true, factors);
    double constant = 1;
    for (Value f : factors) {
      if (auto s = splatValue(f))
        constant *= *s;
      else
        others.push_back(f);
    }
    if (others.size() != 2 || std::fabs(constant - 0.5) > 1e-4)
      return failure();
    for (int i = 0; i < 2; ++i) {
      Value x = others[i], onePlus = others[1 - i];
      auto add = onePlus.getDefiningOp<mega::AddOp>();
      if (!add || x.getType() != root.getType())
        continue;
      Value t;
      for (int j = 0; j < 2 && !t; ++j)
        if (isSplat(add->getOperand(j), 1.0, 1e-6))
          t = add->getOperand(1 - j);
      if (!t)
        continue;
      std::optional<mega::GeluApproximation> kind;
      if (auto erf = t.getDefiningOp<mega::ErfOp>(); erf && isErfArgument(erf.getInput(), x))
        kind = mega::GeluApproximation::none;
      else if (auto tanh = t.getDefiningOp<mega::TanhOp>();
               tanh && isTanhArgument(tanh.getInput(), x))
        kind = mega::GeluApproximation::tanh;
      if (!kind)
        continue;
      rewriter.replaceOpWithNewOp<mega::GeluOp>(root, root.getType(), *kind, x);
      return success();
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// Linear and embedding
//===----------------------------------------------------------------------===//

/// matmul(x, W) [+ b] with W a parameter: transpose(P [out, in]) or P [in, out] itself.
struct RaiseLinear : OpRewritePattern<mega::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::MatmulOp mm, PatternRewriter &rewriter) const override {
    Value x = mm.getLhs(), w = mm.getRhs();
    if (shapeOf(w).size() != 2 || shapeOf(x).size() < 2)
      return failure();
    auto t = w.getDefiningOp<mega::TransposeOp>();
    bool transposed = t && isParameter(t.getInput()) && t.getPerm().size() == 2 &&
                      t.getPerm()[0] == 1 && t.getPerm()[1] == 0;
    if (!transposed && !isParameter(w))
      return failure();
    int64_t out = shapeOf(w)[1];
    Operation *last = mm;
    Value bias;
    if (auto add = singleUser<mega::AddOp>(mm.getResult())) {
      Value other = stripBroadcast(otherOperand(add, mm.getResult()));
      if (other && other != mm.getResult() && shapeOf(other).size() == 1 &&
          shapeOf(other)[0] == out && elementOf(other) == elementOf(x)) {
        bias = other;
        last = add;
      }
    }
    rewriter.setInsertionPoint(last);
    Value weight = transposed ? t.getInput() : transposeThrough(rewriter, mm.getLoc(), w, {1, 0});
    auto linear = mega::LinearOp::create(rewriter, last->getLoc(), mm.getType(), x, weight, bias);
    rewriter.replaceOp(last, linear.getResult());
    return success();
  }
};

/// gather(P [V, h], ids) on axis 0 with P a parameter.
struct RaiseEmbedding : OpRewritePattern<mega::GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::GatherOp gather, PatternRewriter &rewriter) const override {
    Value table = gather.getData();
    if (gather.getAxis() != 0 || !isParameter(table) || shapeOf(table).size() != 2 ||
        !isa<FloatType>(elementOf(table)))
      return failure();
    rewriter.replaceOpWithNewOp<mega::EmbeddingOp>(gather, gather.getType(), table,
                                                   gather.getIndices(), ArrayAttr());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct InputRaisePass : impl::InputRaiseBase<InputRaisePass> {
  using InputRaiseBase::InputRaiseBase;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<FoldBroadcast, FoldReshape, FoldTranspose>(ctx);
    if (layerNorm)
      patterns.add<RaiseLayerNorm>(ctx);
    if (rmsNorm)
      patterns.add<RaiseRmsNorm>(ctx);
    if (gelu)
      patterns.add<RaiseGelu>(ctx);
    if (linear)
      patterns.add<RaiseLinear>(ctx);
    if (embedding)
      patterns.add<RaiseEmbedding>(ctx);
    if (attention)
      populateAttentionPattern(patterns);
    populateLlamaPatterns(patterns, silu, rope, gqa);
    // Each pattern makes ops no pattern matches again, so the rewrite converges; if it stopped at
    // the iteration limit the IR would still be valid with fewer ops raised: a warning.
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      getOperation().emitWarning() << "mega-input-raise stopped before raising everything";
  }
};

} // namespace

} // namespace megac::passes
