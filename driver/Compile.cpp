// Compiling models to plans: forward plans and training steps (Compile.h).
#include "driver/Compile.h"

#include "driver/ModelFingerprint.h"
#include "driver/TrainData.h"

#include "codegen/PlanWriter.h"
#include "frontends/models/ModelConfig.h"
#include "ir/MegaDialect.h"
#include "passes/Pipelines.h"
#include "planner/ModelStats.h"
#include "runtime/plan/plan_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace megac::driver {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// A zoo or HF model bound to the data and the model's micro-batch: seq must be S (an HF model
/// without seq= takes S), batch is set.
StatusOr<ModelSource> bindModel(const RunConfig &c, int64_t seq, int64_t &decoderSeq) {
  models::ModelConfig config = *c.model.config();
  const auto *zoo = std::get_if<ZooSpec>(&c.model.value());
  const auto *hf = std::get_if<HfSpec>(&c.model.value());
  if (hf && !hf->seq)
    config.seq = seq;
  int64_t rows = c.data.batch.microBatch;
  std::string error;
  if (config.arch == models::Arch::t5) {
    if (config.seq + config.decSeq != seq)
      error = "t5 trains on rows of seq + dec_seq + 1 tokens (the encoder reads the first " +
              std::to_string(config.seq) + ", the decoder continues for " +
              std::to_string(config.decSeq) + "), but the data's S = " + std::to_string(seq);
  } else if (config.seq != seq)
    error = "the model's seq=" + std::to_string(config.seq) +
            " differs from the data's S = " + std::to_string(seq) +
            " (rows of S+1 = " + std::to_string(seq + 1) + " tokens)";
  else if (zoo && zoo->batchGiven && config.batch != rows)
    error = "the spec's batch=" + std::to_string(config.batch) + " differs from --micro-batch " +
            std::to_string(rows) + " (leave batch= out)";
  else if (config.dtype != dsl::DType::f32)
    error = "give the precision with --precision, not dtype= in the spec";
  if (!error.empty())
    return Status::error("--model: " + error);
  config.batch = rows;
  decoderSeq = config.arch == models::Arch::t5 ? config.decSeq : 0;
  return c.model.bound(std::move(config));
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
/// Whether a function of `module` has an input (mega.input) named `name`.
bool hasInputNamed(mlir::ModuleOp module, llvm::StringRef name) {
  bool found = false;
  module.walk([&](mlir::func::FuncOp f) {
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      if (auto input = f.getArgAttrOfType<mlir::StringAttr>(i, mega::kInputAttr))
        found |= input.getValue() == name;
  });
  return found;
}

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

/// The model's float types fit the precision: models are f32 (bf16/fp16 storage models are not
/// trained), f64 ones need --precision fp64.
Status checkFloatTypes(mlir::ModuleOp module, bool fp64, const std::string &description) {
  std::set<std::string> floats = floatTypesIn(module);
  for (const char *narrow : {"bf16", "f16"})
    if (floats.count(narrow))
      return Status::error(description + " has " + narrow +
                           " tensors; train an f32 model with --precision bf16 or fp16 instead");
  if (!fp64 && floats.count("f64"))
    return Status::error(description + " is f64; train it with --precision fp64");
  return Status::ok();
}

/// Empty when the model's weights fit the plan: every parameter without an init spec has a
/// value, and every value has its parameter's dtype and shape.
Status checkWeights(const CompiledModel &compiled) {
  const plan::Program *program = plan::GetPlan(compiled.plan.data())->programs()->Get(0);
  for (const plan::Parameter *param : *program->parameters()) {
    std::string name = param->name()->str();
    const plan::Buffer *buffer = program->buffers()->Get(param->buffer());
    std::vector<int64_t> shape(buffer->shape()->begin(), buffer->shape()->end());
    auto dtype = static_cast<DType>(buffer->dtype());
    auto it = compiled.weights.find(name);
    if (it == compiled.weights.end()) {
      if (param->init() == plan::InitKind::none)
        return Status::error("parameter '" + name +
                             "' has neither a value in the model's weights nor an init spec "
                             "(mega.init)");
      continue;
    }
    if (it->second.dtype != dtype || it->second.shape != shape)
      return Status::error("the weights give parameter '" + name + "' as " +
                           dtypeName(it->second.dtype) + " " + shapeString(it->second.shape) +
                           "; the model has " + dtypeName(dtype) + " " + shapeString(shape));
  }
  return Status::ok();
}

} // namespace

