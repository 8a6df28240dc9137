// Dynamic loss scaling for fp16 training, as Megatron-LM's DynamicGradScaler.
#pragma once

#include "support/Status.h"

#include <cstdint>

namespace megac::runtime::train {

struct LossScalerConfig {
  /// Megatron's default is 2^32; megac's 2^16 (tiny models overflow for many steps from 2^32;
  /// /work/shared/REFERENCE.md, "Dynamic loss scaling").
  double initialScale = 65536.0;
  double minScale = 1.0;
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  /// Consecutive clean steps before the scale grows.
  int64_t growthInterval = 1000;
  /// Overflowing steps (since the last growth) before the scale backs off.
  int64_t hysteresis = 2;

  /// initialScale >= minScale > 0, growthInterval >= 1, hysteresis >= 1.
  Status validate() const;
};

/// Megatron-LM's DynamicGradScaler (megatron/core/optimizer/grad_scaler.py), step by step:
///   overflow: growth tracker = 0; hysteresis tracker -= 1; when it is <= 0 the scale becomes
///             max(scale * backoff, min) -- so the 2nd overflow (hysteresis 2) halves it, and
///             every further overflow before the next growth halves it again;
///   clean:    growth tracker += 1; at growthInterval: growth tracker = 0, hysteresis tracker =
///             hysteresis, scale *= growth.
/// Every overflowing step is skipped by the caller (the optimizer does not run).
class LossScaler {
public:
  explicit LossScaler(const LossScalerConfig &config = {});

  double scale() const { return scale_; }
  /// Records one step: `overflow` when its gradients had an inf or nan.
  void update(bool overflow);

  int64_t growthTracker() const { return growthTracker_; }
  int64_t hysteresisTracker() const { return hysteresisTracker_; }
  /// Resumes from a checkpoint's saved state (runtime/checkpoint).
  void restore(double scale, int64_t growthTracker, int64_t hysteresisTracker) {
    scale_ = scale;
    growthTracker_ = growthTracker;
    hysteresisTracker_ = hysteresisTracker;
  }

private:
  LossScalerConfig config_;
  double scale_;
  int64_t growthTracker_ = 0;
  int64_t hysteresisTracker_;
};

} // namespace megac::runtime::train
