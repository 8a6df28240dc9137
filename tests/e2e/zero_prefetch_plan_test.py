#!/usr/bin/env python3
"""ZeRO-3's prefetch read from a compiled plan (issue 31): what the planner's megac profile
assumes (StackProfile::prefetchShardedParams) is what `megac compile --zero 3 --overlap on`
writes.

A 4-layer GPT at dp 2 (and at dp 4 with ffn 6, whose [6, 16] weight is sharded on dim 1; and
in bf16, where each gathered copy is cast right after its gather) is compiled to a plan and read with flatc and runtime/plan/plan.fbs. In every function, the ZeRO-3
parameter gathers (AllGatherStart of a parameter buffer, done by one CollectiveDone), in the
order of their dones, form units of one layer (the parameter name up to its first dot), as
mega-training-zero-prefetch groups them: the forward's h0..h3, then the backward's regathers
h3..h0. For each unit k of a block whose previous unit k-1 is a block too:
  - every start of unit k comes before unit k-1's first done, so it is in flight during all of
    unit k-1's compute (a layer ahead), and at least one GEMM runs between unit k's last start
    and its first done (the gather overlaps compute);
  - every start of unit k comes after unit k-2's first done: at most two units gathered or in
    flight (the planner's "two gathered units with prefetch").
The same model compiled without --overlap has no AllGatherStart (blocking gathers): the control
that the properties above come from the overlap passes.

ZeRO-2/3's gradient reduce-scatters (StackProfile::overlapShardedGradReduce), compiled with
--zero 2 and --zero 3 at dp 2, with --zero 2 at pp 2 x dp 2 (chunk functions) and in bf16: in every
training function (forward_backward, forward_backward_apply, the chunks' backward.*), every
reduce-scatter is a ReduceScatterStart (at most one, with nothing between it and its use, may
block), each start directly follows the instruction that writes its input (no other compute
between: it starts as soon as the gradient is final), and each start with a GEMM after it in its
function is done after that function's last GEMM (it runs under the rest of the backward; the
planner charges each function's last ones exposed), and at least 3 in 4 of them have a GEMM after
them. Without --overlap: no ReduceScatterStart.
Exact properties of an instruction order: no tolerance.

usage: zero_prefetch_plan_test.py --megac build/bin/megac --flatc flatc --workdir DIR
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemm_layout_test as gl  # noqa: E402  (plan_json: flatc on a sealed plan)

GEMMS = {"Linear", "MatMul"}
# (model, dp, precision): bf16 casts each gathered copy right after its gather (ZeroSharding.h).
CASES = [("gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32", 2, "fp32"),
         ("gpt:layers=4,hidden=16,heads=4,ffn=6,seq=8,vocab=32", 4, "fp32"),
         ("gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32", 2, "bf16")]


def compile_plan(megac, spec, dp, precision, overlap, path):
    argv = [megac, "compile", "--model", spec, "--ranks", str(dp), "--dp", str(dp), "--zero",
            "3", "--precision", precision, "--overlap", "on" if overlap else "off", "-o", path]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{run.stdout}{run.stderr}")


def units(program, function):
    """The function's ZeRO-3 gathers grouped into units: [(layer, [start index], [done index])]
    in the order of their dones."""
    param_buffers = {p["buffer"]: p["name"] for p in program.get("parameters", [])
                     if any(s.get("axes") for s in p.get("sharding", []))}
    instructions = function.get("instructions", [])
    starts = {}  # output buffer -> (instruction index, parameter name)
    gathers = []  # (done index, start index, layer)
    for index, inst in enumerate(instructions):
        ins = inst.get("inputs", [])
        if inst["op"] == "AllGatherStart" and ins and ins[0] in param_buffers:
            starts[inst["outputs"][0]] = (index, param_buffers[ins[0]])
        elif inst["op"] == "CollectiveDone" and ins and ins[0] in starts:
            start, name = starts.pop(ins[0])
            gathers.append((index, start, name.split(".")[0]))
    out = []
    for done, start, layer in sorted(gathers):
        if not out or out[-1][0] != layer:
            out.append((layer, [], []))
        out[-1][1].append(start)
        out[-1][2].append(done)
    return out, instructions


def check_function(program, function):
    """Problems with one function's ZeRO-3 gather placement; the number of block units."""
    found, instructions = units(program, function)
    problems, blocks = [], 0
    for k, (layer, starts, dones) in enumerate(found):
        if not layer.startswith("h"):
            continue
        blocks += 1
        where = f"{function['name']} unit {k} ({layer})"
        if k >= 1 and found[k - 1][0].startswith("h"):
            previous_done = min(found[k - 1][2])
            if max(starts) > previous_done:
                problems.append(f"{where}: a start at {max(starts)} after the previous unit "
                                f"({found[k - 1][0]})'s first done at {previous_done}")
            between = [instructions[i]["op"] for i in range(max(starts) + 1, min(dones))]
            if not GEMMS & set(between):
                problems.append(f"{where}: no GEMM between its last start ({max(starts)}) and "
                                f"its first done ({min(dones)}): nothing to overlap")
        if k >= 2:
            earlier_done = min(found[k - 2][2])
            if min(starts) < earlier_done:
                problems.append(f"{where}: a start at {min(starts)} before unit {k - 2} "
                                f"({found[k - 2][0]})'s first done at {earlier_done}: more "
                                "than two units gathered or in flight")
    return problems, blocks


# (model, pp, dp, zero, precision): ZeRO-2/3's reduce-scatters, one chunk and two, and bf16
# (each gradient cast up to f32 before its reduce-scatter).
SCATTER_CASES = [("gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32", 1, 2, 2, "fp32"),
                 ("gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32", 1, 2, 3, "fp32"),
                 ("gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32", 2, 2, 2, "fp32"),
                 ("gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32", 1, 2, 2, "bf16")]
