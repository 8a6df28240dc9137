// Rank 0's JSON-lines and TensorBoard logs, written together.
#include "runtime/train/RunLogs.h"

#include <cmath>
#include <cstdio>

namespace megac::runtime::train {

std::string evalRecordJson(int64_t step, const std::string &part, double loss) {
  char line[192];
  std::snprintf(line, sizeof line, "{\"step\": %lld, \"%s_loss\": %.17g, \"%s_ppl\": %.17g}",
                (long long)step, part.c_str(), loss, part.c_str(), std::exp(loss));
  return line;
}

Status RunLogs::open(const std::optional<std::string> &jsonPath,
                     const std::optional<std::string> &tensorboardDir) {
  if (jsonPath) {
    RETURN_IF_ERROR(json_.open(*jsonPath));
    jsonOpen_ = true;
  }
  if (tensorboardDir) {
    RETURN_IF_ERROR(tensorboard_.open(*tensorboardDir));
    tensorboardOpen_ = true;
  }
  return Status::ok();
}

Status RunLogs::step(const StepRecord &record) {
  if (jsonOpen_)
    RETURN_IF_ERROR(json_.write(stepRecordJson(record)));
  if (tensorboardOpen_)
    RETURN_IF_ERROR(tensorboard_.write(record.step, stepScalars(record)));
  return Status::ok();
}

Status RunLogs::evaluation(int64_t step, const std::string &part, double loss) {
  if (jsonOpen_)
    RETURN_IF_ERROR(json_.write(evalRecordJson(step, part, loss)));
  if (tensorboardOpen_)
    RETURN_IF_ERROR(tensorboard_.write(step, evalScalars(part, loss)));
  return Status::ok();
}

Status RunLogs::close() {
  jsonOpen_ = tensorboardOpen_ = false;
  Status json = json_.close();
  Status tensorboard = tensorboard_.close();
  return json.isOk() ? tensorboard : json;
}

} // namespace megac::runtime::train
