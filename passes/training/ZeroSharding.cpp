// ZeRO-2/3 shards and rewrites of the training functions (ZeroSharding.h).
#include "passes/training/ZeroSharding.h"

#include "passes/partition/Passes.h"
#include "passes/partition/Regather.h"
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace megac::passes::zero {

SmallVector<StringRef> stringsOf(Attribute attr) {
  SmallVector<StringRef> out;
  if (auto array = dyn_cast_or_null<ArrayAttr>(attr))
    for (Attribute a : array)
      if (auto s = dyn_cast<StringAttr>(a))
        out.push_back(s.getValue());
  return out;
}

SmallVector<int64_t> integersOf(Attribute attr) {
  SmallVector<int64_t> out;
  if (auto dense = dyn_cast_or_null<DenseI64ArrayAttr>(attr))
    llvm::append_range(out, dense.asArrayRef());
  else if (auto array = dyn_cast_or_null<ArrayAttr>(attr))
    for (Attribute a : array)
      if (auto i = dyn_cast<IntegerAttr>(a))
        out.push_back(i.getInt());
  return out;
}

int64_t zeroDim(const Distribution &dist, const Param &p) {
  if (!dist || dist.zero == 0)
    return -1;
  int64_t dp = dist.size("dp");
  if (dp <= 1 || !llvm::is_contained(stringsOf(p.attrs.get(kGradPartialAttr)), "dp"))
    return -1;
  // ZeRO-1/2 keep dim 0: their @apply_gradients buckets view a shard as rows of [dp, n/dp].
  int64_t dims = dist.zero == 3 ? p.type.getRank() : std::min<int64_t>(p.type.getRank(), 1);
  for (int64_t d = 0; d < dims; ++d)
    if (p.type.getDimSize(d) % dp == 0)
      return d;
  // ZeRO-3 pads dim 0 when no dim divides, unless another axis splits it already (a padded
  // split is of the whole dim: DimSharding.padded_size).
  auto split = dyn_cast_or_null<ArrayAttr>(p.attrs.get(kDimAxesAttr));
  bool dim0Split = split && !split.empty() && !stringsOf(split[0]).empty();
  if (dist.zero == 3 && p.type.getRank() >= 1 && p.type.getDimSize(0) > 0 && !dim0Split)
    return 0;
  return -1;
}

bool zeroSharded(const Distribution &dist, const Param &p) { return zeroDim(dist, p) >= 0; }

bool zeroPadded(const Distribution &dist, const Param &p) {
  int64_t dim = zeroDim(dist, p);
  return dim >= 0 && p.type.getDimSize(dim) % dist.size("dp") != 0;
}

/// ZeRO-2/3 shard parameters' gradients over dp: refuses a stage where none can be (under ZeRO-2
/// every parameter a scalar or with a dim 0 dp does not divide; under ZeRO-3, which pads dim 0,
/// every parameter a scalar or split on dim 0 by another axis with no dim dp divides).
LogicalResult checkShardable(func::FuncOp fb, const Distribution &dist, ArrayRef<Param> params) {
  if (!dist || dist.zero < 2 ||
      llvm::any_of(params, [&](const Param &p) { return zeroSharded(dist, p); }))
    return success();
  const Param &p = params.front();
  std::string shape;
  llvm::raw_string_ostream os(shape);
  llvm::interleave(p.type.getShape(), os, "x");
  InFlightDiagnostic error = fb.emitError() << "mega-training-optimizer: zero=" << dist.zero
                                            << " shards parameters over dp = " << dist.size("dp")
                                            << ", but no parameter of @" << fb.getSymName();
  if (dist.zero == 3)
    return error << " can be sharded (parameter '" << p.name << "' is ["
                 << (shape.empty() ? "scalar" : shape)
                 << "]: a scalar, or split on dim 0 by another axis with no dim that dp "
                    "divides); use --zero 1 or 2";
  return error << " has a dim 0 that dp divides (parameter '" << p.name << "' is ["
               << (shape.empty() ? "scalar" : shape)
               << "]); use a dp that divides the parameters' dim 0, --zero 3 (which pads), or "
                  "--zero 1";
}

/// ZeRO-2/3: each sharded parameter's accumulator `acc' = acc + g` in a training function becomes
/// its dp shard, `acc' = acc + reduce_scatter(g)`, the reduce-scatter right after g is computed so
/// the whole micro-batch gradient dies there (docs/training-step.md).
LogicalResult shardAccumulators(func::FuncOp f, const Distribution &dist, ArrayRef<Param> params) {
  OpBuilder b(f.getContext());
  Block &block = f.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  ArrayAttr dpAxes = b.getStrArrayAttr({"dp"});
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto name = f.getResultAttrOfType<StringAttr>(i, kUpdatesAttr);
    if (!name || !name.getValue().starts_with("grad."))
      continue;
    StringRef paramName = name.getValue().drop_front(strlen("grad."));
    const Param *p = llvm::find_if(params, [&](const Param &q) { return q.name == paramName; });
    if (p == params.end() || !zeroSharded(dist, *p))
      continue;
    BlockArgument acc;
    for (BlockArgument arg : f.getArguments())
      if (f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kStateAttr) == name)
        acc = arg;
    auto add = ret.getOperand(i).getDefiningOp<mega::AddOp>();
    if (!acc || !add || !acc.hasOneUse() || !add->hasOneUse() ||
        (add.getLhs() != acc && add.getRhs() != acc))
      return f.emitError() << "mega-training-optimizer: zero=" << dist.zero << " needs result " << i
                           << " of @" << f.getSymName() << " to be " << name.getValue()
                           << " + the gradient (as mega-training-autodiff builds it)";
    Value grad = add.getLhs() == acc ? add.getRhs() : add.getLhs();
    if (Operation *def = grad.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&block);
    RankedTensorType shard = dpShard(dist, *p);
    if (zeroPadded(dist, *p)) {
      // Zero rows to dp * c: rank r's shard is rows [r*c, (r+1)*c), its rows past the
      // parameter's end (its padding) sums of zeros.
      SmallVector<int64_t> high(p->type.getRank(), 0), none(p->type.getRank(), 0);
      SmallVector<int64_t> shape(p->type.getShape());
      shape[0] = shard.getDimSize(0) * dist.size("dp");
      high[0] = shape[0] - p->type.getDimSize(0);
      grad = mega::PadOp::create(b, add.getLoc(),
                                 RankedTensorType::get(shape, p->type.getElementType()), grad, none,
                                 high, none);
    }
    Value mine = mega::ReduceScatterOp::create(b, add.getLoc(), shard, mega::ReduceKind::sum, grad,
                                               dist.mesh, dpAxes, zeroDim(dist, *p));
    Value sum = mega::AddOp::create(b, add.getLoc(), shard, acc, mine);
    acc.setType(shard);
    ret->setOperand(i, sum);
    add.erase();
    f.setArgAttrs(acc.getArgNumber(), stateAttrs(b, dist, *p, "grad."));
  }
  f.setType(FunctionType::get(f.getContext(), block.getArgumentTypes(), ret.getOperandTypes()));
  return success();
}

