"""The latency-hiding schedule (--overlap on) trains exactly as without it (issue 29).

A GPT (the partition suite's zoo gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32, its data, seed
and hyperparameters) trains 10 fp64 steps with --bucket-size 1000 (several dp buckets) on one
rank and, with --overlap off and on, at
  pp 2 (1F1B, interleaved with 2 virtual stages, zb-h1; 4 micro-batches), dp 2 (2 micro-batches),
  dp 2 (4 micro-batches), dp 2 + ZeRO-1, dp 2 + ZeRO-2, dp 2 + ZeRO-3, pp 2 x dp 2 + ZeRO-2,
  tp 2, tp 2 x dp 2
losses, grad norms, step-1 gradients and final parameters bit-identical on and off, and each
--overlap on run equals the one-rank run within the partition suite's fp64 bounds
(partition_equivalence.compare: the layout reassociates sums, the schedule changes no
arithmetic: a started all-reduce gathers and reduces in group order at its done, as the blocking
one does). Bit-identity is the test of the schedule; the one-rank bounds show both runs are
right. Each --overlap on run is traced (--trace) and must show asynchronous collectives
(AllReduceAsync / ReduceScatterAsync / AllGatherAsync events) so that the test cannot pass with
the pass not running. With --overlap on every pp 1 layout here runs its last micro-batch and the
update as one function, forward_backward_apply (mega-training-fuse-last-micro-batch): its trace
span must be there, and at dp 2 a dp reduction (all-reduce or ZeRO's reduce-scatter) of that
function must be started before at least one of its GEMMs (MatMul kernels) starts, i.e. it
overlaps the rest of the last backward. With ZeRO-1/2 the update's parameter all-gathers are
deferred into the next step's first micro-batch (mega-training-defer-parameter-gather: it runs
gather_forward_backward, whose forward gathers each bucket ahead of its first use): a MatMul
or Linear kernel of a gather_* function must start while one of that function's parameter all-gathers
over dp is in flight (the gathers overlap the forward). At pp 2 the receives
of each step are posted ahead of it: the trace must show a RecvAsync (post to wait) during which
a kernel of the same rank starts. With ZeRO-2/3 each micro-batch's gradient reduce-scatters
start right after their gradients and complete at the function's end: in rank 0's trace a
ReduceScatterAsync over dp of a training function that is not fused with the update
(forward_backward, a chunk's backward) must be started before at least one of that function's
MatMul kernels starts (gather_forward_backward counts: it is forward_backward with the deferred
gathers first). Last, dp 2 + ZeRO-1 --overlap on saves at step 4 (its gathers deferred: the save
gathers them first, and no pending zero.gather.* state is written) and a resumed run repeats
steps 5..10 and the final weights bit for bit. Exit 77 (skip) without
mpirun. Runs with Debian's /usr/bin/python3.

usage: overlap_test.py --megac build/bin/megac --workdir DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numerics  # noqa: E402
import partition_equivalence as pe  # noqa: E402

BUCKET = ["--bucket-size", "1000"]


FUSED = "forward_backward_apply"


def trace_events(path):
    with open(path) as f:
        text = f.read()
    return json.loads(text) if text.strip().startswith("[") else json.loads(text)["traceEvents"]


def traced_async_ops(events):
    return sorted({e["name"] for e in events if str(e.get("name", "")).endswith("Async")})


def fused_overlap(events):
    """Rank 0's fused function: whether it ran, and how many of its GEMMs start after its first
    dp reduction (AllReduceAsync / ReduceScatterAsync over a group "[dp] ...") was started."""
    ran = any(e.get("cat") == "function" and e.get("name") == FUSED and e.get("pid") == 0
              for e in events)
    starts = [e["ts"] for e in events
              if e.get("pid") == 0 and e.get("name") in ("AllReduceAsync", "ReduceScatterAsync")
              and e.get("args", {}).get("function") == FUSED
              and str(e.get("args", {}).get("group", "")).startswith("[dp]")]
    if not starts:
        return ran, 0
    later = [e for e in events
             if e.get("pid") == 0 and e.get("cat") == "kernel" and e.get("name") == "MatMul"
             and e.get("args", {}).get("function") == FUSED and e["ts"] > min(starts)]
    return ran, len(later)


def recv_overlap(events):
    """Pipeline receives posted ahead (RecvAsync, from post to wait) during which a kernel of the
    same rank starts."""
    kernels = {}
    for e in events:
        if e.get("cat") == "kernel":
            kernels.setdefault(e.get("pid"), []).append(e["ts"])
    return len([e for e in events if e.get("name") == "RecvAsync"
                and any(e["ts"] < t < e["ts"] + e["dur"] for t in kernels.get(e.get("pid"), []))])


def scatter_overlap(events):
    """Rank 0's MatMul kernels that start while a ZeRO reduce-scatter (ReduceScatterAsync over
    "[dp] ...") of the same training function, not the fused one, is in flight."""
    scatters = [e for e in events
                if e.get("pid") == 0 and e.get("name") == "ReduceScatterAsync"
                and str(e.get("args", {}).get("function", "")).startswith(
                    ("forward_backward", "backward", "gather_forward_backward"))
                and e.get("args", {}).get("function") not in (FUSED, "gather_" + FUSED)
                and str(e.get("args", {}).get("group", "")).startswith("[dp]")]
    kernels = [e for e in events
               if e.get("pid") == 0 and e.get("cat") == "kernel" and e.get("name") == "MatMul"]
    return len([k for k in kernels
                if any(s["args"]["function"] == k.get("args", {}).get("function")
                       and s["ts"] < k["ts"] < s["ts"] + s.get("dur", 0) for s in scatters)])


def gather_overlap(events):
    """Rank 0's GEMM kernels (MatMul, Linear) of a gather_* function (a step's first micro-batch after an
    update that deferred its parameter all-gathers) that start while one of that function's
    AllGatherAsync over "[dp] ..." is in flight."""
    gathers = [e for e in events
               if e.get("pid") == 0 and e.get("name") == "AllGatherAsync"
               and str(e.get("args", {}).get("function", "")).startswith("gather_")
               and str(e.get("args", {}).get("group", "")).startswith("[dp]")]
    return len([k for k in events
                if k.get("pid") == 0 and k.get("cat") == "kernel"
                and k.get("name") in ("MatMul", "Linear")
                and any(g["args"]["function"] == k.get("args", {}).get("function")
                        and g["ts"] < k["ts"] < g["ts"] + g.get("dur", 0) for g in gathers)])


def resume_check(megac, model, data, workdir, timeout):
    """dp 2 + ZeRO-1 with --overlap on saves at step 4 with its parameter gathers deferred
    (settled first: the checkpoint holds whole parameters and no zero.gather.* state) and a run
    resumed from that checkpoint repeats steps 5..10 bit for bit. Returns the problems."""
    ckpt = os.path.join(workdir, "resume.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    layout = dict(dp=2, zero=1)
    whole = pe.megac_train(megac, model, data, os.path.join(workdir, "resume.whole"),
                           pe.Layout(**layout, extra=[*BUCKET, "--overlap", "on", "--save", ckpt,
                                                      "--save-interval", "4"]), "fp64", timeout)
    for entry in os.listdir(ckpt):
        if entry != "step-4":
            path = os.path.join(ckpt, entry)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    problems = []
    for entry in os.listdir(os.path.join(ckpt, "step-4")):
        if entry.endswith(".safetensors"):
            with open(os.path.join(ckpt, "step-4", entry), "rb") as f:
                header = f.read(8 + int.from_bytes(f.read(8)[:8], "little"))
            if b"zero.gather." in header:
                problems.append(f"{entry} holds a pending zero.gather.* state")
    # The same command, resumed (--save-grads writes step 1's gradients: not in a resumed run).
    rundir = os.path.join(workdir, "resume.resumed")
    os.makedirs(rundir, exist_ok=True)
    with open(os.path.join(workdir, "resume.whole", "command.txt")) as f:
        argv = f.read().split()
    i = argv.index("--save-grads")
    del argv[i:i + 2]
    i = argv.index("--save")
    del argv[i:i + 4]  # --save DIR --save-interval 4
    log, weights = os.path.join(rundir, "log.jsonl"), os.path.join(rundir, "weights.safetensors")
    argv[argv.index("--log-json") + 1] = log
    argv[argv.index("--save-weights") + 1] = weights
    result = subprocess.run([*argv, "--load", ckpt], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        return problems + [f"the resumed run failed: {result.stderr[-500:]}"]
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    keys = ("step", "loss", "grad_norm")
    after = [[r[k] for k in keys] for r in whole["records"] if r["step"] > 4]
    again = [[r[k] for k in keys] for r in records]
    if after != again or not after:
        problems.append(f"resumed steps differ: {again[:2]} against {after[:2]}")
    resumed = pe.read_safetensors(weights)
    for n in sorted(whole["weights"]):
        if not np.array_equal(whole["weights"][n], resumed.get(n)):
            problems.append(f"final weights differ after resuming: {n}")
            break
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if not shutil.which("mpirun"):
        numerics.skip("mpirun is not installed")
        sys.exit(numerics.exit_code(0))
    os.makedirs(args.workdir, exist_ok=True)
    data = pe.make_tokens(args.workdir, pe.VOCAB)
    model = ["--model", pe.GPT["spec"]]
    ref = pe.megac_train(args.megac, model, data, os.path.join(args.workdir, "one"),
                         pe.Layout(extra=BUCKET), "fp64", args.timeout)
    # (name, layout, async ops the trace must show, whether a dp reduction overlaps GEMMs)
    # At pp 2 (no fused function) each step's receives are posted ahead (RecvAsync) and must be
    # in flight while kernels run.
    cases = [("pp2", dict(pp=2, micro=2), {"RecvAsync"}, False),
             ("pp2.vpp2", dict(pp=2, vpp=2, micro=2), {"RecvAsync"}, False),
             ("pp2.zb-h1", dict(pp=2, micro=2, schedule="zb-h1"), {"RecvAsync"}, False),
             ("dp2", dict(dp=2), {"AllReduceAsync"}, True),
             ("dp2.m4", dict(dp=2, micro=1), {"AllReduceAsync"}, True),
             ("dp2+zero1", dict(dp=2, zero=1), {"ReduceScatterAsync", "AllGatherAsync"}, True),
             ("dp2+zero2", dict(dp=2, zero=2), {"ReduceScatterAsync", "AllGatherAsync"}, True),
             ("dp2+zero3", dict(dp=2, zero=3), {"ReduceScatterAsync", "AllGatherAsync"}, True),
             ("pp2xdp2+z2", dict(pp=2, dp=2, zero=2, micro=2), {"ReduceScatterAsync",
                                                                "RecvAsync"}, False),
             ("tp2", dict(tp=2), {"AllReduceAsync"}, False),
             ("tp2xdp2", dict(tp=2, dp=2), {"AllReduceAsync"}, True)]
    failures = 0
    print(f"{'layout':<12} {'on == off':<10} {'loss rel':>9} {'param':>9} {'grad':>9} "
          f"{'GEMMs after 1st dp start':>24} {'GEMMs under a gather':>24}  "
          "async ops")
    for name, kw, expected, overlaps in cases:
        runs = {}
        trace = os.path.join(args.workdir, name + ".trace.json")
        for overlap in ("off", "on"):
            extra = [*BUCKET, "--overlap", overlap]
            if overlap == "on":
                extra += ["--trace", trace, "--trace-steps", "1"]
            layout = pe.Layout(**kw, extra=extra)
            runs[overlap] = pe.megac_train(args.megac, model, data,
                                           os.path.join(args.workdir, f"{name}.{overlap}"),
                                           layout, "fp64", args.timeout)
        on, off = runs["on"], runs["off"]
        problems = []
        keys = ("loss", "grad_norm")
        if [[r[k] for k in keys] for r in on["records"]] != \
                [[r[k] for k in keys] for r in off["records"]]:
            problems.append("losses or grad norms differ between --overlap on and off")
        for label in ("weights", "grads"):
            a, b = on[label], off[label]
            diff = [n for n in sorted(set(a) | set(b))
                    if n not in a or n not in b or not np.array_equal(a[n], b[n])]
            if diff:
                problems.append(f"{label} differ between on and off: {diff[:4]}")
        result = pe.compare(on, ref, "fp64")
        problems += result["problems"]
        if kw.get("schedule", "").startswith("zb"):  # megac_train traces these runs itself
            trace = os.path.join(args.workdir, f"{name}.on", "trace.json")
        events = trace_events(trace)
        seen = set(traced_async_ops(events))
        if not expected <= seen:
            problems.append(f"the trace shows {sorted(seen)}, expected {sorted(expected)}")
        ran, later = fused_overlap(events)
        pipelined = kw.get("pp", 1) > 1
        if pipelined and recv_overlap(events) == 0:
            problems.append("no kernel runs while a pipeline receive is in flight: the receives "
                            "are not posted ahead of their steps")
        if not ran and not pipelined:
            problems.append(f"rank 0 never ran {FUSED} (the last micro-batch fused with the "
                            "update)")
        updates = gather_overlap(events)
        if kw.get("zero") in (1, 2) and not pipelined and updates == 0:
            problems.append("no GEMM of a gather_* function starts while its parameter "
                            "all-gathers are in flight: the deferred gathers do not overlap "
                            "the next forward")
        if overlaps and later == 0:
            problems.append(f"no GEMM of {FUSED} starts after its first dp reduction: the "
                            "reduction does not overlap the last backward")
        if kw.get("zero", 0) >= 2 and scatter_overlap(events) == 0:
            problems.append("no MatMul starts while a ZeRO reduce-scatter of its (unfused) "
                            "training function is in flight: the reduce-scatters block")
        same = "yes" if not any("between" in p for p in problems) else "NO"
        print(f"{name:<12} {same:<10} {pe.fmt(result['loss']):>9} {pe.fmt(result['param']):>9} "
              f"{pe.fmt(result['grad']):>9} {later:>24} {updates:>24}  {', '.join(sorted(seen))}")
        for p in problems:
            print(f"  FAIL {name}: {p}")
        failures += bool(problems)
    problems = resume_check(args.megac, model, data, args.workdir, args.timeout)
    print(f"dp2+zero1 saved with its gathers deferred, resumed: "
          f"{'bit-identical' if not problems else 'FAIL'}")
    for p in problems:
        print(f"  FAIL resume: {p}")
    failures += bool(problems)
    print("PASS" if not failures else f"FAIL: {failures} layout(s)")
    sys.exit(numerics.exit_code(failures))


if __name__ == "__main__":
    main()
