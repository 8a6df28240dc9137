// Megatron's indexed dataset (runtime/data): writer -> reader round trips, a reference file
// written byte by byte from the format description, refusal of corrupt files naming them, and
// the training windows cut from the token stream, their epochs, and Megatron's blends.
#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Samples.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <unistd.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::data;
namespace fs = std::filesystem;

namespace {

/// A fresh prefix under a fresh temporary directory.
std::string freshPrefix(const std::string &name) {
  fs::path dir =
      fs::temp_directory_path() / ("megac_idx_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return (dir / "data").string();
}

std::string readBytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Little-endian bytes of `value`, written out one by one (not memcpy'd).
template <typename T> std::string le(T value) {
  std::string out;
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  return out;
}

/// Builds PREFIX with documents {{1,2,3}}, {{4},{5,6}} (two sequences), {{65535, 0}}.
void buildSample(const std::string &prefix, TokenType type) {
  auto b = IndexedDatasetBuilder::create(prefix, type);
  ASSERT_TRUE(b.isOk()) << b.status().message();
  ASSERT_TRUE(b->addDocument(std::vector<int64_t>{1, 2, 3}).isOk());
  ASSERT_TRUE(b->addSequence(std::vector<int64_t>{4}).isOk());
  ASSERT_TRUE(b->addSequence(std::vector<int64_t>{5, 6}).isOk());
  b->endDocument();
  ASSERT_TRUE(b->addDocument(std::vector<int64_t>{type == TokenType::u16 ? 65535 : 7, 0}).isOk());
  EXPECT_EQ(b->sequenceCount(), 4);
  EXPECT_EQ(b->documentCount(), 3);
  EXPECT_EQ(b->tokenCount(), 8);
  ASSERT_TRUE(b->finish().isOk());
}

} // namespace

TEST(IndexedDataset, WriterReaderRoundTrip) {
  for (TokenType type : {TokenType::u16, TokenType::i32, TokenType::i64, TokenType::u8}) {
    std::string prefix = freshPrefix("roundtrip" + std::to_string(int(type)));
    buildSample(prefix, type);
    EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
    EXPECT_FALSE(fs::exists(prefix + ".idx.tmp"));
    auto ds = IndexedDataset::open(prefix);
    ASSERT_TRUE(ds.isOk()) << ds.status().message();
    EXPECT_EQ(ds->tokenType(), type);
    EXPECT_EQ(ds->sequenceCount(), 4);
    EXPECT_EQ(ds->documentCount(), 3);
    EXPECT_EQ(ds->totalTokens(), 8);
    EXPECT_EQ(ds->documentIndex(), (std::vector<int64_t>{0, 1, 3, 4}));
    EXPECT_EQ(ds->sequence(0), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(ds->sequence(1), (std::vector<int64_t>{4}));
    EXPECT_EQ(ds->sequence(2), (std::vector<int64_t>{5, 6}));
    int64_t big = type == TokenType::u16 ? 65535 : 7;
    EXPECT_EQ(ds->sequence(3), (std::vector<int64_t>{big, 0}));
    int64_t item = static_cast<int64_t>(tokenTypeSize(uint8_t(type)));
    EXPECT_EQ(ds->pointer(2), 4 * item);
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(prefix + ".bin")), 8 * item);
  }
}

TEST(IndexedDataset, ReadsReferenceLayout) {
  // Written from the format description alone: magic, u64 version, u8 dtype code (4 = int32),
  // u64 sequences, u64 document index entries, i32 sizes, i64 byte pointers, i64 doc index.
  std::string prefix = freshPrefix("reference");
  std::string idx = std::string("MMIDIDX\0\0", 9) + le<uint64_t>(1) + std::string(1, '\x04') +
                    le<uint64_t>(3) + le<uint64_t>(3);
  for (int32_t size : {2, 0, 3})
    idx += le<int32_t>(size);
  for (int64_t ptr : {0, 8, 8})
    idx += le<int64_t>(ptr);
  for (int64_t d : {0, 2, 3})
    idx += le<int64_t>(d);
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 3 * 8);
  std::string bin;
  for (int32_t t : {10, -1, 70000, 5, 6})
    bin += le<int32_t>(t);
  writeBytes(prefix + ".idx", idx);
  writeBytes(prefix + ".bin", bin);
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.isOk()) << ds.status().message();
  EXPECT_EQ(ds->tokenType(), TokenType::i32);
  EXPECT_EQ(ds->sequenceCount(), 3);
  EXPECT_EQ(ds->documentCount(), 2);
  EXPECT_EQ(ds->sequence(0), (std::vector<int64_t>{10, -1}));
  EXPECT_TRUE(ds->sequence(1).empty());
  EXPECT_EQ(ds->sequence(2), (std::vector<int64_t>{70000, 5, 6}));

  // The writer produces exactly these bytes for the same content.
  std::string out = freshPrefix("reference_out");
  auto b = IndexedDatasetBuilder::create(out, TokenType::i32);
  ASSERT_TRUE(b.isOk());
  ASSERT_TRUE(b->addSequence(std::vector<int64_t>{10, -1}).isOk());
  ASSERT_TRUE(b->addSequence(std::vector<int64_t>{}).isOk());
  b->endDocument();
  ASSERT_TRUE(b->addDocument(std::vector<int64_t>{70000, 5, 6}).isOk());
  ASSERT_TRUE(b->finish().isOk());
  EXPECT_EQ(readBytes(out + ".idx"), idx);
  EXPECT_EQ(readBytes(out + ".bin"), bin);
}

