// The sharding rule of every mega op (ir/ShardingRule.h): which factors make up each dim.
#include "ir/MegaOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace mega::sharding {
namespace {

using DimFactors = ShardingRule::DimFactors;
using TensorFactors = ShardingRule::TensorFactors;

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

/// A fresh factor per dim of `shape` (size-1 dims get none: there is nothing to split).
TensorFactors freshFactors(ShardingRule &rule, ArrayRef<int64_t> shape, FactorKind kind) {
  TensorFactors t;
  for (int64_t n : shape)
    t.push_back(n == 1 ? DimFactors{} : DimFactors{rule.addFactor(n, kind)});
  return t;
}

/// Every operand and result shares the result's dims (elementwise ops of one shape).
ShardingRule elementwise(Operation *op, PartialRule partial) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = partial;
  TensorFactors t = freshFactors(rule, shapeOf(op->getResult(0)), FactorKind::parallel);
  for (size_t i = 0; i < op->getNumOperands(); ++i)
    rule.operands.push_back(shapeOf(op->getOperand(i)) == shapeOf(op->getResult(0))
                                ? t
                                : freshFactors(rule, shapeOf(op->getOperand(i)),
                                               FactorKind::whole));
  rule.results.push_back(t);
  return rule;
}

/// Numpy broadcast, shapes aligned from the right: an input dim equal to the result's shares
/// its factor; a size-1 input dim has none.
ShardingRule broadcast(BroadcastOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::linear;
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  TensorFactors result = freshFactors(rule, out, FactorKind::parallel);
  TensorFactors operand(in.size());
  size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] == out[lead + d])
      operand[d] = result[lead + d];
  rule.operands.push_back(operand);
  rule.results.push_back(result);
  return rule;
}

/// Groups of input and output dims with equal products; a group of one dim on either side is
/// the finer side's factors (how [b, s, h*d] <-> [b, s, h, d] turns a hidden split into a head
/// split: the merged dim's major factor is the heads). Other regroupings are whole.
ShardingRule reshape(ReshapeOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::linear;
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
        int f = rule.addFactor(fine[k], FactorKind::parallel);
        merged.push_back(f);
        (splitIn ? result[o0 + k] : operand[i0 + k]) = DimFactors{f};
      }
      (splitIn ? operand[i0] : result[o0]) = merged;
    } else {
      for (size_t k = 0; k < ni; ++k)
        operand[i0 + k] = DimFactors{rule.addFactor(in[i0 + k], FactorKind::whole)};
      for (size_t k = 0; k < no; ++k)
        result[o0 + k] = DimFactors{rule.addFactor(out[o0 + k], FactorKind::whole)};
    }
  }
  rule.operands.push_back(operand);
  rule.results.push_back(result);
  return rule;
}

ShardingRule transpose(TransposeOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::linear;
  TensorFactors in = freshFactors(rule, shapeOf(op.getInput()), FactorKind::parallel);
  TensorFactors out;
  for (int64_t p : op.getPerm())
    out.push_back(in[p]);
  rule.operands.push_back(in);
  rule.results.push_back(out);
  return rule;
}

/// Dims that the slice keeps whole (same size, stride 1, from 0) stay shardable.
ShardingRule slice(SliceOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::linear;
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  TensorFactors operand, result;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == out[d] && in[d] != 1) {
      int f = rule.addFactor(in[d], FactorKind::parallel);
      operand.push_back({f});
      result.push_back({f});
    } else {
      operand.push_back(in[d] == 1 ? DimFactors{}
                                   : DimFactors{rule.addFactor(in[d], FactorKind::whole)});
      result.push_back(out[d] == 1 ? DimFactors{}
                                   : DimFactors{rule.addFactor(out[d], FactorKind::whole)});
    }
  }
  rule.operands.push_back(operand);
  rule.results.push_back(result);
  return rule;
}

ShardingRule concat(ConcatOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::sum;
  ArrayRef<int64_t> out = shapeOf(op.getResult());
  int64_t axis = op.getAxisAttr().getInt();
  if (axis < 0)
    axis += static_cast<int64_t>(out.size());
  TensorFactors result = freshFactors(rule, out, FactorKind::parallel);
  result[axis] = {rule.addFactor(out[axis], FactorKind::whole)};
  for (Value v : op.getInputs()) {
    TensorFactors t = result;
    t[axis] = {rule.addFactor(shapeOf(v)[axis], FactorKind::whole)};
    rule.operands.push_back(t);
  }
  rule.results.push_back(result);
  return rule;
}

