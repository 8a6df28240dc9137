#!/usr/bin/env python3
"""`--bucket-size` (issue 29): the dp gradient reduction and ZeRO-1's parameter all-gather run
per bucket, not per tensor, train exactly as before, and checkpoints do not depend on them.

The model: zoo gpt:layers=2,hidden=16,heads=4,seq=8,vocab=32 (36 parameter tensors, 7232
elements; tied head, ffn 4 x hidden).
  plan        `megac plan --json` at --ranks 4 --dp 4, ZeRO-1 and plain dp, at several bucket
              sizes: one step's apply_gradients has exactly as many ReduceScatter and AllGather
              over [dp] (ZeRO-1) or AllReduce over [dp] (plain dp; the 4-byte global-norm
              scalar aside) as there are buckets, and their bytes add up to the model's
              gradients once. The bucket count is computed here in closed form from the GPT's
              parameter shapes: buckets fill in parameter order, one closes before the tensor
              that would take it past the size, a larger tensor is a bucket alone
              (docs/training-step.md, "Buckets"). The closed-form parameter table is checked
              against the plan's own.
  numerics    fp64, 6 steps: dp 2 + ZeRO-1 with one bucket and with >= 4 buckets, and plain dp 2
              with >= 4 buckets, against one rank within numerics.py's fp64 layout bounds
              (losses, grad_norms, step-1 gradients, final parameters); the two ZeRO-1 runs are
              bit-identical (the CPU collectives reduce each element over the ranks in rank
              order, whichever bucket holds it, and AdamW is elementwise).
  checkpoint  ZeRO-1 with >= 4 buckets saved after 3 steps and resumed with one bucket to step
              6: losses of steps 4..6 and the final weights byte-identical to the uninterrupted
              one-bucket run's (buckets are transient values, never state).

usage: bucket_test.py --megac build/bin/megac --workdir DIR
Exits 77 (skip) without mpirun, after the plan checks pass. About 10 s on 2 cores.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numerics  # noqa: E402
from partition_equivalence import make_tokens  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 2, 16, 4, 8, 32
SPEC = f"gpt:layers={LAYERS},hidden={HIDDEN},heads={HEADS},seq={SEQ},vocab={VOCAB}"
F32 = 4
DP = 4  # the plan checks' data-parallel degree
# A size that holds the whole model (7232 elements), and ones that cut it into many buckets.
ONE_BUCKET = 1 << 30
SMALL = 1000


def gpt_parameters():
    """(name, shape) of the zoo GPT's parameters in the model function's order: token and
    position tables, per layer norm / q / k / v / attention projection / norm / MLP, final norm
    (the head is tied to wte)."""
    h, f = HIDDEN, 4 * HIDDEN
    params = [("wte", (VOCAB, h)), ("wpe", (SEQ, h))]
    for i in range(LAYERS):
        p = f"h{i}."
        params += [(p + "ln1.weight", (h,)), (p + "ln1.bias", (h,))]
        for m in ("q", "k", "v", "proj"):
            params += [(p + f"attn.{m}.weight", (h, h)), (p + f"attn.{m}.bias", (h,))]
        params += [(p + "ln2.weight", (h,)), (p + "ln2.bias", (h,)),
                   (p + "mlp.fc.weight", (f, h)), (p + "mlp.fc.bias", (f,)),
                   (p + "mlp.proj.weight", (h, f)), (p + "mlp.proj.bias", (h,))]
    return params + [("ln_f.weight", (h,)), ("ln_f.bias", (h,))]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def bucket_sizes(sizes, limit):
    """The elements of each bucket: `sizes` in order, a bucket closing before the tensor that
    would take it past `limit`."""
    buckets = []
    for n in sizes:
        if not buckets or buckets[-1] + n > limit:
            buckets.append(0)
        buckets[-1] += n
    return buckets


def plan_json(megac, zero, bucket):
    argv = [megac, "plan", "--model", SPEC, "--ranks", str(DP), "--dp", str(DP),
            "--global-batch", "8", "--json"]
    if zero:
        argv += ["--zero", "1"]
    if bucket:
        argv += ["--bucket-size", str(bucket)]
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {run.stderr.strip()}")
    return json.loads(run.stdout)


def dp_collectives(plan, op):
    """apply_gradients' instructions `op` over [dp]: a list of bytes, one entry per instruction,
    the global norm's 4-byte scalar all-reduce left out."""
    out = []
    for role in plan["roles"]:
        for c in role["communication"]:
            if c["function"] == "apply_gradients" and c["op"] == op and c["group"] == "[dp]" \
                    and c["bytes"] != F32:
                out += [c["bytes"]] * c["count"]
    return sorted(out)