TEST(IndexedDataset, RefusesCorruptFiles) {
  std::string prefix = freshPrefix("corrupt");
  buildSample(prefix, TokenType::u16);
  std::string idx = readBytes(prefix + ".idx"), bin = readBytes(prefix + ".bin");
  auto expectError = [&](const std::string &file, const std::string &words) {
    auto ds = IndexedDataset::open(prefix);
    ASSERT_FALSE(ds.isOk());
    EXPECT_NE(ds.status().message().find(prefix + file), std::string::npos)
        << ds.status().message();
    EXPECT_NE(ds.status().message().find(words), std::string::npos) << ds.status().message();
  };

  std::string bad = idx;
  bad[0] = 'X';
  writeBytes(prefix + ".idx", bad);
  expectError(".idx", "MMIDIDX");

  bad = idx;
  bad[9] = 2; // version 2
  writeBytes(prefix + ".idx", bad);
  expectError(".idx", "version 2");

  bad = idx;
  bad[17] = 9; // no such dtype
  writeBytes(prefix + ".idx", bad);
  expectError(".idx", "dtype code 9");

  writeBytes(prefix + ".idx", idx.substr(0, idx.size() - 8));
  expectError(".idx", "file length");

  writeBytes(prefix + ".idx", idx);
  writeBytes(prefix + ".bin", bin.substr(0, bin.size() - 1));
  expectError(".bin", "truncated");

  fs::remove(prefix + ".bin");
  expectError(".bin", "cannot open");

  writeBytes(prefix + ".bin", bin);
  ASSERT_TRUE(IndexedDataset::open(prefix).isOk());
}

TEST(IndexedDataset, BuilderRefusesTokensOutsideItsType) {
  std::string prefix = freshPrefix("range");
  auto b = IndexedDatasetBuilder::create(prefix, TokenType::u16);
  ASSERT_TRUE(b.isOk());
  Status s = b->addSequence(std::vector<int64_t>{1, 65536});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("65536"), std::string::npos);
  EXPECT_FALSE(IndexedDatasetBuilder::create(prefix, TokenType::f32).isOk());
}

TEST(IndexedDataset, UnfinishedBuilderLeavesNothing) {
  std::string prefix = freshPrefix("unfinished");
  {
    auto b = IndexedDatasetBuilder::create(prefix, TokenType::u16);
    ASSERT_TRUE(b.isOk());
    ASSERT_TRUE(b->addDocument(std::vector<int64_t>{1, 2}).isOk());
  }
  EXPECT_FALSE(fs::exists(prefix + ".bin"));
  EXPECT_FALSE(fs::exists(prefix + ".idx"));
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
}

