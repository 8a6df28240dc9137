// mega-training-optimizer: builds @apply_gradients (global norm, optional clipping, one AdamW
// update per parameter) from @forward_backward's parameters and gradient accumulators; the
// ZeRO-2/3 rewrites of the training functions are in ZeroSharding.cpp.
#include "passes/partition/Passes.h"
#include "passes/training/Passes.h"
#include "passes/training/ZeroSharding.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <map>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGOPTIMIZER
#include "passes/training/Passes.h.inc"

namespace {

using namespace zero;

constexpr StringLiteral kForwardBackward = "forward_backward";
constexpr StringLiteral kApplyGradients = "apply_gradients";
constexpr StringLiteral kCheckGradients = "check_gradients";
constexpr StringLiteral kLossScale = "loss_scale";

/// Gradients reduced by one collective (docs/training-step.md, "Buckets"): the partial axes
/// of an all-reduce bucket (empty for ZeRO-1's reduce-scatter over dp), the element type and
/// the parameters, in order.
struct Bucket {
  SmallVector<StringRef> axes;
  Type element;
  SmallVector<size_t> members;
};

/// Weight decay applies to matrices, not to biases and norm scales (Megatron's rule), judged by
/// the shape the model's files hold: a split fused projection's bias is [3, h] in the IR but a
/// vector in the model (mega.source_shape).
bool decays(const Param &p) {
  if (p.attrs)
    if (auto source = p.attrs.getAs<DenseI64ArrayAttr>(mega::kSourceShapeAttr))
      return source.size() >= 2;
  return p.type.getRank() >= 2;
}

struct TrainingOptimizerPass : impl::TrainingOptimizerBase<TrainingOptimizerPass> {
  using TrainingOptimizerBase::TrainingOptimizerBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult checkOptions(ModuleOp module) {
    auto inUnit = [](double x) { return x >= 0.0 && x < 1.0; };
    if (!inUnit(beta1) || !inUnit(beta2))
      return module.emitError() << "mega-training-optimizer: beta1 and beta2 must be in [0, 1), "
                                << "got " << beta1 << " and " << beta2;
    if (!(eps > 0) || !std::isfinite(eps))
      return module.emitError() << "mega-training-optimizer: eps must be > 0, got " << eps;
    if (!(weightDecay >= 0) || !std::isfinite(weightDecay))
      return module.emitError() << "mega-training-optimizer: weight-decay must be >= 0, got "
                                << weightDecay;
    if (!(clipGrad >= 0) || !std::isfinite(clipGrad))
      return module.emitError() << "mega-training-optimizer: clip-grad must be >= 0 (0: off), got "
                                << clipGrad;
    return success();
  }

  /// The functions of `container` that accumulate gradients: @forward_backward, or a pipeline
  /// stage's chunk functions (docs/pipeline.md).
  static SmallVector<func::FuncOp> trainingFunctions(ModuleOp container) {
    SmallVector<func::FuncOp> found;
    if (auto fb = container.lookupSymbol<func::FuncOp>(kForwardBackward))
      found.push_back(fb);
    for (auto f : container.getOps<func::FuncOp>())
      for (unsigned i = 0; i < f.getNumArguments() && f.getSymName() != kForwardBackward; ++i)
        if (auto state = f.getArgAttrOfType<StringAttr>(i, kStateAttr);
            state && state.getValue().starts_with("grad.")) {
          found.push_back(f);
          break;
        }
    return found;
  }