def check_plans(megac):
    problems = []
    params = gpt_parameters()
    sizes = [numel(s) for _, s in params]
    total = sum(sizes)
    # The closed-form table against the plan's: every parameter once, whole, with its size.
    plan = plan_json(megac, 0, None)
    table = {p["name"]: p["whole_bytes"] for p in plan["roles"][0]["parameters"]}
    want = {name: numel(shape) * F32 for name, shape in params}
    if table != want:
        problems.append(f"the plan's parameters differ from the closed form: "
                        f"{sorted(set(table.items()) ^ set(want.items()))[:6]}")
    for limit in (None, ONE_BUCKET, 4000, SMALL, 300, 1):
        # None: Megatron's default, max(40M, 1M x dp) elements.
        buckets = bucket_sizes(sizes, limit or max(40_000_000, 1_000_000 * DP))
        want_bytes = sorted(b * F32 for b in buckets)
        label = f"--bucket-size {limit}" if limit else "the default bucket size"
        print(f"  {label}: {len(buckets)} buckets of {len(sizes)} tensors", flush=True)
        for zero, checks in ((1, (("ReduceScatter", want_bytes),
                                  ("AllGather", sorted(b // DP for b in want_bytes)))),
                             (0, (("AllReduce", want_bytes),))):
            plan = plan_json(megac, zero, limit)
            for op, expected in checks:
                got = dp_collectives(plan, op)
                if got != expected:
                    problems.append(f"zero {zero}, {label}: {len(got)} {op} over dp of "
                                    f"{got[:8]}... bytes, expected {len(expected)} (the "
                                    f"buckets) of {expected[:8]}...")
                # ReduceScatter and AllReduce list their input (the bucket), AllGather its
                # input (the rank's 1/dp of the bucket).
                if sum(got) != total * F32 // (DP if op == "AllGather" else 1):
                    problems.append(f"zero {zero}, {label}: {op} bytes {sum(got)} do not cover "
                                    f"the {total} gradient elements once")
    if len(bucket_sizes(sizes, SMALL)) < 4 or len(bucket_sizes(sizes, SMALL)) >= len(sizes):
        problems.append(f"--bucket-size {SMALL} must give >= 4 buckets and fewer than tensors")
    return problems


def train(megac, data, rundir, steps, argv):
    """`megac train` in fp64; the log records, final weights (raw bytes and arrays) and step-1
    gradients when saved."""
    os.makedirs(rundir, exist_ok=True)
    log = os.path.join(rundir, "log.jsonl")
    weights = os.path.join(rundir, "weights.safetensors")
    cmd = [megac, "train", "--model", SPEC, "--data", data, "--steps", str(steps),
           "--global-batch", "8", "--lr", "1e-3", "--weight-decay", "0.1", "--clip-grad", "1.0",
           "--lr-schedule", "constant", "--seed", "3", "--precision", "fp64",
           *numerics.threads_args(), "--log-json", log, "--save-weights", weights, *argv]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if run.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: exit {run.returncode}\n"
                           f"{(run.stdout + run.stderr)[-2000:]}")
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    grads = os.path.join(rundir, "grads.safetensors")
    return dict(records=records, raw=open(weights, "rb").read(),
                weights=read_safetensors(weights),
                grads=read_safetensors(grads) if os.path.exists(grads) else None)


def layout(dp, zero, bucket, micro=2):
    argv = ["--micro-batch", str(micro), "--ranks", str(dp), "--dp", str(dp), "--comm-timeout",
            "30", "--bucket-size", str(bucket)]
    return argv + (["--zero", "1"] if zero else [])


def check_numerics(megac, work):
    data = make_tokens(work, VOCAB)
    problems = []

    def run(tag, steps, argv, grads=True):
        rundir = os.path.join(work, tag)
        extra = ["--save-grads", os.path.join(rundir, "grads.safetensors")] if grads else []
        return train(megac, data, rundir, steps, [*argv, *extra])

    # One rank reads the global batch of 8 as 2 micro-batches of 4, as dp 2 x micro-batch 2.
    one = run("one-rank", 6, ["--micro-batch", "4"])
    runs = {"zero1-one-bucket": run("zero1-one-bucket", 6, layout(2, 1, ONE_BUCKET)),
            "zero1-buckets": run("zero1-buckets", 6, layout(2, 1, SMALL)),
            "dp-buckets": run("dp-buckets", 6, layout(2, 0, SMALL))}
    for tag, r in runs.items():
        problems += numerics.compare_losses(f"fp64 {tag} losses", r["records"], one["records"],
                                            numerics.FP64_LOSS_RTOL)
        problems += numerics.report_tensors(f"fp64 {tag} step-1 gradients", r["grads"],
                                            one["grads"], *numerics.FP64_TENSOR, "gradient")
        problems += numerics.report_tensors(f"fp64 {tag} parameters", r["weights"],
                                            one["weights"], *numerics.FP64_TENSOR, "parameter")
    a, b = runs["zero1-one-bucket"], runs["zero1-buckets"]
    if [r["loss"] for r in a["records"]] != [r["loss"] for r in b["records"]] or \
            a["raw"] != b["raw"]:
        problems.append("ZeRO-1 with one bucket and with many differ: they must be "
                        "bit-identical")
    # Checkpoint: saved under many buckets, resumed under one.
    ckpt = os.path.join(work, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    run("save-buckets", 3, [*layout(2, 1, SMALL), "--save", ckpt], grads=False)
    resumed = run("load-one-bucket", 6, [*layout(2, 1, ONE_BUCKET), "--load", ckpt],
                  grads=False)
    if [r["step"] for r in resumed["records"]] != [4, 5, 6]:
        problems.append(f"the resumed run logged steps {[r['step'] for r in resumed['records']]},"
                        " expected 4..6")
    elif [r["loss"] for r in resumed["records"]] != [r["loss"] for r in a["records"][3:]]:
        problems.append("losses of steps 4..6 resumed under another bucket size differ from "
                        "the uninterrupted run's")
    if resumed["raw"] != a["raw"]:
        problems.append("final weights resumed under another bucket size are not "
                        "byte-identical to the uninterrupted run's")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    print("plan: dp collectives per bucket", flush=True)
    problems = check_plans(args.megac)
    if shutil.which("mpirun") is None:
        numerics.skip("mpirun not found: the 2-rank numerics and checkpoint cases")
    else:
        print("numerics: fp64 against one rank, bucket sizes bit-identical, checkpoint",
              flush=True)
        try:
            problems += check_numerics(args.megac, args.workdir)
        except RuntimeError as e:
            problems.append(str(e))
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("PASS")
    return numerics.exit_code(problems)


if __name__ == "__main__":
    sys.exit(main())
