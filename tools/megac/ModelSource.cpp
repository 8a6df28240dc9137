// Loading a model from a zoo spec, a .mlir file (and its weights) or an ONNX file.
#include "tools/megac/ModelSource.h"

#include "frontends/models/ModelZoo.h"
#include "frontends/onnx/OnnxImporter.h"
#include "ir/MegaDialect.h"
#include "runtime/io/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace megac::cli {

namespace {

bool isOnnxFile(const std::string &file) {
  return std::filesystem::path(file).extension() == ".onnx";
}

/// Prints ONNX import diagnostics as "FILE: NODE: error: message": ONNX models have no
/// lines, their locations name nodes, initializers and inputs.
class OnnxDiagnosticPrinter {
public:
  OnnxDiagnosticPrinter(mlir::MLIRContext &ctx, std::string file)
      : handler_(&ctx, [file = std::move(file)](mlir::Diagnostic &diag) {
          std::string where;
          if (auto name = mlir::dyn_cast<mlir::NameLoc>(diag.getLocation());
              name && name.getName() != file)
            where = name.getName().str() + ": ";
          const char *kind = diag.getSeverity() == mlir::DiagnosticSeverity::Error     ? "error"
                             : diag.getSeverity() == mlir::DiagnosticSeverity::Warning ? "warning"
                                                                                       : "note";
          std::fprintf(stderr, "%s: %s%s: %s\n", file.c_str(), where.c_str(), kind,
                       diag.str().c_str());
          return mlir::success();
        }) {}

private:
  mlir::ScopedDiagnosticHandler handler_;
};

} // namespace

std::string parseInputShapes(const std::vector<std::string> &specs, InputShapes &shapes) {
  for (const std::string &spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return "--input-shape '" + spec + "' is not NAME=D0xD1x... (e.g. input_ids=8x128)";
    std::string name = spec.substr(0, eq), dims = spec.substr(eq + 1);
    std::vector<int64_t> shape;
    size_t pos = 0;
    while (pos < dims.size()) {
      size_t x = dims.find('x', pos);
      std::string d = dims.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
      if (d.empty() || d.size() > 12 || d.find_first_not_of("0123456789") != std::string::npos)
        return "--input-shape '" + spec + "': '" + d + "' is not a dim (D0xD1x..., e.g. 8x128)";
      shape.push_back(std::stoll(d));
      if (x == std::string::npos)
        break;
      pos = x + 1;
      if (pos == dims.size())
        return "--input-shape '" + spec + "' ends with 'x'";
    }
    if (!shapes.emplace(name, shape).second)
      return "--input-shape gives '" + name + "' twice";
  }
  return {};
}

std::optional<LoadedModel> loadModel(mlir::MLIRContext &ctx, const std::optional<std::string> &spec,
                                     const std::optional<std::string> &file,
                                     const InputShapes &inputShapes) {
  ctx.loadDialect<mega::MegaDialect, mlir::func::FuncDialect>();
  if (spec.has_value() == file.has_value()) {
    std::fprintf(stderr, "megac: error: give either --model SPEC or a model file (.mlir, .onnx)\n");
    return std::nullopt;
  }
  if (!inputShapes.empty() && !(file && isOnnxFile(*file))) {
    std::fprintf(stderr, "megac: error: --input-shape applies to ONNX models only\n");
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
  } else if (isOnnxFile(*file)) {
    onnx_import::OnnxImportOptions options;
    options.inputShapes = inputShapes;
    mlir::FailureOr<onnx_import::OnnxImport> imported = mlir::failure();
    {
      OnnxDiagnosticPrinter printer(ctx, *file);
      imported = onnx_import::importOnnxFile(ctx, *file, options);
    }
    if (mlir::failed(imported)) {
      std::fprintf(stderr, "megac: error: cannot import %s\n", file->c_str());
      return std::nullopt;
    }
    loaded.module = std::move(imported->module);
    loaded.weights = std::move(imported->weights);
    loaded.description = *file;
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
    if (auto weights = (*loaded.module)->getAttrOfType<mlir::StringAttr>(kWeightsAttr)) {
      std::filesystem::path path = std::filesystem::path(*file).parent_path() / weights.str();
      auto read = runtime::readSafetensors(path.string());
      if (!read.isOk()) {
        std::fprintf(stderr, "megac: error: %s names weights file %s: %s\n", file->c_str(),
                     path.string().c_str(), read.status().message().c_str());
        return std::nullopt;
      }
      loaded.weights = std::move(read).value();
    }
  }
  loaded.buildSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

} // namespace megac::cli
