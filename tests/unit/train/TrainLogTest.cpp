// Step logs: JSON lines parse back with every field, progress and log lines, durations.
#include "runtime/train/TrainLog.h"

#include "support/Json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fstream>
#include <unistd.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::train;

namespace {
StepRecord sample() {
  StepRecord r;
  r.step = 3;
  r.loss = 4.851234567890123;
  r.lr = 1e-3;
  r.gradNorm = 1.25;
  r.tokens = 2048;
  r.stepSeconds = 0.5;
  return r;
}
} // namespace

TEST(TrainLog, JsonHasEveryFieldAndRoundTrips) {
  auto v = json::parse(stepRecordJson(sample()));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->find("step")->integer, 3);
  EXPECT_EQ(v->find("loss")->number, 4.851234567890123); // exactly: %.17g round-trips
  EXPECT_EQ(v->find("lr")->number, 1e-3);
  EXPECT_EQ(v->find("grad_norm")->number, 1.25);
  EXPECT_EQ(v->find("loss_scale")->number, 1.0);
  EXPECT_EQ(v->find("skipped")->kind, json::Value::Kind::boolean);
  EXPECT_FALSE(v->find("skipped")->boolean);
  EXPECT_EQ(v->find("tokens")->integer, 2048);
  EXPECT_EQ(v->find("tokens_per_s")->number, 4096.0);
  EXPECT_EQ(v->find("step_time_s")->number, 0.5);
  EXPECT_EQ(stepRecordJson(sample()).find('\n'), std::string::npos);
}

TEST(TrainLog, ThroughputAndMemoryKeysWhenKnown) {
  // Without FLOPs, a peak or memory figures the record has none of the keys.
  auto plain = json::parse(stepRecordJson(sample()));
  ASSERT_TRUE(plain.isOk()) << plain.status().message();
  for (const char *key : {"model_tflops_per_rank", "mfu", "mem_plan_bytes", "mem_rss_peak_bytes"})
    EXPECT_EQ(plain->find(key), nullptr) << key;
  // 2048 tokens in 0.5 s on 4 ranks at 6e9 FLOP per token: 6e9 * 2048 / 0.5 / 4 = 6.144e12
  // FLOP/s per rank; over a 1e13 FLOP/s peak, MFU 0.6144.
  StepRecord r = sample();
  r.flopsPerToken = 6e9;
  r.ranks = 4;
  r.memPlanBytes = 123456789;
  r.memRssPeakBytes = 987654321;
  auto noPeak = json::parse(stepRecordJson(r));
  ASSERT_TRUE(noPeak.isOk()) << noPeak.status().message();
  EXPECT_DOUBLE_EQ(noPeak->find("model_tflops_per_rank")->number, 6.144);
  EXPECT_EQ(noPeak->find("mfu"), nullptr); // no peak known: no MFU rather than a made-up one
  EXPECT_EQ(noPeak->find("mem_plan_bytes")->integer, 123456789);
  EXPECT_EQ(noPeak->find("mem_rss_peak_bytes")->integer, 987654321);
  r.peakFlopsPerRank = 1e13;
  auto v = json::parse(stepRecordJson(r));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_DOUBLE_EQ(v->find("mfu")->number, 0.6144);
  // --log-interval's mean keeps them consistent: the rate follows the mean tokens and time.
  LogInterval interval;
  StepRecord slow = r;
  slow.step = 1;
  slow.stepSeconds = 1.5; // mean step time 1 s: 6e9 * 2048 / 1 / 4 = 3.072e12
  ASSERT_FALSE(interval.add(slow, 2, 10));
  std::optional<StepRecord> mean = interval.add(r, 2, 10);
  ASSERT_TRUE(mean);
  EXPECT_DOUBLE_EQ(mean->modelTflopsPerRank(), 3.072);
}

