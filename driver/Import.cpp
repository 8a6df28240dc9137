// A loaded model written as textual mega IR (Import.h).
#include "driver/Import.h"

#include "passes/Pipelines.h"
#include "runtime/io/Safetensors.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <filesystem>

namespace megac::driver {

Status writeImportedModel(LoadedModel &model, const std::string &path, const ImportOptions &options,
                          llvm::raw_ostream &diagnostics) {
  mlir::ModuleOp module = *model.module;
  mlir::MLIRContext *ctx = module.getContext();
  if (options.inputPhase) {
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, ctx, diagnostics);
    if (mlir::failed(passes::runInputPipeline(module)))
      return Status::error("the input pipeline failed on " + model.description);
    RETURN_IF_ERROR(fitWeightsToModel(module, model.weights));
  }
  module->removeAttr(kWeightsAttr);
  if (!model.weights.empty()) {
    if (path == "-")
      return Status::error(model.description + " has " + std::to_string(model.weights.size()) +
                           " weights, which go beside the output file; write to a file (-o "
                           "FILE.mlir) instead of stdout");
    std::filesystem::path weightsPath = path;
    weightsPath.replace_extension(".safetensors");
    if (Status s = runtime::writeSafetensors(weightsPath.string(), model.weights,
                                             {{"producer", "megac import"}});
        !s.isOk())
      return Status::error("cannot write " + weightsPath.string() + ": " + s.message());
    module->setAttr(kWeightsAttr, mlir::StringAttr::get(ctx, weightsPath.filename().string()));
  }
  std::string error;
  auto file = mlir::openOutputFile(path, &error);
  if (!file)
    return Status::error("cannot write " + path + ": " + error);
  mlir::OpPrintingFlags flags;
  if (options.debugLocations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module.print(file->os(), flags);
  file->keep();
  return Status::ok();
}

} // namespace megac::driver
