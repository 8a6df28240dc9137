// mega-sharding-propagation: a layout for every value of @forward_backward's forward half, from
// the inputs' batch split, the parameters' first uses and the ops' sharding rules (Passes.td).
#include "passes/partition/Passes.h"
#include "passes/partition/Sharding.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"

#include <numeric>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_SHARDINGPROPAGATION
#include "passes/partition/Passes.h.inc"

namespace {

using partition::AxisList;
using partition::Sharding;

int64_t numElements(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getNumElements();
}

class Propagator {
public:
  /// `dp` counts every data-parallel rank (ep of them in each expert-parallel group).
  Propagator(func::FuncOp f, mega::MeshAttr mesh, int64_t tp, int64_t dp, int64_t ep, bool sp)
      : f_(f), mesh_(mesh), tp_(tp), dp_(dp), ep_(ep), sp_(sp),
        kTp(*mesh.findAxis("tp")), batchAxes_{*mesh.findAxis("dp")} {
    if (ep_ > 1) {
      epAxis_ = *mesh.findAxis("ep");
      batchAxes_.push_back(*epAxis_);
    }
    cpAxis_ = mesh.findAxis("cp");
  }

  LogicalResult run() {
    if (failed(seedArguments()))
      return failure();
    replicateKeyValueHeads();
    SmallVector<Operation *> ops;
    for (Operation &op : f_.getBody().front())
      ops.push_back(&op);
    for (Operation *op : ops)
      if (failed(visit(op)))
        return failure();
    // Views whose users never fixed a layout (none had a rule that cares): whole.
    for (auto &[value, view] : deferredViews_)
      if (undecided_.contains(value))
        if (failed(decide(value, Sharding::replicated(
                                     cast_or_null<RankedTensorType>(value.getType()).getRank()))))
          return failure();
    // Parameters never used by a rule stay replicated; the signature takes the new types.
    auto ret = cast<func::ReturnOp>(f_.getBody().front().getTerminator());
    f_.setType(FunctionType::get(f_.getContext(), f_.getBody().front().getArgumentTypes(),
                                 ret.getOperandTypes()));
    return success();
  }

private:
  Sharding get(Value v) const { return partition::shardingOf(v.getType(), mesh_); }
  void set(Value v, const Sharding &layout) {
    auto type = cast<RankedTensorType>(v.getType());
    v.setType(partition::withSharding(type, layout, mesh_));
  }
  bool isParam(Value v) const {
    if (deferredViews_.count(v))
      return true; // a view of a parameter ranks with parameters
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && f_.getArgAttr(arg.getArgNumber(), mega::kParamAttr);
  }
  std::string paramName(Value v) const {
    while (deferredViews_.count(v))
      v = deferredViews_.lookup(v)->getOperand(0);
    auto arg = cast<BlockArgument>(v);
    return f_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kParamAttr).getValue().str();
  }

  /// Fixes the layout of an undecided parameter, or of a deferred view of one (and then of what
  /// it views: the layout the view's sharding rule maps back; if that was fixed otherwise, the
  /// view's input is resharded). A view that cannot carry `layout` back (a split its input has
  /// no dim for) is decided whole, with its input; the caller then reshards its result.
  LogicalResult decide(Value v, const Sharding &layout) {
    undecided_.erase(v);
    auto it = deferredViews_.find(v);
    if (it == deferredViews_.end()) {
      set(v, layout);
      return success();
    }
    Operation *view = it->second;
    Value input = view->getOperand(0);
    auto inputType = cast_or_null<RankedTensorType>(input.getType());
    std::optional<Sharding> need = operandLayoutOfView(view, layout);
    Sharding result = layout;
    if (!need) {
      need = Sharding::replicated(inputType.getRank());
      result = Sharding::replicated(layout.dims.size());
    }
    set(v, result);
    if (undecided_.contains(input))
      return decide(input, *need);
    if (get(input) == *need)
      return success();
    OpBuilder b(view);
    auto type = partition::withSharding(inputType, *need, mesh_);
    auto reshard = mega::ReshardOp::create(b, view->getLoc(), type, input);
    view->setOperand(0, reshard.getResult());
    return success();
  }

