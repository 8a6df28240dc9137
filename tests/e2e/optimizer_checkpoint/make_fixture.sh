#!/bin/sh
# Remakes the fixture of optimizer_checkpoint_test.py with a megac built at aaada14, the last
# commit whose plans update each tensor with its own AdamW instruction: a 2-step fp64 checkpoint
# (ck/) of a tiny GPT on examples/tiny-corpus.npy, and (expected.json's numbers) the losses and
# grad norms of steps 3 and 4 resumed from it, with and without its optimizer state.
# usage: make_fixture.sh OLD_MEGAC   (run in this folder)
set -e
MEGAC=$1
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
M=gpt:layers=1,hidden=8,heads=2,seq=64,vocab=256
C="--data $ROOT/examples/tiny-corpus.npy --global-batch 4 --micro-batch 2 --lr 1e-2 --threads 1
   --precision fp64 --clip-grad 0.5"
rm -rf ck
"$MEGAC" train --model $M $C --steps 2 --save ck
"$MEGAC" train --model $M $C --steps 4 --load ck --log-json resumed.jsonl
"$MEGAC" train --model $M $C --steps 4 --load ck --no-load-optim --log-json noopt.jsonl
echo "copy the loss and grad_norm of resumed.jsonl and noopt.jsonl into expected.json"
