// The sharding rule of every mega op (ir/ShardingRule.h): which factors make up each dim.
#include "ir/MegaOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace mega::sharding {
namespace {

using DimFactors = ShardingRule::DimFactors;
using TensorFactors = ShardingRule::TensorFactors;

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

/// The set-up every rule shares, so that a rule states only its factors: a known rule with how
/// partial sums pass through the op, the factors added in order (their ids), and at the end the
/// operands' and results' factors.
class RuleBuilder {
public:
  explicit RuleBuilder(PartialRule partial = PartialRule::none) {
    rule_.known = true;
    rule_.partial = partial;
  }

  /// A fresh factor of a dim of `size`.
  int add(int64_t size, FactorKind kind) { return rule_.addFactor(size, kind); }
  /// A fresh factor of a dim of `size`, none for a size-1 dim (there is nothing to split).
  DimFactors dim(int64_t size, FactorKind kind) {
    return size == 1 ? DimFactors{} : DimFactors{add(size, kind)};
  }
  /// A fresh factor per dim of `shape` (size-1 dims get none).
  TensorFactors fresh(ArrayRef<int64_t> shape, FactorKind kind) {
    TensorFactors t;
    for (int64_t n : shape)
      t.push_back(dim(n, kind));
    return t;
  }
  /// Marks the factor of vocab-parallel embedding and cross-entropy (ShardingRule::specialFactor).
  void special(int factor, bool resultPartial) {
    rule_.specialFactor = factor;
    rule_.specialResultPartial = resultPartial;
  }

  /// The rule, given the factors of each operand and each result.
  ShardingRule done(SmallVector<TensorFactors, 4> operands, SmallVector<TensorFactors, 2> results) {
    rule_.operands = std::move(operands);
    rule_.results = std::move(results);
    return std::move(rule_);
  }

private:
  ShardingRule rule_;
};

/// Every operand and result shares the result's dims (elementwise ops of one shape).
ShardingRule elementwise(Operation *op, PartialRule partial) {
  RuleBuilder rule(partial);
  TensorFactors t = rule.fresh(shapeOf(op->getResult(0)), FactorKind::parallel);
  SmallVector<TensorFactors, 4> operands;
  for (Value operand : op->getOperands())
    operands.push_back(shapeOf(operand) == shapeOf(op->getResult(0))
                           ? t
                           : rule.fresh(shapeOf(operand), FactorKind::whole));
  return rule.done(operands, {t});
}

/// Numpy broadcast, shapes aligned from the right: an input dim equal to the result's shares
/// its factor; a size-1 input dim has none.
ShardingRule broadcast(BroadcastOp op) {
  RuleBuilder rule(PartialRule::linear);
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  TensorFactors result = rule.fresh(out, FactorKind::parallel);
  TensorFactors operand(in.size());
  size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] == out[lead + d])
      operand[d] = result[lead + d];
  return rule.done({operand}, {result});
}

/// Groups of input and output dims with equal products; a group of one dim on either side is
/// the finer side's factors (how [b, s, h*d] <-> [b, s, h, d] turns a hidden split into a head
/// split: the merged dim's major factor is the heads). Other regroupings are whole.
ShardingRule reshape(ReshapeOp op) {
  RuleBuilder rule(PartialRule::linear);
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  TensorFactors operand(in.size()), result(out.size());
  size_t i = 0, o = 0;
  while (i < in.size() || o < out.size()) {
    // Size-1 dims carry no factor.
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (o < out.size() && out[o] == 1) {
      ++o;
      continue;
    }
    if (i >= in.size() || o >= out.size())
      break;
    size_t i0 = i, o0 = o;
    int64_t pi = in[i++], po = out[o++];
    while (pi != po) {
      if (pi < po && i < in.size())
        pi *= in[i++];
      else if (po < pi && o < out.size())
        po *= out[o++];
      else
        break;
    }
    size_t ni = i - i0, no = o - o0;
    if (ni == 1 || no == 1) {
      // One side is a single dim: the other side's dims are its factors.
      bool splitIn = ni == 1;
      ArrayRef<int64_t> fine = splitIn ? out.slice(o0, no) : in.slice(i0, ni);
      DimFactors merged;
      for (size_t k = 0; k < fine.size(); ++k) {
        if (fine[k] == 1)
          continue;
        int f = rule.add(fine[k], FactorKind::parallel);
        merged.push_back(f);
        (splitIn ? result[o0 + k] : operand[i0 + k]) = DimFactors{f};
      }
      (splitIn ? operand[i0] : result[o0]) = merged;
    } else {
      for (size_t k = 0; k < ni; ++k)
        operand[i0 + k] = DimFactors{rule.add(in[i0 + k], FactorKind::whole)};
      for (size_t k = 0; k < no; ++k)
        result[o0 + k] = DimFactors{rule.add(out[o0 + k], FactorKind::whole)};
    }
  }
  return rule.done({operand}, {result});
}