  /// The parameters of the training functions (each once, in order of appearance), each with a
  /// `grad.<name>` accumulator.
  FailureOr<SmallVector<Param>> collectParams(ArrayRef<func::FuncOp> functions) {
    SmallVector<Param> params;
    llvm::StringSet<> accumulators, seen;
    for (func::FuncOp fb : functions)
      for (unsigned i = 0; i < fb.getNumArguments(); ++i)
        if (auto state = fb.getArgAttrOfType<StringAttr>(i, kStateAttr))
          accumulators.insert(state.getValue());
    // Parameters from every function of the container: a pipeline chunk's backward may not
    // read a parameter (an embedding table) whose forward does.
    SmallVector<func::FuncOp> all(functions.begin(), functions.end());
    if (ModuleOp container = functions.front()->getParentOfType<ModuleOp>())
      for (auto f : container.getOps<func::FuncOp>())
        if (!llvm::is_contained(all, f))
          all.push_back(f);
    for (func::FuncOp fb : all)
      for (unsigned i = 0; i < fb.getNumArguments(); ++i) {
        auto name = fb.getArgAttrOfType<StringAttr>(i, mega::kParamAttr);
        if (!name || !seen.insert(name.getValue()).second)
          continue;
        auto type = dyn_cast<RankedTensorType>(fb.getArgumentTypes()[i]);
        if (!type || !isa<FloatType>(type.getElementType()))
          return fb.emitError() << "mega-training-optimizer: parameter '" << name.getValue()
                                << "' is not a floating-point tensor";
        if (!accumulators.contains(("grad." + name.getValue()).str()))
          return fb.emitError() << "mega-training-optimizer: parameter '" << name.getValue()
                                << "' has no gradient accumulator grad." << name.getValue()
                                << " (run mega-training-autodiff first)";
        params.push_back({name.getValue(), fb.getArgAttrDict(i), type});
      }
    if (params.empty()) {
      func::FuncOp first = functions.front();
      return first.emitError() << "mega-training-optimizer: @" << first.getSymName()
                               << " has no parameters";
    }
    return params;
  }

  LogicalResult run(ModuleOp module) {
    if (failed(checkOptions(module)))
      return failure();
    if (zero < 0 || zero > 3)
      return module.emitError() << "mega-training-optimizer: zero must be 0, 1, 2 or 3, got "
                                << static_cast<int64_t>(zero);
    if (bucketSize < 0)
      return module.emitError() << "mega-training-optimizer: bucket-size must be >= 1 element "
                                << "(0: Megatron's default), got "
                                << static_cast<int64_t>(bucketSize);
    SmallVector<ModuleOp> stages;
    for (auto nested : module.getOps<ModuleOp>())
      if (nested->hasAttr("mega.stage"))
        stages.push_back(nested);
    if (stages.empty())
      return buildFor(module, module, 0);
    for (ModuleOp stage : stages) {
      auto index = stage->getAttrOfType<IntegerAttr>("mega.stage");
      if (!index)
        return stage.emitError() << "mega-training-optimizer: mega.stage must be an integer";
      if (failed(buildFor(stage, module, index.getInt())))
        return failure();
    }
    return success();
  }

