// `megac run (MODEL | FILE.mplan) --input NAME=FILE.npy ... --output-dir DIR`: one forward pass.
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/ModelFlags.h"
#include "tools/megac/RunFlags.h"

#include "driver/RunConfig.h"
#include "driver/RunForward.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac run";

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

/// --input NAME=FILE.npy values by name; a one-line error for a malformed or repeated one.
std::string parseInputs(const std::vector<std::string> &specs,
                        std::map<std::string, std::string> &files) {
  for (const std::string &spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return "--input '" + spec + "' is not NAME=FILE.npy";
    if (!files.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second)
      return "input '" + spec.substr(0, eq) + "' is given twice";
  }
  return {};
}

/// The plan: from a .mplan file, or compiled here (with the model's weights in `compiled`).
std::optional<driver::LoadedPlan> preparePlan(const ModelFlags &model, bool fromPlan,
                                              const codegen::CodegenOptions &options,
                                              std::optional<driver::CompiledModel> &compiled) {
  if (fromPlan) {
    auto plan = driver::loadPlanFile(*model.file);
    if (!plan.isOk())
      fail(kCommand, plan.status().message());
    return plan.isOk() ? std::optional(std::move(plan).value()) : std::nullopt;
  }
  compiled = model.compile(kCommand, options);
  if (!compiled)
    return std::nullopt;
  auto plan = driver::loadCompiledPlan(compiled->plan, compiled->description);
  if (!plan.isOk()) {
    fail(kCommand, plan.status().message());
    return std::nullopt;
  }
  return std::move(plan).value();
}

} // namespace

int runCommand(int argc, char **argv) {
  Flags f(kCommand, kRunHelp);
  ModelFlags model;
  std::vector<std::string> inputs;
  std::optional<std::string> outputDir, seed, function, backendName;
  bool allowTf32 = false;
  int64_t threads = 0; // 0: the cores of this node (setThreads)
  model.declare(f);
  f.repeated("--input", inputs, "NAME=FILE.npy").text("--output-dir", outputDir, "DIR");
  f.text("--seed", seed, "N").text("--function", function, "NAME");
  f.text("--backend", backendName, "cpu|cuda").flag("--allow-tf32", allowTf32);
  f.count("--threads", threads, 1, "N", 4096);
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (f.positional().size() > 1)
    return f.usage("give one model or plan file");
  std::string error = model.configure(f);
  bool fromPlan = model.file && std::filesystem::path(*model.file).extension() == ".mplan";
  codegen::CodegenOptions options;
  options.function = function.value_or("");
  std::map<std::string, std::string> files;
  if (error.empty() && !outputDir)
    error = "missing --output-dir DIR";
  if (error.empty() && seed) {
    std::optional<uint64_t> value = driver::parseSeed(*seed);
    if (!value)
      error = "--seed: '" + *seed + "' is not a non-negative integer";
    options.seed = value.value_or(0);
  }
  for (const char *flag : {"--seed", "--function", "--input-shape"})
    if (error.empty() && fromPlan && f.given(flag))
      error =
          std::string(flag) + " applies when compiling; " + *model.file + " is compiled already";
  if (error.empty())
    error = parseInputs(inputs, files);
  StatusOr<driver::Backend> backend = driver::resolveBackend(backendName);
  if (error.empty() && !backend.isOk())
    error = backend.status().message();
  if (!error.empty())
    return f.usage(error);
  setThreads(threads, 1);

  auto start = std::chrono::steady_clock::now();
  std::optional<driver::CompiledModel> compiled;
  std::optional<driver::LoadedPlan> plan = preparePlan(model, fromPlan, options, compiled);
  if (!plan)
    return 1;
  double prepareMs = millisecondsSince(start);
  driver::ForwardOptions forward;
  forward.backend = *backend;
  forward.allowTf32 = allowTf32;
  forward.weights = compiled ? &compiled->weights : nullptr;
  if (compiled) {
    forward.hfWeightsFile = compiled->hfWeightsFile;
    forward.sourceShapes = &compiled->sourceShapes;
  }
  StatusOr<driver::ForwardRun> ran = driver::runForward(*plan, forward, files, *outputDir);
  if (!ran.isOk())
    return fail(kCommand, ran.status().message());
  for (const driver::WrittenOutput &o : ran->outputs)
    std::printf("output %s %s %s -> %s\n", o.name.c_str(), dtypeName(o.dtype),
                shapeString(o.shape).c_str(), o.path.c_str());
  std::printf("arena %llu bytes; %s %.1f ms, run %.1f ms\n", (unsigned long long)ran->arenaBytes,
              fromPlan ? "plan loaded in" : "compile", prepareMs, ran->runSeconds * 1e3);
  return 0;
}

} // namespace megac::cli
