// What a (partitioned) plan does, per role: every parameter's sharding and per-rank bytes, the
// optimizer state per rank, and the collectives and transfers of one training step with their
// sizes. Read from the plan itself, so it describes exactly what the runtime will execute.
#pragma once

#include "runtime/plan/PlanLoader.h"

#include <cstdint>
#include <functional>
#include <string>

namespace megac::driver {

/// Predicted seconds of one communication instruction: its opcode name ("AllReduce", "Send",
/// ...), the group's size and rank stride (Megatron's order: tp 1, dp tp, pp tp·dp) and the bytes
/// of its input (the `megac plan --cluster --explain` cost model).
using CommPredictor =
    std::function<double(const std::string &op, int64_t groupSize, int64_t stride, uint64_t bytes)>;

/// Human-readable report (`megac plan --explain`); with `predict`, each communication line
/// also gives its predicted time.
std::string explainPlan(const runtime::LoadedPlan &plan, const CommPredictor &predict = {});
/// The same numbers as JSON (`megac plan --explain --json`), for tests and tools.
std::string explainPlanJson(const runtime::LoadedPlan &plan);

} // namespace megac::driver
