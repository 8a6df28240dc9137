// One forward pass of a plan (`megac run`): the function it runs, its inputs read from .npy
// files (each checked against the plan's dtype and shape), its outputs written as .npy files.
#pragma once

#include "driver/Backend.h"
#include "driver/PlanFile.h"
#include "driver/SourceShapes.h"

#include "runtime/exec/Executor.h"
#include "support/Status.h"

#include <map>
#include <string>
#include <vector>

namespace megac::driver {

/// The function a forward pass runs: the plan's only one, else "forward" (Executor::run()).
std::string forwardFunction(const runtime::Executor &executor);

/// Sets every input of the forward function from `files` (input name -> .npy path), exactly
/// those, each with the plan's dtype and shape.
Status setInputsFromFiles(runtime::Executor &executor,
                          const std::map<std::string, std::string> &files);

struct WrittenOutput {
  std::string name, path;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

/// Writes every output of the forward function as DIR/<name>.npy (characters outside
/// [A-Za-z0-9_.-] become '_'), creating DIR.
StatusOr<std::vector<WrittenOutput>> writeOutputs(const runtime::Executor &executor,
                                                  const std::string &dir);

/// How `megac run` runs a plan.
struct ForwardOptions {
  Backend backend = Backend::cpu;
  bool allowTf32 = false;
  /// The model's weights when it came with them; null or empty: the plan's (runtime/init).
  const TensorMap *weights = nullptr;
  /// An hf: model's weights file and the model's source shapes (CompiledModel): the parameters
  /// are read from it (driver/HfWeights.h); empty: none.
  std::string hfWeightsFile;
  const SourceShapes *sourceShapes = nullptr;
};

/// What one forward pass did.
struct ForwardRun {
  std::vector<WrittenOutput> outputs;
  uint64_t arenaBytes = 0;
  double runSeconds = 0; // the pass alone, without creating the executor or reading inputs
};

/// An executor of `plan`, its inputs set from `files` (setInputsFromFiles), one forward pass, its
/// outputs written in `dir` (writeOutputs).
StatusOr<ForwardRun> runForward(const LoadedPlan &plan, const ForwardOptions &options,
                                const std::map<std::string, std::string> &files,
                                const std::string &dir);

} // namespace megac::driver
