"""How much emulated link time the latency-hiding schedule hides (issue 29; prints a table).

2 CPU ranks x 1 thread train a GPT (zoo gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1024, ~3.4M
parameters, fp32) at dp 2 (and dp 2 + ZeRO-1 with --zero1) with --bucket-size 800000 (5 dp
buckets), in four variants: --overlap off/on x with/without --emulate-link 2e8,2e-5. Each run
trains --steps steps (default 12; the first 2 are dropped as warm-up); the runs are interleaved
(off, on, off, on, ...) --repeats times and each variant's step time is the median of all its
kept steps.

  exposed(v) = median step(v, emulated) - median step(v, not emulated)
  link time  ~ exposed(off): with every collective blocking, the whole emulated time is exposed
  hidden     = 1 - exposed(on) / exposed(off)

What overlaps today: in @apply_gradients each bucket's reduction with the next buckets'
flattening and with the optimizer updates of the buckets already reduced (ZeRO-1: the
parameter all-gathers with the following updates). The reduction does not overlap the last
micro-batch's backward yet (that needs a backward variant for the last micro-batch), so most of
the link time stays exposed when the optimizer is short next to it.

usage: overlap_bench.py --megac build/bin/megac [--workdir DIR] [--steps 12] [--repeats 2]
                        [--zero1]
Not a test: it never fails on time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

SPEC = "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1024"
LINK = "2e8,2e-5"


def run(megac, data, workdir, name, steps, overlap, emulate, zero):
    log = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    argv = [megac, "train", "--model", SPEC, "--data", data, "--steps", str(steps),
            "--global-batch", "8", "--micro-batch", "4", "--lr", "1e-4", "--precision", "fp32",
            "--ranks", "2", "--dp", "2", "--threads", "1", "--bucket-size", "800000",
            "--overlap", overlap, "--log-json", log, "--oversubscribe"]
    if zero:
        argv += ["--zero", "1"]
    if emulate:
        argv += ["--emulate-link", LINK]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"megac failed ({result.returncode}): {' '.join(argv)}\n"
                 f"{(result.stdout + result.stderr)[-2000:]}")
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["step_time_s"] for r in records[2:]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--zero1", action="store_true")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="overlap-bench-")
    os.makedirs(workdir, exist_ok=True)
    data = os.path.join(workdir, "tokens.npy")
    rng = np.random.default_rng(0)
    np.save(data, rng.integers(0, 1024, size=(64, 129), dtype=np.int32))
    times = {}
    for rep in range(args.repeats):
        for emulate in (False, True):
            for overlap in ("off", "on"):
                key = (overlap, emulate)
                name = f"{overlap}-{'emul' if emulate else 'plain'}-{rep}"
                times.setdefault(key, []).extend(
                    run(args.megac, data, workdir, name, args.steps, overlap, emulate,
                        args.zero1))
    med = {k: statistics.median(v) for k, v in times.items()}
    layout = "dp 2 + ZeRO-1" if args.zero1 else "dp 2"
    print(f"{layout}, {SPEC}, --bucket-size 800000, --emulate-link {LINK}; medians of "
          f"{len(times[('off', False)])} steps per variant")
    print(f"{'overlap':<8} {'plain s':>9} {'emulated s':>11} {'exposed s':>10}")
    for overlap in ("off", "on"):
        exposed = med[(overlap, True)] - med[(overlap, False)]
        print(f"{overlap:<8} {med[(overlap, False)]:>9.4f} {med[(overlap, True)]:>11.4f} "
              f"{exposed:>10.4f}")
    off = med[("off", True)] - med[("off", False)]
    on = med[("on", True)] - med[("on", False)]
    hidden = 1 - on / off if off > 0 else float("nan")
    print(f"hidden fraction of the link time (1 - exposed(on) / exposed(off)): {hidden:.1%}")
    print(f"no-emulation cost of the schedule (on / off - 1): "
          f"{med[('on', False)] / med[('off', False)] - 1:+.1%}")


if __name__ == "__main__":
    main()
