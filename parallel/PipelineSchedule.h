// The pipeline schedule library (docs/pipeline.md): the one step type, the one parser of schedule
// names, and the one generator of the ordered (forward|backward[-input|-weight], chunk,
// micro-batch) steps of each stage. Codegen writes them into the plan (Program.schedule), the plan
// validator checks them, the runtime executes them as stored, and the planner simulates them, so
// the predicted and the executed schedules cannot diverge. MLIR-free; depends on nothing of megac.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megac::schedule {

/// backward is the whole backward of a chunk. The zero-bubble schedules split it in two:
/// backwardInput (B, the input gradient the previous chunk waits for) and backwardWeight (W, the
/// weight gradients nobody waits for), run in that order.
enum class StepKind { forward, backward, backwardInput, backwardWeight };

struct ScheduleStep {
  StepKind kind = StepKind::forward;
  int64_t chunk = 0; // global model chunk; runs on stage stageOfChunk(shape, chunk)
  int64_t microBatch = 0;
  bool operator==(const ScheduleStep &) const = default;
};

/// gpipe: all forwards, then all backwards. oneFOneB: warm-up forwards, steady 1F1B, cool-down
/// backwards (Megatron's non-interleaved schedule). interleaved: Megatron's interleaved 1F1B
/// over virtualStages chunks per stage (needs microBatches % stages == 0).
/// The zero-bubble schedules (Qi et al., ICLR 2024; docs/pipeline.md) split every backward into
/// backwardInput and backwardWeight and need microBatches >= stages: zbH1 is 1F1B with the
/// weight-gradient steps delayed into the cool-down bubble (peak p micro-batches in flight, like
/// 1F1B); zbH2 warms up with 2(p - s) - 1 forwards on stage s (peak 2p - 1); zbv runs two chunks
/// per stage in V order (ChunkPlacement::vee; peak about p micro-batches' activations).
enum class ScheduleKind { gpipe, oneFOneB, interleaved, zbH1, zbH2, zbv };

/// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv".
const char *scheduleName(ScheduleKind kind);
/// The kind named by scheduleName (the plan's Pipeline.schedule, `megac train --schedule`);
/// nullopt for any other name.
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);
/// Whether the kind's steps split the backward (zbH1, zbH2, zbv).
bool splitsBackward(ScheduleKind kind);
/// The schedule a layout runs: 1F1B over several chunks per stage (virtualStages > 1) is
/// Megatron's interleaved 1F1B; every other request runs as asked.
ScheduleKind resolveSchedule(ScheduleKind requested, int64_t virtualStages);

/// Which stage runs a chunk. loop: chunk c on stage c % p (Megatron's interleaving). vee (ZBV's,
/// two chunks per stage): chunk c on stage c for c < p, on stage 2p - 1 - c after, so stage s holds
/// chunks s and 2p - 1 - s and the last chunk's loss sits on stage 0.
enum class ChunkPlacement { loop, vee };

struct PipelineShape {
  int64_t stages = 1;        // pp
  int64_t virtualStages = 1; // vpp: chunks per stage
  int64_t microBatches = 1;
  ChunkPlacement placement = ChunkPlacement::loop;
};

/// The placement the kind runs with (vee for zbv, loop otherwise).
ChunkPlacement placementOf(ScheduleKind kind);
/// The stage that runs `chunk` (0 <= chunk < stages * virtualStages) under shape.placement.
int64_t stageOfChunk(const PipelineShape &shape, int64_t chunk);

/// The steps of every stage (index = stage). On a shape the kind cannot run (interleaved with
/// microBatches % stages != 0, a non-positive count, virtualStages > 1 for gpipe/1f1b/zb-h1/zb-h2,
/// virtualStages != 2 for zbv, microBatches < stages for the zero-bubble kinds, a placement other
/// than placementOf(kind)), returns nullopt and sets `error` to a one-line message naming the
/// value and what it must satisfy. Deadlock freedom (a property of the orders, not of the step
/// times): tests/unit/parallel/PipelineScheduleTest.cpp proves it for p 1..8, m p..3p; zb-h2's
/// order is one its list scheduler ran to the end, so it holds for every zb-h2 order returned.
std::optional<std::vector<std::vector<ScheduleStep>>>
buildSchedule(ScheduleKind kind, const PipelineShape &shape, std::string *error);

