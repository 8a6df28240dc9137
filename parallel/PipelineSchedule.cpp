// The pipeline schedule generator, its per-stage checker and its discrete-event simulator.
#include "parallel/PipelineSchedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  case ScheduleKind::zbH1:
    return "zb-h1";
  case ScheduleKind::zbH2:
    return "zb-h2";
  case ScheduleKind::zbv:
    return "zbv";
  }
  return "unknown";
}

std::optional<ScheduleKind> parseScheduleKind(std::string_view name) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::oneFOneB, ScheduleKind::interleaved,
                            ScheduleKind::zbH1, ScheduleKind::zbH2, ScheduleKind::zbv})
    if (name == scheduleName(kind))
      return kind;
  return std::nullopt;
}

bool splitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::zbH1 || kind == ScheduleKind::zbH2 || kind == ScheduleKind::zbv;
}

std::string stepFunction(const ScheduleStep &step) {
  const char *base = "forward.c";
  switch (step.kind) {
  case StepKind::forward:
    break;
  case StepKind::backward:
    base = "backward.c";
    break;
  case StepKind::backwardInput:
    base = "backward_input.c";
    break;
  case StepKind::backwardWeight:
    base = "backward_weight.c";
    break;
  }
  return base + std::to_string(step.chunk);
}

ScheduleKind resolveSchedule(ScheduleKind requested, int64_t virtualStages) {
  return requested == ScheduleKind::oneFOneB && virtualStages > 1 ? ScheduleKind::interleaved
                                                                  : requested;
}

ChunkPlacement placementOf(ScheduleKind kind) {
  return kind == ScheduleKind::zbv ? ChunkPlacement::vee : ChunkPlacement::loop;
}

int64_t stageOfChunk(const PipelineShape &shape, int64_t chunk) {
  if (shape.placement == ChunkPlacement::vee && chunk >= shape.stages)
    return 2 * shape.stages - 1 - chunk;
  return chunk % shape.stages;
}

std::string stepLabel(const ScheduleStep &step) {
  const char *letter = step.kind == StepKind::forward          ? "F"
                       : step.kind == StepKind::backwardWeight ? "W"
                                                               : "B";
  return letter + std::to_string(step.microBatch) + " c" + std::to_string(step.chunk);
}

