// `megac train (MODEL.onnx | FILE.mlir | --model SPEC) --data TOKENS.npy ...`: AdamW training on
// one CPU rank, driving the plan's @forward_backward and @apply_gradients (docs/training-step.md).
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Compile.h"
#include "tools/megac/ModelSource.h"

#include "frontends/models/ModelConfig.h"
#include "ir/MegaDialect.h"
#include "passes/Pipelines.h"
#include "passes/training/TrainingPipeline.h"

#include "runtime/exec/Executor.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/TokenBatches.h"
#include "runtime/train/TrainLog.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <unistd.h>

namespace megac::cli {

namespace {

namespace train = runtime::train;
constexpr const char *kCommand = "megac train";

constexpr const char *kHelp =
    R"(usage: megac train (FILE.onnx | FILE.mlir | --model SPEC) --data TOKENS.npy --steps N
                   --global-batch B --micro-batch b --lr X
                   [--lr-schedule constant|cosine] [--warmup-steps W] [--min-lr Y]
                   [--adam-beta1 0.9] [--adam-beta2 0.999] [--adam-eps 1e-8]
                   [--weight-decay 0.01] [--clip-grad 0] [--seed 0]
                   [--precision fp32|fp64|bf16|fp16] [--initial-loss-scale 65536]
                   [--loss-scale-window 1000] [--hysteresis 2] [--min-loss-scale 1]
                   [--log-json FILE] [--logits NAME] [--save-weights FILE.safetensors]
  trains the model with AdamW (torch.optim.AdamW; weight decay on parameters of rank >= 2
  only) on one CPU rank and prints one line per step (a live progress line on a terminal).

