// `megac describe --model SPEC | FILE.mlir`: parameters (and, for mixtures of experts, the
// active ones a token uses), FLOPs per token and the op histogram.
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/ModelFlags.h"

#include "planner/ModelStats.h"

#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace megac::cli {

int describeCommand(int argc, char **argv) {
  auto start = std::chrono::steady_clock::now();
  Flags f("megac describe", kDescribeHelp);
  ModelFlags model;
  std::optional<std::string> function;
  model.declare(f, /*inputShape=*/false);
  f.text("--function", function, "NAME");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (std::string e = model.configure(f, "give one .mlir file"); !e.empty())
    return f.usage(e);
  mlir::MLIRContext ctx;
  auto loaded = model.load(ctx);
  if (!loaded)
    return 1;
  planner::ModelStatsResult result =
      planner::computeModelStats(*loaded->module, function.value_or(""));
  if (!result.stats)
    return fail("megac describe", result.error);
  const planner::ModelStats &s = *result.stats;
  using planner::humanCount;
  using planner::withCommas;
  std::printf("model       %s (@%s)\n", loaded->description.c_str(), s.function.c_str());
  std::printf("parameters  %s (%s) in %lld tensors, %s bytes\n", withCommas(s.parameters).c_str(),
              planner::humanParams(s.parameters).c_str(), (long long)s.parameterTensors,
              humanCount(s.parameterBytes).c_str());
  if (s.experts > 0)
    std::printf("active      %s (%s) per token: the dense parameters and %lld of the %lld experts "
                "in each of %lld MoE layers (experts hold %s)\n",
                withCommas(s.activeParameters).c_str(),
                planner::humanParams(s.activeParameters).c_str(), (long long)s.topk,
                (long long)s.experts, (long long)s.moeLayers,
                withCommas(s.expertParameters).c_str());
  std::printf("tokens      %s per forward pass\n", withCommas(s.tokens).c_str());
  double perToken = s.tokens ? 1.0 / s.tokens : 0.0;
  std::printf("forward     %s FLOP per token (%s in matmuls); %s FLOP per pass\n",
              humanCount(s.forwardFlops * perToken).c_str(),
              humanCount(s.forwardMatmulFlops * perToken).c_str(),
              humanCount(s.forwardFlops).c_str());
  std::printf("training    %s FLOP per token (forward + backward = 3x forward, no recompute)\n",
              humanCount(s.trainingFlops() * perToken).c_str());
  std::vector<std::pair<std::string, int64_t>> ops(s.opHistogram.begin(), s.opHistogram.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto &a, const auto &b) { return a.second > b.second; });
  std::printf("ops        ");
  for (const auto &[name, count] : ops)
    std::printf(" %s=%lld", name.c_str(), (long long)count);
  std::printf("\n");
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("time        built in %.1f ms, described in %.1f ms\n", loaded->buildSeconds * 1e3,
              total * 1e3);
  return 0;
}

} // namespace megac::cli