/// Checks one stage's steps (from a plan, or built): every chunk of the stage (stageOfChunk ==
/// stage) runs, per micro-batch, forward then backward exactly once each, or forward, then
/// backwardInput, then backwardWeight exactly once each. Returns false with a one-line `error`
/// naming the first offending step. Whether the stages together can finish (no step waits on a
/// step that waits on it) is simulateSchedule's to say.
bool checkStageSchedule(const PipelineShape &shape, int64_t stage,
                        std::span<const ScheduleStep> steps, std::string *error);

/// The time of one step of one chunk: forward, input-gradient backward, weight-gradient backward.
/// A whole (unsplit) backward step costs backwardInput + backwardWeight.
struct StepCosts {
  double forward = 1;
  double backwardInput = 1;
  double backwardWeight = 0;
};

/// What the simulator charges: each chunk's step times and the communication term. Stages differ
/// (the first holds the embedding, the last the LM head and the loss; under zero-bubble splits
/// chunk 0's input-gradient backward is empty, its weight-gradient backward the whole backward),
/// so costs are per global chunk.
struct PipelineCosts {
  /// One entry per global chunk (stages * virtualStages), or one entry for every chunk.
  std::vector<StepCosts> chunks{StepCosts{}};
  /// From a step's end until its output (activations, or their gradient) is usable by the
  /// neighbouring chunk on another stage: the p2p transfer and what the receiver pays to take it.
  /// Chunks of one stage pass values for free.
  double transfer = 0;
  /// When the receiver posts a transfer's receive, which the transfer cannot start before (a
  /// rendezvous: megac's runtimes, an emulated link): -1, no constraint (from the send); L >= 0,
  /// just before the stage runs the step L steps earlier in its order (its previous step's end;
  /// the stage's start for the first L + 1 steps). megac posts kReceiveLookahead steps ahead with
  /// --overlap on and at the step itself (0) without.
  int64_t receiveLookahead = -1;
  /// Optional, each step's own time, which then replaces `chunks`: a measured trace replayed,
  /// where steps of one chunk and kind differ (a step runs slower while the other stage computes
  /// on shared cores, and a per-chunk mean spreads that over all of them). Indexed by
  /// stepCostIndex; empty: unused.
  std::vector<double> steps{};
};

/// How many steps past the current one megac's pipeline runners post their receives with
/// --overlap on (one activation-sized buffer per port and step): one step ahead lets the next
/// step's input travel while this step computes; the second covers a step that is itself short.
inline constexpr int64_t kReceiveLookahead = 2;

/// Where step (kind, chunk, microBatch) sits in PipelineCosts::steps: slot 0 forward, 1 the
/// whole or the input-gradient backward, 2 the weight-gradient backward;
/// (slot * chunks + chunk) * microBatches + microBatch, of 3 * chunks * microBatches entries.
int64_t stepCostIndex(const ScheduleStep &step, int64_t chunks, int64_t microBatches);

/// One step at the time the simulator runs it.
struct SimulatedStep {
  int64_t stage = 0;
  ScheduleStep step;
  double start = 0, end = 0;
  /// The stage that produced its input on another stage (-1: none, or this stage itself), when
  /// that producer finished, and when the input was usable here (inputSent + transfer).
  int64_t producerStage = -1;
  double inputSent = 0, inputReady = 0;
};

