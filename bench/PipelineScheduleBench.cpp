// The pipeline schedules of parallel/PipelineSchedule side by side: simulated step time, bubble
// (all stages start together), steady bubble (each stage starts its next step when its own last
// step ended) and peak in-flight micro-batches, next to Qi et al.'s closed forms
// (docs/pipeline.md). Prints numbers; never fails on time.
//
//   bench-pipeline-schedule [p m F B W] [--orders]   (default 4 8 1 1 1)
//
// F, B, W: a stage's forward, input-gradient and weight-gradient time per micro-batch; 1F1B and
// GPipe run B + W as one backward; ZBV's two chunks per stage each take half. --orders prints
// each stage's steps ("F3" forward of micro-batch 3, "B", "W"; ZBV's second chunk in lower case).
//
//   bench-pipeline-schedule --simulate SCHEDULE m T F,B,W [F,B,W ...]
//
// simulates one schedule at per-chunk costs (one F,B,W triple per global chunk, in chunk order;
// p = triples / chunks per stage; 1F1B and GPipe run B + W as one backward) and a transfer time T
// between stages, and prints "makespan bubble steady_bubble" and each stage's busy time: what
// bench/zero_bubble_bench.py compares with megac train's trace.
//
//   bench-pipeline-schedule --simulate-steps SCHEDULE m T CHUNKS < COSTS
//
// the same at each step's own time (PipelineCosts::steps: a trace replayed): COSTS has one line
// "F|B|W chunk micro-batch time" per step of the schedule (B: the whole or input-gradient
// backward), and prints the same lines.
#include "parallel/PipelineSchedule.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

using namespace megac::schedule;

