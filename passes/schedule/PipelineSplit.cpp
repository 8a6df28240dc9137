// mega-pipeline-split: cuts @forward_backward's forward into P·V chunks balanced by cost and
// puts them in one nested module per pipeline stage (docs/pipeline.md).
#include "passes/schedule/CutPoints.h"
#include "passes/schedule/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"
#include "parallel/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"

#include <limits>
#include <set>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_PIPELINESPLIT
#include "passes/schedule/Passes.h.inc"

namespace {

/// The cost the chunks are balanced by: FLOPs plus bytes moved.
int64_t opCost(Operation *op) {
  auto cost = dyn_cast<mega::CostOpInterface>(op);
  if (!cost)
    return 0;
  return cost.getFlops() + cost.getBytesRead() + cost.getBytesWritten();
}

struct Solution {
  int64_t maxCost = std::numeric_limits<int64_t>::max();
  int64_t bytes = 0;
  SmallVector<unsigned> cuts;
};

/// Chooses `count` of the candidate positions minimizing the largest chunk cost, then the
/// summed crossing bytes (prefix[k]: the cost of ops before k). O(count · m²).
Solution balance(ArrayRef<unsigned> cand, unsigned count, ArrayRef<int64_t> prefix,
                 ArrayRef<int64_t> crossingBytes) {
  Solution none;
  unsigned m = cand.size();
  if (count == 0 || m < count)
    return none;
  using Key = std::pair<int64_t, int64_t>;
  const Key inf{std::numeric_limits<int64_t>::max(), 0};
  // best[j][i]: j+1 cuts, the last at cand[i]; from[j][i]: the previous cut's index.
  std::vector<std::vector<Key>> best(count, std::vector<Key>(m, inf));
  std::vector<std::vector<unsigned>> from(count, std::vector<unsigned>(m, 0));
  for (unsigned i = 0; i < m; ++i)
    best[0][i] = {prefix[cand[i]], crossingBytes[cand[i]]};
  for (unsigned j = 1; j < count; ++j)
    for (unsigned i = j; i < m; ++i)
      for (unsigned p = j - 1; p < i; ++p) {
        if (best[j - 1][p] == inf)
          continue;
        Key k{std::max(best[j - 1][p].first, prefix[cand[i]] - prefix[cand[p]]),
              best[j - 1][p].second + crossingBytes[cand[i]]};
        if (k < best[j][i]) {
          best[j][i] = k;
          from[j][i] = p;
        }
      }
  Key end = inf;
  unsigned last = 0;
  for (unsigned i = count - 1; i < m; ++i) {
    if (best[count - 1][i] == inf)
      continue;
    Key k{std::max(best[count - 1][i].first, prefix.back() - prefix[cand[i]]),
          best[count - 1][i].second};
    if (k < end) {
      end = k;
      last = i;
    }
  }
  Solution out;
  out.maxCost = end.first;
  out.bytes = end.second;
  out.cuts.resize(count);
  for (int j = count - 1, i = last; j >= 0; i = from[j][i], --j)
    out.cuts[j] = cand[i];
  return out;
}

/// The chunk boundaries: chunk c holds ops [bounds[c], bounds[c+1]) of `cuts.ops`.
FailureOr<SmallVector<unsigned>> chooseCuts(func::FuncOp f, const CutPoints &cuts, int64_t stages,
                                            int64_t virtualStages) {
  unsigned n = cuts.ops.size();
  SmallVector<int64_t> prefix(n + 1, 0);
  for (unsigned i = 0; i < n; ++i) {
    Operation *op = cuts.ops[i];
    bool recomputed = op->getNumResults() && cuts.invariant.contains(op->getResult(0));
    prefix[i + 1] = prefix[i] + (recomputed ? 0 : opCost(op));
  }
  unsigned count = stages * virtualStages - 1;
  SmallVector<unsigned> tight = cuts.layerCuts(1), wide = cuts.layerCuts(2);
  Solution tightBest = balance(tight, count, prefix, cuts.crossingBytes);
  Solution wideBest = balance(wide, count, prefix, cuts.crossingBytes);
  if (wideBest.cuts.empty() && tightBest.cuts.empty())
    return f.emitError() << "mega-pipeline-split: cannot cut @forward_backward into " << count + 1
                         << " pipeline chunks: the model has "
                         << std::max(wide.size(), tight.size()) << " cut points, pp=" << stages
                         << " and vpp=" << virtualStages << " need " << count;
  // Minimal crossings unless the wider set (an encoder-decoder's decoder) balances the chunks
  // over 25% better.
  const Solution &chosen =
      wideBest.cuts.empty() || (!tightBest.cuts.empty() &&
                                tightBest.maxCost <= wideBest.maxCost + wideBest.maxCost / 4)
          ? tightBest
          : wideBest;
  SmallVector<unsigned> bounds{0};
  bounds.append(chosen.cuts.begin(), chosen.cuts.end());
  bounds.push_back(n);
  return bounds;
}

struct Chunk {
  /// Its ops in program order, the recomputed producers it reads included.
  SmallVector<Operation *> ops;
  /// The arguments of @forward_backward it reads.
  std::set<unsigned> args;
  /// The activations it receives and sends (or the loss, for the last chunk).
  SmallVector<Value> inputs, outputs;
};

SmallVector<Chunk> collectChunks(func::FuncOp f, const CutPoints &cuts, ArrayRef<unsigned> bounds) {
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  size_t count = bounds.size() - 1;
  SmallVector<Chunk> chunks(count);
  for (size_t c = 0; c < count; ++c) {
    Chunk &chunk = chunks[c];
    std::set<unsigned> members;
    SmallVector<Operation *> work;
    for (unsigned i = bounds[c]; i < bounds[c + 1]; ++i) {
      Operation *op = cuts.ops[i];
      if (op->getNumResults() && cuts.invariant.contains(op->getResult(0)))
        continue;
      members.insert(i);
      work.push_back(op);
    }
    if (c + 1 == count)
      work.push_back(ret);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value v : op->getOperands()) {
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          chunk.args.insert(arg.getArgNumber());
        } else if (cuts.invariant.contains(v)) {
          Operation *def = v.getDefiningOp();
          if (members.insert(cuts.index.lookup(def)).second)
            work.push_back(def);
        }
      }
    }
    for (unsigned i : members)
      chunk.ops.push_back(cuts.ops[i]);
    if (c > 0)
      chunk.inputs = cuts.crossing(bounds[c]);
    chunk.outputs =
        c + 1 < count ? cuts.crossing(bounds[c + 1]) : SmallVector<Value>(ret.getOperands());
  }
  // Inputs no op reads (loss_scale, read by autodiff) go with the loss.
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (f.getArgument(i).use_empty() && !f.getArgAttr(i, mega::kParamAttr))
      chunks.back().args.insert(i);
  return chunks;
}

