// What a (partitioned) plan does, per role: every parameter's sharding and per-rank bytes, the
// optimizer state per rank, and the collectives and transfers of one training step with their
// sizes. Read from the plan itself, so it describes exactly what the runtime will execute.
#pragma once

#include "runtime/plan/PlanLoader.h"

#include <cstdint>
#include <string>

namespace megac::cli {

/// Human-readable report (`megac plan --explain`).
std::string explainPlan(const runtime::LoadedPlan &plan);
/// The same numbers as JSON (`megac plan --explain --json`), for tests and tools.
std::string explainPlanJson(const runtime::LoadedPlan &plan);

} // namespace megac::cli
