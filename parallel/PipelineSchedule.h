// The pipeline schedule library (docs/pipeline.md): the one step type, the one parser of schedule
// names, and the one generator of the ordered (forward|backward, chunk, micro-batch) steps of
// each stage. Codegen writes them into the plan (Program.schedule), the plan validator checks
// them, the runtime executes them as stored, and the planner simulates them, so the predicted and
// the executed schedules cannot diverge. MLIR-free; depends on nothing of megac.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megac::schedule {

enum class StepKind { forward, backward };

struct ScheduleStep {
  StepKind kind = StepKind::forward;
  int64_t chunk = 0; // global model chunk; runs on stage chunk % stages
  int64_t microBatch = 0;
  bool operator==(const ScheduleStep &) const = default;
};

/// gpipe: all forwards, then all backwards. oneFOneB: warm-up forwards, steady 1F1B, cool-down
/// backwards (Megatron's non-interleaved schedule). interleaved: Megatron's interleaved 1F1B
/// over virtualStages chunks per stage (needs microBatches % stages == 0).
enum class ScheduleKind { gpipe, oneFOneB, interleaved };

/// "gpipe", "1f1b", "interleaved-1f1b".
const char *scheduleName(ScheduleKind kind);
/// The kind named by scheduleName (the plan's Pipeline.schedule, `megac train --schedule`);
/// nullopt for any other name.
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);
/// The schedule a layout runs: 1F1B over several chunks per stage (virtualStages > 1) is
/// Megatron's interleaved 1F1B; every other request runs as asked.
ScheduleKind resolveSchedule(ScheduleKind requested, int64_t virtualStages);

struct PipelineShape {
  int64_t stages = 1;        // pp
  int64_t virtualStages = 1; // vpp: chunks per stage
  int64_t microBatches = 1;
};

/// The steps of every stage (index = stage). On a shape the kind cannot run (interleaved with
/// microBatches % stages != 0, a non-positive count, virtualStages > 1 for gpipe/1f1b), returns
/// nullopt and sets `error` to a one-line message naming the value and what it must satisfy.
std::optional<std::vector<std::vector<ScheduleStep>>>
buildSchedule(ScheduleKind kind, const PipelineShape &shape, std::string *error);

/// Checks one stage's steps (from a plan, or built): every chunk c of the stage (c % stages ==
/// stage) runs forward and backward exactly once per micro-batch, the forward first. Returns
/// false with a one-line `error` naming the first offending step.
bool checkStageSchedule(const PipelineShape &shape, int64_t stage,
                        std::span<const ScheduleStep> steps, std::string *error);

/// Simulates the schedule with unit forward time `forwardCost` and backward time `backwardCost`
/// per chunk (sends take no time; a step waits for its input from the neighbouring chunk).
/// Bubble measures: with idle = stages * makespan - busy (busy: every step's cost),
/// bubbleFraction = idle / (stages * makespan), which is (p-1)/(m+p-1) for GPipe and 1F1B, and
/// bubbleRatio = idle / busy, Narayanan et al.'s "bubble time fraction" (p-1)/m (REFERENCE.md);
/// interleaved: (p-1)/(v*m).
struct ScheduleSimulation {
  double makespan = 0;       // time of one optimizer step's pipeline part
  double bubbleFraction = 0; // idle time / (stages * makespan)
  double bubbleRatio = 0;    // idle time / busy time
  int64_t peakInFlight = 0;  // max micro-batches whose forward ran and backward did not, per stage
  /// peakInFlight of each stage. A (chunk, micro-batch) pair counts once: with v chunks per
  /// stage each holds about 1/v of a micro-batch's activations on that stage.
  std::vector<int64_t> stagePeakInFlight;
  /// Non-empty when the steps are malformed (checkStageSchedule's message) or cannot finish
  /// (a deadlock: names what every stuck stage waits for); the numbers are then meaningless.
  std::string error;
};
ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    double forwardCost, double backwardCost);

/// "forward of chunk 3, micro-batch 5": how errors name a step.
std::string describeStep(const ScheduleStep &step);
/// "F3 c1": forward of micro-batch 3 in chunk 1 ("B" for backward), how traces and timelines
/// label a step (`megac train --trace`, `megac plan --timeline`).
std::string stepLabel(const ScheduleStep &step);

} // namespace megac::schedule
