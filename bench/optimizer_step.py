"""Times @apply_gradients (global norm, clipping, AdamW) of `megac train` on the mid-size GPT of
issue 30 (6 layers, hidden 512, seq 256, vocab 8192: 26M parameters in 76 tensors, fp32), from
the trace's `apply_gradients` function spans, for one megac and optionally a baseline megac
(e.g. one built before the multi-tensor optimizer, whose plans run one AdamW instruction per
tensor).

usage: optimizer_step.py --megac build/bin/megac [--baseline OLD_MEGAC] --workdir DIR
                         [--threads 2] [--steps 7]
Prints, per binary, the median ms of @apply_gradients over the traced steps (all but the first)
its AdamW / AdamWMulti instruction counts and the mean ms of each opcode in it. Exits non-zero only if a run fails; never on time.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys

import numpy as np

MODEL = "gpt:layers=6,hidden=512,heads=8,seq=256,vocab=8192"
SEQ, VOCAB = 256, 8192


def tokens(workdir):
    path = os.path.join(workdir, "tokens.npy")
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        np.save(path, rng.integers(0, VOCAB, size=(64, SEQ + 1), dtype=np.int64))
    return path


def run(megac, workdir, name, args):
    trace = os.path.join(workdir, name + ".trace.json")
    cmd = [megac, "train", "--model", MODEL, "--data", tokens(workdir), "--steps",
           str(args.steps), "--global-batch", "4", "--micro-batch", "4", "--lr", "1e-4",
           "--clip-grad", "1.0", "--threads", str(args.threads), "--trace", trace,
           "--trace-steps", str(args.steps - 1)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), result.stdout, result.stderr))
    events = json.load(open(trace))["traceEvents"]
    spans = [e["dur"] / 1e3 for e in events
             if e.get("cat") == "function" and e.get("name") == "apply_gradients"]
    ops = [e["name"] for e in events if e.get("cat") == "kernel" and e.get("ph") == "X" and
           e.get("args", {}).get("function") == "apply_gradients"]
    steps = max(1, len(spans))
    ms = collections.Counter()
    for e in events:
        if e.get("cat") == "kernel" and e.get("args", {}).get("function") == "apply_gradients":
            ms[e["name"]] += e["dur"] / 1e3 / steps
    print("%-9s apply_gradients %.2f ms (median of %d steps; min %.2f) | per step: %d AdamW, "
          "%d AdamWMulti, %d instructions in all | %s" %
          (name, statistics.median(spans), len(spans), min(spans), ops.count("AdamW") // steps,
           ops.count("AdamWMulti") // steps, len(ops) // steps, megac))
    print("          mean ms per step by opcode: " +
          ", ".join("%s %.2f" % (op, t) for op, t in ms.most_common()))
    return statistics.median(spans)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--baseline")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=7)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    now = run(os.path.abspath(args.megac), args.workdir, "megac", args)
    if args.baseline:
        before = run(os.path.abspath(args.baseline), args.workdir, "baseline", args)
        print("apply_gradients: baseline %.2f ms -> %.2f ms (%.2fx)" % (before, now, before / now))


if __name__ == "__main__":
    main()
