// mega-training-zero-prefetch: ZeRO-3's parameter all-gathers, after mega-schedule-latency-hiding
// made them start/done pairs, start one layer ahead of their use and no earlier, so at most two
// layers' gathered parameters are live or in flight (Passes.td; docs/training-step.md).
#include "passes/training/Passes.h"

#include "passes/partition/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGZEROPREFETCH
#include "passes/training/Passes.h.inc"

namespace {

/// The layer a parameter belongs to: its name up to the first dot ("h3.attn.q.weight": "h3",
/// "wte": "wte"), the blocks the model builders name their parameters by.
StringRef layerOf(StringRef param) { return param.split('.').first; }

/// One ZeRO-3 gather of a block: its start, its done and its parameter's layer.
struct Gather {
  Operation *start;
  Operation *done;
  StringRef layer;
};

/// A gather of a ZeRO-3 parameter shard: an all_gather_start over dp of a function argument
/// that is a parameter split over dp, done by one collective_done in the same block.
std::optional<Gather> zeroGather(func::FuncOp f, mega::AllGatherStartOp start) {
  auto arg = dyn_cast<BlockArgument>(start.getInput());
  if (!arg || arg.getOwner() != &f.getBody().front() || start->getBlock() != arg.getOwner())
    return std::nullopt;
  auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kParamAttr);
  auto dims = f.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), kDimAxesAttr);
  if (!name || !dims || !llvm::is_contained(start.getAxes().getAsValueRange<StringAttr>(), "dp"))
    return std::nullopt;
  bool dpSplit = llvm::any_of(dims, [](Attribute d) {
    auto axes = dyn_cast<ArrayAttr>(d);
    return axes && llvm::is_contained(axes.getAsValueRange<StringAttr>(), "dp");
  });
  if (!dpSplit || !start->hasOneUse())
    return std::nullopt;
  auto done = dyn_cast<mega::CollectiveDoneOp>(*start->getUsers().begin());
  if (!done || done->getBlock() != start->getBlock())
    return std::nullopt;
  return Gather{start, done, layerOf(name.getValue())};
}

struct TrainingZeroPrefetchPass : impl::TrainingZeroPrefetchBase<TrainingZeroPrefetchPass> {
  void runOnOperation() override {
    getOperation().walk([](func::FuncOp f) {
      if (!f.isExternal())
        prefetch(f);
    });
  }

  /// Groups the block's ZeRO-3 gathers, in the order of their dones (each done sits before the
  /// first use), into units: runs of consecutive gathers of one layer (the forward's h0, h1, ...
  /// then the backward's regathers in reverse). Unit k's starts move down to just before unit
  /// k-1's first done, where unit k-1's compute begins: its gathers overlap that compute, and
  /// no gather starts while two units before it are still to be used. A start already later
  /// stays (the in-flight byte budget held it back).
  static void prefetch(func::FuncOp f) {
    SmallVector<Gather> gathers;
    f.walk([&](mega::AllGatherStartOp start) {
      if (std::optional<Gather> g = zeroGather(f, start))
        gathers.push_back(*g);
    });
    llvm::stable_sort(
        gathers, [](const Gather &a, const Gather &b) { return a.done->isBeforeInBlock(b.done); });
    Operation *previousFirstDone = nullptr, *unitFirstDone = nullptr;
    StringRef unit;
    for (auto [k, g] : llvm::enumerate(gathers)) {
      if (k == 0 || g.layer != unit) {
        previousFirstDone = unitFirstDone;
        unitFirstDone = g.done;
        unit = g.layer;
      }
      if (previousFirstDone && g.start->isBeforeInBlock(previousFirstDone))
        g.start->moveBefore(previousFirstDone);
    }
  }
};

} // namespace
} // namespace megac::passes
