// Learning-rate schedules of `megac train`: Megatron's constant and cosine, with linear warmup.
//
// For optimizer step s (1-based) of N, peak lr, warmup W and floor min_lr:
//   s <= W:     lr * s / W                                      (linear warmup from 0)
//   constant:   lr
//   cosine:     min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * (s - W) / (N - W)))
// so the first step uses lr / W (never 0), step W the peak and step N exactly min_lr. In PyTorch:
// torch.optim.lr_scheduler.LambdaLR(opt, lambda i: schedule(i + 1) / lr), stepped after each
// optimizer step (LambdaLR's i counts from 0).
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <string_view>

namespace megac::runtime::train {

enum class LrDecay { constant, cosine };

/// "constant" or "cosine"; nullopt otherwise.
std::optional<LrDecay> parseLrDecay(std::string_view name);
const char *lrDecayName(LrDecay decay);

struct LrSchedule {
  LrDecay decay = LrDecay::constant;
  double lr = 0;           // the peak
  int64_t warmupSteps = 0; // W
  int64_t totalSteps = 0;  // N
  double minLr = 0;        // the cosine's floor

  /// An error naming the offending value: lr and min_lr finite and >= 0, min_lr <= lr,
  /// 0 <= W <= N, N >= 1.
  Status validate() const;
  /// The lr of step `step` (1-based, 1..N); valid schedules only.
  double at(int64_t step) const;
};

} // namespace megac::runtime::train
