// What rank 0 of a training run logs, from the same values: JSON lines (--log-json, TrainLog.h)
// and TensorBoard event files (--tensorboard-dir, TensorBoardWriter.h). `megac train` writes
// through it, and so can any other caller of a driver::TrainSession.
#pragma once

#include "runtime/train/TensorBoardWriter.h"
#include "runtime/train/TrainLog.h"
#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace megac::runtime::train {

/// {"step": N, "<part>_loss": loss, "<part>_ppl": exp(loss)} (part "val" or "test"), numbers
/// as %.17g, on one line.
std::string evalRecordJson(int64_t step, const std::string &part, double loss);

class RunLogs {
public:
  /// Creates the JSON-lines file `jsonPath` and a new event file in `tensorboardDir`, each when
  /// given. Only rank 0 opens; with nothing open every call below does nothing.
  Status open(const std::optional<std::string> &jsonPath,
              const std::optional<std::string> &tensorboardDir);
  /// A step's record: one JSON line, train/<key> events.
  Status step(const StepRecord &record);
  /// An evaluation of `part` ("val" or "test") after `step`: evalRecordJson's line and the
  /// events <part>/loss and <part>/perplexity.
  Status evaluation(int64_t step, const std::string &part, double loss);
  Status close();

private:
  JsonLinesWriter json_;
  TensorBoardWriter tensorboard_;
  bool jsonOpen_ = false, tensorboardOpen_ = false;
};

} // namespace megac::runtime::train
