// Compiling `megac train`'s model to the training step's plan (TrainCompile.h).
#include "tools/megac/TrainCompile.h"

#include "tools/megac/Compile.h"
#include "tools/megac/ModelSource.h"

#include "codegen/PlanWriter.h"
#include "frontends/models/ModelConfig.h"
#include "ir/MegaDialect.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac train";

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// A zoo spec bound to the data and the micro-batch: seq must be S, batch is set to b.
std::optional<std::string> bindSpec(const TrainConfig &c, int64_t seq, passes::LossKind &kind,
                                    int64_t &decoderSeq) {
  models::ConfigResult parsed = models::parseModelSpec(*c.spec);
  std::string error = parsed.error;
  if (parsed.config) {
    models::ModelConfig &config = *parsed.config;
    bool batchGiven = c.spec->find(":batch=") != std::string::npos ||
                      c.spec->find(",batch=") != std::string::npos;
    if (config.arch == models::Arch::t5) {
      if (config.seq + config.decSeq != seq)
        error = "t5 trains on rows of seq + dec_seq + 1 tokens (the encoder reads the first " +
                std::to_string(config.seq) + ", the decoder continues for " +
                std::to_string(config.decSeq) + "), but the data's S = " + std::to_string(seq);
    } else if (config.seq != seq)
      error = "the model's seq=" + std::to_string(config.seq) +
              " differs from the data's S = " + std::to_string(seq) +
              " (rows of S+1 = " + std::to_string(seq + 1) + " tokens)";
    else if (batchGiven && config.batch != c.split.microBatch)
      error = "the spec's batch=" + std::to_string(config.batch) + " differs from --micro-batch " +
              std::to_string(c.split.microBatch) + " (leave batch= out)";
    else if (config.dtype != dsl::DType::f32)
      error = "give the precision with --precision, not dtype= in the spec";
    config.batch = c.split.microBatch;
    decoderSeq = config.arch == models::Arch::t5 ? config.decSeq : 0;
    kind = config.arch == models::Arch::bert ? passes::LossKind::mlm
           : config.arch == models::Arch::t5 ? passes::LossKind::seq2seq
                                             : passes::LossKind::causal;
    if (error.empty())
      return config.spec();
  }
  std::fprintf(stderr, "%s: error: --model: %s\n", kCommand, error.c_str());
  return std::nullopt;
}

/// The vocabulary size: the last dim of the model's logits (@forward's, or before the training
/// phase, the only function's).
int64_t vocabOf(mlir::ModuleOp module, const std::string &logits) {
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) { // before the training phase: the model is the module's only function
    auto functions = module.getOps<mlir::func::FuncOp>();
    if (std::distance(functions.begin(), functions.end()) != 1)
      return 0;
    forward = *functions.begin();
  }
  for (unsigned i = 0; i < forward.getNumResults(); ++i) {
    auto type = mlir::dyn_cast<mlir::RankedTensorType>(forward.getResultTypes()[i]);
    auto name = forward.getResultAttrOfType<mlir::StringAttr>(i, mega::kOutputAttr);
    bool match = logits.empty() ? type && mlir::isa<mlir::FloatType>(type.getElementType())
                                : name && name.getValue() == logits;
    if (match && type && type.getRank() >= 1)
      return type.getShape().back();
  }
  return 0;
}

/// The float element types of every tensor the module's ops use or make ("bf16", "f32", ...).
std::set<std::string> floatTypesIn(mlir::ModuleOp module) {
  std::set<std::string> types;
  auto note = [&](mlir::Type type) {
    if (auto tensor = mlir::dyn_cast<mlir::TensorType>(type))
      if (mlir::isa<mlir::FloatType>(tensor.getElementType())) {
        std::string text;
        llvm::raw_string_ostream os(text);
        tensor.getElementType().print(os);
        types.insert(text);
      }
  };
  module.walk([&](mlir::Operation *op) {
    for (mlir::Type type : op->getResultTypes())
      note(type);
    for (mlir::Region &region : op->getRegions())
      for (mlir::Block &block : region)
        for (mlir::BlockArgument arg : block.getArguments())
          note(arg.getType());
  });
  return types;
}

