// `megac import (--model SPEC | FILE.onnx | FILE.mlir) -o FILE.mlir`: a model's forward graph
// as textual mega IR, its weights beside it as FILE.safetensors.
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/ModelFlags.h"

#include "driver/Import.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"

#include <cstdio>

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
  if (error.empty() && !model.spec && !model.file)
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
  driver::ImportOptions options;
  options.inputPhase = compileTo.has_value();
  options.debugLocations = debugLocations;
  if (Status s = driver::writeImportedModel(*loaded, *out, options); !s.isOk())
    return fail("megac import", s.message());
  return 0;
}

} // namespace megac::cli