ShardingRule transpose(TransposeOp op) {
  RuleBuilder rule(PartialRule::linear);
  TensorFactors in = rule.fresh(shapeOf(op.getInput()), FactorKind::parallel);
  TensorFactors out;
  for (int64_t p : op.getPerm())
    out.push_back(in[p]);
  return rule.done({in}, {out});
}

/// Dims that the slice keeps whole (same size, stride 1, from 0) stay shardable.
ShardingRule slice(SliceOp op) {
  RuleBuilder rule(PartialRule::linear);
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  TensorFactors operand, result;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == out[d] && in[d] != 1) {
      int f = rule.add(in[d], FactorKind::parallel);
      operand.push_back({f});
      result.push_back({f});
    } else {
      operand.push_back(rule.dim(in[d], FactorKind::whole));
      result.push_back(rule.dim(out[d], FactorKind::whole));
    }
  }
  return rule.done({operand}, {result});
}

ShardingRule concat(ConcatOp op) {
  RuleBuilder rule(PartialRule::sum);
  ArrayRef<int64_t> out = shapeOf(op.getResult());
  int64_t axis = op.getAxisAttr().getInt();
  if (axis < 0)
    axis += static_cast<int64_t>(out.size());
  TensorFactors result = rule.fresh(out, FactorKind::parallel);
  result[axis] = {rule.add(out[axis], FactorKind::whole)};
  SmallVector<TensorFactors, 4> operands;
  for (Value v : op.getInputs()) {
    TensorFactors t = result;
    t[axis] = {rule.add(shapeOf(v)[axis], FactorKind::whole)};
    operands.push_back(t);
  }
  return rule.done(operands, {result});
}

ShardingRule reduce(ReduceOp op) {
  bool linear = op.getKind() == ReduceKind::sum || op.getKind() == ReduceKind::mean;
  RuleBuilder rule(linear ? PartialRule::linear : PartialRule::none);
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  TensorFactors operand, result;
  llvm::SmallDenseSet<int64_t> reduced(op.getAxes().begin(), op.getAxes().end());
  for (size_t d = 0; d < in.size(); ++d) {
    bool r = reduced.contains(static_cast<int64_t>(d));
    FactorKind kind =
        !r ? FactorKind::parallel : (linear ? FactorKind::reduction : FactorKind::whole);
    DimFactors f = rule.dim(in[d], kind);
    operand.push_back(f);
    if (!r)
      result.push_back(f);
    else if (op.getKeepDims())
      result.push_back({});
  }
  return rule.done({operand}, {result});
}

/// A rule whose operand and result dims share factors by position, except the listed dims,
/// which are whole (normalized dims, softmax axes).
ShardingRule allButWhole(Operation *op, ArrayRef<int64_t> wholeDims) {
  ShardingRule rule = elementwise(op, PartialRule::none);
  for (int64_t d : wholeDims)
    for (int f : rule.results[0][d])
      rule.factorKinds[f] = FactorKind::whole;
  return rule;
}

