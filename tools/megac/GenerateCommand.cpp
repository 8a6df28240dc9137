// `megac generate --load DIR --prompt TEXT --max-tokens N [--tokenizer SPEC --temperature T
// --top-k K --top-p P --seed S]`: text from a checkpoint of a zoo GPT or of an ONNX-imported causal
// LM (the checkpoint records the .onnx file), on the CPU runtime. Each new token runs the model's
// one-rank forward plan (batch 1, or the model's fixed batch with the window in row 0) over the
// window of the last seq tokens (the window at position 0, zeros after it; causal attention
// makes them invisible) and reads the logits of the last real position: greedy (temperature 0)
// is exactly the forward pass's argmax.
#include "tools/megac/Args.h"
#include "tools/megac/CheckpointModel.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Compile.h"

#include "frontends/models/ModelConfig.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/Tokenizer.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac generate";
constexpr const char *kHelp =
    R"(usage: megac generate --load DIR --prompt TEXT [--max-tokens N] [--tokenizer SPEC]
                      [--temperature T] [--top-k K] [--top-p P] [--seed S]
                      [--model SPEC | --onnx MODEL.onnx]

Continues TEXT with the model of the newest checkpoint under DIR (`megac train --save DIR`):
a zoo GPT (--model overrides the checkpoint's spec) or an ONNX-imported causal LM taking
input_ids (GPT-2, Llama exports, ...), rebuilt from the .onnx file the checkpoint records
(--onnx gives it where it has moved; its size and CRC32 must match the recorded ones).
--tokenizer (byte, gpt2:VOCAB.json,MERGES.txt or hf:TOKENIZER.json; default byte) encodes
TEXT and decodes the new tokens, printed as they are produced; ids past the tokenizer's
vocabulary (a padded embedding) are never chosen, and its end-of-document token ends the text.
--temperature 0 (the default) is greedy decoding, deterministic: each token is the argmax of
the forward pass's logits. T > 0 samples from softmax(logits / T), restricted to the K most
likely tokens (--top-k) and to the smallest set whose probability reaches P (--top-p), with a
generator seeded by --seed (default 0), so a run is repeatable. --max-tokens defaults to 64.
The time per token goes to stderr.)";

int fail(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", kCommand, message.c_str());
  return 1;
}

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
};

/// A zoo GPT: the checkpoint's spec (or --model) at batch 1, the checkpoint's weights in f32.
std::optional<Forward> zooForward(const runtime::checkpoint::Checkpoint &checkpoint,
                                  const std::string &spec) {
  models::ConfigResult parsed = models::parseModelSpec(spec);
  if (!parsed.config) {
    fail("the model '" + spec + "': " + parsed.error + " (give a zoo gpt spec with --model)");
    return std::nullopt;
  }
  if (parsed.config->arch != models::Arch::gpt) {
    fail("megac generate runs GPT models; '" + spec + "' is not one");
    return std::nullopt;
  }
  parsed.config->batch = 1;
  Forward out;
  out.seq = parsed.config->seq;
  out.description = spec;
  for (const auto &[name, tensor] : checkpoint.model) // an fp64 run's are narrowed
    out.weights[name] = convertFloat(tensor, DType::f32);
  std::optional<CompiledModel> compiled =
      compileModel(kCommand, parsed.config->spec(), std::nullopt, {}, codegen::CodegenOptions());
  if (!compiled)
    return std::nullopt;
  out.plan = std::move(compiled->plan);
  out.compileSeconds = compiled->loadSeconds + compiled->compileSeconds;
  return out;
}

/// An ONNX-imported model: the recorded file (or --onnx, which must have its size and CRC32)
/// imported with input_ids bound for one row, its initializers replaced by the checkpoint's
/// parameters, which must be exactly the model's.
std::optional<Forward> onnxForward(runtime::checkpoint::Checkpoint &checkpoint,
                                   const OnnxModelRecord &record,
                                   const std::optional<std::string> &onnx) {
  std::string path = onnx.value_or(record.path);
  if (Status s = checkOnnxFile(record, path); !s.isOk()) {
    fail(s.message());
    return std::nullopt;
  }
  StatusOr<InputShapes> shapes = bindTokenInput(record, path, 1);
  if (!shapes.isOk()) {
    fail(shapes.status().message());
    return std::nullopt;
  }
  std::optional<CompiledModel> compiled =
      compileModel(kCommand, std::nullopt, path, *shapes, codegen::CodegenOptions());
  if (!compiled)
    return std::nullopt;
  Forward out;
  out.rows = shapes->at("input_ids")[0];
  out.seq = shapes->at("input_ids")[1];
  out.logits = record.logits;
  out.description = path;
  out.plan = std::move(compiled->plan);
  out.compileSeconds = compiled->loadSeconds + compiled->compileSeconds;
  for (auto &[name, tensor] : checkpoint.model) {
    auto it = compiled->weights.find(name);
    if (it == compiled->weights.end()) {
      fail("the checkpoint's tensor '" + name + "' is no parameter of " + path +
           " (a checkpoint of another model?)");
      return std::nullopt;
    }
    if (tensor.shape != it->second.shape || !convertible(tensor.dtype, it->second.dtype)) {
      fail("the checkpoint's tensor '" + name + "' is " + dtypeName(tensor.dtype) + " " +
           shapeString(tensor.shape) + "; " + path + " has " + dtypeName(it->second.dtype) + " " +
           shapeString(it->second.shape));
      return std::nullopt;
    }
    // Moved, not copied: a big model's checkpoint is not held twice.
    out.weights[name] = tensor.dtype == it->second.dtype ? std::move(tensor)
                                                         : convertFloat(tensor, it->second.dtype);
  }
  for (const auto &[name, tensor] : compiled->weights)
    if (!out.weights.count(name)) {
      fail("parameter '" + name + "' of " + path + " is not in " + checkpoint.path +
           " (a checkpoint of another model?)");
      return std::nullopt;
    }
  return out;
}