  /// The layout of a view's operand that gives its result `layout` under the view's sharding
  /// rule: each split result dim's major factor found as the major factor of an operand dim.
  /// None when some split cannot be carried back (or `layout` has partial sums).
  std::optional<Sharding> operandLayoutOfView(Operation *view, const Sharding &layout) {
    auto inputType = cast<RankedTensorType>(view->getOperand(0).getType());
    if (isa<mega::CastOp>(view))
      return layout;
    if (!layout.partial.empty())
      return std::nullopt;
    auto iface = dyn_cast<mega::ShardingRuleOpInterface>(view);
    if (!iface)
      return std::nullopt;
    mega::ShardingRule rule = iface.getShardingRule();
    if (!rule.known)
      return std::nullopt;
    Sharding need = Sharding::replicated(inputType.getRank());
    for (size_t d = 0; d < layout.dims.size(); ++d) {
      if (layout.dims[d].empty())
        continue;
      const auto &factors = rule.results[0][d];
      if (factors.empty())
        return std::nullopt;
      int f = factors[0];
      if (rule.factorKinds[f] != mega::FactorKind::parallel)
        return std::nullopt;
      bool found = false;
      for (size_t e = 0; e < rule.operands[0].size() && !found; ++e)
        if (!rule.operands[0][e].empty() && rule.operands[0][e][0] == f) {
          // The split covers the whole result dim: its factor must be the dim's only one.
          if (factors.size() != 1 || rule.operands[0][e].size() != 1)
            return std::nullopt;
          need.dims[e] = layout.dims[d];
          found = true;
        }
      if (!found)
        return std::nullopt;
    }
    return need;
  }