  LogicalResult buildFor(ModuleOp module, ModuleOp top, int64_t stage) {
    SmallVector<func::FuncOp> functions = trainingFunctions(module);
    if (functions.empty())
      return module.emitError() << "mega-training-optimizer: no function @" << kForwardBackward
                                << " in the module (run mega-training-loss and "
                                   "mega-training-autodiff first)";
    func::FuncOp fb = functions.front();
    if (Operation *existing = module.lookupSymbol(kApplyGradients))
      return existing->emitError()
             << "mega-training-optimizer: the module already has @" << kApplyGradients;
    FailureOr<SmallVector<Param>> params = collectParams(functions);
    if (failed(params))
      return failure();
    auto mesh = module->getAttrOfType<mega::MeshAttr>(kMeshAttr);
    if (!mesh)
      mesh = top->getAttrOfType<mega::MeshAttr>(kMeshAttr);
    Distribution dist;
    if (mesh && mesh.getNumDevices() > 1)
      dist = Distribution{mesh, stage, zero};
    if (failed(checkShardable(fb, dist, *params)))
      return failure();
    // Dynamic loss scaling (fp16): the gradients are scaled by loss_scale.
    // A pipeline stage whose chunks do not read loss_scale (only the last one's loss does)
    // still holds scaled gradients: look in every stage.
    Type scaleType;
    top.walk([&](func::FuncOp f) {
      for (unsigned i = 0; i < f.getNumArguments(); ++i)
        if (auto in = f.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
            in && in.getValue() == kLossScale)
          scaleType = f.getArgumentTypes()[i];
    });
    if (scaleType) {
      auto scalar = dyn_cast<RankedTensorType>(scaleType);
      if (!scalar || scalar.getRank() != 0 || llvm::any_of(*params, [&](const Param &p) {
            return p.type.getElementType() != scalar.getElementType();
          }))
        return fb.emitError() << "mega-training-optimizer: the loss_scale input is " << scaleType
                              << "; it must be a 0-d tensor of the parameters' float type";
      if (Operation *existing = module.lookupSymbol(kCheckGradients))
        return existing->emitError()
               << "mega-training-optimizer: the module already has @" << kCheckGradients;
    }

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    Location loc = fb.getLoc();
    // lr in the parameters' precision: f64 only for an all-f64 (reference) model.
    bool allF64 =
        llvm::all_of(*params, [](const Param &p) { return p.type.getElementType().isF64(); });
    auto lrType = RankedTensorType::get({}, allF64 ? Type(b.getF64Type()) : Type(b.getF32Type()));
    auto stepType = RankedTensorType::get({}, b.getI64Type());

    auto named = [&](StringRef attr, const Twine &value) {
      return b.getDictionaryAttr(b.getNamedAttr(attr, b.getStringAttr(value)));
    };
    size_t n = params->size();
    SmallVector<Type> argTypes, resultTypes;
    SmallVector<DictionaryAttr> argAttrs, resultAttrs;
    for (const Param &p : *params) {
      argTypes.push_back(storedType(dist, p));
      argAttrs.push_back(storedAttrs(b, dist, p));
    }
    for (StringRef prefix : {"grad.", "adam.m.", "adam.v."})
      for (const Param &p : *params) {
        bool moment = prefix != "grad.";
        argTypes.push_back(moment ? momentType(dist, p) : gradType(dist, p));
        argAttrs.push_back(dist ? stateAttrs(b, dist, p, prefix)
                                : named(kStateAttr, prefix + p.name));
      }
    argTypes.append({lrType, stepType});
    argAttrs.push_back(named(mega::kInputAttr, "lr"));
    argAttrs.push_back(named(mega::kInputAttr, "step"));
    if (scaleType) {
      argTypes.push_back(scaleType);
      argAttrs.push_back(named(mega::kInputAttr, kLossScale));
    }
    for (StringRef prefix : {"", "adam.m.", "adam.v."})
      for (const Param &p : *params) {
        resultTypes.push_back(prefix.empty() ? storedType(dist, p) : momentType(dist, p));
        resultAttrs.push_back(named(kUpdatesAttr, prefix + p.name));
      }

    b.setInsertionPointAfter(fb);
    auto apply = func::FuncOp::create(b, loc, kApplyGradients,
                                      FunctionType::get(ctx, argTypes, resultTypes));
    Block *body = apply.addEntryBlock();
    b.setInsertionPointToStart(body);
    auto args = body->getArguments();
    auto paramArgs = args.slice(0, n), grads = args.slice(n, n), ms = args.slice(2 * n, n),
         vs = args.slice(3 * n, n);
    Value lr = args[4 * n], step = args[4 * n + 1];

    SmallVector<Value> gradValues(grads.begin(), grads.end());
    Value scale = scaleType ? args[4 * n + 2] : Value();
    Value norm;
    if (dist) {
      reduceGradients(b, loc, dist, *params, gradValues, bucketLimit(dist));
      if (scale)
        for (Value &g : gradValues)
          g = mega::DivOp::create(b, loc, g.getType(), g, splat(b, loc, scale, g));
      norm = partitionedNorm(b, loc, dist, *params, gradValues);
    } else {
      if (scale)
        for (Value &g : gradValues)
          g = mega::DivOp::create(b, loc, g.getType(), g, splat(b, loc, scale, g));
      norm = mega::GlobalNormOp::create(b, loc, gradValues);
    }
    if (clipGrad > 0)
      for (Value &g : gradValues)
        g = mega::ClipByNormOp::create(b, loc, g.getType(), g, norm, b.getF64FloatAttr(clipGrad));

    SmallVector<Value> newParams, newMs, newVs;
    for (size_t i = 0; i < n; ++i) {
      const Param &p = (*params)[i];
      double decay = decays(p) ? weightDecay : 0.0;
      bool sharded = zeroSharded(dist, p);
      Value param = paramArgs[i];
      ArrayAttr dpAxes = b.getStrArrayAttr({"dp"});
      if (sharded && dist.zero < 3) // ZeRO-3 stores the shard already
        param = mega::ShardSliceOp::create(b, loc, ms[i].getType(), param, dist.mesh, dpAxes,
                                           b.getI64IntegerAttr(0));
      auto update = mega::AdamWUpdateOp::create(
          b, loc, param.getType(), ms[i].getType(), vs[i].getType(), param, gradValues[i], ms[i],
          vs[i], lr, step, b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
          b.getF64FloatAttr(eps), b.getF64FloatAttr(decay));
      newParams.push_back(update.getNewParam()); // a dp shard under ZeRO-1/2: gathered below
      newMs.push_back(update.getNewExpAvg());
      newVs.push_back(update.getNewExpAvgSq());
    }
    if (dist && dist.zero < 3)
      for (const Bucket &bucket :
           gradientBuckets(dist, *params, /*sharded=*/true, bucketLimit(dist)))
        allGatherBucket(b, loc, dist, *params, bucket, newParams);
    SmallVector<Value> results;
    llvm::append_range(results, newParams);
    llvm::append_range(results, newMs);
    llvm::append_range(results, newVs);
    results.push_back(norm);
    func::ReturnOp::create(b, loc, results);

    resultTypes.push_back(norm.getType());
    resultAttrs.push_back(named(mega::kOutputAttr, "grad_norm"));
    apply.setType(FunctionType::get(ctx, argTypes, resultTypes));
    apply.setAllArgAttrs(argAttrs);
    apply.setAllResultAttrs(resultAttrs);
    if (scaleType)
      buildCheckGradients(b, apply, *params, scaleType, dist);
    if (dist && dist.zero >= 2)
      for (func::FuncOp f : functions)
        if (failed(shardAccumulators(f, dist, *params)))
          return failure();
    if (dist && dist.zero == 3)
      for (auto f : llvm::to_vector(module.getOps<func::FuncOp>()))
        if (f.getSymName() != kApplyGradients && f.getSymName() != kCheckGradients)
          gatherParameters(f, dist, *params, reshardAfterForward);
    return success();
  }

