// Plans and weights as files (PlanFile.h).
#include "driver/PlanFile.h"

#include "codegen/MemoryPlanner.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanSeal.h"
#include "runtime/plan/plan_generated.h"
#include "support/Files.h"

namespace megac::driver {

Status writePlanFile(const std::string &path, std::span<const uint8_t> plan) {
  auto seal = runtime::planSealHeader(plan);
  std::span<const uint8_t> pieces[] = {seal, plan};
  return writeFileAtomically(path, pieces);
}

StatusOr<LoadedPlan> loadPlanFile(const std::string &path) { return runtime::loadPlanFile(path); }

StatusOr<LoadedPlan> loadCompiledPlan(const std::vector<uint8_t> &plan,
                                      const std::string &description) {
  StatusOr<LoadedPlan> loaded = runtime::loadPlanFromBytes(plan);
  if (!loaded.isOk())
    return Status::error(loaded.status().message() + " (in the plan compiled from " + description +
                         ")");
  return loaded;
}

Status writeWeightsFile(const std::string &path, const TensorMap &weights,
                        const std::string &producer) {
  return runtime::writeSafetensors(path, weights, {{"producer", producer}});
}

PlanSummary summarizePlan(const std::vector<uint8_t> &plan) {
  const plan::Program *program = plan::GetPlan(plan.data())->programs()->Get(0);
  PlanSummary s;
  for (const plan::Buffer *buffer : *program->buffers())
    s.unplannedBytes += (buffer->bytes() + codegen::kArenaAlignment - 1) /
                        codegen::kArenaAlignment * codegen::kArenaAlignment;
  for (const plan::Function *function : *program->functions())
    s.instructions += function->instructions() ? function->instructions()->size() : 0;
  s.buffers = program->buffers()->size();
  s.parameters = program->parameters()->size();
  s.arenaBytes = program->arena_bytes();
  return s;
}

} // namespace megac::driver