  data: TOKENS.npy is an int32 or int64 array [N, S+1]. Step i (0-based) uses rows
  (i*B + j) mod N for j = 0..B-1, in order; micro-batches of b consecutive rows are
  accumulated (B must be a multiple of b). Causal models (gpt, ONNX, .mlir): input_ids =
  row[:S], labels = row[1:]. BERT (zoo): masked LM on row[:S] -- round(15% of S) seeded
  positions per row become the token vocab-1 ([MASK]) and are the only labelled ones;
  attention_mask is all ones. T5 (zoo): S = seq + dec_seq; the encoder reads row[:seq], the
  decoder reads row[seq:S] and predicts row[seq+1:S+1]. The loss is the mean cross-entropy
  over the global batch's labelled tokens. An ONNX model's input_ids is bound to [b, S]; a
  zoo spec's seq must be S (t5: seq + dec_seq; its batch is set to b).
  lr schedule, for step s = 1..N (Megatron's, starting at lr/W instead of 0):
    s <= W:   lr * s / W
    constant: lr
    cosine:   min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * (s - W) / (N - W)))
  (in PyTorch: LambdaLR(opt, lambda i: schedule(i + 1) / lr), stepped after each step).
  --clip-grad C > 0 scales the gradients by min(1, C / (norm + 1e-6)).
  --precision fp64 converts the model (parameters and compute) to f64. bf16 and fp16 are mixed
  precision (mega-training-precision): half compute, f32 master weights, gradient accumulators
  and Adam state, f32 LayerNorm/RmsNorm statistics, softmax and loss. fp16 adds dynamic loss
  scaling (Megatron's DynamicGradScaler): gradients are computed for loss * scale; a step whose
  gradients overflow (inf/nan) is skipped (logged "skipped") and, from the hysteresis-th
  overflow since the last growth on, halves the scale (not below --min-loss-scale); after
  --loss-scale-window consecutive clean steps the scale doubles.
  --seed seeds initialization (zoo models) and BERT's masks.
  --log-json writes one JSON object per step and line: step, loss, lr, grad_norm (before
  clipping), loss_scale, skipped, tokens, tokens_per_s, step_time_s.
  --save-weights writes the final parameters. A non-finite loss stops the run (exit 1).)";

struct TrainConfig {
  std::optional<std::string> spec, file;
  std::string dataPath;
  train::BatchSplit split;
  train::LrSchedule schedule;
  passes::TrainingOptions training;
  train::LossScalerConfig scaler;
  uint64_t seed = 0;
  std::optional<std::string> logJson, saveWeights;
};

/// A finite decimal number; nullopt otherwise.
std::optional<double> parseNumber(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (*end != 0 || !std::isfinite(value))
    return std::nullopt;
  return value;
}

/// Reads the number option `name` into `out` (keeping its default when absent) and checks
/// `valid`; returns an error message or empty.
template <typename Valid>
std::string numberOption(const Args &args, const char *name, double &out, Valid valid,
                         const char *expected) {
  std::optional<std::string> text = args.get(name);
  if (!text)
    return {};
  std::optional<double> value = parseNumber(*text);
  if (!value || !valid(*value))
    return std::string("--") + name + ": '" + *text + "' is not " + expected;
  out = *value;
  return {};
}

/// Reads the integer option `name` (>= `min`); returns an error message or empty.
std::string countOption(const Args &args, const char *name, int64_t min, int64_t &out,
                        bool required) {
  std::optional<std::string> text = args.get(name);
  if (!text)
    return required ? std::string("missing --") + name : std::string();
  std::optional<uint64_t> value = parseSeed(*text);
  if (!value || *value > uint64_t(INT64_MAX) || int64_t(*value) < min)
    return std::string("--") + name + ": '" + *text +
           "' is not an integer >= " + std::to_string(min);
  out = int64_t(*value);
  return {};
}

std::string parseTrainArgs(const Args &args, TrainConfig &c) {
  if (args.positional().size() > 1)
    return "give one model file";
  if (!args.positional().empty())
    c.file = args.positional().front();
  c.spec = args.get("model");
  if (c.spec.has_value() == c.file.has_value())
    return "give either --model SPEC or a model file (.onnx, .mlir)";
  if (!args.get("data"))
    return "missing --data TOKENS.npy";
  c.dataPath = *args.get("data");
  auto positive = [](double v) { return v > 0; };
  auto nonNegative = [](double v) { return v >= 0; };
  auto beta = [](double v) { return v >= 0 && v < 1; };
  double lr = -1;
  for (std::string e :
       {countOption(args, "steps", 1, c.schedule.totalSteps, true),
        countOption(args, "global-batch", 1, c.split.globalBatch, true),
        countOption(args, "micro-batch", 1, c.split.microBatch, true),
        countOption(args, "warmup-steps", 0, c.schedule.warmupSteps, false),
        numberOption(args, "lr", lr, nonNegative, "a number >= 0"),
        numberOption(args, "min-lr", c.schedule.minLr, nonNegative, "a number >= 0"),
        numberOption(args, "adam-beta1", c.training.beta1, beta, "a number in [0, 1)"),
        numberOption(args, "adam-beta2", c.training.beta2, beta, "a number in [0, 1)"),
        numberOption(args, "adam-eps", c.training.eps, positive, "a number > 0"),
        numberOption(args, "weight-decay", c.training.weightDecay, nonNegative, "a number >= 0"),
        numberOption(args, "clip-grad", c.training.clipGrad, nonNegative,
                     "a number >= 0 (0: no clipping)")})
    if (!e.empty())
      return e;
  if (!args.get("lr"))
    return "missing --lr";
  c.schedule.lr = lr;
  std::string decay = args.get("lr-schedule").value_or("constant");
  std::optional<train::LrDecay> parsed = train::parseLrDecay(decay);
  if (!parsed)
    return "--lr-schedule: '" + decay + "' is not constant or cosine";
  c.schedule.decay = *parsed;
  if (c.schedule.decay == train::LrDecay::constant && args.get("min-lr"))
    return "--min-lr applies to --lr-schedule cosine";
  if (runtime::Status s = c.schedule.validate(); !s.isOk())
    return s.message();
  if (runtime::Status s = c.split.validate(); !s.isOk())
    return s.message();
  if (auto seed = args.get("seed")) {
    std::optional<uint64_t> value = parseSeed(*seed);
    if (!value)
      return "--seed: '" + *seed + "' is not a non-negative integer";
    c.seed = *value;
  }
  std::string precision = args.get("precision").value_or("fp32");
  if (precision == "fp32")
    c.training.precision = passes::Precision::fp32;
  else if (precision == "fp64")
    c.training.precision = passes::Precision::fp64;
  else if (precision == "bf16")
    c.training.precision = passes::Precision::bf16;
  else if (precision == "fp16")
    c.training.precision = passes::Precision::fp16;
  else
    return "--precision: '" + precision + "' is not fp32, fp64, bf16 or fp16";
  bool scaling = false;
  for (const char *name :
       {"initial-loss-scale", "loss-scale-window", "hysteresis", "min-loss-scale"})
    scaling = scaling || args.get(name).has_value();
  if (scaling && c.training.precision != passes::Precision::fp16)
    return "loss scaling (--initial-loss-scale, --loss-scale-window, --hysteresis, "
           "--min-loss-scale) applies to --precision fp16";
  for (std::string e :
       {numberOption(args, "initial-loss-scale", c.scaler.initialScale, positive, "a number > 0"),
        numberOption(args, "min-loss-scale", c.scaler.minScale, positive, "a number > 0"),
        countOption(args, "loss-scale-window", 1, c.scaler.growthInterval, false),
        countOption(args, "hysteresis", 1, c.scaler.hysteresis, false)})
    if (!e.empty())
      return e;
  if (runtime::Status s = c.scaler.validate(); !s.isOk())
    return s.message();
  c.training.logits = args.get("logits").value_or("");
  c.logJson = args.get("log-json");
  c.saveWeights = args.get("save-weights");
  if (c.saveWeights) {
    std::filesystem::path dir = std::filesystem::path(*c.saveWeights).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir))
      return "--save-weights: no directory " + dir.string();
  }
  return {};
}