  /// Whole gradients from the accumulators: shares from other pipeline stages added (tied
  /// parameters), partial sums all-reduced, or reduce-scattered over dp under ZeRO-1.
  static void reduceGradients(OpBuilder &b, Location loc, const Distribution &dist,
                              ArrayRef<Param> params, SmallVectorImpl<Value> &grads,
                              int64_t limit) {
    // Parameters shared between stages, in name order so both sides exchange in one order.
    SmallVector<size_t> shared;
    for (size_t i = 0; i < params.size(); ++i)
      if (integersOf(params[i].attrs.get("mega.shared_stages")).size() > 1)
        shared.push_back(i);
    llvm::sort(shared, [&](size_t a, size_t c) { return params[a].name < params[c].name; });
    for (size_t k = 0; k < shared.size(); ++k) {
      size_t i = shared[k];
      SmallVector<int64_t> stages = integersOf(params[i].attrs.get("mega.shared_stages"));
      llvm::sort(stages);
      int64_t tag = 1 << 20 | static_cast<int64_t>(k);
      for (int64_t other : stages)
        if (other != dist.stage)
          mega::SendOp::create(b, loc, grads[i], dist.mesh, b.getStringAttr("pp"),
                               b.getI64IntegerAttr(other - dist.stage), b.getI64IntegerAttr(tag));
      // Sum in stage order: every stage computes the same value.
      Value total;
      for (int64_t other : stages) {
        Value term = other == dist.stage
                         ? grads[i]
                         : mega::RecvOp::create(
                               b, loc, grads[i].getType(), dist.mesh, b.getStringAttr("pp"),
                               b.getI64IntegerAttr(other - dist.stage), b.getI64IntegerAttr(tag))
                               .getResult();
        total =
            total ? mega::AddOp::create(b, loc, total.getType(), total, term).getResult() : term;
      }
      grads[i] = total;
    }
    for (const Bucket &bucket : gradientBuckets(dist, params, /*sharded=*/false, limit))
      allReduceBucket(b, loc, dist, params, bucket, grads);
    if (dist.zero >= 2) {
      // ZeRO-2/3: the accumulators hold dp shards already reduced over dp, micro-batch by
      // micro-batch; a gradient also partial over other axes (tp, ep) is summed over those.
      for (size_t i = 0; i < params.size(); ++i) {
        SmallVector<StringRef> partial = stringsOf(params[i].attrs.get(kGradPartialAttr));
        llvm::erase(partial, "dp");
        if (zeroSharded(dist, params[i]) && !partial.empty())
          grads[i] = mega::AllReduceOp::create(b, loc, grads[i].getType(), mega::ReduceKind::sum,
                                               grads[i], dist.mesh, b.getStrArrayAttr(partial));
      }
      return;
    }
    for (const Bucket &bucket : gradientBuckets(dist, params, /*sharded=*/true, limit))
      reduceScatterBucket(b, loc, dist, params, bucket, grads);
  }

