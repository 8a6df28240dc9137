// How long building zoo models as IR (shapes only) and computing their stats takes.
#include "frontends/models/ModelZoo.h"
#include "planner/ModelStats.h"

#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using namespace megac;

int main() {
  struct Case {
    const char *name;
    const char *spec;
  };
  const Case cases[] = {
      {"gpt2-124m", "gpt:layers=12,hidden=768,heads=12,seq=1024,vocab=50257"},
      {"bert-large", "bert:layers=24,hidden=1024,heads=16,seq=512,vocab=30522"},
      {"t5-large", "t5:layers=24,hidden=1024,heads=16,ffn=4096,seq=512,vocab=32128"},
      {"gpt3-175b", "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=50257"},
      {"gpt-1t", "gpt:layers=128,hidden=25600,heads=160,seq=2048,vocab=51200"},
  };
  const int repeats = 5;
  std::printf("%-12s %18s %10s %12s %12s\n", "model", "parameters", "ops", "build ms", "stats ms");
  for (const Case &c : cases) {
    auto config = models::parseModelSpec(c.spec);
    if (!config.config) {
      std::fprintf(stderr, "%s: %s\n", c.name, config.error.c_str());
      return 1;
    }
    std::vector<double> build, stats;
    planner::ModelStats last;
    for (int i = 0; i < repeats; ++i) {
      mlir::MLIRContext ctx;
      std::string error;
      auto t0 = std::chrono::steady_clock::now();
      auto module = models::buildModel(ctx, *config.config, error);
      auto t1 = std::chrono::steady_clock::now();
      if (!module) {
        std::fprintf(stderr, "%s: %s\n", c.name, error.c_str());
        return 1;
      }
      auto result = planner::computeModelStats(*module);
      auto t2 = std::chrono::steady_clock::now();
      last = *result.stats;
      build.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      stats.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    std::sort(build.begin(), build.end());
    std::sort(stats.begin(), stats.end());
    int64_t ops = 0;
    for (const auto &[name, count] : last.opHistogram)
      ops += count;
    std::printf("%-12s %18s %10lld %12.2f %12.2f\n", c.name,
                planner::withCommas(last.parameters).c_str(), (long long)ops, build[repeats / 2],
                stats[repeats / 2]);
  }
  std::printf("(median of %d runs; build includes MLIR context setup and verification)\n", repeats);
  return 0;
}
