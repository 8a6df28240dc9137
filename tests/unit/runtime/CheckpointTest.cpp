// Checkpoint directories (runtime/checkpoint): round trips, atomic replacement of `latest`,
// refusal of truncated, bit-flipped and missing files naming the file, fallback to the previous
// checkpoint, format version 1 still read, and the boxes that move data between shards: their
// intersection, and any box of a tensor assembled from the stored shards that cover it.
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/ShardFiles.h"
#include "runtime/io/Safetensors.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;
namespace ckpt = megac::runtime::checkpoint;
namespace fs = std::filesystem;

namespace {

/// A fresh directory under the test's temporary directory.
std::string freshDir(const std::string &name) {
  fs::path dir =
      fs::temp_directory_path() / ("megac_ckpt_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string readText(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

ckpt::CheckpointMeta metaOf(int64_t step) {
  ckpt::CheckpointMeta meta;
  meta.step = step;
  meta.dataPosition = step;
  meta.seed = 7;
  meta.model = "gpt \"tiny\"";
  meta.layout = "tp 2, pp 2, dp 1, vpp 1, zero 0";
  meta.lossScaler = ckpt::LossScalerState{32768.0, 3, 1};
  meta.config = {{"precision", "fp64"}};
  return meta;
}

TensorMap modelOf(double base) {
  TensorMap m;
  m["wte"] = f64({2, 3}, {base, base + 1, base + 2, base + 3, base + 4, base + 5});
  m["ln.weight"] = f32({3}, {1.5f, -2.0f, 0.25f});
  return m;
}

TensorMap optimizerOf(double base) {
  TensorMap m;
  m["adam.m.wte"] = f64({2, 3}, {base, 0, 0, 0, 0, -base});
  m["adam.v.wte"] = f64({2, 3}, {1e-300, 0, 0, 0, 0, base * base});
  return m;
}

void expectSameTensors(const TensorMap &got, const TensorMap &want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto &[name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name).dtype, t.dtype) << name;
    EXPECT_EQ(got.at(name).shape, t.shape) << name;
    EXPECT_EQ(got.at(name).bytes, t.bytes) << name;
  }
}

TEST(Checkpoint, Crc32MatchesZlib) {
  std::string text = "123456789";
  EXPECT_EQ(ckpt::crc32({reinterpret_cast<const uint8_t *>(text.data()), text.size()}),
            0xCBF43926u);
  EXPECT_EQ(ckpt::crc32({}), 0u);
  std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(ckpt::crc32({reinterpret_cast<const uint8_t *>(fox.data()), fox.size()}), 0x414FA339u);
  // The eight-byte steps agree with the byte-wise definition at every length and split.
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = uint8_t(i * 131 + (i >> 3));
  for (size_t n : {0, 1, 7, 8, 9, 63, 1000}) {
    uint32_t want = ~0u;
    for (size_t i = 0; i < n; ++i) {
      want ^= bytes[i];
      for (int k = 0; k < 8; ++k)
        want = (want & 1) ? 0xEDB88320u ^ (want >> 1) : want >> 1;
    }
    std::span<const uint8_t> all(bytes.data(), n);
    EXPECT_EQ(ckpt::crc32(all), ~want) << n;
    EXPECT_EQ(ckpt::crc32(all.subspan(n / 3), ckpt::crc32(all.first(n / 3))), ~want) << n;
  }
}

TEST(Checkpoint, RoundTripKeepsTensorsAndMeta) {
  std::string dir = freshDir("roundtrip");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(1), optimizerOf(2)).isOk());
  EXPECT_EQ(readText(dir + "/latest"), "4\n");
  EXPECT_FALSE(fs::exists(dir + "/step-4.tmp"));
  for (const char *file :
       {"model-rank-00000.safetensors", "optimizer-rank-00000.safetensors", "meta.json"})
    EXPECT_TRUE(fs::exists(dir + "/step-4/" + file)) << file;

  std::vector<std::string> refused;
  StatusOr<ckpt::Checkpoint> loaded = ckpt::loadLatestCheckpoint(dir, &refused);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_TRUE(refused.empty());
  EXPECT_EQ(loaded->path, dir + "/step-4");
  EXPECT_EQ(loaded->meta.step, 4);
  EXPECT_EQ(loaded->meta.dataPosition, 4);
  EXPECT_EQ(loaded->meta.seed, 7u);
  EXPECT_EQ(loaded->meta.model, "gpt \"tiny\"");
  EXPECT_EQ(loaded->meta.layout, "tp 2, pp 2, dp 1, vpp 1, zero 0");
  EXPECT_EQ(loaded->meta.config.at("precision"), "fp64");
  ASSERT_TRUE(loaded->meta.lossScaler.has_value());
  EXPECT_EQ(loaded->meta.lossScaler->scale, 32768.0);
  EXPECT_EQ(loaded->meta.lossScaler->growthTracker, 3);
  EXPECT_EQ(loaded->meta.lossScaler->hysteresisTracker, 1);
  expectSameTensors(loaded->model, modelOf(1));
  expectSameTensors(loaded->optimizer, optimizerOf(2));
}

