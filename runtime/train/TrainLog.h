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
  /// Model FLOPs per token of a training step: ModelStats::trainingFlops() over the forward
  /// graph's tokens (3x the forward's cost-interface FLOPs, matmuls, attention's s x s products
  /// and elementwise ops alike; recompute not counted), `megac describe`'s "training" line.
  /// 0: unknown, and the record has no model_tflops_per_rank or mfu.
  double flopsPerToken = 0;
  int64_t ranks = 1; // the job's ranks, which share the step's FLOPs
  /// One rank's peak FLOP/s for MFU (CUDA bf16/fp16 runs: the device's dense bf16 peak); 0: no
  /// peak is known (CPU, fp32) and the record has no mfu.
  double peakFlopsPerRank = 0;
  /// Rank 0's memory: its plan's arena (the memory plan's peak of live buffers: parameters,
  /// gradients, optimizer state, activations, workspaces) and its process's peak resident set
  /// (getrusage's ru_maxrss, /proc's VmHWM). 0: unknown, left out of the record.
  int64_t memPlanBytes = 0;
  int64_t memRssPeakBytes = 0;

  double tokensPerSecond() const { return stepSeconds > 0 ? tokens / stepSeconds : 0; }
  /// The model FLOPs per second one rank achieved, in TFLOP/s: flopsPerToken x tokens over the
  /// step time and the ranks.
  double modelTflopsPerRank() const {
    return stepSeconds > 0 && ranks > 0
               ? flopsPerToken * double(tokens) / stepSeconds / double(ranks) / 1e12
               : 0;
  }
  /// Model FLOPs utilisation: modelTflopsPerRank over the peak (0 without one).
  double mfu() const {
    return peakFlopsPerRank > 0 ? modelTflopsPerRank() * 1e12 / peakFlopsPerRank : 0;
  }
};

/// {"step": 1, "loss": ..., "lr": ..., "grad_norm": ..., "loss_scale": 1, "skipped": false,
/// "tokens": ..., "tokens_per_s": ..., "step_time_s": ...[, "model_tflops_per_rank": ...][, "mfu":
/// ...][, "mem_plan_bytes": ...][, "mem_rss_peak_bytes": ...][, "moe_aux_loss": ...,
/// "moe_dropped": ..., "moe_load": [[...] per layer]]} on one line, no newline (the bracketed
/// throughput and memory keys when the record knows them). Numbers
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
