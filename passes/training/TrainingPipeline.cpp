// The training phase's pass pipeline (TrainingPipeline.h).
#include "passes/training/TrainingPipeline.h"
#include "passes/training/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

namespace megac::passes {

const char *lossKindName(LossKind kind) {
  switch (kind) {
  case LossKind::causal:
    return "causal";
  case LossKind::mlm:
    return "mlm";
  }
  return "causal";
}

mlir::LogicalResult buildTrainingStep(mlir::ModuleOp module, const TrainingOptions &options) {
  mlir::PassManager pm(module->getContext());
  TrainingLossOptions loss;
  loss.function = options.function;
  loss.logits = options.logits;
  loss.ignoreIndex = options.ignoreIndex;
  loss.lossKind = lossKindName(options.lossKind);
  pm.addPass(createTrainingLoss(loss));
  pm.addPass(createTrainingAutodiff());
  TrainingOptimizerOptions optimizer;
  optimizer.beta1 = options.beta1;
  optimizer.beta2 = options.beta2;
  optimizer.eps = options.eps;
  optimizer.weightDecay = options.weightDecay;
  optimizer.clipGrad = options.clipGrad;
  pm.addPass(createTrainingOptimizer(optimizer));
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  return pm.run(module);
}

} // namespace megac::passes