TEST(Checkpoint, NoLossScalerRoundTripsAsNone) {
  std::string dir = freshDir("noscaler");
  ckpt::CheckpointMeta meta = metaOf(1);
  meta.lossScaler.reset();
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, meta, modelOf(1), {}).isOk());
  StatusOr<ckpt::Checkpoint> loaded = ckpt::readCheckpoint(dir + "/step-1");
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_FALSE(loaded->meta.lossScaler.has_value());
  EXPECT_TRUE(loaded->optimizer.empty());
}

TEST(Checkpoint, LatestMovesToTheNewestSaveAndOlderStepsStay) {
  std::string dir = freshDir("latest");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(2), modelOf(1), optimizerOf(1)).isOk());
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(3), optimizerOf(3)).isOk());
  EXPECT_EQ(readText(dir + "/latest"), "4\n");
  EXPECT_EQ(ckpt::listCheckpointSteps(dir), (std::vector<int64_t>{4, 2}));
  StatusOr<ckpt::Checkpoint> loaded = ckpt::loadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.step, 4);
  expectSameTensors(loaded->model, modelOf(3));
  // Saving a step again replaces it whole.
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(9), optimizerOf(9)).isOk());
  loaded = ckpt::loadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  expectSameTensors(loaded->model, modelOf(9));
  EXPECT_FALSE(fs::exists(dir + "/step-4.old"));
}

TEST(Checkpoint, AnInterruptedSaveLeavesThePreviousCheckpoint) {
  std::string dir = freshDir("interrupted");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(2), modelOf(1), optimizerOf(1)).isOk());
  // A save that died before its rename: a partial step-4.tmp and no step-4.
  fs::create_directories(dir + "/step-4.tmp");
  writeText(dir + "/step-4.tmp/model.safetensors", "partial");
  EXPECT_EQ(ckpt::listCheckpointSteps(dir), (std::vector<int64_t>{2}));
  StatusOr<ckpt::Checkpoint> loaded = ckpt::loadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.step, 2);
  // The next save of that step clears the leftover.
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(3), optimizerOf(3)).isOk());
  EXPECT_FALSE(fs::exists(dir + "/step-4.tmp"));
  EXPECT_EQ(ckpt::loadLatestCheckpoint(dir)->meta.step, 4);
}

TEST(Checkpoint, TruncatedFileIsRefusedNamingIt) {
  std::string dir = freshDir("truncated");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(1), optimizerOf(1)).isOk());
  std::string file = dir + "/step-4/model-rank-00000.safetensors";
  fs::resize_file(file, fs::file_size(file) - 5);
  StatusOr<ckpt::Checkpoint> loaded = ckpt::readCheckpoint(dir + "/step-4");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find(file), std::string::npos) << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("truncated"), std::string::npos);
  StatusOr<ckpt::Checkpoint> latest = ckpt::loadLatestCheckpoint(dir);
  ASSERT_FALSE(latest.isOk());
  EXPECT_NE(latest.status().message().find(file), std::string::npos);
}

