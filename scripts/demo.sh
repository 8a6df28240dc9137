#!/usr/bin/env bash
# `make demo`: a whole training run of an imported model on this machine's CPU, in a few minutes.
#   1. a corpus: the project's own docs and sources, tokenized to Megatron's indexed format;
#   2. a model: a GPT exported from PyTorch to ONNX (examples/export_gpt_onnx.py);
#   3. its layout: the planner on 4 CPU ranks with tensor parallelism 2;
#   4. training: 4 MPI ranks, tp 2 x dp 2 with ZeRO-1, validation perplexity as it goes, and
#      checkpoints;
#   5. generation: text from the last checkpoint;
#   6. planning at scale: GPT-3 175B on 1024 A100s and Llama-3-70B on 1024 H100s.
# Usage: scripts/demo.sh [BUILD_DIR]   (outputs in BUILD_DIR/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MEGAC=$BUILD/bin/megac
OUT=$BUILD/demo
STEPS=${DEMO_STEPS:-400}
mkdir -p "$OUT"

step() { printf '\n== %s\n' "$*"; }

step "1. corpus: the project's docs and sources, byte tokens, one document per paragraph"
(cat README.md docs/*.md
 find runtime tools passes planner frontends codegen -name '*.h' -o -name '*.cpp' | sort | xargs cat
) >"$OUT/corpus.txt"
"$MEGAC" data prep "$OUT/corpus.txt" --tokenizer byte --append-eod -o "$OUT/corpus"

step "2. model: a GPT exported from PyTorch to ONNX"
/usr/bin/python3 examples/export_gpt_onnx.py -o "$OUT/gpt.onnx"

step "3. layout: the planner's best layouts for 4 CPU ranks with tensor parallelism 2"
"$MEGAC" plan "$OUT/gpt.onnx" --cluster cpu:1x4 --tp 2 --global-batch 32 --seq 64 --top 2

step "4. training: $STEPS steps on 4 ranks (tp 2 x dp 2, ZeRO-1), 98% of the documents for training, 2% for validation"
rm -rf "$OUT/checkpoints"
"$MEGAC" train "$OUT/gpt.onnx" --data "$OUT/corpus" --seq 64 --split 98,2,0 \
    --steps "$STEPS" --global-batch 32 --micro-batch 8 --lr 3e-3 --lr-schedule cosine \
    --warmup-steps 20 --min-lr 3e-4 --clip-grad 1 \
    --ranks 4 --tp 2 --dp 2 --zero 1 \
    --eval-interval 100 --eval-iters 8 --save "$OUT/checkpoints" --save-interval 100 \
    --log-interval 20 --log-json "$OUT/train.jsonl"

step "5. generation from the last checkpoint (greedy, then sampled)"
"$MEGAC" generate --load "$OUT/checkpoints" --prompt "The planner " --max-tokens 100
"$MEGAC" generate --load "$OUT/checkpoints" --prompt "int main(" --max-tokens 100 \
    --temperature 0.8 --top-k 40 --seed 1

step "6. planning at scale: GPT-3 175B on 128 nodes of 8 A100s, Llama-3-70B on 128 nodes of 8 H100s"
"$MEGAC" plan --model gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=50257 \
    --cluster a100-80g:128x8 --global-batch 1536 --top 3
"$MEGAC" plan --model llama:layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672,seq=8192,vocab=128256,rope_theta=500000 \
    --cluster h100-sxm:128x8 --global-batch 512 --top 3
