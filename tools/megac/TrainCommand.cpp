// `megac train (MODEL.onnx | FILE.mlir | --model SPEC) --data TOKENS.npy ...`: the flags into a
// driver::RunConfig, then a driver::TrainSession's steps, evaluations and checkpoints, printed as
// they happen (docs/training-step.md, docs/pipeline.md). Several ranks run under mpirun (`--ranks
// N` starts it), one process per rank of the mesh <pp, dp, tp>.
#include "tools/megac/Commands.h"
#include "tools/megac/ExitFlags.h"
#include "tools/megac/Help.h"
#include "tools/megac/RunFlags.h"

#include "driver/Job.h"
#include "driver/TrainSession.h"

#include <cmath>
#include <cstdio>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac train";

/// The ranks of a multi-rank job abort together: one failing rank would leave the others
/// waiting in a collective until the timeout.
int abortRun(const driver::TrainSession &session, const std::string &message) {
  bool multi = session.ranks() > 1;
  fail(kCommand, multi ? "rank " + std::to_string(session.rank()) + ": " + message : message);
  if (multi)
    driver::abortJob(1);
  return 1;
}

void printHeader(const driver::TrainSession &s) {
  const driver::RunConfig &c = s.config();
  const Layout &l = c.layout();
  std::string ranks = c.exec.ranks == 1
                          ? std::string()
                          : ", " + std::to_string(c.exec.ranks) + " ranks (tp " +
                                std::to_string(l.tp) + ", pp " + std::to_string(l.pp) + ", dp " +
                                std::to_string(l.dp) +
                                (l.ep > 1 ? ", ep " + std::to_string(l.ep) : std::string()) +
                                (l.cp > 1 ? ", cp " + std::to_string(l.cp) : std::string()) + ")";
  std::printf("%s: %lld steps of %lld x %lld tokens (micro-batch %lld, %lld accumulation "
              "steps%s), %s, lr %g %s, on %s; compiled in %.1f ms\n",
              s.description().c_str(), (long long)c.lr.totalSteps,
              (long long)c.data.batch.globalBatch, (long long)s.sequenceLength(),
              (long long)l.microBatch, (long long)c.data.batch.microBatches(), ranks.c_str(),
              precisionName(l.precision), c.lr.lr, driver::lrDecayName(c.lr.decay),
              driver::backendName(c.exec.backend), s.compileSeconds() * 1e3);
  std::fflush(stdout);
}

/// An evaluation after `step`: rank 0 prints "<what> after step N: loss, perplexity" and logs
/// it.
Status evaluate(driver::TrainSession &s, driver::DataPart part, int64_t step,
                driver::RunLogs &logs) {
  ASSIGN_OR_RETURN(double loss, s.evaluate(part));
  if (!s.root())
    return Status::ok();
  bool test = part == driver::DataPart::test;
  std::printf("%s after step %lld: loss %.6g, perplexity %.6g\n", test ? "test" : "validation",
              (long long)step, loss, std::exp(loss));
  return logs.evaluation(step, test ? "test" : "val", loss);
}

/// At a step boundary before the last: whether the ranks agree to stop (a signal, the time
/// limit); if so, the checkpoint of this step (unless the step just saved one).
Status checkStop(driver::TrainSession &s, const driver::StopRequest &stop, bool saved,
                 std::optional<driver::StopDecision> &stopped) {
  if (!stop.enabled())
    return Status::ok();
  ASSIGN_OR_RETURN(driver::StopDecision decision, s.agreeToStop(stop));
  if (!decision.stop())
    return Status::ok();
  if (s.config().checkpoint.saveDir && !saved)
    RETURN_IF_ERROR(s.save()) << " (saving on " << decision.reason(stop.limitMinutes()) << ")";
  stopped = decision;
  return Status::ok();
}