/// x [..., k] W [n, k] (+ b [n]) -> [..., n]: k is a reduction, n and the rows parallel.
ShardingRule linear(LinearOp op) {
  RuleBuilder rule;
  ArrayRef<int64_t> x = shapeOf(op.getInput()), w = shapeOf(op.getWeight());
  TensorFactors rows = rule.fresh(x.drop_back(), FactorKind::parallel);
  int k = rule.add(w[1], FactorKind::reduction);
  int n = rule.add(w[0], FactorKind::parallel);
  TensorFactors input = rows, result = rows;
  input.push_back({k});
  result.push_back({n});
  SmallVector<TensorFactors, 4> operands{input, {{n}, {k}}};
  if (op.getBias())
    operands.push_back({{n}});
  return rule.done(operands, {result});
}

/// [..., m, k] x [..., k, n]: batch dims aligned from the right, shared where equal. A
/// transposed operand (transpose_lhs: [..., k, m], transpose_rhs: [..., n, k]) has its last two
/// factors swapped. An accumulator has the result's factors; k is then whole and partial sums
/// are resolved first, since every rank adding the accumulator to a partial product would count
/// it once per rank.
ShardingRule matmul(MatmulOp op) {
  bool accumulates = static_cast<bool>(op.getAccumulate());
  RuleBuilder rule(accumulates ? PartialRule::none : PartialRule::product);
  ArrayRef<int64_t> a = shapeOf(op.getLhs()), b = shapeOf(op.getRhs()), r = shapeOf(op.getResult());
  TensorFactors result = rule.fresh(r.drop_back(2), FactorKind::parallel);
  auto batchOf = [&](ArrayRef<int64_t> s) {
    TensorFactors t;
    size_t lead = result.size() - (s.size() - 2);
    for (size_t d = 0; d + 2 < s.size(); ++d)
      t.push_back(s[d] == r[lead + d] ? result[lead + d] : DimFactors{});
    return t;
  };
  bool tl = op.getTransposeLhs(), tr = op.getTransposeRhs();
  int m = rule.add(a[tl ? a.size() - 1 : a.size() - 2], FactorKind::parallel);
  int k = rule.add(tl ? a[a.size() - 2] : a.back(),
                   accumulates ? FactorKind::whole : FactorKind::reduction);
  int n = rule.add(tr ? b[b.size() - 2] : b.back(), FactorKind::parallel);
  TensorFactors lhs = batchOf(a), rhs = batchOf(b);
  auto lastTwo = [](TensorFactors &t, int first, int second, bool swapped) {
    t.push_back({swapped ? second : first});
    t.push_back({swapped ? first : second});
  };
  lastTwo(lhs, m, k, tl);
  lastTwo(rhs, k, n, tr);
  result.push_back({m});
  result.push_back({n});
  SmallVector<TensorFactors, 4> operands{lhs, rhs};
  if (accumulates)
    operands.push_back(result);
  return rule.done(operands, {result});
}

/// table [V, h], ids [...] -> [..., h]; V is special (vocab-parallel: masked lookup, partial).
ShardingRule embedding(EmbeddingOp op) {
  RuleBuilder rule;
  ArrayRef<int64_t> table = shapeOf(op.getTable());
  TensorFactors ids = rule.fresh(shapeOf(op.getIds()), FactorKind::parallel);
  int v = rule.add(table[0], FactorKind::whole);
  int h = rule.add(table[1], FactorKind::parallel);
  rule.special(v, /*resultPartial=*/true);
  TensorFactors result = ids;
  result.push_back({h});
  return rule.done({{{v}, {h}}, ids}, {result});
}

