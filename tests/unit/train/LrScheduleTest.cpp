// Learning-rate schedules against hand-computed values: warmup, constant, cosine, validation.
#include "runtime/train/LrSchedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

using namespace megac::runtime::train;

TEST(LrSchedule, ParsesNames) {
  EXPECT_EQ(parseLrDecay("constant"), LrDecay::constant);
  EXPECT_EQ(parseLrDecay("cosine"), LrDecay::cosine);
  EXPECT_FALSE(parseLrDecay("linear").has_value());
  EXPECT_STREQ(lrDecayName(LrDecay::cosine), "cosine");
}

TEST(LrSchedule, ConstantWithoutWarmupIsFlat) {
  LrSchedule s{LrDecay::constant, 3e-4, 0, 10, 0};
  ASSERT_TRUE(s.validate().isOk());
  for (int64_t step = 1; step <= 10; ++step)
    EXPECT_EQ(s.at(step), 3e-4);
}

TEST(LrSchedule, WarmupIsLinearFromTheFirstStep) {
  LrSchedule s{LrDecay::constant, 1.0, 4, 10, 0};
  EXPECT_DOUBLE_EQ(s.at(1), 0.25); // never 0: step 1 of 4
  EXPECT_DOUBLE_EQ(s.at(2), 0.5);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.at(5), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
}

TEST(LrSchedule, CosineDecaysToTheFloorAtTheLastStep) {
  LrSchedule s{LrDecay::cosine, 1e-3, 2, 10, 1e-4};
  ASSERT_TRUE(s.validate().isOk());
  EXPECT_DOUBLE_EQ(s.at(1), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(2), 1e-3);
  // Step 6: progress (6-2)/(10-2) = 0.5, halfway between peak and floor.
  EXPECT_NEAR(s.at(6), 5.5e-4, 1e-15);
  // Step 4: progress 0.25.
  EXPECT_NEAR(s.at(4), 1e-4 + 0.5 * 9e-4 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_NEAR(s.at(10), 1e-4, 1e-15);
  for (int64_t step = 3; step <= 10; ++step)
    EXPECT_LT(s.at(step), s.at(step - 1)) << "step " << step;
}

TEST(LrSchedule, CosineWithoutWarmupStartsBelowThePeak) {
  LrSchedule s{LrDecay::cosine, 1.0, 0, 4, 0};
  EXPECT_NEAR(s.at(1), 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_NEAR(s.at(2), 0.5, 1e-15);
  EXPECT_NEAR(s.at(4), 0.0, 1e-15);
}

TEST(LrSchedule, AllWarmup) {
  LrSchedule s{LrDecay::cosine, 2.0, 4, 4, 0.5};
  ASSERT_TRUE(s.validate().isOk());
  EXPECT_DOUBLE_EQ(s.at(4), 2.0);
}

TEST(LrSchedule, ValidationNamesTheBadValue) {
  EXPECT_NE(LrSchedule({LrDecay::cosine, -1, 0, 10, 0}).validate().message().find("-1"),
            std::string::npos);
  EXPECT_FALSE(LrSchedule({LrDecay::cosine, NAN, 0, 10, 0}).validate().isOk());
  EXPECT_NE(LrSchedule({LrDecay::cosine, 1e-3, 0, 10, 1e-2}).validate().message().find("minimum"),
            std::string::npos);
  EXPECT_NE(LrSchedule({LrDecay::cosine, 1e-3, 11, 10, 0}).validate().message().find("warmup"),
            std::string::npos);
  EXPECT_FALSE(LrSchedule({LrDecay::constant, 1e-3, 0, 0, 0}).validate().isOk());
  EXPECT_FALSE(LrSchedule({LrDecay::constant, 1e-3, -1, 10, 0}).validate().isOk());
}
