// `megac import (--model SPEC | FILE.onnx | FILE.mlir) -o FILE.mlir`: a model's forward graph
// as textual mega IR, its weights beside it as FILE.safetensors.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/ModelSource.h"

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

const char *kUsage =
    "usage: megac import (--model SPEC | FILE.onnx | FILE.mlir) -o FILE.mlir\n"
    "                    [--input-shape NAME=D0xD1x... ...] [--compile-to=input]\n"
    "                    [--debug-locations]\n"
    "       megac import --list-ops\n"
    "  writes the forward graph as mega IR; '-o -' writes to stdout. Weights that come with\n"
    "  the model (ONNX initializers) go beside the output as FILE.safetensors, named by the\n"
    "  module attribute mega.weights. --input-shape binds an ONNX input's symbolic dims.\n"
    "  --compile-to=input runs the input pipeline (raise LayerNorm/RMSNorm/GELU/SiLU/\n"
    "  rotary/attention (with grouped k/v heads)/linear/embedding patterns, canonicalize,\n"
    "  CSE). --debug-locations keeps each op's location\n"
    "  (DSL call site and scope, or ONNX node). --list-ops prints the ONNX ops the importer\n"
    "  maps.";

int listOps() {
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
  Args args;
  std::string error = args.parse(argc, argv, 2, {"model", "o", "input-shape", "compile-to"},
                                 {"debug-locations", "list-ops", "help"});
  if (args.has("help")) {
    std::puts(kUsage);
    return 0;
  }
  if (error.empty() && args.has("list-ops"))
    return listOps();
  std::optional<std::string> file;
  if (error.empty() && args.positional().size() > 1)
    error = "give one model file";
  if (!args.positional().empty())
    file = args.positional().front();
  if (error.empty() && !args.get("model") && !file)
    error = "missing --model SPEC or a model file";
  if (error.empty() && !args.get("o"))
    error = "missing -o FILE.mlir";
  if (error.empty() && args.get("compile-to") && *args.get("compile-to") != "input")
    error = "--compile-to=" + *args.get("compile-to") +
            ": import stops at the input phase (--compile-to=input); later phases are "
            "`megac compile`'s";
  InputShapes inputShapes;
  if (error.empty())
    error = parseInputShapes(args.getAll("input-shape"), inputShapes);
  if (!error.empty()) {
    std::fprintf(stderr, "megac import: error: %s\n", error.c_str());
    return 2;
  }
  mlir::MLIRContext ctx;
  auto model = loadModel(ctx, args.get("model"), file, inputShapes);
  if (!model)
    return 1;
  if (args.get("compile-to")) {
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
    if (mlir::failed(passes::runInputPipeline(*model->module))) {
      std::fprintf(stderr, "megac import: error: the input pipeline failed on %s\n",
                   model->description.c_str());
      return 1;
    }
  }
  std::string output = *args.get("o");
  (*model->module)->removeAttr(kWeightsAttr);
  std::filesystem::path weightsPath;
  if (!model->weights.empty()) {
    if (output == "-") {
      std::fprintf(stderr,
                   "megac import: error: %s has %zu weights, which go beside the output file; "
                   "write to a file (-o FILE.mlir) instead of stdout\n",
                   model->description.c_str(), model->weights.size());
      return 1;
    }
    weightsPath = output;
    weightsPath.replace_extension(".safetensors");
    Status status = runtime::writeSafetensors(weightsPath.string(), model->weights,
                                              {{"producer", "megac import"}});
    if (!status.isOk()) {
      std::fprintf(stderr, "megac import: error: cannot write %s: %s\n",
                   weightsPath.string().c_str(), status.message().c_str());
      return 1;
    }
    (*model->module)
        ->setAttr(kWeightsAttr, mlir::StringAttr::get(&ctx, weightsPath.filename().string()));
  }
  std::string errorMessage;
  auto out = mlir::openOutputFile(output, &errorMessage);
  if (!out) {
    std::fprintf(stderr, "megac import: error: cannot write %s: %s\n", output.c_str(),
                 errorMessage.c_str());
    return 1;
  }
  mlir::OpPrintingFlags flags;
  if (args.has("debug-locations"))
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  model->module->print(out->os(), flags);
  out->keep();
  return 0;
}

} // namespace megac::cli
