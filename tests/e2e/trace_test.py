"""`megac train --trace`: the executed timeline as Chrome trace-event JSON.

Trains the tiny zoo GPT on examples/tiny-corpus.npy for 3 steps and checks the trace of the
default traced steps (2 and 3):
  - one rank: valid JSON, process 0 only, the steps "step 2" and "step 3" on the pipeline lane
    (tid 2), the functions forward_backward and apply_gradients on the kernels lane (tid 0) with
    their instructions nested inside them, arena_bytes and peak_rss_bytes for the rank;
    --trace-steps 1 traces step 2 only;
  - two ranks, --pp 2 (1F1B, 4 micro-batches): events of both ranks; on rank s exactly the
    steps "F<m> c<s>" and "B<m> c<s>" for m = 0..3, once per traced step; the pipeline's Send and
    Recv (tid 1) of the activations and their gradients, b*seq*hidden*4 = 4096 bytes each, 8 of
    each kind per rank; the loss AllReduce over [pp]; positive arena bytes for both ranks;
  - two ranks, --pp 2 --vpp 2 (a 4-layer GPT): rank s runs the steps of chunks s and s + 2;
  - the flag errors (--trace-steps without --trace, a missing directory).
Exits 77 (skip) for the two-rank case when mpirun is missing, after the one-rank checks pass.

usage: trace_test.py --megac build/bin/megac --workdir DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

SPEC = "gpt:layers=2,hidden=16,heads=4,seq=64,vocab=256"
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                      "tiny-corpus.npy")
SKIP = 77
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def train(megac, trace, extra, spec=SPEC):
    argv = [megac, "train", "--model", spec, "--data", CORPUS, "--steps", "3",
            "--global-batch", "4", "--micro-batch", "1", "--lr", "1e-3", "--threads", "1",
            "--comm-timeout", "120", "--trace", trace, *extra]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    check(f"wrote {trace}" in result.stdout, f"no 'wrote {trace}' line in:\n{result.stdout}")
    with open(trace) as f:
        return json.load(f)


def complete(doc):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def inside(inner, outer):
    return outer["ts"] <= inner["ts"] + 1e-3 and \
        inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


def check_common(doc, ranks, what):
    other = doc.get("otherData", {})
    check(other.get("ranks") == ranks, f"{what}: otherData.ranks is {other.get('ranks')}")
    for key in ("arena_bytes", "peak_rss_bytes"):
        values = other.get(key)
        check(isinstance(values, list) and len(values) == ranks and
              all(isinstance(v, int) and v > 0 for v in values),
              f"{what}: otherData.{key} is {values}, expected {ranks} positive integers")
    events = complete(doc)
    check({e["pid"] for e in events} == set(range(ranks)),
          f"{what}: events of ranks {sorted({e['pid'] for e in events})}, expected 0..{ranks - 1}")
    names = {e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    check(len(names) == ranks and all(n.startswith("rank ") for n in names),
          f"{what}: process names {sorted(names)}")
    for e in events:
        check(e["dur"] >= 0 and e["ts"] >= 0, f"{what}: negative time in {e}")
    for pid in range(ranks):
        mine = [e for e in events if e["pid"] == pid]
        steps = sorted(e["name"] for e in mine if e["tid"] == 2 and e["cat"] == "step")
        check(steps == ["step 2", "step 3"], f"{what}: rank {pid} traced {steps}")
        functions = [e for e in mine if e["tid"] == 0 and e["cat"] == "function"]
        kernels = [e for e in mine if e["tid"] == 0 and e["cat"] == "kernel"]
        check(any(e["name"] == "apply_gradients" for e in functions),
              f"{what}: rank {pid} has no apply_gradients")
        check(any(e["name"] in ("MatMul", "Linear") for e in kernels),
              f"{what}: rank {pid} has no MatMul/Linear kernel")
        # Every instruction lies inside a run of its function.
        by_function = {}
        for f in functions:
            by_function.setdefault(f["name"], []).append(f)
        stray = [k for k in kernels
                 if not any(inside(k, f) for f in by_function.get(k["args"]["function"], []))]
        check(not stray, f"{what}: rank {pid}: {len(stray)} kernels outside their function, "
                         f"e.g. {stray[:1]}")
    return events


def one_rank(megac, workdir):
    doc = train(megac, os.path.join(workdir, "one.json"), [])
    events = check_common(doc, 1, "1 rank")
    functions = {e["name"] for e in events if e["cat"] == "function"}
    check("forward_backward" in functions, f"1 rank: functions {sorted(functions)}")
    check(not any(re.fullmatch(r"[FB]\d+ c\d+", e["name"]) for e in events),
          "1 rank: pipeline steps in a run without a pipeline")
    # Four micro-batches a step, two steps.
    runs = [e for e in events if e["name"] == "forward_backward"]
    check(len(runs) == 8, f"1 rank: {len(runs)} runs of forward_backward, expected 8")

    doc = train(megac, os.path.join(workdir, "one_step.json"), ["--trace-steps", "1"])
    steps = [e["name"] for e in complete(doc) if e["cat"] == "step"]
    check(steps == ["step 2"], f"--trace-steps 1: traced {steps}")
    check(doc["otherData"].get("traced_steps") == [2, 2],
          f"--trace-steps 1: otherData.traced_steps {doc['otherData'].get('traced_steps')}")


def two_ranks(megac, workdir):
    doc = train(megac, os.path.join(workdir, "pp2.json"), ["--ranks", "2", "--pp", "2"])
    events = check_common(doc, 2, "pp 2")
    check(doc["otherData"].get("pp") == 2, f"pp 2: otherData {doc['otherData']}")
    for pid in range(2):
        mine = [e for e in events if e["pid"] == pid]
        steps = [e for e in mine if e["tid"] == 2 and e["cat"] in ("forward", "backward")]
        got = sorted(e["name"] for e in steps)
        want = sorted(f"{k}{m} c{pid}" for k in "FB" for m in range(4) for _ in range(2))
        check(got == want, f"pp 2: rank {pid} pipeline steps {got}, expected {want}")
        outer = [e for e in mine if e["cat"] == "step"]
        check(all(any(inside(s, o) for o in outer) for s in steps),
              f"pp 2: rank {pid} has pipeline steps outside the optimizer steps")
        comm = [e for e in mine if e["tid"] == 1]
        # The pipeline runner's transfers (outside any function): [1, 64, 16] f32 each.
        for op in ("Send", "Recv"):
            transfers = [e for e in comm if e["name"] == op and "function" not in e["args"]]
            sizes = sorted({e["args"]["bytes"] for e in transfers})
            check(len(transfers) == 8 and sizes == [4096],
                  f"pp 2: rank {pid}: {len(transfers)} pipeline {op}s of {sizes} bytes, "
                  "expected 8 of 4096")
            check(all(e["args"]["peer"] == 1 - pid for e in transfers),
                  f"pp 2: rank {pid}: a pipeline {op} not to/from rank {1 - pid}")
        reduces = [e for e in comm if e["name"] == "AllReduce"]
        check(any(e["args"]["group"] == "[pp] (ranks 0, 1)" for e in reduces),
              f"pp 2: rank {pid}: no AllReduce over [pp] (ranks 0, 1): "
              f"{sorted({e['args']['group'] for e in reduces})}")


def interleaved(megac, workdir):
    # 4 layers cut into 4 chunks: rank s runs chunks s and s + 2, in the interleaved order.
    doc = train(megac, os.path.join(workdir, "vpp2.json"),
                ["--ranks", "2", "--pp", "2", "--vpp", "2"],
                spec="gpt:layers=4,hidden=16,heads=4,seq=64,vocab=256")
    events = check_common(doc, 2, "pp 2 vpp 2")
    for pid in range(2):
        got = sorted(e["name"] for e in events
                     if e["pid"] == pid and e["tid"] == 2 and e["cat"] in ("forward", "backward"))
        want = sorted(f"{k}{m} c{c}" for k in "FB" for m in range(4) for c in (pid, pid + 2)
                      for _ in range(2))
        check(got == want, f"pp 2 vpp 2: rank {pid} pipeline steps {got}, expected {want}")


def errors(megac, workdir):
    base = [megac, "train", "--model", SPEC, "--data", CORPUS, "--steps", "1",
            "--global-batch", "1", "--micro-batch", "1", "--lr", "1e-3"]
    cases = [(["--trace-steps", "2"], "--trace-steps needs --trace FILE.json"),
             (["--trace", os.path.join(workdir, "missing", "t.json")], "--trace: no directory"),
             (["--trace", os.path.join(workdir, "t.json"), "--trace-steps", "0"],
              "--trace-steps: '0' is not an integer >= 1")]
    for extra, message in cases:
        result = subprocess.run(base + extra, capture_output=True, text=True, timeout=120)
        check(result.returncode == 2 and message in result.stderr,
              f"{' '.join(extra)}: exit {result.returncode}, stderr {result.stderr!r}, "
              f"expected 2 and {message!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    errors(args.megac, args.workdir)
    one_rank(args.megac, args.workdir)
    skipped = shutil.which("mpirun") is None
    if not skipped:
        two_ranks(args.megac, args.workdir)
        interleaved(args.megac, args.workdir)
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        return 1
    if skipped:
        print("SKIP: the two-rank trace needs mpirun (Debian: openmpi-bin); one rank passed")
        return SKIP
    print("PASS: traces of 1 rank and of 2 ranks (pp 2; pp 2 with vpp 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
