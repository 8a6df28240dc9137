// `megac compile (--model SPEC | FILE.mlir | FILE.onnx) -o FILE.mplan`: a model to a plan file.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Compile.h"
#include "tools/megac/ModelSource.h"

#include "passes/Pipelines.h"

#include "codegen/MemoryPlanner.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/plan_generated.h"
#include "support/Files.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace megac::cli {

namespace {
double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Empty when the model's weights fit the plan: every parameter without an init spec has a
/// value, and every value has its parameter's dtype and shape.
std::string checkWeights(const CompiledModel &compiled) {
  const plan::Program *program = plan::GetPlan(compiled.plan.data())->programs()->Get(0);
  for (const plan::Parameter *param : *program->parameters()) {
    std::string name = param->name()->str();
    const plan::Buffer *buffer = program->buffers()->Get(param->buffer());
    std::vector<int64_t> shape(buffer->shape()->begin(), buffer->shape()->end());
    auto dtype = static_cast<DType>(buffer->dtype());
    auto it = compiled.weights.find(name);
    if (it == compiled.weights.end()) {
      if (param->init() == plan::InitKind::none)
        return "parameter '" + name + "' has neither a value in the model's weights nor an " +
               "init spec (mega.init)";
      continue;
    }
    if (it->second.dtype != dtype || it->second.shape != shape)
      return "the weights give parameter '" + name + "' as " + dtypeName(it->second.dtype) + " " +
             shapeString(it->second.shape) + "; the model has " + dtypeName(dtype) + " " +
             shapeString(shape);
  }
  return {};
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

std::optional<CompiledModel> compileModel(const char *command,
                                          const std::optional<std::string> &spec,
                                          const std::optional<std::string> &file,
                                          const InputShapes &inputShapes,
                                          const codegen::CodegenOptions &options) {
  mlir::MLIRContext ctx;
  auto model = loadModel(ctx, spec, file, inputShapes);
  if (!model)
    return std::nullopt;
  CompiledModel compiled;
  compiled.description = model->description;
  compiled.loadSeconds = model->buildSeconds;
  compiled.weights = std::move(model->weights);
  auto start = std::chrono::steady_clock::now();
  // Diagnostics on ops print as file:line:col with the source line, like parse errors.
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  ctx.printOpOnDiagnostic(false);
  if (mlir::failed(passes::runInputPipeline(*model->module))) {
    std::fprintf(stderr, "%s: error: the input pipeline failed on %s\n", command,
                 compiled.description.c_str());
    return std::nullopt;
  }
  codegen::CodegenOptions planOptions = options;
  if (compiled.weights.empty())
    planOptions.weightsFile.clear();
  mlir::FailureOr<std::vector<uint8_t>> plan = codegen::writePlan(*model->module, planOptions);
  if (mlir::failed(plan)) {
    std::fprintf(stderr, "%s: error: cannot compile %s to a plan (see the errors above)\n", command,
                 compiled.description.c_str());
    return std::nullopt;
  }
  compiled.plan = std::move(*plan);
  compiled.compileSeconds = secondsSince(start);
  std::string error = checkWeights(compiled);
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", command, error.c_str());
    return std::nullopt;
  }
  return compiled;
}

int compileCommand(int argc, char **argv) {
  const char *kCommand = "megac compile";
  if (hasLayoutFlag(argc, argv))
    return compileWithLayout(argc, argv);
  Args args;
  std::string error =
      args.parse(argc, argv, 2, {"model", "o", "seed", "function", "input-shape"}, {"help"});
  if (args.has("help")) {
    std::puts("usage: megac compile (--model SPEC | FILE.mlir | FILE.onnx) -o FILE.mplan\n"
              "                     [--seed N] [--function NAME] [--input-shape NAME=D0xD1x...]\n"
              "  runs the input pipeline and lowers the model's forward function to a\n"
              "  single-rank plan. Weights that come with the model (ONNX initializers, a .mlir's\n"
              "  mega.weights file) are written beside the plan as FILE.safetensors; parameters\n"
              "  without values are initialized at load time from their init spec and --seed\n"
              "  (default 0). --input-shape binds an ONNX input's symbolic dims.\n"
              "  With a layout (--ranks N --tp T --pp P --dp D ...; `megac plan --help`) it\n"
              "  compiles the training step instead: one program per pipeline stage and the\n"
              "  rank table.");
    return 0;
  }
  std::optional<std::string> file;
  if (error.empty() && args.positional().size() > 1)
    error = "give one model file";
  if (!args.positional().empty())
    file = args.positional().front();
  if (error.empty() && !args.get("o"))
    error = "missing -o FILE.mplan";
  std::optional<uint64_t> seed = 0;
  if (error.empty() && args.get("seed") && !(seed = parseSeed(*args.get("seed"))))
    error = "--seed: '" + *args.get("seed") + "' is not a non-negative integer";
  InputShapes inputShapes;
  if (error.empty())
    error = parseInputShapes(args.getAll("input-shape"), inputShapes);
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }
  std::filesystem::path planPath = *args.get("o");
  std::filesystem::path weightsPath = planPath;
  weightsPath.replace_extension(".safetensors");

  codegen::CodegenOptions options;
  options.function = args.get("function").value_or("");
  options.seed = *seed;
  options.weightsFile = weightsPath.filename().string();
  auto compiled = compileModel(kCommand, args.get("model"), file, inputShapes, options);
  if (!compiled)
    return 1;

  std::span<const uint8_t> planBytes(compiled->plan);
  Status status = writeFileAtomically(planPath.string(), {&planBytes, 1});
  if (!status.isOk()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, status.message().c_str());
    return 1;
  }
  if (!compiled->weights.empty()) {
    status =
        runtime::writeSafetensors(weightsPath.string(), compiled->weights, {{"producer", "megac"}});
    if (!status.isOk()) {
      std::fprintf(stderr, "%s: error: %s\n", kCommand, status.message().c_str());
      return 1;
    }
  }

  const plan::Program *program = plan::GetPlan(compiled->plan.data())->programs()->Get(0);
  uint64_t unplanned = 0;
  for (const plan::Buffer *buffer : *program->buffers())
    unplanned += (buffer->bytes() + codegen::kArenaAlignment - 1) / codegen::kArenaAlignment *
                 codegen::kArenaAlignment;
  unsigned instructions = 0;
  for (const plan::Function *function : *program->functions())
    instructions += function->instructions() ? function->instructions()->size() : 0;
  std::printf("wrote %s: %u instructions, %u buffers, %u parameters, arena %llu bytes "
              "(%llu without reuse)\n",
              planPath.string().c_str(), instructions, program->buffers()->size(),
              program->parameters()->size(), (unsigned long long)program->arena_bytes(),
              (unsigned long long)unplanned);
  if (!compiled->weights.empty())
    std::printf("wrote %s: %zu tensors\n", weightsPath.string().c_str(), compiled->weights.size());
  std::printf("time: loaded in %.1f ms, compiled in %.1f ms\n", compiled->loadSeconds * 1e3,
              compiled->compileSeconds * 1e3);
  return 0;
}

} // namespace megac::cli