TEST(Checkpoint, ParametersOnlyReadSkipsTheOptimizerFilesButVerifiesTheModels) {
  std::string dir = freshDir("parameters-only");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(1), optimizerOf(1)).isOk());
  std::string optimizer = dir + "/step-4/optimizer-rank-00000.safetensors";
  fs::resize_file(optimizer, fs::file_size(optimizer) - 5); // unread: no error
  StatusOr<ckpt::Checkpoint> model =
      ckpt::loadLatestCheckpoint(dir, nullptr, ckpt::CheckpointParts::parametersOnly);
  ASSERT_TRUE(model.isOk()) << model.status().message();
  EXPECT_EQ(model->model.size(), modelOf(1).size());
  EXPECT_TRUE(model->optimizer.empty());
  EXPECT_FALSE(ckpt::readCheckpoint(dir + "/step-4").isOk()); // a whole read refuses it
  std::string file = dir + "/step-4/model-rank-00000.safetensors";
  fs::resize_file(file, fs::file_size(file) - 5);
  StatusOr<ckpt::Checkpoint> refused =
      ckpt::readCheckpoint(dir + "/step-4", ckpt::CheckpointParts::parametersOnly);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find(file), std::string::npos);
}

TEST(Checkpoint, FlippedByteIsRefusedNamingIt) {
  std::string dir = freshDir("flipped");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(1), optimizerOf(1)).isOk());
  std::string file = dir + "/step-4/optimizer-rank-00000.safetensors";
  std::string bytes = readText(file);
  bytes[bytes.size() - 3] ^= 0x10; // inside a tensor: still a valid safetensors file
  writeText(file, bytes);
  StatusOr<ckpt::Checkpoint> loaded = ckpt::readCheckpoint(dir + "/step-4");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find(file), std::string::npos) << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("CRC32"), std::string::npos);
}

TEST(Checkpoint, CorruptLatestFallsBackToThePreviousCheckpoint) {
  std::string dir = freshDir("fallback");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(2), modelOf(1), optimizerOf(1)).isOk());
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(4), modelOf(3), optimizerOf(3)).isOk());
  std::string file = dir + "/step-4/model-rank-00000.safetensors";
  std::string bytes = readText(file);
  bytes[bytes.size() - 1] ^= 0x01;
  writeText(file, bytes);
  std::vector<std::string> refused;
  StatusOr<ckpt::Checkpoint> loaded = ckpt::loadLatestCheckpoint(dir, &refused);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.step, 2);
  expectSameTensors(loaded->model, modelOf(1));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find(file), std::string::npos) << refused[0];
  EXPECT_NE(refused[0].find("trying " + dir + "/step-2 next"), std::string::npos) << refused[0];
}

TEST(Checkpoint, MissingOrGarbledLatestFallsBackToTheNewestStep) {
  std::string dir = freshDir("nolatest");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(2), modelOf(1), optimizerOf(1)).isOk());
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(6), modelOf(3), optimizerOf(3)).isOk());
  fs::remove(dir + "/latest");
  EXPECT_EQ(ckpt::loadLatestCheckpoint(dir)->meta.step, 6);
  writeText(dir + "/latest", "garbage");
  std::vector<std::string> refused;
  StatusOr<ckpt::Checkpoint> loaded = ckpt::loadLatestCheckpoint(dir, &refused);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.step, 6);
}

