// `megac import --model SPEC -o FILE.mlir`: a zoo model's forward graph as textual mega IR.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/ModelSource.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdio>

namespace megac::cli {

int importCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(argc, argv, 2, {"model", "o"}, {"debug-locations", "help"});
  if (args.has("help")) {
    std::puts("usage: megac import --model SPEC -o FILE.mlir [--debug-locations]\n"
              "  writes the forward graph; '-o -' writes to stdout. --debug-locations keeps\n"
              "  each op's DSL call site (file:line and scope).");
    return 0;
  }
  if (error.empty() && !args.positional().empty())
    error = "unexpected argument '" + args.positional().front() + "'";
  if (error.empty() && !args.get("model"))
    error = "missing --model SPEC";
  if (error.empty() && !args.get("o"))
    error = "missing -o FILE.mlir";
  if (!error.empty()) {
    std::fprintf(stderr, "megac import: error: %s\n", error.c_str());
    return 2;
  }
  mlir::MLIRContext ctx;
  auto model = loadModel(ctx, args.get("model"), std::nullopt);
  if (!model)
    return 1;
  std::string errorMessage;
  auto out = mlir::openOutputFile(*args.get("o"), &errorMessage);
  if (!out) {
    std::fprintf(stderr, "megac import: error: cannot write %s: %s\n", args.get("o")->c_str(),
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