/// data [d..., n, e...] gathered on `axis` (the n dim) by indices [i...] -> [d..., i..., e...]:
/// the data's other dims and the indices' dims are parallel (context parallelism gathers the
/// sequence's permutation split over cp, docs/context-parallel.md); the gathered dim is whole.
ShardingRule gather(GatherOp op) {
  RuleBuilder rule;
  ArrayRef<int64_t> data = shapeOf(op.getData());
  int64_t axis = op.getAxis();
  if (axis < 0)
    axis += static_cast<int64_t>(data.size());
  if (axis < 0 || axis >= static_cast<int64_t>(data.size()))
    return ShardingRule{}; // the verifier's error; no split
  TensorFactors d = rule.fresh(data, FactorKind::parallel);
  d[axis] = rule.dim(data[axis], FactorKind::whole);
  TensorFactors ids = rule.fresh(shapeOf(op.getIndices()), FactorKind::parallel);
  TensorFactors result(d.begin(), d.begin() + axis);
  result.append(ids.begin(), ids.end());
  result.append(d.begin() + axis + 1, d.end());
  return rule.done({d, ids}, {result});
}

/// logits [..., V], labels [...] -> [...]; V is special (vocab-parallel cross-entropy).
ShardingRule crossEntropy(CrossEntropyOp op) {
  RuleBuilder rule;
  TensorFactors rows = rule.fresh(shapeOf(op.getLabels()), FactorKind::parallel);
  int v = rule.add(shapeOf(op.getLogits()).back(), FactorKind::whole);
  rule.special(v, /*resultPartial=*/false);
  TensorFactors logits = rows;
  logits.push_back({v});
  return rule.done({logits, rows}, {rows});
}

/// q [b, s, h, d], k [b, t, g, d], v [b, t, g, dv] (+ mask, broadcast to [b, h, s, t]) ->
/// [b, s, h, dv]. Heads split as (g, h/g) so grouped-query attention shards by kv group. Without
/// `causal` every query row is independent of the others given all keys: s is parallel
/// (context parallelism splits it, masking causally by the query and key `positions`, which
/// follow s and t); `causal` counts query positions from 0 here, so s stays whole. A ring
/// attention (mega.ring_axes) has one sequence factor for queries and keys: k and v stay split
/// with q (the kernel passes the blocks around the ring).
ShardingRule attention(AttentionOp op) {
  RuleBuilder rule;
  ArrayRef<int64_t> q = shapeOf(op.getQuery()), k = shapeOf(op.getKey()),
                    v = shapeOf(op.getValue());
  int b = rule.add(q[0], FactorKind::parallel);
  int s = rule.add(q[1], op.getCausal() ? FactorKind::whole : FactorKind::parallel);
  bool ring = op->hasAttr(kRingAxesAttr) && q[1] == k[1];
  int t = ring ? s : rule.add(k[1], FactorKind::whole);
  int g = rule.add(k[2], FactorKind::parallel);
  DimFactors heads{g};
  if (q[2] != k[2])
    heads.push_back(rule.add(q[2] / k[2], FactorKind::parallel));
  int d = rule.add(q[3], FactorKind::whole);
  int dv = rule.add(v[3], FactorKind::parallel);
  SmallVector<TensorFactors, 4> operands{
      {{b}, {s}, heads, {d}}, {{b}, {t}, {g}, {d}}, {{b}, {t}, {g}, {dv}}};
  if (Value mask = op.getMask()) {
    ArrayRef<int64_t> m = shapeOf(mask);
    int64_t full[4] = {q[0], q[2], q[1], k[1]};
    DimFactors byDim[4] = {{b}, heads, {s}, {t}};
    TensorFactors mf;
    size_t lead = 4 - m.size();
    for (size_t i = 0; i < m.size(); ++i)
      mf.push_back(m[i] == full[lead + i] && m[i] != 1 ? byDim[lead + i] : DimFactors{});
    operands.push_back(mf);
  }
  if (op.getQueryPositions()) { // follow the query's and the key's sequence dims
    operands.push_back({{s}});
    operands.push_back({{t}});
  }
  return rule.done(operands, {{{b}, {s}, heads, {dv}}});
}