TEST(Checkpoint, EmptyDirectoryAndBadMetaAreErrors) {
  std::string dir = freshDir("empty");
  StatusOr<ckpt::Checkpoint> none = ckpt::loadLatestCheckpoint(dir);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("no checkpoint"), std::string::npos);
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(1), modelOf(1), optimizerOf(1)).isOk());
  std::string meta = dir + "/step-1/meta.json";
  std::string text = readText(meta);
  text.replace(text.find("\"format_version\": 2"), 19, "\"format_version\": 9");
  writeText(meta, ckpt::sealMeta(text));
  StatusOr<ckpt::Checkpoint> loaded = ckpt::readCheckpoint(dir + "/step-1");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find(meta), std::string::npos);
  EXPECT_NE(loaded.status().message().find("format_version 9"), std::string::npos);
  writeText(meta, "{");
  loaded = ckpt::readCheckpoint(dir + "/step-1");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find("not valid JSON"), std::string::npos);
}

/// Saves step 1 and rewrites its meta.json with `edit` applied to the text, re-sealed (its
/// "meta_crc32" recomputed) so that the check behind the checksum is the one exercised.
std::string editedMeta(const std::string &name, const std::string &from, const std::string &to) {
  std::string dir = freshDir(name);
  EXPECT_TRUE(ckpt::saveCheckpoint(dir, metaOf(1), modelOf(1), optimizerOf(1)).isOk());
  std::string meta = dir + "/step-1/meta.json";
  std::string text = readText(meta);
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  writeText(meta, ckpt::sealMeta(text));
  return dir + "/step-1";
}

std::string refusal(const std::string &stepDir) {
  StatusOr<ckpt::CheckpointIndex> index = ckpt::readCheckpointIndex(stepDir);
  return index.isOk() ? "" : index.status().message();
}

// Issue 19, finding 1: one flipped digit of "step" resumed at another batch and learning-rate
// step, exit 0; a negative step read sample -12.
TEST(Checkpoint, Issue19StepMustMatchItsFolder) {
  EXPECT_NE(refusal(editedMeta("step9", "\"step\": 1", "\"step\": 9"))
                .find("\"step\": 9 is not the step of its folder 'step-1'"),
            std::string::npos);
  EXPECT_NE(refusal(editedMeta("stepneg", "\"step\": 1", "\"step\": -12")).find("negative"),
            std::string::npos);
  EXPECT_NE(refusal(editedMeta("stephuge", "\"step\": 1", "\"step\": 1000000000000"))
                .find("is not the step of its folder"),
            std::string::npos);
}

// Issue 19, finding 3: a shard path leaving the step folder loaded step 1's weights as step 2.
TEST(Checkpoint, Issue19FileNamesStayInTheStepFolder) {
  std::string refused = refusal(editedMeta("escape", "\"model-rank-00000.safetensors\": {",
                                           "\"../step-0/model-rank-00000.safetensors\": {"));
  EXPECT_NE(refused.find("is not a plain name in the step folder"), std::string::npos) << refused;
}

// Issue 19, finding 5: a loss scale of 0 silently skipped every step; a negative one was taken.
TEST(Checkpoint, Issue19LossScaleIsValidated) {
  for (const char *bad : {"0", "-4", "0.0"}) {
    std::string refused = refusal(editedMeta(std::string("scale") + bad, "\"scale\": 32768",
                                             std::string("\"scale\": ") + bad));
    EXPECT_NE(refused.find("is not a positive finite number"), std::string::npos)
        << bad << ": " << refused;
  }
  EXPECT_FALSE(refusal(editedMeta("scaleinf", "\"scale\": 32768", "\"scale\": 1e400")).empty());
}