  /// Data inputs with a batch dim are split on it over dp.
  LogicalResult seedArguments() {
    for (BlockArgument arg : f_.getArguments()) {
      if (isParam(arg)) {
        undecided_.insert(arg);
        continue;
      }
      auto type = cast<RankedTensorType>(arg.getType());
      auto input = f_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kInputAttr);
      if (dp_ == 1 || !input || type.getRank() == 0)
        continue;
      if (type.getDimSize(0) % dp_ != 0)
        return f_.emitError() << "the batch dim of input '" << input.getValue() << "' has size "
                              << type.getDimSize(0) << ", which is not divisible by dp = " << dp_;
      Sharding layout = Sharding::replicated(type.getRank());
      layout.dims[0] = batchAxes_;
      set(arg, layout);
    }
    // Sequence parallelism splits the sequence dim of the activations over tp.
    if (sp_)
      for (BlockArgument arg : f_.getArguments()) {
        auto type = cast<RankedTensorType>(arg.getType());
        auto input = f_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kInputAttr);
        if (input && type.getRank() >= 2 && type.getDimSize(1) % tp_ != 0)
          return f_.emitError() << "sequence parallelism splits the sequence over tp = " << tp_
                                << ", but input '" << input.getValue() << "' has "
                                << type.getDimSize(1) << " positions (dim 1), not divisible";
      }
    return success();
  }

  /// Grouped-query attention with fewer key/value heads than tp (Gemma's one kv head,
  /// Falcon's multi-query attention): tp must divide the query heads; the kv heads are
  /// replicated so that every rank holds the kv head(s) its query heads read. Key and value are
  /// repeated r times along the head dim (r the smallest with tp | g·r | h: query head i still
  /// reads replica i / (h / (g·r)) of kv head i / (h / g)), and the projections that produce
  /// them keep their weights whole on every rank: each rank computes all g kv heads (g·d
  /// columns, small next to the query's h·d / tp) and takes its replica. The gradient of a
  /// replica flows back through the repeat into the one whole projection; it is complete on
  /// every rank (the slice's gradient gathers the replicas), so checkpoints store each kv head
  /// once. Megatron-Core refuses this case; vLLM replicates the same way for inference.
  void replicateKeyValueHeads() {
    if (tp_ == 1)
      return;
    SmallVector<mega::AttentionOp> attentions;
    f_.walk([&](mega::AttentionOp op) { attentions.push_back(op); });
    for (mega::AttentionOp attention : attentions) {
      auto q = cast<RankedTensorType>(attention.getQuery().getType());
      auto k = cast<RankedTensorType>(attention.getKey().getType());
      int64_t heads = q.getDimSize(2), kvHeads = k.getDimSize(2);
      if (heads % tp_ != 0 || kvHeads % tp_ == 0)
        continue; // not divisible: an error when the attention is visited
      int64_t replicas = std::lcm(kvHeads, tp_) / kvHeads;
      if (heads % (kvHeads * replicas) != 0)
        continue;
      for (OpOperand *operand : {&attention.getKeyMutable(), &attention.getValueMutable()}) {
        markKeyValueProjection(operand->get());
        operand->set(repeatHeads(attention, operand->get(), replicas));
      }
    }
  }

  /// x [b, t, g, d] -> [b, t, g·r, d], each head repeated r times in place (g0 g0 g1 g1 ...).
  Value repeatHeads(Operation *before, Value x, int64_t replicas) {
    OpBuilder b(before);
    Location loc = before->getLoc();
    auto type = cast<RankedTensorType>(x.getType());
    ArrayRef<int64_t> s = type.getShape();
    Type element = type.getElementType();
    auto split = RankedTensorType::get({s[0], s[1], s[2], 1, s[3]}, element);
    auto repeated = RankedTensorType::get({s[0], s[1], s[2], replicas, s[3]}, element);
    auto merged = RankedTensorType::get({s[0], s[1], s[2] * replicas, s[3]}, element);
    Value v = mega::ReshapeOp::create(b, loc, split, x);
    v = mega::BroadcastOp::create(b, loc, repeated, v);
    return mega::ReshapeOp::create(b, loc, merged, v);
  }

  /// The linear whose output `v` is, through reshapes, transposes, rotary and casts: its weight
  /// stays whole under tp (it is then not an error that tp does not divide its output dim).
  void markKeyValueProjection(Value v) {
    while (Operation *def = v.getDefiningOp()) {
      if (auto linear = dyn_cast<mega::LinearOp>(def)) {
        wholeWeights_.insert(linear.getWeight());
        return;
      }
      if (isa<mega::ReshapeOp, mega::TransposeOp, mega::CastOp>(def))
        v = def->getOperand(0);
      else if (auto rope = dyn_cast<mega::RopeOp>(def))
        v = rope.getInput();
      else
        return;
    }
  }

  /// Megatron's choices, made where a parameter is first used: linear weights column parallel
  /// unless their input is already split on the contracted dim (row parallel), embedding tables
  /// vocab parallel.
  LogicalResult seedParameters(Operation *op) {
    if (auto moe = dyn_cast<mega::MoeMatmulOp>(op); moe && epAxis_)
      return seedExpertWeight(moe);
    if (tp_ == 1)
      return success();
    if (auto linear = dyn_cast<mega::LinearOp>(op)) {
      Value w = linear.getWeight();
      if (!undecided_.contains(w))
        return success();
      if (wholeWeights_.contains(w))
        return decide(w, Sharding::replicated(2));
      ArrayRef<int64_t> shape = cast<RankedTensorType>(w.getType()).getShape();
      Sharding layout = Sharding::replicated(2);
      if (llvm::is_contained(get(linear.getInput()).dims.back(), kTp)) {
        layout.dims[1] = {kTp};
      } else {
        if (shape[0] % tp_ != 0)
          return op->emitError() << "linear weight '" << paramName(w) << "' has output dim "
                                 << shape[0] << ", which is not divisible by tp = " << tp_;
        layout.dims[0] = {kTp};
      }
      if (failed(decide(w, layout)))
        return failure();
    } else if (auto embedding = dyn_cast<mega::EmbeddingOp>(op)) {
      Value table = embedding.getTable();
      if (!undecided_.contains(table))
        return success();
      int64_t vocab = cast<RankedTensorType>(table.getType()).getDimSize(0);
      if (vocab % tp_ != 0) {
        op->emitWarning() << "embedding table '" << paramName(table) << "' has " << vocab
                          << " rows, not divisible by tp = " << tp_
                          << ": it stays whole on every rank (pad the vocab to a multiple of tp)";
        return success();
      }
      Sharding layout = Sharding::replicated(2);
      layout.dims[0] = {kTp};
      if (failed(decide(table, layout)))
        return failure();
    } else if (auto attention = dyn_cast<mega::AttentionOp>(op)) {
      int64_t heads = cast<RankedTensorType>(attention.getQuery().getType()).getDimSize(2);
      int64_t kvHeads = cast<RankedTensorType>(attention.getKey().getType()).getDimSize(2);
      if (heads % tp_ != 0)
        return op->emitError() << "attention has " << heads << " query heads, which tp = " << tp_
                               << " does not divide: tensor parallelism splits the query heads "
                                  "(choose a tp that divides "
                               << heads << ")";
      if (kvHeads % tp_ != 0) // replicateKeyValueHeads found no replication
        return op->emitError() << "attention has " << heads << " query heads on " << kvHeads
                               << " key/value heads: tp = " << tp_ << " needs the key/value "
                               << "heads replicated to a multiple of " << tp_ << " that divides "
                               << heads;
    }
    return success();
  }

  /// Expert parallelism: an expert weight [E, ...] is split on E over ep (Megatron's expert
  /// parallelism; each ep rank holds E / ep experts).
  LogicalResult seedExpertWeight(mega::MoeMatmulOp op) {
    Value w = op.getWeight();
    if (!undecided_.contains(w))
      return success();
    int64_t experts = cast<RankedTensorType>(w.getType()).getDimSize(0);
    if (experts % ep_ != 0)
      return op->emitError() << "expert weight '" << paramName(w) << "' has " << experts
                             << " experts, which ep = " << ep_
                             << " does not divide (choose an ep that divides " << experts << ")";
    Sharding layout = Sharding::replicated(3);
    layout.dims[0] = {*epAxis_};
    return decide(w, layout);
  }

  /// Expert parallelism at a dispatch: the tokens of each expert-parallel group are gathered
  /// (their split over ep undone) and the routing weights split on the expert dim, so the
  /// dispatch sends the group's tokens to this rank's experts only; moe_combine's sum over the
  /// experts is then a partial sum over ep, reduce-scattered back to the tokens' split
  /// (Megatron's all-gather token dispatcher).
  void gatherTokensForExperts(mega::MoeDispatchOp op) {
    auto reshard = [&](OpOperand &operand, bool splitExperts) {
      Value v = operand.get();
      Sharding layout = get(v), want = layout;
      for (AxisList &dim : want.dims)
        llvm::erase(dim, *epAxis_);
      int64_t experts = cast<RankedTensorType>(v.getType()).getShape().back();
      if (splitExperts && experts % ep_ == 0 && want.dims.back().empty() &&
          !llvm::is_contained(want.partial, *epAxis_))
        want.dims.back() = {*epAxis_};
      if (want == layout || undecided_.contains(v))
        return;
      OpBuilder b(op);
      auto type = partition::withSharding(cast<RankedTensorType>(v.getType()), want, mesh_);
      operand.set(mega::ReshardOp::create(b, op.getLoc(), type, v).getResult());
    };
    reshard(op.getInputMutable(), false);
    reshard(op.getWeightsMutable(), true);
  }

  /// Whether the tokens of a routed value `[t..., E]` or `[E, t..., h]` (first token dim at
  /// `tokenDim`) are split over ep as the minor axis of the first token dim: the layout the
  /// token exchange moves from and back to.
  bool tokensOverEp(const Sharding &layout, size_t tokenDim) const {
    return layout.partial.empty() && layout.dims.size() > tokenDim &&
           !layout.dims[tokenDim].empty() && layout.dims[tokenDim].back() == *epAxis_ &&
           llvm::count_if(layout.allAxes(), [&](unsigned a) { return a == *epAxis_; }) == 1;
  }

  /// `layout` without ep on its token dims (from `first`, `count` of them).
  Sharding withoutEp(Sharding layout, size_t first, size_t count) const {
    for (size_t d = first; d < first + count && d < layout.dims.size(); ++d)
      llvm::erase(layout.dims[d], *epAxis_);
    return layout;
  }

  /// The routing as the experts' ranks see it: the group's tokens (ep gathered), the experts
  /// split over ep. A reshard of `mask [t..., E]` inserted before `before`.
  Value expertView(Value mask, Operation *before) {
    auto type = cast<RankedTensorType>(mask.getType());
    Sharding want = withoutEp(get(mask), 0, type.getRank() - 1);
    want.dims.back() = {*epAxis_};
    OpBuilder b(before);
    return mega::ReshardOp::create(b, before->getLoc(), partition::withSharding(type, want, mesh_),
                                   mask);
  }

  /// Expert parallelism's token exchange (Megatron's all-to-all dispatcher): after a dispatch
  /// on this rank's tokens (every expert), a moe_exchange moves the routed rows to the ranks
  /// of their experts — [E, t..., h] from tokens over (dp, ep) to experts over ep, tokens over
  /// dp — sending only the active rows.
  void exchangeToExperts(mega::MoeDispatchOp dispatch) {
    Value routed = dispatch.getResult(), mask = dispatch.getWeights();
    auto type = cast<RankedTensorType>(routed.getType());
    Sharding have = get(routed);
    if (!tokensOverEp(have, 1) || !have.dims[0].empty() || type.getDimSize(0) % ep_ != 0)
      return;
    Sharding want = withoutEp(have, 1, type.getRank() - 2);
    want.dims[0] = {*epAxis_};
    OpBuilder b(dispatch->getBlock(), std::next(Block::iterator(dispatch)));
    Value experts = expertView(mask, &*b.getInsertionPoint());
    auto exchange = mega::MoeExchangeOp::create(
        b, dispatch.getLoc(), partition::withSharding(type, want, mesh_), routed, mask, experts,
        mesh_, partition::axisNames(b.getContext(), mesh_, {*epAxis_}), b.getUnitAttr());
    routed.replaceAllUsesExcept(exchange.getResult(), exchange);
  }

  /// Before a combine of expert outputs split over ep: the exchange back to the tokens' ranks,
  /// so the combine runs on this rank's tokens with every expert's rows (no partial sum). The
  /// routing is the one the experts computed with (their moe_matmul's).
  void exchangeToTokens(mega::MoeCombineOp combine) {
    Value routed = combine.getInput();
    auto matmul = routed.getDefiningOp<mega::MoeMatmulOp>();
    if (!matmul)
      return;
    Value mask = matmul.getWeights();
    while (auto reshard = mask.getDefiningOp<mega::ReshardOp>())
      mask = reshard.getInput();
    auto type = cast<RankedTensorType>(routed.getType());
    Sharding have = get(routed), tokens = get(mask);
    if (have.dims[0] != AxisList{*epAxis_} || !have.partial.empty() || !tokensOverEp(tokens, 0))
      return;
    Sharding want = have;
    want.dims[0].clear();
    for (size_t d = 0; d + 1 < tokens.dims.size(); ++d) {
      if (withoutEp(tokens, 0, tokens.dims.size() - 1).dims[d] != have.dims[d + 1])
        return; // the experts' tokens are not the group's tokens of this routing
      want.dims[d + 1] = tokens.dims[d];
    }
    Value experts = expertView(mask, combine);
    OpBuilder b(combine);
    auto exchange = mega::MoeExchangeOp::create(
        b, combine.getLoc(), partition::withSharding(type, want, mesh_), routed, mask, experts,
        mesh_, partition::axisNames(b.getContext(), mesh_, {*epAxis_}), UnitAttr());
    combine.getInputMutable().assign(exchange.getResult());
  }

  /// Context parallelism: a gather by the sequence's permutation (marked by
  /// mega-context-parallel) reads this rank's positions only — the permutation is split over cp,
  /// and the gathered sequence dim with it; every token-wise op then follows.
  void splitSequence(Operation *op) {
    auto gather = dyn_cast<mega::GatherOp>(op);
    if (!gather || !cpAxis_ || !op->hasAttr(kContextParallelSplitAttr))
      return;
    Value positions = gather.getIndices();
    auto type = cast<RankedTensorType>(positions.getType());
    Sharding want = Sharding::replicated(type.getRank());
    want.dims[0] = {*cpAxis_};
    if (get(positions) == want)
      return;
    OpBuilder b(op);
    auto reshard = mega::ReshardOp::create(b, op->getLoc(),
                                           partition::withSharding(type, want, mesh_), positions);
    gather.getIndicesMutable().assign(reshard.getResult());
  }

  /// A row-parallel linear's bias must be added once, after the partial sums are reduced: the
  /// linear becomes linear + broadcast(bias) + add, and the add resolves the partial sum.
  FailureOr<SmallVector<Operation *>> splitRowParallelBias(mega::LinearOp linear) {
    if (!linear.getBias() || !llvm::is_contained(get(linear.getWeight()).dims[1], kTp))
      return SmallVector<Operation *>{};
    OpBuilder b(linear);
    Location loc = linear.getLoc();
    auto type = cast<RankedTensorType>(linear.getType());
    auto plain = RankedTensorType::get(type.getShape(), type.getElementType());
    auto product =
        mega::LinearOp::create(b, loc, plain, linear.getInput(), linear.getWeight(), Value());
    auto bias = mega::BroadcastOp::create(b, loc, plain, linear.getBias());
    auto sum = mega::AddOp::create(b, loc, plain, product, bias);
    linear.getResult().replaceAllUsesWith(sum.getResult());
    linear.erase();
    return SmallVector<Operation *>{product, bias, sum};
  }

  LogicalResult visit(Operation *op) {
    if (isa<func::ReturnOp>(op))
      return success();
    if (!isa_and_nonnull<mega::MegaDialect>(op->getDialect()))
      return op->emitError() << "'" << op->getName()
                             << "' has no sharding rule: partitioning supports mega ops only";
    if (isa<mega::DropoutOp>(op))
      return op->emitError() << "dropout is not supported by the partitioner yet (run on one "
                                "rank, or build the model without dropout)";
    // A view of a parameter -- a cast (mixed precision: f32 master weights cast to bf16 at
    // their use), a reshape, slice or transpose (a fused projection's part, a Conv1D weight) --
    // takes the layout its users give it: it waits, undecided, like the parameter.
    if (isa<mega::CastOp, mega::ReshapeOp, mega::SliceOp, mega::TransposeOp>(op) &&
        undecided_.contains(op->getOperand(0))) {
      undecided_.insert(op->getResult(0));
      deferredViews_[op->getResult(0)] = op;
      return success();
    }
    if (failed(seedParameters(op)))
      return failure();
    splitSequence(op);
    // Expert parallelism: the token exchange around the experts, or (tokens not split over ep
    // as the exchange expects) the ep group's tokens gathered before the dispatch.
    auto dispatch = dyn_cast<mega::MoeDispatchOp>(op);
    bool exchange = dispatch && epAxis_ && tokensOverEp(get(dispatch.getInput()), 0) &&
                    tokensOverEp(get(dispatch.getWeights()), 0);
    if (dispatch && epAxis_ && !exchange)
      gatherTokensForExperts(dispatch);
    if (auto combine = dyn_cast<mega::MoeCombineOp>(op); combine && epAxis_)
      exchangeToTokens(combine);
    if (auto linear = dyn_cast<mega::LinearOp>(op)) {
      auto split = splitRowParallelBias(linear);
      if (failed(split))
        return failure();
      if (!split->empty()) {
        for (Operation *part : *split)
          if (failed(visit(part)))
            return failure();
        return success();
      }
    }
    auto iface = dyn_cast<mega::ShardingRuleOpInterface>(op);
    mega::ShardingRule rule = iface ? iface.getShardingRule() : mega::ShardingRule{};
    if (failed(apply(op, rule)))
      return failure();
    if (exchange)
      exchangeToExperts(dispatch);
    return success();
  }

  LogicalResult apply(Operation *op, const mega::ShardingRule &rule) {
    size_t nf = rule.factorSizes.size();
    SmallVector<AxisList> factorAxes(nf);
    SmallVector<bool> minor(nf, false);
    auto markMinor = [&](const mega::ShardingRule::TensorFactors &tensor) {
      for (const auto &dim : tensor)
        for (size_t k = 1; k < dim.size(); ++k)
          minor[dim[k]] = true;
    };
    llvm::for_each(rule.operands, markMinor);
    llvm::for_each(rule.results, markMinor);
    AxisList used;
    auto isUsed = [&](const AxisList &axes) {
      return llvm::any_of(axes, [&](unsigned a) { return llvm::is_contained(used, a); });
    };
    auto tryAssign = [&](int f, const AxisList &axes) {
      if (!factorAxes[f].empty() || minor[f] || isUsed(axes))
        return;
      if (rule.factorKinds[f] == mega::FactorKind::whole && f != rule.specialFactor)
        return;
      if (rule.factorSizes[f] % partition::groupSize(mesh_, axes) != 0)
        return;
      factorAxes[f] = axes;
      used.append(axes.begin(), axes.end());
    };

    size_t n = op->getNumOperands();
    SmallVector<Sharding> current;
    for (Value v : op->getOperands())
      current.push_back(get(v));
    SmallVector<bool> keepPartial(n, false);
    AxisList passThrough;
    if (rule.known) {
      // Operands propose their splits: decided parameters first, then larger tensors.
      SmallVector<size_t> order = llvm::to_vector(llvm::seq<size_t>(0, n));
      llvm::stable_sort(order, [&](size_t a, size_t b) {
        bool pa = isParam(op->getOperand(a)), pb = isParam(op->getOperand(b));
        if (pa != pb)
          return pa;
        return numElements(op->getOperand(a)) > numElements(op->getOperand(b));
      });
      for (size_t i : order) {
        if (undecided_.contains(op->getOperand(i)))
          continue;
        for (size_t d = 0; d < current[i].dims.size(); ++d)
          if (!current[i].dims[d].empty() && !rule.operands[i][d].empty())
            tryAssign(rule.operands[i][d][0], current[i].dims[d]);
      }
      // Partial sums that can flow through the op.
      switch (rule.partial) {
      case mega::PartialRule::none:
        break;
      case mega::PartialRule::linear:
      case mega::PartialRule::auxiliary:
        if (n > 0 && !current[0].partial.empty()) {
          passThrough = current[0].partial;
          keepPartial[0] = true;
        }
        break;
      case mega::PartialRule::sum:
        // Under sequence parallelism a tensor-parallel partial sum is resolved at the add (a
        // reduce-scatter, Megatron's layout), not carried along the residual stream: a
        // bias-free model (Llama, T5) would otherwise keep the whole residual an unreduced,
        // unsplit partial sum, reduced only at each norm, leaving no pipeline cut points.
        if (n > 0 && !current[0].partial.empty() && !(sp_ && current[0].isPartialOver(kTp)) &&
            llvm::all_of(current,
                         [&](const Sharding &l) { return l.partial == current[0].partial; })) {
          passThrough = current[0].partial;
          keepPartial.assign(n, true);
        }
        break;
      case mega::PartialRule::product: {
        auto partialOperands =
            llvm::count_if(current, [](const Sharding &l) { return !l.partial.empty(); });
        if (partialOperands == 1)
          for (size_t i = 0; i < n; ++i)
            if (!current[i].partial.empty()) {
              passThrough = current[i].partial;
              keepPartial[i] = true;
            }
        break;
      }
      }
      if (isUsed(passThrough)) {
        passThrough.clear();
        keepPartial.assign(n, false);
      }
      if (rule.partial == mega::PartialRule::auxiliary)
        for (size_t i = 1; i < n; ++i)
          keepPartial[i] = !current[i].partial.empty();
      used.append(passThrough.begin(), passThrough.end());
      // Sequence parallelism: a tensor-parallel partial sum resolved here becomes split on the
      // sequence dim (reduce-scatter) instead of whole (all-reduce).
      if (sp_)
        for (size_t i = 0; i < n; ++i)
          if (!keepPartial[i] && current[i].isPartialOver(kTp) && current[i].dims.size() >= 3 &&
              !rule.operands[i][1].empty())
            tryAssign(rule.operands[i][1][0], {kTp});
    }

    // What each operand must be; reshard where it is not.
    for (size_t i = 0; i < n; ++i) {
      Value v = op->getOperand(i);
      Sharding need = Sharding::replicated(current[i].dims.size());
      if (rule.known)
        for (size_t d = 0; d < need.dims.size(); ++d)
          if (!rule.operands[i][d].empty())
            need.dims[d] = factorAxes[rule.operands[i][d][0]];
      if (keepPartial[i])
        need.partial = current[i].partial;
      if (undecided_.contains(v)) {
        if (failed(decide(v, need)))
          return failure();
        current[i] = get(v);
      }
      if (current[i] == need)
        continue;
      if (retypeBroadcast(v, current[i], need))
        continue;
      OpBuilder b(op);
      auto type = partition::withSharding(cast<RankedTensorType>(v.getType()), need, mesh_);
      auto reshard = mega::ReshardOp::create(b, op->getLoc(), type, v);
      op->setOperand(i, reshard.getResult());
    }

    // The results' layouts.
    for (size_t j = 0; j < op->getNumResults(); ++j) {
      Value r = op->getResult(j);
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (!type)
        continue;
      Sharding out = Sharding::replicated(type.getRank());
      if (rule.known) {
        for (size_t d = 0; d < out.dims.size(); ++d)
          if (!rule.results[j][d].empty())
            out.dims[d] = factorAxes[rule.results[j][d][0]];
        out.partial = passThrough;
        for (size_t f = 0; f < nf; ++f) {
          bool reduction = rule.factorKinds[f] == mega::FactorKind::reduction;
          bool special = static_cast<int>(f) == rule.specialFactor && rule.specialResultPartial;
          if (reduction || special)
            out.partial.append(factorAxes[f].begin(), factorAxes[f].end());
        }
      }
      set(r, out);
    }
    return success();
  }

  /// A broadcast used once produces the layout its user needs: split on the dims it creates
  /// with no communication (each rank broadcasts into its own slice), and on the dims it keeps
  /// by splitting its (smaller) input instead of its result.
  bool retypeBroadcast(Value v, const Sharding &have, const Sharding &need) {
    auto broadcast = v.getDefiningOp<mega::BroadcastOp>();
    if (!broadcast || !v.hasOneUse() || !have.partial.empty() || !need.partial.empty())
      return false;
    Value input = broadcast.getInput();
    ArrayRef<int64_t> in = cast<RankedTensorType>(input.getType()).getShape();
    ArrayRef<int64_t> out = cast<RankedTensorType>(v.getType()).getShape();
    size_t lead = out.size() - in.size();
    Sharding haveIn = get(input);
    if (!haveIn.partial.empty())
      return false;
    Sharding needIn = Sharding::replicated(in.size());
    for (size_t d = 0; d < out.size(); ++d) {
      bool created = d < lead || (in[d - lead] == 1 && out[d] != 1);
      if (created) {
        if (!have.dims[d].empty() && have.dims[d] != need.dims[d])
          return false;
        continue;
      }
      needIn.dims[d - lead] = need.dims[d];
    }
    if (undecided_.contains(input)) {
      if (failed(decide(input, needIn)))
        return false;
    } else if (haveIn != needIn) {
      OpBuilder b(broadcast);
      auto type = partition::withSharding(cast<RankedTensorType>(input.getType()), needIn, mesh_);
      auto reshard = mega::ReshardOp::create(b, broadcast.getLoc(), type, input);
      broadcast.getInputMutable().assign(reshard.getResult());
    }
    set(v, need);
    return true;
  }

  mutable func::FuncOp f_;
  mega::MeshAttr mesh_;
  int64_t tp_, dp_, ep_;
  bool sp_;
  unsigned kTp;        // the mesh axis "tp"
  AxisList batchAxes_; // the batch's split: dp, then ep
  std::optional<unsigned> epAxis_;
  std::optional<unsigned> cpAxis_; // the mesh axis "cp", when the mesh has one
  llvm::DenseSet<Value> undecided_;
  llvm::DenseSet<Value> wholeWeights_; // key/value projections of replicated kv heads
  llvm::MapVector<Value, Operation *> deferredViews_;
};