std::string describeStep(const ScheduleStep &step) {
  const char *kind = "forward";
  switch (step.kind) {
  case StepKind::forward:
    break;
  case StepKind::backward:
    kind = "backward";
    break;
  case StepKind::backwardInput:
    kind = "input-gradient backward";
    break;
  case StepKind::backwardWeight:
    kind = "weight-gradient backward";
    break;
  }
  return std::string(kind) + " of chunk " + std::to_string(step.chunk) + ", micro-batch " +
         std::to_string(step.microBatch);
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
  if (kind == ScheduleKind::zbv && shape.virtualStages != 2)
    return fail(error, name +
                           " runs two chunks per stage in V order: virtual stages must be 2, "
                           "got " +
                           std::to_string(shape.virtualStages));
  if (kind != ScheduleKind::interleaved && kind != ScheduleKind::zbv && shape.virtualStages != 1)
    return fail(error, name + " runs one chunk per stage: virtual stages must be 1, got " +
                           std::to_string(shape.virtualStages) + " (use interleaved-1f1b)");
  if (kind == ScheduleKind::interleaved && shape.microBatches % shape.stages != 0)
    return fail(error, name + " needs micro-batches divisible by stages: " +
                           std::to_string(shape.microBatches) + " micro-batches, " +
                           std::to_string(shape.stages) + " stages");
  if (splitsBackward(kind) && shape.microBatches < shape.stages)
    return fail(error, name + " needs at least as many micro-batches as stages (m >= p): " +
                           std::to_string(shape.microBatches) + " micro-batches, " +
                           std::to_string(shape.stages) + " stages");
  if (shape.placement != placementOf(kind))
    return fail(error, name + (kind == ScheduleKind::zbv
                                   ? " places chunks in V order: the shape's placement must be vee"
                                   : " places chunk c on stage c % stages: the shape's placement "
                                     "must be loop"));
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

// ZB-H1 (Qi et al. 2024, their handcrafted schedule): 1F1B's warm-up of p - s - 1 forwards, then
// s forward/input-gradient pairs whose weight gradients wait, then F B W triples, a B W cool-down,
// and the s delayed W's last, filling the cool-down bubble. At most p micro-batches between a
// forward and its W on every stage (1F1B's p - s on stage s).
std::vector<ScheduleStep> zbH1Stage(int64_t stage, int64_t stages, int64_t microBatches) {
  std::vector<ScheduleStep> steps;
  int64_t f = 0, b = 0, w = 0;
  auto run = [&](StepKind kind, int64_t &next) { steps.push_back({kind, stage, next++}); };
  for (int64_t i = 0; i < stages - stage - 1; ++i)
    run(StepKind::forward, f);
  for (int64_t i = 0; i < stage; ++i) {
    run(StepKind::forward, f);
    run(StepKind::backwardInput, b);
  }
  for (int64_t i = 0; i < microBatches - stages + 1; ++i) {
    run(StepKind::forward, f);
    run(StepKind::backwardInput, b);
    run(StepKind::backwardWeight, w);
  }
  for (int64_t i = 0; i < stages - stage - 1; ++i) {
    run(StepKind::backwardInput, b);
    run(StepKind::backwardWeight, w);
  }
  for (int64_t i = 0; i < stage; ++i)
    run(StepKind::backwardWeight, w);
  return steps;
}

// ZB-H2: the order a list scheduler gives when F, B and W each take one time unit (the paper's
// setting): at every unit each stage runs its next input-gradient backward if its input is there,
// else its next forward if that has arrived and fewer than 2p - 1 micro-batches await their W,
// else a W, keeping the last 2s + 1 W's of stage s for after its last B. Stage s then warms up
// with 2(p - s) - 1 forwards and, for m >= 2p - 1, never idles between its first and last step:
// the parallelogram of Qi et al.'s ZB-H2. nullopt if the scheduler stalls (a unit in which no
// stage can run anything; none does for p 1..16, m p..4p, checked while writing this, and the
// unit tests sweep p 1..8, m p..3p).
std::optional<std::vector<std::vector<ScheduleStep>>> zbH2Stages(int64_t p, int64_t m) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> forwardEnd(p, std::vector<int64_t>(m, kNever));
  std::vector<std::vector<int64_t>> backwardEnd(p, std::vector<int64_t>(m, kNever));
  std::vector<int64_t> f(p, 0), b(p, 0), w(p, 0);
  std::vector<std::vector<ScheduleStep>> steps(p);
  for (int64_t t = 0, left = 3 * p * m; left > 0; ++t) {
    bool ran = false;
    // A step chosen at unit t ends at t + 1, so choosing stage by stage sees the same state as
    // choosing all at once.
    for (int64_t s = 0; s < p; ++s) {
      bool backwardReady = b[s] < f[s] && (s == p - 1 || backwardEnd[s + 1][b[s]] <= t);
      bool forwardReady =
          f[s] < m && f[s] - w[s] < 2 * p - 1 && (s == 0 || forwardEnd[s - 1][f[s]] <= t);
      bool weightReady = w[s] < b[s] && (w[s] < m - (2 * s + 1) || b[s] == m);
      if (backwardReady) {
        backwardEnd[s][b[s]] = t + 1;
        steps[s].push_back({StepKind::backwardInput, s, b[s]++});
      } else if (forwardReady) {
        forwardEnd[s][f[s]] = t + 1;
        steps[s].push_back({StepKind::forward, s, f[s]++});
      } else if (weightReady) {
        steps[s].push_back({StepKind::backwardWeight, s, w[s]++});
      } else {
        continue;
      }
      ran = true;
      --left;
    }
    if (!ran)
      return std::nullopt;
  }
  return steps;
}