// Issue 19, finding 10: a meta.json shape of [2^32, 2^32] wrapped the element count to 0, the
// tensor was allocated empty and written past (SIGSEGV); [2^40] and [2^61] threw bad_alloc.
TEST(Checkpoint, Issue19HugeShapesAreRefusedNotAllocated) {
  for (const char *shape : {"[4294967296, 4294967296]", "[1099511627776, 1]",
                            "[2305843009213693952, 1]", "[9223372036854775807, 2]"}) {
    std::string refused = refusal(editedMeta("huge", "\"shape\": [2, 3], \"shards\"",
                                             std::string("\"shape\": ") + shape + ", \"shards\""));
    EXPECT_NE(refused.find("tensor 'wte': shape "), std::string::npos) << shape << ": " << refused;
  }
  // A shard's offset + shape past int64 is outside its tensor, not a wrapped small number.
  std::string refused = refusal(
      editedMeta("hugeoffset", "\"offset\": [0, 0]", "\"offset\": [9223372036854775807, 0]"));
  EXPECT_NE(refused.find("lies outside its shape"), std::string::npos) << refused;
  // readBox checks the size it allocates even for a table built in memory.
  std::string dir = freshDir("hugebox");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(1), modelOf(1), optimizerOf(1)).isOk());
  StatusOr<ckpt::CheckpointIndex> index = ckpt::readCheckpointIndex(dir + "/step-1");
  ASSERT_TRUE(index.isOk()) << index.status().message();
  ckpt::ShardReader reader(*index);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{int64_t(1) << 32, int64_t(1) << 32},
                                     std::vector<int64_t>{int64_t(1) << 40, 1}}) {
    StatusOr<HostTensor> box = reader.readBox(index->parameters, "wte", {{0, 0}, shape});
    ASSERT_FALSE(box.isOk());
    EXPECT_NE(box.status().message().find("tensor 'wte': shape"), std::string::npos)
        << box.status().message();
  }
}

// Issue 19, finding 1: meta.json had no checksum, so one flipped digit went unnoticed.
TEST(Checkpoint, Issue19MetaJsonChecksumIsVerified) {
  std::string dir = freshDir("metacrc");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, metaOf(1), modelOf(1), optimizerOf(1)).isOk());
  std::string meta = dir + "/step-1/meta.json";
  std::string text = readText(meta);
  ASSERT_NE(text.find("\"meta_crc32\": \""), std::string::npos) << text;
  EXPECT_EQ(ckpt::sealMeta(text), text); // sealing is idempotent
  size_t at = text.find("\"data_position\": 1");
  ASSERT_NE(at, std::string::npos);
  text[at + 17] = '2'; // data_position 1 -> 2: still valid JSON, still a sane value
  writeText(meta, text);
  std::string refused = refusal(dir + "/step-1");
  EXPECT_NE(refused.find("meta.json has CRC32 "), std::string::npos) << refused;
  EXPECT_NE(refused.find("(corrupt or edited)"), std::string::npos) << refused;
  // The loader falls back to no checkpoint rather than resuming from the edited one.
  EXPECT_FALSE(ckpt::loadLatestCheckpoint(dir).isOk());
  writeText(meta, ckpt::sealMeta(text));
  EXPECT_EQ(refusal(dir + "/step-1"), "");
  std::string garbled = text;
  garbled.replace(garbled.find("\"meta_crc32\": \"") + 15, 8, "zz");
  writeText(meta, garbled);
  EXPECT_NE(refusal(dir + "/step-1").find("is not 8 hex digits"), std::string::npos);
  // Found by the checkpoint fuzz driver: a malformed seal after the last '}' threw out_of_range.
  std::string odd = "{\"a\": 1} \"meta_crc32\": \"0\"";
  EXPECT_EQ(ckpt::sealMeta(odd), odd);
}

