// The pipeline schedule generator, its per-stage checker and its discrete-event simulator.
#include "parallel/PipelineSchedule.h"

#include <algorithm>
#include <sstream>

namespace megac::schedule {

const char *scheduleName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::gpipe:
    return "gpipe";
  case ScheduleKind::oneFOneB:
    return "1f1b";
  case ScheduleKind::interleaved:
    return "interleaved-1f1b";
  }
  return "unknown";
}

std::optional<ScheduleKind> parseScheduleKind(std::string_view name) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::oneFOneB, ScheduleKind::interleaved})
    if (name == scheduleName(kind))
      return kind;
  return std::nullopt;
}

ScheduleKind resolveSchedule(ScheduleKind requested, int64_t virtualStages) {
  return requested == ScheduleKind::oneFOneB && virtualStages > 1 ? ScheduleKind::interleaved
                                                                  : requested;
}

std::string stepLabel(const ScheduleStep &step) {
  return (step.kind == StepKind::forward ? "F" : "B") + std::to_string(step.microBatch) + " c" +
         std::to_string(step.chunk);
}

std::string describeStep(const ScheduleStep &step) {
  return std::string(step.kind == StepKind::forward ? "forward" : "backward") + " of chunk " +
         std::to_string(step.chunk) + ", micro-batch " + std::to_string(step.microBatch);
}

