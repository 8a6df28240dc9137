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
#include <cstring>
#include <map>
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
  /// With the KV cache (hf: models): the decode step's plan (frontends/models/Layers.h
  /// KvCache); the forward plan then also outputs every layer's keys and values (the prefill).
  std::vector<uint8_t> decodePlan;
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

/// megac generate's KV cache: the decode step's plan running, and every layer's keys and values
/// of the text so far.
struct DecodeStep {
  std::optional<runtime::LoadedPlan> plan;
  std::unique_ptr<runtime::Executor> executor;
  /// "key_L", "value_L" -> [1, window, kv_heads, head_dim], slot j the key (after rotary) or
  /// value of the text's token j: the decode step's past_* inputs, filled from the forward's
  /// present_* outputs (the prefill) and each step's own.
  std::map<std::string, HostTensor> cache;
  runtime::TensorInfo ids, positions, mask;
  int64_t cached = 0; // the cache holds the text's first `cached` tokens
};

/// The forward plan running: windows of tokens in, the logits after the window's last token out;
/// and the decode step with the KV cache.
struct GenerationSession {
  Forward forward;
  std::optional<runtime::LoadedPlan> plan;
  std::unique_ptr<runtime::Executor> executor;
  runtime::TensorInfo ids;
  /// A padding model's attention_mask [rows, seq] (zoo padding=1, or an import taking one):
  /// fed 1 over the window's tokens and 0 after them.
  std::optional<runtime::TensorInfo> mask;
  std::string logits; // the output read
  std::optional<DecodeStep> decode;
};

/// An executor of plan `bytes` (kept in `plan`) with `weights`, or an hf: folder's weights file
/// read into its parameters.
StatusOr<std::unique_ptr<runtime::Executor>> openExecutor(std::vector<uint8_t> bytes,
                                                          std::optional<runtime::LoadedPlan> &plan,
                                                          const TensorMap &weights,
                                                          const Forward &forward) {
  ASSIGN_OR_RETURN(runtime::LoadedPlan loaded, runtime::loadPlanFromBytes(std::move(bytes)));
  plan = std::move(loaded);
  runtime::ExecutorOptions options;
  options.weights = &weights;
  auto executor = runtime::Executor::create(*plan, options);
  if (!executor.isOk())
    return Status::error(executor.status().message() + " (the checkpoint does not fit " +
                         forward.description + ")");
  if (!forward.hfWeightsFile.empty()) {
    ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(forward.hfWeightsFile));
    RETURN_IF_ERROR(loadHfWeights(hf, *plan, **executor, forward.sourceShapes, {}));
  }
  return std::move(executor).value();
}

Status openSession(GenerationSession &s) {
  ASSIGN_OR_RETURN(s.executor,
                   openExecutor(std::move(s.forward.plan), s.plan, s.forward.weights, s.forward));
  s.forward.weights.clear(); // the executor holds its own copy
  for (const std::string &input : s.executor->inputNames())
    if (input != "input_ids" && input != "attention_mask")
      return Status::error(s.forward.description + " takes input '" + input +
                           "'; generate feeds only input_ids and attention_mask");
  ASSIGN_OR_RETURN(s.ids, s.executor->inputInfo("input_ids"));
  if (const std::vector<std::string> in = s.executor->inputNames();
      std::count(in.begin(), in.end(), "attention_mask")) {
    ASSIGN_OR_RETURN(runtime::TensorInfo mask, s.executor->inputInfo("attention_mask"));
    if (mask.shape != s.ids.shape)
      return Status::error(s.forward.description + "'s attention_mask is " +
                           shapeString(mask.shape) + ", not input_ids' " +
                           shapeString(s.ids.shape) + " (a key padding mask [rows, seq])");
    if (mask.dtype != DType::i64 && mask.dtype != DType::i32 && mask.dtype != DType::f32 &&
        mask.dtype != DType::f64)
      return Status::error(s.forward.description + "'s attention_mask is " +
                           dtypeName(mask.dtype) + "; generate fills i64, i32, f32 or f64 masks");
    s.mask = mask;
  }
  std::vector<std::string> outputs = s.executor->outputNames();
  s.logits = s.forward.logits;
  if (s.logits.empty())
    s.logits = std::count(outputs.begin(), outputs.end(), "logits") ? "logits" : outputs.front();
  if (s.forward.decodePlan.empty())
    return Status::ok();
  DecodeStep &d = s.decode.emplace();
  ASSIGN_OR_RETURN(d.executor,
                   openExecutor(std::move(s.forward.decodePlan), d.plan, {}, s.forward));
  ASSIGN_OR_RETURN(d.ids, d.executor->inputInfo("input_ids"));
  ASSIGN_OR_RETURN(d.positions, d.executor->inputInfo("position_ids"));
  ASSIGN_OR_RETURN(d.mask, d.executor->inputInfo("cache_mask"));
  for (const std::string &input : d.executor->inputNames())
    if (input.starts_with("past_")) {
      ASSIGN_OR_RETURN(runtime::TensorInfo info, d.executor->inputInfo(input));
      d.cache.emplace(input.substr(5), HostTensor::zeros(info.dtype, info.shape));
    }
  return Status::ok();
}