  /// The elements per bucket: the bucket-size option, or Megatron's default
  /// max(40000000, 1000000 x dp) (megatron/core/distributed/distributed_data_parallel.py).
  int64_t bucketLimit(const Distribution &dist) const {
    if (bucketSize > 0)
      return bucketSize;
    return std::max<int64_t>(40000000, 1000000 * dist.size("dp"));
  }

  /// The buckets of the dp reduction, in parameter order, so every rank builds the same ones:
  /// with `sharded` false the gradients all-reduced (a partial sum, not ZeRO-1 sharded),
  /// grouped by their partial axes and element type; with it true ZeRO-1's dp-sharded
  /// gradients (and parameters), grouped by element type. Each group is cut into runs of
  /// consecutive members of at most `limit` local elements; a larger tensor is a bucket alone.
  static SmallVector<Bucket> gradientBuckets(const Distribution &dist, ArrayRef<Param> params,
                                             bool sharded, int64_t limit) {
    SmallVector<Bucket> groups;
    for (size_t i = 0; i < params.size(); ++i) {
      SmallVector<StringRef> partial = stringsOf(params[i].attrs.get(kGradPartialAttr));
      if (partial.empty() || zeroSharded(dist, params[i]) != sharded)
        continue;
      if (sharded)
        partial.clear(); // one reduce-scatter over dp; the other axes per member after it
      Type element = params[i].type.getElementType();
      auto *it = llvm::find_if(
          groups, [&](const Bucket &k) { return k.axes == partial && k.element == element; });
      if (it == groups.end())
        groups.push_back({partial, element, {i}});
      else
        it->members.push_back(i);
    }
    SmallVector<Bucket> buckets;
    for (const Bucket &group : groups) {
      int64_t total = 0;
      for (auto [k, i] : llvm::enumerate(group.members)) {
        int64_t n = params[i].type.getNumElements();
        if (k == 0 || total + n > limit) { // the group's first bucket, or this one is full
          buckets.push_back({group.axes, group.element, {}});
          total = 0;
        }
        buckets.back().members.push_back(i);
        total += n;
      }
    }
    return buckets;
  }

  /// `value` as `type` (same elements): a reshape, or `value` itself when the shape is the same.
  static Value reshaped(OpBuilder &b, Location loc, Type type, Value value) {
    if (value.getType() == type)
      return value;
    return mega::ReshapeOp::create(b, loc, type, value);
  }