namespace {

/// A use of a ZeRO-3 parameter as its compute reads it: `use` reads the parameter directly
/// (`view` null) or a cast of it (`view`: mega-training-precision's bf16/fp16 copy of the f32
/// master, which reads nothing else).
struct ParamUse {
  OpOperand *use;
  Operation *view;
};

/// The casts of `arg` that read nothing else: gathered with the parameter, each half of the
/// function casts its own gathered copy, so the cast lives with the gather, not from the
/// function's top (where mega-training-precision puts it) to the backward's last use.
bool isParamView(Operation *op) { return isa<mega::CastOp>(op) && op->getNumOperands() == 1; }

/// Gathers `arg` before the first of `uses` (one half of the function), re-creates each view
/// right after the gather and points the uses at it; `again` marks the gather mega.regather.
void gatherHalf(OpBuilder &b, ArrayRef<ParamUse> uses, bool again,
                function_ref<Value(OpBuilder &, bool)> gather) {
  if (uses.empty())
    return;
  Operation *first = uses.front().use->getOwner();
  for (const ParamUse &u : uses)
    if (u.use->getOwner()->isBeforeInBlock(first))
      first = u.use->getOwner();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(first);
  Value whole = gather(b, again);
  DenseMap<Operation *, Value> views;
  for (const ParamUse &u : uses) {
    if (!u.view) {
      u.use->set(whole);
      continue;
    }
    Value &copy = views[u.view];
    if (!copy) {
      Operation *clone = b.clone(*u.view);
      clone->setOperand(0, whole);
      copy = clone->getResult(0);
    }
    u.use->set(copy);
  }
}

} // namespace

