// A TrainSession without the CLI: a tiny zoo GPT trained on rows the test writes, its loss
// falling, validation through the same program, and a run saved after two steps and resumed in
// a new session ending bit for bit where the uninterrupted run ends.
#include "driver/TrainSession.h"
#include "driver/TrainData.h"

#include "runtime/io/Npy.h"
#include "runtime/io/Safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace megac::driver {
namespace {

namespace fs = std::filesystem;

class TrainSessionTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megac_session_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // 16 rows of 9 tokens with a pattern a model can learn: row r is r, r+1, ... mod 32.
    HostTensor rows = HostTensor::zeros(DType::i64, {16, 9});
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t t = 0; t < 9; ++t)
        rows.data<int64_t>()[r * 9 + t] = (r + t) % 32;
    ASSERT_TRUE(runtime::writeNpy(path("tokens.npy"), rows).isOk());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string &name) const { return (dir_ / name).string(); }

  /// `steps` steps of a 1-layer GPT, batch 4 in micro-batches of 2, at lr 1e-2.
  RunConfig config(int64_t steps) const {
    RunConfig c;
    c.model = ModelSource::fromSpec("gpt:layers=1,hidden=16,heads=2,seq=8,vocab=32").value();
    setDataPath(c.data, path("tokens.npy"));
    c.lr.totalSteps = steps;
    c.lr.lr = 1e-2;
    c.data.batch.globalBatch = 4;
    c.training.layout.microBatch = 2;
    c.training.layout.dp = 0;
    c.seed = 7;
    EXPECT_TRUE(finishRunConfig(c).isOk());
    return c;
  }

  /// The parameters of a session, gathered as `megac train --save-weights` writes them.
  TensorMap weights(TrainSession &session, const std::string &name) const {
    EXPECT_TRUE(session.saveWeights(path(name)).isOk());
    StatusOr<TensorMap> read = runtime::readSafetensors(path(name));
    EXPECT_TRUE(read.isOk()) << read.status().message();
    return read.isOk() ? std::move(read).value() : TensorMap{};
  }

  fs::path dir_;
};

TEST_F(TrainSessionTest, TrainsAndEvaluates) {
  RunConfig c = config(6);
  c.data.evalPath = path("tokens.npy");
  c.data.evalInterval = 3;
  c.data.evalIters = 2;
  StatusOr<std::unique_ptr<TrainSession>> session = TrainSession::create(c);
  ASSERT_TRUE(session.isOk()) << session.status().message();
  TrainSession &s = **session;
  EXPECT_EQ(s.sequenceLength(), 8);
  EXPECT_EQ(s.vocab(), 32);
  EXPECT_TRUE(s.evaluates(DataPart::validation));
  EXPECT_FALSE(s.evaluates(DataPart::test));
  std::vector<double> losses;
  for (int64_t step = 1; step <= 6; ++step) {
    StatusOr<runtime::train::StepRecord> record = s.step();
    ASSERT_TRUE(record.isOk()) << record.status().message();
    EXPECT_EQ(record->step, step);
    EXPECT_EQ(record->tokens, 4 * 8);
    EXPECT_GT(record->gradNorm, 0);
    losses.push_back(record->loss);
  }
  EXPECT_EQ(s.stepsDone(), 6);
  // Untrained, the loss is about ln(32) = 3.47; six steps on a repeating pattern lower it.
  EXPECT_NEAR(losses.front(), std::log(32.0), 0.5);
  EXPECT_LT(losses.back(), losses.front());
  StatusOr<double> validation = s.evaluate(DataPart::validation);
  ASSERT_TRUE(validation.isOk()) << validation.status().message();
  EXPECT_TRUE(std::isfinite(*validation));
  EXPECT_GT(*validation, 0);
  EXPECT_EQ(s.evaluate(DataPart::test).status().message(), "this run has no test data");
}

