// Training samples read lazily: one indexed dataset's windows (shuffled per epoch) and Megatron's
// weighted blend of several, so a rank reads only the rows it uses, straight from the mapping.
//
// A SampleSource is an endless sequence of rows of S+1 tokens indexed by the global sample
// number i (`megac train` step t, batch position j: i = t*B + j). Nothing is materialized per
// sample: memory depends on the datasets (a window permutation, sequence offsets), never on how
// many samples a run reads.
#pragma once

#include "runtime/data/IndexedDataset.h"
#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime::data {

/// Rows of rowLength() tokens by global sample number i >= 0.
class SampleSource {
public:
  virtual ~SampleSource() = default;
  virtual int64_t rowLength() const = 0;
  /// Writes sample i's rowLength() tokens into `out`. Not thread-safe (sources cache state).
  virtual Status read(int64_t i, std::span<int64_t> out) = 0;
  /// Where sample i comes from, for error messages ("PREFIX, window 17").
  virtual std::string describe(int64_t i) = 0;
};

/// The seed of epoch e's window permutation: the run's seed for epoch 0 (so a run that reads
/// fewer samples than the dataset has is cut exactly as before epochs existed), a SplitMix64
/// hash of (seed, e) for later epochs.
uint64_t epochSeed(uint64_t seed, int64_t epoch);

/// One dataset's windows (see trainingWindows: documents concatenated, windows of S+1 tokens at
/// stride S). Sample i is window perm_e[i mod N] with e = i / N: every epoch reads each window
/// once, epoch e in a Fisher-Yates order seeded by epochSeed(seed, e) (no seed: in order).
class WindowSamples final : public SampleSource {
public:
  /// Errors when the documents hold fewer than S+1 tokens; they name the dataset (`name`).
  static StatusOr<std::unique_ptr<WindowSamples>>
  create(std::shared_ptr<const IndexedDataset> dataset, std::string name, int64_t sequenceLength,
         std::optional<uint64_t> shuffleSeed, DocumentRange documents = {});

  int64_t rowLength() const override { return sequenceLength_ + 1; }
  Status read(int64_t i, std::span<int64_t> out) override;
  std::string describe(int64_t i) override;
  /// N: the windows of one epoch.
  int64_t windows() const { return windows_; }
  /// The window sample i reads.
  int64_t window(int64_t i);
  /// Window w's tokens (rowLength() of them) into `out`.
  void readWindow(int64_t w, std::span<int64_t> out) const;

private:
  WindowSamples() = default;
  std::shared_ptr<const IndexedDataset> dataset_;
  std::string name_;
  int64_t sequenceLength_ = 0, windows_ = 0, firstSequence_ = 0;
  std::vector<int64_t> starts_; // stream position of each sequence's first token, then the end
  std::optional<uint64_t> seed_;
  int64_t epoch_ = -1; // the epoch the order holds
  // That epoch's permutation of the windows: 4 bytes a window when N < 2^32, else 8.
  std::vector<uint32_t> order32_;
  std::vector<int64_t> order64_;
};

/// Megatron's blending index (BlendedDataset's build_blending_indices): sample i goes to the
/// dataset d maximizing w_d * max(i, 1) - taken_d (ties: the lowest d), w normalized to sum 1, and
/// is that dataset's taken_d-th sample. Each dataset's share of every prefix of n samples stays
/// within about one sample of w_d * n (at most 1 for two datasets, under 2 for any number).
/// Computed incrementally: reading samples in increasing order costs O(datasets) each; going back
/// restarts from 0.
class BlendingIndex {
public:
  /// Weights > 0 (not normalized).
  explicit BlendingIndex(std::vector<double> weights);
  struct Entry {
    int64_t dataset = 0, sample = 0;
  };
  Entry at(int64_t i);
  const std::vector<double> &weights() const { return weights_; } // normalized

private:
  std::vector<double> weights_;
  std::vector<int64_t> taken_;
  int64_t next_ = 0; // samples assigned so far
  Entry last_;       // sample next_ - 1's
};

/// A weighted blend of sources (each a dataset's samples) with the rows of each: sample i is
/// sample k of source d, (d, k) = BlendingIndex::at(i). The sources' row lengths must agree.
class BlendedSamples final : public SampleSource {
public:
  static StatusOr<std::unique_ptr<BlendedSamples>>
  create(std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights);

  int64_t rowLength() const override { return sources_[0]->rowLength(); }
  Status read(int64_t i, std::span<int64_t> out) override;
  std::string describe(int64_t i) override;

private:
  BlendedSamples(std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights)
      : sources_(std::move(sources)), index_(std::move(weights)) {}
  std::vector<std::unique_ptr<SampleSource>> sources_;
  BlendingIndex index_;
};

} // namespace megac::runtime::data