TEST(IndexedDataset, TrainingWindowsSpanSequences) {
  // Stream 1..8 over sequences {1,2,3}, {4}, {5,6}, {65535,0}: S = 2 gives windows of 3 tokens
  // at stride 2: (8 - 1) / 2 = 3 windows.
  std::string prefix = freshPrefix("windows");
  buildSample(prefix, TokenType::u16);
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.isOk());
  auto w = trainingWindows(*ds, 2, 100, std::nullopt);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  EXPECT_EQ(w->total, 3);
  EXPECT_EQ(w->rows, 3);
  EXPECT_EQ(w->tokens, (std::vector<int64_t>{1, 2, 3, 3, 4, 5, 5, 6, 65535}));

  auto first = trainingWindows(*ds, 2, 2, std::nullopt); // only the rows a run reads
  ASSERT_TRUE(first.isOk());
  EXPECT_EQ(first->rows, 2);
  EXPECT_EQ(first->tokens, (std::vector<int64_t>{1, 2, 3, 3, 4, 5}));

  auto whole = trainingWindows(*ds, 7, 100, std::nullopt);
  ASSERT_TRUE(whole.isOk());
  EXPECT_EQ(whole->tokens, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 65535, 0}));
  auto tooLong = trainingWindows(*ds, 8, 100, std::nullopt);
  ASSERT_FALSE(tooLong.isOk());
  EXPECT_NE(tooLong.status().message().find("8 tokens"), std::string::npos);
}

TEST(IndexedDataset, SplitPartsAreContiguousDocumentRanges) {
  // Megatron's --split 949,50,1 over 1000 documents: [0, 949), [949, 999), [999, 1000).
  auto parts = splitDocuments(1000, {949, 50, 1});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].first, 0);
  EXPECT_EQ(parts[0].last, 949);
  EXPECT_EQ(parts[1].first, 949);
  EXPECT_EQ(parts[1].last, 999);
  EXPECT_EQ(parts[2].first, 999);
  EXPECT_EQ(parts[2].last, 1000);
  // Few documents: rounding may leave a part empty, never out of order or uncovered.
  auto few = splitDocuments(3, {1, 1, 0});
  EXPECT_EQ(few[0].last, 2); // round(1.5) = 2
  EXPECT_EQ(few[1].first, 2);
  EXPECT_EQ(few[1].last, 3);
  EXPECT_EQ(few[2].first, 3);
  EXPECT_EQ(few[2].last, 3);
}

TEST(IndexedDataset, WindowsOfADocumentRange) {
  // Documents {1,2,3}, {4 | 5,6}, {65535,0}: the second and third documents are the stream
  // 4 5 6 65535 0, whose windows of 3 at stride 2 are [4 5 6] and [6 65535 0].
  std::string prefix = freshPrefix("range");
  buildSample(prefix, TokenType::u16);
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.isOk());
  auto w = trainingWindows(*ds, 2, 100, std::nullopt, {1, 3});
  ASSERT_TRUE(w.isOk()) << w.status().message();
  EXPECT_EQ(w->total, 2);
  EXPECT_EQ(w->tokens, (std::vector<int64_t>{4, 5, 6, 6, 65535, 0}));
  auto firstDoc = trainingWindows(*ds, 2, 100, std::nullopt, {0, 1});
  ASSERT_TRUE(firstDoc.isOk());
  EXPECT_EQ(firstDoc->tokens, (std::vector<int64_t>{1, 2, 3}));
  auto empty = trainingWindows(*ds, 2, 100, std::nullopt, {3, 3});
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("documents [3, 3)"), std::string::npos);
  EXPECT_FALSE(trainingWindows(*ds, 2, 100, std::nullopt, {2, 5}).isOk());
}

TEST(IndexedDataset, ShuffledWindowsArePermutationFixedBySeed) {
  std::string prefix = freshPrefix("shuffle");
  {
    auto b = IndexedDatasetBuilder::create(prefix, TokenType::i32);
    ASSERT_TRUE(b.isOk());
    std::vector<int64_t> doc(401);
    for (int64_t i = 0; i < 401; ++i)
      doc[i] = i;
    ASSERT_TRUE(b->addDocument(doc).isOk());
    ASSERT_TRUE(b->finish().isOk());
  }
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.isOk());
  auto a = trainingWindows(*ds, 4, 1000, uint64_t(7));
  auto again = trainingWindows(*ds, 4, 1000, uint64_t(7));
  auto other = trainingWindows(*ds, 4, 1000, uint64_t(8));
  ASSERT_TRUE(a.isOk() && again.isOk() && other.isOk());
  ASSERT_EQ(a->rows, 100);
  EXPECT_EQ(a->tokens, again->tokens);
  EXPECT_NE(a->tokens, other->tokens);
  std::vector<bool> seen(100, false);
  for (int64_t r = 0; r < a->rows; ++r) {
    int64_t first = a->tokens[r * 5];
    ASSERT_EQ(first % 4, 0);
    for (int64_t t = 0; t < 5; ++t) // each row is a window [w*4, w*4 + 4] of the stream
      EXPECT_EQ(a->tokens[r * 5 + t], first + t);
    EXPECT_FALSE(seen[first / 4]);
    seen[first / 4] = true;
  }
}