ShardingRule reduce(ReduceOp op) {
  ShardingRule rule;
  rule.known = true;
  bool linear = op.getKind() == ReduceKind::sum || op.getKind() == ReduceKind::mean;
  rule.partial = linear ? PartialRule::linear : PartialRule::none;
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  TensorFactors operand, result;
  llvm::SmallDenseSet<int64_t> reduced(op.getAxes().begin(), op.getAxes().end());
  for (size_t d = 0; d < in.size(); ++d) {
    bool r = reduced.contains(static_cast<int64_t>(d));
    FactorKind kind = !r ? FactorKind::parallel
                         : (linear ? FactorKind::reduction : FactorKind::whole);
    DimFactors f = in[d] == 1 ? DimFactors{} : DimFactors{rule.addFactor(in[d], kind)};
    operand.push_back(f);
    if (!r)
      result.push_back(f);
    else if (op.getKeepDims())
      result.push_back({});
  }
  rule.operands.push_back(operand);
  rule.results.push_back(result);
  return rule;
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
  ShardingRule rule;
  rule.known = true;
  ArrayRef<int64_t> x = shapeOf(op.getInput()), w = shapeOf(op.getWeight());
  TensorFactors rows = freshFactors(rule, x.drop_back(), FactorKind::parallel);
  int k = rule.addFactor(w[1], FactorKind::reduction);
  int n = rule.addFactor(w[0], FactorKind::parallel);
  TensorFactors input = rows, result = rows;
  input.push_back({k});
  result.push_back({n});
  rule.operands.push_back(input);
  rule.operands.push_back({{n}, {k}});
  if (op.getBias())
    rule.operands.push_back({{n}});
  rule.results.push_back(result);
  return rule;
}

/// [..., m, k] x [..., k, n]: batch dims aligned from the right, shared where equal.
ShardingRule matmul(MatmulOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::product;
  ArrayRef<int64_t> a = shapeOf(op.getLhs()), b = shapeOf(op.getRhs()), r = shapeOf(op.getResult());
  TensorFactors result = freshFactors(rule, r.drop_back(2), FactorKind::parallel);
  auto batchOf = [&](ArrayRef<int64_t> s) {
    TensorFactors t;
    size_t lead = result.size() - (s.size() - 2);
    for (size_t d = 0; d + 2 < s.size(); ++d)
      t.push_back(s[d] == r[lead + d] ? result[lead + d] : DimFactors{});
    return t;
  };
  int m = rule.addFactor(a[a.size() - 2], FactorKind::parallel);
  int k = rule.addFactor(a.back(), FactorKind::reduction);
  int n = rule.addFactor(b.back(), FactorKind::parallel);
  TensorFactors lhs = batchOf(a), rhs = batchOf(b);
  lhs.push_back({m});
  lhs.push_back({k});
  rhs.push_back({k});
  rhs.push_back({n});
  result.push_back({m});
  result.push_back({n});
  rule.operands = {lhs, rhs};
  rule.results = {result};
  return rule;
}

/// table [V, h], ids [...] -> [..., h]; V is special (vocab-parallel: masked lookup, partial).
ShardingRule embedding(EmbeddingOp op) {
  ShardingRule rule;
  rule.known = true;
  ArrayRef<int64_t> table = shapeOf(op.getTable());
  TensorFactors ids = freshFactors(rule, shapeOf(op.getIds()), FactorKind::parallel);
  int v = rule.addFactor(table[0], FactorKind::whole);
  int h = rule.addFactor(table[1], FactorKind::parallel);
  rule.specialFactor = v;
  rule.specialResultPartial = true;
  TensorFactors result = ids;
  result.push_back({h});
  rule.operands = {{{v}, {h}}, ids};
  rule.results = {result};
  return rule;
}

