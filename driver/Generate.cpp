// Text from a checkpoint's model or an hf: folder's (Generate.h).
#include "driver/Generate.h"

#include "driver/CheckpointModel.h"
#include "driver/Compile.h"
#include "driver/HfSave.h"
#include "driver/HfWeights.h"

#include "frontends/models/ModelConfig.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace megac::driver {

namespace {

/// The next token from one position's logits.
int64_t pick(std::vector<double> logits, double temperature, int64_t topK, double topP,
             std::mt19937_64 &rng) {
  if (temperature <= 0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (topK > 0 && size_t(topK) < order.size())
    order.resize(size_t(topK));
  double top = logits[order.front()];
  std::vector<double> p;
  double sum = 0;
  for (int64_t t : order) {
    p.push_back(std::exp((logits[t] - top) / temperature));
    sum += p.back();
  }
  size_t keep = p.size();
  if (topP > 0 && topP < 1) {
    double mass = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      mass += p[i] / sum;
      if (mass >= topP) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<size_t> draw(p.begin(), p.begin() + long(keep));
  return order[draw(rng)];
}

/// Whether a checkpoint's `from` tensor can feed a `to` parameter: the same dtype, or f32 and
/// f64 either way (an fp64 run of an f32 model, and back).
bool convertible(DType from, DType to) {
  return from == to ||
         ((from == DType::f64 || from == DType::f32) && (to == DType::f64 || to == DType::f32));
}

/// `tensor` in `dtype`, for convertible dtypes.
HostTensor convertFloat(const HostTensor &tensor, DType dtype) {
  if (tensor.dtype == dtype || !convertible(tensor.dtype, dtype))
    return tensor;
  HostTensor out = HostTensor::zeros(dtype, tensor.shape);
  for (int64_t i = 0; i < tensor.numElements(); ++i) {
    if (dtype == DType::f32)
      out.data<float>()[i] = float(tensor.data<double>()[i]);
    else
      out.data<double>()[i] = tensor.data<float>()[i];
  }
  return out;
}

/// The forward plan to decode with and its weights.
struct Forward {
  std::vector<uint8_t> plan;
  TensorMap weights;
  int64_t rows = 1, seq = 0;
  std::string logits; // the output to read; empty: "logits" if there is one, else the first
  std::string description;
  double compileSeconds = 0;
  /// An hf: folder's weights file, read into the executor's parameters (HfWeights.h) in place
  /// of `weights`; empty for checkpoints.
  std::string hfWeightsFile;
  SourceShapes sourceShapes;
};

/// A zoo GPT: the checkpoint's spec (or --model) at batch 1, the checkpoint's weights in f32.
StatusOr<Forward> zooForward(const runtime::checkpoint::Checkpoint &checkpoint,
                             const std::string &spec) {
  models::ConfigResult parsed = models::parseModelSpec(spec);
  if (!parsed.config)
    return Status::error("the model '" + spec + "': " + parsed.error +
                         " (give a zoo gpt spec with --model)");
  if (parsed.config->arch != models::Arch::gpt)
    return Status::error("megac generate runs GPT models; '" + spec + "' is not one");
  parsed.config->batch = 1;
  Forward out;
  out.seq = parsed.config->seq;
  out.description = spec;
  for (const auto &[name, tensor] : checkpoint.model) // an fp64 run's are narrowed
    out.weights[name] = convertFloat(tensor, DType::f32);
  ASSIGN_OR_RETURN(CompiledModel compiled, compileModel(ModelSource::fromConfig(*parsed.config), {},
                                                        codegen::CodegenOptions()));
  out.plan = std::move(compiled.plan);
  out.compileSeconds = compiled.loadSeconds + compiled.compileSeconds;
  return out;
}

/// An ONNX-imported model: the recorded file (or --onnx, which must have its size and CRC32)
/// imported with input_ids bound for one row, its initializers replaced by the checkpoint's
/// parameters, which must be exactly the model's.
StatusOr<Forward> onnxForward(runtime::checkpoint::Checkpoint &checkpoint,
                              const OnnxModelRecord &record,
                              const std::optional<std::string> &onnx) {
  std::string path = onnx.value_or(record.path);
  RETURN_IF_ERROR(checkOnnxFile(record, path));
  ASSIGN_OR_RETURN(InputShapes shapes, bindTokenInput(record, path, 1));
  ASSIGN_OR_RETURN(CompiledModel compiledModel,
                   compileModel(ModelSource::fromFile(path), shapes, codegen::CodegenOptions()));
  CompiledModel *compiled = &compiledModel;
  Forward out;
  out.rows = shapes.at("input_ids")[0];
  out.seq = shapes.at("input_ids")[1];
  out.logits = record.logits;
  out.description = path;
  out.plan = std::move(compiled->plan);
  out.compileSeconds = compiled->loadSeconds + compiled->compileSeconds;
  for (auto &[name, tensor] : checkpoint.model) {
    auto it = compiled->weights.find(name);
    if (it == compiled->weights.end())
      return Status::error("the checkpoint's tensor '" + name + "' is no parameter of " + path +
                           " (a checkpoint of another model?)");
    if (tensor.shape != it->second.shape || !convertible(tensor.dtype, it->second.dtype))
      return Status::error("the checkpoint's tensor '" + name + "' is " + dtypeName(tensor.dtype) +
                           " " + shapeString(tensor.shape) + "; " + path + " has " +
                           dtypeName(it->second.dtype) + " " + shapeString(it->second.shape));
    // Moved, not copied: a big model's checkpoint is not held twice.
    out.weights[name] = tensor.dtype == it->second.dtype ? std::move(tensor)
                                                         : convertFloat(tensor, it->second.dtype);
  }
  for (const auto &[name, tensor] : compiled->weights)
    if (!out.weights.count(name))
      return Status::error("parameter '" + name + "' of " + path + " is not in " + checkpoint.path +
                           " (a checkpoint of another model?)");
  return out;
}

/// Element `i` of a float tensor.
double at(const HostTensor &t, int64_t i) {
  return t.dtype == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
}

/// The forward plan running: windows of tokens in, the logits after the window's last token out.
struct GenerationSession {
  Forward forward;
  std::optional<runtime::LoadedPlan> plan;
  std::unique_ptr<runtime::Executor> executor;
  runtime::TensorInfo ids;
  std::string logits; // the output read
};

Status openSession(GenerationSession &s) {
  ASSIGN_OR_RETURN(runtime::LoadedPlan plan, runtime::loadPlanFromBytes(std::move(s.forward.plan)));
  s.plan = std::move(plan);
  runtime::ExecutorOptions options;
  options.weights = &s.forward.weights;
  auto executor = runtime::Executor::create(*s.plan, options);
  if (!executor.isOk())
    return Status::error(executor.status().message() + " (the checkpoint does not fit " +
                         s.forward.description + ")");
  s.executor = std::move(*executor);
  s.forward.weights.clear(); // the executor holds its own copy
  if (!s.forward.hfWeightsFile.empty()) {
    ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(s.forward.hfWeightsFile));
    RETURN_IF_ERROR(loadHfWeights(hf, *s.plan, *s.executor, s.forward.sourceShapes, {}));
  }
  for (const std::string &input : s.executor->inputNames())
    if (input != "input_ids")
      return Status::error(s.forward.description + " takes input '" + input +
                           "'; generate feeds only input_ids");
  ASSIGN_OR_RETURN(s.ids, s.executor->inputInfo("input_ids"));
  std::vector<std::string> outputs = s.executor->outputNames();
  s.logits = s.forward.logits;
  if (s.logits.empty())
    s.logits = std::count(outputs.begin(), outputs.end(), "logits") ? "logits" : outputs.front();
  return Status::ok();
}

/// One forward pass over the window of the last seq `tokens` (at position 0 of row 0,
/// zero-padded after them): the logits after the last token, every id of the model's vocab.
StatusOr<std::vector<double>> logitsAfter(GenerationSession &s,
                                          const std::vector<int64_t> &tokens) {
  const int64_t rows = s.forward.rows, seq = s.forward.seq;
  size_t first = tokens.size() > size_t(seq) ? tokens.size() - size_t(seq) : 0;
  HostTensor ids = HostTensor::zeros(s.ids.dtype, {rows, seq});
  for (size_t i = first; i < tokens.size(); ++i) {
    if (s.ids.dtype == DType::i32)
      ids.data<int32_t>()[i - first] = int32_t(tokens[i]);
    else
      ids.data<int64_t>()[i - first] = tokens[i];
  }
  int64_t last = int64_t(tokens.size() - first) - 1;
  RETURN_IF_ERROR(s.executor->setInput("input_ids", ids));
  RETURN_IF_ERROR(s.executor->run());
  ASSIGN_OR_RETURN(HostTensor logits, s.executor->output(s.logits));
  if (logits.shape.size() != 3 || logits.shape[0] != rows || logits.shape[1] != seq)
    return Status::error("the output '" + s.logits + "' of " + s.forward.description + " is " +
                         shapeString(logits.shape) + ", not logits [" + std::to_string(rows) +
                         ", " + std::to_string(seq) + ", vocab] (train with --logits NAME)");
  int64_t vocab = logits.shape.back();
  for (int64_t t : tokens)
    if (t < 0 || t >= vocab)
      return Status::error("the prompt's token " + std::to_string(t) + " is outside the model's " +
                           std::to_string(vocab) + "-token vocabulary (see --tokenizer)");
  std::vector<double> row(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v)
    row[size_t(v)] = at(logits, last * vocab + v);
  return row;
}

/// `prompt` and its continuation to `emit`, token by token as each is chosen; returns the tokens
/// generated (an end-of-document one included).
StatusOr<int64_t> continueText(GenerationSession &s, const runtime::data::Tokenizer &tokenizer,
                               const std::string &prompt, const Sampling &sampling,
                               const std::function<void(std::string_view)> &emit) {
  std::vector<int64_t> tokens = tokenizer.encode(prompt);
  if (tokens.empty())
    return Status::error("--prompt is empty");
  std::optional<int64_t> endOfDocument = tokenizer.endOfDocument();
  std::mt19937_64 rng(sampling.seed);
  emit(prompt);
  int64_t generated = 0;
  while (generated < sampling.maxTokens) {
    ASSIGN_OR_RETURN(std::vector<double> logits, logitsAfter(s, tokens));
    // Ids past the tokenizer's vocabulary (Megatron-style padding) cannot be decoded: skip them.
    logits.resize(size_t(std::min<int64_t>(int64_t(logits.size()), tokenizer.vocabSize())));
    int64_t next = pick(std::move(logits), sampling.temperature, sampling.topK, sampling.topP, rng);
    ++generated;
    if (endOfDocument && next == *endOfDocument)
      break;
    tokens.push_back(next);
    auto text = tokenizer.decode(std::span<const int64_t>(&tokens.back(), 1));
    if (!text.isOk())
      return Status::error("--tokenizer " + tokenizer.spec() + ": " + text.status().message());
    emit(*text);
  }
  emit("\n");
  return generated;
}

/// The checkpoint's model as a forward plan.
StatusOr<Forward> forwardOf(runtime::checkpoint::Checkpoint &checkpoint,
                            const std::optional<std::string> &spec,
                            const std::optional<std::string> &onnx) {
  StatusOr<std::optional<OnnxModelRecord>> records = onnxRecordOf(checkpoint.meta.config);
  if (!records.isOk())
    return Status::error(checkpoint.path + ": " + records.status().message());
  const std::optional<OnnxModelRecord> &record = *records;
  if (record) {
    if (spec)
      return Status::error(
          checkpoint.path + " is a checkpoint of the ONNX model " + record->path +
          "; --model applies to zoo checkpoints (use --onnx to give a moved file)");
    return onnxForward(checkpoint, *record, onnx);
  }
  if (onnx)
    return Status::error(checkpoint.path + " is a checkpoint of '" + checkpoint.meta.model +
                         "', not of an ONNX model; --onnx applies to ONNX checkpoints");
  std::string model = spec.value_or(checkpoint.meta.model);
  if (!spec && model.size() > 5 && model.ends_with(".onnx"))
    return Status::error(checkpoint.path + " is a checkpoint of " + model +
                         " but records no ONNX file facts (saved by an older megac); train "
                         "again with --save");
  return zooForward(checkpoint, model);
}

} // namespace

struct Generator::Session : GenerationSession {};

Generator::Generator(std::unique_ptr<Session> session) : session_(std::move(session)) {}
Generator::~Generator() = default;

StatusOr<std::unique_ptr<Generator>>
Generator::open(const std::string &loadDir, const std::optional<std::string> &spec,
                const std::optional<std::string> &onnx,
                const std::function<void(const std::string &)> &warn) {
  ASSIGN_OR_RETURN(runtime::checkpoint::Checkpoint checkpoint, loadNewestParameters(loadDir, warn));
  StatusOr<Forward> forward = forwardOf(checkpoint, spec, onnx);
  if (!forward.isOk())
    return forward.status();
  checkpoint.model.clear(); // a big model's tensors: the forward's weights hold what is needed
  checkpoint.optimizer.clear();
  auto session = std::make_unique<Session>();
  session->forward = std::move(forward).value();
  RETURN_IF_ERROR(openSession(*session));
  return std::unique_ptr<Generator>(new Generator(std::move(session)));
}

StatusOr<std::unique_ptr<Generator>> Generator::openHf(const ModelSource &source, int64_t window) {
  const auto *hf = std::get_if<HfSpec>(&source.value());
  if (!hf)
    return Status::error("'" + source.text() + "' is not an hf: model");
  models::ModelConfig config = *source.config();
  config.seq = hf->seq.value_or(window);
  config.batch = 1;
  ASSIGN_OR_RETURN(ModelSource bound, source.bound(config));
  ASSIGN_OR_RETURN(CompiledModel compiled, compileModel(bound, {}, codegen::CodegenOptions()));
  if (compiled.hfWeightsFile.empty())
    return Status::error(
        "--model " + source.text() + ": " + hfFolder(source) +
        " has no model.safetensors or model.safetensors.index.json (a bare config.json has no "
        "weights to generate with)");
  auto session = std::make_unique<Session>();
  Forward &forward = session->forward;
  forward.plan = std::move(compiled.plan);
  forward.seq = config.seq;
  forward.description = source.text();
  forward.compileSeconds = compiled.loadSeconds + compiled.compileSeconds;
  forward.hfWeightsFile = compiled.hfWeightsFile;
  forward.sourceShapes = std::move(compiled.sourceShapes);
  RETURN_IF_ERROR(openSession(*session));
  return std::unique_ptr<Generator>(new Generator(std::move(session)));
}

StatusOr<int64_t> Generator::continuePrompt(const runtime::data::Tokenizer &tokenizer,
                                            const std::string &prompt, const Sampling &sampling,
                                            const std::function<void(std::string_view)> &emit) {
  return continueText(*session_, tokenizer, prompt, sampling, emit);
}

int64_t Generator::window() const { return session_->forward.seq; }
double Generator::compileSeconds() const { return session_->forward.compileSeconds; }

} // namespace megac::driver
