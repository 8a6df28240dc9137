// Loading a model from a zoo spec or a .mlir file.
#include "tools/megac/ModelSource.h"

#include "frontends/models/ModelZoo.h"
#include "ir/MegaDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cstdio>

namespace megac::cli {

std::optional<LoadedModel> loadModel(mlir::MLIRContext &ctx, const std::optional<std::string> &spec,
                                     const std::optional<std::string> &file) {
  ctx.loadDialect<mega::MegaDialect, mlir::func::FuncDialect>();
  if (spec.has_value() == file.has_value()) {
    std::fprintf(stderr, "megac: error: give either --model SPEC or a .mlir file\n");
    return std::nullopt;
  }
  auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  if (spec) {
    models::ConfigResult config = models::parseModelSpec(*spec);
    if (!config.config) {
      std::fprintf(stderr, "megac: error: --model: %s\n", config.error.c_str());
      return std::nullopt;
    }
    std::string error;
    loaded.module = models::buildModel(ctx, *config.config, error);
    if (!loaded.module) {
      std::fprintf(stderr, "megac: error: building %s: %s\n", spec->c_str(), error.c_str());
      return std::nullopt;
    }
    loaded.description = config.config->spec();
  } else {
    // Parse and verifier errors are printed as file:line:col with the offending line.
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
    loaded.module = mlir::parseSourceFile<mlir::ModuleOp>(*file, sourceMgr, &ctx);
    if (!loaded.module) {
      std::fprintf(stderr, "megac: error: cannot load %s\n", file->c_str());
      return std::nullopt;
    }
    loaded.description = *file;
  }
  loaded.buildSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

} // namespace megac::cli
