// `megac describe --model SPEC | FILE.mlir`: parameters, FLOPs per token and the op histogram.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/ModelSource.h"

#include "planner/ModelStats.h"

#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace megac::cli {

int describeCommand(int argc, char **argv) {
  auto start = std::chrono::steady_clock::now();
  Args args;
  std::string error = args.parse(argc, argv, 2, {"model", "function"}, {"help"});
  if (args.has("help")) {
    std::puts("usage: megac describe (--model SPEC | FILE.mlir) [--function NAME]");
    return 0;
  }
  std::optional<std::string> file;
  if (error.empty() && args.positional().size() > 1)
    error = "give one .mlir file";
  if (!args.positional().empty())
    file = args.positional().front();
  if (!error.empty()) {
    std::fprintf(stderr, "megac describe: error: %s\n", error.c_str());
    return 2;
  }
  mlir::MLIRContext ctx;
  auto model = loadModel(ctx, args.get("model"), file);
  if (!model)
    return 1;
  planner::ModelStatsResult result =
      planner::computeModelStats(*model->module, args.get("function").value_or(""));
  if (!result.stats) {
    std::fprintf(stderr, "megac describe: error: %s\n", result.error.c_str());
    return 1;
  }
  const planner::ModelStats &s = *result.stats;
  using planner::humanCount;
  using planner::withCommas;
  std::printf("model       %s (@%s)\n", model->description.c_str(), s.function.c_str());
  std::printf("parameters  %s (%s) in %lld tensors, %s bytes\n", withCommas(s.parameters).c_str(),
              planner::humanParams(s.parameters).c_str(), (long long)s.parameterTensors,
              humanCount(s.parameterBytes).c_str());
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
  std::printf("time        built in %.1f ms, described in %.1f ms\n", model->buildSeconds * 1e3,
              total * 1e3);
  return 0;
}

} // namespace megac::cli
