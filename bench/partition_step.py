"""Step time of one small GPT under several layouts (megac train, MPI ranks on this machine).

usage: partition_step.py --megac build/bin/megac --workdir DIR [--steps 12] [--model SPEC]
        [--layout "tp=2" --layout "pp=2" ...]
Prints, per layout (tp, pp, dp), the median ms/step and tokens/s over the steps after the
first two, and the ratio to one rank. The global batch is the same for every layout; the
micro-batch per data-parallel rank shrinks with dp. Ranks are oversubscribed when the machine
has fewer cores; each rank runs cores/ranks BLAS threads (at least 1). Exits non-zero only if a
run fails; never on time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MODEL = "gpt:layers=4,hidden=128,heads=4,seq=64,vocab=256"
GLOBAL_BATCH, MICRO_BATCH = 8, 4
SKIP = 2
DEFAULT_LAYOUTS = ["tp=1,pp=1,dp=1", "tp=2,pp=1,dp=1", "tp=1,pp=2,dp=1", "tp=1,pp=1,dp=2"]


def parse(layout):
    degrees = {"tp": 1, "pp": 1, "dp": 1}
    for part in layout.split(","):
        key, value = part.split("=")
        degrees[key] = int(value)
    return degrees


def run(megac, workdir, data, degrees, steps, model):
    ranks = degrees["tp"] * degrees["pp"] * degrees["dp"]
    log = os.path.join(workdir, "tp%d-pp%d-dp%d.jsonl" % (degrees["tp"], degrees["pp"], degrees["dp"]))
    cmd = [megac, "train", "--model", model, "--data", data, "--steps", str(steps),
           "--global-batch", str(GLOBAL_BATCH), "--micro-batch", str(MICRO_BATCH // degrees["dp"]),
           "--lr", "1e-3", "--log-json", log]
    if ranks > 1:
        cmd += ["--ranks", str(ranks), "--tp", str(degrees["tp"]), "--pp", str(degrees["pp"]),
                "--dp", str(degrees["dp"])]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    records = [json.loads(line) for line in open(log)]
    times = [r["step_time_s"] for r in records[SKIP:]] or [r["step_time_s"] for r in records]
    ms = statistics.median(times) * 1e3
    return ms, records[-1]["tokens"] / (ms / 1e3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--layout", action="append")
    parser.add_argument("--model", default=MODEL, help="a zoo GPT spec with seq=64, vocab=256")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                        "tiny-corpus.npy")
    print("model %s, global batch %d, %d cores" % (args.model, GLOBAL_BATCH, os.cpu_count()))
    print("%-16s %10s %12s %8s" % ("layout", "ms/step", "tokens/s", "vs 1"))
    base = None
    for layout in args.layout or DEFAULT_LAYOUTS:
        degrees = parse(layout)
        ms, tps = run(args.megac, args.workdir, data, degrees, args.steps, args.model)
        base = base or ms
        print("%-16s %10.1f %12.0f %8.2f" % (layout, ms, tps, ms / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