TEST(TrainLog, NonFiniteNumbersAreNull) {
  StepRecord r = sample();
  r.loss = NAN;
  r.gradNorm = INFINITY;
  auto v = json::parse(stepRecordJson(r));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->find("loss")->kind, json::Value::Kind::null);
  EXPECT_EQ(v->find("grad_norm")->kind, json::Value::Kind::null);
}

TEST(TrainLog, LogAndProgressLines) {
  std::string line = stepLogLine(sample(), 20);
  EXPECT_EQ(line, "step 3/20 | loss 4.85123 | lr 1.000e-03 | grad_norm 1.25 | 500.0 ms/step | "
                  "4096 tok/s");
  std::string progress = progressLine(sample(), 20, 125);
  EXPECT_EQ(progress, "step 3/20 [===>                ] loss 4.8512 | 4096 tok/s | ETA 2m05s");
  StepRecord last = sample();
  last.step = 20;
  EXPECT_NE(progressLine(last, 20, 0).find("[====================]"), std::string::npos);
}

TEST(TrainLog, Durations) {
  EXPECT_EQ(formatDuration(0.25), "250 ms");
  EXPECT_EQ(formatDuration(12.4), "12s");
  EXPECT_EQ(formatDuration(185), "3m05s");
  EXPECT_EQ(formatDuration(3720), "1h02m");
  EXPECT_EQ(formatDuration(NAN), "?");
}

TEST(TrainLog, JsonLinesWriterWritesOneLinePerRecord) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("megac_train_log_test_" + std::to_string(::getpid()) + ".jsonl"))
                         .string();
  {
    JsonLinesWriter writer;
    ASSERT_TRUE(writer.open(path).isOk());
    ASSERT_TRUE(writer.write(stepRecordJson(sample())).isOk());
    StepRecord r = sample();
    r.step = 4;
    ASSERT_TRUE(writer.write(stepRecordJson(r)).isOk());
    ASSERT_TRUE(writer.close().isOk());
  }
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto v = json::parse(line);
    ASSERT_TRUE(v.isOk()) << v.status().message();
    EXPECT_EQ(v->find("step")->integer, 3 + n);
    ++n;
  }
  EXPECT_EQ(n, 2);
  std::filesystem::remove(path);
  JsonLinesWriter bad;
  Status s = bad.open("/nonexistent-dir/x.jsonl");
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.jsonl"), std::string::npos);
}

TEST(TrainLog, LogIntervalPrintsEveryNthAndTheLastStepWithMeans) {
  LogInterval interval;
  std::vector<StepRecord> printed;
  for (int64_t step = 1; step <= 7; ++step) {
    StepRecord r = sample();
    r.step = step;
    r.loss = double(step); // means: (1+2+3)/3, (4+5+6)/3, 7
    r.stepSeconds = 0.1 * double(step);
    r.gradNorm = 10.0 * double(step); // the last step's, not a mean
    if (std::optional<StepRecord> line = interval.add(r, 3, 7))
      printed.push_back(*line);
  }
  ASSERT_EQ(printed.size(), 3u);
  EXPECT_EQ(printed[0].step, 3);
  EXPECT_DOUBLE_EQ(printed[0].loss, 2.0);
  EXPECT_DOUBLE_EQ(printed[0].stepSeconds, 0.2);
  EXPECT_DOUBLE_EQ(printed[0].gradNorm, 30.0);
  EXPECT_EQ(printed[1].step, 6);
  EXPECT_DOUBLE_EQ(printed[1].loss, 5.0);
  EXPECT_EQ(printed[2].step, 7);
  EXPECT_DOUBLE_EQ(printed[2].loss, 7.0);
  EXPECT_EQ(printed[2].tokens, 2048);
}

TEST(TrainLog, LogIntervalOfOnePrintsEveryStepUnchanged) {
  LogInterval interval;
  std::optional<StepRecord> line = interval.add(sample(), 1, 20);
  ASSERT_TRUE(line);
  EXPECT_EQ(stepLogLine(*line, 20), stepLogLine(sample(), 20));
}