/// x [..., d], cos and sin broadcasting to it from the right: every dim of x but the rotated
/// last one is parallel (batch, heads, sequence); a table dim equal to x's shares its factor.
ShardingRule rope(RopeOp op) {
  RuleBuilder rule;
  ArrayRef<int64_t> x = shapeOf(op.getInput()), table = shapeOf(op.getCos());
  TensorFactors t = rule.fresh(x.drop_back(), FactorKind::parallel);
  t.push_back({rule.add(x.back(), FactorKind::whole)});
  TensorFactors tables;
  size_t lead = x.size() - table.size();
  for (size_t i = 0; i < table.size(); ++i)
    tables.push_back(table[i] == x[lead + i] && table[i] != 1 ? t[lead + i] : DimFactors{});
  return rule.done({t, tables, tables}, {t});
}

/// Mixture of experts (ir/MegaMoeOps.td): routing weights w [t..., E], routed tensors
/// [E, t..., h]. Tokens and features are parallel everywhere; the expert dim is parallel where
/// the op keeps it (splitting it is expert parallelism) and a reduction where the op sums over
/// it (moe_combine).
struct MoeRule : RuleBuilder {
  TensorFactors tokens;
  DimFactors expert;

  /// The tokens' and the expert dim's factors, from the routing weights w [t..., E].
  MoeRule(Value weights, FactorKind tokenKind, FactorKind expertKind)
      : RuleBuilder(PartialRule::product) {
    ArrayRef<int64_t> w = shapeOf(weights);
    tokens = fresh(w.drop_back(), tokenKind);
    expert = dim(w.back(), expertKind);
  }
  /// The factors of the last dim of `v`.
  DimFactors feature(Value v, FactorKind kind) { return dim(shapeOf(v).back(), kind); }

  /// [E, t..., feature].
  TensorFactors routed(const DimFactors &feature) const {
    TensorFactors t{expert};
    llvm::append_range(t, tokens);
    t.push_back(feature);
    return t;
  }
  /// [t..., last].
  TensorFactors perToken(const DimFactors &last) const {
    TensorFactors t = tokens;
    t.push_back(last);
    return t;
  }
};

ShardingRule moeDispatch(MoeDispatchOp op) {
  MoeRule rule(op.getWeights(), FactorKind::parallel, FactorKind::parallel);
  DimFactors h = rule.feature(op.getInput(), FactorKind::parallel);
  return rule.done({rule.perToken(h), rule.perToken(rule.expert)}, {rule.routed(h)});
}

ShardingRule moeCombine(MoeCombineOp op) {
  MoeRule rule(op.getWeights(), FactorKind::parallel, FactorKind::reduction);
  DimFactors h = rule.feature(op.getInput(), FactorKind::parallel);
  return rule.done({rule.routed(h), rule.perToken(rule.expert)}, {rule.perToken(h)});
}

ShardingRule moeMatmul(MoeMatmulOp op) {
  MoeRule rule(op.getWeights(), FactorKind::parallel, FactorKind::parallel);
  ArrayRef<int64_t> w = shapeOf(op.getWeight());
  bool transposed = op.getTransposeWeight();
  DimFactors in = rule.dim(w[transposed ? 1 : 2], FactorKind::reduction);
  DimFactors out = rule.dim(w[transposed ? 2 : 1], FactorKind::parallel);
  TensorFactors weight =
      transposed ? TensorFactors{rule.expert, in, out} : TensorFactors{rule.expert, out, in};
  return rule.done({rule.routed(in), weight, rule.perToken(rule.expert)}, {rule.routed(out)});
}

ShardingRule moeRowDot(MoeRowDotOp op) {
  MoeRule rule(op.getWeights(), FactorKind::parallel, FactorKind::parallel);
  DimFactors h = rule.feature(op.getOther(), FactorKind::reduction);
  return rule.done({rule.routed(h), rule.perToken(h), rule.perToken(rule.expert)},
                   {rule.perToken(rule.expert)});
}

