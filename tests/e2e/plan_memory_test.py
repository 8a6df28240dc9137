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
import json
import subprocess
import sys

MODEL = "gpt:layers=4,hidden=64,heads=4,seq=64,vocab=256"


def plan(megac, *layout):
    out = subprocess.run([megac, "plan", "--model", MODEL, "--json", *layout],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


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

    stages = plan(args.megac, "--ranks", "2", "--pp", "2", "--micro-batch", "2")["roles"]
    names = [{p["name"] for p in role["parameters"]} for role in stages]
    check(names[0] & names[1] == {"wte"}, "pp=2: only the tied wte is on both stages")
    check(len(names[0] | names[1]) == len(one["parameters"]),
          "pp=2: every parameter is on some stage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
