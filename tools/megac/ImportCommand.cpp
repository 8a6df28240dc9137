// `megac import (--model SPEC | FILE.onnx | FILE.mlir) -o FILE.mlir`: a model's forward graph
// as textual mega IR, its weights beside it as FILE.safetensors.
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/ModelFlags.h"

#include "frontends/onnx/OnnxImporter.h"
#include "passes/Pipelines.h"
#include "runtime/io/Safetensors.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdio>
#include <filesystem>

namespace megac::cli {

namespace {

int printOps() {
  std::puts("# ONNX ops (default domain) megac import maps:");
  for (const std::string &op : onnx_import::supportedOnnxOps())
    std::puts(op.c_str());
  std::puts("# evaluated at import time only, when all their inputs are constants:");
  for (const std::string &op : onnx_import::constantOnlyOnnxOps())
    std::printf("%s (constant-only)\n", op.c_str());
  return 0;
}

} // namespace

int importCommand(int argc, char **argv) {
  Flags f("megac import", kImportHelp);
  ModelFlags model;
  std::optional<std::string> out, compileTo;
  bool debugLocations = false, listOps = false;
  model.declare(f);
  f.text("-o,--output", out, "FILE.mlir").text("--compile-to", compileTo, "input");
  f.flag("--debug-locations", debugLocations).flag("--list-ops", listOps);
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (listOps)
    return printOps();
  std::string error = model.configure(f);
  if (error.empty() && !model.source.spec && !model.source.file)
    error = "missing --model SPEC or a model file";
  if (error.empty() && !out)
    error = "missing -o FILE.mlir";
  if (error.empty() && compileTo && *compileTo != "input")
    error = "--compile-to=" + *compileTo +
            ": import stops at the input phase (--compile-to=input); later phases are "
            "`megac compile`'s";
  if (!error.empty())
    return f.usage(error);
  mlir::MLIRContext ctx;
  std::optional<driver::LoadedModel> loaded = model.load(ctx);
  if (!loaded)
    return 1;
  mlir::ModuleOp module = *loaded->module;
  if (compileTo) {
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
    if (mlir::failed(passes::runInputPipeline(module)))
      return fail("megac import", "the input pipeline failed on " + loaded->description);
    if (Status fitted = driver::fitWeightsToModel(module, loaded->weights); !fitted.isOk())
      return fail("megac import", fitted.message());
  }
  std::string output = *out;
  module->removeAttr(driver::kWeightsAttr);
  std::filesystem::path weightsPath;
  if (!loaded->weights.empty()) {
    if (output == "-") {
      std::fprintf(stderr,
                   "megac import: error: %s has %zu weights, which go beside the output file; "
                   "write to a file (-o FILE.mlir) instead of stdout\n",
                   loaded->description.c_str(), loaded->weights.size());
      return 1;
    }
    weightsPath = output;
    weightsPath.replace_extension(".safetensors");
    Status status = runtime::writeSafetensors(weightsPath.string(), loaded->weights,
                                              {{"producer", "megac import"}});
    if (!status.isOk()) {
      std::fprintf(stderr, "megac import: error: cannot write %s: %s\n",
                   weightsPath.string().c_str(), status.message().c_str());
      return 1;
    }
    module->setAttr(driver::kWeightsAttr,
                    mlir::StringAttr::get(&ctx, weightsPath.filename().string()));
  }
  std::string errorMessage;
  auto file = mlir::openOutputFile(output, &errorMessage);
  if (!file) {
    std::fprintf(stderr, "megac import: error: cannot write %s: %s\n", output.c_str(),
                 errorMessage.c_str());
    return 1;
  }
  mlir::OpPrintingFlags flags;
  if (debugLocations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module.print(file->os(), flags);
  file->keep();
  return 0;
}

} // namespace megac::cli