// Issue 19, finding 2: the fingerprint saved with a checkpoint round-trips through meta.json, and
// a different model is refused naming what differs.
TEST(Checkpoint, Issue19ModelFingerprintRoundTripsAndNamesTheDifference) {
  ckpt::ModelFingerprint two{"gpt:layers=2,hidden=8", "00000000000000aa",
                             {{"h0.w", {8, 8}}, {"h1.w", {8, 8}}, {"wte", {16, 8}}}};
  ckpt::CheckpointMeta meta = metaOf(1);
  meta.fingerprint = two;
  std::string dir = freshDir("fingerprint");
  ASSERT_TRUE(ckpt::saveCheckpoint(dir, meta, modelOf(1), optimizerOf(1)).isOk());
  StatusOr<ckpt::CheckpointIndex> index = ckpt::readCheckpointIndex(dir + "/step-1");
  ASSERT_TRUE(index.isOk()) << index.status().message();
  ASSERT_TRUE(index->meta.fingerprint.has_value());
  EXPECT_EQ(index->meta.fingerprint->parameters, two.parameters);
  EXPECT_EQ(index->meta.fingerprint->graphHash, two.graphHash);
  EXPECT_EQ(ckpt::fingerprintMismatch(two, two), "");

  ckpt::ModelFingerprint one{"gpt:layers=1,hidden=8", "00000000000000bb",
                             {{"h0.w", {8, 8}}, {"wte", {16, 8}}}};
  EXPECT_EQ(ckpt::fingerprintMismatch(two, one),
            "the checkpoint has 3 parameters, this model 2: h1.w not in this model (checkpoint of "
            "gpt:layers=2,hidden=8, this run gpt:layers=1,hidden=8)");
  EXPECT_NE(ckpt::fingerprintMismatch(one, two).find("this model has parameters the checkpoint "
                                                     "lacks: h1.w"),
            std::string::npos);
  ckpt::ModelFingerprint wider = two;
  wider.parameters["h1.w"] = {8, 16};
  EXPECT_NE(ckpt::fingerprintMismatch(two, wider).find("parameter 'h1.w' has shape [8, 8]; this "
                                                       "model's has [8, 16]"),
            std::string::npos);
  ckpt::ModelFingerprint heads = two; // same tensors, another computation (heads 2 vs 4)
  heads.model = "gpt:layers=2,hidden=8,heads=4";
  heads.graphHash = "00000000000000cc";
  EXPECT_NE(ckpt::fingerprintMismatch(two, heads).find("computes something else"),
            std::string::npos);
}

TEST(CheckpointShards, ExtractAndInsertBoxesRoundTrip) {
  // A [4, 6] tensor cut into 2 x 3 boxes of [2, 2], as tp/dp shards would cut it.
  std::vector<double> values(24);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = double(i);
  HostTensor whole = f64({4, 6}, values);
  HostTensor rebuilt = HostTensor::zeros(DType::f64, {4, 6});
  for (int64_t r = 0; r < 4; r += 2)
    for (int64_t c = 0; c < 6; c += 2) {
      std::vector<int64_t> offset = {r, c}, shape = {2, 2};
      HostTensor box = ckpt::extractBox(whole, offset, shape);
      EXPECT_EQ(valuesOf<double>(box),
                (std::vector<double>{double(r * 6 + c), double(r * 6 + c + 1),
                                     double((r + 1) * 6 + c), double((r + 1) * 6 + c + 1)}));
      ckpt::insertBox(rebuilt, box, offset);
    }
  EXPECT_EQ(rebuilt.bytes, whole.bytes);
  // A scalar and a 1-d slice.
  HostTensor scalar = f64({}, {3.5});
  EXPECT_EQ(valuesOf<double>(ckpt::extractBox(scalar, {}, {})), (std::vector<double>{3.5}));
  std::vector<int64_t> off = {4}, len = {3};
  HostTensor row = ckpt::extractBox(f64({8}, {0, 1, 2, 3, 4, 5, 6, 7}), off, len);
  EXPECT_EQ(valuesOf<double>(row), (std::vector<double>{4, 5, 6}));
}

TEST(CheckpointShards, IntersectBoxes) {
  using Box = ckpt::Box;
  EXPECT_EQ(ckpt::intersectBoxes(Box{{0, 0}, {4, 6}}, Box{{2, 3}, {4, 4}}), (Box{{2, 3}, {2, 3}}));
  EXPECT_EQ(ckpt::intersectBoxes(Box{{1, 2}, {2, 2}}, Box{{0, 0}, {4, 6}}), (Box{{1, 2}, {2, 2}}));
  // Touching edges share nothing; neither do disjoint boxes.
  EXPECT_FALSE(ckpt::intersectBoxes(Box{{0, 0}, {2, 6}}, Box{{2, 0}, {2, 6}}).has_value());
  EXPECT_FALSE(ckpt::intersectBoxes(Box{{0}, {3}}, Box{{5}, {1}}).has_value());
  EXPECT_FALSE(ckpt::intersectBoxes(Box{{0}, {0}}, Box{{0}, {4}}).has_value());
  // A scalar intersects itself.
  EXPECT_EQ(ckpt::intersectBoxes(Box{{}, {}}, Box{{}, {}}), (Box{{}, {}}));
}

