#!/usr/bin/env python3
"""No wasted copies around GEMMs, one optimizer instruction per dtype, in the partition suite's
training plans (issue 30).

Every (model, layout, precision) of tests/e2e/partition_equivalence.py is compiled as
scripts/plan-digests.py does (`megac compile ... --ranks N -o PLAN`), the plan's FlatBuffer is
turned into JSON by `flatc` with runtime/plan/plan.fbs, and per plan every function's
instructions are counted:

- transposes feeding a GEMM: a MatMul's or Linear's operand written by a Transpose (directly or
  through a reshape alias, a buffer at the same arena bytes). Must be 0: the GEMMs read
  transposes as flags (mega-training-gemm-fusion).
- separate gradient-accumulation adds of a GEMM: an Add writing a `grad.*` state buffer whose
  other operand a MatMul/Linear or a MoE expert weight gradient (MoeMatmulWeightGrad, the
  grouped GEMM over each expert's active rows) wrote. Must be 0: the weight-gradient GEMM
  accumulates into the accumulator itself (MatMul or MoeMatmulWeightGrad with an accumulator
  input).
- widened adds: under bf16/fp16 an Add of `grad.*` and a Cast of a dense GEMM's (MatMul's or
  Linear's) product -- the half product widened to the f32 accumulator and added. Must be 0:
  the GEMM reads its half operands into the f32 accumulator itself (a MatMul with bf16/f16
  lhs and rhs, an f32 accumulator input and an f32 output; mega-training-gemm-fusion), which
  is what the planner's megac profile assumes (StackProfile::gemmAccumulatesHalfWeightGrads).
- the explained case: under bf16/fp16 an Add of `grad.*` and a Cast of a MoE expert weight
  gradient (MoeMatmulWeightGrad has no half-into-f32 form; the pass's description and the
  profile say so). Allowed only in bf16/fp16 plans.
- fused accumulating GEMMs (MatMul with 3 inputs writing `grad.*`): must be > 0 in every plan,
  or the test would pass on plans that lost their GEMMs; in bf16/fp16 plans each of them reads
  half operands (both of one dtype) into an f32 accumulator and output ("mixed": all of them);
  and in every fp32/fp64 plan with MoE experts (a MoeMatmul instruction), accumulating
  MoeMatmulWeightGrads (4 inputs, writing `grad.*`) > 0.

And the multi-tensor optimizer (issue 30 item 3, mega-training-multi-tensor-optimizer): in
every program's @apply_gradients,

- no per-tensor AdamW instruction where two or more tensors are updated, and at most one
  AdamWMulti per parameter dtype (the suite's masters are all f32 or all f64: one);
- no ClipByNorm instruction: the clip is folded into the AdamWMulti instructions (max_norm > 0
  and the global norm as their last input; the suite clips at 1.0), so it makes no pass of its
  own over the gradients;
- the AdamWMulti instructions together update every `adam.m.*` state buffer of the program
  exactly once, each tensor's m and v written over its own inputs, the `adam.m.*` and `adam.v.*`
  state buffers (the per-parameter state, so checkpoints keep their layout), and p over its
  own input or (ZeRO-1's dp shard, all-gathered next) a temporary.

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
# The GEMMs whose product may be a weight gradient: the dense ones and the MoE experts' grouped one.
WGRAD_GEMMS = GEMMS | {"MoeMatmulWeightGrad"}
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
    """{"transposes": n, "separate_adds": n, "widened_adds": n, "explained_adds": n, "fused": n,
    "mixed": n, "moe": n, "fused_moe": n} over all programs and functions, and the lines naming
    each counted instruction."""
    totals = dict(transposes=0, separate_adds=0, widened_adds=0, explained_adds=0, fused=0,
                  mixed=0, moe=0, fused_moe=0)
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
                        dtypes = [buffers[b].get("dtype") for b in (*ins, outs[0])]
                        if (dtypes[0] == dtypes[1] and dtypes[0] in ("bf16", "f16")
                                and dtypes[2] == dtypes[3] == "f32"):
                            totals["mixed"] += 1
                if op == "MoeMatmul":
                    totals["moe"] += 1
                if (op == "MoeMatmulWeightGrad" and len(ins) == 4 and outs
                        and outs[0] in grad_state):
                    totals["fused_moe"] += 1
                if op == "Add" and outs and outs[0] in grad_state:
                    for j in ins:
                        if j in grad_state:
                            continue
                        w = writer.get(key(j))
                        if w and w["op"] in WGRAD_GEMMS:
                            totals["separate_adds"] += 1
                            where.append(f"separate accumulation {label}: {inst.get('location')}")
                        elif w and w["op"] == "Cast":
                            src = writer.get(key(w["inputs"][0])) if w.get("inputs") else None
                            if src and src["op"] in GEMMS:
                                totals["widened_adds"] += 1
                                where.append(f"widened accumulation {label}: "
                                             f"{inst.get('location')}")
                            elif src and src["op"] in WGRAD_GEMMS:
                                totals["explained_adds"] += 1
                for o in outs:
                    writer[key(o)] = inst
    return totals, where


def count_optimizer(plan):
    """Per program: problems with @apply_gradients' AdamW / AdamWMulti instructions (a list of
    lines) and {"adamw": n, "adamw_multi": n, "tensors": n, "clips": n, "folded_clips": n}
    summed over programs."""
    totals = dict(adamw=0, adamw_multi=0, tensors=0, clips=0, folded_clips=0)
    problems = []
    for program in plan.get("programs", []):
        buffers = program.get("buffers", [])
        names = {s["buffer"]: s.get("name", "") for s in program.get("state", [])}
        moments = {b for b, n in names.items() if n.startswith("adam.m.")}
        second = {b for b, n in names.items() if n.startswith("adam.v.")}
        persistent = set(names) | {q["buffer"] for q in program.get("parameters", [])}
        fns = [fn for fn in program.get("functions", []) if fn["name"] == "apply_gradients"]
        if not fns:
            continue
        insts = fns[0].get("instructions", [])
        single = [i for i in insts if i["op"] == "AdamW"]
        multi = [i for i in insts if i["op"] == "AdamWMulti"]
        clips = [i for i in insts if i["op"] == "ClipByNorm"]
        folded = [i for i in multi if i.get("attrs", {}).get("max_norm", 0) > 0]
        totals["adamw"] += len(single)
        totals["adamw_multi"] += len(multi)
        totals["clips"] += len(clips)
        totals["folded_clips"] += len(folded)
        if multi and clips:
            problems.append(f"{program.get('name')}: {len(clips)} ClipByNorm instructions beside "
                            f"{len(multi)} AdamWMulti; the clip belongs inside the AdamWMulti")
        if multi and len(folded) != len(multi):
            problems.append(f"{program.get('name')}: {len(multi) - len(folded)} of {len(multi)} "
                            "AdamWMulti do not clip (max_norm 0), but the suite clips at 1.0")
        label = program.get("name")
        updated = []
        for inst in multi:
            ins, outs = inst.get("inputs", []), inst.get("outputs", [])
            n = (len(ins) - 2) // 4  # a clip's norm, the last input, leaves a remainder of 1
            totals["tensors"] += n
            for k in range(n):
                p, m, v = ins[2 + 4 * k], ins[4 + 4 * k], ins[5 + 4 * k]
                # p over itself, or (ZeRO-1: p is a dp shard, all-gathered next) a temporary.
                if outs[3 * k + 1:3 * k + 3] != [m, v] or (
                        outs[3 * k] != p and outs[3 * k] in persistent):
                    problems.append(f"{label}: AdamWMulti tensor {k} writes {outs[3*k:3*k+3]}, "
                                    f"not its own p, m, v {[p, m, v]}")
                if m not in moments or v not in second:
                    problems.append(f"{label}: AdamWMulti tensor {k}'s moments are buffers "
                                    f"{m}, {v}, not adam.m.* / adam.v.* state")
                updated.append(m)
        dtypes = {buffers[i["inputs"][2]].get("dtype") for i in multi}
        if len(moments) >= 2 and single:
            problems.append(f"{label}: {len(single)} per-tensor AdamW instructions beside "
                            f"{len(multi)} AdamWMulti for {len(moments)} tensors")
        if len(multi) > max(1, len(dtypes)):
            problems.append(f"{label}: {len(multi)} AdamWMulti for {len(dtypes)} dtypes")
        single_moments = [i["inputs"][2] for i in single]
        if sorted(updated + single_moments) != sorted(moments):
            problems.append(f"{label}: the optimizer updates moments {sorted(updated)} + "
                            f"{sorted(single_moments)}, the program has {sorted(moments)}")
    return totals, problems


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
        parsed = plan_json(args.flatc, path, workdir)
        totals, where = count(parsed)
        optimizer, problems = count_optimizer(parsed)
        plans += 1
        case = f"{name} {layout.name()} {precision}"
        half = precision in ("bf16", "fp16")
        print(f"{case}: {totals} {optimizer}")
        if problems or optimizer["adamw_multi"] == 0:
            failures.append(f"{case}: optimizer {optimizer}\n  " +
                            "\n  ".join(problems[:8] or ["no AdamWMulti instruction"]))
        if totals["transposes"] or totals["separate_adds"] or totals["widened_adds"]:
            failures.append(f"{case}: {totals}\n  " + "\n  ".join(where[:8]))
        if totals["explained_adds"] and not half:
            failures.append(f"{case}: {totals['explained_adds']} adds of a widened MoE weight "
                            "gradient in a plan without half precision")
        if totals["fused"] == 0:
            failures.append(f"{case}: no GEMM accumulates into a gradient accumulator")
        if half and totals["mixed"] != totals["fused"]:
            failures.append(f"{case}: {totals['fused'] - totals['mixed']} of {totals['fused']} "
                            "accumulating GEMMs do not read half operands into an f32 "
                            "accumulator")
        if not half and totals["moe"] and totals["fused_moe"] == 0:
            failures.append(f"{case}: no MoE expert weight gradient accumulates into its "
                            "gradient accumulator")
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
