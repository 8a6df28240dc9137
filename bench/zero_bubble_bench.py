"""The pipeline bubble of 1f1b and the zero-bubble schedules, measured from `megac train --trace`
against the schedule simulator (issue 35; docs/pipeline.md "Zero-bubble schedules"). For each
schedule, `megac train` runs a GPT on 2 ranks x 1 kernel thread, pp 2, m micro-batches (default
4), and traces steps 2..steps. Per traced step and rank: busy = the summed durations of its chunk
functions (forward.c<c>, backward[_input|_weight].c<c>: compute only, not the waits in receives),
makespan = the latest end of one on any rank minus the step's start (ranks' clocks start together
at each step, after the previous step's collectives). Measured bubble = mean over ranks of
makespan - busy, the simulator's `bubble` (every stage starts the step together; the optimizer
step waits for all). Predicted: bench-pipeline-schedule p m F B W with the means of the measured
F, B and W over both stages (per stage: zbv's chunk steps are half a stage, so doubled; the
simulator takes one cost per kind, while chunk 0's B is empty and its W the whole backward, so the
prediction is rough). Prints medians over the traced steps. Timing: run it alone, under the CPU
lock (flock /tmp/megac-cpu.lock).

usage: zero_bubble_bench.py --megac build/bin/megac
           --schedule-bench build/bin/bench-pipeline-schedule [--model SPEC]
           [--micro-batches M] [--steps N] [--workdir DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

SCHEDULES = ("1f1b", "zb-h1", "zb-h2", "zbv")
KINDS = ("forward", "backward", "backward_input", "backward_weight")


def traced_steps(path):
    """[(step, {rank: (start, [(kind, ts, dur)])})] from a Chrome trace."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = {}
    for e in events:
        if e.get("cat") == "step":
            steps.setdefault(e["args"]["step"], {})[e["pid"]] = (e["ts"], e["ts"] + e["dur"], [])
    for e in events:
        # The chunk functions' own spans: the pipeline lane's step spans also hold the waits in
        # their receives.
        if e.get("cat") != "function" or e["name"].split(".c")[0] not in KINDS:
            continue
        kind = e["name"].split(".c")[0]
        for step, ranks in steps.items():
            start, end, spans = ranks.get(e["pid"], (None, None, None))
            if start is not None and start <= e["ts"] <= end:
                spans.append((kind, e["ts"], e["dur"]))
    return sorted(steps.items())


def measure(path, chunks_per_stage):
    bubbles, steps, times = [], [], {k: [] for k in ("forward", "backward_input",
                                                      "backward_weight", "backward")}
    for _, ranks in traced_steps(path):
        ends = [ts + dur - start for start, _, spans in ranks.values() for _, ts, dur in spans]
        makespan = max(ends)
        busy = [sum(d for _, _, d in spans) for _, _, spans in ranks.values()]
        bubbles.append(statistics.mean(makespan - b for b in busy))
        steps.append(max(end - start for start, end, _ in ranks.values()))
        for _, _, spans in ranks.values():
            for kind, _, dur in spans:
                times[kind].append(dur * chunks_per_stage)
    mean = {k: statistics.mean(v) if v else 0.0 for k, v in times.items()}
    return statistics.median(bubbles), statistics.median(steps), mean


def simulated_bubble(bench, schedule, m, f, b, w):
    out = subprocess.run([bench, "2", str(m), repr(f), repr(b), repr(w)], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == schedule:
            return float(parts[2])
    raise RuntimeError(f"bench-pipeline-schedule printed no row for {schedule}:\n{out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--schedule-bench", required=True)
    parser.add_argument("--model", default="gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1024")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--workdir", default="/tmp/zero_bubble_bench")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    seq = int(args.model.split("seq=")[1].split(",")[0])
    vocab = int(args.model.split("vocab=")[1].split(",")[0])
    data = os.path.join(args.workdir, "tokens.npy")
    rng = np.random.default_rng(0)
    np.save(data, rng.integers(0, vocab, size=(256, seq + 1)).astype(np.int32))
    print(f"{args.model}, 2 ranks x 1 thread, pp 2, m {args.micro_batches}, fp32; times in ms "
          f"(medians of steps 2..{args.steps})")
    print(f"{'schedule':<8} {'step':>8} {'F':>7} {'B':>7} {'W':>7} {'bubble':>8} "
          f"{'simulated':>9} {'ratio':>6}")
    for schedule in SCHEDULES:
        trace = os.path.join(args.workdir, f"{schedule}.json")
        argv = [args.megac, "train", "--model", args.model, "--data", data,
                "--steps", str(args.steps), "--global-batch", str(args.micro_batches),
                "--micro-batch", "1", "--lr", "1e-4", "--ranks", "2", "--pp", "2",
                "--threads", "1", "--schedule", schedule, "--trace", trace,
                "--trace-steps", str(args.steps - 1)]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"{schedule}: megac train failed:\n{result.stdout}{result.stderr}")
            return 1
        chunks = 2 if schedule == "zbv" else 1
        bubble, step, t = measure(trace, chunks)
        f = t["forward"]
        b = t["backward_input"] if schedule != "1f1b" else t["backward"]
        w = t["backward_weight"]
        sim = simulated_bubble(args.schedule_bench, schedule, args.micro_batches, f, b, w)
        # 1f1b's whole backward is B + W for the simulator; its W column stays 0.
        print(f"{schedule:<8} {step / 1e3:8.1f} {f / 1e3:7.1f} {b / 1e3:7.1f} {w / 1e3:7.1f} "
              f"{bubble / 1e3:8.1f} {sim / 1e3:9.1f} {bubble / sim if sim else 0:6.2f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
