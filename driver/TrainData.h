// The data of a run: --data (.npy rows or an indexed dataset), --data-path blends, --split parts
// and --eval-data, set into the RunConfig and opened as lazily read samples (runtime/data
// Samples.h), so each rank reads only its rows of the steps it runs.
#pragma once

#include "driver/RunConfig.h"

#include "runtime/data/Samples.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace megac::driver {

/// --data PATH: a .npy file, or an indexed dataset's PREFIX (PREFIX.bin or PREFIX.idx name it
/// too), a blend of one.
void setDataPath(DataConfig &data, const std::string &path);
/// --data-path [W1] PREFIX1 [W2 PREFIX2 ...] (Megatron's blend): one PREFIX, or weight and
/// prefix pairs; every dataset must exist.
Status setDataBlend(DataConfig &data, const std::vector<std::string> &values);
/// --split A,B,C: up to three weights >= 0 with a positive train weight.
Status setDataSplit(DataConfig &data, const std::string &text);
/// A finite decimal number; nullopt otherwise.
std::optional<double> parseNumber(const std::string &text);

/// The parts of --split; validation reads --eval-data instead when it is given.
enum class DataPart { train = 0, validation = 1, test = 2 };

/// The sequence length S of the training rows: a .npy's columns - 1, else --seq or the zoo
/// spec's seq (t5: seq + dec_seq).
StatusOr<int64_t> trainingSequenceLength(const RunConfig &c);

/// The samples of `part` (validation: --eval-data's when given). An indexed dataset or blend is
/// read lazily, each window when a step reads it; a .npy is read whole. Errors name the file
/// and the option.
StatusOr<std::unique_ptr<runtime::data::SampleSource>> openSamples(const RunConfig &c,
                                                                   DataPart part);

/// How rows are checked against the compiled model.
struct SampleChecks {
  int64_t vocab = 0;                // tokens must lie in [0, vocab)
  std::optional<int64_t> maskToken; // masked-LM's [MASK]: a warning when the data holds it
  /// Receives the warning (once per source); empty: no warning.
  std::function<void(const std::string &)> warn;
};

/// `samples` (of `part`) checked: a .npy's rows at once, an indexed dataset's as they are read
/// (the error names the dataset and window).
StatusOr<std::unique_ptr<runtime::data::SampleSource>>
checkSamples(const RunConfig &c, DataPart part,
             std::unique_ptr<runtime::data::SampleSource> samples, const SampleChecks &checks);

} // namespace megac::driver
