#!/usr/bin/env python3
"""The planner's per-rank memory against compiled plans under ZeRO-1/2/3 and context parallelism
(issues 31, 32): `megac plan --cluster cpu:... --json` (the model) and `megac plan --ranks N
--json` (the compiled plan's own numbers: parameter, gradient and optimizer-state bytes and the
arena) for the same layout, fp32, on a 16-layer GPT.

- Persistent state (parameters + gradients + optimizer state) per rank: the model holds ZeRO-2/3's
  whole-gradient bucket (one block, zero >= 2) and ZeRO-3's gathered unit (here a block: larger
  than the 512 x 128 table) in its state, the compiler holds them in its arena; without them the
  model equals the plan within 1% (error model: parameter counts are exact from the dims; 1%
  covers nothing but rounding of shard sizes to whole elements), for zero 1, 2, 3 at dp 4 and
  for cp 2.
- The whole rank (state + arena vs state + activations + workspace) is printed with its ratio,
  not asserted: the activation model leaves out buffers the compiled arena holds on a model this
  small (zero 1's whole rank is already ~0.7 of the plan's; docs/planner.md, Known gaps), so the
  issue's "within 10% of the plan's arena" is not met yet and this test says so in its output.
"""
import argparse
import json
import subprocess
import sys

MODEL = "gpt:layers=16,hidden=128,heads=4,seq=256,vocab=512"
BLOCK = 12 * 128 * 128 + 13 * 128  # parameters of one GPT block (REFERENCE.md: 12h^2 + 13h)


def run(megac, *args):
    out = subprocess.run([megac, "plan", "--model", MODEL, *args], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout, out.stderr)
        raise SystemExit("FAIL: megac plan %s" % " ".join(args))
    return json.loads(out.stdout)


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    args = parser.parse_args()
    cases = [("zero 1, dp 4", 4, 1, 1), ("zero 2, dp 4", 4, 2, 1), ("zero 3, dp 4", 4, 3, 1),
             ("cp 2, dp 2", 2, 0, 2), ("cp 2", 1, 0, 2)]
    for name, dp, zero, cp in cases:
        ranks = dp * cp
        layout = ["--dp", str(dp), "--zero", str(zero), "--micro-batch", "1"]
        if cp > 1:
            layout += ["--cp", str(cp)]
        plan = run(args.megac, "--ranks", str(ranks), *layout, "--global-batch", str(dp),
                   "--precision", "fp32", "--json")["roles"][0]
        model = run(args.megac, "--cluster", "cpu:%dx2" % max(1, ranks // 2) if ranks > 1 else
                    "cpu:1x1", *layout, "--cp", str(cp), "--tp", "1", "--pp", "1", "--vpp", "1",
                    "--no-sequence-parallel", "--recompute", "none", "--precision", "fp32",
                    "--global-batch", str(dp), "--json", "--no-compile")
        m = (model["layouts"] or [model.get("smallest_memory")])[0]["memory"]
        state_plan = plan["parameter_bytes"] + plan["gradient_bytes"] + plan["optimizer_state_bytes"]
        state_model = m["parameters"] + m["gradients"] + m["optimizer"]
        whole_plan = state_plan + plan["arena_bytes"]
        whole_model = state_model + m["activations"] + m["workspace"]
        print("  %s: state plan %d B, model %.0f B (%.3f); whole plan %d B, model %.0f B (%.3f)"
              % (name, state_plan, state_model, state_model / state_plan, whole_plan, whole_model,
                 whole_model / whole_plan))
        in_flight = BLOCK * 4 * ((zero >= 2) + (zero >= 3))  # fp32 bucket, gathered block
        check(abs((state_model - in_flight) / state_plan - 1) <= 0.01,
              "%s: the planner's parameters + gradients + optimizer state, less %d B in flight, "
              "within 1%% of the plan's (%.4f)"
              % (name, in_flight, (state_model - in_flight) / state_plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
