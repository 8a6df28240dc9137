// A program's pipeline schedule (plan Program.schedule) as the schedule library's steps
// (parallel/PipelineSchedule.h): the one conversion from the FlatBuffers table, used by the plan
// validator, the executor and the pipeline runner.
#pragma once

#include "parallel/PipelineSchedule.h"
#include "runtime/plan/plan_generated.h"

#include <vector>

namespace megac::runtime {

/// The steps of `program`'s schedule, in order (empty when it has none).
inline std::vector<schedule::ScheduleStep> scheduleOf(const megac::plan::Program &program) {
  std::vector<schedule::ScheduleStep> steps;
  if (program.schedule())
    for (const megac::plan::ScheduleStep *step : *program.schedule())
      steps.push_back({step->kind() == megac::plan::StepKind::Backward
                           ? schedule::StepKind::backward
                           : schedule::StepKind::forward,
                       int64_t(step->chunk()), int64_t(step->micro_batch())});
  return steps;
}

} // namespace megac::runtime