/// logits [..., V], labels [...] -> [...]; V is special (vocab-parallel cross-entropy).
ShardingRule crossEntropy(CrossEntropyOp op) {
  ShardingRule rule;
  rule.known = true;
  TensorFactors rows = freshFactors(rule, shapeOf(op.getLabels()), FactorKind::parallel);
  int v = rule.addFactor(shapeOf(op.getLogits()).back(), FactorKind::whole);
  rule.specialFactor = v;
  TensorFactors logits = rows;
  logits.push_back({v});
  rule.operands = {logits, rows};
  rule.results = {rows};
  return rule;
}

/// q [b, s, h, d], k [b, t, g, d], v [b, t, g, dv] (+ mask, broadcast to [b, h, s, t]) ->
/// [b, s, h, dv]. Heads split as (g, h/g) so grouped-query attention shards by kv group.
ShardingRule attention(AttentionOp op) {
  ShardingRule rule;
  rule.known = true;
  ArrayRef<int64_t> q = shapeOf(op.getQuery()), k = shapeOf(op.getKey()),
                    v = shapeOf(op.getValue());
  int b = rule.addFactor(q[0], FactorKind::parallel);
  int s = rule.addFactor(q[1], FactorKind::whole);
  int t = rule.addFactor(k[1], FactorKind::whole);
  int g = rule.addFactor(k[2], FactorKind::parallel);
  DimFactors heads{g};
  if (q[2] != k[2])
    heads.push_back(rule.addFactor(q[2] / k[2], FactorKind::parallel));
  int d = rule.addFactor(q[3], FactorKind::whole);
  int dv = rule.addFactor(v[3], FactorKind::parallel);
  rule.operands = {{{b}, {s}, heads, {d}}, {{b}, {t}, {g}, {d}}, {{b}, {t}, {g}, {dv}}};
  if (Value mask = op.getMask()) {
    ArrayRef<int64_t> m = shapeOf(mask);
    int64_t full[4] = {q[0], q[2], q[1], k[1]};
    DimFactors byDim[4] = {{b}, heads, {s}, {t}};
    TensorFactors mf;
    size_t lead = 4 - m.size();
    for (size_t i = 0; i < m.size(); ++i)
      mf.push_back(m[i] == full[lead + i] && m[i] != 1 ? byDim[lead + i] : DimFactors{});
    rule.operands.push_back(mf);
  }
  rule.results = {{{b}, {s}, heads, {dv}}};
  return rule;
}

/// x [..., d], cos and sin broadcasting to it from the right: every dim of x but the rotated
/// last one is parallel (batch, heads, sequence); a table dim equal to x's shares its factor.
ShardingRule rope(RopeOp op) {
  ShardingRule rule;
  rule.known = true;
  ArrayRef<int64_t> x = shapeOf(op.getInput()), table = shapeOf(op.getCos());
  TensorFactors t = freshFactors(rule, x.drop_back(), FactorKind::parallel);
  t.push_back({rule.addFactor(x.back(), FactorKind::whole)});
  TensorFactors tables;
  size_t lead = x.size() - table.size();
  for (size_t i = 0; i < table.size(); ++i)
    tables.push_back(table[i] == x[lead + i] && table[i] != 1 ? t[lead + i] : DimFactors{});
  rule.operands = {t, tables, tables};
  rule.results = {t};
  return rule;
}

/// Mixture of experts (ir/MegaMoeOps.td): routing weights w [t..., E], routed tensors
/// [E, t..., h]. Tokens and features are parallel everywhere; the expert dim is parallel where
/// the op keeps it (splitting it is expert parallelism) and a reduction where the op sums over
/// it (moe_combine).
struct MoeFactors {
  TensorFactors tokens;
  DimFactors expert;
};

MoeFactors moeFactors(ShardingRule &rule, Value weights, FactorKind expertKind) {
  ArrayRef<int64_t> w = shapeOf(weights);
  MoeFactors f{freshFactors(rule, w.drop_back(), FactorKind::parallel), {}};
  if (w.back() != 1)
    f.expert = {rule.addFactor(w.back(), expertKind)};
  return f;
}

TensorFactors routed(const MoeFactors &f, DimFactors feature) {
  TensorFactors t{f.expert};
  llvm::append_range(t, f.tokens);
  t.push_back(feature);
  return t;
}

TensorFactors perToken(const MoeFactors &f, DimFactors last) {
  TensorFactors t = f.tokens;
  t.push_back(last);
  return t;
}

