"""The planner's predicted step time against the measured one, on this machine's CPU runtime.

usage: cost_model_check.py --megac build/bin/megac --workdir DIR [--steps 12] [--model SPEC]
For each layout (tp, pp, dp) with at most 2 ranks, runs `megac plan --cluster cpu:1xN --json`
with every choice pinned (fp32, as the CPU runtime trains) and `megac train` on the same model,
batch and layout, and prints predicted ms/step, measured ms/step (median after warm-up) and
their ratio. Exits non-zero only if a run fails; never on the ratio.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from partition_step import GLOBAL_BATCH, MICRO_BATCH, run  # noqa: E402

MODEL = "gpt:layers=4,hidden=128,heads=4,seq=64,vocab=256"
LAYOUTS = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2)]


def predict(megac, model, tp, pp, dp):
    ranks = tp * pp * dp
    out = subprocess.run(
        [megac, "plan", "--model", model, "--cluster", "cpu:1x%d" % ranks, "--global-batch",
         str(GLOBAL_BATCH), "--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--vpp", "1",
         "--micro-batch", str(MICRO_BATCH // dp), "--zero", "0", "--recompute", "none",
         "--no-sequence-parallel", "--precision", "fp32", "--json", "--top", "1"],
        check=True, capture_output=True, text=True).stdout
    layouts = json.loads(out)["layouts"]
    if not layouts:
        raise SystemExit("the planner found no fitting layout for tp=%d pp=%d dp=%d" % (tp, pp, dp))
    return layouts[0]["step_time_s"] * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                        "tiny-corpus.npy")
    print("model %s, global batch %d, fp32, CPU runtime" % (args.model, GLOBAL_BATCH))
    print("%-16s %14s %14s %8s" % ("layout", "predicted ms", "measured ms", "ratio"))
    for tp, pp, dp in LAYOUTS:
        predicted = predict(args.megac, args.model, tp, pp, dp)
        measured, _ = run(args.megac, args.workdir, data, {"tp": tp, "pp": pp, "dp": dp},
                          args.steps, args.model)
        print("%-16s %14.1f %14.1f %8.2f" % ("tp=%d,pp=%d,dp=%d" % (tp, pp, dp), predicted,
                                             measured, predicted / measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