namespace {

/// Builds `kind`'s schedule for `shape`, simulates it with `costs` and prints the makespan line;
/// nullopt (after naming the error) when the library refuses the shape or the simulation fails.
std::optional<ScheduleSimulation> simulateAndPrint(ScheduleKind kind, const PipelineShape &shape,
                                                   const PipelineCosts &costs) {
  std::string error;
  auto steps = buildSchedule(kind, shape, &error);
  if (!steps) {
    std::fprintf(stderr, "bench-pipeline-schedule: %s\n", error.c_str());
    return std::nullopt;
  }
  ScheduleSimulation sim = simulateSchedule(shape, *steps, costs);
  if (!sim.error.empty()) {
    std::fprintf(stderr, "bench-pipeline-schedule: %s\n", sim.error.c_str());
    return std::nullopt;
  }
  std::printf("makespan %.9g bubble %.9g steady_bubble %.9g peak_in_flight %lld\n", sim.makespan,
              sim.bubble, sim.steadyBubble, (long long)sim.peakInFlight);
  return sim;
}

int simulateOne(int argc, char **argv) {
  auto usage = [] {
    std::fprintf(stderr, "usage: bench-pipeline-schedule --simulate SCHEDULE m T F,B,W [F,B,W ...] "
                         "(m >= 1; T, F, B, W >= 0; one triple per chunk)\n");
    return 2;
  };
  if (argc < 6)
    return usage();
  auto kind = parseScheduleKind(argv[2]);
  if (!kind) {
    std::fprintf(stderr, "bench-pipeline-schedule: unknown schedule '%s'\n", argv[2]);
    return 2;
  }
  const int64_t m = std::atoll(argv[3]);
  const double transfer = std::atof(argv[4]);
  PipelineCosts costs;
  costs.transfer = transfer;
  costs.chunks.clear();
  for (int i = 5; i < argc; ++i) {
    StepCosts c;
    if (std::sscanf(argv[i], "%lf,%lf,%lf", &c.forward, &c.backwardInput, &c.backwardWeight) != 3)
      return usage();
    costs.chunks.push_back(c);
  }
  const int64_t v = *kind == ScheduleKind::zbv ? 2 : 1;
  const int64_t chunks = int64_t(costs.chunks.size());
  if (m < 1 || chunks % v != 0)
    return usage();
  PipelineShape shape{chunks / v, v, m, placementOf(*kind)};
  std::optional<ScheduleSimulation> sim = simulateAndPrint(*kind, shape, costs);
  if (!sim)
    return 1;
  for (size_t s = 0; s < sim->stageBusy.size(); ++s)
    std::printf("stage %zu busy %.9g peak_in_flight %lld\n", s, sim->stageBusy[s],
                (long long)sim->stagePeakInFlight[s]);
  return 0;
}

int simulateSteps(int argc, char **argv) {
  auto usage = [] {
    std::fprintf(stderr, "usage: bench-pipeline-schedule --simulate-steps SCHEDULE m T CHUNKS < "
                         "lines 'F|B|W chunk micro-batch time' (one per step)\n");
    return 2;
  };
  if (argc != 6)
    return usage();
  auto kind = parseScheduleKind(argv[2]);
  const int64_t m = std::atoll(argv[3]), chunks = std::atoll(argv[5]);
  const int64_t v = kind == ScheduleKind::zbv ? 2 : 1;
  if (!kind || m < 1 || chunks < 1 || chunks % v != 0)
    return usage();
  PipelineCosts costs;
  costs.transfer = std::atof(argv[4]);
  costs.steps.assign(size_t(3 * chunks * m), 0.0);
  char letter;
  long long chunk, micro;
  double time;
  while (std::scanf(" %c %lld %lld %lf", &letter, &chunk, &micro, &time) == 4) {
    if (chunk < 0 || chunk >= chunks || micro < 0 || micro >= m || !std::strchr("FBW", letter))
      return usage();
    StepKind k = letter == 'F'   ? StepKind::forward
                 : letter == 'W' ? StepKind::backwardWeight
                                 : StepKind::backwardInput;
    costs.steps[size_t(stepCostIndex({k, chunk, micro}, chunks, m))] = time;
  }
  PipelineShape shape{chunks / v, v, m, placementOf(*kind)};
  std::optional<ScheduleSimulation> sim = simulateAndPrint(*kind, shape, costs);
  if (!sim)
    return 1;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "--simulate") == 0)
    return simulateOne(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--simulate-steps") == 0)
    return simulateSteps(argc, argv);
  bool orders = false;
  double args[5] = {4, 8, 1, 1, 1};
  int given = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--orders") == 0)
      orders = true;
    else if (given < 5)
      args[given++] = std::atof(argv[i]);
  }
  const int64_t p = int64_t(args[0]), m = int64_t(args[1]);
  const double F = args[2], B = args[3], W = args[4];
  if ((given != 0 && given != 5) || p < 1 || m < 1 || F <= 0 || B <= 0 || W < 0) {
    std::fprintf(stderr, "usage: bench-pipeline-schedule [p m F B W] [--orders] (p, m >= 1; "
                         "F, B > 0; W >= 0)\n");
    return 2;
  }
  std::printf("p = %lld stages, m = %lld micro-batches, F = %g, B = %g, W = %g per micro-batch "
              "and stage, sends free\n",
              (long long)p, (long long)m, F, B, W);
  std::printf("%-8s %10s %10s %14s %14s %12s\n", "schedule", "step time", "bubble", "steady bubble",
              "closed form", "peak in flight");
  struct Row {
    ScheduleKind kind;
    double closedForm; // < 0: none in the table
  } rows[] = {{ScheduleKind::gpipe, (p - 1) * (F + B + W)},
              {ScheduleKind::oneFOneB, (p - 1) * (F + B + W)},
              {ScheduleKind::zbH1, (p - 1) * (F + B - W)},
              {ScheduleKind::zbH2, (p - 1) * (F + B - 2 * W)},
              {ScheduleKind::zbv, -1}};
  for (const Row &row : rows) {
    int64_t v = row.kind == ScheduleKind::zbv ? 2 : 1;
    PipelineShape shape{p, v, m, placementOf(row.kind)};
    std::string error;
    auto steps = buildSchedule(row.kind, shape, &error);
    if (!steps) {
      std::printf("%-8s %s\n", scheduleName(row.kind), error.c_str());
      continue;
    }
    ScheduleSimulation sim = simulateSchedule(shape, *steps, StepCosts{F / v, B / v, W / v});
    if (!sim.error.empty()) {
      std::printf("%-8s %s\n", scheduleName(row.kind), sim.error.c_str());
      continue;
    }
    std::string closed = row.closedForm < 0 ? "-" : std::to_string(row.closedForm);
    // Peak in flight in micro-batches' activations: a ZBV chunk holds half a stage's layers.
    std::printf("%-8s %10.4g %10.4g %14.4g %14s %12g\n", scheduleName(row.kind), sim.makespan,
                sim.bubble, sim.steadyBubble, closed.substr(0, closed.find('.') + 3).c_str(),
                double(sim.peakInFlight) / double(v));
    if (!orders)
      continue;
    for (int64_t s = 0; s < p; ++s) {
      std::string line = "  stage " + std::to_string(s) + ":";
      for (const ScheduleStep &step : (*steps)[s]) {
        std::string label = stepLabel(step).substr(0, 1);
        if (stageOfChunk(shape, step.chunk) == s && step.chunk >= p)
          label[0] = char(label[0] - 'A' + 'a');
        line += " " + label + std::to_string(step.microBatch);
      }
      std::printf("%s\n", line.c_str());
    }
  }
  return 0;
}