  /// One all-reduce for a bucket of partial gradients: flattened, concatenated, reduced over
  /// the bucket's axes and split back.
  static void allReduceBucket(OpBuilder &b, Location loc, const Distribution &dist,
                              ArrayRef<Param> params, const Bucket &bucket,
                              SmallVectorImpl<Value> &grads) {
    Type element = bucket.element;
    int64_t total = 0;
    SmallVector<Value> flat;
    for (size_t i : bucket.members) {
      int64_t n = params[i].type.getNumElements();
      flat.push_back(reshaped(b, loc, RankedTensorType::get({n}, element), grads[i]));
      total += n;
    }
    auto flatType = RankedTensorType::get({total}, element);
    Value joined = flat.size() == 1 ? flat.front()
                                    : mega::ConcatOp::create(b, loc, flatType, flat, 0).getResult();
    Value reduced = mega::AllReduceOp::create(b, loc, flatType, mega::ReduceKind::sum, joined,
                                              dist.mesh, b.getStrArrayAttr(bucket.axes));
    int64_t offset = 0;
    for (size_t i : bucket.members) {
      int64_t n = params[i].type.getNumElements();
      Value piece = reduced;
      if (flat.size() > 1)
        piece = mega::SliceOp::create(b, loc, RankedTensorType::get({n}, element), reduced,
                                      ArrayRef<int64_t>{offset}, ArrayRef<int64_t>{offset + n},
                                      ArrayRef<int64_t>{1});
      grads[i] = reshaped(b, loc, grads[i].getType(), piece);
      offset += n;
    }
  }

  /// ZeRO-1: one reduce-scatter over dp for a bucket. Each member is dim-0 sharded over dp, so
  /// as [dp, n/dp] its row r is rank r's shard; the members concatenated along dim 1 make
  /// [dp, sum n/dp], whose row r — every member's r-th shard — is what rank r receives. A
  /// member's shard is then sliced back and summed over its other partial axes (tp, ...).
  static void reduceScatterBucket(OpBuilder &b, Location loc, const Distribution &dist,
                                  ArrayRef<Param> params, const Bucket &bucket,
                                  SmallVectorImpl<Value> &grads) {
    int64_t dp = dist.size("dp");
    ArrayAttr dpAxes = b.getStrArrayAttr({"dp"});
    Type element = bucket.element;
    if (bucket.members.size() == 1) {
      size_t i = bucket.members.front();
      grads[i] = mega::ReduceScatterOp::create(
          b, loc, dpShard(dist, params[i]), mega::ReduceKind::sum, grads[i], dist.mesh, dpAxes, 0);
    } else {
      SmallVector<Value> columns;
      int64_t width = 0;
      for (size_t i : bucket.members) {
        int64_t n = params[i].type.getNumElements() / dp;
        columns.push_back(reshaped(b, loc, RankedTensorType::get({dp, n}, element), grads[i]));
        width += n;
      }
      Value matrix =
          mega::ConcatOp::create(b, loc, RankedTensorType::get({dp, width}, element), columns, 1);
      Value flat = reshaped(b, loc, RankedTensorType::get({dp * width}, element), matrix);
      Value mine = mega::ReduceScatterOp::create(b, loc, RankedTensorType::get({width}, element),
                                                 mega::ReduceKind::sum, flat, dist.mesh, dpAxes, 0);
      int64_t offset = 0;
      for (size_t i : bucket.members) {
        int64_t n = params[i].type.getNumElements() / dp;
        Value piece = mega::SliceOp::create(b, loc, RankedTensorType::get({n}, element), mine,
                                            ArrayRef<int64_t>{offset},
                                            ArrayRef<int64_t>{offset + n}, ArrayRef<int64_t>{1});
        grads[i] = reshaped(b, loc, dpShard(dist, params[i]), piece);
        offset += n;
      }
    }
    for (size_t i : bucket.members) {
      SmallVector<StringRef> partial = stringsOf(params[i].attrs.get(kGradPartialAttr));
      llvm::erase(partial, "dp");
      if (!partial.empty())
        grads[i] = mega::AllReduceOp::create(b, loc, grads[i].getType(), mega::ReduceKind::sum,
                                             grads[i], dist.mesh, b.getStrArrayAttr(partial));
    }
  }

