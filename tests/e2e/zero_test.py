"""ZeRO-2 and ZeRO-3 (issue 31): equivalence with one rank, checkpoints across ZeRO stages, memory.

  equivalence: `megac train` under --zero 2 and --zero 3 against the one-rank run of the
               partition suite (tests/e2e/partition_equivalence.py: same model, data, seed and
               hyperparameters, its fp64 bounds: losses and grad_norms within 1e-10 relative,
               final parameters and step-1 gradients within 1e-9 ||ref|| + 1e-12 sqrt(n); its
               bf16/fp16 bounds for the mixed cases) at dp 2 and dp 4, with tp 2 and sequence
               parallelism, pp 2, vpp 2, selective and full recompute, ep 2 on a Mixtral, a
               model whose hidden size dp 4 does not divide everywhere (ZeRO-3 pads those
               parameters' dim 0), a model with ffn 6 (ZeRO-3 shards the [6, 16] weight on dim 1,
               dim 0 not dividing; its bias [6] padded to 8 rows, 2 a rank, rank 3's all padding:
               tests/e2e/zero_padded_test.py for more) at dp 4 and tp 2 x dp 2, --overlap on
               (ZeRO-3's gathers as start/done, prefetched one layer ahead: dp 2, dp 4, pp 2,
               tp 2 x sp with full recompute; ZeRO-2's reduce-scatters overlapped: pp 2 x vpp 2,
               and dp 2 in bf16), and bf16/fp16 mixed precision. A control (ZeRO-3 at dp 2 with lr *
               (1 + 1e-6)) must fail the fp64 parameter bound.
  checkpoint:  a GPT in fp64 (tests/e2e/checkpoint_test.py's, with ffn 6: one weight sharded on
               dim 1, its bias a padded shard) saved after 4 steps under ZeRO-3
               at dp 4 holds the one-rank checkpoint's tensors (parameters and Adam moments
               within 1e-9 of the largest value, every element covered); resumed on one rank
               (ZeRO 0) its losses of steps 5..8 are the uninterrupted one-rank run's within
               1e-10 relative, and the one-rank checkpoint resumed under ZeRO-3 at dp 4 too
               (the bounds checkpoint_test.py uses across layouts: a layout only reorders sums).
  memory:      the plans' dp collectives: ZeRO-2 reduce-scatters in forward_backward and not in
               apply_gradients (which still all-gathers the updated shards); ZeRO-3 also
               all-gathers in forward_backward and neither in apply_gradients. From
               `megac plan --json` for a 16-layer GPT at dp 4: per-rank persistent bytes
               (parameters + gradient accumulators + Adam moments) under ZeRO-3 <= 0.27 x
               ZeRO-0's; ZeRO-2 holds whole parameters and 1/4 of the gradients and moments;
               under --overlap on ZeRO-3's arena is at most two blocks' parameters (and the
               reduce-scatters' shards in flight) above the blocking plan's (gathers
               prefetched one layer ahead, not all at the top);
               --reshard-after-forward off grows it by 15..17 blocks' parameters (fp32) and by
               at least 8 blocks' bf16 ones under bf16 (the casts move with the gathers), with
               fewer gathers, and is refused at pp 2.

usage: zero_test.py --megac build/bin/megac --workdir DIR [--only equivalence|checkpoint|memory]
Exits 77 (skip) when mpirun is missing (the memory part needs no MPI and runs first).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoint_test as ck  # noqa: E402
import partition_equivalence as pe  # noqa: E402
from partition_equivalence import GPT, GPT_H12, MIXTRAL, Layout  # noqa: E402

SKIP = 77

# ffn 6 at dp 4: h0.mlp.fc.weight [6, 16] is sharded by ZeRO-3 on dim 1 (dim 0 is not divisible),
# its bias [6] (no dim dp 4 divides) is a padded dim-0 shard, mlp.proj.weight [16, 6] on dim 0.
GPT_FFN6 = dict(name="gpt-ffn6", spec=f"gpt:layers=2,hidden=16,heads=4,ffn=6,seq={pe.SEQ},"
                f"vocab={pe.VOCAB}", layers=2, vocab=pe.VOCAB)

# (model, layout, precision): every case <= 8 ranks.
CASES = [
    (GPT, Layout(dp=2, zero=2), "fp64"),
    (GPT, Layout(dp=2, zero=3), "fp64"),
    (GPT, Layout(dp=4, zero=2), "fp64"),
    (GPT, Layout(dp=4, zero=3), "fp64"),
    (GPT, Layout(tp=2, dp=2, sp=True, zero=2), "fp64"),
    (GPT, Layout(tp=2, dp=2, sp=True, zero=3), "fp64"),
    (GPT, Layout(pp=2, dp=2, zero=2), "fp64"),
    (GPT, Layout(pp=2, dp=2, zero=3), "fp64"),
    (GPT, Layout(pp=2, dp=2, vpp=2, zero=3, recompute="selective"), "fp64"),
    (GPT, Layout(tp=2, pp=2, dp=2, sp=True, zero=3, recompute="full"), "fp64"),
    (GPT, Layout(dp=2, zero=3, recompute="full"), "fp64"),
    (GPT, Layout(dp=2, zero=2, micro=1), "fp64"),  # 4 micro-batches: 4 reduce-scatters a step
    (GPT_H12, Layout(dp=4, zero=3), "fp64"),
    (GPT_FFN6, Layout(dp=4, zero=3), "fp64"),
    (GPT_FFN6, Layout(tp=2, dp=2, zero=3), "fp64"),
    # --overlap on: latency hiding's start/done pairs, ZeRO-3's gathers one layer ahead
    # (mega-training-zero-prefetch), the last micro-batch fused with the update.
    (GPT, Layout(dp=2, zero=3, extra=["--overlap", "on"], tag="overlap"), "fp64"),
    (GPT_FFN6, Layout(dp=4, zero=3, extra=["--overlap", "on"], tag="overlap"), "fp64"),
    (GPT, Layout(pp=2, dp=2, zero=3, extra=["--overlap", "on"], tag="overlap"), "fp64"),
    (GPT, Layout(tp=2, dp=2, sp=True, zero=3, recompute="full", extra=["--overlap", "on"],
                 tag="overlap"), "fp64"),
    # ZeRO-2's reduce-scatters started after their gradients, done at the function's end, in
    # interleaved chunk functions and under bf16 (the gradient cast up before its reduce-scatter).
    (GPT, Layout(pp=2, dp=2, vpp=2, zero=2, extra=["--overlap", "on"], tag="overlap"), "fp64"),
    (GPT, Layout(dp=2, zero=2, extra=["--overlap", "on"], tag="overlap"), "bf16"),
    # --reshard-after-forward off: the backward reads the forward's gathered copies.
    (GPT, Layout(dp=2, zero=3, extra=["--reshard-after-forward", "off"], tag="keep"), "fp64"),
    (GPT_FFN6, Layout(dp=4, zero=3, extra=["--reshard-after-forward", "off", "--overlap", "on"],
                      tag="keep-overlap"), "fp64"),
    (MIXTRAL, Layout(dp=4, ep=2, zero=2), "fp64"),
    (MIXTRAL, Layout(dp=4, ep=2, zero=3), "fp64"),
    (MIXTRAL, Layout(tp=2, dp=4, ep=2, zero=3), "fp64"),
    (GPT, Layout(dp=2, zero=3), "bf16"),
    (GPT, Layout(dp=2, zero=2), "fp16"),
    (GPT, Layout(tp=2, dp=2, zero=3), "fp16"),
]
CONTROL = Layout(dp=2, zero=3, extra=["--lr", "1.000001e-3"], tag="control-lr")


def equivalence(megac, workdir):
    data = pe.make_tokens(workdir, pe.VOCAB)
    cases = CASES + [(GPT, CONTROL, "fp64")]
    references, failures = {}, 0
    for model, layout, precision in cases:
        key = (model["name"], precision)
        args = ["--model", model["spec"]]
        try:
            if key not in references:
                references[key] = pe.megac_train(
                    megac, args, data, os.path.join(workdir, model["name"], precision, "ref"),
                    Layout(micro=pe.GLOBAL_BATCH // 2), precision, 300)
            run = pe.megac_train(megac, args, data,
                                 os.path.join(workdir, model["name"], precision, layout.name()),
                                 layout, precision, 300)
            result = pe.compare(run, references[key], precision, layout)
            problems = result["problems"]
        except pe.RunError as e:
            result, problems = {}, [str(e)]
        ok = not problems
        if layout is CONTROL:
            ok = any("final parameter" in p for p in problems)
            problems = [] if ok else ["the control run (lr * (1 + 1e-6)) passed the fp64 "
                                      "parameter bounds: the comparison is not sensitive"]
        failures += not ok
        print(f"{model['name']:<8} {layout.name():<40} {precision:<5} loss {pe.fmt(result.get('loss'))}"
              f" param {pe.fmt(result.get('param'))} grad {pe.fmt(result.get('grad'))}  "
              f"{'PASS' if ok else 'FAIL'}")
        for p in problems[:6]:
            print("      " + p.replace("\n", "\n      "))
        sys.stdout.flush()
    return failures


# checkpoint_test.py's GPT with ffn 6: at dp 4 ZeRO-3 shards h0.mlp.fc.weight [6, 16] on dim 1 and
# pads its bias [6] to 8 rows (rank 3 holds none), so the checkpoint holds dim-0, dim-1 and
# padded boxes.
CHECKPOINT_SPEC = "gpt:layers=2,hidden=16,heads=4,ffn=6,seq=64,vocab=256"


def checkpoint(megac, workdir):
    ck.SPEC = CHECKPOINT_SPEC
    out = os.path.join(workdir, "checkpoint")
    shutil.rmtree(out, ignore_errors=True)
    zero3 = ["--ranks", "4", "--dp", "4", "--micro-batch", "1", "--zero", "3"]
    full = ck.train(megac, os.path.join(out, "full"), 8, [])
    one_ckpt, zero_ckpt = os.path.join(out, "one_ckpt"), os.path.join(out, "zero3_ckpt")
    ck.train(megac, os.path.join(out, "save_one"), 4, ["--save", one_ckpt])
    saved = ck.train(megac, os.path.join(out, "save_zero3"), 4, ["--save", zero_ckpt] + zero3)
    ck.check_losses(saved, full, range(1, 5), 1e-10, "zero3 dp4 save")
    for kind in ("parameters", "optimizer"):
        ck.check_close_tensors(ck.checkpoint_tensors(os.path.join(zero_ckpt, "step-4"), kind),
                               ck.checkpoint_tensors(os.path.join(one_ckpt, "step-4"), kind),
                               1e-9, "zero3 dp4 checkpoint vs one rank's: " + kind)
    print("ok checkpoint: the zero3 dp4 checkpoint holds the one-rank parameters and moments")
    got = ck.train(megac, os.path.join(out, "zero3_to_one"), 8, ["--load", zero_ckpt])
    ck.check_losses(got, full, range(5, 9), 1e-10, "zero3 dp4 -> one rank")
    print("ok checkpoint: zero3 dp4 -> one rank (zero 0), losses of steps 5..8 within 1e-10")
    got = ck.train(megac, os.path.join(out, "one_to_zero3"), 8, ["--load", one_ckpt] + zero3)
    ck.check_losses(got, full, range(5, 9), 1e-10, "one rank -> zero3 dp4")
    print("ok checkpoint: one rank -> zero3 dp4, losses of steps 5..8 within 1e-10")
    return 0


MEMORY_MODEL = "gpt:layers=16,hidden=64,heads=4,seq=32,vocab=256"


def persistent(megac, zero):
    argv = [megac, "plan", "--model", MEMORY_MODEL, "--json", "--ranks", "4", "--dp", "4"]
    if zero:
        argv += ["--zero", str(zero)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    role = json.loads(out)["roles"][0]
    return role, (role["parameter_bytes"] + role["gradient_bytes"] +
                  role["optimizer_state_bytes"])


def collectives(megac, zero):
    """{(function, opcode)} of the plan's dp collectives (`megac plan`'s communication table)
    for a one-layer GPT at dp 2."""
    argv = [megac, "plan", "--model", "gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16", "--ranks",
            "2", "--dp", "2", "--zero", str(zero)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    table = out.split("communication per call", 1)[1].split("\n\n", 1)[0]
    return {tuple(line.split()[:2]) for line in table.splitlines()[1:] if "[dp]" in line}


def memory(megac):
    failures = 0
    ops = {z: collectives(megac, z) for z in (1, 2, 3)}
    for z, (function, op), present in [
            (1, ("apply_gradients:", "ReduceScatter"), True),
            (2, ("forward_backward:", "ReduceScatter"), True),
            (2, ("apply_gradients:", "ReduceScatter"), False),
            (2, ("apply_gradients:", "AllGather"), True),
            (3, ("forward_backward:", "AllGather"), True),
            (3, ("forward_backward:", "ReduceScatter"), True),
            (3, ("apply_gradients:", "AllGather"), False),
            (3, ("apply_gradients:", "ReduceScatter"), False)]:
        ok = ((function, op) in ops[z]) == present
        print(("ok: " if ok else "FAIL: ") + f"zero {z}: {function} {op} over dp "
              f"{'present' if present else 'absent'}" + ("" if ok else f" (plan: {sorted(ops[z])})"))
        failures += not ok
    z0, b0 = persistent(megac, 0)
    z2, b2 = persistent(megac, 2)
    z3, b3 = persistent(megac, 3)
    print(f"memory ({MEMORY_MODEL}, dp 4, per rank): zero 0 {b0} B, zero 2 {b2} B, "
          f"zero 3 {b3} B = {b3 / b0:.4f} x zero 0")
    checks = [
        (b3 <= 0.27 * b0, f"zero 3 persistent bytes {b3} <= 0.27 x zero 0's {b0}"),
        (z2["parameter_bytes"] == z0["parameter_bytes"],
         f"zero 2 keeps whole parameters ({z2['parameter_bytes']} B)"),
        (z2["gradient_bytes"] * 4 <= z0["gradient_bytes"] * 1.01 and
         z2["gradient_bytes"] * 4 >= z0["gradient_bytes"],
         f"zero 2 gradients ~1/4: {z2['gradient_bytes']} of {z0['gradient_bytes']} B"),
        (z3["parameter_bytes"] * 4 <= z0["parameter_bytes"] * 1.01,
         f"zero 3 parameters ~1/4: {z3['parameter_bytes']} of {z0['parameter_bytes']} B"),
    ]
    # --overlap on: latency hiding alone would start every gather of the step at the top of
    # @forward_backward (16 layers' whole parameters, 3.2 MB, live at once); with
    # mega-training-zero-prefetch at most two gathered layers are live or in flight, so the arena
    # grows by at most two blocks' whole fp32 parameters (12 h^2 + 13 h floats each) over the
    # blocking plan's, where one is live, plus the gradient reduce-scatters' shards in flight
    # (each started after its gradient and done at the function's end: at most the stage's
    # gradient shards, zero 3's accumulator bytes; 3.2 MB of gathers at the top would still fail).
    z3on = json.loads(subprocess.run(
        [megac, "plan", "--model", MEMORY_MODEL, "--json", "--ranks", "4", "--dp", "4", "--zero",
         "3", "--overlap", "on"], check=True, capture_output=True, text=True).stdout)["roles"][0]
    block = (12 * 64 * 64 + 13 * 64) * 4
    grown = z3on["arena_bytes"] - z3["arena_bytes"]
    print(f"zero 3 arena: blocking {z3['arena_bytes']} B, --overlap on {z3on['arena_bytes']} B "
          f"(+{grown} B; one block's parameters {block} B)")
    shards = z3["gradient_bytes"]
    checks.append((grown <= 2 * block + shards,
                   f"zero 3 --overlap on arena grows by {grown} B <= two blocks' parameters "
                   f"({2 * block} B) + the reduce-scatters' shards in flight (<= {shards} B): "
                   "gathers prefetched one layer ahead"))
    # --reshard-after-forward off: one gather per parameter and micro-batch in forward_backward
    # (the backward reads the forward's copy), and every block's whole parameters live from the
    # forward to the backward: the arena grows by about the 16 blocks' whole fp32 parameters
    # (between 15 and 17 blocks: the embedding tables' copies and the packing move it).
    keep = json.loads(subprocess.run(
        [megac, "plan", "--model", MEMORY_MODEL, "--json", "--ranks", "4", "--dp", "4", "--zero",
         "3", "--reshard-after-forward", "off"], check=True, capture_output=True,
        text=True).stdout)["roles"][0]

    def gathers(role):
        return sum(c["count"] for c in role["communication"]
                   if c["function"] == "forward_backward" and c["op"] == "AllGather")
    kept = keep["arena_bytes"] - z3["arena_bytes"]
    print(f"zero 3 --reshard-after-forward off: arena {keep['arena_bytes']} B (+{kept} B), "
          f"forward_backward all-gathers {gathers(keep)} vs {gathers(z3)}")
    checks.append((15 * block <= kept <= 17 * block, f"--reshard-after-forward off grows the "
                   f"arena by {kept} B, 15..17 blocks' parameters ({block} B each)"))
    checks.append((gathers(keep) < gathers(z3), "--reshard-after-forward off gathers less"))
    # bf16: each half casts its own gathered copy (the cast moves with the gather), so with
    # reshard on the bf16 copies die after the forward too; keeping them holds every block's bf16
    # parameters across the backward: at least half of the 16 blocks' (2 bytes each) more.
    def bf16_arena(reshard):
        return json.loads(subprocess.run(
            [megac, "plan", "--model", MEMORY_MODEL, "--json", "--ranks", "4", "--dp", "4",
             "--zero", "3", "--precision", "bf16", "--reshard-after-forward", reshard],
            check=True, capture_output=True, text=True).stdout)["roles"][0]["arena_bytes"]
    on16, off16 = bf16_arena("on"), bf16_arena("off")
    print(f"zero 3 bf16 arena: reshard on {on16} B, off {off16} B (+{off16 - on16} B)")
    checks.append((off16 - on16 >= 8 * block // 2, f"bf16: keeping the gathered copies costs "
                   f"{off16 - on16} B >= 8 blocks' bf16 parameters ({8 * block // 2} B): the "
                   "casts are re-made from the backward's regather"))
    refused = subprocess.run(
        [megac, "plan", "--model", MEMORY_MODEL, "--ranks", "4", "--dp", "2", "--pp", "2",
         "--zero", "3", "--reshard-after-forward", "off"], capture_output=True, text=True)
    checks.append((refused.returncode != 0 and "needs --zero 3 and one pipeline chunk" in
                   refused.stderr and "pp 2" in refused.stderr,
                   "--reshard-after-forward off at pp 2 is refused naming pp: " +
                   refused.stderr.strip()))
    for ok, what in checks:
        print(("ok: " if ok else "FAIL: ") + what)
        failures += not ok
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--only", choices=["equivalence", "checkpoint", "memory"])
    args = parser.parse_args()
    megac = os.path.abspath(args.megac)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    failures = 0
    if args.only in (None, "memory"):
        failures += memory(megac)
    if args.only != "memory" and shutil.which("mpirun") is None:
        print("SKIP: mpirun is not on PATH (Debian: openmpi-bin); ZeRO needs dp ranks")
        return 1 if failures else SKIP
    if args.only in (None, "checkpoint"):
        try:
            failures += checkpoint(megac, workdir)
        except AssertionError as e:
            print("FAIL checkpoint:", e)
            failures += 1
    if args.only in (None, "equivalence"):
        failures += equivalence(megac, workdir)
    print("FAIL" if failures else "PASS", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