TEST(IndexedDataset, MutatedIndexNeverReadsOutOfBounds) {
  // Every truncation of the .idx is refused; every single-byte overwrite either is refused or
  // opens a dataset whose every sequence lies inside the .bin (the reader's bounds check).
  std::string prefix = freshPrefix("mutated");
  buildSample(prefix, TokenType::u16);
  std::string idx = readBytes(prefix + ".idx");
  int64_t binBytes = static_cast<int64_t>(fs::file_size(prefix + ".bin"));
  for (size_t n = 0; n < idx.size(); ++n) {
    writeBytes(prefix + ".idx", idx.substr(0, n));
    EXPECT_FALSE(IndexedDataset::open(prefix).isOk()) << "truncated to " << n << " bytes";
  }
  int64_t opened = 0;
  for (size_t at = 0; at < idx.size(); ++at)
    for (unsigned char value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string bad = idx;
      bad[at] = static_cast<char>(value);
      writeBytes(prefix + ".idx", bad);
      auto ds = IndexedDataset::open(prefix);
      if (!ds.isOk())
        continue;
      ++opened;
      int64_t item = static_cast<int64_t>(tokenTypeSize(uint8_t(ds->tokenType())));
      for (int64_t i = 0; i < ds->sequenceCount(); ++i) {
        ASSERT_GE(ds->sequenceLength(i), 0);
        ASSERT_LE(ds->pointer(i) + ds->sequenceLength(i) * item, binBytes);
        ds->sequence(i);
      }
    }
  EXPECT_GT(opened, 0); // overwrites with the same byte, at least, still open
}

namespace {

/// A dataset of one document, the stream 0, 1, ..., tokens - 1 (window w starts with w * S).
std::shared_ptr<const IndexedDataset> countingDataset(const std::string &name, int64_t tokens) {
  std::string prefix = freshPrefix(name);
  auto b = IndexedDatasetBuilder::create(prefix, TokenType::i32);
  EXPECT_TRUE(b.isOk());
  std::vector<int64_t> doc(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i)
    doc[i] = i;
  EXPECT_TRUE(b->addDocument(doc).isOk());
  EXPECT_TRUE(b->finish().isOk());
  auto ds = IndexedDataset::open(prefix);
  EXPECT_TRUE(ds.isOk());
  return std::make_shared<const IndexedDataset>(std::move(ds).value());
}

} // namespace

TEST(Samples, EveryEpochReadsEachWindowOnceInANewOrder) {
  auto ds = countingDataset("epochs", 401); // S = 4: 100 windows
  auto samples = WindowSamples::create(ds, "counting", 4, uint64_t(7));
  ASSERT_TRUE(samples.isOk()) << samples.status().message();
  WindowSamples &w = **samples;
  ASSERT_EQ(w.windows(), 100);
  // Epoch 0 is exactly the windows trainingWindows cuts (a run shorter than an epoch is unchanged).
  auto cut = trainingWindows(*ds, 4, 1000, uint64_t(7));
  ASSERT_TRUE(cut.isOk());
  std::vector<int64_t> row(5);
  for (int64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(w.read(i, row).isOk());
    EXPECT_EQ(row,
              std::vector<int64_t>(cut->tokens.begin() + i * 5, cut->tokens.begin() + i * 5 + 5));
  }
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    std::vector<bool> seen(100, false);
    for (int64_t i = epoch * 100; i < epoch * 100 + 100; ++i) {
      int64_t window = w.window(i);
      ASSERT_TRUE(w.read(i, row).isOk());
      EXPECT_EQ(row[0], window * 4); // the window's tokens
      EXPECT_FALSE(seen[window]) << "window " << window << " twice in epoch " << epoch;
      seen[window] = true;
      order.push_back(window);
    }
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  // Random access (a resumed run) reads what sequential access read.
  EXPECT_EQ(w.window(150), orders[1][50]);
  EXPECT_EQ(w.window(3), orders[0][3]);
  EXPECT_EQ(w.window(299), orders[2][99]);
  // Without a seed every epoch reads the windows in order.
  auto plain = WindowSamples::create(ds, "counting", 4, std::nullopt);
  ASSERT_TRUE(plain.isOk());
  for (int64_t i : {0, 57, 100, 257})
    EXPECT_EQ((*plain)->window(i), i % 100);
  EXPECT_EQ(epochSeed(7, 0), 7u);
  EXPECT_NE(epochSeed(7, 1), epochSeed(7, 2));
}

