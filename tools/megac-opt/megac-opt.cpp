// megac-opt: runs mega passes over .mlir files (MlirOptMain), for lit tests and debugging.
#include "ir/MegaDialect.h"
#include "passes/input/Passes.h"
#include "passes/partition/Passes.h"
#include "passes/schedule/Passes.h"
#include "passes/training/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mega::MegaDialect, mlir::func::FuncDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  megac::passes::registerMegaInputPasses();
  megac::passes::registerMegaTrainingPasses();
  megac::passes::registerMegaPartitionPasses();
  megac::passes::registerMegaSchedulePasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "megac optimizer driver\n", registry));
}