  /// ZeRO-1: the updated dp shards of a bucket back to whole parameters with one all-gather:
  /// concatenated, gathered into [dp, sum n/dp] (row r: rank r's shards) and each member's
  /// columns, [dp, n/dp], reshaped to the parameter.
  static void allGatherBucket(OpBuilder &b, Location loc, const Distribution &dist,
                              ArrayRef<Param> params, const Bucket &bucket,
                              SmallVectorImpl<Value> &shards) {
    int64_t dp = dist.size("dp");
    ArrayAttr dpAxes = b.getStrArrayAttr({"dp"});
    Type element = bucket.element;
    if (bucket.members.size() == 1) {
      size_t i = bucket.members.front();
      shards[i] = mega::AllGatherOp::create(b, loc, params[i].type, shards[i], dist.mesh, dpAxes,
                                            b.getI64IntegerAttr(0), UnitAttr());
      return;
    }
    SmallVector<Value> flat;
    int64_t width = 0;
    for (size_t i : bucket.members) {
      int64_t n = params[i].type.getNumElements() / dp;
      flat.push_back(reshaped(b, loc, RankedTensorType::get({n}, element), shards[i]));
      width += n;
    }
    Value mine = mega::ConcatOp::create(b, loc, RankedTensorType::get({width}, element), flat, 0);
    Value all =
        mega::AllGatherOp::create(b, loc, RankedTensorType::get({dp * width}, element), mine,
                                  dist.mesh, dpAxes, b.getI64IntegerAttr(0), UnitAttr());
    Value matrix = reshaped(b, loc, RankedTensorType::get({dp, width}, element), all);
    int64_t offset = 0;
    for (size_t i : bucket.members) {
      int64_t n = params[i].type.getNumElements() / dp;
      Value columns = mega::SliceOp::create(
          b, loc, RankedTensorType::get({dp, n}, element), matrix, ArrayRef<int64_t>{0, offset},
          ArrayRef<int64_t>{dp, offset + n}, ArrayRef<int64_t>{1, 1});
      shards[i] = reshaped(b, loc, params[i].type, columns);
      offset += n;
    }
  }

  /// sqrt of the sum of squares of every gradient element of the model, each counted once:
  /// shards' sums are all-reduced over the axes they are split over, stages' over pp; a
  /// parameter shared by stages counts on its first stage only.
  static Value partitionedNorm(OpBuilder &b, Location loc, const Distribution &dist,
                               ArrayRef<Param> params, ArrayRef<Value> grads) {
    auto scalarType = RankedTensorType::get({}, params.front().type.getElementType());
    // The gradients grouped by the mesh axes their elements are split over; each group's sum of
    // squares is one global_norm over the group (every gradient read once, summed in double by
    // the runtimes), squared back, then all-reduced over those axes.
    std::map<SmallVector<StringRef>, SmallVector<Value>> groups;
    for (size_t i = 0; i < params.size(); ++i) {
      SmallVector<int64_t> stages = integersOf(params[i].attrs.get("mega.shared_stages"));
      if (stages.size() > 1 && *llvm::min_element(stages) != dist.stage)
        continue;
      SmallVector<StringRef> axes;
      if (auto dims = dyn_cast_or_null<ArrayAttr>(params[i].attrs.get(kDimAxesAttr)))
        for (Attribute d : dims)
          llvm::append_range(axes, stringsOf(d));
      if (zeroSharded(dist, params[i]))
        axes.push_back("dp");
      llvm::sort(axes);
      groups[axes].push_back(grads[i]);
    }
    std::map<SmallVector<StringRef>, Value> byAxes;
    for (auto &[axes, members] : groups) {
      Value norm = mega::GlobalNormOp::create(b, loc, members);
      scalarType = cast<RankedTensorType>(norm.getType());
      byAxes[axes] = mega::MulOp::create(b, loc, scalarType, norm, norm);
    }
    Value total;
    for (auto &[axes, sum] : byAxes) {
      Value whole = axes.empty()
                        ? sum
                        : mega::AllReduceOp::create(b, loc, scalarType, mega::ReduceKind::sum, sum,
                                                    dist.mesh, b.getStrArrayAttr(axes))
                              .getResult();
      total = total ? mega::AddOp::create(b, loc, scalarType, total, whole).getResult() : whole;
    }
    if (!total) {
      auto zero = DenseElementsAttr::get(scalarType, b.getZeroAttr(scalarType.getElementType()));
      total = mega::ConstantOp::create(b, loc, scalarType, zero);
    }
    if (dist.size("pp") > 1)
      total = mega::AllReduceOp::create(b, loc, scalarType, mega::ReduceKind::sum, total, dist.mesh,
                                        b.getStrArrayAttr({"pp"}));
    return mega::SqrtOp::create(b, loc, scalarType, total);
  }

