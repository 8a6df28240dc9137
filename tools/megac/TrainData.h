// The data of `megac train`: --data (.npy rows or an indexed dataset), --data-path blends,
// --split parts and --eval-data, parsed into the TrainConfig and opened as lazily read samples
// (runtime/data Samples.h), so each rank reads only its rows of the steps it runs.
#pragma once

#include "tools/megac/Args.h"
#include "tools/megac/TrainOptions.h"

#include "runtime/data/Samples.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace megac::cli {

/// Fills the data settings of `c` (--data, --data-path, --split, --seq, --eval-data,
/// --eval-interval, --eval-iters) from `args`; returns a one-line error or empty. Needs c.spec
/// and c.planOnly set.
std::string parseDataArgs(const Args &args, TrainConfig &c);

/// The parts of --split; validation reads --eval-data instead when it is given.
enum class DataPart { train = 0, validation = 1, test = 2 };

/// The sequence length S of the training rows: a .npy's columns - 1, else --seq or the zoo
/// spec's seq (t5: seq + dec_seq).
StatusOr<int64_t> trainingSequenceLength(const TrainConfig &c);

/// The samples of `part` (validation: --eval-data's when given). An indexed dataset or blend is
/// read lazily, each window when a step reads it; a .npy is read whole. Errors name the file
/// and the option.
StatusOr<std::unique_ptr<runtime::data::SampleSource>> openSamples(const TrainConfig &c,
                                                                   DataPart part);

/// How rows are checked against the compiled model.
struct SampleChecks {
  int64_t vocab = 0;                // tokens must lie in [0, vocab)
  std::optional<int64_t> maskToken; // masked-LM's [MASK]: a warning when the data holds it
  bool warn = false;                // print warnings (rank 0)
};

/// `samples` (of `part`) checked: a .npy's rows at once, an indexed dataset's as they are read
/// (the error names the dataset and window).
StatusOr<std::unique_ptr<runtime::data::SampleSource>>
checkSamples(const TrainConfig &c, DataPart part,
             std::unique_ptr<runtime::data::SampleSource> samples, const SampleChecks &checks);

} // namespace megac::cli
