// Plans and weights as files, for the commands that write or run them (`megac compile`, `megac
// plan -o`, `megac run FILE.mplan`): a plan written sealed (runtime/plan/PlanSeal.h) and
// atomically, loaded back verified, summarized; a model's weights written as safetensors.
#pragma once

#include "runtime/plan/PlanLoader.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace megac::driver {

// The runtime's verified plan, re-exported (as Backend.h does).
using runtime::LoadedPlan;

/// Writes `plan` to `path` behind its seal, atomically.
Status writePlanFile(const std::string &path, std::span<const uint8_t> plan);

/// The plan file at `path`, verified.
StatusOr<LoadedPlan> loadPlanFile(const std::string &path);

/// A plan compiled from `description` (a spec or file name), verified; errors say where it came
/// from.
StatusOr<LoadedPlan> loadCompiledPlan(const std::vector<uint8_t> &plan,
                                      const std::string &description);

/// Writes `weights` as safetensors at `path`, with the metadata producer=`producer`.
Status writeWeightsFile(const std::string &path, const TensorMap &weights,
                        const std::string &producer);

/// A one-rank plan in numbers (`megac compile`'s summary).
struct PlanSummary {
  uint64_t instructions = 0, buffers = 0, parameters = 0;
  uint64_t arenaBytes = 0;
  uint64_t unplannedBytes = 0; // every buffer in its own aligned slot: the arena without reuse
};

/// The first program of `plan` (unverified bytes from compileForward) summarized.
PlanSummary summarizePlan(const std::vector<uint8_t> &plan);

} // namespace megac::driver