/// ZeRO-3: a sharded parameter argument of `f` becomes its dp shard, all-gathered right before its
/// first use. Where `f` also runs the backward (ops no forward result depends on), the backward's
/// uses read a second all-gather placed before the first of them, so the forward's whole copy dies
/// after its last forward use (reshard after forward); the copy carries `mega.regather` so that CSE
/// keeps it. Without `reshard` every use reads the forward's gather, kept whole until the backward
/// is done with it. A cast of the parameter (mixed precision's bf16/fp16 copy) moves with the
/// gather: each half casts its own gathered copy right before its first use of the cast.
void gatherParameters(func::FuncOp f, const Distribution &dist, ArrayRef<Param> params,
                      bool reshard) {
  if (f.isExternal())
    return;
  OpBuilder b(f.getContext());
  Block &block = f.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  // The forward: what the results other than gradients and accumulators depend on.
  bool backward = false;
  DenseSet<Operation *> forward = forwardOps(f, backward);
  ArrayAttr dpAxes = b.getStrArrayAttr({"dp"});
  for (BlockArgument arg : f.getArguments()) {
    auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kParamAttr);
    if (!name)
      continue;
    const Param *p =
        llvm::find_if(params, [&](const Param &q) { return q.name == name.getValue(); });
    if (p == params.end() || !zeroSharded(dist, *p))
      continue;
    SmallVector<ParamUse> forwardUses, backwardUses;
    SmallVector<Operation *> views;
    auto add = [&](OpOperand *use, Operation *view) {
      (!backward || !reshard || forward.contains(use->getOwner()) ? forwardUses : backwardUses)
          .push_back({use, view});
    };
    for (OpOperand &use : arg.getUses()) {
      Operation *owner = use.getOwner();
      if (!isParamView(owner) || owner->getBlock() != &block) {
        add(&use, nullptr);
        continue;
      }
      views.push_back(owner);
      for (OpOperand &viewUse : owner->getResult(0).getUses())
        add(&viewUse, owner);
    }
    arg.setType(dpShard(dist, *p));
    f.setArgAttrs(arg.getArgNumber(), storedAttrs(b, dist, *p));
    // A padded shard gathers into [dp * c, ...] and slices the parameter's rows off the
    // padding.
    bool padded = zeroPadded(dist, *p);
    auto gather = [&](OpBuilder &at, bool again) -> Value {
      RankedTensorType gathered = p->type;
      if (padded) {
        SmallVector<int64_t> shape(p->type.getShape());
        shape[0] = dpShard(dist, *p).getDimSize(0) * dist.size("dp");
        gathered = RankedTensorType::get(shape, p->type.getElementType());
      }
      auto all = mega::AllGatherOp::create(at, arg.getLoc(), gathered, arg, dist.mesh, dpAxes,
                                           at.getI64IntegerAttr(zeroDim(dist, *p)), UnitAttr());
      if (again)
        all->setAttr(kRegatherAttr, at.getUnitAttr());
      if (!padded)
        return all;
      int64_t rank = p->type.getRank();
      SmallVector<int64_t> starts(rank, 0), strides(rank, 1);
      return mega::SliceOp::create(at, arg.getLoc(), p->type, all, starts, p->type.getShape(),
                                   strides);
    };
    gatherHalf(b, forwardUses, false, gather);
    gatherHalf(b, backwardUses, !forwardUses.empty(), gather);
    for (Operation *view : views)
      if (view->use_empty())
        view->erase();
  }
  f.setType(FunctionType::get(f.getContext(), block.getArgumentTypes(), ret.getOperandTypes()));
}

/// A sharded parameter's gradient accumulator: its dp shard under ZeRO-2/3.
RankedTensorType gradType(const Distribution &dist, const Param &p) {
  return dist.zero >= 2 ? momentType(dist, p) : p.type;
}

