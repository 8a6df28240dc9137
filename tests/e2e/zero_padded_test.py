"""ZeRO-3's padded shards (issue 31): parameters no dim of which dp divides, sharded on dim 0 padded.

  plan:        `megac plan --json` of GPT_PAD (hidden 14: its norms, biases and [14, 14] weights
               have no dim dp 4 divides) at dp 4 under --zero 3: those parameters' sharding reads
               "[dp] padded to 16" (DimSharding.padded_size) and the others' an even split; the
               per-rank persistent bytes (parameters + accumulators + Adam moments, f32) equal
               the closed form sum over parameters of 4 x 4 x ceil(n0 / dp) x (the other dims)
               for a padded one and 4 x 4 x n / dp for an even one, and are smaller than the
               same sum with the padded parameters whole (what --zero 3 kept before).
  equivalence: `megac train` under --zero 3 against the one-rank run, the partition suite's way
               (partition_equivalence.py: same model, data, seed and hyperparameters, its bounds:
               fp64 losses and grad_norms within 1e-10 relative, final parameters and step-1
               gradients within 1e-9 ||ref|| + 1e-12 sqrt(n): a layout only reorders sums, and
               the padding adds exact zeros to them; bf16 its Monte Carlo bounds): GPT_PAD at
               dp 4 and at dp 3 (global batch 6; every parameter but wte [48, 14] pads, wpe
               [8, 14] and fc [56, 14] too), GPT_ODD (hidden 15) at pp 2 x dp 2 (odd dims pad at
               dp 2; the tied wte is shared by the stages), and GPT_PAD at dp 4 in bf16 (the
               gather of the f32 master shard, cast after the slice).
  checkpoint:  zero_test.py's checkpoint part on a GPT with hidden 18 and ffn 6 at dp 4: norms
               [18] pad to 20 (rank 3 holds 2 of its 5 rows), fc [6, 18] and its bias pad to 8
               (rank 3 holds none): saved after 4 steps under ZeRO-3 x dp 4 the checkpoint holds
               the one-rank parameters and moments (within 1e-9, every element covered by the
               valid boxes alone), resumed on one rank (zero 0) steps 5..8 match the
               uninterrupted run within 1e-10 relative, and the one-rank checkpoint resumed under
               ZeRO-3 x dp 4 too (its padding zeroed at load).

usage: zero_padded_test.py --megac build/bin/megac --workdir DIR [--only plan|equivalence|checkpoint]
Exits 77 (skip) when mpirun is missing (the plan part needs no MPI and runs first).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import partition_equivalence as pe  # noqa: E402
import zero_test as zt  # noqa: E402
from partition_equivalence import Layout  # noqa: E402

SKIP = 77
VOCAB = 48  # dp 3 and dp 4 divide it: wte [48, h] shards evenly

# hidden 14 (2 heads of 7): dp 4 divides neither 14 nor 7 but does divide the ffn (56), vocab
# (48) and seq (8); dp 3 divides only the vocab.
GPT_PAD = dict(name="gpt-pad", spec=f"gpt:layers=2,hidden=14,heads=2,seq={pe.SEQ},vocab={VOCAB}",
               layers=2, vocab=VOCAB, hidden=14, ffn=56)
# hidden 15 (3 heads of 5): odd, so dp 2 pads norms, biases and the [15, 15] weights.
GPT_ODD = dict(name="gpt-odd", spec=f"gpt:layers=2,hidden=15,heads=3,seq={pe.SEQ},vocab={VOCAB}",
               layers=2, vocab=VOCAB, hidden=15, ffn=60)

# (model, layout, precision, global batch); every case <= 4 ranks.
CASES = [
    (GPT_PAD, dict(dp=4, zero=3), "fp64", 8),
    (GPT_PAD, dict(dp=3, zero=3), "fp64", 6),
    (GPT_ODD, dict(pp=2, dp=2, zero=3), "fp64", 8),
    (GPT_PAD, dict(dp=4, zero=3), "bf16", 8),
]

CHECKPOINT_SPEC = "gpt:layers=2,hidden=18,heads=3,ffn=6,seq=64,vocab=256"


def gpt_shapes(model, layers):
    """The GPT's parameters and their shapes (frontends/models/Gpt.cpp), tied head."""
    h, f, v, s = model["hidden"], model["ffn"], model["vocab"], pe.SEQ
    shapes = {"wte": [v, h], "wpe": [s, h], "ln_f.weight": [h], "ln_f.bias": [h]}
    for i in range(layers):
        p = f"h{i}."
        for n in ("ln1", "ln2"):
            shapes[p + n + ".weight"] = [h]
            shapes[p + n + ".bias"] = [h]
        for n in ("q", "k", "v", "proj"):
            shapes[p + "attn." + n + ".weight"] = [h, h]
            shapes[p + "attn." + n + ".bias"] = [h]
        shapes[p + "mlp.fc.weight"] = [f, h]
        shapes[p + "mlp.fc.bias"] = [f]
        shapes[p + "mlp.proj.weight"] = [h, f]
        shapes[p + "mlp.proj.bias"] = [h]
    return shapes


