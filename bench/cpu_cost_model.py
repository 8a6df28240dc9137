"""The planner's predicted step time against measured `megac train` runs on this machine's CPU.

usage: cpu_cost_model.py --megac build/bin/megac --workdir DIR [--repeats 5] [--steps 10]
                         [--specs DIR] [--only NAME ...]

Successor of cost_model_check.py (issue 15). First `megac calibrate --backend cpu` writes one
hardware spec per (ranks, threads) used below (or --specs DIR reuses them); the calibration
never runs a training plan. Then, per configuration (model shape, ranks x threads <= cores,
micro-batch, accumulation, vpp, recompute, ZeRO, SP), `megac plan --cluster SPEC:1xRANKS
--stack megac` with every choice pinned predicts the step, and `megac train` runs the same
model, batch and layout `--repeats` times; a run's time is the median of its steps after the
first two, the measurement the median of the runs, its spread (max - min) / median. Prints the
table and the mean and max |error|. Exits non-zero only if a run fails, never on the error.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SKIP = 2
SMALL = "gpt:layers=4,hidden=128,heads=4,seq=64,vocab=256"
WIDE = "gpt:layers=4,hidden=256,heads=8,seq=128,vocab=512"
LLAMA = "llama:layers=4,hidden=256,heads=8,kv_heads=4,ffn=512,seq=128,vocab=512"
# name, model, ranks, threads, layout (tp, pp, dp, vpp, micro-batch, recompute, zero, sp),
# global batch
CONFIGS = [
    ("small-1r1t-mb8", SMALL, 1, 1, (1, 1, 1, 1, 8, "none", 0, False), 8),
    ("small-1r1t-mb2-acc4", SMALL, 1, 1, (1, 1, 1, 1, 2, "none", 0, False), 8),
    ("small-1r2t-mb8", SMALL, 1, 2, (1, 1, 1, 1, 8, "none", 0, False), 8),
    ("wide-1r1t-mb4", WIDE, 1, 1, (1, 1, 1, 1, 4, "none", 0, False), 8),
    ("wide-1r2t-mb4", WIDE, 1, 2, (1, 1, 1, 1, 4, "none", 0, False), 8),
    ("wide-1r2t-full-recompute", WIDE, 1, 2, (1, 1, 1, 1, 4, "full", 0, False), 8),
    ("wide-1r2t-selective", WIDE, 1, 2, (1, 1, 1, 1, 4, "selective", 0, False), 8),
    ("llama-1r2t-mb4", LLAMA, 1, 2, (1, 1, 1, 1, 4, "none", 0, False), 8),
    ("wide-tp2", WIDE, 2, 1, (2, 1, 1, 1, 4, "none", 0, False), 8),
    ("wide-tp2-sp", WIDE, 2, 1, (2, 1, 1, 1, 4, "none", 0, True), 8),
    ("wide-pp2-mb2", WIDE, 2, 1, (1, 2, 1, 1, 2, "none", 0, False), 8),
    ("wide-pp2-vpp2", WIDE, 2, 1, (1, 2, 1, 2, 2, "none", 0, False), 8),
    ("wide-dp2", WIDE, 2, 1, (1, 1, 2, 1, 4, "none", 0, False), 16),
    ("wide-dp2-zero1", WIDE, 2, 1, (1, 1, 2, 1, 4, "none", 1, False), 16),
    ("small-dp2-mb1-acc4", SMALL, 2, 1, (1, 1, 2, 1, 1, "none", 0, False), 8),
]


def token_rows(workdir, model):
    """A seeded .npy of random token rows (S+1 tokens each) matching the model's seq and vocab."""
    keys = dict(part.split("=") for part in model.split(":", 1)[1].split(","))
    seq, vocab = int(keys["seq"]), int(keys["vocab"])
    path = os.path.join(workdir, "tokens-s%d-v%d.npy" % (seq, vocab))
    if not os.path.exists(path):
        rows = np.random.default_rng(0).integers(0, vocab, size=(256, seq + 1), dtype=np.int32)
        np.save(path, rows)
    return path


