// The Llama-family patterns of mega-input-raise: SiLU (x * sigmoid(x) -> mega.silu), rotary
// embeddings (Hugging Face's rotate_half chain -> mega.rope) and grouped-query attention (the
// repeat_kv broadcast of keys and values before mega.attention, dropped: attention takes hk < h
// heads itself, so neither memory nor the tp split pays for the repeated heads).
#include "passes/input/RaiseUtils.h"

#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"

using namespace mlir;

namespace megac::passes {

namespace {

/// The operand of a binary `op` that is not `v` (the first when both are), or null.
Value otherOf(Operation *op, Value v) {
  if (op->getOperand(0) == v)
    return op->getOperand(1);
  if (op->getOperand(1) == v)
    return op->getOperand(0);
  return Value();
}

/// x * sigmoid(x), either order -> silu(x).
struct RaiseSilu : OpRewritePattern<mega::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::MulOp mul, PatternRewriter &rewriter) const override {
    for (int i = 0; i < 2; ++i) {
      auto sigmoid = mul->getOperand(i).getDefiningOp<mega::SigmoidOp>();
      if (sigmoid && sigmoid.getInput() == mul->getOperand(1 - i)) {
        rewriter.replaceOpWithNewOp<mega::SiluOp>(mul, mul.getType(), sigmoid.getInput());
        return success();
      }
    }
    return failure();
  }
};

/// The source of a unit-stride slice of the last dim [lo, hi) that keeps every other dim whole.
Value lastDimSliceOf(Value v, int64_t lo, int64_t hi) {
  auto slice = v.getDefiningOp<mega::SliceOp>();
  if (!slice)
    return Value();
  ArrayRef<int64_t> in = shapeOf(slice.getInput());
  size_t last = in.size() - 1;
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t start = d == last ? lo : 0, limit = d == last ? hi : in[d];
    if (slice.getStarts()[d] != start || slice.getLimits()[d] != limit ||
        slice.getStrides()[d] != 1)
      return Value();
  }
  return slice.getInput();
}

/// `r` is rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2]) on the last dim.
bool isRotateHalf(Value r, Value x) {
  auto concat = r.getDefiningOp<mega::ConcatOp>();
  ArrayRef<int64_t> shape = shapeOf(x);
  if (!concat || concat.getInputs().size() != 2 || shape.empty() || shape.back() % 2 != 0)
    return false;
  int64_t rank = static_cast<int64_t>(shape.size()), d = shape.back();
  int64_t axis = static_cast<int64_t>(concat.getAxis()); // an I64Attr; -1 counts from the end
  if (axis != rank - 1 && axis != -1)
    return false;
  auto neg = concat.getInputs()[0].getDefiningOp<mega::NegOp>();
  return neg && lastDimSliceOf(neg.getInput(), d / 2, d) == x &&
         lastDimSliceOf(concat.getInputs()[1], 0, d / 2) == x;
}

/// A table operand of the rope: `v` without its broadcast when what remains ends in the head
/// dim (the broadcast moves into the op), else `v` itself (x's shape, always valid).
Value ropeTable(Value v, ArrayRef<int64_t> x) {
  Value table = stripBroadcast(v);
  ArrayRef<int64_t> t = shapeOf(table);
  if (!t.empty() && t.back() == x.back() && mega::shape::checkBroadcastsTo(t, x).empty())
    return table;
  return v;
}

