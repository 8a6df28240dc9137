// `megac generate --load DIR --prompt TEXT [--max-tokens N --tokenizer SPEC --temperature T
// --top-k K --top-p P --seed S]`: text from a checkpoint, or from a transformers folder with
// `--model hf:FOLDER [--no-kv-cache]` instead of --load (driver/Generate.h), printed as produced.
#include "tools/megac/Cli.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"

#include "driver/Compile.h"
#include "driver/Generate.h"

#include <chrono>
#include <cstdio>

namespace megac::cli {

int generateCommand(int argc, char **argv) {
  const char *command = "megac generate";
  Flags f(command, kGenerateHelp);
  std::optional<std::string> load, spec, onnx, tokenizerSpec, prompt, seedText;
  driver::Sampling sampling;
  int64_t topK = 0, maxTokens = 64;
  auto atLeast = [](double low) { return [low](double v) { return v >= low; }; };
  f.text("--load", load, "DIR").text("--model", spec, "SPEC").text("--onnx", onnx, "MODEL.onnx");
  f.text("--tokenizer", tokenizerSpec, "SPEC").text("--prompt", prompt, "TEXT");
  // Integers, parsed as such: 1e30 or inf cast to int64_t was undefined (nothing generated).
  f.count("--max-tokens", maxTokens, 1, "N", int64_t(1) << 40);
  f.number("--temperature", sampling.temperature, atLeast(0), "a number >= 0", "T");
  f.count("--top-k", topK, 0, "K", std::numeric_limits<int32_t>::max());
  f.number("--top-p", sampling.topP, atLeast(0), "a number >= 0", "P");
  f.text("--seed", seedText, "S");
  bool noKvCache = false;
  f.flag("--no-kv-cache", noKvCache);
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  std::optional<uint64_t> seed = 0;
  if (seedText && !(seed = driver::parseSeed(*seedText)))
    return f.usage("--seed: '" + *seedText + "' is not a non-negative integer");
  bool hf = spec && spec->rfind("hf:", 0) == 0;
  if (hf && load)
    return f.usage("--model hf:FOLDER generates from the folder's weights, without --load (a "
                   "checkpoint of an hf: run: `megac export --load DIR --hf OUT`, then --model "
                   "hf:OUT)");
  if (noKvCache && !hf)
    return f.usage("--no-kv-cache applies to --model hf:FOLDER (a checkpoint's model always "
                   "runs the forward over the window)");
  if (!load && !hf)
    return f.usage("missing --load DIR (a megac train --save directory) or --model hf:FOLDER");
  if (!prompt)
    return f.usage("missing --prompt TEXT");
  if (spec && onnx)
    return f.usage(
        "give --model (a zoo checkpoint's spec) or --onnx (an ONNX checkpoint's file), not both");
  auto tokenizer = driver::makeTokenizer(tokenizerSpec.value_or("byte"));
  if (!tokenizer.isOk())
    return fail(command, "--tokenizer: " + tokenizer.status().message());
  StatusOr<std::unique_ptr<driver::Generator>> generator = Status::error("no model");
  if (hf) {
    StatusOr<driver::ModelSource> source = driver::ModelSource::fromSpec(*spec);
    if (!source.isOk())
      return fail(command, source.status().message());
    // Without seq=, the window holds the prompt and every new token: nothing slides out, as in
    // transformers' generate.
    int64_t window = int64_t((*tokenizer)->encode(*prompt).size()) + maxTokens;
    generator = driver::Generator::openHf(*source, window, !noKvCache);
  } else {
    generator = driver::Generator::open(*load, spec, onnx, [&](const std::string &line) {
      std::fprintf(stderr, "%s: warning: %s\n", command, line.c_str());
    });
  }
  if (!generator.isOk())
    return fail(command, generator.status().message());
  sampling.maxTokens = maxTokens;
  sampling.topK = topK;
  sampling.seed = *seed;
  auto start = std::chrono::steady_clock::now();
  auto generated =
      (*generator)->continuePrompt(**tokenizer, *prompt, sampling, [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      });
  if (!generated.isOk())
    return fail(command, generated.status().message());
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "%s: %lld tokens in %.1f ms (%.2f ms/token, window %lld, %s), plan compiled in "
               "%.2f s\n",
               command, (long long)*generated, ms, *generated ? ms / double(*generated) : 0.0,
               (long long)(*generator)->window(),
               (*generator)->kvCache() ? "KV cache" : "no KV cache",
               (*generator)->compileSeconds());
  return 0;
}

} // namespace megac::cli