/// The training loop: steps, evaluations, checkpoints, logs and progress (rank 0); ends early,
/// with `stopped` set, when the ranks agree to stop.
Status trainLoop(driver::TrainSession &s, const driver::StopRequest &stop, driver::RunLogs &logs,
                 double &elapsed, double &firstLoss, double &lastLoss,
                 std::optional<driver::StopDecision> &stopped) {
  const driver::RunConfig &c = s.config();
  bool terminal = s.root() && stdoutIsTerminal();
  int64_t steps = c.lr.totalSteps, done = s.stepsDone();
  driver::LogInterval interval;
  for (int64_t step = done + 1; step <= steps && !stopped; ++step) {
    StatusOr<driver::StepRecord> record = s.step();
    if (!record.isOk()) {
      if (terminal)
        std::fputc('\n', stdout);
      std::fflush(stdout);
      return record.status();
    }
    elapsed += record->stepSeconds;
    if (step == done + 1)
      firstLoss = record->loss;
    lastLoss = record->loss;
    if (s.evaluates(driver::DataPart::validation) &&
        (step % c.data.evalInterval == 0 || step == steps)) {
      if (terminal)
        std::fputc('\n', stdout);
      RETURN_IF_ERROR(evaluate(s, driver::DataPart::validation, step, logs));
    }
    bool save =
        c.checkpoint.saveDir &&
        (step == steps || (c.checkpoint.saveInterval > 0 && step % c.checkpoint.saveInterval == 0));
    if (save)
      RETURN_IF_ERROR(s.save());
    if (step < steps)
      RETURN_IF_ERROR(checkStop(s, stop, save, stopped));
    if (!s.root())
      continue;
    RETURN_IF_ERROR(logs.step(*record));
    if (terminal) {
      double eta = elapsed / double(step - done) * double(steps - step);
      std::printf("\r%s\x1b[K", driver::progressLine(*record, steps, eta).c_str());
    } else if (std::optional<driver::StepRecord> line =
                   interval.add(*record, c.log.interval, steps)) {
      std::printf("%s\n", driver::stepLogLine(*line, steps).c_str());
    }
    std::fflush(stdout);
  }
  if (terminal)
    std::fputc('\n', stdout);
  return Status::ok();
}

/// After a stop the ranks agreed on: rank 0 closes the log and says why and where it saved.
Status finishStopped(driver::TrainSession &s, driver::RunLogs &logs,
                     const driver::StopRequest &stop, const driver::StopDecision &why) {
  if (!s.root())
    return Status::ok();
  RETURN_IF_ERROR(logs.close());
  const driver::RunConfig &c = s.config();
  std::string reason = why.reason(stop.limitMinutes());
  if (c.checkpoint.saveDir)
    std::printf("stopped after step %lld of %lld on %s: saved %s (resume with --load %s)\n",
                (long long)s.stepsDone(), (long long)c.lr.totalSteps, reason.c_str(),
                s.savedPath().c_str(), c.checkpoint.saveDir->c_str());
  else
    std::printf("stopped after step %lld of %lld on %s (no --save: nothing saved)\n",
                (long long)s.stepsDone(), (long long)c.lr.totalSteps, reason.c_str());
  std::fflush(stdout);
  return Status::ok();
}

/// After the loop: the test part, the summary, the trace and the final weights.
Status finishRun(driver::TrainSession &s, driver::RunLogs &logs, int64_t done, double elapsed,
                 double firstLoss, double lastLoss) {
  const driver::RunConfig &c = s.config();
  int64_t steps = c.lr.totalSteps;
  if (s.evaluates(driver::DataPart::test))
    RETURN_IF_ERROR(evaluate(s, driver::DataPart::test, steps, logs));
  if (s.root()) {
    RETURN_IF_ERROR(logs.close());
    int64_t ran = steps - std::min(done, steps);
    double tokens = double(c.data.batch.globalBatch * s.sequenceLength() * ran);
    std::printf("trained %lld steps in %s (%.0f tokens/s): loss %.6g -> %.6g\n", (long long)ran,
                driver::formatDuration(elapsed).c_str(), elapsed > 0 ? tokens / elapsed : 0.0,
                firstLoss, lastLoss);
    if (c.checkpoint.saveDir && ran > 0)
      std::printf("saved checkpoints in %s (latest: step %lld)\n", c.checkpoint.saveDir->c_str(),
                  (long long)steps);
  }
  if (c.log.tracePath) {
    RETURN_IF_ERROR(s.writeTrace());
    if (s.root())
      std::printf("wrote %s (the timeline of steps %lld..%lld)\n", c.log.tracePath->c_str(),
                  (long long)c.log.traceFirst, (long long)c.log.traceLast);
  }
  if (c.checkpoint.saveWeights) {
    RETURN_IF_ERROR(s.saveWeights(*c.checkpoint.saveWeights));
    if (s.root())
      std::printf("wrote %s\n", c.checkpoint.saveWeights->c_str());
  }
  if (c.checkpoint.saveHf) {
    RETURN_IF_ERROR(s.saveHf(*c.checkpoint.saveHf));
    if (s.root())
      std::printf("wrote %s (a transformers folder)\n", c.checkpoint.saveHf->c_str());
  }
  if (c.checkpoint.saveGrads && s.root())
    std::printf("wrote %s (the gradients of step 1)\n", c.checkpoint.saveGrads->c_str());
  std::fflush(stdout);
  return Status::ok();
}

