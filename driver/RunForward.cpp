// One forward pass's inputs and outputs as .npy files (RunForward.h).
#include "driver/RunForward.h"

#include "driver/HfWeights.h"

#include "runtime/io/Npy.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <set>

namespace megac::driver {

namespace {

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

} // namespace

std::string forwardFunction(const runtime::Executor &executor) {
  std::vector<std::string> functions = executor.functionNames();
  return functions.size() == 1 ? functions.front() : "forward";
}

Status setInputsFromFiles(runtime::Executor &executor,
                          const std::map<std::string, std::string> &files) {
  std::vector<std::string> names = executor.inputNames(forwardFunction(executor));
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

StatusOr<std::vector<WrittenOutput>> writeOutputs(const runtime::Executor &executor,
                                                  const std::string &outputDir) {
  std::filesystem::path dir = outputDir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create output directory " + outputDir + ": " + ec.message());
  std::set<std::string> written;
  std::vector<WrittenOutput> out;
  for (const std::string &name : executor.outputNames(forwardFunction(executor))) {
    std::string fileName = fileNameFor(name) + ".npy";
    if (!written.insert(fileName).second)
      return Status::error("output '" + name + "' and an earlier one both map to " + fileName);
    ASSIGN_OR_RETURN(HostTensor tensor, executor.output(name));
    std::string path = (dir / fileName).string();
    RETURN_IF_ERROR(runtime::writeNpy(path, tensor));
    out.push_back({name, path, tensor.dtype, tensor.shape});
  }
  return out;
}

StatusOr<ForwardRun> runForward(const LoadedPlan &plan, const ForwardOptions &options,
                                const std::map<std::string, std::string> &files,
                                const std::string &dir) {
  runtime::ExecutorOptions executorOptions;
  executorOptions.backend = options.backend;
  executorOptions.allowTf32 = options.allowTf32;
  if (options.weights && !options.weights->empty())
    executorOptions.weights = options.weights;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Executor> executor,
                   runtime::Executor::create(plan, executorOptions));
  if (!options.hfWeightsFile.empty()) {
    ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(options.hfWeightsFile));
    SourceShapes none;
    RETURN_IF_ERROR(loadHfWeights(hf, plan, *executor,
                                  options.sourceShapes ? *options.sourceShapes : none, {}));
  }
  RETURN_IF_ERROR(setInputsFromFiles(*executor, files));
  ForwardRun run;
  auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(executor->run());
  run.runSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSIGN_OR_RETURN(run.outputs, writeOutputs(*executor, dir));
  run.arenaBytes = executor->arenaBytes();
  return run;
}

} // namespace megac::driver
