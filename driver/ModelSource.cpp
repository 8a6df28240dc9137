// Parsing a model source and loading it: a zoo spec, a transformers config.json, a .mlir file
// (and its weights) or an ONNX file (ModelSource.h).
#include "driver/ModelSource.h"

#include "driver/HfWeights.h"
#include "frontends/models/ModelZoo.h"
#include "frontends/onnx/OnnxImporter.h"
#include "ir/MegaDialect.h"
#include "runtime/io/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <charconv>
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

StatusOr<LoadedModel> buildZooModel(mlir::MLIRContext &ctx, const models::ModelConfig &config,
                                    std::string description) {
  LoadedModel loaded;
  std::string error;
  loaded.module = models::buildModel(ctx, config, error);
  if (!loaded.module)
    return Status::error("building " + config.spec() + ": " + error);
  loaded.description = std::move(description);
  return loaded;
}

/// hf:PATH[,seq=S] read: the config.json and the sequence length.
StatusOr<HfSpec> parseHfSpec(const std::string &spec) {
  std::string path = spec.substr(3);
  HfSpec out;
  if (size_t at = path.rfind(",seq="); at != std::string::npos) {
    std::string text = path.substr(at + 5);
    int64_t seq = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seq);
    constexpr int64_t kMaxSeq = int64_t(1) << 22; // the zoo's bound on seq
    if (ec != std::errc() || end != text.data() + text.size() || seq < 1 || seq > kMaxSeq)
      return Status::error("--model " + spec + ": seq needs a positive integer up to " +
                           std::to_string(kMaxSeq) + ", got '" + text + "'");
    out.seq = seq;
    path.resize(at);
  }
  if (path.empty())
    return Status::error("--model " + spec +
                         ": give a model folder or its config.json (hf:PATH[,seq=S])");
  models::HfResult read = models::readHfConfig(path);
  if (!read.model)
    return Status::error("--model: " + read.error);
  out.model = std::move(*read.model);
  if (out.seq) {
    models::ConfigResult at = out.model.at(*out.seq);
    if (!at.config)
      return Status::error("--model: " + at.error);
    out.model.config = *at.config;
  }
  return out;
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
    if (!parts.empty() &&
        (it->second.shape != parts.front()->shape || it->second.dtype != parts.front()->dtype))
      return Status::error("weight '" + memberName + "' is " + shapeString(it->second.shape) +
                           ", unlike '" + mlir::cast<mlir::StringAttr>(members[0]).str() + "' (" +
                           shapeString(parts.front()->shape) + "): '" + name + "' stacks them");
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
        RETURN_IF_ERROR(stackMembers(
            name.str(),
            f.getArgAttrOfType<mlir::ArrayAttr>(arg.getArgNumber(), mega::kSourceStackAttr),
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

StatusOr<ModelSource> ModelSource::fromSpec(const std::string &spec) {
  ModelSource source;
  source.text_ = spec;
  if (spec.rfind("hf:", 0) == 0) {
    ASSIGN_OR_RETURN(HfSpec hf, parseHfSpec(spec));
    source.value_ = std::move(hf);
    return source;
  }
  models::ConfigResult parsed = models::parseModelSpec(spec);
  if (!parsed.config)
    return Status::error("--model: " + parsed.error);
  bool batchGiven =
      spec.find(":batch=") != std::string::npos || spec.find(",batch=") != std::string::npos;
  source.value_ = ZooSpec{*parsed.config, batchGiven};
  return source;
}

ModelSource ModelSource::fromConfig(models::ModelConfig config) {
  ModelSource source;
  source.text_ = config.spec();
  source.value_ = ZooSpec{std::move(config), true};
  return source;
}

ModelSource ModelSource::fromFile(std::string path) {
  ModelSource source;
  source.text_ = path;
  if (std::filesystem::path(path).extension() == ".onnx")
    source.value_ = OnnxFile{std::move(path)};
  else
    source.value_ = IrFile{std::move(path)};
  return source;
}

StatusOr<ModelSource> ModelSource::parse(const std::optional<std::string> &spec,
                                         const std::optional<std::string> &file) {
  if (spec.has_value() == file.has_value())
    return Status::error("give either --model SPEC or a model file (.mlir, .onnx)");
  return spec ? fromSpec(*spec) : fromFile(*file);
}

const std::string *ModelSource::file() const {
  if (auto *onnx = std::get_if<OnnxFile>(&value_))
    return &onnx->path;
  if (auto *ir = std::get_if<IrFile>(&value_))
    return &ir->path;
  return nullptr;
}

const models::ModelConfig *ModelSource::config() const {
  if (auto *zoo = std::get_if<ZooSpec>(&value_))
    return &zoo->config;
  if (auto *hf = std::get_if<HfSpec>(&value_))
    return &hf->model.config;
  return nullptr;
}

StatusOr<ModelSource> ModelSource::bound(models::ModelConfig config) const {
  ModelSource out = *this;
  if (auto *hf = std::get_if<HfSpec>(&out.value_)) {
    int64_t batch = config.batch;
    models::ConfigResult at = hf->model.at(config.seq);
    if (!at.config)
      return Status::error("--model: " + at.error);
    hf->model.config = *at.config;
    hf->model.config.batch = batch;
    hf->seq = config.seq;
    return out;
  }
  auto *zoo = std::get_if<ZooSpec>(&out.value_);
  if (!zoo)
    return Status::error("only a zoo or hf: model has a config to bind");
  // The bound sizes (seq, batch) are checked as a spec's are: bounds, the 64-bit FLOP count.
  models::ConfigResult checked = models::parseModelSpec(config.spec());
  if (!checked.config)
    return Status::error("--model: " + checked.error);
  zoo->config = std::move(config);
  return out;
}

passes::LossKind lossKindOf(const ModelSource &source) {
  const models::ModelConfig *config = source.config();
  if (!config)
    return passes::LossKind::causal;
  return config->arch == models::Arch::bert ? passes::LossKind::mlm
         : config->arch == models::Arch::t5 ? passes::LossKind::seq2seq
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
  if (source.empty())
    return Status::error("give either --model SPEC or a model file (.mlir, .onnx)");
  if (!inputShapes.empty() && !source.isOnnx())
    return Status::error("--input-shape applies to ONNX models only");
  auto start = std::chrono::steady_clock::now();
  StatusOr<LoadedModel> loaded = std::visit(
      [&](const auto &model) -> StatusOr<LoadedModel> {
        using T = std::decay_t<decltype(model)>;
        if constexpr (std::is_same_v<T, ZooSpec>) {
          return buildZooModel(ctx, model.config, model.config.spec());
        } else if constexpr (std::is_same_v<T, HfSpec>) {
          if (!model.seq)
            return Status::error(
                "--model " + source.text() +
                ": give the sequence length to build for, hf:PATH,seq=S (the config's "
                "max_position_embeddings is the longest the model handles, not a training "
                "length)");
          return buildZooModel(ctx, model.model.config, source.text());
        } else if constexpr (std::is_same_v<T, OnnxFile>) {
          return importOnnx(ctx, model.path, inputShapes, diagnostics);
        } else if constexpr (std::is_same_v<T, IrFile>) {
          return parseMlir(ctx, model.path, diagnostics);
        } else {
          return Status::error("give either --model SPEC or a model file (.mlir, .onnx)");
        }
      },
      source.value());
  if (loaded.isOk())
    loaded->hfWeightsFile = hfWeightsFile(source);
  if (loaded.isOk())
    loaded->buildSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

} // namespace megac::driver