/// A [4, 6] f64 tensor 0..23 stored as three shards in three rank files (rows 0-1 in rank 0's,
/// rows 2-3 split by columns into ranks 1 and 2) and a [2] f32 tensor in rank 0's file.
std::string saveThreeShards(const std::string &name) {
  std::string dir = freshDir(name);
  StatusOr<std::string> tmp = ckpt::beginSave(dir, 3);
  EXPECT_TRUE(tmp.isOk());
  std::vector<double> values(24);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = double(i);
  HostTensor whole = f64({4, 6}, values);
  HostTensor top = ckpt::extractBox(whole, std::vector<int64_t>{0, 0}, std::vector<int64_t>{2, 6});
  HostTensor left = ckpt::extractBox(whole, std::vector<int64_t>{2, 0}, std::vector<int64_t>{2, 2});
  HostTensor right =
      ckpt::extractBox(whole, std::vector<int64_t>{2, 2}, std::vector<int64_t>{2, 4});
  HostTensor bias = f32({2}, {0.5f, -1.0f});
  auto of = [](const HostTensor &t) { return [&t]() -> StatusOr<HostTensor> { return t; }; };
  ckpt::FileTable files;
  auto write = [&](const std::string &file, const std::vector<ckpt::ShardToWrite> &tensors) {
    StatusOr<ckpt::FileRecord> record = ckpt::writeShardFile(*tmp + "/" + file, tensors, {});
    ASSERT_TRUE(record.isOk()) << record.status().message();
    files[file] = *record;
  };
  write("model-rank-00000.safetensors",
        {{"w", DType::f64, {2, 6}, of(top)}, {"b", DType::f32, {2}, of(bias)}});
  write("model-rank-00001.safetensors", {{"w", DType::f64, {2, 2}, of(left)}});
  write("model-rank-00002.safetensors", {{"w", DType::f64, {2, 4}, of(right)}});
  ckpt::TensorTable params;
  params["w"] = {DType::f64,
                 {4, 6},
                 {{"model-rank-00000.safetensors", {0, 0}, {2, 6}},
                  {"model-rank-00001.safetensors", {2, 0}, {2, 2}},
                  {"model-rank-00002.safetensors", {2, 2}, {2, 4}}}};
  params["b"] = {DType::f32, {2}, {{"model-rank-00000.safetensors", {0}, {2}}}};
  EXPECT_TRUE(ckpt::commitSave(dir, *tmp, metaOf(3), params, {}, files).isOk());
  return dir;
}

TEST(CheckpointShards, BoxesAreAssembledFromTheShardsThatCoverThem) {
  std::string dir = saveThreeShards("assemble");
  StatusOr<ckpt::Checkpoint> whole = ckpt::readCheckpoint(dir + "/step-3");
  ASSERT_TRUE(whole.isOk()) << whole.status().message();
  std::vector<double> values(24);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = double(i);
  EXPECT_EQ(valuesOf<double>(whole->model.at("w")), values);
  EXPECT_EQ(valuesOf<float>(whole->model.at("b")), (std::vector<float>{0.5f, -1.0f}));

  // Every box of a 2-row / 3-column grid (a different layout from the stored one) and one
  // straddling all three shards.
  StatusOr<ckpt::CheckpointIndex> index = ckpt::readCheckpointIndex(dir + "/step-3");
  ASSERT_TRUE(index.isOk()) << index.status().message();
  EXPECT_EQ(index->formatVersion, 2);
  ckpt::ShardReader reader(*index);
  std::vector<ckpt::Box> boxes = {{{1, 1}, {2, 4}}, {{0, 0}, {4, 6}}};
  for (int64_t r = 0; r < 4; r += 2)
    for (int64_t c = 0; c < 6; c += 3)
      boxes.push_back({{r, c}, {2, 3}});
  for (const ckpt::Box &box : boxes) {
    StatusOr<HostTensor> got = reader.readBox(index->parameters, "w", box);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    EXPECT_EQ(got->bytes, ckpt::extractBox(whole->model.at("w"), box.offset, box.shape).bytes)
        << shapeString(box.offset) << " " << shapeString(box.shape);
  }
}