def layout_flags(layout):
    tp, pp, dp, vpp, mb, recompute, zero, sp = layout
    flags = ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--vpp", str(vpp),
             "--micro-batch", str(mb), "--recompute", recompute, "--zero", str(zero)]
    return flags


def calibrate(megac, specs, ranks, threads):
    path = os.path.join(specs, "cpu-%dr%dt.json" % (ranks, threads))
    if not os.path.exists(path):
        start = time.time()
        subprocess.run([megac, "calibrate", "--backend", "cpu", "--ranks", str(ranks),
                        "--threads", str(threads), "-o", path], check=True)
        print("calibrated %s in %.0f s" % (os.path.basename(path), time.time() - start),
              file=sys.stderr)
    return path


def predict(megac, spec, model, ranks, layout, global_batch):
    sp = layout[7]
    out = subprocess.run(
        [megac, "plan", "--model", model, "--cluster", "%s:1x%d" % (spec, ranks),
         "--global-batch", str(global_batch), "--stack", "megac", "--precision", "fp32",
         "--json", "--no-compile", "--top", "1",
         "--sequence-parallel" if sp else "--no-sequence-parallel"] + layout_flags(layout),
        check=True, capture_output=True, text=True).stdout
    layouts = json.loads(out)["layouts"]
    if not layouts:
        raise SystemExit("the planner found no fitting layout for %s" % model)
    return layouts[0]["step_time_s"] * 1e3


def measure(megac, workdir, data, name, model, ranks, threads, layout, global_batch, steps):
    log = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [megac, "train", "--model", model, "--data", data, "--steps", str(steps),
           "--global-batch", str(global_batch), "--lr", "1e-3", "--precision", "fp32",
           "--threads", str(threads), "--log-json", log] + layout_flags(layout)
    if layout[7]:
        cmd.append("--sequence-parallel")
    if ranks > 1:
        cmd += ["--ranks", str(ranks)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    records = [json.loads(line) for line in open(log)]
    return statistics.median(r["step_time_s"] for r in records[SKIP:]) * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--specs", help="folder of calibrated specs (made if missing)")
    parser.add_argument("--only", action="append", help="run only these configurations")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    specs = args.specs or os.path.join(args.workdir, "specs")
    os.makedirs(specs, exist_ok=True)
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    cores = os.cpu_count()
    print("CPU runtime, %d cores; median of %d runs x %d steps (first %d skipped), fp32"
          % (cores, args.repeats, args.steps, SKIP))
    print("%-26s %-5s %12s %12s %8s %8s" % ("configuration", "r x t", "predicted ms",
                                             "measured ms", "spread", "error"))
    errors = []
    for name, model, ranks, threads, layout, global_batch in configs:
        if ranks * threads > cores:
            print("%-26s skipped: %d ranks x %d threads > %d cores" % (name, ranks, threads,
                                                                       cores))
            continue
        spec = calibrate(args.megac, specs, ranks, threads)
        predicted = predict(args.megac, spec, model, ranks, layout, global_batch)
        data = token_rows(args.workdir, model)
        runs = [measure(args.megac, args.workdir, data, name, model, ranks, threads, layout,
                        global_batch, args.steps) for _ in range(args.repeats)]
        measured = statistics.median(runs)
        spread = (max(runs) - min(runs)) / measured
        error = (predicted - measured) / measured
        errors.append(abs(error))
        print("%-26s %dx%d   %12.1f %12.1f %7.1f%% %+7.1f%%" % (
            name, ranks, threads, predicted, measured, 100 * spread, 100 * error), flush=True)
    if errors:
        print("%d configurations: mean |error| %.1f%%, max |error| %.1f%%"
              % (len(errors), 100 * statistics.mean(errors), 100 * max(errors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
