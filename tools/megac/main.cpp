// megac: the compiler driver. `megac <command> [options]`.
#include "tools/megac/Commands.h"

#include <cstdio>
#include <cstring>

namespace {
const char *kUsage = R"(megac: a compiler for distributed training of transformer language models

usage: megac <command> [options]

commands:
  import    --model SPEC -o FILE.mlir      write a zoo model's forward graph as mega IR
  describe  --model SPEC | FILE.mlir       parameter count, FLOPs per token, op histogram
  compile   MODEL -o FILE.mplan [--seed N]
                                           lower a model to a single-rank plan
  run       (MODEL | FILE.mplan) --input NAME=FILE.npy ... --output-dir DIR [--seed N]
                                           one forward pass on the CPU; outputs as DIR/NAME.npy
  train     MODEL --data TOKENS.npy --steps N --global-batch B --micro-batch b --lr X ...
                                           AdamW training on the CPU (`megac train --help`)
  data      prep INPUT.txt|INPUT.jsonl --tokenizer byte|gpt2:V.json,M.txt|hf:T.json -o PREFIX
                                           an indexed dataset (PREFIX.bin/.idx) for --data PREFIX
  generate  --load DIR --prompt TEXT [--max-tokens N] [--tokenizer SPEC] [--temperature T ...]
                                           text from a checkpoint (greedy or sampled)
  export    --load DIR --onnx MODEL.onnx -o TRAINED.onnx
                                           a checkpoint's weights written into its ONNX model
  plan      MODEL --ranks N [--tp T --pp P --dp D ...] [--explain] [--json] [-o FILE.mplan]
                                           the partitioned training step's plan, explained
  plan      MODEL --cluster SPEC --global-batch B [--top K]
                                           the planner: the best layouts on a cluster, and why
  calibrate --backend cpu|cuda [--ranks N] [--threads T] [--quick] -o HW.json
                                           measure this machine: a device spec for --cluster

MODEL: --model SPEC, FILE.mlir or FILE.onnx

model specs:
  gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128
  bert:layers=2,hidden=64,heads=4,seq=32,vocab=128
  t5:enc_layers=2,dec_layers=2,hidden=64,heads=4,seq=32,vocab=128
  llama:layers=2,hidden=64,heads=4,kv_heads=2,seq=32,vocab=128
  other keys: ffn= (default 4*hidden; llama: 8/3*hidden rounded up to 256), tied=0|1,
  gelu=erf|tanh, batch=, dtype=f32|f64|bf16|f16, dec_seq= (t5), rope_theta=, norm_eps= (llama)
)";
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "import"))
    return megac::cli::importCommand(argc, argv);
  if (!std::strcmp(argv[1], "describe"))
    return megac::cli::describeCommand(argc, argv);
  if (!std::strcmp(argv[1], "compile"))
    return megac::cli::compileCommand(argc, argv);
  if (!std::strcmp(argv[1], "run"))
    return megac::cli::runCommand(argc, argv);
  if (!std::strcmp(argv[1], "train"))
    return megac::cli::trainCommand(argc, argv);
  if (!std::strcmp(argv[1], "data"))
    return megac::cli::dataCommand(argc, argv);
  if (!std::strcmp(argv[1], "plan"))
    return megac::cli::planCommand(argc, argv);
  if (!std::strcmp(argv[1], "generate"))
    return megac::cli::generateCommand(argc, argv);
  if (!std::strcmp(argv[1], "export"))
    return megac::cli::exportCommand(argc, argv);
  if (!std::strcmp(argv[1], "calibrate"))
    return megac::cli::calibrateCommand(argc, argv);
  std::fprintf(stderr, "megac: error: unknown command '%s'; run `megac help`\n", argv[1]);
  return 2;
}