/// Converts every f32 tensor of `weights` to f64 (the parameters of an fp64 run).
void convertWeightsToF64(TensorMap &weights) {
  for (auto &[name, tensor] : weights) {
    if (tensor.dtype != DType::f32)
      continue;
    HostTensor wide = HostTensor::zeros(DType::f64, tensor.shape);
    for (int64_t i = 0; i < tensor.numElements(); ++i)
      wide.data<double>()[i] = tensor.data<float>()[i];
    tensor = std::move(wide);
  }
}

/// False (after printing why) when the model's float types do not fit the precision: models
/// are f32 (bf16/fp16 storage models are not trained), f64 ones need --precision fp64.
bool checkFloatTypes(mlir::ModuleOp module, bool fp64, const std::string &description) {
  std::set<std::string> floats = floatTypesIn(module);
  for (const char *narrow : {"bf16", "f16"})
    if (floats.count(narrow)) {
      std::fprintf(stderr,
                   "%s: error: %s has %s tensors; train an f32 model with --precision "
                   "bf16 or fp16 instead\n",
                   kCommand, description.c_str(), narrow);
      return false;
    }
  if (!fp64 && floats.count("f64")) {
    std::fprintf(stderr, "%s: error: %s is f64; train it with --precision fp64\n", kCommand,
                 description.c_str());
    return false;
  }
  return true;
}

/// Loads the model, runs the input and training phases and lowers the step to a plan.
} // namespace

std::optional<TrainModel> compileTrainingStep(const TrainConfig &c, int64_t seq) {
  TrainModel out;
  passes::TrainingOptions training = c.training;
  std::optional<std::string> spec;
  InputShapes shapes;
  if (c.spec) {
    spec = bindSpec(c, seq, training.lossKind, out.decoderSeq);
    if (!spec)
      return std::nullopt;
  } else if (std::filesystem::path(*c.file).extension() == ".onnx") {
    shapes["input_ids"] = {c.split.microBatch, seq};
  }
  mlir::MLIRContext ctx;
  std::optional<LoadedModel> model = loadModel(ctx, spec, c.file, shapes);
  if (!model) {
    if (!shapes.empty())
      std::fprintf(stderr,
                   "%s: note: megac train binds the ONNX input input_ids to [b, S] = [%lld, %lld] "
                   "(--micro-batch, the data's rows)\n",
                   kCommand, (long long)c.split.microBatch, (long long)seq);
    return std::nullopt;
  }
  out.description = model->description;
  out.weights = std::move(model->weights);
  auto start = std::chrono::steady_clock::now();
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  ctx.printOpOnDiagnostic(false);
  mlir::ModuleOp module = *model->module;
  bool fp64 = training.layout.precision == Precision::fp64;
  if (!checkFloatTypes(module, fp64, out.description))
    return std::nullopt;
  if (mlir::failed(passes::runInputPipeline(module))) {
    std::fprintf(stderr, "%s: error: the input pipeline failed on %s\n", kCommand,
                 out.description.c_str());
    return std::nullopt;
  }
  if (fp64) // the IR is converted by mega-training-precision in buildTrainingStep
    convertWeightsToF64(out.weights);
  // Read before the training phase: partitioning makes the logits a vocab shard.
  out.vocab = vocabOf(module, training.logits);
  if (mlir::failed(passes::buildTrainingStep(module, training))) {
    std::fprintf(stderr, "%s: error: cannot build the training step of %s (see above)\n", kCommand,
                 out.description.c_str());
    return std::nullopt;
  }
  out.lossKind = training.lossKind;
  codegen::CodegenOptions options;
  options.seed = c.seed;
  options.schedule = training.layout.schedule; // pipelined plans: Program.schedule
  options.microBatches = training.layout.microBatches;
  mlir::FailureOr<std::vector<uint8_t>> plan = codegen::writePlan(module, options);
  if (mlir::failed(plan)) {
    std::fprintf(stderr, "%s: error: cannot compile the training step of %s (see above)\n",
                 kCommand, out.description.c_str());
    return std::nullopt;
  }
  out.plan = std::move(*plan);
  out.compileSeconds = secondsSince(start);
  return out;
}

} // namespace megac::cli