/// x * cos + rotate_half(x) * sin (terms and factors in any order) -> rope(x, cos, sin).
struct RaiseRope : OpRewritePattern<mega::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::AddOp add, PatternRewriter &rewriter) const override {
    if (!isa<FloatType>(cast<RankedTensorType>(add.getType()).getElementType()))
      return failure();
    for (int i = 0; i < 2; ++i) {
      auto direct = add->getOperand(i).getDefiningOp<mega::MulOp>();
      auto rotated = add->getOperand(1 - i).getDefiningOp<mega::MulOp>();
      if (!direct || !rotated)
        continue;
      for (int j = 0; j < 2; ++j) {
        Value r = rotated->getOperand(j), sin = rotated->getOperand(1 - j);
        auto concat = r.getDefiningOp<mega::ConcatOp>();
        auto neg = concat && concat.getInputs().size() == 2
                       ? concat.getInputs()[0].getDefiningOp<mega::NegOp>()
                       : mega::NegOp();
        auto slice = neg ? neg.getInput().getDefiningOp<mega::SliceOp>() : mega::SliceOp();
        Value x = slice ? slice.getInput() : Value();
        if (!x || x.getType() != add.getType() || !isRotateHalf(r, x))
          continue;
        Value cos = otherOf(direct, x);
        if (!cos || cos == x || cos.getType() != x.getType() || sin.getType() != x.getType())
          continue;
        ArrayRef<int64_t> shape = shapeOf(x);
        Value c = ropeTable(cos, shape), s = ropeTable(sin, shape);
        if (c.getType() != s.getType()) {
          c = cos;
          s = sin;
        }
        rewriter.replaceOpWithNewOp<mega::RopeOp>(add, add.getType(), x, c, s);
        return success();
      }
    }
    return failure();
  }
};

/// The hk-head tensor [b, hk, t, d] that `v` [b, h, t, d] repeats, each kv head n = h / hk
/// times in a row (repeat_kv: reshape to [b, hk, 1, t, d], broadcast to [b, hk, n, t, d],
/// reshape to [b, h, t, d]); null if `v` is not such a repeat.
Value unrepeatedHeads(Value v) {
  auto merge = v.getDefiningOp<mega::ReshapeOp>();
  auto expand = merge ? merge.getInput().getDefiningOp<mega::BroadcastOp>() : mega::BroadcastOp();
  auto split = expand ? expand.getInput().getDefiningOp<mega::ReshapeOp>() : mega::ReshapeOp();
  if (!split)
    return Value();
  ArrayRef<int64_t> out = shapeOf(v), wide = shapeOf(expand.getResult()),
                    narrow = shapeOf(split.getResult()), src = shapeOf(split.getInput());
  if (out.size() != 4 || wide.size() != 5 || narrow.size() != 5 || src.size() != 4)
    return Value();
  int64_t b = out[0], h = out[1], t = out[2], d = out[3], hk = src[1];
  bool ok = src[0] == b && src[2] == t && src[3] == d && hk > 0 && h % hk == 0 &&
            narrow == ArrayRef<int64_t>{b, hk, 1, t, d} &&
            wide == ArrayRef<int64_t>{b, hk, h / hk, t, d};
  return ok ? split.getInput() : Value();
}

/// mega.attention whose key and value ([b, t, h, d], transposed from [b, h, t, d]) repeat hk
/// kv heads -> the same attention on the hk heads.
struct RaiseGroupedQueryAttention : OpRewritePattern<mega::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(mega::AttentionOp op, PatternRewriter &rewriter) const override {
    auto underTranspose = [](Value v) -> Value {
      auto t = v.getDefiningOp<mega::TransposeOp>();
      if (!t || t.getPerm() != ArrayRef<int64_t>{0, 2, 1, 3})
        return Value();
      return unrepeatedHeads(t.getInput());
    };
    Value k = underTranspose(op.getKey()), v = underTranspose(op.getValue());
    if (!k || !v || shapeOf(k)[1] != shapeOf(v)[1])
      return failure();
    Location loc = op.getLoc();
    Value key = transposeThrough(rewriter, loc, k, {0, 2, 1, 3});
    Value value = transposeThrough(rewriter, loc, v, {0, 2, 1, 3});
    rewriter.modifyOpInPlace(op, [&] {
      op.getKeyMutable().assign(key);
      op.getValueMutable().assign(value);
    });
    return success();
  }
};

} // namespace

void populateLlamaPatterns(RewritePatternSet &patterns, bool silu, bool rope, bool gqa) {
  MLIRContext *ctx = patterns.getContext();
  if (silu)
    patterns.add<RaiseSilu>(ctx);
  if (rope)
    patterns.add<RaiseRope>(ctx);
  if (gqa)
    patterns.add<RaiseGroupedQueryAttention>(ctx);
}

} // namespace megac::passes