/// A session opened, resumed when asked, trained and finished (or stopped early, with a
/// checkpoint); returns the exit code.
int run(driver::TrainSession &s, const driver::StopRequest &stop) {
  if (Status st = s.open(); !st.isOk())
    return abortRun(s, st.message());
  const driver::RunConfig &c = s.config();
  if (s.root())
    printHeader(s);
  driver::RunLogs logs;
  if (s.root())
    if (Status st = logs.open(c.log.jsonPath, c.log.tensorboardDir); !st.isOk())
      return abortRun(s, st.message());
  if (c.checkpoint.loadDir) {
    StatusOr<driver::Resumed> resumed = s.load();
    if (!resumed.isOk())
      return abortRun(s, resumed.status().message());
    if (s.root()) {
      std::printf("resumed from %s (step %lld, saved under %s)\n", resumed->path.c_str(),
                  (long long)resumed->step, resumed->layout.c_str());
      std::fflush(stdout);
    }
  }
  int64_t done = s.stepsDone();
  double elapsed = 0, firstLoss = 0, lastLoss = 0;
  std::optional<driver::StopDecision> stopped;
  Status st = trainLoop(s, stop, logs, elapsed, firstLoss, lastLoss, stopped);
  if (st.isOk() && stopped)
    st = finishStopped(s, logs, stop, *stopped);
  else if (st.isOk())
    st = finishRun(s, logs, done, elapsed, firstLoss, lastLoss);
  return st.isOk() ? 0 : abortRun(s, st.message());
}

} // namespace

int trainCommand(int argc, char **argv) {
  auto started = driver::StopRequest::Clock::now(); // --exit-duration-in-mins counts from here
  Flags flags(kCommand, kTrainHelp);
  RunFlags run;
  ExitFlags exitFlags;
  run.declare(flags);
  exitFlags.declare(flags);
  if (std::optional<int> exit = flags.parse(argc, argv, 2))
    return *exit;
  if (std::string e = run.configure(flags, /*planOnly=*/false); !e.empty())
    return flags.usage(e);
  driver::RunConfig &c = run.config;
  if (std::string e = exitFlags.configure(flags, c); !e.empty())
    return flags.usage(e);
  if (c.exec.ranks > 1 && driver::launchedRanks() <= 1)
    return relaunchUnderMpirun(argc, argv, kCommand, c.exec.ranks, run.oversubscribe,
                               c.exec.threads);
  driver::StopRequest stop(c.exec.exitOnSignal, c.exec.exitDurationMinutes, started);
  if (c.exec.exitOnSignal)
    if (Status st = driver::handleStopSignals(); !st.isOk())
      return fail(kCommand, st.message());
  setThreads(c.exec.threads, c.exec.ranks);
  driver::SessionHooks hooks;
  hooks.warn = [](const std::string &line) {
    std::fprintf(stderr, "%s: warning: %s\n", kCommand, line.c_str());
  };
  driver::TrainSession session(std::move(c), hooks);
  return ::megac::cli::run(session, stop);
}

} // namespace megac::cli
