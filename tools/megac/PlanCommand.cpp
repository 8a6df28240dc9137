// `megac plan` (and `megac compile` with a layout): the partitioned training step's plan for
// every rank, compiled here and explained or written, never run. The arguments are megac
// train's (model, --data or the spec's seq, batch sizes, precision, layout); training-only
// ones (--steps, --lr) are optional.
#include "tools/megac/Commands.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace megac::cli {

namespace {

constexpr const char *kPlanHelp = R"(usage: megac plan MODEL --cluster SPEC --global-batch B [--seq S] [--tp T --pp P --dp D
                  --vpp V --micro-batch b --sequence-parallel|--no-sequence-parallel --zero 0|1
                  --recompute none|selective|full] [--precision bf16|fp16|fp32] [--top K]
                  [--stack megac|megatron-2021|megatron-core] [--dropout P] [--explain]
                  [--json] [--timeline FILE.svg] [--trace FILE.json] [--no-compile]

The planner: predicts the step time, throughput, TFLOP/s, MFU and memory per device of every
layout on the cluster (a100-40g, a100-80g, h100-sxm, h200, cpu, or FILE.json; "a100-80g:128x8" is
128 nodes of 8) and prints the best K, why #1 beats #2, and confirms the partitioner accepts #1.
Degrees given are pinned; the rest are searched. --timeline draws #1's pipeline schedule (SVG),
--trace writes it as Chrome trace-event JSON (Perfetto). Predictions are for a hardware spec
and a software stack: --stack megac (default: this build's CUDA runtime, or its CPU runtime on
cpu devices and `megac calibrate --backend cpu` specs), megatron-2021 or megatron-core
(docs/planner.md lists what each fuses and overlaps); --dropout P costs dropout the model's IR
does not have. --explain splits #1's predicted step by op class (GEMM, attention,
memory-bound, launch overhead, each collective, bubble) and explains its compiled plan.

usage: megac plan MODEL --ranks N [--tp T --pp P --dp D --vpp V --sequence-parallel
                  --zero 0|1 --recompute none|selective|full --schedule 1f1b|gpipe]
                  [--micro-batch b] [--global-batch B] [--precision fp32|fp64|bf16|fp16]
                  [--data TOKENS.npy] [--explain] [--json] [-o FILE.mplan]

Compiles the training step exactly as `megac train` with the same arguments would, for every
rank of the layout, and explains the plan: the mesh and pipeline, per role (pipeline stage) the
parameters with their sharding and bytes per rank, gradient and optimizer-state bytes, the arena,
and every collective and transfer of one call of each function with its group and size. --json
prints the same numbers as JSON; -o writes the plan (one program per role and the rank table).
Defaults: --micro-batch 1, --global-batch micro-batch x dp x pp, the sequence length from the
model spec (or --data).)";

/// Runs `megac train` in plan mode with `extra` arguments appended.
int runPlanMode(int argc, char **argv, int first, const std::vector<std::string> &extra) {
  std::vector<std::string> storage = {argv[0], "train"};
  for (int i = first; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-o" && i + 1 < argc) { // -o FILE is --plan-out FILE here
      storage.push_back("--plan-out");
      storage.push_back(argv[++i]);
    } else if (arg.starts_with("-o=")) {
      storage.push_back("--plan-out=" + std::string(arg.substr(3)));
    } else {
      storage.push_back(std::string(arg));
    }
  }
  storage.insert(storage.end(), extra.begin(), extra.end());
  std::vector<char *> args;
  for (std::string &s : storage)
    args.push_back(s.data());
  args.push_back(nullptr);
  return trainCommand(static_cast<int>(storage.size()), args.data());
}

} // namespace

int planCommand(int argc, char **argv) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::puts(kPlanHelp);
      return 0;
    }
  for (int i = 2; i < argc; ++i)
    if (std::string_view(argv[i]) == "--cluster" ||
        std::string_view(argv[i]).starts_with("--cluster="))
      return planSearchCommand(argc, argv);
  return runPlanMode(argc, argv, 2, {"--plan-only"});
}

bool hasLayoutFlag(int argc, char **argv) {
  for (int i = 2; i < argc; ++i)
    for (const char *flag : {"--ranks", "--tp", "--pp", "--dp", "--vpp", "--zero",
                             "--sequence-parallel", "--recompute", "--schedule"}) {
      std::string_view arg = argv[i];
      if (arg == flag || arg.starts_with(std::string(flag) + "="))
        return true;
    }
  return false;
}

int compileWithLayout(int argc, char **argv) { return runPlanMode(argc, argv, 2, {"--plan-only"}); }

} // namespace megac::cli
