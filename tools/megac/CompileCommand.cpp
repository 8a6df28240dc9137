// `megac compile (--model SPEC | FILE.mlir | FILE.onnx) -o FILE.mplan`: a model's forward
// function to a one-rank plan file (with a layout: PlanCommand.cpp's compileWithLayout).
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/ModelFlags.h"

#include "driver/Compile.h"
#include "driver/PlanFile.h"

#include <cstdio>
#include <filesystem>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac compile";

/// One line about the plan: instructions, buffers, parameters, the arena with and without reuse.
void summarize(const std::string &planPath, const driver::CompiledModel &compiled,
               const std::filesystem::path &weightsPath) {
  driver::PlanSummary plan = driver::summarizePlan(compiled.plan);
  std::printf("wrote %s: %llu instructions, %llu buffers, %llu parameters, arena %llu bytes "
              "(%llu without reuse)\n",
              planPath.c_str(), (unsigned long long)plan.instructions,
              (unsigned long long)plan.buffers, (unsigned long long)plan.parameters,
              (unsigned long long)plan.arenaBytes, (unsigned long long)plan.unplannedBytes);
  if (!compiled.weights.empty())
    std::printf("wrote %s: %zu tensors\n", weightsPath.string().c_str(), compiled.weights.size());
  std::printf("time: loaded in %.1f ms, compiled in %.1f ms\n", compiled.loadSeconds * 1e3,
              compiled.compileSeconds * 1e3);
}

} // namespace

int compileCommand(int argc, char **argv) {
  if (hasLayoutFlag(argc, argv))
    return compileWithLayout(argc, argv);
  Flags f(kCommand, kCompileHelp);
  ModelFlags model;
  std::optional<std::string> out, seedText, function;
  model.declare(f);
  f.text("-o,--output", out, "FILE.mplan").text("--seed", seedText, "N");
  f.text("--function", function, "NAME");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (std::string e = model.configure(f); !e.empty())
    return f.usage(e);
  if (!out)
    return f.usage("missing -o FILE.mplan");
  std::optional<uint64_t> seed = 0;
  if (seedText && !(seed = driver::parseSeed(*seedText)))
    return f.usage("--seed: '" + *seedText + "' is not a non-negative integer");
  std::filesystem::path planPath = *out, weightsPath = planPath;
  weightsPath.replace_extension(".safetensors");
  codegen::CodegenOptions options;
  options.function = function.value_or("");
  options.seed = *seed;
  options.weightsFile = weightsPath.filename().string();
  std::optional<driver::CompiledModel> compiled = model.compile(kCommand, options);
  if (!compiled)
    return 1;
  if (Status s = driver::writePlanFile(planPath.string(), compiled->plan); !s.isOk())
    return fail(kCommand, s.message());
  if (!compiled->weights.empty())
    if (Status s = driver::writeWeightsFile(weightsPath.string(), compiled->weights, "megac");
        !s.isOk())
      return fail(kCommand, s.message());
  summarize(planPath.string(), *compiled, weightsPath);
  return 0;
}

} // namespace megac::cli
