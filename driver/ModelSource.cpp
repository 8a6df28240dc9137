// Loading a model from a zoo spec, a .mlir file (and its weights) or an ONNX file (ModelSource.h).
#include "driver/ModelSource.h"

#include "frontends/models/ModelZoo.h"
#include "frontends/onnx/OnnxImporter.h"
#include "ir/MegaDialect.h"
#include "runtime/io/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <numeric>

namespace megac::driver {

namespace {

/// Writes ONNX import diagnostics as "FILE: NODE: error: message": ONNX models have no lines,
/// their locations name nodes, initializers and inputs.
class OnnxDiagnosticPrinter {
public:
  OnnxDiagnosticPrinter(mlir::MLIRContext &ctx, std::string file, llvm::raw_ostream &os)
      : handler_(&ctx, [file = std::move(file), &os](mlir::Diagnostic &diag) {
          std::string where;
          if (auto name = mlir::dyn_cast<mlir::NameLoc>(diag.getLocation());
              name && name.getName() != file)
            where = name.getName().str() + ": ";
          const char *kind = diag.getSeverity() == mlir::DiagnosticSeverity::Error     ? "error"
                             : diag.getSeverity() == mlir::DiagnosticSeverity::Warning ? "warning"
                                                                                       : "note";
          os << file << ": " << where << kind << ": " << diag.str() << "\n";
          os.flush();
          return mlir::success();
        }) {}

private:
  mlir::ScopedDiagnosticHandler handler_;
};

StatusOr<LoadedModel> buildZooModel(mlir::MLIRContext &ctx, const std::string &spec) {
  models::ConfigResult config = models::parseModelSpec(spec);
  if (!config.config)
    return Status::error("--model: " + config.error);
  LoadedModel loaded;
  std::string error;
  loaded.module = models::buildModel(ctx, *config.config, error);
  if (!loaded.module)
    return Status::error("building " + spec + ": " + error);
  loaded.description = config.config->spec();
  return loaded;
}

StatusOr<LoadedModel> importOnnx(mlir::MLIRContext &ctx, const std::string &file,
                                 const InputShapes &inputShapes, llvm::raw_ostream &diagnostics) {
  onnx_import::OnnxImportOptions options;
  options.inputShapes = inputShapes;
  mlir::FailureOr<onnx_import::OnnxImport> imported = mlir::failure();
  {
    OnnxDiagnosticPrinter printer(ctx, file, diagnostics);
    imported = onnx_import::importOnnxFile(ctx, file, options);
  }
  if (mlir::failed(imported))
    return Status::error("cannot import " + file);
  LoadedModel loaded;
  loaded.module = std::move(imported->module);
  loaded.weights = std::move(imported->weights);
  loaded.description = file;
  return loaded;
}

StatusOr<LoadedModel> parseMlir(mlir::MLIRContext &ctx, const std::string &file,
                                llvm::raw_ostream &diagnostics) {
  LoadedModel loaded;
  {
    // Parse and verifier errors are written as file:line:col with the offending line.
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx, diagnostics);
    loaded.module = mlir::parseSourceFile<mlir::ModuleOp>(file, sourceMgr, &ctx);
  }
  if (!loaded.module)
    return Status::error("cannot load " + file);
  loaded.description = file;
  if (auto weights = (*loaded.module)->getAttrOfType<mlir::StringAttr>(kWeightsAttr)) {
    std::filesystem::path path = std::filesystem::path(file).parent_path() / weights.str();
    auto read = runtime::readSafetensors(path.string());
    if (!read.isOk())
      return Status::error(file + " names weights file " + path.string() + ": " +
                           read.status().message());
    loaded.weights = std::move(read).value();
  }
  return loaded;
}

} // namespace

namespace {

/// A stacked parameter's members (the model's own per-expert tensors) stacked into it, when the
/// weights hold the members and not the parameter; they must be complete and of one shape.
Status stackMembers(const std::string &name, mlir::ArrayAttr members, TensorMap &weights) {
  if (!members || members.empty() || weights.count(name))
    return Status::ok();
  std::vector<const HostTensor *> parts;
  for (mlir::Attribute member : members) {
    std::string memberName = mlir::cast<mlir::StringAttr>(member).str();
    auto it = weights.find(memberName);
    if (it == weights.end()) {
      if (parts.empty())
        continue; // neither form: the weights do not hold this parameter
      return Status::error("weights hold part of '" + name + "' (its first " +
                           std::to_string(parts.size()) + " members) but not '" + memberName + "'");
    }
    if (!parts.empty() && (it->second.shape != parts.front()->shape ||
                           it->second.dtype != parts.front()->dtype))
      return Status::error("weight '" + memberName + "' is " + shapeString(it->second.shape) +
                           ", unlike '" + mlir::cast<mlir::StringAttr>(members[0]).str() +
                           "' (" + shapeString(parts.front()->shape) + "): '" + name +
                           "' stacks them");
    parts.push_back(&it->second);
  }
  if (parts.empty())
    return Status::ok();
  if (parts.size() != members.size())
    return Status::error("weights hold " + std::to_string(parts.size()) + " of the " +
                         std::to_string(members.size()) + " tensors '" + name + "' stacks");
  std::vector<int64_t> shape{static_cast<int64_t>(parts.size())};
  shape.insert(shape.end(), parts.front()->shape.begin(), parts.front()->shape.end());
  HostTensor stacked = HostTensor::zeros(parts.front()->dtype, shape);
  size_t at = 0;
  for (const HostTensor *part : parts) {
    std::copy(part->bytes.begin(), part->bytes.end(), stacked.bytes.begin() + long(at));
    at += part->bytes.size();
  }
  for (mlir::Attribute member : members)
    weights.erase(mlir::cast<mlir::StringAttr>(member).str());
  weights[name] = std::move(stacked);
  return Status::ok();
}

} // namespace