namespace {

/// |taken_d(n) - w_d n| over every prefix n <= samples of a blend of `weights`.
double worstBlendError(const std::vector<double> &weights, int64_t samples) {
  BlendingIndex index(weights);
  std::vector<int64_t> taken(weights.size(), 0);
  double worst = 0;
  for (int64_t i = 0; i < samples; ++i) {
    BlendingIndex::Entry e = index.at(i);
    EXPECT_EQ(e.sample, taken[e.dataset]) << "sample " << i; // each dataset's samples in order
    ++taken[e.dataset];
    for (size_t d = 0; d < weights.size(); ++d)
      worst = std::max(worst, std::abs(double(taken[d]) - index.weights()[d] * double(i + 1)));
  }
  return worst;
}

} // namespace

// Megatron's targets are w_d * max(i, 1), one sample behind the prefix of i + 1 samples (and
// samples 0 and 1 share a target), so two datasets stay within one sample, not half of one.
TEST(Samples, BlendIsExactToWithinASampleAtEveryPrefix) {
  EXPECT_LE(worstBlendError({0.7, 0.3}, 10000), 1.0);
  EXPECT_LE(worstBlendError({7, 3}, 10000), 1.0); // normalized
  EXPECT_LT(worstBlendError({0.5, 0.3, 0.2}, 10000), 1.5);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.001, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> two = {u(rng), u(rng)}, three = {u(rng), u(rng), u(rng)};
    EXPECT_LE(worstBlendError(two, 2000), 1.0);
    EXPECT_LT(worstBlendError(three, 2000), 1.5); // measured up to ~1.35
    // More datasets: Megatron's greedy rule can exceed one sample, never two.
    std::vector<double> many(6);
    for (double &w : many)
      w = u(rng);
    EXPECT_LT(worstBlendError(many, 2000), 2.0);
  }
}

TEST(Samples, BlendIndexIsDeterministicWithTiesToTheFirstDataset) {
  BlendingIndex equal({1, 1});
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < 6; ++i)
    picked.push_back(equal.at(i).dataset);
  EXPECT_EQ(picked, (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  // Any access order gives the same entries as a fresh index read in order.
  BlendingIndex a({0.2, 0.5, 0.3}), b({0.2, 0.5, 0.3});
  std::vector<BlendingIndex::Entry> inOrder;
  for (int64_t i = 0; i < 300; ++i)
    inOrder.push_back(a.at(i));
  for (int64_t i : {250, 3, 3, 299, 0, 120, 121}) {
    BlendingIndex::Entry e = b.at(i);
    EXPECT_EQ(e.dataset, inOrder[i].dataset) << i;
    EXPECT_EQ(e.sample, inOrder[i].sample) << i;
  }
}

TEST(Samples, BlendedSamplesReadTheChosenDatasetsSamples) {
  auto small = countingDataset("blend_small", 41);  // S = 4: 10 windows, tokens 0..40
  auto large = countingDataset("blend_large", 801); // 200 windows
  std::vector<std::unique_ptr<SampleSource>> sources;
  for (auto ds : {small, large}) {
    auto w = WindowSamples::create(ds, "d", 4, uint64_t(3));
    ASSERT_TRUE(w.isOk());
    sources.push_back(std::move(w).value());
  }
  auto reference = WindowSamples::create(small, "d", 4, uint64_t(3));
  auto referenceLarge = WindowSamples::create(large, "d", 4, uint64_t(3));
  auto blend = BlendedSamples::create(std::move(sources), {0.5, 0.5});
  ASSERT_TRUE(blend.isOk()) << blend.status().message();
  BlendingIndex index({0.5, 0.5});
  std::vector<int64_t> got(5), want(5);
  for (int64_t i = 0; i < 100; ++i) { // 50 samples of the small one: 5 epochs of it
    ASSERT_TRUE((*blend)->read(i, got).isOk());
    BlendingIndex::Entry e = index.at(i);
    ASSERT_TRUE((e.dataset == 0 ? **reference : **referenceLarge).read(e.sample, want).isOk());
    EXPECT_EQ(got, want) << "sample " << i;
  }
  std::vector<std::unique_ptr<SampleSource>> one;
  one.push_back(std::move(reference).value());
  auto bad = BlendedSamples::create(std::move(one), {-1});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("not a positive number"), std::string::npos);
}