StringAttr portName(MLIRContext *ctx, int64_t chunk, unsigned i, unsigned size) {
  std::string name = "act.c" + std::to_string(chunk);
  if (size > 1)
    name += "." + std::to_string(i);
  return StringAttr::get(ctx, name);
}

/// @forward_backward.c<c>(params, act.c<c>..., data inputs) -> (act.c<c+1>... | loss), at the
/// end of `stage`. `stagesOf`: the stages reading each parameter argument.
void buildChunk(func::FuncOp f, const Chunk &chunk, int64_t c, bool last, ModuleOp stage,
                DenseMap<unsigned, std::set<int64_t>> &stagesOf) {
  MLIRContext *ctx = f.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(stage.getBody());
  auto isParam = [&](unsigned a) { return bool(f.getArgAttr(a, mega::kParamAttr)); };
  SmallVector<Value> sources;
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned a : chunk.args)
    if (isParam(a)) {
      sources.push_back(f.getArgument(a));
      NamedAttrList attrs(f.getArgAttrDict(a));
      if (stagesOf[a].size() > 1)
        attrs.set(kSharedStagesAttr,
                  b.getI64ArrayAttr(SmallVector<int64_t>(stagesOf[a].begin(), stagesOf[a].end())));
      argAttrs.push_back(attrs.getDictionary(ctx));
    }
  for (auto [i, v] : llvm::enumerate(chunk.inputs)) {
    sources.push_back(v);
    argAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr(mega::kInputAttr, portName(ctx, c, i, chunk.inputs.size()))));
  }
  for (unsigned a : chunk.args)
    if (!isParam(a)) {
      sources.push_back(f.getArgument(a));
      argAttrs.push_back(f.getArgAttrDict(a) ? f.getArgAttrDict(a) : b.getDictionaryAttr({}));
    }
  SmallVector<DictionaryAttr> resultAttrs;
  for (auto [i, v] : llvm::enumerate(chunk.outputs))
    resultAttrs.push_back(
        !last                    ? b.getDictionaryAttr(b.getNamedAttr(mega::kOutputAttr,
                                                                      portName(ctx, c + 1, i, chunk.outputs.size())))
        : f.getResultAttrDict(i) ? f.getResultAttrDict(i)
                                 : b.getDictionaryAttr({}));

  auto func = func::FuncOp::create(
      b, f.getLoc(), "forward_backward.c" + std::to_string(c),
      b.getFunctionType(ValueRange(sources).getTypes(), ValueRange(chunk.outputs).getTypes()));
  for (NamedAttribute attr : f->getDiscardableAttrs())
    func->setAttr(attr.getName(), attr.getValue());
  Block *entry = func.addEntryBlock();
  for (auto [i, attrs] : llvm::enumerate(argAttrs))
    func.setArgAttrs(i, attrs);
  for (auto [i, attrs] : llvm::enumerate(resultAttrs))
    func.setResultAttrs(i, attrs);
  IRMapping map;
  for (auto [src, arg] : llvm::zip(sources, entry->getArguments()))
    map.map(src, arg);
  b.setInsertionPointToEnd(entry);
  for (Operation *op : chunk.ops)
    b.clone(*op, map);
  SmallVector<Value> results;
  for (Value v : chunk.outputs)
    results.push_back(map.lookup(v));
  func::ReturnOp::create(b, f.getLoc(), results);
}

