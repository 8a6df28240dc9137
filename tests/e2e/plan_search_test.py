#!/usr/bin/env python3
"""`megac plan --cluster`: the planner's command line (the cost model itself is unit-tested in
tests/unit/planner/).

- --json has the documented keys for every layout, fastest first, all fitting.
- Pinning every degree evaluates exactly that layout (what a Megatron user would run).
- The GPT-3 175B and 1T searches report their search time (printed, never asserted) and pick
  layouts with tp inside a node and pipeline stages across nodes.
- A layout that cannot fit says how much memory it needs and what would fix it; a bad cluster
  spec is a one-line error.
- --timeline writes an SVG with one forward block per (micro-batch, chunk) of the winner.
- The zero-bubble schedules (issue 35) are searched, win where they save bubble and the report
  says by how much; --schedule pins one; a stack without them refuses the pin.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

KEYS = {"tp", "pp", "dp", "vpp", "micro_batch", "sequence_parallel", "zero", "recompute",
        "step_time_s", "tflops_per_gpu", "mfu", "memory_per_gpu_bytes"}
GPT3 = "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=50257"
GPT1T = "gpt:layers=128,hidden=25600,heads=160,seq=2048,vocab=51200"


def plan(megac, *args, check=True):
    return subprocess.run([megac, "plan", *args], capture_output=True, text=True, check=check)


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    args = parser.parse_args()

    out = json.loads(plan(args.megac, "--model", GPT3, "--cluster", "a100-80g:128x8",
                          "--global-batch", "1536", "--json").stdout)
    layouts = out["layouts"]
    check(len(layouts) == 5 and all(KEYS <= set(l) for l in layouts),
          "175B: --json gives 5 layouts with every documented key")
    times = [l["step_time_s"] for l in layouts]
    check(times == sorted(times) and all(l["fits"] for l in layouts),
          "175B: fastest first, all fit in 80 GB (%.2f .. %.2f s)" % (times[0], times[-1]))
    best = layouts[0]
    check(best["tp"] <= 8 and best["pp"] > 1 and best["tp"] * best["pp"] * best["dp"] == 1024,
          "175B: tp within a node, pipeline across nodes (tp=%d pp=%d dp=%d), %d layouts in %.3f s"
          % (best["tp"], best["pp"], best["dp"], out["evaluated"], out["search_seconds"]))
    check(best["memory_per_gpu_bytes"] < 80e9 and 0 < best["mfu"] < 1, "175B: memory and MFU sane")

    out = json.loads(plan(args.megac, "--model", GPT1T, "--cluster", "a100-80g:384x8",
                          "--global-batch", "3072", "--json").stdout)
    best = out["layouts"][0]
    # A whole node per layer: tp 8, or tp 4 x cp 2, which ties with it once the bf16 weight
    # gradients accumulate in their GEMM (issue 30; SearchTest.Gpt1TOn3072A100 says why).
    check(best["tp"] * best.get("cp", 1) == 8 and best["tp"] >= 4 and best["pp"] > 1,
          "1T: tp=%d cp=%d pp=%d dp=%d vpp=%d, %d layouts in %.3f s"
          % (best["tp"], best.get("cp", 1), best["pp"], best["dp"], best["vpp"],
             out["evaluated"], out["search_seconds"]))

    pinned = json.loads(plan(args.megac, "--model", GPT3, "--cluster", "a100-80g:128x8",
                             "--global-batch", "1536", "--tp", "8", "--pp", "16", "--dp", "8",
                             "--vpp", "1", "--micro-batch", "1", "--sequence-parallel", "--zero",
                             "1", "--recompute", "selective", "--schedule", "1f1b",
                             "--json").stdout)
    check(len(pinned["layouts"]) == 1 and pinned["layouts"][0]["tp"] == 8
          and pinned["layouts"][0]["pp"] == 16 and pinned["layouts"][0]["recompute"] == "selective"
          and pinned["layouts"][0]["schedule"] == "1f1b",
          "pinning every choice evaluates exactly that layout")

    # Issue 35: every degree pinned but the schedule: 1f1b, zb-h1 and zb-h2 (vpp 1) are priced,
    # a zero-bubble one wins, and the #1-vs-#2 line says what its W's saved in seconds.
    degrees = ["--model", GPT3, "--cluster", "a100-80g:128x8", "--global-batch", "1536",
               "--tp", "8", "--pp", "16", "--dp", "8", "--vpp", "1", "--micro-batch", "1",
               "--sequence-parallel", "--zero", "1", "--recompute", "selective"]
    zb = json.loads(plan(args.megac, *degrees, "--json").stdout)["layouts"]
    bubble = {l["schedule"]: l["breakdown"]["bubble_s"] for l in zb}
    check(sorted(bubble) == ["1f1b", "zb-h1", "zb-h2"] and zb[0]["schedule"] != "1f1b"
          and bubble["zb-h1"] < bubble["1f1b"],
          "the search prices 1f1b, zb-h1 and zb-h2 and a zero-bubble schedule wins (bubble %s)"
          % bubble)
    text = plan(args.megac, *degrees, "--no-compile").stdout
    saved = re.search(r"#1's (zb-h[12]) runs each backward as B then W .*bubble ([0-9.]+) s vs "
                      r"([0-9.]+) s under #2's (\S+) \(([0-9.]+) s/step saved\)", text)
    check(saved and saved.group(1) == zb[0]["schedule"]
          and abs(float(saved.group(5)) - (bubble[saved.group(4)] - bubble[saved.group(1)])) < 2e-3,
          "the #1-vs-#2 line gives the bubble the zero-bubble schedule saves: "
          + (saved.group(0) if saved else text))
    pinned = json.loads(plan(args.megac, "--model", GPT3, "--cluster", "a100-80g:128x8",
                             "--global-batch", "1536", "--schedule", "zbv", "--json").stdout)
    check(pinned["layouts"] and all(l["schedule"] == "zbv" and l["vpp"] == 2
                                    for l in pinned["layouts"]),
          "--schedule zbv pins the search to zbv at vpp 2")
    core = plan(args.megac, "--model", GPT3, "--cluster", "a100-80g:128x8", "--global-batch",
                "1536", "--stack", "megatron-core", "--schedule", "zb-h1", "--no-compile",
                check=False)
    check(core.returncode != 0 and "no zero-bubble schedules" in core.stdout + core.stderr,
          "a zero-bubble pin on a stack without them says so: "
          + (core.stdout + core.stderr).strip().splitlines()[-1])

    tight = plan(args.megac, "--model", "gpt:layers=24,hidden=4096,heads=32,seq=2048,vocab=50257",
                 "--cluster", "a100-40g:1x8", "--global-batch", "64", "--tp", "1", "--pp", "1",
                 "--zero", "1", "--cp", "1", "--no-compile", check=False)
    check(tight.returncode != 0 and "no layout fits" in tight.stdout
          and re.search(r"needs [0-9.]+ GiB per device", tight.stdout)
          and "would fit" in tight.stdout,
          "a layout that cannot fit says what it needs and what would fix it")

    bad = plan(args.megac, "--model", GPT3, "--cluster", "a999:2x8", "--global-batch", "8",
               check=False)
    check(bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--cluster" in bad.stderr,
          "an unknown device is a one-line error: " + bad.stderr.strip())

    bad = plan(args.megac, "--model", GPT3, "--cluster", "a100-80g:128x8", "--global-batch", "8",
               "--stack", "deepspeed", check=False)
    check(bad.returncode == 2 and bad.stderr.count("\n") == 1 and "megatron-2021" in bad.stderr,
          "an unknown --stack is a one-line error naming the profiles: " + bad.stderr.strip())

    # --moe-load TRAIN.jsonl: dropless routing as a training log measured it. Two blocks of four
    # experts, the busiest of two ep ranks at (600 + 550) / (512 + 512) of the balanced rows: a
    # slower step at ep 2, the same at ep 1 (one rank holds every expert); a dense model, a log
    # of another shape and a missing file are one-line errors naming the file.
    mixtral = "mixtral:layers=2,hidden=256,heads=8,kv_heads=4,experts=4,topk=2,ffn=512,seq=128,vocab=1024"
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "train.jsonl")
        with open(log, "w") as f:
            f.write('{"step": 1, "loss": 7.0, "moe_load": [[300, 300, 212, 212], [206, 256, 300, 262]]}\n')
            f.write('{"step": 2, "loss": 6.9, "moe_load": [[300, 300, 212, 212], [206, 256, 300, 262]]}\n')
        moe = ["--model", mixtral, "--cluster", "cpu:1x2", "--global-batch", "4", "--tp", "1",
               "--pp", "1", "--micro-batch", "2", "--zero", "0", "--no-compile", "--json"]
        def step(ep, *extra):
            out = json.loads(plan(args.megac, *moe, "--dp", "2", "--ep", str(ep), *extra).stdout)
            return out["layouts"][0]["step_time_s"]
        check(step(2, "--moe-load", log) > 1.01 * step(2) and
              step(1, "--moe-load", log) == step(1),
              "--moe-load slows the busiest expert-parallel rank at ep 2 (%.2f -> %.2f ms), not "
              "at ep 1" % (1e3 * step(2), 1e3 * step(2, "--moe-load", log)))
        bad_log = os.path.join(d, "bad.jsonl")
        with open(bad_log, "w") as f:
            f.write('{"step": 1, "moe_load": [[1, 2, 3]]}\n')
        for extra, says in ((["--moe-load", log], "no experts"),
                            (["--moe-load", bad_log], "bad.jsonl:1: moe_load"),
                            (["--moe-load", os.path.join(d, "none.jsonl")], "none.jsonl")):
            model = GPT3 if says == "no experts" else mixtral
            bad = plan(args.megac, "--model", model, "--cluster", "cpu:1x2", "--global-batch",
                       "4", "--no-compile", *extra, check=False)
            check(bad.returncode != 0 and bad.stderr.count("\n") == 1 and says in bad.stderr,
                  "--moe-load: a one-line error: " + bad.stderr.strip()[:160])

    # --explain: #1's step split by op class; the lines sum to the step, and the JSON breakdown
    # carries the same classes.
    pins = ["--model", GPT3, "--cluster", "a100-80g:128x8", "--global-batch", "1536", "--tp", "8",
            "--pp", "16", "--dp", "8", "--vpp", "1", "--micro-batch", "1", "--sequence-parallel",
            "--zero", "1", "--recompute", "selective", "--no-compile"]
    text = plan(args.megac, *pins, "--explain", "--stack", "megatron-2021").stdout
    lines = re.findall(r"^  ([A-Za-z][A-Za-z /()-]+?)\s+([0-9.]+) s", text, re.M)
    parts = {name.strip(): float(v) for name, v in lines}
    total = parts.pop("total", None)
    check(total and {"GEMM", "attention", "memory-bound kernels", "pipeline bubble"} <= set(parts)
          and abs(sum(parts.values()) - total) < 1e-3 * total + 5e-4,
          "--explain splits the step by op class, summing to %s s" % total)
    js = json.loads(plan(args.megac, *pins, "--json", "--stack", "megatron-2021").stdout)
    breakdown = js["layouts"][0]["breakdown"]
    check(js["stack"] == "megatron-2021" and breakdown["gemm_s"] > 0
          and abs(breakdown["gemm_s"] - parts["GEMM"]) < 1e-3
          and js["layouts"][0]["kernel_launches"]["gemm"] > 0,
          "--json carries the stack, the class breakdown and kernel launches")
    core = json.loads(plan(args.megac, *pins, "--json", "--stack", "megatron-core").stdout)
    check(core["layouts"][0]["step_time_s"] < js["layouts"][0]["step_time_s"],
          "megatron-core (flash attention, overlap) predicts a faster step than megatron-2021")

    with tempfile.TemporaryDirectory() as tmp:
        svg = os.path.join(tmp, "pipe.svg")
        plan(args.megac, "--model", "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=50304",
             "--cluster", "a100-80g:2x8", "--global-batch", "64", "--tp", "4", "--pp", "2",
             "--vpp", "2", "--micro-batch", "8", "--timeline", svg)
        text = open(svg).read()
        check(text.lstrip().startswith("<") and "</svg>" in text,
              "--timeline writes an SVG of the winner's schedule (%d bytes)" % len(text))
        plan(args.megac, "--model", "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=50304",
             "--cluster", "a100-80g:2x8", "--global-batch", "64", "--tp", "4", "--pp", "2",
             "--schedule", "zbv", "--micro-batch", "8", "--timeline", svg)
        text = open(svg).read()
        check("zbv" in text and "<title>W0 c3 on stage 0" in text,
              "--timeline draws a zbv winner with its V placement and W steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