TEST_F(TrainSessionTest, SavesAndResumesBitForBit) {
  StatusOr<std::unique_ptr<TrainSession>> whole = TrainSession::create(config(4));
  ASSERT_TRUE(whole.isOk()) << whole.status().message();
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE((*whole)->step().isOk());
  TensorMap expected = weights(**whole, "whole.safetensors");

  RunConfig first = config(4);
  first.checkpoint.saveDir = path("checkpoints");
  StatusOr<std::unique_ptr<TrainSession>> a = TrainSession::create(first);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  ASSERT_TRUE((*a)->step().isOk());
  ASSERT_TRUE((*a)->step().isOk());
  Status saved = (*a)->save();
  ASSERT_TRUE(saved.isOk()) << saved.message();

  RunConfig second = config(4);
  second.checkpoint.loadDir = path("checkpoints");
  std::vector<std::string> warnings;
  SessionHooks hooks{[&](const std::string &w) { warnings.push_back(w); }};
  StatusOr<std::unique_ptr<TrainSession>> b = TrainSession::create(second, hooks);
  ASSERT_TRUE(b.isOk()) << b.status().message();
  StatusOr<Resumed> resumed = (*b)->load();
  ASSERT_TRUE(resumed.isOk()) << resumed.status().message();
  EXPECT_EQ(resumed->step, 2);
  EXPECT_EQ(resumed->layout, "tp 1, pp 1, dp 1, vpp 1, zero 0");
  EXPECT_EQ((*b)->stepsDone(), 2);
  EXPECT_TRUE(warnings.empty());
  for (int64_t step = 3; step <= 4; ++step) {
    StatusOr<runtime::train::StepRecord> record = (*b)->step();
    ASSERT_TRUE(record.isOk()) << record.status().message();
    EXPECT_EQ(record->step, step);
  }
  TensorMap got = weights(**b, "resumed.safetensors");
  ASSERT_EQ(got.size(), expected.size());
  for (const auto &[name, tensor] : expected) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name).bytes, tensor.bytes) << name << " differs after resuming";
  }
}

TEST_F(TrainSessionTest, GivenBatchesEqualTheDataTheyCopy) {
  // Session A reads its data; session B is given, step by step, the rows A's step reads
  // (samples step * global batch + j of the same data): same plan, same rows, so the records'
  // loss and grad norm and the final weights are equal bit for bit.
  RunConfig c = config(3);
  StatusOr<std::unique_ptr<TrainSession>> a = TrainSession::create(c);
  StatusOr<std::unique_ptr<TrainSession>> b = TrainSession::create(c);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  ASSERT_TRUE(b.isOk()) << b.status().message();
  StatusOr<std::unique_ptr<runtime::data::SampleSource>> data = openSamples(c, DataPart::train);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<int64_t> rows(4 * 9);
    for (int64_t j = 0; j < 4; ++j)
      ASSERT_TRUE((*data)->read(step * 4 + j, std::span(rows).subspan(j * 9, 9)).isOk());
    StatusOr<runtime::train::StepRecord> fromData = (*a)->step();
    StatusOr<runtime::train::StepRecord> given = (*b)->step(rows, {4, 9});
    ASSERT_TRUE(fromData.isOk()) << fromData.status().message();
    ASSERT_TRUE(given.isOk()) << given.status().message();
    EXPECT_EQ(given->step, step + 1);
    EXPECT_EQ(given->loss, fromData->loss) << "step " << step + 1;
    EXPECT_EQ(given->gradNorm, fromData->gradNorm) << "step " << step + 1;
  }
  TensorMap want = weights(**a, "a.safetensors"), got = weights(**b, "b.safetensors");
  ASSERT_EQ(got.size(), want.size());
  for (const auto &[name, tensor] : want)
    EXPECT_EQ(got.at(name).bytes, tensor.bytes) << name;
  // A batch of another shape, a short buffer, a token outside the vocabulary: errors naming
  // them, and no step taken.
  std::vector<int64_t> rows(4 * 9, 1);
  EXPECT_EQ((*b)->step(rows, {9, 4}).status().message(),
            "the batch given to step 4 has shape [9, 4]; a step takes [global batch, S + 1] = "
            "[4, 9] tokens");
  EXPECT_EQ((*b)->step(std::span(rows).first(35), {4, 9}).status().message(),
            "the batch given to step 4 holds 35 tokens, not 36 (shape [4, 9])");
  rows[2 * 9 + 5] = 32;
  EXPECT_EQ((*b)->step(rows, {4, 9}).status().message(),
            "token 32 at row 2, position 5 of the batch given to step 4 is outside the model's "
            "vocabulary [0, 32)");
  EXPECT_EQ((*b)->stepsDone(), 3);
}

TEST_F(TrainSessionTest, ErrorsAreStatusesNamingTheProblem) {
  RunConfig c = config(2);
  c.model = ModelSource::fromSpec("gpt:layers=1,hidden=16,heads=2,seq=16,vocab=32").value();
  TrainSession session(c);
  Status s = session.open();
  EXPECT_EQ(s.message(), "--model: the model's seq=16 differs from the data's S = 8 (rows of S+1 "
                         "= 9 tokens)");
  c = config(2);
  c.model = ModelSource::fromSpec("gpt:layers=1,hidden=16,heads=2,seq=8,vocab=16")
                .value(); // the data has tokens >= 16
  TrainSession small(c);
  s = small.open();
  EXPECT_NE(s.message().find("outside the model's vocabulary [0, 16)"), std::string::npos)
      << s.message();
  TrainSession noCheckpoint(config(2));
  ASSERT_TRUE(noCheckpoint.open().isOk());
  EXPECT_EQ(noCheckpoint.save().message(), "the run has no checkpoint directory (--save DIR)");
}

} // namespace
} // namespace megac::driver