def zero3_elements(shape, dp, pad):
    """Elements a rank stores of a parameter under ZeRO-3 (ZeroSharding.cpp's zeroDim): split on
    the first dim dp divides; else dim 0 padded to ceil(n0 / dp) rows (`pad`), or whole (not)."""
    n = math.prod(shape)
    if any(d % dp == 0 for d in shape):
        return n // dp
    return -(-shape[0] // dp) * (n // shape[0]) if pad else n


def plan(megac, spec, dp, extra=()):
    argv = [megac, "plan", "--model", spec, "--json", "--ranks", str(dp), "--dp", str(dp),
            "--zero", "3", *extra]
    return json.loads(subprocess.run(argv, check=True, capture_output=True,
                                     text=True).stdout)["roles"][0]


def plan_part(megac):
    failures = 0
    dp = 4
    role = plan(megac, GPT_PAD["spec"], dp)
    shapes = gpt_shapes(GPT_PAD, GPT_PAD["layers"])
    params = {p["name"]: p for p in role["parameters"]}
    checks = [(set(params) == set(shapes),
               f"the plan's parameters are the GPT's ({sorted(set(params) ^ set(shapes))})")]
    padded = [n for n, s in shapes.items() if not any(d % dp == 0 for d in s)]
    for name, shape in shapes.items():
        if name not in params:
            continue
        want = f"[dp] padded to {-(-shape[0] // dp) * dp}" if name in padded else None
        got = params[name]["sharding"]
        if want:
            checks.append((got.startswith(want), f"{name} {shape}: sharding '{got}' starts "
                           f"with '{want}'"))
        else:
            checks.append(("padded" not in got and got != "whole",
                           f"{name} {shape}: sharding '{got}' is an even split"))
        elements = zero3_elements(shape, dp, True)
        checks.append((params[name]["bytes"] == 4 * elements,
                       f"{name}: {params[name]['bytes']} B per rank = 4 x {elements} elements"))
    persistent = role["parameter_bytes"] + role["gradient_bytes"] + role["optimizer_state_bytes"]
    now = sum(16 * zero3_elements(s, dp, True) for s in shapes.values())
    before = sum(16 * zero3_elements(s, dp, False) for s in shapes.values())
    print(f"memory ({GPT_PAD['spec']}, zero 3, dp {dp}, per rank, f32 parameters + accumulators "
          f"+ Adam moments): {persistent} B; closed form {now} B; with the {len(padded)} padded "
          f"parameters whole (before padded shards) {before} B = {persistent / before:.4f} x")
    checks.append((persistent == now, f"persistent bytes {persistent} = the closed form {now}"))
    checks.append((len(padded) >= 10 and persistent < before,
                   f"{len(padded)} parameters pad; persistent bytes {persistent} < {before} "
                   "(them whole)"))
    # The checkpoint model: a padded shard with an empty last rank (fc.bias [6] at dp 4: 2 rows
    # a rank, rank 3 none) and one with a partial last rank (norms [18]: 5 rows, rank 3 has 3).
    role = plan(megac, CHECKPOINT_SPEC, dp)
    sharding = {p["name"]: p["sharding"] for p in role["parameters"]}
    for name, want in [("h0.mlp.fc.bias", "[dp] padded to 8"),
                       ("h0.ln1.weight", "[dp] padded to 20"),
                       ("h0.mlp.fc.weight", "[dp] padded to 8, []")]:
        checks.append((sharding.get(name) == want,
                       f"{CHECKPOINT_SPEC}: {name} sharding '{sharding.get(name)}' == '{want}'"))
    for ok, what in checks:
        if not ok or "persistent" in what:
            print(("ok: " if ok else "FAIL: ") + what)
        failures += not ok
    print(f"plan: {len(checks)} checks, {failures} failed")
    return failures


def equivalence(megac, workdir):
    references, failures = {}, 0
    default_batch = pe.GLOBAL_BATCH
    try:
        for model, layout_args, precision, batch in CASES:
            pe.GLOBAL_BATCH = batch  # read by Layout (rows per micro-batch) and megac_train
            data = pe.make_tokens(workdir, VOCAB)
            layout = Layout(**layout_args)
            key = (model["name"], precision, batch)
            args = ["--model", model["spec"]]
            try:
                if key not in references:
                    references[key] = pe.megac_train(
                        megac, args, data,
                        os.path.join(workdir, model["name"], precision, f"ref-b{batch}"),
                        Layout(micro=batch // 2), precision, 300)
                run = pe.megac_train(megac, args, data, os.path.join(
                    workdir, model["name"], precision, layout.name()), layout, precision, 300)
                result = pe.compare(run, references[key], precision, layout)
                problems = result["problems"]
            except pe.RunError as e:
                result, problems = {}, [str(e)]
            failures += bool(problems)
            print(f"{model['name']:<8} {layout.name():<28} {precision:<5} "
                  f"loss {pe.fmt(result.get('loss'))} param {pe.fmt(result.get('param'))} "
                  f"grad {pe.fmt(result.get('grad'))}  {'FAIL' if problems else 'PASS'}")
            for p in problems[:6]:
                print("      " + p.replace("\n", "\n      "))
            sys.stdout.flush()
    finally:
        pe.GLOBAL_BATCH = default_batch
    return failures


def checkpoint(megac, workdir):
    zt.CHECKPOINT_SPEC = CHECKPOINT_SPEC
    try:
        return zt.checkpoint(megac, workdir)
    except AssertionError as e:
        print("FAIL checkpoint:", e)
        return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--only", choices=["plan", "equivalence", "checkpoint"])
    args = parser.parse_args()
    megac = os.path.abspath(args.megac)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    failures = 0
    if args.only in (None, "plan"):
        failures += plan_part(megac)
    if args.only != "plan" and shutil.which("mpirun") is None:
        print("SKIP: mpirun is not on PATH (Debian: openmpi-bin); ZeRO needs dp ranks")
        return 1 if failures else SKIP
    if args.only in (None, "checkpoint"):
        failures += checkpoint(megac, workdir)
    if args.only in (None, "equivalence"):
        failures += equivalence(megac, workdir)
    print("FAIL" if failures else "PASS", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