struct ShardingPropagationPass : public impl::ShardingPropagationBase<ShardingPropagationPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    if (tp < 1 || dp < 1 || pp < 1) {
      module.emitError() << "mega-sharding-propagation: degrees must be >= 1 (tp = "
                         << static_cast<int64_t>(tp) << ", dp = " << static_cast<int64_t>(dp)
                         << ", pp = " << static_cast<int64_t>(pp) << ")";
      return signalPassFailure();
    }
    if (cp < 1) {
      module.emitError() << "mega-sharding-propagation: cp must be >= 1, not "
                         << static_cast<int64_t>(cp);
      return signalPassFailure();
    }
    auto f = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!f) {
      module.emitError() << "mega-sharding-propagation: no @forward_backward (run "
                            "mega-training-loss first)";
      return signalPassFailure();
    }
    if (ep < 1 || dp % ep != 0) {
      module.emitError() << "mega-sharding-propagation: ep = " << static_cast<int64_t>(ep)
                         << " must divide dp = " << static_cast<int64_t>(dp)
                         << " (expert parallelism is carved out of data parallelism)";
      return signalPassFailure();
    }
    // Megatron's rank order tp-ep-dp-pp: the ep ranks of a group are adjacent after tp.
    SmallVector<StringAttr> names = {StringAttr::get(context, "pp"),
                                     StringAttr::get(context, "dp")};
    SmallVector<int64_t> sizes = {pp, dp / ep};
    if (ep > 1) {
      names.push_back(StringAttr::get(context, "ep"));
      sizes.push_back(ep);
    }
    // Context parallelism: its own axis between dp and tp (Megatron's tp-cp-dp-pp order).
    if (cp > 1) {
      names.push_back(StringAttr::get(context, "cp"));
      sizes.push_back(cp);
    }
    names.push_back(StringAttr::get(context, "tp"));
    sizes.push_back(tp);
    auto mesh = mega::MeshAttr::get(context, names, sizes);
    module->setAttr(kMeshAttr, mesh);
    // Evaluation runs on one rank: @forward would need whole parameters.
    if (auto forward = module.lookupSymbol<func::FuncOp>("forward"))
      forward.erase();
    if (tp * dp * cp == 1)
      return;
    if (failed(Propagator(f, mesh, tp, dp, ep, sequenceParallel).run()))
      return signalPassFailure();
  }
};

} // namespace
} // namespace megac::passes
