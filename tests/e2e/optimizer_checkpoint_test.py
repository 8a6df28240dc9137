#!/usr/bin/env python3
"""Old checkpoints load under the multi-tensor optimizer (issue 30 item 3).

tests/e2e/optimizer_checkpoint/ck is a 2-step fp64 checkpoint of a tiny GPT saved by megac
before mega-training-multi-tensor-optimizer (each tensor updated by its own AdamW instruction;
make_fixture.sh remakes it with such a binary). Today's megac resumes it for steps 3 and 4:

- the plan it trains with updates the parameters with one AdamWMulti instruction and no
  per-tensor AdamW (from the trace of a step of the same flags), so the old state is read by
  the grouped plan;
- the losses and grad norms of steps 3 and 4 equal the old binary's (expected.json) within
  1e-9 relative. Error model: fp64 throughout, one thread; the grouped AdamW computes the same
  bits as the per-tensor one (OptimMulti unit test), so on the fixture's machine they agree
  exactly; elsewhere OpenBLAS may pick another dgemm kernel, which reorders fp64 sums (relative
  ~1e-15 per GEMM, carried through two steps of Adam's normalized update at lr 1e-2: far below
  1e-9). Step 4 depends on the loaded moments: resumed without them (--no-load-optim) the old
  binary's step-4 loss differs by 2e-2, which the test also checks of today's binary.

usage: optimizer_checkpoint_test.py --megac build/bin/megac --workdir DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "optimizer_checkpoint")
MODEL = "gpt:layers=1,hidden=8,heads=2,seq=64,vocab=256"
RTOL = 1e-9


def train(megac, workdir, name, extra, steps=4, load=True):
    log = os.path.join(workdir, name + ".jsonl")
    cmd = [megac, "train", "--model", MODEL, "--data",
           os.path.join(ROOT, "examples", "tiny-corpus.npy"), "--global-batch", "4",
           "--micro-batch", "2", "--lr", "1e-2", "--threads", "1", "--precision", "fp64",
           "--clip-grad", "0.5", "--steps", str(steps), "--log-json", log, *extra]
    if load:
        cmd += ["--load", os.path.join(workdir, "ck")]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        raise SystemExit("FAIL: %s\n%s%s" % (" ".join(cmd), run.stdout, run.stderr))
    return [json.loads(line) for line in open(log)]


def compare(got, want, what):
    problems = []
    if [g["step"] for g in got] != [w["step"] for w in want]:
        return ["%s: steps %s, expected %s" % (what, [g["step"] for g in got],
                                               [w["step"] for w in want])]
    for g, w in zip(got, want):
        for key in ("loss", "grad_norm"):
            if abs(g[key] - w[key]) > RTOL * abs(w[key]):
                problems.append("%s step %d %s: %.17g, the old binary's %.17g" %
                                (what, g["step"], key, g[key], w[key]))
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    shutil.rmtree(os.path.join(args.workdir, "ck"), ignore_errors=True)
    shutil.copytree(os.path.join(FIXTURE, "ck"), os.path.join(args.workdir, "ck"))
    expected = json.load(open(os.path.join(FIXTURE, "expected.json")))
    megac = os.path.abspath(args.megac)

    # The plan of these flags (--trace cannot resume: one step from scratch runs the same plan).
    trace = os.path.join(args.workdir, "trace.json")
    train(megac, args.workdir, "traced", ["--trace", trace, "--trace-steps", "1"], steps=1,
          load=False)
    ops = [e["name"] for e in json.load(open(trace))["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") == "kernel"]
    problems = []
    if ops.count("AdamWMulti") != 1 or "AdamW" in ops:
        problems.append("a step of this plan ran %d AdamWMulti and %d AdamW instructions; "
                        "expected one AdamWMulti and no AdamW" % (ops.count("AdamWMulti"),
                                                                  ops.count("AdamW")))
    resumed = train(megac, args.workdir, "resumed", [])
    problems += compare(resumed, expected["resumed"], "resumed")
    fresh = train(megac, args.workdir, "without-state", ["--no-load-optim"])
    problems += compare(fresh, expected["resumed_without_optimizer_state"],
                        "resumed without optimizer state")
    # The fixture can tell loaded moments from fresh ones.
    gap = abs(expected["resumed"][1]["loss"] - fresh[1]["loss"])
    if gap < 1e-6:
        problems.append("step 4's loss is the same with and without the optimizer state "
                        "(%.3g apart): the fixture cannot show the state loaded" % gap)
    for r in resumed:
        print("step %d: loss %.17g grad_norm %.17g" % (r["step"], r["loss"], r["grad_norm"]))
    if problems:
        print("FAIL:\n" + "\n".join(problems))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
