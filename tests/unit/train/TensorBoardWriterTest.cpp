// TensorBoard event files: CRC-32C against published vectors, records and events byte for byte
// against tensorboard's own writer (the expected bytes below were printed by tensorboard 2.14's
// RecordWriter and event_pb2 in the test venv), the scalars of a step, the file written, and
// RunLogs writing both logs.
#include "runtime/train/TensorBoardWriter.h"
#include "runtime/train/RunLogs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

using namespace megac;
using namespace megac::runtime::train;

namespace {

std::string bytes(std::initializer_list<unsigned> values) {
  std::string s;
  for (unsigned v : values)
    s.push_back(static_cast<char>(v));
  return s;
}

uint32_t readU32(const std::string &s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// The data of each record of an event file, every CRC checked.
std::vector<std::string> readRecords(const std::string &data);

uint64_t readU64(const std::string &s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Event{wall_time 1.5, file_version "brain.Event:2"}.
const std::string kFileVersion =
    bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x1a, 0x0d, 'b',
           'r',  'a',  'i',  'n',  '.',  'E',  'v',  'e',  'n',  't',  ':',  '2'});
// Event{wall_time 1.5, step 3, summary{value{tag "train/loss", simple_value 0.25}}}.
const std::string kLossEvent =
    bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x10, 0x03,
           0x2a, 0x13, 0x0a, 0x11, 0x0a, 0x0a, 't',  'r',  'a',  'i',  'n',
           '/',  'l',  'o',  's',  's',  0x15, 0x00, 0x00, 0x80, 0x3e});

std::vector<std::string> readRecords(const std::string &data) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at + 12 <= data.size()) {
    uint64_t length = readU64(data, at);
    EXPECT_EQ(readU32(data, at + 8), maskedCrc32c(data.substr(at, 8)));
    if (at + 16 + length > data.size())
      break;
    records.push_back(data.substr(at + 12, length));
    EXPECT_EQ(readU32(data, at + 12 + length), maskedCrc32c(records.back()));
    at += 16 + length;
  }
  EXPECT_EQ(at, data.size()) << "a truncated record";
  return records;
}

} // namespace

TEST(TensorBoard, Crc32cMatchesPublishedVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u); // the CRC catalogue's check value
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI), B.4: 32 zero bytes, 32 0xff bytes, 0x00..0x1f.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i)
    ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(maskedCrc32c("123456789"), 0xC78AB0E5u); // tensorboard's masked_crc32c
}

TEST(TensorBoard, RecordFramingMatchesTensorBoardsWriter) {
  EXPECT_EQ(tfRecord("hello"),
            bytes({0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xea, 0xb2, 0x04,
                   0x3e, 'h',  'e',  'l',  'l',  'o',  0xbb, 0x1f, 0x1c, 0x19}));
  std::string record = tfRecord(kLossEvent);
  ASSERT_EQ(record.size(), kLossEvent.size() + 16);
  EXPECT_EQ(readU64(record, 0), kLossEvent.size());
  EXPECT_EQ(readU32(record, 8), maskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, kLossEvent.size()), kLossEvent);
  EXPECT_EQ(readU32(record, 12 + kLossEvent.size()), 0x921b3043u);
  // The file_version record as tensorboard frames it (length 24, its masked CRC a3 7f 4b 22).
  EXPECT_EQ(tfRecord(kFileVersion),
            bytes({0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x7f, 0x4b, 0x22}) +
                kFileVersion + bytes({0x2a, 0x28, 0x64, 0x6c}));
}