struct PipelineSplitPass : impl::PipelineSplitBase<PipelineSplitPass> {
  using PipelineSplitBase::PipelineSplitBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult run(ModuleOp module) {
    int64_t stages = this->stages, virtualStages = this->virtualStages;
    if (stages < 1 || virtualStages < 1)
      return module.emitError() << "mega-pipeline-split: stages (" << stages
                                << ") and virtual-stages (" << virtualStages
                                << ") must be at least 1";
    schedule::PipelineShape shape{stages, virtualStages, 1, schedule::ChunkPlacement::loop};
    if (placement == "vee")
      shape.placement = schedule::ChunkPlacement::vee;
    else if (placement != "loop")
      return module.emitError() << "mega-pipeline-split: unknown placement '" << placement
                                << "'; use loop or vee";
    if (shape.placement == schedule::ChunkPlacement::vee && virtualStages != 2)
      return module.emitError() << "mega-pipeline-split: placement vee places 2 chunks per stage "
                                   "(zbv); virtual-stages is "
                                << virtualStages;
    if (stages * virtualStages == 1)
      return success();
    for (auto nested : module.getOps<ModuleOp>())
      if (nested->hasAttr(kStageAttr))
        return nested.emitError() << "mega-pipeline-split: the module is split into stages already";
    auto f = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!f)
      return module.emitError() << "mega-pipeline-split: no function @forward_backward (run "
                                   "mega-training-loss first)";
    if (f.isExternal() || !f.getBody().hasOneBlock())
      return f.emitError()
             << "mega-pipeline-split: @forward_backward must have a body of one block";
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      if (f.getArgAttr(i, "mega.state"))
        return f.emitError() << "mega-pipeline-split: @forward_backward was differentiated "
                                "already; split it before mega-training-autodiff";

    Block &body = f.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    CutPoints cuts = CutPoints::analyze(f, ops, body.getTerminator()->getOperands());
    FailureOr<SmallVector<unsigned>> bounds = chooseCuts(f, cuts, stages, virtualStages);
    if (failed(bounds))
      return failure();
    SmallVector<Chunk> chunks = collectChunks(f, cuts, *bounds);
    DenseMap<unsigned, std::set<int64_t>> stagesOf;
    for (auto [c, chunk] : llvm::enumerate(chunks))
      for (unsigned a : chunk.args)
        if (f.getArgAttr(a, mega::kParamAttr))
          stagesOf[a].insert(schedule::stageOfChunk(shape, c));

    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    SmallVector<ModuleOp> stageModules;
    for (int64_t s = 0; s < stages; ++s) {
      auto stage = ModuleOp::create(b, module.getLoc(), ("stage" + Twine(s)).str());
      stage->setAttr(kStageAttr, b.getI64IntegerAttr(s));
      if (Attribute mesh = module->getAttr("mega.mesh"))
        stage->setAttr("mega.mesh", mesh);
      stageModules.push_back(stage);
    }
    for (auto [c, chunk] : llvm::enumerate(chunks))
      buildChunk(f, chunk, c, c + 1 == chunks.size(),
                 stageModules[schedule::stageOfChunk(shape, c)], stagesOf);
    f.erase();
    if (auto forward = module.lookupSymbol<func::FuncOp>("forward"))
      forward.erase();
    return success();
  }
};

} // namespace
} // namespace megac::passes