std::optional<uint64_t> parseSeed(const std::string &text) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (value == ULLONG_MAX && text != "18446744073709551615")
    return std::nullopt;
  return value;
}

StatusOr<CompiledModel> compileForward(LoadedModel model, const codegen::CodegenOptions &options,
                                       llvm::raw_ostream &diagnostics) {
  CompiledModel compiled;
  compiled.description = model.description;
  compiled.loadSeconds = model.buildSeconds;
  compiled.weights = std::move(model.weights);
  compiled.hfWeightsFile = model.hfWeightsFile;
  auto start = std::chrono::steady_clock::now();
  mlir::MLIRContext *ctx = (*model.module)->getContext();
  // Diagnostics on ops are written as file:line:col with the source line, like parse errors.
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, ctx, diagnostics);
  ctx->printOpOnDiagnostic(false);
  if (mlir::failed(passes::runInputPipeline(*model.module)))
    return Status::error("the input pipeline failed on " + compiled.description);
  RETURN_IF_ERROR(fitWeightsToModel(*model.module, compiled.weights));
  compiled.sourceShapes = sourceShapesOf(*model.module);
  codegen::CodegenOptions planOptions = options;
  if (compiled.weights.empty())
    planOptions.weightsFile.clear();
  mlir::FailureOr<std::vector<uint8_t>> plan = codegen::writePlan(*model.module, planOptions);
  if (mlir::failed(plan))
    return Status::error("cannot compile " + compiled.description +
                         " to a plan (see the errors above)");
  compiled.plan = std::move(*plan);
  compiled.compileSeconds = secondsSince(start);
  RETURN_IF_ERROR(checkWeights(compiled));
  return compiled;
}

StatusOr<CompiledModel> compileModel(const ModelSource &source, const InputShapes &inputShapes,
                                     const codegen::CodegenOptions &options,
                                     llvm::raw_ostream &diagnostics) {
  mlir::MLIRContext ctx;
  ASSIGN_OR_RETURN(LoadedModel model, loadModel(ctx, source, inputShapes, diagnostics));
  return compileForward(std::move(model), options, diagnostics);
}