/// Element `i` of an integer or float tensor set to `value`.
void setElement(HostTensor &t, int64_t i, double value) {
  switch (t.dtype) {
  case DType::i32:
    t.data<int32_t>()[i] = int32_t(value);
    break;
  case DType::i64:
    t.data<int64_t>()[i] = int64_t(value);
    break;
  case DType::f64:
    t.data<double>()[i] = value;
    break;
  default:
    t.data<float>()[i] = float(value);
    break;
  }
}

/// One forward pass over the window of the last seq `tokens` (at position 0 of row 0,
/// zero-padded after them): the logits after the last token, every id of the model's vocab.
StatusOr<std::vector<double>> logitsAfter(GenerationSession &s,
                                          const std::vector<int64_t> &tokens) {
  const int64_t rows = s.forward.rows, seq = s.forward.seq;
  size_t first = tokens.size() > size_t(seq) ? tokens.size() - size_t(seq) : 0;
  HostTensor ids = HostTensor::zeros(s.ids.dtype, {rows, seq});
  for (size_t i = first; i < tokens.size(); ++i)
    setElement(ids, int64_t(i - first), double(tokens[i]));
  int64_t last = int64_t(tokens.size() - first) - 1;
  RETURN_IF_ERROR(s.executor->setInput("input_ids", ids));
  if (s.mask) { // the window's tokens are real, the zeros after them padding, in every row
    HostTensor mask = HostTensor::zeros(s.mask->dtype, {rows, seq});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i <= last; ++i)
        setElement(mask, r * seq + i, 1.0);
    RETURN_IF_ERROR(s.executor->setInput("attention_mask", mask));
  }
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

/// One decode step: the last of `tokens` at its position p (< the window) attends over the
/// cache's slots 0..p-1 and itself; its key and value go into slot p. The logits after it.
StatusOr<std::vector<double>> decodeStep(DecodeStep &d, const std::vector<int64_t> &tokens,
                                         int64_t window) {
  const int64_t p = int64_t(tokens.size()) - 1;
  HostTensor ids = HostTensor::zeros(d.ids.dtype, {1, 1});
  HostTensor position = HostTensor::zeros(d.positions.dtype, {1, 1});
  HostTensor mask = HostTensor::zeros(d.mask.dtype, {1, 1, 1, window + 1});
  setElement(ids, 0, double(tokens.back()));
  setElement(position, 0, double(p));
  // Slots p.. are not written yet: exp of -1e30 below the row's largest score is exactly 0 in
  // f32 and f64, so they weigh nothing (a finite value, so no inf - inf on any path).
  for (int64_t j = p; j < window; ++j)
    setElement(mask, j, -1e30);
  RETURN_IF_ERROR(d.executor->setInput("input_ids", ids));
  RETURN_IF_ERROR(d.executor->setInput("position_ids", position));
  RETURN_IF_ERROR(d.executor->setInput("cache_mask", mask));
  for (const auto &[name, past] : d.cache)
    RETURN_IF_ERROR(d.executor->setInput("past_" + name, past));
  RETURN_IF_ERROR(d.executor->run());
  for (auto &[name, past] : d.cache) {
    ASSIGN_OR_RETURN(HostTensor present, d.executor->output("present_" + name));
    size_t slot = present.bytes.size(); // [1, 1, kv_heads, head_dim] into [1, window, ...]
    if (present.dtype != past.dtype || slot * size_t(window) != past.bytes.size())
      return Status::error("the decode step's present_" + name + " is " +
                           shapeString(present.shape) + ", not one slot of the cache " +
                           shapeString(past.shape));
    std::memcpy(past.bytes.data() + size_t(p) * slot, present.bytes.data(), slot);
  }
  d.cached = p + 1;
  ASSIGN_OR_RETURN(HostTensor logits, d.executor->output("logits"));
  int64_t vocab = logits.shape.back();
  std::vector<double> row(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v)
    row[size_t(v)] = at(logits, v);
  return row;
}

