// A program's pipeline schedule (plan Program.schedule) as the schedule library's steps
// (parallel/PipelineSchedule.h) and back: the one conversion between the FlatBuffers step kinds
// and the library's, used by codegen, the plan validator, the executor and the pipeline runner.
#pragma once

#include "parallel/PipelineSchedule.h"
#include "runtime/plan/plan_generated.h"

#include <optional>
#include <vector>

namespace megac::runtime {

/// The library's kind of a plan step kind; nullopt for a value outside the enum.
inline std::optional<schedule::StepKind> stepKindOf(megac::plan::StepKind kind) {
  switch (kind) {
  case megac::plan::StepKind::Forward:
    return schedule::StepKind::forward;
  case megac::plan::StepKind::Backward:
    return schedule::StepKind::backward;
  case megac::plan::StepKind::BackwardInput:
    return schedule::StepKind::backwardInput;
  case megac::plan::StepKind::BackwardWeight:
    return schedule::StepKind::backwardWeight;
  }
  return std::nullopt;
}

/// The plan's kind of a library step kind.
inline megac::plan::StepKind planStepKind(schedule::StepKind kind) {
  switch (kind) {
  case schedule::StepKind::forward:
    return megac::plan::StepKind::Forward;
  case schedule::StepKind::backward:
    return megac::plan::StepKind::Backward;
  case schedule::StepKind::backwardInput:
    return megac::plan::StepKind::BackwardInput;
  case schedule::StepKind::backwardWeight:
    return megac::plan::StepKind::BackwardWeight;
  }
  return megac::plan::StepKind::Forward;
}

/// The steps of `program`'s schedule, in order (empty when it has none). A step of a kind outside
/// the enum (the plan validator refuses it) reads as a forward.
inline std::vector<schedule::ScheduleStep> scheduleOf(const megac::plan::Program &program) {
  std::vector<schedule::ScheduleStep> steps;
  if (program.schedule())
    for (const megac::plan::ScheduleStep *step : *program.schedule())
      steps.push_back({stepKindOf(step->kind()).value_or(schedule::StepKind::forward),
                       int64_t(step->chunk()), int64_t(step->micro_batch())});
  return steps;
}

} // namespace megac::runtime