/// Simulates the schedule with every step taking its StepCosts time (sends take no time; a
/// forward waits for the previous chunk's forward of its micro-batch, a backward or
/// backwardInput for its own forward and the next chunk's (input-gradient) backward, a
/// backwardWeight for its own backwardInput). Bubble measures: with idle = stages * makespan -
/// busy (busy: every step's cost), bubbleFraction = idle / (stages * makespan), which is
/// (p-1)/(m+p-1) for GPipe and 1F1B, and bubbleRatio = idle / busy, Narayanan et al.'s "bubble
/// time fraction" (p-1)/m (REFERENCE.md); interleaved: (p-1)/(v*m).
struct ScheduleSimulation {
  double makespan = 0;       // time of one optimizer step's pipeline part
  double bubbleFraction = 0; // idle time / (stages * makespan)
  double bubbleRatio = 0;    // idle time / busy time
  /// idle / stages: the time a stage idles in one step when every step starts together (the
  /// optimizer step waits for all stages: global norm, overflow check). 1F1B: (p-1)(F + B + W).
  double bubble = 0;
  /// The largest (last step's end - first step's start - busy time) of a stage: the bubble per
  /// step when steps run back to back and a stage starts the next step's first step as soon as
  /// its own last one ended (no barrier between steps: the optimizer post-validation of Qi et al.
  /// 2024). Their closed forms are in this measure: 1F1B (p-1)(F + B + W), ZB-H1 (p-1)(F + B -
  /// W), ZB-H2 (p-1)(F + B - 2W) (docs/pipeline.md has the conditions). It equals `bubble` for
  /// 1F1B, and for ZB-H1 where its closed form holds.
  double steadyBubble = 0;
  /// Max (chunk, micro-batch) pairs whose forward ran and whose backward (or backwardWeight: W
  /// keeps the activations its weight gradients read) did not, over stages.
  int64_t peakInFlight = 0;
  /// peakInFlight of each stage. A (chunk, micro-batch) pair counts once: with v chunks per
  /// stage each holds about 1/v of a micro-batch's activations on that stage.
  std::vector<int64_t> stagePeakInFlight;
  /// Busy time (the sum of its steps' costs) of each stage.
  std::vector<double> stageBusy;
  /// Every step with its times, per stage in schedule order, stages in order; filled only when
  /// simulateSchedule is asked to keep them (the timeline draws them).
  std::vector<SimulatedStep> timed;
  /// Non-empty when the steps are malformed (checkStageSchedule's message), the costs do not fit
  /// the shape, or the steps cannot finish (a deadlock: names what every stuck stage waits for);
  /// the numbers are then meaningless.
  std::string error;
};
/// The one simulator (codegen's orders, the planner's bubble, `megac plan --timeline`, the bubble
/// bench): per-chunk costs and the communication term; `keepSteps` fills `timed`. With one
/// StepCosts for every chunk and no transfer it is the uniform form below.
ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    const PipelineCosts &costs, bool keepSteps = false);
ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    const StepCosts &costs);
/// The unsplit form: forward time `forwardCost`, whole backward `backwardCost` (a split schedule's
/// backwardInput then costs backwardCost and its backwardWeight nothing).
ScheduleSimulation simulateSchedule(const PipelineShape &shape,
                                    const std::vector<std::vector<ScheduleStep>> &steps,
                                    double forwardCost, double backwardCost);

/// "forward of chunk 3, micro-batch 5" ("backward", "input-gradient backward", "weight-gradient
/// backward"): how errors name a step.
std::string describeStep(const ScheduleStep &step);
/// The chunk function a step runs: "forward.c<c>", "backward.c<c>" (whole), "backward_input.c<c>"
/// or "backward_weight.c<c>" (docs/pipeline.md, "Chunk functions and their ports").
std::string stepFunction(const ScheduleStep &step);
/// "F3 c1": forward of micro-batch 3 in chunk 1 ("B" for backward and for the input-gradient
/// backward, "W" for the weight-gradient backward; a schedule has one or the other kind of
/// backward), how traces and timelines label a step (`megac train --trace`, `megac plan
/// --timeline`).
std::string stepLabel(const ScheduleStep &step);

} // namespace megac::schedule