/// A parameter as stored: its dp shard under ZeRO-3.
RankedTensorType storedType(const Distribution &dist, const Param &p) {
  return dist.zero == 3 ? momentType(dist, p) : p.type;
}

/// The parameter's mega.dim_axes (none: every dim whole) with dp added on its ZeRO dim, after the
/// axes already splitting it: a dp shard of the local tensor.
ArrayAttr dpShardDims(OpBuilder &b, const Distribution &dist, const Param &p) {
  SmallVector<Attribute> split;
  if (auto dims = dyn_cast_or_null<ArrayAttr>(p.attrs.get(kDimAxesAttr)))
    split.assign(dims.begin(), dims.end());
  else
    split.assign(p.type.getRank(), b.getStrArrayAttr({}));
  int64_t dim = zeroDim(dist, p);
  SmallVector<StringRef> axes = stringsOf(split[dim]);
  axes.push_back("dp");
  split[dim] = b.getStrArrayAttr(axes);
  return b.getArrayAttr(split);
}

/// A parameter argument's attributes: under ZeRO-3 a sharded one's dim_axes gain dp on its dim, so
/// codegen's parameter table records the shard's offset and checkpoints reshard.
DictionaryAttr storedAttrs(OpBuilder &b, const Distribution &dist, const Param &p) {
  if (dist.zero != 3 || !zeroSharded(dist, p))
    return p.attrs;
  NamedAttrList attrs(p.attrs);
  attrs.set(kDimAxesAttr, dpShardDims(b, dist, p));
  if (!attrs.get(kGlobalShapeAttr))
    attrs.set(kGlobalShapeAttr, b.getDenseI64ArrayAttr(p.type.getShape()));
  return attrs.getDictionary(b.getContext());
}

/// A moment's type: the parameter's, or its dp shard under ZeRO-1/2/3.
RankedTensorType momentType(const Distribution &dist, const Param &p) {
  return zeroSharded(dist, p) ? dpShard(dist, p) : p.type;
}

/// A state argument's attributes in a partitioned step: its name, global shape and split (the
/// parameter's, plus dp on the ZeRO dim for ZeRO moments and ZeRO-2/3 accumulators), and for
/// accumulators the axes the gradient is a partial sum over (not dp once reduce-scattered).
DictionaryAttr stateAttrs(OpBuilder &b, const Distribution &dist, const Param &p,
                          StringRef prefix) {
  bool accumulator = prefix == "grad.";
  bool shard = zeroSharded(dist, p) && (!accumulator || dist.zero >= 2);
  SmallVector<NamedAttribute> attrs;
  attrs.push_back(b.getNamedAttr(kStateAttr, b.getStringAttr(prefix + p.name)));
  Attribute shape = p.attrs.get(kGlobalShapeAttr);
  if (!shape && shard)
    shape = b.getDenseI64ArrayAttr(p.type.getShape());
  if (shape)
    attrs.push_back(b.getNamedAttr(kGlobalShapeAttr, shape));
  if (shard)
    attrs.push_back(b.getNamedAttr(kDimAxesAttr, dpShardDims(b, dist, p)));
  else if (Attribute dims = p.attrs.get(kDimAxesAttr))
    attrs.push_back(b.getNamedAttr(kDimAxesAttr, dims));
  if (accumulator) {
    SmallVector<StringRef> partial = stringsOf(p.attrs.get(kGradPartialAttr));
    if (shard)
      llvm::erase(partial, "dp");
    if (!partial.empty())
      attrs.push_back(b.getNamedAttr(kGradPartialAttr, b.getStrArrayAttr(partial)));
  }
  return b.getDictionaryAttr(attrs);
}

/// A ZeRO gradient's dp shard type: its ZeRO dim (dim 0 under ZeRO-1/2) divided by dp, rounded
/// up for a padded one (ZeRO-3).
RankedTensorType dpShard(const Distribution &dist, const Param &p) {
  SmallVector<int64_t> shape(p.type.getShape());
  int64_t dim = zeroDim(dist, p);
  shape[dim] = llvm::divideCeil(shape[dim], dist.size("dp"));
  return RankedTensorType::get(shape, p.type.getElementType());
}

} // namespace megac::passes::zero
