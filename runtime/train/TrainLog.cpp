// Step records as JSON lines, terminal progress lines and plain log lines.
#include "runtime/train/TrainLog.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace megac::runtime::train {

namespace {

std::string number(double value) {
  if (!std::isfinite(value))
    return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return buf;
}

std::string format(const char *fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

std::string moeJson(const StepRecord &r) {
  if (!r.moe)
    return "";
  std::string load;
  for (const std::vector<double> &layer : r.moe->load) {
    std::string row;
    for (double v : layer)
      row += (row.empty() ? "" : ", ") + number(v);
    load += (load.empty() ? "[" : ", [") + row + "]";
  }
  return ", \"moe_aux_loss\": " + number(r.moe->auxLoss) +
         ", \"moe_dropped\": " + number(r.moe->dropped) + ", \"moe_load\": [" + load + "]";
}

/// The busiest expert's load over the mean load, in the worst layer (1 = perfectly balanced).
double worstImbalance(const StepRecord::Moe &moe) {
  double worst = 0;
  for (const std::vector<double> &layer : moe.load) {
    double total = 0, most = 0;
    for (double v : layer) {
      total += v;
      most = std::max(most, v);
    }
    if (total > 0)
      worst = std::max(worst, most * double(layer.size()) / total);
  }
  return worst;
}

std::string throughputAndMemoryJson(const StepRecord &r) {
  std::string out;
  if (r.flopsPerToken > 0)
    out += ", \"model_tflops_per_rank\": " + number(r.modelTflopsPerRank());
  if (r.flopsPerToken > 0 && r.peakFlopsPerRank > 0)
    out += ", \"mfu\": " + number(r.mfu());
  if (r.memPlanBytes > 0)
    out += ", \"mem_plan_bytes\": " + std::to_string(r.memPlanBytes);
  if (r.memRssPeakBytes > 0)
    out += ", \"mem_rss_peak_bytes\": " + std::to_string(r.memRssPeakBytes);
  return out;
}

} // namespace

std::string stepRecordJson(const StepRecord &r) {
  return "{\"step\": " + std::to_string(r.step) + ", \"loss\": " + number(r.loss) +
         ", \"lr\": " + number(r.lr) + ", \"grad_norm\": " + number(r.gradNorm) +
         ", \"loss_scale\": " + number(r.lossScale) +
         ", \"skipped\": " + (r.skipped ? "true" : "false") +
         ", \"tokens\": " + std::to_string(r.tokens) +
         ", \"tokens_per_s\": " + number(r.tokensPerSecond()) +
         ", \"step_time_s\": " + number(r.stepSeconds) + throughputAndMemoryJson(r) + moeJson(r) +
         "}";
}

std::optional<StepRecord> LogInterval::add(const StepRecord &record, int64_t every,
                                           int64_t totalSteps) {
  ++steps_;
  loss_ += record.loss;
  seconds_ += record.stepSeconds;
  tokens_ += double(record.tokens);
  if (steps_ < every && record.step != totalSteps)
    return std::nullopt;
  StepRecord mean = record;
  mean.loss = loss_ / double(steps_);
  mean.stepSeconds = seconds_ / double(steps_);
  mean.tokens = static_cast<int64_t>(tokens_ / double(steps_));
  *this = LogInterval();
  return mean;
}

std::string stepLogLine(const StepRecord &r, int64_t totalSteps) {
  std::string line = "step " + std::to_string(r.step) + "/" + std::to_string(totalSteps) +
                     " | loss " + format("%.6g", r.loss) + " | lr " + format("%.3e", r.lr) +
                     " | grad_norm " + format("%.4g", r.gradNorm) + " | " +
                     format("%.1f", r.stepSeconds * 1e3) + " ms/step | " +
                     format("%.0f", r.tokensPerSecond()) + " tok/s";
  if (r.lossScale != 1)
    line += " | loss_scale " + format("%g", r.lossScale);
  if (r.skipped)
    line += " | skipped";
  if (r.moe)
    line += " | aux " + format("%.3e", r.moe->auxLoss) + " | dropped " +
            format("%.0f", r.moe->dropped) + " | load max/mean " +
            format("%.2f", worstImbalance(*r.moe));
  return line;
}

std::string progressLine(const StepRecord &r, int64_t totalSteps, double etaSeconds) {
  constexpr int kWidth = 20;
  int done = totalSteps > 0 ? static_cast<int>(kWidth * r.step / totalSteps) : kWidth;
  done = std::clamp(done, 0, kWidth);
  std::string bar(static_cast<size_t>(done), '=');
  if (done < kWidth)
    bar += '>' + std::string(static_cast<size_t>(kWidth - done - 1), ' ');
  return "step " + std::to_string(r.step) + "/" + std::to_string(totalSteps) + " [" + bar +
         "] loss " + format("%.4f", r.loss) + " | " + format("%.0f", r.tokensPerSecond()) +
         " tok/s | ETA " + formatDuration(etaSeconds);
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  if (seconds < 1)
    return format("%.0f ms", seconds * 1e3);
  auto total = static_cast<long long>(std::llround(seconds));
  char buf[48];
  if (total < 60)
    std::snprintf(buf, sizeof(buf), "%llds", total);
  else if (total < 3600)
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", total / 60, total % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", total / 3600, total / 60 % 60);
  return buf;
}

JsonLinesWriter::~JsonLinesWriter() {
  if (file_)
    std::fclose(file_);
}

Status JsonLinesWriter::open(const std::string &path) {
  if (file_)
    return Status::error("log file " + path_ + " is open already");
  file_ = std::fopen(path.c_str(), "w");
  if (!file_)
    return Status::error("cannot create log file " + path + ": " + std::strerror(errno));
  path_ = path;
  return Status::ok();
}

Status JsonLinesWriter::write(const std::string &line) {
  if (!file_)
    return Status::error("the log file is not open");
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0)
    return Status::error("cannot write log file " + path_ + ": " + std::strerror(errno));
  return Status::ok();
}

Status JsonLinesWriter::close() {
  if (!file_)
    return Status::ok();
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0)
    return Status::error("cannot close log file " + path_ + ": " + std::strerror(errno));
  return Status::ok();
}

} // namespace megac::runtime::train
