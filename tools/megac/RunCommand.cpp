// `megac run (MODEL | FILE.mplan) --input NAME=FILE.npy ... --output-dir DIR`: one forward pass.
#include "tools/megac/Args.h"
#include "tools/megac/BackendOption.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Compile.h"

#include "runtime/exec/Executor.h"
#include "runtime/io/Npy.h"
#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac run";

struct RunOptions {
  std::optional<std::string> spec, file;
  bool fromPlan = false; // `file` is a compiled .mplan
  std::string outputDir;
  codegen::CodegenOptions codegen;
  std::map<std::string, std::string> inputFiles; // input name -> .npy path
  InputShapes inputShapes;                       // for ONNX models with symbolic dims
};

/// Fills `options` from the command line; returns an error message or empty.
std::string parseRunArgs(const Args &args, RunOptions &options) {
  if (args.positional().size() > 1)
    return "give one model or plan file";
  if (!args.positional().empty())
    options.file = args.positional().front();
  options.spec = args.get("model");
  options.fromPlan = options.file && std::filesystem::path(*options.file).extension() == ".mplan";
  if (!args.get("output-dir"))
    return "missing --output-dir DIR";
  options.outputDir = *args.get("output-dir");
  if (auto seed = args.get("seed")) {
    std::optional<uint64_t> value = parseSeed(*seed);
    if (!value)
      return "--seed: '" + *seed + "' is not a non-negative integer";
    options.codegen.seed = *value;
  }
  options.codegen.function = args.get("function").value_or("");
  for (const char *option : {"seed", "function", "input-shape"})
    if (options.fromPlan && args.has(option))
      return std::string("--") + option + " applies when compiling; " + *options.file +
             " is compiled already";
  if (std::string error = parseInputShapes(args.getAll("input-shape"), options.inputShapes);
      !error.empty())
    return error;
  for (const std::string &spec : args.getAll("input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return "--input '" + spec + "' is not NAME=FILE.npy";
    if (!options.inputFiles.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second)
      return "input '" + spec.substr(0, eq) + "' is given twice";
  }
  return {};
}

/// A file name for an output: characters outside [A-Za-z0-9_.-] become '_'.
std::string fileNameFor(const std::string &name) {
  std::string out = name;
  for (char &c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-')
      c = '_';
  if (out.empty() || out == "." || out == "..")
    out = "_" + out;
  return out;
}

std::string joinNames(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

/// The function `megac run` runs: the plan's only one, else "forward" (Executor::run()).
std::string runFunction(const runtime::Executor &executor) {
  std::vector<std::string> functions = executor.functionNames();
  return functions.size() == 1 ? functions.front() : "forward";
}

/// Reads every input of the function, exactly those, each with the plan's dtype and shape.
Status setInputs(runtime::Executor &executor, const std::map<std::string, std::string> &files) {
  std::vector<std::string> names = executor.inputNames(runFunction(executor));
  for (const auto &[name, path] : files)
    if (std::find(names.begin(), names.end(), name) == names.end())
      return Status::error("unknown input '" + name +
                           "'; the model's inputs are: " + joinNames(names));
  for (const std::string &name : names) {
    auto it = files.find(name);
    if (it == files.end())
      return Status::error("missing input '" + name + "' (--input " + name + "=FILE.npy)");
    ASSIGN_OR_RETURN(HostTensor tensor, runtime::readNpy(it->second));
    ASSIGN_OR_RETURN(runtime::TensorInfo expected, executor.inputInfo(name));
    if (tensor.dtype != expected.dtype || tensor.shape != expected.shape)
      return Status::error("input '" + name + "' (" + it->second + "): expected " +
                           dtypeName(expected.dtype) + " " + shapeString(expected.shape) +
                           ", got " + dtypeName(tensor.dtype) + " " + shapeString(tensor.shape));
    RETURN_IF_ERROR(executor.setInput(name, tensor));
  }
  return Status::ok();
}

/// Writes every output as DIR/<name>.npy and prints one line per output.
Status writeOutputs(const runtime::Executor &executor, const std::string &outputDir) {
  std::filesystem::path dir = outputDir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create output directory " + outputDir + ": " + ec.message());
  std::set<std::string> written;
  for (const std::string &name : executor.outputNames(runFunction(executor))) {
    std::string fileName = fileNameFor(name) + ".npy";
    if (!written.insert(fileName).second)
      return Status::error("output '" + name + "' and an earlier one both map to " + fileName);
    ASSIGN_OR_RETURN(HostTensor tensor, executor.output(name));
    std::string path = (dir / fileName).string();
    RETURN_IF_ERROR(runtime::writeNpy(path, tensor));
    std::printf("output %s %s %s -> %s\n", name.c_str(), dtypeName(tensor.dtype),
                shapeString(tensor.shape).c_str(), path.c_str());
  }
  return Status::ok();
}

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int fail(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", kCommand, message.c_str());
  return 1;
}

} // namespace

int runCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(
      argc, argv, 2, {"model", "input", "output-dir", "seed", "function", "input-shape", "backend"},
      {"help", "allow-tf32"});
  if (args.has("help")) {
    std::puts("usage: megac run (--model SPEC | FILE.mlir | FILE.onnx | FILE.mplan)\n"
              "                 --input NAME=FILE.npy ... --output-dir DIR\n"
              "                 [--seed N] [--function NAME] [--input-shape NAME=D0xD1x...]\n"
              "                 [--backend cpu|cuda] [--allow-tf32]\n"
              "  runs one forward pass and writes every output as DIR/NAME.npy; on a GPU\n"
              "  (--backend cuda) by default when one is usable, else on the CPU.\n"
              "  A model that is not a plan yet is compiled in memory first (see megac compile).");
    return 0;
  }
  RunOptions options;
  runtime::Backend backend = runtime::Backend::cpu;
  bool allowTf32 = false;
  if (error.empty())
    error = parseRunArgs(args, options);
  if (error.empty())
    error = parseBackendOption(args, backend, allowTf32);
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }

  // The plan: from a file, or compiled here with the model's weights passed along.
  auto start = std::chrono::steady_clock::now();
  std::optional<CompiledModel> compiled;
  std::optional<runtime::LoadedPlan> loaded;
  if (options.fromPlan) {
    auto plan = runtime::loadPlanFile(*options.file);
    if (!plan.isOk())
      return fail(plan.status().message());
    loaded = std::move(plan).value();
  } else {
    compiled =
        compileModel(kCommand, options.spec, options.file, options.inputShapes, options.codegen);
    if (!compiled)
      return 1;
    auto plan = runtime::loadPlanFromBytes(compiled->plan);
    if (!plan.isOk())
      return fail(plan.status().message() + " (in the plan compiled from " + compiled->description +
                  ")");
    loaded = std::move(plan).value();
  }
  double prepareMs = millisecondsSince(start);

  runtime::ExecutorOptions executorOptions;
  executorOptions.backend = backend;
  executorOptions.allowTf32 = allowTf32;
  if (compiled && !compiled->weights.empty())
    executorOptions.weights = &compiled->weights;
  auto executor = runtime::Executor::create(*loaded, executorOptions);
  if (!executor.isOk())
    return fail(executor.status().message());
  Status status = setInputs(**executor, options.inputFiles);
  if (!status.isOk())
    return fail(status.message());

  auto runStart = std::chrono::steady_clock::now();
  status = (*executor)->run();
  if (!status.isOk())
    return fail(status.message());
  double runMs = millisecondsSince(runStart);

  status = writeOutputs(**executor, options.outputDir);
  if (!status.isOk())
    return fail(status.message());
  std::printf("arena %llu bytes; %s %.1f ms, run %.1f ms\n",
              (unsigned long long)(*executor)->arenaBytes(),
              options.fromPlan ? "plan loaded in" : "compile", prepareMs, runMs);
  return 0;
}

} // namespace megac::cli