Status fitWeightsToModel(mlir::ModuleOp module, TensorMap &weights) {
  auto count = [](const std::vector<int64_t> &shape) {
    return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
  };
  for (auto f : module.getOps<mlir::func::FuncOp>()) {
    for (mlir::BlockArgument arg : f.getArguments()) {
      auto name = f.getArgAttrOfType<mlir::StringAttr>(arg.getArgNumber(), mega::kParamAttr);
      if (name)
        RETURN_IF_ERROR(stackMembers(name.str(),
                                     f.getArgAttrOfType<mlir::ArrayAttr>(arg.getArgNumber(),
                                                                         mega::kSourceStackAttr),
                                     weights));
      auto source =
          f.getArgAttrOfType<mlir::DenseI64ArrayAttr>(arg.getArgNumber(), mega::kSourceShapeAttr);
      if (!name || !source)
        continue;
      auto it = weights.find(name.str());
      if (it == weights.end())
        continue;
      auto type = mlir::cast<mlir::RankedTensorType>(arg.getType());
      std::vector<int64_t> want(type.getShape().begin(), type.getShape().end());
      std::vector<int64_t> from(source.asArrayRef().begin(), source.asArrayRef().end());
      HostTensor &tensor = it->second;
      if (tensor.shape == want)
        continue;
      if (tensor.shape != from || count(want) != count(from))
        return Status::error("weight '" + name.str() + "' is " + shapeString(tensor.shape) +
                             "; the model's parameter is " + shapeString(want) + " (from " +
                             shapeString(from) + ")");
      tensor.shape = want;
    }
  }
  return Status::ok();
}

SourceShapes sourceShapesOf(mlir::ModuleOp module) {
  SourceShapes out;
  for (auto f : module.getOps<mlir::func::FuncOp>())
    for (mlir::BlockArgument arg : f.getArguments()) {
      auto name = f.getArgAttrOfType<mlir::StringAttr>(arg.getArgNumber(), mega::kParamAttr);
      if (!name)
        continue;
      if (auto source = f.getArgAttrOfType<mlir::DenseI64ArrayAttr>(arg.getArgNumber(),
                                                                      mega::kSourceShapeAttr))
        out.shapes[name.str()].assign(source.asArrayRef().begin(), source.asArrayRef().end());
      if (auto stack =
              f.getArgAttrOfType<mlir::ArrayAttr>(arg.getArgNumber(), mega::kSourceStackAttr))
        for (mlir::Attribute member : stack)
          if (auto text = mlir::dyn_cast<mlir::StringAttr>(member))
            out.stacks[name.str()].push_back(text.str());
    }
  return out;
}

bool ModelSource::isOnnx() const {
  return file && std::filesystem::path(*file).extension() == ".onnx";
}

passes::LossKind lossKindOf(const ModelSource &source) {
  if (!source.spec)
    return passes::LossKind::causal;
  models::ConfigResult parsed = models::parseModelSpec(*source.spec);
  if (!parsed.config)
    return passes::LossKind::causal;
  return parsed.config->arch == models::Arch::bert ? passes::LossKind::mlm
         : parsed.config->arch == models::Arch::t5 ? passes::LossKind::seq2seq
                                                   : passes::LossKind::causal;
}

StatusOr<InputShapes> parseInputShapes(const std::vector<std::string> &specs) {
  InputShapes shapes;
  for (const std::string &spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::error("--input-shape '" + spec +
                           "' is not NAME=D0xD1x... (e.g. input_ids=8x128)");
    std::string name = spec.substr(0, eq), dims = spec.substr(eq + 1);
    std::vector<int64_t> shape;
    size_t pos = 0;
    while (pos < dims.size()) {
      size_t x = dims.find('x', pos);
      std::string d = dims.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
      if (d.empty() || d.size() > 12 || d.find_first_not_of("0123456789") != std::string::npos)
        return Status::error("--input-shape '" + spec + "': '" + d +
                             "' is not a dim (D0xD1x..., e.g. 8x128)");
      shape.push_back(std::stoll(d));
      if (x == std::string::npos)
        break;
      pos = x + 1;
      if (pos == dims.size())
        return Status::error("--input-shape '" + spec + "' ends with 'x'");
    }
    if (!shapes.emplace(name, shape).second)
      return Status::error("--input-shape gives '" + name + "' twice");
  }
  return shapes;
}

StatusOr<LoadedModel> loadModel(mlir::MLIRContext &ctx, const ModelSource &source,
                                const InputShapes &inputShapes, llvm::raw_ostream &diagnostics) {
  ctx.loadDialect<mega::MegaDialect, mlir::func::FuncDialect>();
  if (source.spec.has_value() == source.file.has_value())
    return Status::error("give either --model SPEC or a model file (.mlir, .onnx)");
  if (!inputShapes.empty() && !source.isOnnx())
    return Status::error("--input-shape applies to ONNX models only");
  auto start = std::chrono::steady_clock::now();
  StatusOr<LoadedModel> loaded = source.spec ? buildZooModel(ctx, *source.spec)
                                 : source.isOnnx()
                                     ? importOnnx(ctx, *source.file, inputShapes, diagnostics)
                                     : parseMlir(ctx, *source.file, diagnostics);
  if (loaded.isOk())
    loaded->buildSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

} // namespace megac::driver
