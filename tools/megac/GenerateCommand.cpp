// `megac generate --load DIR --prompt TEXT --max-tokens N [--temperature T --top-k K --top-p P
// --seed S]`: text from a checkpoint of a zoo GPT trained on byte tokens, on the CPU runtime.
// Each new token runs the model's forward pass over the window of the last seq tokens (prompt
// at position 0, zeros after it; causal attention makes them invisible) and reads the logits of
// the last real position: greedy (temperature 0) is exactly the forward pass's argmax.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Compile.h"

#include "frontends/models/ModelConfig.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac generate";
constexpr const char *kHelp =
    R"(usage: megac generate --load DIR [--model SPEC] --prompt TEXT [--max-tokens N]
                      [--temperature T] [--top-k K] [--top-p P] [--seed S]

Continues TEXT with a GPT from the newest checkpoint under DIR (`megac train --save DIR`). The
model is the checkpoint's (--model overrides it: a zoo gpt spec); tokens are bytes (a model
trained on `megac data prep --tokenizer byte` data or the byte corpus of `make demo`).
--temperature 0 (the default) is greedy decoding, deterministic: each token is the argmax of
the forward pass's logits. T > 0 samples from softmax(logits / T), restricted to the K most
likely tokens (--top-k) and to the smallest set whose probability reaches P (--top-p), with a
generator seeded by --seed (default 0), so a run is repeatable. --max-tokens defaults to 64.)";

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

} // namespace

int generateCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(
      argc, argv, 2,
      {"load", "model", "prompt", "max-tokens", "temperature", "top-k", "top-p", "seed"},
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
      error = std::string("--") + name + ": '" + *text + "' is not a number >= " +
              std::to_string(int(low));
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
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }
  auto checkpoint = runtime::checkpoint::loadLatestCheckpoint(*args.get("load"));
  if (!checkpoint.isOk())
    return fail(checkpoint.status().message());
  std::string spec = args.get("model").value_or(checkpoint->meta.model);
  models::ConfigResult parsed = models::parseModelSpec(spec);
  if (!parsed.config)
    return fail("the model '" + spec + "': " + parsed.error + " (give a zoo gpt spec with --model)");
  if (parsed.config->arch != models::Arch::gpt)
    return fail("megac generate runs GPT models; '" + spec + "' is not one");
  parsed.config->batch = 1;
  int64_t seq = parsed.config->seq, vocab = parsed.config->vocab;

  // Whole f32 parameters for the one-rank forward plan (an fp64 run's are narrowed).
  runtime::TensorMap weights;
  for (auto &[name, tensor] : checkpoint->model) {
    if (tensor.dtype == runtime::DType::f64) {
      runtime::HostTensor narrow = runtime::HostTensor::zeros(runtime::DType::f32, tensor.shape);
      for (int64_t i = 0; i < tensor.numElements(); ++i)
        narrow.data<float>()[i] = float(tensor.data<double>()[i]);
      weights[name] = std::move(narrow);
    } else {
      weights[name] = tensor;
    }
  }
  codegen::CodegenOptions options;
  std::optional<CompiledModel> compiled =
      compileModel(kCommand, parsed.config->spec(), std::nullopt, {}, options);
  if (!compiled)
    return 1;
  auto plan = runtime::loadPlanFromBytes(compiled->plan);
  if (!plan.isOk())
    return fail(plan.status().message());
  runtime::ExecutorOptions executorOptions;
  executorOptions.weights = &weights;
  auto executor = runtime::Executor::create(*plan, executorOptions);
  if (!executor.isOk())
    return fail(executor.status().message() + " (the checkpoint does not fit " + spec + ")");

  const std::string prompt = *args.get("prompt");
  std::vector<int64_t> tokens;
  for (unsigned char byte : prompt)
    tokens.push_back(byte);
  if (tokens.empty())
    return fail("--prompt is empty");
  for (int64_t t : tokens)
    if (t >= vocab)
      return fail("the prompt's byte " + std::to_string(t) + " is outside the vocabulary of " +
                  std::to_string(vocab));
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::fputs(prompt.c_str(), stdout);
  for (int64_t n = 0; n < int64_t(maxTokens); ++n) {
    // The window: the last seq tokens from position 0, zero-padded after them.
    size_t start = tokens.size() > size_t(seq) ? tokens.size() - size_t(seq) : 0;
    runtime::HostTensor ids = runtime::HostTensor::zeros(runtime::DType::i64, {1, seq});
    for (size_t i = start; i < tokens.size(); ++i)
      ids.data<int64_t>()[i - start] = tokens[i];
    int64_t last = int64_t(tokens.size() - start) - 1;
    if (runtime::Status s = (*executor)->setInput("input_ids", ids); !s.isOk())
      return fail(s.message());
    if (runtime::Status s = (*executor)->run(); !s.isOk())
      return fail(s.message());
    auto logits = (*executor)->output((*executor)->outputNames().front());
    if (!logits.isOk())
      return fail(logits.status().message());
    std::vector<double> row(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) {
      int64_t i = last * vocab + v;
      row[size_t(v)] = logits->dtype == runtime::DType::f64 ? logits->data<double>()[i]
                                                            : logits->data<float>()[i];
    }
    int64_t next = pick(std::move(row), temperature, int64_t(topK), topP, rng);
    tokens.push_back(next);
    std::fputc(int(next & 0xff), stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

} // namespace megac::cli
