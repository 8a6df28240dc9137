// What `megac train` reports per optimizer step: one JSON object per line (--log-json), a live
// progress line on a terminal, and plain log lines otherwise.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace megac::runtime::train {

struct StepRecord {
  int64_t step = 0;     // 1-based
  double loss = 0;      // mean over the global batch's target tokens
  double lr = 0;        // the lr this step applied
  double gradNorm = 0;  // global L2 norm before clipping
  double lossScale = 1; // 1 without loss scaling (fp32, fp64)
  bool skipped = false; // the optimizer step was skipped (overflow under loss scaling)
  int64_t tokens = 0;   // input tokens processed (global batch x sequence)
  double stepSeconds = 0;
  /// Mixture of experts (docs/moe.md), when the model has MoE layers: per layer and expert the
  /// (token, choice) assignments routed over the global batch, those dropped by capacity, and
  /// the auxiliary loss terms added to the objective (`loss` excludes them).
  struct Moe {
    std::vector<std::vector<double>> load;
    double dropped = 0;
    double auxLoss = 0;
  };
  std::optional<Moe> moe;

  double tokensPerSecond() const { return stepSeconds > 0 ? tokens / stepSeconds : 0; }
};

/// {"step": 1, "loss": ..., "lr": ..., "grad_norm": ..., "loss_scale": 1, "skipped": false,
/// "tokens": ..., "tokens_per_s": ..., "step_time_s": ...[, "moe_aux_loss": ..., "moe_dropped": ...,
/// "moe_load": [[...] per layer]]} on one line, no newline. Numbers
/// round-trip (%.17g); a non-finite one is written as null (JSON has no NaN).
std::string stepRecordJson(const StepRecord &record);

/// The steps since the last log line, for --log-interval N: add() returns the record to print
/// after every N-th step and the last one: the last step's record with the mean loss, tokens
/// and step time of the steps since the previous line.
class LogInterval {
public:
  std::optional<StepRecord> add(const StepRecord &record, int64_t every, int64_t totalSteps);

private:
  int64_t steps_ = 0;
  double loss_ = 0, seconds_ = 0, tokens_ = 0;
};

/// "step 3/20 | loss 4.8512 | lr 1.00e-03 | grad_norm 1.234 | 12.3 ms/step | 10400 tok/s"; MoE
/// models add "| aux 1.2e-02 | dropped 0 | load max/mean 1.31" (the busiest expert's share over
/// the mean, worst layer).
std::string stepLogLine(const StepRecord &record, int64_t totalSteps);
/// "step 3/20 [=====>      ] loss 4.8512 | 10400 tok/s | ETA 1m05s": for a terminal line.
std::string progressLine(const StepRecord &record, int64_t totalSteps, double etaSeconds);
/// "850 ms", "12s", "3m05s", "1h02m".
std::string formatDuration(double seconds);

/// A JSON-lines file, flushed after every line so a killed run keeps its history.
class JsonLinesWriter {
public:
  JsonLinesWriter() = default;
  JsonLinesWriter(const JsonLinesWriter &) = delete;
  JsonLinesWriter &operator=(const JsonLinesWriter &) = delete;
  ~JsonLinesWriter();

  /// Creates or truncates `path`.
  Status open(const std::string &path);
  Status write(const std::string &line);
  Status close();

private:
  std::FILE *file_ = nullptr;
  std::string path_;
};

} // namespace megac::runtime::train