/// The model's IR with the training step built, and its weights.
struct TrainModel {
  std::vector<uint8_t> plan;
  runtime::TensorMap weights;
  std::string description;
  int64_t vocab = 0;
  passes::LossKind lossKind = passes::LossKind::causal;
  double compileSeconds = 0;
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// A zoo spec bound to the data and the micro-batch: seq must be S, batch is set to b.
std::optional<std::string> bindSpec(const TrainConfig &c, int64_t seq, passes::LossKind &kind) {
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
    kind = config.arch == models::Arch::bert ? passes::LossKind::mlm
           : config.arch == models::Arch::t5 ? passes::LossKind::seq2seq
                                             : passes::LossKind::causal;
    if (error.empty())
      return config.spec();
  }
  std::fprintf(stderr, "%s: error: --model: %s\n", kCommand, error.c_str());
  return std::nullopt;
}

/// The vocabulary size: the last dim of @forward's logits.
int64_t vocabOf(mlir::ModuleOp module, const std::string &logits) {
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward)
    return 0;
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
void convertWeightsToF64(runtime::TensorMap &weights) {
  for (auto &[name, tensor] : weights) {
    if (tensor.dtype != runtime::DType::f32)
      continue;
    runtime::HostTensor wide = runtime::HostTensor::zeros(runtime::DType::f64, tensor.shape);
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
std::optional<TrainModel> compileTrainingStep(const TrainConfig &c, int64_t seq) {
  TrainModel out;
  passes::TrainingOptions training = c.training;
  std::optional<std::string> spec;
  InputShapes shapes;
  if (c.spec) {
    spec = bindSpec(c, seq, training.lossKind);
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
  bool fp64 = training.precision == passes::Precision::fp64;
  if (!checkFloatTypes(module, fp64, out.description))
    return std::nullopt;
  if (mlir::failed(passes::runInputPipeline(module))) {
    std::fprintf(stderr, "%s: error: the input pipeline failed on %s\n", kCommand,
                 out.description.c_str());
    return std::nullopt;
  }
  if (fp64) // the IR is converted by mega-training-precision in buildTrainingStep
    convertWeightsToF64(out.weights);
  if (mlir::failed(passes::buildTrainingStep(module, training))) {
    std::fprintf(stderr, "%s: error: cannot build the training step of %s (see above)\n", kCommand,
                 out.description.c_str());
    return std::nullopt;
  }
  out.vocab = vocabOf(module, training.logits);
  out.lossKind = training.lossKind;
  codegen::CodegenOptions options;
  options.seed = c.seed;
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

/// "0.001", "1e+30": a number for messages.
std::string shortNumber(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

/// A 0-d tensor of a float dtype.
runtime::HostTensor floatScalar(runtime::DType dtype, double value) {
  runtime::HostTensor t = runtime::HostTensor::zeros(dtype, {});
  if (dtype == runtime::DType::f64)
    *t.data<double>() = value;
  else
    *t.data<float>() = static_cast<float>(value);
  return t;
}

/// The value of a 0-d f32 or f64 tensor.
double scalarValue(const runtime::HostTensor &t) {
  return t.dtype == runtime::DType::f64 ? *t.data<double>() : *t.data<float>();
}

/// `ids` (i64) as the dtype the plan wants (i64 or i32).
runtime::HostTensor asIndexType(const runtime::HostTensor &ids, runtime::DType dtype) {
  if (dtype != runtime::DType::i32)
    return ids;
  runtime::HostTensor narrow = runtime::HostTensor::zeros(dtype, ids.shape);
  for (int64_t i = 0; i < ids.numElements(); ++i)
    narrow.data<int32_t>()[i] = static_cast<int32_t>(ids.data<int64_t>()[i]);
  return narrow;
}

/// A tensor of ones of the given dtype and shape (the attention mask).
runtime::HostTensor ones(const runtime::TensorInfo &info) {
  runtime::HostTensor t = runtime::HostTensor::zeros(info.dtype, info.shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    switch (info.dtype) {
    case runtime::DType::i64:
      t.data<int64_t>()[i] = 1;
      break;
    case runtime::DType::i32:
      t.data<int32_t>()[i] = 1;
      break;
    case runtime::DType::f64:
      t.data<double>()[i] = 1;
      break;
    case runtime::DType::f32:
      t.data<float>()[i] = 1;
      break;
    default:
      t.bytes[i * runtime::dtypeSize(info.dtype)] = 1; // i1
    }
  return t;
}

/// The inputs of @forward_backward megac train can feed (input_ids [b, S]; for encoder-decoder
/// models input_ids [b, E] and decoder_input_ids [b, D] with E + D = S), and the float type of
/// its scalars.
runtime::StatusOr<runtime::DType> checkInputs(const runtime::Executor &executor,
                                              std::vector<int64_t> idsShape,
                                              passes::LossKind kind) {
  for (const char *function : {"forward_backward", "apply_gradients"}) {
    std::vector<std::string> names = executor.functionNames();
    if (std::find(names.begin(), names.end(), function) == names.end())
      return runtime::Status::error(std::string("the plan has no function ") + function);
  }
  for (const std::string &name : executor.inputNames("forward_backward"))
    if (name != "input_ids" && name != "attention_mask" && name != "labels" &&
        name != "loss_normalizer" && name != "loss_scale" &&
        !(name == "decoder_input_ids" && kind == passes::LossKind::seq2seq))
      return runtime::Status::error("the model's input '" + name +
                                    "' is not one megac train feeds (input_ids, attention_mask, "
                                    "decoder_input_ids for encoder-decoder models)");
  if (kind == passes::LossKind::seq2seq) {
    ASSIGN_OR_RETURN(runtime::TensorInfo dec, executor.inputInfo("decoder_input_ids"));
    if (dec.shape.size() != 2 || dec.shape[0] != idsShape[0] || dec.shape[1] >= idsShape[1])
      return runtime::Status::error("the model's decoder_input_ids is " +
                                    runtime::shapeString(dec.shape) +
                                    "; expected [b, D] with b = " + std::to_string(idsShape[0]) +
                                    " and D < S = " + std::to_string(idsShape[1]));
    idsShape[1] -= dec.shape[1];
  }
  ASSIGN_OR_RETURN(runtime::TensorInfo ids, executor.inputInfo("input_ids"));
  if (ids.shape != idsShape)
    return runtime::Status::error("the model's input_ids is " + runtime::shapeString(ids.shape) +
                                  "; megac train feeds [b, S] = " + runtime::shapeString(idsShape) +
                                  " (--micro-batch, the data's rows)");
  ASSIGN_OR_RETURN(runtime::TensorInfo normalizer, executor.inputInfo("loss_normalizer"));
  return normalizer.dtype;
}

/// One optimizer step (docs/training-step.md); fills the record's loss and grad_norm. A
/// non-finite loss stops before the update.
runtime::Status trainStep(runtime::Executor &executor, const TrainConfig &c,
                          const train::TokenData &data, passes::LossKind kind, int64_t vocab,
                          runtime::DType floatType, train::LossScaler *scaler,
                          train::StepRecord &record) {
  int64_t step = record.step - 1;
  std::vector<train::MicroBatch> batches;
  if (kind == passes::LossKind::seq2seq) {
    ASSIGN_OR_RETURN(runtime::TensorInfo enc, executor.inputInfo("input_ids"));
    ASSIGN_OR_RETURN(runtime::TensorInfo dec, executor.inputInfo("decoder_input_ids"));
    ASSIGN_OR_RETURN(batches, train::seq2seqStep(data, step, c.split, enc.shape[1], dec.shape[1]));
  } else {
    batches = kind == passes::LossKind::mlm
                  ? train::mlmStep(data, step, c.split, {c.seed, vocab - 1, 0.15})
                  : train::causalStep(data, step, c.split);
  }
  int64_t targets = train::targetTokens(batches);
  if (targets == 0)
    return runtime::Status::error("step " + std::to_string(record.step) +
                                  " has no labelled tokens");
  ASSIGN_OR_RETURN(runtime::TensorInfo ids, executor.inputInfo("input_ids"));
  std::vector<std::string> inputs = executor.inputNames("forward_backward");
  bool hasMask = std::find(inputs.begin(), inputs.end(), "attention_mask") != inputs.end();
  if (hasMask) {
    ASSIGN_OR_RETURN(runtime::TensorInfo mask, executor.inputInfo("attention_mask"));
    RETURN_IF_ERROR(executor.setInput("attention_mask", ones(mask)));
  }
  RETURN_IF_ERROR(executor.setInput("loss_normalizer", floatScalar(floatType, 1.0 / targets)));
  RETURN_IF_ERROR(executor.zeroState("grad."));
  if (scaler) {
    record.lossScale = scaler->scale();
    RETURN_IF_ERROR(executor.setInput("loss_scale", floatScalar(floatType, scaler->scale())));
  }
  double loss = 0;
  for (const train::MicroBatch &mb : batches) {
    RETURN_IF_ERROR(executor.setInput("input_ids", asIndexType(mb.inputIds, ids.dtype)));
    if (kind == passes::LossKind::seq2seq)
      RETURN_IF_ERROR(
          executor.setInput("decoder_input_ids", asIndexType(mb.decoderInputIds, ids.dtype)));
    RETURN_IF_ERROR(executor.setInput("labels", mb.labels));
    RETURN_IF_ERROR(executor.run("forward_backward"));
    ASSIGN_OR_RETURN(runtime::HostTensor part, executor.output("loss"));
    loss += scalarValue(part);
  }
  record.loss = loss;
  record.lr = c.schedule.at(record.step);
  if (!std::isfinite(loss))
    return runtime::Status::error("the loss is " + std::string(std::isnan(loss) ? "nan" : "inf") +
                                  " at step " + std::to_string(record.step) + " (lr " +
                                  shortNumber(record.lr) +
                                  "); stopping before the update. Lower --lr or clip the "
                                  "gradients (--clip-grad)");
  if (scaler) {
    // Dynamic loss scaling: an overflowing step (non-finite unscaled norm) is skipped.
    RETURN_IF_ERROR(executor.run("check_gradients"));
    ASSIGN_OR_RETURN(runtime::HostTensor norm, executor.output("unscaled_grad_norm"));
    record.gradNorm = scalarValue(norm);
    bool overflow = !std::isfinite(record.gradNorm);
    scaler->update(overflow);
    if (overflow) {
      record.skipped = true;
      return runtime::Status::ok();
    }
  }
  RETURN_IF_ERROR(executor.setInput("lr", floatScalar(floatType, record.lr)));
  runtime::HostTensor stepTensor = runtime::HostTensor::zeros(runtime::DType::i64, {});
  *stepTensor.data<int64_t>() = record.step;
  RETURN_IF_ERROR(executor.setInput("step", stepTensor));
  RETURN_IF_ERROR(executor.run("apply_gradients"));
  ASSIGN_OR_RETURN(runtime::HostTensor norm, executor.output("grad_norm"));
  record.gradNorm = scalarValue(norm);
  return runtime::Status::ok();
}

runtime::Status saveWeights(const runtime::Executor &executor, const std::string &path,
                            int64_t steps) {
  runtime::TensorMap weights;
  for (const std::string &name : executor.parameterNames()) {
    ASSIGN_OR_RETURN(runtime::HostTensor value, executor.parameter(name));
    weights.emplace(name, std::move(value));
  }
  return runtime::writeSafetensors(path, weights,
                                   {{"producer", "megac train"}, {"step", std::to_string(steps)}});
}

int fail(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", kCommand, message.c_str());
  return 1;
}

/// The training loop: steps, logs, progress; returns the exit code.
int trainLoop(runtime::Executor &executor, const TrainConfig &c, const train::TokenData &data,
              passes::LossKind kind, int64_t vocab, runtime::DType floatType) {
  std::optional<train::LossScaler> scaler;
  if (c.training.precision == passes::Precision::fp16)
    scaler.emplace(c.scaler);
  train::JsonLinesWriter log;
  if (c.logJson)
    if (runtime::Status s = log.open(*c.logJson); !s.isOk())
      return fail(s.message());
  bool terminal = isatty(fileno(stdout));
  int64_t steps = c.schedule.totalSteps;
  double elapsed = 0, firstLoss = 0, lastLoss = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    train::StepRecord record;
    record.step = step;
    record.tokens = c.split.globalBatch * data.sequenceLength();
    auto start = std::chrono::steady_clock::now();
    runtime::Status status =
        trainStep(executor, c, data, kind, vocab, floatType, scaler ? &*scaler : nullptr, record);
    if (!status.isOk()) {
      if (terminal)
        std::fputc('\n', stdout);
      std::fflush(stdout);
      return fail(status.message());
    }
    record.stepSeconds = secondsSince(start);
    elapsed += record.stepSeconds;
    if (step == 1)
      firstLoss = record.loss;
    lastLoss = record.loss;
    if (c.logJson)
      if (runtime::Status s = log.write(train::stepRecordJson(record)); !s.isOk())
        return fail(s.message());
    if (terminal) {
      double eta = elapsed / step * (steps - step);
      std::printf("\r%s\x1b[K", train::progressLine(record, steps, eta).c_str());
    } else {
      std::printf("%s\n", train::stepLogLine(record, steps).c_str());
    }
    std::fflush(stdout);
  }
  if (terminal)
    std::fputc('\n', stdout);
  if (runtime::Status s = log.close(); !s.isOk())
    return fail(s.message());
  std::printf("trained %lld steps in %s (%.0f tokens/s): loss %.6g -> %.6g\n", (long long)steps,
              train::formatDuration(elapsed).c_str(),
              elapsed > 0 ? c.split.globalBatch * data.sequenceLength() * steps / elapsed : 0.0,
              firstLoss, lastLoss);
  if (c.saveWeights) {
    if (runtime::Status s = saveWeights(executor, *c.saveWeights, steps); !s.isOk())
      return fail(s.message());
    std::printf("wrote %s\n", c.saveWeights->c_str());
  }
  return 0;
}

} // namespace

int trainCommand(int argc, char **argv) {
  Args args;
  const std::set<std::string> valued = {"model",
                                        "data",
                                        "steps",
                                        "global-batch",
                                        "micro-batch",
                                        "lr",
                                        "lr-schedule",
                                        "warmup-steps",
                                        "min-lr",
                                        "adam-beta1",
                                        "adam-beta2",
                                        "adam-eps",
                                        "weight-decay",
                                        "clip-grad",
                                        "seed",
                                        "precision",
                                        "initial-loss-scale",
                                        "loss-scale-window",
                                        "hysteresis",
                                        "min-loss-scale",
                                        "log-json",
                                        "logits",
                                        "save-weights"};
  std::string error = args.parse(argc, argv, 2, valued, {"help"});
  if (args.has("help")) {
    std::puts(kHelp);
    return 0;
  }
  TrainConfig config;
  if (error.empty())
    error = parseTrainArgs(args, config);
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }

  runtime::StatusOr<train::TokenData> data = train::readTokenData(config.dataPath);
  if (!data.isOk())
    return fail(data.status().message());
  std::optional<TrainModel> model = compileTrainingStep(config, data->sequenceLength());
  if (!model)
    return 1;
  passes::LossKind kind = model->lossKind;
  if (model->vocab < 2)
    return fail("cannot find the vocabulary size (the logits' last dim) of " + model->description);
  if (runtime::Status s = train::checkTokenRange(*data, model->vocab); !s.isOk())
    return fail(config.dataPath + ": " + s.message());
  if (kind == passes::LossKind::mlm)
    for (int64_t token : data->tokens)
      if (token == model->vocab - 1) {
        std::fprintf(stderr,
                     "%s: warning: the data contains token %lld, which masked-LM training uses "
                     "as [MASK]\n",
                     kCommand, (long long)token);
        break;
      }

  auto plan = runtime::loadPlanFromBytes(model->plan);
  if (!plan.isOk())
    return fail(plan.status().message() + " (in the plan compiled from " + model->description +
                ")");
  runtime::ExecutorOptions options;
  if (!model->weights.empty())
    options.weights = &model->weights;
  auto executor = runtime::Executor::create(*plan, options);
  if (!executor.isOk())
    return fail(executor.status().message());
  runtime::StatusOr<runtime::DType> floatType =
      checkInputs(**executor, {config.split.microBatch, data->sequenceLength()}, kind);
  if (!floatType.isOk())
    return fail(floatType.status().message());
  std::printf("%s: %lld steps of %lld x %lld tokens (micro-batch %lld, %lld accumulation "
              "steps), %s, lr %g %s; compiled in %.1f ms\n",
              model->description.c_str(), (long long)config.schedule.totalSteps,
              (long long)config.split.globalBatch, (long long)data->sequenceLength(),
              (long long)config.split.microBatch, (long long)config.split.microBatches(),
              passes::precisionName(config.training.precision), config.schedule.lr,
              train::lrDecayName(config.schedule.decay), model->compileSeconds * 1e3);
  std::fflush(stdout);
  return trainLoop(**executor, config, *data, kind, model->vocab, *floatType);
}

} // namespace megac::cli