StatusOr<TrainModel> compileTrainingStep(const RunConfig &c, int64_t seq,
                                         llvm::raw_ostream &diagnostics) {
  TrainModel out;
  passes::TrainingOptions training = c.training;
  training.lossKind = lossKindOf(c.model);
  if (!c.data.objective.empty()) {
    passes::LossKind asked =
        c.data.objective == "mlm" ? passes::LossKind::mlm : passes::LossKind::causal;
    if (c.model.config() && asked != training.lossKind)
      return Status::error("--objective " + c.data.objective + ": the zoo model " + c.model.text() +
                           " trains with its architecture's objective (" +
                           passes::lossKindName(training.lossKind) + ")");
    training.lossKind = asked;
  }
  ModelSource source = c.model;
  InputShapes shapes;
  if (c.model.config()) {
    ASSIGN_OR_RETURN(source, bindModel(c, seq, out.decoderSeq));
  } else if (c.model.isOnnx()) {
    shapes["input_ids"] = {c.data.batch.microBatch, seq};
  }
  mlir::MLIRContext ctx;
  StatusOr<LoadedModel> model = loadModel(ctx, source, shapes, diagnostics);
  if (!model.isOk() && !shapes.empty())
    return Status::error(model.status().message() +
                         " (training binds the ONNX input input_ids to [b, S] = [" +
                         std::to_string(c.data.batch.microBatch) + ", " + std::to_string(seq) +
                         "]: --micro-batch x dp, the data's rows)");
  if (!model.isOk())
    return model.status();
  out.description = model->description;
  out.weights = std::move(model->weights);
  auto start = std::chrono::steady_clock::now();
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx, diagnostics);
  ctx.printOpOnDiagnostic(false);
  mlir::ModuleOp module = *model->module;
  bool fp64 = training.layout.precision == Precision::fp64;
  RETURN_IF_ERROR(checkFloatTypes(module, fp64, out.description));
  if (mlir::failed(passes::runInputPipeline(module)))
    return Status::error("the input pipeline failed on " + out.description);
  RETURN_IF_ERROR(fitWeightsToModel(module, out.weights));
  if (planner::ModelStatsResult stats = planner::computeModelStats(module);
      stats.stats && stats.stats->tokens > 0) // else unknown: the log has no TFLOP/s
    out.trainingFlopsPerToken = double(stats.stats->trainingFlops()) / double(stats.stats->tokens);
  out.sourceShapes = sourceShapesOf(module);
  out.fingerprint = fingerprintOf(module, out.description); // before layout and precision
  if (fp64) // the IR is converted by mega-training-precision in buildTrainingStep
    convertWeightsToF64(out.weights);
  // Read before the training phase: partitioning makes the logits a vocab shard.
  out.vocab = vocabOf(module, training.logits);
  if (c.data.maskTokenId && *c.data.maskTokenId >= out.vocab)
    return Status::error("--mask-token-id " + std::to_string(*c.data.maskTokenId) +
                         " is outside the model's vocabulary of " + std::to_string(out.vocab) +
                         " tokens");
  if (c.data.padTokenId) {
    if (training.lossKind != passes::LossKind::causal)
      return Status::error("--pad-token-id applies to causal LM training; " + out.description +
                           " trains as " + passes::lossKindName(training.lossKind));
    if (*c.data.padTokenId >= out.vocab)
      return Status::error("--pad-token-id " + std::to_string(*c.data.padTokenId) +
                           " is outside the model's vocabulary of " + std::to_string(out.vocab) +
                           " tokens");
    if (!hasInputNamed(module, "attention_mask"))
      return Status::error("--pad-token-id fills the model's attention_mask input, but " +
                           out.description +
                           " has none (zoo gpt and llama take one with padding=1)");
  }
  if (mlir::failed(passes::buildTrainingStep(module, training)))
    return Status::error("cannot build the training step of " + out.description + " (see above)");
  out.lossKind = training.lossKind;
  codegen::CodegenOptions options;
  options.seed = c.seed;
  options.schedule = training.layout.schedule; // pipelined plans: Program.schedule
  options.microBatches = training.layout.microBatches;
  mlir::FailureOr<std::vector<uint8_t>> plan = codegen::writePlan(module, options);
  if (mlir::failed(plan))
    return Status::error("cannot compile the training step of " + out.description + " (see above)");
  out.plan = std::move(*plan);
  out.compileSeconds = secondsSince(start);
  return out;
}

StatusOr<TrainModel> compileRunPlan(const RunConfig &c, llvm::raw_ostream &diagnostics) {
  int64_t seq = 0;
  if (!c.data.path.empty()) {
    ASSIGN_OR_RETURN(seq, trainingSequenceLength(c));
  } else if (const models::ModelConfig *config = c.model.config()) {
    seq = config->seq + (config->arch == models::Arch::t5 ? config->decSeq : 0);
    if (seq == 0) // hf:PATH without seq=
      return Status::error("--model " + c.model.text() +
                           " needs seq=S (hf:PATH,seq=S) or --data TOKENS.npy (its rows give the "
                           "sequence length)");
  } else {
    return Status::error(
        "a model file needs --data TOKENS.npy (its rows give the sequence length)");
  }
  return compileTrainingStep(c, seq, diagnostics);
}

} // namespace megac::driver