  /// `scalar` (0-d) broadcast to `like`'s type.
  static Value splat(OpBuilder &b, Location loc, Value scalar, Value like) {
    auto type = cast<RankedTensorType>(like.getType());
    if (type.getRank() == 0)
      return scalar;
    auto ones =
        RankedTensorType::get(SmallVector<int64_t>(type.getRank(), 1), type.getElementType());
    Value r = mega::ReshapeOp::create(b, loc, ones, scalar);
    return mega::BroadcastOp::create(b, loc, type, r);
  }

  /// @check_gradients(grad accumulators, loss_scale) -> unscaled_grad_norm: the norm the CLI
  /// tests for overflow (inf or nan) before it runs @apply_gradients.
  void buildCheckGradients(OpBuilder &b, func::FuncOp after, ArrayRef<Param> params, Type scaleType,
                           const Distribution &dist) {
    MLIRContext *ctx = b.getContext();
    Location loc = after.getLoc();
    auto named = [&](StringRef attr, const Twine &value) {
      return b.getDictionaryAttr(b.getNamedAttr(attr, b.getStringAttr(value)));
    };
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    for (const Param &p : params) {
      argTypes.push_back(gradType(dist, p));
      argAttrs.push_back(dist ? stateAttrs(b, dist, p, "grad.")
                              : named(kStateAttr, "grad." + p.name));
    }
    argTypes.push_back(scaleType);
    argAttrs.push_back(named(mega::kInputAttr, kLossScale));
    b.setInsertionPointAfter(after);
    auto check = func::FuncOp::create(b, loc, kCheckGradients,
                                      FunctionType::get(ctx, argTypes, {scaleType}));
    Block *body = check.addEntryBlock();
    b.setInsertionPointToStart(body);
    SmallVector<Value> grads(body->getArguments().drop_back());
    Value norm = mega::GlobalNormOp::create(b, loc, grads);
    if (dist) {
      // Partitioned: the accumulators are unreduced shares, so this is an overflow check (inf
      // or nan anywhere), not the norm; @apply_gradients' grad_norm is the true one.
      SmallVector<StringRef> axes;
      for (auto [name, size] : llvm::zip(dist.mesh.getAxisNames(), dist.mesh.getAxisSizes()))
        if (size > 1)
          axes.push_back(name.getValue());
      auto type = cast<RankedTensorType>(norm.getType());
      Value squares = mega::MulOp::create(b, loc, type, norm, norm);
      Value sum = mega::AllReduceOp::create(b, loc, type, mega::ReduceKind::sum, squares, dist.mesh,
                                            b.getStrArrayAttr(axes));
      norm = mega::SqrtOp::create(b, loc, type, sum);
    }
    Value unscaled = mega::DivOp::create(b, loc, scaleType, norm, body->getArguments().back());
    func::ReturnOp::create(b, loc, unscaled);
    check.setAllArgAttrs(argAttrs);
    check.setAllResultAttrs(
        ArrayRef<DictionaryAttr>{named(mega::kOutputAttr, "unscaled_grad_norm")});
  }
};

} // namespace
} // namespace megac::passes
