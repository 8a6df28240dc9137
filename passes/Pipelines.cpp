// Pass pipelines, one per phase.
#include "passes/Pipelines.h"
#include "passes/input/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

namespace megac::passes {

mlir::LogicalResult runInputPipeline(mlir::ModuleOp module) {
  mlir::PassManager pm(module->getContext());
  pm.addPass(createInputRaise());
  pm.addPass(createSplitFusedProjections());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  return pm.run(module);
}

} // namespace megac::passes