TEST(TensorBoard, EventsMatchTensorFlowsProtos) {
  EXPECT_EQ(fileVersionEvent(1.5), kFileVersion);
  EXPECT_EQ(scalarEvent(1.5, 3, {"train/loss", 0.25}), kLossEvent);
  // A zero is written (simple_value sits in a oneof, as in TensorFlow's summary.proto).
  EXPECT_EQ(scalarEvent(1.5, 3, {"a", 0.0}),
            bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x10, 0x03, 0x2a,
                   0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a',  0x15, 0x00, 0x00, 0x00, 0x00}));
}

TEST(TensorBoard, StepScalarsAreTheJsonLogsKeys) {
  StepRecord r;
  r.step = 2;
  r.loss = 4.5;
  r.lr = 1e-3;
  r.gradNorm = 0.75;
  r.lossScale = 65536;
  r.skipped = true;
  r.tokens = 512;
  r.stepSeconds = 0.25;
  std::vector<Scalar> plain = stepScalars(r);
  std::vector<std::string> tags;
  for (const Scalar &s : plain)
    tags.push_back(s.tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"train/loss", "train/lr", "train/grad_norm",
                                            "train/loss_scale", "train/skipped", "train/tokens",
                                            "train/tokens_per_s", "train/step_time_s"}));
  EXPECT_EQ(plain[4].value, 1.0);
  EXPECT_EQ(plain[6].value, 2048.0);
  r.moe = StepRecord::Moe{{{3, 5}, {8, 0}}, 2, 0.125};
  std::vector<Scalar> moe = stepScalars(r);
  ASSERT_EQ(moe.size(), plain.size() + 6);
  EXPECT_EQ(moe[8].tag, "train/moe_aux_loss");
  EXPECT_EQ(moe[8].value, 0.125);
  EXPECT_EQ(moe[9].tag, "train/moe_dropped");
  EXPECT_EQ(moe[12].tag, "train/moe_load/layer1/expert0");
  EXPECT_EQ(moe[12].value, 8.0);
  // Throughput and memory, as the JSON log has them: 6e9 FLOP/token x 512 tokens / 0.25 s / 2
  // ranks = 6.144e12 FLOP/s per rank, MFU 0.6144 of 1e13.
  StepRecord known = r;
  known.moe.reset();
  known.flopsPerToken = 6e9;
  known.ranks = 2;
  known.peakFlopsPerRank = 1e13;
  known.memPlanBytes = 4096;
  known.memRssPeakBytes = 8192;
  std::vector<Scalar> more = stepScalars(known);
  ASSERT_EQ(more.size(), plain.size() + 4);
  EXPECT_EQ(more[8].tag, "train/model_tflops_per_rank");
  EXPECT_DOUBLE_EQ(more[8].value, 6.144);
  EXPECT_EQ(more[9].tag, "train/mfu");
  EXPECT_DOUBLE_EQ(more[9].value, 0.6144);
  EXPECT_EQ(more[10].tag, "train/mem_plan_bytes");
  EXPECT_EQ(more[10].value, 4096.0);
  EXPECT_EQ(more[11].tag, "train/mem_rss_peak_bytes");
  EXPECT_EQ(more[11].value, 8192.0);
  std::vector<Scalar> val = evalScalars("val", 2.0);
  ASSERT_EQ(val.size(), 2u);
  EXPECT_EQ(val[0].tag, "val/loss");
  EXPECT_EQ(val[1].tag, "val/perplexity");
  EXPECT_EQ(val[1].value, std::exp(2.0));
}

TEST(TensorBoard, WriterWritesFramedEventsIntoANewFile) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("megac_tensorboard_test_" + std::to_string(::getpid())) / "run";
  std::filesystem::remove_all(dir.parent_path());
  std::string first, second;
  {
    TensorBoardWriter writer;
    ASSERT_TRUE(writer.open(dir.string()).isOk()); // creates the missing directories
    first = writer.path();
    EXPECT_EQ(std::filesystem::path(first).parent_path(), dir);
    EXPECT_EQ(std::filesystem::path(first).filename().string().rfind("events.out.tfevents.", 0),
              0u);
    ASSERT_TRUE(writer.write(7, {{"train/loss", 0.25}, {"train/lr", 1e-3}}).isOk());
    // Flushed: the file holds both events before close.
    std::ifstream in(first, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = 0;
    int records = 0;
    while (at < data.size()) {
      ASSERT_LE(at + 12, data.size());
      uint64_t length = readU64(data, at);
      EXPECT_EQ(readU32(data, at + 8), maskedCrc32c(data.substr(at, 8)));
      ASSERT_LE(at + 16 + length, data.size());
      EXPECT_EQ(readU32(data, at + 12 + length), maskedCrc32c(data.substr(at + 12, length)));
      at += 16 + length;
      ++records;
    }
    EXPECT_EQ(records, 3); // file_version, then one per scalar
    EXPECT_EQ(at, data.size());
    ASSERT_TRUE(writer.close().isOk());
    // A second run in the same directory never truncates the first's file.
    TensorBoardWriter again;
    ASSERT_TRUE(again.open(dir.string()).isOk());
    second = again.path();
    ASSERT_TRUE(again.close().isOk());
  }
  EXPECT_NE(first, second);
  EXPECT_GT(std::filesystem::file_size(first), std::filesystem::file_size(second));
  std::filesystem::remove_all(dir.parent_path());

  TensorBoardWriter bad;
  Status s = bad.open("/proc/megac-no-such-dir/run");
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("/proc/megac-no-such-dir/run"), std::string::npos) << s.message();
  TensorBoardWriter closed;
  EXPECT_FALSE(closed.write(1, {{"train/loss", 1.0}}).isOk());
}