/// Element `i` of a float tensor.
double at(const HostTensor &t, int64_t i) {
  return t.dtype == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
}

/// The forward plan running: windows of tokens in, the logits after the window's last token out.
struct Session {
  Forward forward;
  std::optional<runtime::LoadedPlan> plan;
  std::unique_ptr<runtime::Executor> executor;
  runtime::TensorInfo ids;
  std::string logits; // the output read
};

Status openSession(Session &s) {
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
StatusOr<std::vector<double>> logitsAfter(Session &s, const std::vector<int64_t> &tokens) {
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

struct Sampling {
  int64_t maxTokens = 64;
  double temperature = 0, topP = 1;
  int64_t topK = 0;
  uint64_t seed = 0;
};

/// Prints `prompt` and its continuation, token by token as each is chosen; returns the tokens
/// generated (an end-of-document one included).
StatusOr<int64_t> continuePrompt(Session &s, const runtime::data::Tokenizer &tokenizer,
                                 const std::string &prompt, const Sampling &sampling) {
  std::vector<int64_t> tokens = tokenizer.encode(prompt);
  if (tokens.empty())
    return Status::error("--prompt is empty");
  std::optional<int64_t> endOfDocument = tokenizer.endOfDocument();
  std::mt19937_64 rng(sampling.seed);
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
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
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return generated;
}

} // namespace

int generateCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(argc, argv, 2,
                                 {"load", "model", "onnx", "tokenizer", "prompt", "max-tokens",
                                  "temperature", "top-k", "top-p", "seed"},
                                 {"help"});
  if (args.has("help")) {
    std::puts(kHelp);
    return 0;
  }
  auto number = [&](const char *name, double fallback, double low) {
    auto text = args.get(name);
    if (!text)
      return fallback;
    char *end = nullptr;
    double v = std::strtod(text->c_str(), &end);
    if (!end || *end || !(v >= low)) {
      error = std::string("--") + name + ": '" + *text +
              "' is not a number >= " + std::to_string(int(low));
      return fallback;
    }
    return v;
  };
  double maxTokens = number("max-tokens", 64, 1), temperature = number("temperature", 0, 0),
         topK = number("top-k", 0, 0), topP = number("top-p", 1, 0), seed = number("seed", 0, 0);
  if (error.empty() && !args.get("load"))
    error = "missing --load DIR (a megac train --save directory)";
  if (error.empty() && !args.get("prompt"))
    error = "missing --prompt TEXT";
  if (error.empty() && args.get("model") && args.get("onnx"))
    error =
        "give --model (a zoo checkpoint's spec) or --onnx (an ONNX checkpoint's file), not both";
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }
  auto tokenizer = runtime::data::makeTokenizer(args.get("tokenizer").value_or("byte"));
  if (!tokenizer.isOk())
    return fail("--tokenizer: " + tokenizer.status().message());
  auto checkpoint = runtime::checkpoint::loadLatestCheckpoint(
      *args.get("load"), nullptr, runtime::checkpoint::CheckpointParts::parametersOnly);
  if (!checkpoint.isOk())
    return fail(checkpoint.status().message());
  auto record = onnxRecordOf(checkpoint->meta.config);
  if (!record.isOk())
    return fail(checkpoint->path + ": " + record.status().message());

  std::optional<Forward> forward;
  if (record->has_value()) {
    if (args.get("model"))
      return fail(checkpoint->path + " is a checkpoint of the ONNX model " + (**record).path +
                  "; --model applies to zoo checkpoints (use --onnx to give a moved file)");
    forward = onnxForward(*checkpoint, **record, args.get("onnx"));
  } else {
    if (args.get("onnx"))
      return fail(checkpoint->path + " is a checkpoint of '" + checkpoint->meta.model +
                  "', not of an ONNX model; --onnx applies to ONNX checkpoints");
    std::string spec = args.get("model").value_or(checkpoint->meta.model);
    if (!args.get("model") && spec.size() > 5 && spec.ends_with(".onnx"))
      return fail(checkpoint->path + " is a checkpoint of " + spec +
                  " but records no ONNX file facts (saved by an older megac); train again with "
                  "--save");
    forward = zooForward(*checkpoint, spec);
  }
  if (!forward)
    return 1;
  checkpoint->model.clear(); // a big model's tensors: the forward's weights hold what is needed
  checkpoint->optimizer.clear();

  Session session;
  session.forward = std::move(*forward);
  if (Status s = openSession(session); !s.isOk())
    return fail(s.message());
  Sampling sampling;
  sampling.maxTokens = int64_t(maxTokens);
  sampling.temperature = temperature;
  sampling.topK = int64_t(topK);
  sampling.topP = topP;
  sampling.seed = uint64_t(seed);
  auto start = std::chrono::steady_clock::now();
  auto generated = continuePrompt(session, **tokenizer, *args.get("prompt"), sampling);
  if (!generated.isOk())
    return fail(generated.status().message());
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "%s: %lld tokens in %.1f ms (%.2f ms/token, window %lld), plan compiled in "
               "%.2f s\n",
               kCommand, (long long)*generated, ms, *generated ? ms / double(*generated) : 0.0,
               (long long)session.forward.seq, session.forward.compileSeconds);
  return 0;
}

} // namespace megac::cli
