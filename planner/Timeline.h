// The timed pipeline schedule: when each (forward|backward, chunk, micro-batch) step of the one
// schedule library (parallel/PipelineSchedule.h) runs on its stage, and two renderings of it, an
// SVG a person reads (`megac plan --timeline`) and Chrome trace-event JSON that opens in Perfetto
// (`megac plan --trace`, the same format as `megac train --trace`). MLIR-free.
#pragma once

#include "parallel/PipelineSchedule.h"

#include <cstdint>
#include <string>
#include <vector>

namespace megac::planner {

/// The schedule library's names (parallel/PipelineSchedule.h), as the planner simulates them.
using schedule::PipelineShape;
using schedule::ScheduleKind;
using schedule::ScheduleSimulation;
using schedule::ScheduleStep;
using schedule::StepKind;

/// How long the steps take, in seconds.
struct StepDurations {
  /// Per global chunk (chunks = stages * virtual stages entries), or one entry for every chunk.
  std::vector<double> forward{1.0};
  std::vector<double> backward{2.0};
  /// From a step's end until its output (activations, or their gradient) is usable by the
  /// neighbouring chunk on another stage; transfers between chunks of one stage are free.
  double sendLatency = 0;
  /// Per global chunk, or one entry for every chunk: the weight-gradient part W of `backward`
  /// (0 <= W <= backward). Split schedules run B = backward - W and W as two steps; the others
  /// run the whole backward.
  std::vector<double> weight{0.0};
};

/// One step at the time it runs (seconds from the start of the optimizer step; inputReady =
/// inputSent + sendLatency for an input from another stage).
using TimedStep = schedule::SimulatedStep;

/// simulateSchedule's run (parallel/PipelineSchedule.h, the one simulator) with per-chunk
/// durations and send latency, keeping every step's times.
struct Timeline {
  std::string name; // the schedule's (scheduleName), shown in the title
  PipelineShape shape;
  std::vector<TimedStep> steps; // per stage, in schedule order; stages in order
  double makespan = 0;
  double bubbleFraction = 0; // idle / (stages * makespan), as ScheduleSimulation's
  /// Non-empty when the schedule is malformed or deadlocks (simulateSchedule's message), or the
  /// durations do not fit the shape; the rest is then meaningless.
  std::string error;
};

/// Times `steps` (index = stage, as buildSchedule returns them) under `durations`.
Timeline simulateTimeline(const PipelineShape &shape,
                          const std::vector<std::vector<ScheduleStep>> &steps,
                          const StepDurations &durations, std::string name = "");

/// buildSchedule and simulateTimeline in one; `error` set (and the steps empty) when the kind
/// cannot run the shape.
Timeline scheduleTimeline(ScheduleKind kind, const PipelineShape &shape,
                          const StepDurations &durations);

/// A standalone SVG: one row per stage, a block per step labelled with its micro-batch
/// (forwards blue, backwards or input-gradient backwards orange, weight-gradient backwards green,
/// each chunk of a stage a different shade), idle time as
/// gaps, cross-stage sends as thin lines from the producer's end to the consumer's row, a time
/// axis, a legend and a title with the schedule's name, shape and bubble fraction. `subtitle`
/// (e.g. the layout) is printed under the title when non-empty. Needs an error-free timeline.
std::string timelineSvg(const Timeline &timeline, const std::string &subtitle = "");

/// Chrome trace-event JSON {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
/// with the lanes of `megac train --trace` (runtime/exec/Trace.h): per stage a process (pid =
/// stage, named "stage s"), its steps as complete ("X") events on thread 2 ("pipeline") named by
/// schedule::stepLabel with args kind/chunk/micro_batch, and, when sendLatency > 0, each
/// cross-stage transfer on the receiving stage's thread 1 ("communication"); ts and dur in
/// microseconds. otherData holds the schedule, shape, makespan_s and bubble_fraction.
std::string chromeTrace(const Timeline &timeline);

} // namespace megac::planner