TEST(CheckpointShards, UncoveredBoxAndMissingRankFileAreRefused) {
  std::string dir = saveThreeShards("uncovered");
  StatusOr<ckpt::CheckpointIndex> index = ckpt::readCheckpointIndex(dir + "/step-3");
  ASSERT_TRUE(index.isOk()) << index.status().message();
  index->parameters["w"].shards.pop_back(); // rows 2-3, columns 2-5 now stored nowhere
  ckpt::ShardReader reader(*index);
  EXPECT_TRUE(reader.readBox(index->parameters, "w", {{0, 0}, {2, 6}}).isOk());
  StatusOr<HostTensor> gap = reader.readBox(index->parameters, "w", {{1, 1}, {2, 2}});
  ASSERT_FALSE(gap.isOk());
  EXPECT_NE(gap.status().message().find("do not cover"), std::string::npos)
      << gap.status().message();

  std::string file = dir + "/step-3/model-rank-00001.safetensors";
  fs::remove(file);
  StatusOr<ckpt::Checkpoint> loaded = ckpt::readCheckpoint(dir + "/step-3");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find(file), std::string::npos) << loaded.status().message();
  // The boxes that need only the other files still read.
  StatusOr<ckpt::CheckpointIndex> again = ckpt::readCheckpointIndex(dir + "/step-3");
  ckpt::ShardReader partial(*again);
  EXPECT_TRUE(partial.readBox(again->parameters, "w", {{0, 0}, {2, 6}}).isOk());
  StatusOr<HostTensor> missing = partial.readBox(again->parameters, "w", {{2, 0}, {1, 1}});
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find(file), std::string::npos);
}

TEST(Checkpoint, FormatVersion1IsStillRead) {
  // Version 1: model.safetensors and optimizer.safetensors with whole tensors.
  std::string dir = freshDir("version1");
  std::string step = dir + "/step-5";
  fs::create_directories(step);
  std::string files;
  for (auto [name, tensors] : {std::pair{"model.safetensors", modelOf(2)},
                               std::pair{"optimizer.safetensors", optimizerOf(2)}}) {
    ASSERT_TRUE(writeSafetensors(step + "/" + name, tensors).isOk());
    std::string bytes = readText(step + "/" + name);
    char crc[16];
    std::snprintf(crc, sizeof(crc), "%08x",
                  ckpt::crc32({reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()}));
    files += std::string(files.empty() ? "" : ", ") + "\"" + name +
             "\": {\"bytes\": " + std::to_string(bytes.size()) + ", \"crc32\": \"" + crc + "\"}";
  }
  writeText(step + "/meta.json",
            "{\"format_version\": 1, \"step\": 5, \"data_position\": 5, \"seed\": 3, "
            "\"model\": \"m\", \"layout\": \"tp 1\", \"config\": {}, \"loss_scaler\": null, "
            "\"files\": {" +
                files + "}}");
  writeText(dir + "/latest", "5\n");
  StatusOr<ckpt::Checkpoint> loaded = ckpt::loadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.step, 5);
  expectSameTensors(loaded->model, modelOf(2));
  expectSameTensors(loaded->optimizer, optimizerOf(2));
  // Its files are verified as before.
  std::string file = step + "/optimizer.safetensors";
  std::string bytes = readText(file);
  bytes[bytes.size() - 2] ^= 0x01;
  writeText(file, bytes);
  loaded = ckpt::readCheckpoint(step);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find(file), std::string::npos);
}

} // namespace