/// The logits after `tokens`. With the KV cache: the forward over them while nothing is cached
/// (the prefill, whose present_* outputs fill the cache), then a decode step per new token;
/// without it, or once the text is longer than the window (the window slides, every position
/// moves and the cache is void), the forward over the window of the last seq tokens.
StatusOr<std::vector<double>> nextLogits(GenerationSession &s, const std::vector<int64_t> &tokens) {
  DecodeStep *d = s.decode ? &*s.decode : nullptr;
  const int64_t n = int64_t(tokens.size());
  if (!d || n > s.forward.seq)
    return logitsAfter(s, tokens);
  if (d->cached > 0 && d->cached == n - 1)
    return decodeStep(*d, tokens, s.forward.seq);
  ASSIGN_OR_RETURN(std::vector<double> logits, logitsAfter(s, tokens));
  for (auto &[name, past] : d->cache) {
    ASSIGN_OR_RETURN(HostTensor present, s.executor->output("present_" + name));
    if (present.shape != past.shape || present.dtype != past.dtype)
      return Status::error("the forward's present_" + name + " is " + shapeString(present.shape) +
                           ", not the cache's " + shapeString(past.shape));
    past = std::move(present);
  }
  d->cached = n;
  return logits;
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
    ASSIGN_OR_RETURN(std::vector<double> logits, nextLogits(s, tokens));
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

StatusOr<std::unique_ptr<Generator>> Generator::openHf(const ModelSource &source, int64_t window,
                                                       bool kvCache) {
  const auto *hf = std::get_if<HfSpec>(&source.value());
  if (!hf)
    return Status::error("'" + source.text() + "' is not an hf: model");
  models::ModelConfig config = *source.config();
  config.seq = hf->seq.value_or(window);
  config.batch = 1;
  ASSIGN_OR_RETURN(ModelSource bound, source.bound(config));
  models::ModelConfig built = *bound.config();
  kvCache = kvCache && built.buildsKvCache();
  // With the cache, the forward (the prefill) also outputs every layer's keys and values; it
  // and the decode step are built from the bound config (a zoo source of the same model).
  ModelSource forwardSource = bound;
  if (kvCache) {
    models::ModelConfig prefill = built;
    prefill.kvOutputs = true;
    forwardSource = ModelSource::fromConfig(prefill);
  }
  ASSIGN_OR_RETURN(CompiledModel compiled,
                   compileModel(forwardSource, {}, codegen::CodegenOptions()));
  std::string weightsFile = hfWeightsFile(source);
  if (weightsFile.empty())
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
  forward.hfWeightsFile = weightsFile;
  forward.sourceShapes = std::move(compiled.sourceShapes);
  if (kvCache) {
    models::ModelConfig step = built;
    step.kvDecode = true;
    ASSIGN_OR_RETURN(CompiledModel decode,
                     compileModel(ModelSource::fromConfig(step), {}, codegen::CodegenOptions()));
    forward.decodePlan = std::move(decode.plan);
    forward.compileSeconds += decode.loadSeconds + decode.compileSeconds;
  }
  RETURN_IF_ERROR(openSession(*session));
  return std::unique_ptr<Generator>(new Generator(std::move(session)));
}

StatusOr<int64_t> Generator::continuePrompt(const runtime::data::Tokenizer &tokenizer,
                                            const std::string &prompt, const Sampling &sampling,
                                            const std::function<void(std::string_view)> &emit) {
  return continueText(*session_, tokenizer, prompt, sampling, emit);
}

int64_t Generator::window() const { return session_->forward.seq; }
bool Generator::kvCache() const { return session_->decode.has_value(); }
double Generator::compileSeconds() const { return session_->forward.compileSeconds; }

} // namespace megac::driver
