// Learning-rate schedules: the formulas of LrSchedule.h.
#include "runtime/train/LrSchedule.h"

#include <cmath>
#include <numbers>
#include <string>

namespace megac::runtime::train {

std::optional<LrDecay> parseLrDecay(std::string_view name) {
  if (name == "constant")
    return LrDecay::constant;
  if (name == "cosine")
    return LrDecay::cosine;
  return std::nullopt;
}

const char *lrDecayName(LrDecay decay) {
  return decay == LrDecay::constant ? "constant" : "cosine";
}

Status LrSchedule::validate() const {
  if (!std::isfinite(lr) || lr < 0)
    return Status::error("the learning rate must be a finite number >= 0, not " +
                         std::to_string(lr));
  if (!std::isfinite(minLr) || minLr < 0 || minLr > lr)
    return Status::error("the minimum learning rate must be between 0 and the learning rate (" +
                         std::to_string(lr) + "), not " + std::to_string(minLr));
  if (totalSteps < 1)
    return Status::error("the number of steps must be >= 1, not " + std::to_string(totalSteps));
  if (warmupSteps < 0 || warmupSteps > totalSteps)
    return Status::error("the warmup steps must be between 0 and the number of steps (" +
                         std::to_string(totalSteps) + "), not " + std::to_string(warmupSteps));
  return Status::ok();
}

double LrSchedule::at(int64_t step) const {
  if (step <= warmupSteps)
    return lr * static_cast<double>(step) / static_cast<double>(warmupSteps);
  if (decay == LrDecay::constant)
    return lr;
  double progress =
      static_cast<double>(step - warmupSteps) / static_cast<double>(totalSteps - warmupSteps);
  return minLr + 0.5 * (lr - minLr) * (1.0 + std::cos(std::numbers::pi * progress));
}

} // namespace megac::runtime::train
