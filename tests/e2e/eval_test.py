#!/usr/bin/env python3
"""`megac train --eval-data --eval-interval --eval-iters`: validation loss and perplexity during
training, without changing the training itself (same losses with and without it, to the bit),
on 1 rank and under layouts (2 ranks, tp 2 and dp 2, each dp rank reading only its rows).
Without mpirun the layout checks are skipped after the rest ran, and the script exits 77 (ctest's
SKIP_RETURN_CODE)."""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "examples", "tiny-corpus.npy")
MODEL = "gpt:layers=2,hidden=64,heads=4,seq=64,vocab=256"
from e2e_support import SKIP, check  # noqa: E402


def train(megac, log, *extra):
    subprocess.run([megac, "train", "--model", MODEL, "--data", DATA, "--steps", "6",
                    "--global-batch", "8", "--micro-batch", "4", "--lr", "3e-3", "--log-json",
                    log, *extra], check=True, capture_output=True, text=True)
    return [json.loads(line) for line in open(log)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = train(args.megac, os.path.join(tmp, "plain.jsonl"))
        evald = train(args.megac, os.path.join(tmp, "eval.jsonl"), "--eval-data", DATA,
                      "--eval-interval", "2", "--eval-iters", "2")
        steps = [r for r in evald if "loss" in r]
        vals = [r for r in evald if "val_loss" in r]
        check(len(steps) == 6 and all(math.isfinite(r["loss"]) for r in steps)
              and [r["loss"] for r in steps] == [r["loss"] for r in plain],
              "training losses (6 finite) are the same with and without validation")
        check([r["step"] for r in vals] == [2, 4, 6], "validation after steps 2, 4 and 6")
        check(all(math.isfinite(r["val_loss"]) and abs(r["val_ppl"] - math.exp(r["val_loss"]))
                  < 1e-9 * r["val_ppl"] for r in vals), "perplexity = exp(validation loss)")
        check(vals[-1]["val_loss"] < vals[0]["val_loss"],
              "validation loss falls (%.4f -> %.4f)" % (vals[0]["val_loss"], vals[-1]["val_loss"]))
        bad = subprocess.run([args.megac, "train", "--model", MODEL, "--data", DATA, "--steps",
                              "1", "--global-batch", "8", "--micro-batch", "4", "--lr", "1e-3",
                              "--eval-data", DATA], capture_output=True, text=True)
        check(bad.returncode == 2 and "--eval-interval" in bad.stderr,
              "--eval-data without --eval-interval is refused")
        if shutil.which("mpirun"):
            ranks = train(args.megac, os.path.join(tmp, "ranks.jsonl"), "--ranks", "2", "--tp",
                          "2", "--eval-data", DATA, "--eval-interval", "2", "--eval-iters", "2")
            rvals = [r["val_loss"] for r in ranks if "val_loss" in r]
            check(all(abs(a - b["val_loss"]) < 1e-4 * b["val_loss"] for a, b in zip(rvals, vals))
                  and len(rvals) == 3, "tp 2: the same validation losses (fp32 roundoff)")
            # dp 2: each rank reads only its rows of the validation batches.
            dp = train(args.megac, os.path.join(tmp, "dp.jsonl"), "--ranks", "2", "--dp", "2",
                       "--eval-data", DATA, "--eval-interval", "2", "--eval-iters", "2")
            dvals = [r["val_loss"] for r in dp if "val_loss" in r]
            check(all(abs(a - b["val_loss"]) < 1e-4 * b["val_loss"] for a, b in zip(dvals, vals))
                  and len(dvals) == 3, "dp 2: the same validation losses (fp32 roundoff)")
        else:
            print("SKIP: the tp 2 and dp 2 validation checks need mpirun, which is not on PATH "
                  "(install openmpi-bin)")
            return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
