#!/usr/bin/env python3
"""Per-rank memory of partitioned plans, from `megac plan --json` (the plan's own numbers).

- Tensor parallel tp=t: each rank holds 1/t of the split parameters; what stays whole is
  exactly the norms, the row-parallel biases and the position table.
- ZeRO-1 dp=d: each rank holds 1/d of the Adam moments (2 per parameter element); without it,
  every data-parallel rank holds them all.
- Pipeline pp=p: every parameter lives on exactly one stage, except the tied embedding, which
  lives on the first and the last.
"""
import argparse
import sys

import plan_reading as pr

MODEL = "gpt:layers=4,hidden=64,heads=4,seq=64,vocab=256"


def plan(megac, *layout):
    return pr.megac_plan(megac, MODEL, *layout)


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    args = parser.parse_args()

    one = plan(args.megac)["roles"][0]
    check(one["parameter_bytes"] == one["whole_parameter_bytes"],
          "one rank holds every parameter whole (%d B)" % one["parameter_bytes"])

    for tp in (2, 4):
        role = plan(args.megac, "--ranks", str(tp), "--tp", str(tp))["roles"][0]
        whole_split = sum(p["whole_bytes"] for p in role["parameters"] if p["sharding"] != "whole")
        local_split = sum(p["bytes"] for p in role["parameters"] if p["sharding"] != "whole")
        kept = sorted({".".join(p["name"].split(".")[-2:])
                       for p in role["parameters"] if p["sharding"] == "whole"})
        check(local_split * tp == whole_split,
              "tp=%d: split parameters are 1/%d per rank (%d of %d B)"
              % (tp, tp, local_split, whole_split))
        check(role["parameter_bytes"] == local_split + role["replicated_parameter_bytes"],
              "tp=%d: the rest (%d B) is whole: %s" % (tp, role["replicated_parameter_bytes"], kept))
        check(all(n in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "proj.bias",
                        "ln_f.weight", "ln_f.bias", "wpe") for n in kept),
              "tp=%d: only norms, row-parallel biases and wpe stay whole" % tp)
        check(role["parameter_bytes"] * tp < one["parameter_bytes"] * 1.1,
              "tp=%d: per-rank parameters %d B ~ 1/%d of %d B"
              % (tp, role["parameter_bytes"], tp, one["parameter_bytes"]))

    for dp in (2, 4):
        plain = plan(args.megac, "--ranks", str(dp), "--dp", str(dp))["roles"][0]
        zero = plan(args.megac, "--ranks", str(dp), "--dp", str(dp), "--zero", "1")["roles"][0]
        check(plain["optimizer_state_bytes"] == 2 * plain["parameter_bytes"],
              "dp=%d without ZeRO: both Adam moments whole on every rank (%d B)"
              % (dp, plain["optimizer_state_bytes"]))
        check(zero["optimizer_state_bytes"] * dp == 2 * zero["parameter_bytes"],
              "dp=%d ZeRO-1: Adam moments are 1/%d per rank (%d B)"
              % (dp, dp, zero["optimizer_state_bytes"]))
        check(zero["parameter_bytes"] == plain["parameter_bytes"],
              "dp=%d ZeRO-1: parameters stay whole (%d B)" % (dp, zero["parameter_bytes"]))

    # The arena holds the persistent region (parameters, gradient accumulators, optimizer
    # state, constants) below every function's transient buffers: persistent_bytes is at least
    # the state, arena_bytes at least persistent_bytes plus each function's live peak.
    for role in plan(args.megac, "--ranks", "2", "--dp", "2", "--zero", "1")["roles"]:
        check(role["persistent_bytes"] >= pr.state_bytes(role) + role["constant_bytes"],
              "the arena's persistent region (%d B) holds the state (%d B) and constants"
              % (role["persistent_bytes"], pr.state_bytes(role)))
        for fn in role["arena"]:
            check(fn["peak_live_bytes"] <= fn["top_bytes"] and
                  role["persistent_bytes"] + fn["top_bytes"] <= role["arena_bytes"],
                  "%s: live peak %d B <= its top %d B, within the arena"
                  % (fn["function"], fn["peak_live_bytes"], fn["top_bytes"]))
    stages = plan(args.megac, "--ranks", "2", "--pp", "2", "--micro-batch", "2")["roles"]
    check(stages[0]["stash_peak_bytes"] > 0,
          "pp=2: the first stage's runner holds stashes outside the arena (%d B)"
          % stages[0]["stash_peak_bytes"])
    names = [{p["name"] for p in role["parameters"]} for role in stages]
    check(names[0] & names[1] == {"wte"}, "pp=2: only the tied wte is on both stages")
    check(len(names[0] | names[1]) == len(one["parameters"]),
          "pp=2: every parameter is on some stage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
