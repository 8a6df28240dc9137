// `megac compile (--model SPEC | FILE.mlir | FILE.onnx) -o FILE.mplan`: a model's forward
// function to a one-rank plan file (with a layout: PlanCommand.cpp's compileWithLayout).
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/ModelFlags.h"

#include "codegen/MemoryPlanner.h"
#include "driver/Compile.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanSeal.h"
#include "runtime/plan/plan_generated.h"
#include "support/Files.h"

#include <cstdio>
#include <filesystem>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac compile";

/// One line about the plan: instructions, buffers, parameters, the arena with and without reuse.
void summarize(const std::string &planPath, const driver::CompiledModel &compiled,
               const std::filesystem::path &weightsPath) {
  const plan::Program *program = plan::GetPlan(compiled.plan.data())->programs()->Get(0);
  uint64_t unplanned = 0;
  for (const plan::Buffer *buffer : *program->buffers())
    unplanned += (buffer->bytes() + codegen::kArenaAlignment - 1) / codegen::kArenaAlignment *
                 codegen::kArenaAlignment;
  unsigned instructions = 0;
  for (const plan::Function *function : *program->functions())
    instructions += function->instructions() ? function->instructions()->size() : 0;
  std::printf("wrote %s: %u instructions, %u buffers, %u parameters, arena %llu bytes "
              "(%llu without reuse)\n",
              planPath.c_str(), instructions, program->buffers()->size(),
              program->parameters()->size(), (unsigned long long)program->arena_bytes(),
              (unsigned long long)unplanned);
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
  auto seal = runtime::planSealHeader(compiled->plan);
  std::span<const uint8_t> planPieces[] = {seal, compiled->plan};
  if (Status s = writeFileAtomically(planPath.string(), planPieces); !s.isOk())
    return fail(kCommand, s.message());
  if (!compiled->weights.empty())
    if (Status s = runtime::writeSafetensors(weightsPath.string(), compiled->weights,
                                             {{"producer", "megac"}});
        !s.isOk())
      return fail(kCommand, s.message());
  summarize(planPath.string(), *compiled, weightsPath);
  return 0;
}

} // namespace megac::cli
