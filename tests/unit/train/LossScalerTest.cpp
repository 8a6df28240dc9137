// LossScaler against Megatron's DynamicGradScaler, step by step: backoff after the hysteresis,
// growth after the window, the minimum, and config validation.
#include "runtime/train/LossScaler.h"

#include <gtest/gtest.h>

using namespace megac::runtime::train;

TEST(LossScaler, DefaultsAreMegacs) {
  LossScalerConfig c;
  EXPECT_EQ(c.initialScale, 65536.0);
  EXPECT_EQ(c.growthInterval, 1000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.minScale, 1.0);
  EXPECT_TRUE(c.validate().isOk());
  EXPECT_EQ(LossScaler(c).scale(), 65536.0);
}

TEST(LossScaler, HalvesAtTheSecondOverflowThenAtEveryOverflowUntilGrowth) {
  LossScaler s({1024.0, 1.0, 2.0, 0.5, 3, 2});
  s.update(true); // hysteresis 2 -> 1: scale kept
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(true); // -> 0: halved
  EXPECT_EQ(s.scale(), 512.0);
  s.update(true); // Megatron does not reset the hysteresis tracker on backoff
  EXPECT_EQ(s.scale(), 256.0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 256.0);
  s.update(true); // a clean run shorter than the window does not restore the hysteresis
  EXPECT_EQ(s.scale(), 128.0);
  s.update(false);
  s.update(false);
  s.update(false); // 3 clean steps: growth, hysteresis tracker back to 2
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.hysteresisTracker(), 2);
  EXPECT_EQ(s.growthTracker(), 0);
  s.update(true);
  EXPECT_EQ(s.scale(), 256.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScaler, OverflowResetsTheGrowthWindow) {
  LossScaler s({8.0, 1.0, 2.0, 0.5, 2, 2});
  s.update(false);
  s.update(true); // growth tracker back to 0, scale kept (hysteresis)
  s.update(false);
  EXPECT_EQ(s.scale(), 8.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 16.0);
}

TEST(LossScaler, NeverBelowTheMinimum) {
  LossScaler s({4.0, 1.5, 2.0, 0.5, 1000, 1});
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 1.5);
  s.update(true);
  EXPECT_EQ(s.scale(), 1.5);
}

TEST(LossScaler, RejectsBadConfigs) {
  EXPECT_FALSE((LossScalerConfig{0.5, 1.0}).validate().isOk());
  EXPECT_FALSE((LossScalerConfig{8.0, 0.0}).validate().isOk());
  LossScalerConfig window;
  window.growthInterval = 0;
  EXPECT_FALSE(window.validate().isOk());
  LossScalerConfig hysteresis;
  hysteresis.hysteresis = 0;
  EXPECT_FALSE(hysteresis.validate().isOk());
}