DimFactors factorOf(ShardingRule &rule, int64_t size, FactorKind kind) {
  return size == 1 ? DimFactors{} : DimFactors{rule.addFactor(size, kind)};
}

ShardingRule moeDispatch(MoeDispatchOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::product;
  MoeFactors f = moeFactors(rule, op.getWeights(), FactorKind::parallel);
  DimFactors h = factorOf(rule, shapeOf(op.getInput()).back(), FactorKind::parallel);
  rule.operands = {perToken(f, h), perToken(f, f.expert)};
  rule.results = {routed(f, h)};
  return rule;
}

ShardingRule moeCombine(MoeCombineOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::product;
  MoeFactors f = moeFactors(rule, op.getWeights(), FactorKind::reduction);
  DimFactors h = factorOf(rule, shapeOf(op.getInput()).back(), FactorKind::parallel);
  rule.operands = {routed(f, h), perToken(f, f.expert)};
  rule.results = {perToken(f, h)};
  return rule;
}

ShardingRule moeMatmul(MoeMatmulOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::product;
  MoeFactors f = moeFactors(rule, op.getWeights(), FactorKind::parallel);
  ArrayRef<int64_t> w = shapeOf(op.getWeight());
  bool transposed = op.getTransposeWeight();
  DimFactors in = factorOf(rule, w[transposed ? 1 : 2], FactorKind::reduction);
  DimFactors out = factorOf(rule, w[transposed ? 2 : 1], FactorKind::parallel);
  TensorFactors weight = transposed ? TensorFactors{f.expert, in, out}
                                    : TensorFactors{f.expert, out, in};
  rule.operands = {routed(f, in), weight, perToken(f, f.expert)};
  rule.results = {routed(f, out)};
  return rule;
}

ShardingRule moeRowDot(MoeRowDotOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::product;
  MoeFactors f = moeFactors(rule, op.getWeights(), FactorKind::parallel);
  DimFactors h = factorOf(rule, shapeOf(op.getOther()).back(), FactorKind::reduction);
  rule.operands = {routed(f, h), perToken(f, h), perToken(f, f.expert)};
  rule.results = {perToken(f, f.expert)};
  return rule;
}

ShardingRule moeMatmulWeightGrad(MoeMatmulWeightGradOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::product;
  ArrayRef<int64_t> w = shapeOf(op.getWeights());
  MoeFactors f{freshFactors(rule, w.drop_back(), FactorKind::reduction), {}};
  if (w.back() != 1)
    f.expert = {rule.addFactor(w.back(), FactorKind::parallel)};
  DimFactors p = factorOf(rule, shapeOf(op.getLhs()).back(), FactorKind::parallel);
  DimFactors q = factorOf(rule, shapeOf(op.getRhs()).back(), FactorKind::parallel);
  rule.operands = {routed(f, p), routed(f, q), perToken(f, f.expert)};
  rule.results = {{f.expert, p, q}};
  return rule;
}

/// Identity on the input (every dim parallel, partial sums pass); the scalar aux has no dims
/// and stays as it is, a partial sum included: each rank seeds its own share's gradient.
ShardingRule addAuxLoss(AddAuxLossOp op) {
  ShardingRule rule;
  rule.known = true;
  rule.partial = PartialRule::auxiliary;
  TensorFactors t = freshFactors(rule, shapeOf(op.getInput()), FactorKind::parallel);
  rule.operands = {t, {}};
  rule.results = {t};
  return rule;
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
        ShardingRule rule;
        rule.known = true;
        rule.results.push_back(freshFactors(rule, shapeOf(o.getResult()), FactorKind::parallel));
        return rule;
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
        ShardingRule rule;
        rule.known = true;
        ArrayRef<int64_t> x = shapeOf(o->getOperand(0));
        TensorFactors t = freshFactors(rule, x.drop_back(), FactorKind::parallel);
        int h = rule.addFactor(x.back(), FactorKind::whole);
        t.push_back({h});
        rule.operands.push_back(t);
        for (size_t i = 1; i < o->getNumOperands(); ++i)
          rule.operands.push_back({{h}});
        rule.results.push_back(t);
        return rule;
      })
      .Case<LinearOp>(linear)
      .Case<MatmulOp>(matmul)
      .Case<EmbeddingOp>(embedding)
      .Case<CrossEntropyOp>(crossEntropy)
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