TEST(TensorBoard, WriteErrorsAreAStatus) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("megac_tensorboard_full_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TensorBoardWriter writer;
  ASSERT_TRUE(writer.open(dir.string()).isOk());
  // A file-size limit just above what the file holds: the next write fails with EFBIG (SIGXFSZ
  // ignored), as on a full disk; restored before any assertion.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*previous)(int) = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = std::filesystem::file_size(writer.path()) + 8;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s = writer.write(1, {{"train/loss", 1.0}, {"train/lr", 1e-3}});
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("cannot write TensorBoard event file " + writer.path()),
            std::string::npos)
      << s.message();
  (void)writer.close();
  std::filesystem::remove_all(dir);
}

TEST(TensorBoard, RunLogsWriteTheSameValuesToBothLogs) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("megac_run_logs_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string json = (dir / "log.jsonl").string(), tensorboard = (dir / "tb").string();
  std::filesystem::create_directories(dir);
  StepRecord r;
  r.step = 2;
  r.loss = 4.5;
  r.lr = 1e-3;
  r.tokens = 512;
  r.stepSeconds = 0.25;
  {
    RunLogs logs;
    ASSERT_TRUE(logs.open(json, tensorboard).isOk());
    ASSERT_TRUE(logs.step(r).isOk());
    ASSERT_TRUE(logs.evaluation(2, "val", 2.0).isOk());
    ASSERT_TRUE(logs.close().isOk());
  }
  EXPECT_EQ(readFile(json), stepRecordJson(r) + "\n" + evalRecordJson(2, "val", 2.0) + "\n");
  EXPECT_EQ(evalRecordJson(2, "val", 2.0),
            "{\"step\": 2, \"val_loss\": 2, \"val_ppl\": 7.3890560989306504}");
  std::vector<std::filesystem::path> files(std::filesystem::directory_iterator(tensorboard),
                                           std::filesystem::directory_iterator{});
  ASSERT_EQ(files.size(), 1u);
  std::vector<std::string> records = readRecords(readFile(files[0].string()));
  ASSERT_EQ(records.size(), 1 + stepScalars(r).size() + 2);
  // Wall times differ run to run: compare each event after its wall_time field (9 bytes).
  std::vector<Scalar> scalars = stepScalars(r);
  for (const Scalar &s : evalScalars("val", 2.0))
    scalars.push_back(s);
  for (size_t i = 0; i < scalars.size(); ++i)
    EXPECT_EQ(records[i + 1].substr(9), scalarEvent(0.5, 2, scalars[i]).substr(9))
        << scalars[i].tag;

  // Nothing asked (the other ranks): every call succeeds and writes nothing.
  RunLogs none;
  ASSERT_TRUE(none.open(std::nullopt, std::nullopt).isOk());
  EXPECT_TRUE(none.step(r).isOk());
  EXPECT_TRUE(none.evaluation(2, "test", 1.0).isOk());
  EXPECT_TRUE(none.close().isOk());
  RunLogs bad;
  Status s = bad.open(std::nullopt, (dir / "log.jsonl" / "tb").string());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("cannot create the TensorBoard directory"), std::string::npos)
      << s.message();
  std::filesystem::remove_all(dir);
}
