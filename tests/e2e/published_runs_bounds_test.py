#!/usr/bin/env python3
"""Regression guard for the planner's error on published training runs (issue 34, item 5).

Plans every run of bench/published_runs.json (and of bench/device_runs.json, this project's own
GPU measurements) with every choice pinned (the bench's own
invocation, bench/published_runs.py) and asserts, per set (megatron-2021, megatron-deepspeed,
megatron-core) and per group (held out, fit set), that mean |error|, max |error| and the signed
mean stay within the bounds below -- and that every run, which ran and so fit in its GPUs'
memory, is predicted to fit. No timing is involved: the measured side is the published number,
the predicted side a deterministic function of the planner's code, so a planner change that moves
a prediction out of bounds fails here.

Bounds: issue 34's targets (mean <= 8%, max <= 15%, |signed mean| <= 5%) where the set meets
them; where it does not, the value achieved when the bound was set plus 1 point (and the comment
says so), so the guard catches regressions without pretending the target is met. Error model:
the planner is deterministic up to floating-point summation order (far below 0.01%), so the
1-point margin is pure headroom for deliberate small model changes, which must then update the
achieved values here and in docs/planner.md ("Blind protocol", rule 4).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import published_runs  # noqa: E402  (plan_command, plan, predict_all: the bench's invocation)

TARGET = {"mean": 8.0, "max": 15.0, "signed": 5.0}
# (set, fit) -> bounds in percent on mean |error|, max |error| and |signed mean|. The achieved
# values (bench/published_runs.py; docs/planner.md, "Results") are in each comment.
BOUNDS = {
    # 12 held-out runs (SC21 Table 1, Korthikanti 530B at dp 8): achieved 2.4 / 7.0 / +0.1 with
    # the GEMM depth use and cuBLAS's tiles (issue 34; before: 6.7 / 12.4 / -6.5): target.
    ("megatron-2021", False): TARGET,
    # Korthikanti Table 5 (8 runs; nothing fitted on them): achieved 8.2 / 12.9 / +8.2 (before:
    # 4.1 / 8.0 / +1.0). Issue 34's targets are for held-out runs; this in-sample group moved
    # slow with the same mechanism that met every held-out target (the 1T runs, pp 64 without
    # interleaving, +12-13%): mean and signed achieved + 1, max the target.
    ("megatron-2021", True): {"mean": 9.2, "max": 15.0, "signed": 9.2},
    # MT-NLG 530B at 350 and 420 nodes, BLOOM-176B on Jean Zay's network (3 runs), under the
    # megatron-deepspeed profile, its constant refitted on MT-NLG 280: achieved 4.7 / 9.5 / +1.6:
    # target.
    ("megatron-deepspeed", False): TARGET,
    # MT-NLG 530B at 280 nodes, the run the profile's one constant was fitted on: 0.0 / 0.0.
    ("megatron-deepspeed", True): TARGET,
    # 15 held-out runs (Megatron-LM README's 9 H100 table rows and its 2 strong-scaling
    # endpoints, Nemotron-4 340B x3, Mixtral 8x7B): achieved 11.2 / 30.7 / -4.7 (the first 13:
    # 11.9 / 29.3 / -4.7; before: 14.0 / 32.8 / -10.0): the signed mean meets the target, mean
    # and max miss it: achieved + 1. The max bound went from 30.3 to 31.7 (2026-12-06) with a
    # transcription correction, not a model change: the README's GPTs have untied embeddings
    # (their sizes say so), which adds the head's gradient to the 32B's exposed reduction
    # (29.3 -> 30.7%).
    ("megatron-core", False): {"mean": 12.0, "max": 31.7, "signed": 5.0},
    # Nemotron-4 15B Table 2 (3 runs, the declared fit set; nothing fitted): achieved
    # 4.8 / 6.2 / +0.7 (before 4.1 / 10.7 / -4.1): the earlier bounds, none loosened.
    ("megatron-core", True): {"mean": 8.0, "max": 11.7, "signed": 5.0},
    # bench/device_runs.json: this project's own PyTorch steps on the lent H200 (GPT-2 124M and a
    # 1.3B GPT, one GPU, torch.compile), planned with megatron-core's profile: the kernel model
    # on Hopper apart from any Megatron stack. Not blind (see the file's notes). Achieved
    # 6.6 / 10.4 / -3.8 (2026-12-06): the target.
    ("own-device-pytorch", False): TARGET,
}


def check(condition, message, failures):
    print(("ok: " if condition else "FAIL: ") + message)
    if not condition:
        failures.append(message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--json", action="append",
                        help="runs files (default: bench/published_runs.json and "
                             "bench/device_runs.json)")
    args = parser.parse_args()
    runs = []
    for path in args.json or [os.path.join(ROOT, "bench", name)
                              for name in ("published_runs.json", "device_runs.json")]:
        with open(path) as f:
            runs += json.load(f)
    failures = []
    errors = {}
    for run, layout, error, err in published_runs.predict_all(args.megac, runs):
        check(layout is not None, "%s plans (%s)" % (run["id"], error), failures)
        if layout is None:
            continue
        check(layout["fits"], "%s (%s): predicted %.1f GiB per GPU fits" %
              (run["id"], run["stack"], layout["memory_per_gpu_bytes"] / 2.0 ** 30), failures)
        errors.setdefault((run["set"], run["fit"]), []).append(err)
    for key in BOUNDS:
        name = "%s %s" % (key[0], "fit set" if key[1] else "held out")
        stats = published_runs.statistics(errors.get(key, []))
        check(stats is not None, "%s has runs" % name, failures)
        if stats is None:
            continue
        bound = BOUNDS[key]
        mean, worst, signed = stats
        check(mean <= bound["mean"], "%s: mean |error| %.2f%% <= %.1f%%" % (name, mean, bound["mean"]),
              failures)
        check(worst <= bound["max"], "%s: max |error| %.2f%% <= %.1f%%" % (name, worst, bound["max"]),
              failures)
        check(abs(signed) <= bound["signed"], "%s: |signed mean| %.2f%% <= %.1f%%" %
              (name, abs(signed), bound["signed"]), failures)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