// ZBV (Qi et al. 2024, section 6; the order of torch.distributed.pipelining's
// ScheduleZBVZeroBubble): stage s holds chunk s (going down) and chunk 2p - 1 - s (coming back).
// Warm-up: 2(p - s) - 1 forwards of the first chunk, s alternating forwards of both, then p - s
// F B W triples of the second; steady: F B W of the first chunk, then of the second; cool-down:
// s pairs of B's, p - s B W pairs of the first chunk, then the delayed W's. Built for
// max(m, 2p - 1) micro-batches (the steady state needs 2p - 1), then the steps of micro-batches
// >= m dropped: no step depends on another micro-batch, so the rest still cannot deadlock.
std::vector<ScheduleStep> zbvStage(int64_t stage, int64_t p, int64_t m) {
  const int64_t n = std::max(2 * p - 1, m);
  struct Chunk {
    int64_t id, f = 0, b = 0, w = 0;
  } down{stage}, up{2 * p - 1 - stage};
  std::vector<ScheduleStep> steps;
  auto run = [&](StepKind kind, Chunk &c) {
    int64_t &next = kind == StepKind::forward ? c.f : kind == StepKind::backwardInput ? c.b : c.w;
    steps.push_back({kind, c.id, next++});
  };
  auto fbw = [&](Chunk &c) {
    run(StepKind::backwardInput, c);
    run(StepKind::backwardWeight, c);
  };
  for (int64_t i = 0; i < 2 * (p - stage) - 1; ++i)
    run(StepKind::forward, down);
  for (int64_t i = 0; i < stage; ++i) {
    run(StepKind::forward, up);
    run(StepKind::forward, down);
  }
  for (int64_t i = 0; i < p - stage; ++i) {
    run(StepKind::forward, up);
    fbw(up);
  }
  while (up.f < down.f || down.f < n) {
    if (down.f < n)
      run(StepKind::forward, down);
    fbw(down);
    run(StepKind::forward, up);
    fbw(up);
  }
  for (int64_t i = 0; i < stage; ++i) {
    run(StepKind::backwardInput, down);
    run(StepKind::backwardInput, up);
  }
  for (int64_t i = 0; i < p - stage; ++i)
    fbw(down);
  while (up.w < up.b)
    run(StepKind::backwardWeight, up);
  while (down.w < down.b)
    run(StepKind::backwardWeight, down);
  std::erase_if(steps, [&](const ScheduleStep &step) { return step.microBatch >= m; });
  return steps;
}

} // namespace

std::optional<std::vector<std::vector<ScheduleStep>>>
buildSchedule(ScheduleKind kind, const PipelineShape &shape, std::string *error) {
  if (!checkShape(kind, shape, error))
    return std::nullopt;
  if (kind == ScheduleKind::zbH2) {
    auto stages = zbH2Stages(shape.stages, shape.microBatches);
    if (!stages)
      fail(error, "pipeline schedule 'zb-h2': the list scheduler stalled at " +
                      std::to_string(shape.stages) + " stages, " +
                      std::to_string(shape.microBatches) + " micro-batches (a bug: report it)");
    return stages;
  }
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
    case ScheduleKind::zbH1:
      stages.push_back(zbH1Stage(s, shape.stages, shape.microBatches));
      break;
    case ScheduleKind::zbH2: // built above
      break;
    case ScheduleKind::zbv:
      stages.push_back(zbvStage(s, shape.stages, shape.microBatches));
      break;
    }
  }
  return stages;
}

namespace {

// Bits of what ran per (chunk, micro-batch) in checkStageSchedule.
constexpr uint8_t kForward = 1, kBackward = 2, kInput = 4, kWeight = 8;

uint8_t stepBit(StepKind kind) {
  switch (kind) {
  case StepKind::forward:
    return kForward;
  case StepKind::backward:
    return kBackward;
  case StepKind::backwardInput:
    return kInput;
  case StepKind::backwardWeight:
    return kWeight;
  }
  return 0;
}

// Why `step` cannot run after the steps in `bits`; empty when it can.
std::string outOfOrder(StepKind kind, uint8_t bits) {
  if (bits & stepBit(kind))
    return "runs twice";
  if (kind == StepKind::forward)
    return {};
  if ((kind == StepKind::backward && (bits & (kInput | kWeight))) ||
      (kind != StepKind::backward && (bits & kBackward)))
    return "mixes the whole backward with the split one (input- and weight-gradient steps)";
  if (!(bits & kForward))
    return "runs before its forward";
  if (kind == StepKind::backwardWeight && !(bits & kInput))
    return "runs before its input-gradient backward";
  return {};
}

} // namespace

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
  // seen[chunk * microBatches + m]: the k* bits of the steps that ran.
  std::vector<uint8_t> seen(chunks * shape.microBatches, 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const ScheduleStep &step = steps[i];
    // The message's prefix, built only when a check fails (the planner runs this per candidate).
    auto at = [&] {
      return where + "step " + std::to_string(i) + " (" + describeStep(step) + "): ";
    };
    if (step.chunk < 0 || step.chunk >= chunks)
      return fail(error, at() + "chunk must be in 0.." + std::to_string(chunks - 1));
    if (int64_t runsOn = stageOfChunk(shape, step.chunk); runsOn != stage)
      return fail(error, at() + "chunk " + std::to_string(step.chunk) + " runs on stage " +
                             std::to_string(runsOn));
    if (step.microBatch < 0 || step.microBatch >= shape.microBatches)
      return fail(error,
                  at() + "micro-batch must be in 0.." + std::to_string(shape.microBatches - 1));
    uint8_t &bits = seen[step.chunk * shape.microBatches + step.microBatch];
    if (std::string why = outOfOrder(step.kind, bits); !why.empty())
      return fail(error, at() + why);
    bits |= stepBit(step.kind);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    if (stageOfChunk(shape, c) != stage)
      continue;
    for (int64_t m = 0; m < shape.microBatches; ++m) {
      uint8_t bits = seen[c * shape.microBatches + m];
      if (bits == (kForward | kBackward) || bits == (kForward | kInput | kWeight))
        continue;
      StepKind missing = !(bits & kForward) ? StepKind::forward
                         : (bits & kInput)  ? StepKind::backwardWeight
                                            : StepKind::backward;
      return fail(error, where + "never runs " + describeStep({missing, c, m}));
    }
  }
  return true;
}

ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    double forwardCost, double backwardCost) {
  return simulateSchedule(shape, steps, StepCosts{forwardCost, backwardCost, 0.0});
}

ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    const StepCosts &costs) {
  return simulateSchedule(shape, steps, PipelineCosts{{costs}, 0.0});
}