ASYNC = {"AllReduceStart", "AllGatherStart", "ReduceScatterStart", "CollectiveDone"}


def check_scatters(function):
    """Problems with one function's ZeRO reduce-scatters; how many started and how many ran
    under at least one later GEMM."""
    instructions = function.get("instructions", [])
    name = function["name"]
    gemms = [i for i, inst in enumerate(instructions) if inst["op"] in GEMMS]
    blocking = [i for i, inst in enumerate(instructions) if inst["op"] == "ReduceScatter"]
    problems, started, overlapped = [], 0, 0
    if len(blocking) > 1 or any(gemms and i < gemms[-1] for i in blocking):
        problems.append(f"{name}: blocking ReduceScatter at {blocking} (last GEMM at "
                        f"{gemms[-1] if gemms else None})")
    dones = {inst["inputs"][0]: i for i, inst in enumerate(instructions)
             if inst["op"] == "CollectiveDone"}
    for i, inst in enumerate(instructions):
        if inst["op"] != "ReduceScatterStart":
            continue
        started += 1
        producer = next((j for j in range(i - 1, -1, -1)
                         if instructions[j]["op"] not in ASYNC), None)
        if producer is None or inst["inputs"][0] not in instructions[producer].get("outputs", []):
            what = instructions[producer]["op"] if producer is not None else "nothing"
            problems.append(f"{name}: ReduceScatterStart at {i} does not follow the instruction "
                            f"writing its input (the compute before it is {what} at {producer})")
        done = dones.get(inst["outputs"][0])
        if done is None:
            problems.append(f"{name}: ReduceScatterStart at {i} has no CollectiveDone")
            continue
        if gemms and i < gemms[-1]:
            if done < gemms[-1]:
                problems.append(f"{name}: ReduceScatterStart at {i} done at {done}, before the "
                                f"function's last GEMM at {gemms[-1]}")
            else:
                overlapped += 1
    return problems, started, overlapped


def scatter_failures(megac, flatc, workdir):
    failures = 0
    for spec, pp, dp, zero, precision in SCATTER_CASES:
        for overlap in (True, False):
            path = os.path.join(workdir, f"rs-pp{pp}-dp{dp}-z{zero}-{precision}-"
                                f"{'on' if overlap else 'off'}.mplan")
            argv = [megac, "compile", "--model", spec, "--ranks", str(pp * dp), "--pp", str(pp),
                    "--dp", str(dp), "--zero", str(zero), "--precision", precision, "--overlap",
                    "on" if overlap else "off", "-o", path]
            run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed:\n{run.stdout}{run.stderr}")
            plan = gl.plan_json(flatc, path, workdir)
            label = (f"pp {pp} dp {dp} --zero {zero} {precision} --overlap "
                     f"{'on' if overlap else 'off'}")
            functions = [f for program in plan["programs"] for f in program["functions"]
                         if f["name"].startswith(("forward_backward", "backward"))]
            if not overlap:
                starts = sum(inst["op"] == "ReduceScatterStart" for f in functions
                             for inst in f.get("instructions", []))
                ok = starts == 0
                print(("ok: " if ok else "FAIL: ") + f"{label}: {starts} ReduceScatterStart "
                      "(blocking reduce-scatters only)")
                failures += not ok
                continue
            problems, started, overlapped = [], 0, 0
            for function in functions:
                p, s, o = check_scatters(function)
                problems += p
                started += s
                overlapped += o
            # Most gradients are final before the function's last GEMM (all but the first
            # block's and the embeddings'): at least 3 in 4 reduce-scatters run under a later
            # GEMM (the bf16 plan's casts up to f32 sit at the backward's end until latency
            # hiding raises them with their reduce-scatters).
            if overlapped < 16 or overlapped < 0.75 * started:
                problems.append(f"only {overlapped} of {started} reduce-scatters run under a "
                                "later GEMM")
            ok = not problems
            print(("ok: " if ok else "FAIL: ") + f"{label}: {started} ReduceScatterStart, "
                  f"{overlapped} done after their function's last GEMM, each right after its "
                  "gradient")
            for p in problems[:8]:
                print("      " + p)
            failures += not ok
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--flatc", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    failures = 0
    for spec, dp, precision in CASES:
        for overlap in (True, False):
            path = os.path.join(args.workdir,
                                f"dp{dp}-{precision}-{'on' if overlap else 'off'}.mplan")
            compile_plan(os.path.abspath(args.megac), spec, dp, precision, overlap, path)
            plan = gl.plan_json(args.flatc, path, args.workdir)
            program = plan["programs"][0]
            label = f"{spec} dp {dp} {precision} --overlap {'on' if overlap else 'off'}"
            if not overlap:
                ops = {inst["op"] for fn in program["functions"]
                       for inst in fn.get("instructions", [])}
                ok = "AllGatherStart" not in ops and "AllGather" in ops
                print(("ok: " if ok else "FAIL: ") + f"{label}: blocking gathers only")
                failures += not ok
                continue
            for function in program["functions"]:
                problems, blocks = check_function(program, function)
                if blocks == 0:
                    continue
                # The forward's 4 blocks and the backward's 4 regathers.
                if blocks < 8:
                    problems.append(f"{function['name']}: {blocks} block units, expected the "
                                    "forward's 4 and the backward's 4")
                ok = not problems
                print(("ok: " if ok else "FAIL: ") + f"{label}, {function['name']}: {blocks} "
                      "block units, each started during the previous unit's compute and at "
                      "most two ahead")
                for p in problems[:8]:
                    print("      " + p)
                failures += not ok
    failures += scatter_failures(os.path.abspath(args.megac), args.flatc, args.workdir)
    print("FAIL" if failures else "PASS", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
