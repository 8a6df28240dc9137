// The pipeline runner over MPI: 4 processes, mesh [pp = 2, dp = 2], the toy chunk functions of
// PipelineRunnerFakes.h under every schedule, checked against the sequential evaluation, with
// each step's receive posted when it starts and posted ahead (--overlap on), and ahead over an
// emulated link (stamped messages). Run by ctest under mpiexec (label mpi); each rank prints
// what it got wrong and exits non-zero.
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/train/PipelineRunner.h"
#include "tests/unit/train/PipelineRunnerFakes.h"

#include <cmath>
#include <cstdio>

using namespace megac;
using namespace megac::runtime;
using schedule::ScheduleKind;

namespace {

struct Case {
  ScheduleKind kind;
  int64_t virtualStages, microBatches;
  int pieces;
};

// Runs one case on this rank; returns the number of mismatches it printed.
int runCase(comm::Communicator &comm, const Case &tc, bool early) {
  const int64_t p = 2, dp = 2, chunks = p * tc.virtualStages;
  const int rank = comm.rank();
  const int64_t stage = rank / dp, replica = rank % dp;
  std::string name =
      std::string(schedule::scheduleName(tc.kind)) + " v=" + std::to_string(tc.virtualStages) +
      " m=" + std::to_string(tc.microBatches) + " pieces=" + std::to_string(tc.pieces) +
      (early ? " (receives posted ahead)" : "") + ", rank " + std::to_string(rank);
  std::string error;
  auto schedule = schedule::buildSchedule(tc.kind, {p, tc.virtualStages, tc.microBatches}, &error);
  if (!schedule) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), error.c_str());
    return 1;
  }
  train::testing::FakeChunkExecutor executor(stage, p, chunks, tc.pieces, train::testing::kWidth,
                                             schedule::splitsBackward(tc.kind));
  train::PipelineRun run;
  run.steps = (*schedule)[stage];
  run.stages = p;
  run.chunks = chunks;
  run.microBatches = tc.microBatches;
  run.ppAxis = 0;
  run.postReceivesEarly = early;
  run.setDataInputs = train::testing::dataSetter(executor, replica, tc.microBatches);
  StatusOr<double> loss = train::runPipelinedMicroBatches(executor, comm, run);
  if (!loss.isOk()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), loss.status().message().c_str());
    return 1;
  }
  train::testing::Sequential want =
      train::testing::sequential(chunks, tc.pieces, tc.microBatches, replica);
  int bad = 0;
  auto check = [&](const std::string &what, double got, double expected) {
    if (std::abs(got - expected) <= 1e-12 * std::abs(expected))
      return;
    std::fprintf(stderr, "%s: %s is %.17g, expected %.17g\n", name.c_str(), what.c_str(), got,
                 expected);
    ++bad;
  };
  check("the loss", loss.value(), stage == (chunks - 1) % p ? want.loss : 0.0);
  for (int64_t c = stage; c < chunks; c += p) {
    StatusOr<HostTensor> grad = executor.state("grad.w" + std::to_string(c));
    for (int64_t i = 0; i < train::testing::kWidth; ++i)
      check("grad.w" + std::to_string(c) + "[" + std::to_string(i) + "]", grad->data<double>()[i],
            want.grads[c][i]);
  }
  return bad;
}

} // namespace

int main() {
  auto comm =
      comm::MpiCommunicator::create(comm::Mesh{{"pp", "dp"}, {2, 2}}, std::chrono::seconds(30));
  if (!comm.isOk()) {
    std::fprintf(stderr, "%s\n", comm.status().message().c_str());
    return 1;
  }
  // 1 GB/s, 0.1 ms: each transfer is delayed a little, enough to reorder completions.
  auto emulated = comm::MpiCommunicator::create(comm::Mesh{{"pp", "dp"}, {2, 2}},
                                                std::chrono::seconds(30), {1e9, 1e-4});
  if (!emulated.isOk()) {
    std::fprintf(stderr, "%s\n", emulated.status().message().c_str());
    return 1;
  }
  int bad = 0;
  for (const Case &tc :
       {Case{ScheduleKind::gpipe, 1, 3, 1}, Case{ScheduleKind::oneFOneB, 1, 5, 2},
        Case{ScheduleKind::interleaved, 2, 4, 2}, Case{ScheduleKind::interleaved, 3, 2, 1},
        Case{ScheduleKind::zbH1, 1, 4, 2}}) {
    bad += runCase(**comm, tc, false);
    bad += runCase(**comm, tc, true);
    bad += runCase(**emulated, tc, true);
  }
  if (bad == 0 && (*comm)->rank() == 0)
    std::printf("pipeline runner over MPI: 5 schedules match the sequential evaluation, receives "
                "posted at each step and ahead of it, on an emulated link too\n");
  return bad == 0 ? 0 : 1;
}
