#!/usr/bin/env python3
"""No wasted copies around GEMMs in the partition suite's training plans (issue 30).

Every (model, layout, precision) of tests/e2e/partition_equivalence.py is compiled as
scripts/plan-digests.py does (`megac compile ... --ranks N -o PLAN`), the plan's FlatBuffer is
turned into JSON by `flatc` with runtime/plan/plan.fbs, and per plan every function's
instructions are counted:

- transposes feeding a GEMM: a MatMul's or Linear's operand written by a Transpose (directly or
  through a reshape alias, a buffer at the same arena bytes). Must be 0: the GEMMs read
  transposes as flags (mega-training-gemm-fusion).
- separate gradient-accumulation adds of a GEMM: an Add writing a `grad.*` state buffer whose
  other operand a MatMul/Linear wrote. Must be 0: the weight-gradient GEMM accumulates into the
  accumulator itself (MatMul with an accumulator input).
- the explained case: under bf16/fp16 an Add of `grad.*` and a Cast of a GEMM's product (a half
  GEMM widened to the f32 accumulator, which cblas cannot fuse; the pass's description says so).
  Allowed only in bf16/fp16 plans.
- fused accumulating GEMMs (MatMul with 3 inputs writing `grad.*`): must be > 0 in every
  fp32/fp64 plan, or the test would pass on plans that lost their GEMMs.

usage: gemm_layout_test.py --megac build/bin/megac --flatc flatc [--workdir DIR]
       [--group quick ...]   (default: every group plan-digests.py compiles)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEMA = os.path.join(ROOT, "runtime", "plan", "plan.fbs")
sys.path.insert(0, HERE)
import partition_equivalence as pe  # noqa: E402

ALL_GROUPS = ["quick", "grid", "features", "bert", "onnx", "models", "moe", "mixed"]
GEMMS = {"MatMul", "Linear"}
SEAL = b"MPLNSEAL"  # runtime/plan/PlanSeal.h: 16 bytes before the FlatBuffer


def plan_json(flatc, plan, workdir):
    """The plan as flatc's JSON (the seal header stripped)."""
    with open(plan, "rb") as f:
        data = f.read()
    if data[:8] == SEAL:
        data = data[16:]
    body = os.path.join(workdir, "plan.bin")
    with open(body, "wb") as f:
        f.write(data)
    subprocess.run([flatc, "--json", "--strict-json", "--raw-binary", "--defaults-json",
                    "-o", workdir, SCHEMA, "--", body], check=True, capture_output=True)
    with open(os.path.join(workdir, "plan.json")) as f:
        return json.load(f)


def count(plan):
    """{"transposes": n, "separate_adds": n, "explained_adds": n, "fused": n} over all
    programs and functions, and the lines naming each counted instruction."""
    totals = dict(transposes=0, separate_adds=0, explained_adds=0, fused=0)
    where = []
    for program in plan.get("programs", []):
        buffers = program.get("buffers", [])
        grad_state = {s["buffer"] for s in program.get("state", [])
                      if s.get("name", "").startswith("grad.")}

        def key(b):
            buf = buffers[b]
            return (buf.get("offset", 0), buf.get("bytes", 0))

        for fn in program.get("functions", []):
            # The latest writer of each arena region (offset, bytes): a reshape alias is the
            # same bytes as its source under another buffer index.
            writer = {}
            for index, inst in enumerate(fn.get("instructions", [])):
                op = inst["op"]
                ins, outs = inst.get("inputs", []), inst.get("outputs", [])

                def producer(b):
                    w = writer.get(key(b))
                    return w["op"] if w else None

                label = f"{program.get('name')}/{fn['name']} instruction {index} ({op})"
                if op in GEMMS:
                    for j in ins[:2]:
                        if producer(j) == "Transpose":
                            totals["transposes"] += 1
                            where.append(f"transpose feeding {label}: {inst.get('location')}")
                    if op == "MatMul" and len(ins) == 3 and outs and outs[0] in grad_state:
                        totals["fused"] += 1
                if op == "Add" and outs and outs[0] in grad_state:
                    for j in ins:
                        if j in grad_state:
                            continue
                        w = writer.get(key(j))
                        if w and w["op"] in GEMMS:
                            totals["separate_adds"] += 1
                            where.append(f"separate accumulation {label}: {inst.get('location')}")
                        elif w and w["op"] == "Cast":
                            src = writer.get(key(w["inputs"][0])) if w.get("inputs") else None
                            if src and src["op"] in GEMMS:
                                totals["explained_adds"] += 1
                for o in outs:
                    writer[key(o)] = inst
    return totals, where


def compile_plan(megac, model_args, model, layout, precision, workdir, path):
    data = [] if model["spec"] else ["--data", pe.make_tokens(workdir, model["vocab"])]
    argv = [megac, "compile", *model_args, *data, "--global-batch", str(pe.GLOBAL_BATCH),
            *pe.HYPER, "--precision", precision, *pe.PRECISION_ARGS.get(precision, []),
            *[a for a in layout.argv() if a not in ("--comm-timeout", "30")], "-o", path]
    if layout.mpirun or (layout.ranks > 1 and "--ranks" not in argv):
        argv += ["--ranks", str(layout.ranks)]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--flatc", required=True)
    parser.add_argument("--workdir")
    parser.add_argument("--group", action="append", choices=ALL_GROUPS)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="megac-gemm-layout-")
    os.makedirs(workdir, exist_ok=True)
    cases = pe.plan(set(args.group or ALL_GROUPS))
    failures, plans, model_args = [], 0, {}
    for model, layout, precision in cases:
        name = model["name"]
        if name not in model_args:
            if model["spec"]:
                model_args[name] = ["--model", model["spec"]]
            else:
                try:
                    model_args[name] = [pe.export_onnx(workdir)]
                except ImportError as e:  # no torch: the ONNX model cannot be exported here
                    print(f"left out {name}: {e}")
                    model_args[name] = None
        if model_args[name] is None:
            continue
        path = os.path.join(workdir, "plan.mplan")
        compile_plan(os.path.abspath(args.megac), model_args[name], model, layout, precision,
                     workdir, path)
        totals, where = count(plan_json(args.flatc, path, workdir))
        plans += 1
        case = f"{name} {layout.name()} {precision}"
        half = precision in ("bf16", "fp16")
        print(f"{case}: {totals}")
        if totals["transposes"] or totals["separate_adds"]:
            failures.append(f"{case}: {totals}\n  " + "\n  ".join(where[:8]))
        if totals["explained_adds"] and not half:
            failures.append(f"{case}: {totals['explained_adds']} adds of a widened GEMM product "
                            "in a plan without half precision")
        if not half and totals["fused"] == 0:
            failures.append(f"{case}: no GEMM accumulates into a gradient accumulator")
    print(f"{plans} plans checked")
    if plans == 0:
        print("FAIL: no plan was compiled")
        return 1
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