/// The weight gradient sums over the tokens: they are the reduction; each expert's is parallel.
/// An accumulator has the result's factors; the tokens are then whole (as for matmul's k: every
/// rank adding the accumulator to a partial sum would count it once per rank).
ShardingRule moeMatmulWeightGrad(MoeMatmulWeightGradOp op) {
  bool accumulates = static_cast<bool>(op.getAccumulate());
  MoeRule rule(op.getWeights(), accumulates ? FactorKind::whole : FactorKind::reduction,
               FactorKind::parallel);
  DimFactors p = rule.feature(op.getLhs(), FactorKind::parallel);
  DimFactors q = rule.feature(op.getRhs(), FactorKind::parallel);
  TensorFactors result{rule.expert, p, q};
  SmallVector<TensorFactors, 4> operands{rule.routed(p), rule.routed(q),
                                         rule.perToken(rule.expert)};
  if (accumulates)
    operands.push_back(result);
  return rule.done(operands, {result});
}

/// Identity on the input (every dim parallel, partial sums pass); the scalar aux has no dims
/// and stays as it is, a partial sum included: each rank seeds its own share's gradient.
ShardingRule addAuxLoss(AddAuxLossOp op) {
  RuleBuilder rule(PartialRule::auxiliary);
  TensorFactors t = rule.fresh(shapeOf(op.getInput()), FactorKind::parallel);
  return rule.done({t, {}}, {t});
}

} // namespace

ShardingRule ruleOf(Operation *op) {
  // Elementwise ops by their traits (ir/MegaTraits.h), not by a list.
  if (op->hasTrait<mega::OpTrait::Elementwise>()) {
    PartialRule partial = op->hasTrait<mega::OpTrait::PartialLinear>() ? PartialRule::linear
                          : op->hasTrait<mega::OpTrait::PartialSum>()  ? PartialRule::sum
                                                                       : PartialRule::none;
    return elementwise(op, partial);
  }
  return llvm::TypeSwitch<Operation *, ShardingRule>(op)
      .Case<ConstantOp>([](ConstantOp o) {
        RuleBuilder rule;
        TensorFactors t = rule.fresh(shapeOf(o.getResult()), FactorKind::parallel);
        return rule.done({}, {t});
      })
      .Case<BroadcastOp>(broadcast)
      .Case<ReshapeOp>(reshape)
      .Case<TransposeOp>(transpose)
      .Case<SliceOp>(slice)
      .Case<ConcatOp>(concat)
      .Case<ReduceOp>(reduce)
      .Case<SoftmaxOp>([](SoftmaxOp o) {
        int64_t rank = static_cast<int64_t>(shapeOf(o.getInput()).size());
        int64_t axis = o.getAxisAttr().getInt();
        if (axis < 0)
          axis += rank;
        return allButWhole(o, {axis});
      })
      .Case<LayerNormOp, RmsNormOp>([](Operation *o) {
        RuleBuilder rule;
        ArrayRef<int64_t> x = shapeOf(o->getOperand(0));
        TensorFactors t = rule.fresh(x.drop_back(), FactorKind::parallel);
        int h = rule.add(x.back(), FactorKind::whole);
        t.push_back({h});
        SmallVector<TensorFactors, 4> operands{t};
        operands.append(o->getNumOperands() - 1, TensorFactors{{h}});
        return rule.done(operands, {t});
      })
      .Case<LinearOp>(linear)
      .Case<MatmulOp>(matmul)
      .Case<EmbeddingOp>(embedding)
      .Case<CrossEntropyOp>(crossEntropy)
      .Case<GatherOp>(gather)
      .Case<AttentionOp>(attention)
      .Case<RopeOp>(rope)
      .Case<TopKMaskOp>([](TopKMaskOp o) {
        return allButWhole(o, {static_cast<int64_t>(shapeOf(o.getInput()).size()) - 1});
      })
      .Case<MoeDispatchOp>(moeDispatch)
      .Case<MoeCombineOp>(moeCombine)
      .Case<MoeMatmulOp>(moeMatmul)
      .Case<MoeRowDotOp>(moeRowDot)
      .Case<MoeMatmulWeightGradOp>(moeMatmulWeightGrad)
      .Case<AddAuxLossOp>(addAuxLoss)
      .Default([](Operation *) { return ShardingRule{}; });
}

} // namespace mega::sharding