int64_t stepCostIndex(const ScheduleStep &step, int64_t chunks, int64_t microBatches) {
  int64_t slot = step.kind == StepKind::forward ? 0 : step.kind == StepKind::backwardWeight ? 2 : 1;
  return (slot * chunks + step.chunk) * microBatches + step.microBatch;
}

namespace {

// Why `costs` does not fit `chunks` chunks and `mbs` micro-batches; empty when it does.
std::string checkCosts(const PipelineCosts &costs, int64_t chunks, int64_t mbs) {
  if (costs.chunks.size() != 1 && static_cast<int64_t>(costs.chunks.size()) != chunks)
    return "pipeline costs: need 1 or " + std::to_string(chunks) + " (one per chunk), got " +
           std::to_string(costs.chunks.size());
  auto bad = [](double x) { return !std::isfinite(x) || x < 0; };
  for (size_t c = 0; c < costs.chunks.size(); ++c) {
    const StepCosts &k = costs.chunks[c];
    if (bad(k.forward) || bad(k.backwardInput) || bad(k.backwardWeight))
      return "pipeline costs of chunk " + std::to_string(c) +
             ": forward, input- and weight-gradient times must be finite and >= 0";
  }
  if (!costs.steps.empty() && static_cast<int64_t>(costs.steps.size()) != 3 * chunks * mbs)
    return "pipeline step costs: need 3 * chunks * micro-batches = " +
           std::to_string(3 * chunks * mbs) + " (stepCostIndex), got " +
           std::to_string(costs.steps.size());
  for (double x : costs.steps)
    if (bad(x))
      return "pipeline step costs must be finite and >= 0";
  if (bad(costs.transfer))
    return "pipeline transfer time must be finite and >= 0, got " + std::to_string(costs.transfer);
  if (costs.receiveLookahead < -1)
    return "pipeline receive lookahead must be -1 (none) or >= 0 steps, got " +
           std::to_string(costs.receiveLookahead);
  return {};
}

} // namespace

ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    const PipelineCosts &costs, bool keepSteps) {
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
  if (sim.error = checkCosts(costs, chunks, mbs); !sim.error.empty())
    return sim;
  auto costsOf = [&](int64_t chunk) -> const StepCosts & {
    return costs.chunks.size() == 1 ? costs.chunks[0] : costs.chunks[static_cast<size_t>(chunk)];
  };
  // Finish times per (chunk, micro-batch); negative: not run yet. backwardDone holds the whole
  // backward's or the input-gradient backward's: what the previous chunk's backward waits for.
  std::vector<double> forwardDone(chunks * mbs, -1), backwardDone(chunks * mbs, -1);
  auto at = [&](int64_t c, int64_t m) { return c * mbs + m; };
  // Each stage's step end times so far, in its order: when a receive is posted
  // (PipelineCosts::receiveLookahead; every stage starts the step at time 0).
  std::vector<std::vector<double>> stepEnds(p);
  auto receivePosted = [&](int64_t stage, size_t index) -> double {
    size_t ahead = static_cast<size_t>(costs.receiveLookahead) + 1;
    if (costs.receiveLookahead < 0 || index < ahead)
      return 0.0;
    return stepEnds[stage][index - ahead];
  };
  // When the step's inputs are usable on its stage (its producers' finish time, plus the transfer
  // when the producer runs on another stage: from the later of the send and the receive's
  // posting), or negative if not yet; fills the producer's stage and finish time. The checker has
  // put each step's own earlier steps (forward before backward, B before W) before it on its
  // stage.
  auto inputReady = [&](const ScheduleStep &step, int64_t stage, size_t index,
                        SimulatedStep &t) -> double {
    int64_t c = step.chunk, m = step.microBatch, producer = -1;
    double own = 0, done = 0;
    switch (step.kind) {
    case StepKind::forward:
      if (c == 0)
        return 0.0;
      producer = c - 1;
      done = forwardDone[at(c - 1, m)];
      break;
    case StepKind::backwardWeight:
      return backwardDone[at(c, m)];
    case StepKind::backward:
    case StepKind::backwardInput:
      own = forwardDone[at(c, m)];
      if (c == chunks - 1 || own < 0)
        return own;
      producer = c + 1;
      done = backwardDone[at(c + 1, m)];
      break;
    }
    if (done < 0)
      return done;
    if (int64_t from = stageOfChunk(shape, producer); from != stage) {
      t.producerStage = from;
      t.inputSent = done;
      done = std::max(done, receivePosted(stage, index)) + costs.transfer;
    }
    return std::max(own, done);
  };
  auto costOf = [&](const ScheduleStep &step) {
    if (!costs.steps.empty())
      return costs.steps[static_cast<size_t>(stepCostIndex(step, chunks, mbs))];
    const StepCosts &k = costsOf(step.chunk);
    switch (step.kind) {
    case StepKind::forward:
      return k.forward;
    case StepKind::backward:
      return k.backwardInput + k.backwardWeight;
    case StepKind::backwardInput:
      return k.backwardInput;
    case StepKind::backwardWeight:
      return k.backwardWeight;
    }
    return 0.0;
  };

  std::vector<size_t> next(p, 0);
  std::vector<double> stageFree(p, 0), stageStart(p, -1);
  std::vector<int64_t> inFlight(p, 0);
  std::vector<std::vector<SimulatedStep>> timed(keepSteps ? p : 0);
  sim.stageBusy.assign(p, 0);
  sim.stagePeakInFlight.assign(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      for (; next[s] < steps[s].size(); ++next[s]) {
        const ScheduleStep &step = steps[s][next[s]];
        SimulatedStep t;
        double ready = inputReady(step, s, next[s], t);
        if (ready < 0)
          break;
        double start = std::max(stageFree[s], ready), cost = costOf(step);
        if (stageStart[s] < 0)
          stageStart[s] = start;
        stageFree[s] = start + cost;
        stepEnds[s].push_back(stageFree[s]);
        sim.stageBusy[s] += cost;
        if (step.kind == StepKind::forward)
          forwardDone[at(step.chunk, step.microBatch)] = stageFree[s];
        else if (step.kind != StepKind::backwardWeight)
          backwardDone[at(step.chunk, step.microBatch)] = stageFree[s];
        // A micro-batch's activations stay until its whole backward or its W has run.
        if (step.kind == StepKind::forward)
          ++inFlight[s];
        else if (step.kind != StepKind::backwardInput)
          --inFlight[s];
        sim.stagePeakInFlight[s] = std::max(sim.stagePeakInFlight[s], inFlight[s]);
        if (keepSteps) {
          t.stage = s;
          t.step = step;
          t.start = start;
          t.end = stageFree[s];
          t.inputReady = ready;
          if (t.producerStage < 0)
            t.inputSent = ready;
          timed[s].push_back(t);
        }
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
  for (auto &stage : timed)
    sim.timed.insert(sim.timed.end(), stage.begin(), stage.end());
  sim.makespan = *std::max_element(stageFree.begin(), stageFree.end());
  sim.peakInFlight = *std::max_element(sim.stagePeakInFlight.begin(), sim.stagePeakInFlight.end());
  double busy = 0;
  for (int64_t s = 0; s < p; ++s) {
    busy += sim.stageBusy[s];
    if (stageStart[s] >= 0)
      sim.steadyBubble =
          std::max(sim.steadyBubble, stageFree[s] - stageStart[s] - sim.stageBusy[s]);
  }
  double idle = p * sim.makespan - busy;
  sim.bubble = idle / p;
  sim.bubbleFraction = sim.makespan > 0 ? idle / (p * sim.makespan) : 0;
  sim.bubbleRatio = busy > 0 ? idle / busy : 0;
  return sim;
}

} // namespace megac::schedule
