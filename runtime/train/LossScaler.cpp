// Megatron's DynamicGradScaler (LossScaler.h).
#include "runtime/train/LossScaler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace megac::runtime::train {

Status LossScalerConfig::validate() const {
  if (!(minScale > 0) || !std::isfinite(minScale))
    return Status::error("the minimum loss scale must be > 0, got " + std::to_string(minScale));
  if (!(initialScale >= minScale) || !std::isfinite(initialScale))
    return Status::error("the initial loss scale must be finite and >= the minimum (" +
                         std::to_string(minScale) + "), got " + std::to_string(initialScale));
  if (growthInterval < 1)
    return Status::error("the loss-scale window must be >= 1, got " +
                         std::to_string(growthInterval));
  if (hysteresis < 1)
    return Status::error("the hysteresis must be >= 1, got " + std::to_string(hysteresis));
  if (!(growthFactor > 1) || !(backoffFactor > 0 && backoffFactor < 1))
    return Status::error("the growth factor must be > 1 and the backoff factor in (0, 1)");
  return Status::ok();
}

LossScaler::LossScaler(const LossScalerConfig &config)
    : config_(config), scale_(config.initialScale), hysteresisTracker_(config.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (overflow) {
    growthTracker_ = 0;
    --hysteresisTracker_;
    if (hysteresisTracker_ <= 0)
      scale_ = std::max(scale_ * config_.backoffFactor, config_.minScale);
    return;
  }
  if (++growthTracker_ == config_.growthInterval) {
    growthTracker_ = 0;
    hysteresisTracker_ = config_.hysteresis;
    scale_ *= config_.growthFactor;
  }
}

} // namespace megac::runtime::train
