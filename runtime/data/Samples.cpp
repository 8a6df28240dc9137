// Lazily read training samples: per-epoch shuffled windows and Megatron's blends (Samples.h).
#include "runtime/data/Samples.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace megac::runtime::data {

namespace {

uint64_t splitmix64(uint64_t &state) {
  uint64_t x = (state += 0x9e3779b97f4a7c15ULL);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

uint64_t epochSeed(uint64_t seed, int64_t epoch) {
  if (epoch == 0)
    return seed;
  uint64_t state = static_cast<uint64_t>(epoch);
  uint64_t mixed = seed ^ splitmix64(state);
  return splitmix64(mixed);
}

StatusOr<std::unique_ptr<WindowSamples>>
WindowSamples::create(std::shared_ptr<const IndexedDataset> dataset, std::string name,
                      int64_t sequenceLength, std::optional<uint64_t> shuffleSeed,
                      DocumentRange documents) {
  int64_t s = sequenceLength;
  if (s < 1)
    return Status::error("the sequence length must be >= 1, not " + std::to_string(s));
  // The sequences of the documents in range: [firstSeq, lastSeq).
  const std::vector<int64_t> &docs = dataset->documentIndex();
  int64_t docCount = dataset->documentCount();
  int64_t lastDoc = documents.last < 0 ? docCount : documents.last;
  if (documents.first < 0 || documents.first > lastDoc || lastDoc > docCount)
    return Status::error("documents [" + std::to_string(documents.first) + ", " +
                         std::to_string(lastDoc) + ") are not within the dataset's " +
                         std::to_string(docCount));
  int64_t firstSeq = docCount > 0 ? docs[documents.first] : 0;
  int64_t lastSeq = docCount > 0 ? docs[lastDoc] : dataset->sequenceCount();
  std::unique_ptr<WindowSamples> w(new WindowSamples());
  // starts_[k]: the stream position of sequence firstSeq + k's first token.
  w->starts_.assign(static_cast<size_t>(lastSeq - firstSeq) + 1, 0);
  for (int64_t k = firstSeq; k < lastSeq; ++k)
    w->starts_[k - firstSeq + 1] = w->starts_[k - firstSeq] + dataset->sequenceLength(k);
  int64_t total = w->starts_.back();
  if (total < s + 1)
    return Status::error((documents.first == 0 && lastDoc == docCount
                              ? std::string("the dataset")
                              : "documents [" + std::to_string(documents.first) + ", " +
                                    std::to_string(lastDoc) + ") of the dataset") +
                         " hold " + std::to_string(total) +
                         " tokens, fewer than one window of seq + 1 = " + std::to_string(s + 1));
  w->dataset_ = std::move(dataset);
  w->name_ = std::move(name);
  w->sequenceLength_ = s;
  w->windows_ = (total - 1) / s;
  w->firstSequence_ = firstSeq;
  w->seed_ = shuffleSeed;
  return w;
}

int64_t WindowSamples::window(int64_t i) {
  int64_t epoch = i / windows_, k = i % windows_;
  if (!seed_)
    return k;
  if (epoch != epoch_) { // Fisher-Yates with SplitMix64: the same order on every platform
    uint64_t state = epochSeed(*seed_, epoch);
    auto shuffle = [&](auto &order) {
      order.resize(static_cast<size_t>(windows_));
      std::iota(order.begin(), order.end(), 0);
      for (int64_t n = windows_ - 1; n > 0; --n)
        std::swap(order[n], order[splitmix64(state) % static_cast<uint64_t>(n + 1)]);
    };
    if (windows_ <= int64_t(UINT32_MAX)) // half the memory, as Megatron's shuffle index
      shuffle(order32_);
    else
      shuffle(order64_);
    epoch_ = epoch;
  }
  return order32_.empty() ? order64_[static_cast<size_t>(k)]
                          : static_cast<int64_t>(order32_[static_cast<size_t>(k)]);
}

void WindowSamples::readWindow(int64_t w, std::span<int64_t> out) const {
  int64_t s = sequenceLength_, pos = w * s, end = pos + s + 1;
  int64_t *dst = out.data();
  // The sequence holding `pos`: the last start <= pos (empty sequences are skipped).
  int64_t k = std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin() - 1;
  while (pos < end) {
    int64_t take = std::min(end, starts_[k + 1]) - pos;
    dataset_->read(firstSequence_ + k, pos - starts_[k], {dst, static_cast<size_t>(take)});
    dst += take;
    pos += take;
    ++k;
  }
}

Status WindowSamples::read(int64_t i, std::span<int64_t> out) {
  if (i < 0 || static_cast<int64_t>(out.size()) != rowLength())
    return Status::error("sample " + std::to_string(i) + " of " + name_ + " read into " +
                         std::to_string(out.size()) + " tokens, not " +
                         std::to_string(rowLength()));
  readWindow(window(i), out);
  return Status::ok();
}

std::string WindowSamples::describe(int64_t i) {
  return name_ + ", window " + std::to_string(window(i)) + " (epoch " +
         std::to_string(i / windows_) + ")";
}

BlendingIndex::BlendingIndex(std::vector<double> weights)
    : weights_(std::move(weights)), taken_(weights_.size(), 0) {
  double sum = 0;
  for (double w : weights_)
    sum += w;
  for (double &w : weights_)
    w /= sum;
}

BlendingIndex::Entry BlendingIndex::at(int64_t i) {
  if (i < next_ - 1) { // going back: replay from the start
    std::fill(taken_.begin(), taken_.end(), 0);
    next_ = 0;
  }
  while (next_ <= i) {
    // Megatron's helpers.cpp: the target count is w_d * max(i, 1) (sample 0 and 1 alike).
    double target = std::max(static_cast<double>(next_), 1.0);
    size_t best = 0;
    double bestError = weights_[0] * target - static_cast<double>(taken_[0]);
    for (size_t d = 1; d < weights_.size(); ++d) {
      double error = weights_[d] * target - static_cast<double>(taken_[d]);
      if (error > bestError) {
        best = d;
        bestError = error;
      }
    }
    last_ = {static_cast<int64_t>(best), taken_[best]++};
    ++next_;
  }
  return last_;
}

StatusOr<std::unique_ptr<BlendedSamples>>
BlendedSamples::create(std::vector<std::unique_ptr<SampleSource>> sources,
                       std::vector<double> weights) {
  if (sources.empty() || sources.size() != weights.size())
    return Status::error("a blend needs one weight per dataset (" + std::to_string(weights.size()) +
                         " weights, " + std::to_string(sources.size()) + " datasets)");
  for (size_t d = 0; d < sources.size(); ++d) {
    if (!(weights[d] > 0) || !std::isfinite(weights[d]))
      return Status::error("blend weight " + std::to_string(weights[d]) + " of dataset " +
                           std::to_string(d) + " is not a positive number");
    if (sources[d]->rowLength() != sources[0]->rowLength())
      return Status::error("the blend's datasets have rows of " +
                           std::to_string(sources[0]->rowLength()) + " and " +
                           std::to_string(sources[d]->rowLength()) + " tokens");
  }
  return std::unique_ptr<BlendedSamples>(
      new BlendedSamples(std::move(sources), std::move(weights)));
}

Status BlendedSamples::read(int64_t i, std::span<int64_t> out) {
  BlendingIndex::Entry e = index_.at(i);
  return sources_[static_cast<size_t>(e.dataset)]->read(e.sample, out);
}

std::string BlendedSamples::describe(int64_t i) {
  BlendingIndex::Entry e = index_.at(i);
  return sources_[static_cast<size_t>(e.dataset)]->describe(e.sample);
}

} // namespace megac::runtime::data