namespace {

bool fail(std::string *error, std::string message) {
  if (error)
    *error = std::move(message);
  return false;
}

bool checkShape(ScheduleKind kind, const PipelineShape &shape, std::string *error) {
  std::string name = std::string("pipeline schedule '") + scheduleName(kind) + "'";
  if (shape.stages <= 0)
    return fail(error, name + ": stages must be positive, got " + std::to_string(shape.stages));
  if (shape.virtualStages <= 0)
    return fail(error, name + ": virtual stages must be positive, got " +
                           std::to_string(shape.virtualStages));
  if (shape.microBatches <= 0)
    return fail(error, name + ": micro-batches must be positive, got " +
                           std::to_string(shape.microBatches));
  if (kind != ScheduleKind::interleaved && shape.virtualStages != 1)
    return fail(error, name + " runs one chunk per stage: virtual stages must be 1, got " +
                           std::to_string(shape.virtualStages) + " (use interleaved-1f1b)");
  if (kind == ScheduleKind::interleaved && shape.microBatches % shape.stages != 0)
    return fail(error, name + " needs micro-batches divisible by stages: " +
                           std::to_string(shape.microBatches) + " micro-batches, " +
                           std::to_string(shape.stages) + " stages");
  return true;
}

std::vector<ScheduleStep> gpipeStage(int64_t stage, int64_t microBatches) {
  std::vector<ScheduleStep> steps;
  for (int64_t m = 0; m < microBatches; ++m)
    steps.push_back({StepKind::forward, stage, m});
  for (int64_t m = 0; m < microBatches; ++m)
    steps.push_back({StepKind::backward, stage, m});
  return steps;
}

// Megatron-LM's forward_backward_pipelining_without_interleaving: the first stages run ahead by
// (stages - stage - 1) forwards, so at most `stages` micro-batches are in flight on stage 0.
std::vector<ScheduleStep> oneFOneBStage(int64_t stage, int64_t stages, int64_t microBatches) {
  int64_t warmup = std::min(stages - stage - 1, microBatches);
  std::vector<ScheduleStep> steps;
  for (int64_t m = 0; m < warmup; ++m)
    steps.push_back({StepKind::forward, stage, m});
  for (int64_t i = 0; i < microBatches - warmup; ++i) {
    steps.push_back({StepKind::forward, stage, warmup + i});
    steps.push_back({StepKind::backward, stage, i});
  }
  for (int64_t m = microBatches - warmup; m < microBatches; ++m)
    steps.push_back({StepKind::backward, stage, m});
  return steps;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the stage's m*v (chunk,
// micro-batch) pairs, "virtual micro-batches" k, run in groups of `stages` micro-batches per
// model chunk (get_model_chunk_id, get_microbatch_id_in_model_chunk); backwards visit the
// chunks in reverse. Warm-up: (p - s - 1)*2 + (v - 1)*p forwards, then 1F1B pairs.
std::vector<ScheduleStep> interleavedStage(int64_t stage, const PipelineShape &shape) {
  const int64_t p = shape.stages, v = shape.virtualStages, total = shape.microBatches * v;
  auto pair = [&](int64_t k, StepKind kind) {
    int64_t group = k / (p * v), inGroup = k % (p * v);
    int64_t modelChunk = inGroup / p;
    if (kind == StepKind::backward)
      modelChunk = v - 1 - modelChunk;
    return ScheduleStep{kind, modelChunk * p + stage, group * p + k % p};
  };
  int64_t warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  std::vector<ScheduleStep> steps;
  for (int64_t k = 0; k < warmup; ++k)
    steps.push_back(pair(k, StepKind::forward));
  for (int64_t k = 0; k < total - warmup; ++k) {
    steps.push_back(pair(warmup + k, StepKind::forward));
    steps.push_back(pair(k, StepKind::backward));
  }
  for (int64_t k = total - warmup; k < total; ++k)
    steps.push_back(pair(k, StepKind::backward));
  return steps;
}

} // namespace

std::optional<std::vector<std::vector<ScheduleStep>>>
buildSchedule(ScheduleKind kind, const PipelineShape &shape, std::string *error) {
  if (!checkShape(kind, shape, error))
    return std::nullopt;
  std::vector<std::vector<ScheduleStep>> stages;
  for (int64_t s = 0; s < shape.stages; ++s) {
    switch (kind) {
    case ScheduleKind::gpipe:
      stages.push_back(gpipeStage(s, shape.microBatches));
      break;
    case ScheduleKind::oneFOneB:
      stages.push_back(oneFOneBStage(s, shape.stages, shape.microBatches));
      break;
    case ScheduleKind::interleaved:
      stages.push_back(interleavedStage(s, shape));
      break;
    }
  }
  return stages;
}

bool checkStageSchedule(const PipelineShape &shape, int64_t stage,
                        std::span<const ScheduleStep> steps, std::string *error) {
  if (shape.stages <= 0 || shape.virtualStages <= 0 || shape.microBatches <= 0)
    return fail(error, "pipeline shape must be positive: " + std::to_string(shape.stages) +
                           " stages, " + std::to_string(shape.virtualStages) + " virtual stages, " +
                           std::to_string(shape.microBatches) + " micro-batches");
  if (stage < 0 || stage >= shape.stages)
    return fail(error, "stage " + std::to_string(stage) + " is outside 0.." +
                           std::to_string(shape.stages - 1));
  const int64_t chunks = shape.stages * shape.virtualStages;
  const std::string where = "stage " + std::to_string(stage) + " schedule, ";
  // seen[local chunk * microBatches + m]: bit 1 forward ran, bit 2 backward ran.
  std::vector<uint8_t> seen(shape.virtualStages * shape.microBatches, 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const ScheduleStep &step = steps[i];
    // The message's prefix, built only when a check fails (the planner runs this per candidate).
    auto at = [&] {
      return where + "step " + std::to_string(i) + " (" + describeStep(step) + "): ";
    };
    if (step.chunk < 0 || step.chunk >= chunks)
      return fail(error, at() + "chunk must be in 0.." + std::to_string(chunks - 1));
    if (step.chunk % shape.stages != stage)
      return fail(error, at() + "chunk " + std::to_string(step.chunk) + " runs on stage " +
                             std::to_string(step.chunk % shape.stages));
    if (step.microBatch < 0 || step.microBatch >= shape.microBatches)
      return fail(error,
                  at() + "micro-batch must be in 0.." + std::to_string(shape.microBatches - 1));
    uint8_t &bits = seen[(step.chunk / shape.stages) * shape.microBatches + step.microBatch];
    uint8_t bit = step.kind == StepKind::forward ? 1 : 2;
    if (bits & bit)
      return fail(error, at() + "runs twice");
    if (step.kind == StepKind::backward && !(bits & 1))
      return fail(error, at() + "runs before its forward");
    bits |= bit;
  }
  for (int64_t j = 0; j < shape.virtualStages; ++j)
    for (int64_t m = 0; m < shape.microBatches; ++m) {
      uint8_t bits = seen[j * shape.microBatches + m];
      if (bits != 3)
        return fail(error, where + "never runs " +
                               describeStep({bits & 1 ? StepKind::backward : StepKind::forward,
                                             j * shape.stages + stage, m}));
    }
  return true;
}

ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    double forwardCost, double backwardCost) {
  ScheduleSimulation sim;
  if (static_cast<int64_t>(steps.size()) != shape.stages) {
    sim.error = "the schedule has " + std::to_string(steps.size()) + " stages, the shape " +
                std::to_string(shape.stages);
    return sim;
  }
  for (int64_t s = 0; s < shape.stages; ++s)
    if (!checkStageSchedule(shape, s, steps[s], &sim.error))
      return sim;

  const int64_t p = shape.stages, chunks = p * shape.virtualStages, mbs = shape.microBatches;
  // Finish times per (chunk, micro-batch); negative: not run yet.
  std::vector<double> forwardDone(chunks * mbs, -1), backwardDone(chunks * mbs, -1);
  auto at = [&](int64_t c, int64_t m) { return c * mbs + m; };
  // When the step's input is available (its producer's finish time), or negative if not yet.
  auto inputReady = [&](const ScheduleStep &step) -> double {
    if (step.kind == StepKind::forward)
      return step.chunk == 0 ? 0.0 : forwardDone[at(step.chunk - 1, step.microBatch)];
    double own = forwardDone[at(step.chunk, step.microBatch)];
    if (step.chunk == chunks - 1 || own < 0)
      return own;
    return backwardDone[at(step.chunk + 1, step.microBatch)];
  };

  std::vector<size_t> next(p, 0);
  std::vector<double> stageFree(p, 0);
  std::vector<int64_t> inFlight(p, 0);
  sim.stagePeakInFlight.assign(p, 0);
  double busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      for (; next[s] < steps[s].size(); ++next[s]) {
        const ScheduleStep &step = steps[s][next[s]];
        double ready = inputReady(step);
        if (ready < 0)
          break;
        bool forward = step.kind == StepKind::forward;
        double cost = forward ? forwardCost : backwardCost;
        stageFree[s] = std::max(stageFree[s], ready) + cost;
        busy += cost;
        (forward ? forwardDone : backwardDone)[at(step.chunk, step.microBatch)] = stageFree[s];
        inFlight[s] += forward ? 1 : -1;
        sim.stagePeakInFlight[s] = std::max(sim.stagePeakInFlight[s], inFlight[s]);
        progress = true;
      }
    }
  }
  std::ostringstream stuck;
  for (int64_t s = 0; s < p; ++s)
    if (next[s] < steps[s].size())
      stuck << (stuck.tellp() ? "; " : "") << "stage " << s << " waits at step " << next[s] << " ("
            << describeStep(steps[s][next[s]]) << ")";
  if (stuck.tellp()) {
    sim.error = "the schedule deadlocks: " + stuck.str();
    return sim;
  }
  sim.makespan = *std::max_element(stageFree.begin(), stageFree.end());
  sim.peakInFlight = *std::max_element(sim.stagePeakInFlight.begin(), sim.stagePeakInFlight.end());
  double idle = p * sim.makespan - busy;
  sim.bubbleFraction = sim.makespan > 0 ? idle / (p * sim.makespan) : 0;
  sim.bubbleRatio = busy > 0 ? idle / busy : 0;
  return sim;
}

} // namespace megac::schedule
