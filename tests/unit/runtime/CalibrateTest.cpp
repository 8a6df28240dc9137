// `megac calibrate`'s microbenchmarks (runtime/calibrate): every kernel class's plan loads and
// runs on the CPU executor and moves the bytes it says, the timing protocol, the summaries of
// the tables, a quick one-rank calibration, and the placement note of multi-thread sweeps.
#include "runtime/calibrate/Calibrate.h"
#include "runtime/calibrate/Benches.h"
#include "runtime/calibrate/CoreDistance.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <thread>

namespace megac::runtime::calibrate {
namespace {

TEST(Calibrate, EveryKernelClassRunsAndMovesItsBytes) {
  ASSERT_EQ(kernelClassNames().size(), 23u);
  const double target = 64 << 10;
  for (const std::string &kernel : kernelClassNames()) {
    BenchPlan plan;
    StatusOr<BenchInstruction> inst = kernelInstruction(plan.program(), kernel, target, DType::f32);
    ASSERT_TRUE(inst.isOk()) << kernel << ": " << inst.status().message();
    double bytes = plan.program().bytesOf(*inst);
    // Rows are [rows, 1024] f32: the bytes land within a few rows' worth of the target.
    EXPECT_NEAR(bytes, target, 8 * 1024 * 4 + 64) << kernel;
    plan.program().function("one", {*inst});
    StatusOr<std::unique_ptr<Executor>> executor = loadBench(plan, Backend::cpu, false, 0, nullptr);
    ASSERT_TRUE(executor.isOk()) << kernel << ": " << executor.status().message();
    Status ran = (*executor)->run("one");
    EXPECT_TRUE(ran.isOk()) << kernel << ": " << ran.message();
  }
  BenchPlan plan;
  StatusOr<BenchInstruction> unknown = kernelInstruction(plan.program(), "conv", 1e6, DType::f32);
  ASSERT_FALSE(unknown.isOk());
  EXPECT_EQ(unknown.status().message(), "calibrate: unknown kernel class 'conv'");
}

TEST(Calibrate, BytesAreOperandsPlusResults) {
  // Operands read once and results written once, as the IR's CostOpInterface counts them.
  const double target = 3.0 * 16 * 1024 * 4; // 16 rows of Add: a, b and the sum
  BenchPlan add;
  StatusOr<BenchInstruction> i =
      kernelInstruction(add.program(), "elementwise", target, DType::f32);
  ASSERT_TRUE(i.isOk());
  EXPECT_EQ(add.program().buffer(i->inputs[0]).shape, (std::vector<int64_t>{16, 1024}));
  EXPECT_EQ(add.program().bytesOf(*i), target);
  // AdamW in place: p, g, m, v, lr (f32), step (i64) read; p, m, v written.
  BenchPlan adam;
  i = kernelInstruction(adam.program(), "adamw", 7.0 * 10 * 1024 * 4 + 12, DType::f32);
  ASSERT_TRUE(i.isOk());
  EXPECT_EQ(i->outputs, (std::vector<uint32_t>{i->inputs[0], i->inputs[2], i->inputs[3]}));
  EXPECT_EQ(adam.program().bytesOf(*i), 7.0 * 10 * 1024 * 4 + 4 + 8);
  // LayerNormGrad: dy, x [r, 1024] and the weight [1024] in; dx [r, 1024], dw, db [1024] out.
  BenchPlan ln;
  i = kernelInstruction(ln.program(), "layer_norm_grad", 3.0 * 4 * 1024 * 4 + 3 * 4096, DType::f32);
  ASSERT_TRUE(i.isOk());
  EXPECT_EQ(ln.program().buffer(i->inputs[0]).shape, (std::vector<int64_t>{4, 1024}));
  EXPECT_EQ(ln.program().bytesOf(*i), 3.0 * 4 * 1024 * 4 + 3 * 4096);
}

TEST(Calibrate, TimeCallRepeatsAndTakesTheMedian) {
  Sync sync(nullptr);
  int calls = 0;
  TimingPolicy policy;
  policy.targetSeconds = 0.02;
  StatusOr<double> t = timeCall(
      sync,
      [&] {
        ++calls;
        std::this_thread::sleep_for(std::chrono::microseconds(1000));
        return Status::ok();
      },
      policy);
  ASSERT_TRUE(t.isOk());
  // sleep_for waits at least its duration, so no batch mean can be shorter.
  EXPECT_GE(*t, 1e-3);
  // A warm-up call, a probe call (1 ms is a 20th of the target) and the timed repetitions.
  EXPECT_GE(calls, 3);
  // A failing call stops the measurement with its error.
  StatusOr<double> failed = timeCall(
      sync, [] { return Status::error("kernel failed"); }, policy);
  ASSERT_FALSE(failed.isOk());
  EXPECT_EQ(failed.status().message(), "kernel failed");
}

TEST(Calibrate, Summaries) {
  Results r;
  r.gemm = {{64, 64, 64, 4, "f32", "linear", 5e10},
            {512, 512, 512, 4, "f32", "linear", 9e10},
            {512, 512, 512, 2, "bf16", "linear", 7e10}};
  r.bandwidth = {{16384, 2e11}, {268435456, 3e10}, {1048576, 1e11}};
  r.comm = {{"all_reduce", 4, 4, 6e-6},
            {"all_reduce", 4, 1 << 20, 1e-3},
            {"all_gather", 4, 1 << 30, 1.0}};
  EXPECT_EQ(r.peakFlops("f32"), 9e10);
  EXPECT_EQ(r.peakFlops("bf16"), 7e10);
  EXPECT_EQ(r.peakFlops("f16"), 0);
  EXPECT_EQ(r.dramBandwidth(), 3e10); // the largest working set, not the fastest
  // Bus bandwidth of the largest all-reduce: bytes/s x 2(n-1)/n; latency per ring step.
  EXPECT_DOUBLE_EQ(r.linkBandwidth(), double(1 << 20) / 1e-3 * 2 * 3 / 4);
  EXPECT_DOUBLE_EQ(r.linkLatency(), 6e-6 / 6);
  Results none;
  EXPECT_EQ(none.linkBandwidth(), 0);
  EXPECT_EQ(none.linkLatency(), 0);
}

TEST(Calibrate, QuickOneRankCalibration) {
  Options options;
  options.quick = true;
  options.threads = 1;
  setKernelThreads(1);
  std::vector<std::string> progress;
  options.progress = [&](const std::string &line) { progress.push_back(line); };
  StatusOr<Results> r = calibrate(options);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->backend, "cpu");
  EXPECT_EQ(r->ranks, 1);
  EXPECT_GT(r->instructionSeconds, 0);
  EXPECT_GT(r->memoryBytes, 0);
  ASSERT_FALSE(r->gemm.empty());
  for (const GemmResult &g : r->gemm)
    EXPECT_TRUE(std::isfinite(g.flopsPerSecond) && g.flopsPerSecond > 0) << g.m;
  std::set<std::string> kernels;
  for (const KernelResult &k : r->kernels) {
    kernels.insert(k.kernel);
    EXPECT_TRUE(k.bytes > 0 && k.seconds > 0 && std::isfinite(k.seconds)) << k.kernel;
  }
  EXPECT_EQ(kernels.size(), kernelClassNames().size());
  EXPECT_FALSE(r->bandwidth.empty());
  ASSERT_FALSE(r->attention.empty());
  for (const AttentionResult &a : r->attention)
    EXPECT_TRUE(a.forwardSeconds > 0 && a.backwardSeconds > 0);
  EXPECT_TRUE(r->comm.empty());
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_EQ(r->notes[0], "collectives not measured: 1 rank");
  EXPECT_NE(r->source.find("collectives not measured: 1 rank"), std::string::npos);
  // One progress line per group, then the note.
  ASSERT_EQ(progress.size(), 6u);
  EXPECT_EQ(progress[1].rfind("calibrate: gemm", 0), 0u) << progress[1];
}

// The placement note: the round trips as measured, and two placements named only when the
// largest is over twice the smallest (one die ~55 ns, two ~350 ns on this project's VMs).
TEST(Calibrate, PlacementNote) {
  EXPECT_EQ(placementNote({0, 1}, {}), "");
  std::string near = placementNote({0, 1}, {54.6, 57.2});
  EXPECT_NE(near.find("CPUs 0 and 1 55 / 57 ns apart"), std::string::npos) << near;
  EXPECT_EQ(near.find("between dies"), std::string::npos) << near;
  EXPECT_FALSE(placementMoved({54.6, 109.2}));
  EXPECT_TRUE(placementMoved({54.6, 361.0}));
  EXPECT_TRUE(placementMoved({361.0, 54.6}));
  std::string moved = placementNote({2, 5}, {361.0, 54.6});
  EXPECT_NE(moved.find("CPUs 2 and 5 361 / 55 ns apart"), std::string::npos) << moved;
  EXPECT_NE(moved.find("moved them between dies"), std::string::npos) << moved;
}

// Two CPUs: a positive round trip; one CPU twice, or one that does not exist: none.
TEST(Calibrate, CoreRoundTripBetweenTwoCpus) {
  if (std::thread::hardware_concurrency() < 2)
    GTEST_SKIP() << "one CPU";
  std::optional<std::pair<int, int>> cpus = firstTwoAllowedCpus();
  if (!cpus)
    GTEST_SKIP() << "fewer than two CPUs in this process's affinity mask";
  EXPECT_LT(cpus->first, cpus->second);
  std::optional<double> ns = coreRoundTripNs(cpus->first, cpus->second, 2000, 3);
  ASSERT_TRUE(ns.has_value());
  EXPECT_GT(*ns, 0);
  EXPECT_FALSE(coreRoundTripNs(0, 0).has_value());
  EXPECT_FALSE(coreRoundTripNs(0, 1000, 10, 1).has_value()); // no such CPU here
}

TEST(Calibrate, CudaWithoutADeviceSaysSo) {
  Options options;
  options.backend = Backend::cuda;
  options.quick = true;
  StatusOr<Results> r = calibrate(options);
  if (r.isOk())
    GTEST_SKIP() << "a CUDA device is usable here";
  EXPECT_EQ(r.status().message().rfind("calibrate --backend cuda: no usable CUDA device: ", 0), 0u)
      << r.status().message();
}

} // namespace
} // namespace megac::runtime::calibrate
