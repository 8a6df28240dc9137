"""The planner's predicted step time against measured `megac train` runs on this machine's CPU.

usage: cpu_cost_model.py --megac build/bin/megac --workdir DIR [--calibrations 3] [--repeats 5]
                         [--steps 6] [--quick] [--round K [--hold-seconds S]] [--report]
                         [--placement-retakes N] [--repredict LABEL] [--only NAME ...]
       cpu_cost_model.py --megac build/bin/megac --workdir DIR --by-class SPEC --only NAME ...

One calibration per machine (issue 34): each round runs `megac calibrate --backend cpu` once
(no --ranks: one rank alone with 1 and with every core's threads, and every core busy) and then
measures every configuration; every configuration of the round, 1 rank or 2, 1 thread or 2,
fp32 or bf16, is predicted from that one spec (`megac plan --cluster SPEC:1xRANKS --threads T
--stack megac`, every choice pinned, --no-compile); a dropless MoE with expert parallelism also
with its routing as the 1-rank run of the same model logged it (`--moe-load`, moe_load_flags). Calibrations and measurements interleave:
round 1 = calibration 1 + measurements, round 2 = calibration 2 + measurements, ...; a
configuration's measured time in a round is the median of its `--repeats` runs (taken in as many
passes over the configurations, so they spread over the round; 5 by default: on this VM a
1-rank, 2-thread run is about 30% slower whenever the host has the two vCPUs on two dies, from
one run in ten to most in an hour, docs/cpu-performance.md), a run's time the median of its
steps after the first two. Per calibration the table prints the mean and max
|error|; the summary gives, per configuration, the spread of the error across calibrations.
After each run (and the calibration) bench-core-round-trip records the cache-line round trip
between CPUs 0 and 1; the report then also gives, per round, how many runs ended with the cores
far apart (over twice the round's nearest round trip) and each multi-thread configuration's
median over its near runs, the placement its calibration sweep has (the headline table keeps
every run). `--placement-retakes N` runs a multi-thread configuration again (up to N times) when
its run ended far apart, so that each has near runs for that median; the retakes never enter
the headline.

`--round K` runs only round K and saves it under WORKDIR after every configuration (so a full
run can be split into holds of the CPU lock of a few minutes each: `--round 1 --hold-seconds
300` calibrates and measures what fits in the hold, the same command again resumes round 1 with
its spec, then `--round 2`, `--round 3`; `--report` prints the table of the saved rounds;
`--repredict LABEL` predicts the saved rounds again from their specs after a model change). `--quick`: one round, the --only
configurations (default: four) and 4 steps, for development. Exits non-zero only if a run fails,
never on the error.

`--by-class SPEC` says where a configuration's error comes from: for each --only configuration it
predicts with the calibration SPEC (`megac plan --json`'s `kernel_seconds` and `kernel_launches`,
the busiest rank) and traces `megac train --trace` (steps 3..--steps), then prints per kernel class
(bench/kernel_classes.py maps each traced instruction's opcode to the planner's class) the
predicted and the traced milliseconds per step on rank 0, their ratio and the launches; what is
not an instruction (the runner, waiting, communication) is the step minus the traced kernels.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from kernel_classes import CLASS

SKIP = 2
# Hidden 512 (GEMM-bound), sequence 512 (attention-bound), a Llama (RMSNorm, rotary, GQA,
# SwiGLU) and a Mixtral (4 experts, top 2), each small enough that a step takes well under a
# second on 2 cores.
H512 = "gpt:layers=2,hidden=512,heads=8,seq=128,vocab=2048"
S512 = "gpt:layers=4,hidden=256,heads=4,seq=512,vocab=1024"
LLAMA = "llama:layers=2,hidden=512,heads=8,kv_heads=4,ffn=1024,seq=256,vocab=1024"
MIXTRAL = ("mixtral:layers=2,hidden=256,heads=8,kv_heads=4,experts=4,topk=2,ffn=512,seq=128,"
           "vocab=1024")
# The same Mixtral with a capacity factor of 1 (Megatron-Core's --moe-expert-capacity-factor,
# GShard/Switch's token dropping): no expert keeps more than its balanced share of a sequence's
# routed tokens, so the busiest expert-parallel rank computes at most the balanced rows the
# planner charges. Dropless routing (MIXTRAL) puts whatever the router chooses on the busiest
# rank: an untrained router gives it ~15% more rows than the mean (docs/planner.md).
MIXTRAL_CAPACITY = MIXTRAL + ",capacity=1"
# name, model, ranks, threads, precision, layout (tp, pp, dp, ep, vpp, micro-batch, recompute,
# zero, sp), global batch
CONFIGS = [
    ("h512-1r1t", H512, 1, 1, "fp32", (1, 1, 1, 1, 1, 4, "none", 0, False), 4),
    ("h512-1r2t", H512, 1, 2, "fp32", (1, 1, 1, 1, 1, 4, "none", 0, False), 4),
    ("h512-1r2t-mb1-acc4", H512, 1, 2, "fp32", (1, 1, 1, 1, 1, 1, "none", 0, False), 4),
    ("h512-1r2t-bf16", H512, 1, 2, "bf16", (1, 1, 1, 1, 1, 4, "none", 0, False), 4),
    ("h512-tp2", H512, 2, 1, "fp32", (2, 1, 1, 1, 1, 4, "none", 0, False), 4),
    ("h512-tp2-sp", H512, 2, 1, "fp32", (2, 1, 1, 1, 1, 4, "none", 0, True), 4),
    ("h512-dp2-zero1", H512, 2, 1, "fp32", (1, 1, 2, 1, 1, 2, "none", 1, False), 4),
    ("h512-pp2-mb1", H512, 2, 1, "fp32", (1, 2, 1, 1, 1, 1, "none", 0, False), 4),
    ("h512-dp2-bf16", H512, 2, 1, "bf16", (1, 1, 2, 1, 1, 2, "none", 0, False), 4),
    ("s512-1r1t", S512, 1, 1, "fp32", (1, 1, 1, 1, 1, 2, "none", 0, False), 2),
    ("s512-1r2t-selective", S512, 1, 2, "fp32", (1, 1, 1, 1, 1, 2, "selective", 0, False), 2),
    ("s512-tp2-full", S512, 2, 1, "fp32", (2, 1, 1, 1, 1, 2, "full", 0, False), 2),
    ("s512-pp2-vpp2", S512, 2, 1, "fp32", (1, 2, 1, 1, 2, 1, "none", 0, False), 4),
    ("llama-1r2t", LLAMA, 1, 2, "fp32", (1, 1, 1, 1, 1, 2, "none", 0, False), 2),
    ("llama-tp2", LLAMA, 2, 1, "fp32", (2, 1, 1, 1, 1, 2, "none", 0, False), 2),
    ("llama-1r2t-bf16", LLAMA, 1, 2, "bf16", (1, 1, 1, 1, 1, 2, "none", 0, False), 2),
    ("mixtral-1r2t", MIXTRAL, 1, 2, "fp32", (1, 1, 1, 1, 1, 4, "none", 0, False), 4),
    ("mixtral-dp2-ep2", MIXTRAL, 2, 1, "fp32", (1, 1, 2, 2, 1, 2, "none", 0, False), 4),
    ("mixtral-dp2-ep2-cap1", MIXTRAL_CAPACITY, 2, 1, "fp32", (1, 1, 2, 2, 1, 2, "none", 0, False),
     4),
]
QUICK = ["h512-1r1t", "h512-1r2t", "h512-tp2", "mixtral-dp2-ep2"]


def token_rows(workdir, model):
    """A seeded .npy of random token rows (S+1 tokens each) matching the model's seq and vocab."""
    keys = dict(part.split("=") for part in model.split(":", 1)[1].split(","))
    seq, vocab = int(keys["seq"]), int(keys["vocab"])
    path = os.path.join(workdir, "tokens-s%d-v%d.npy" % (seq, vocab))
    if not os.path.exists(path):
        rows = np.random.default_rng(0).integers(0, vocab, size=(256, seq + 1), dtype=np.int32)
        np.save(path, rows)
    return path


def layout_flags(layout):
    tp, pp, dp, ep, vpp, mb, recompute, zero, sp = layout
    flags = ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--vpp", str(vpp),
             "--micro-batch", str(mb), "--recompute", recompute, "--zero", str(zero)]
    if ep > 1:
        flags += ["--ep", str(ep)]
    return flags


def disturbed(path):
    """Why the spec at `path` looks measured on a busy machine, or None.

    OpenBLAS splits a GEMM of 128 or more per side over a rank's threads: on C idle cores one
    rank with C threads runs it close to C times as fast as with one (1.83-2.03x on every such
    f32 shape, 1.49x at 128^3, in an undisturbed round on this 2-core VM). A lower quartile of
    the ratios below 0.75·C means a quarter of the multi-thread sweep ran while another process
    held a core or, on this VM, in one of the phases when its second vCPU stalls multi-thread
    work (one such sweep: 1.23-1.57x on its last eleven shapes, its median over the shapes of
    256 and more still 1.88x, which the earlier test, the median, let through)."""
    with open(path) as f:
        calibration = json.load(f).get("calibration", {})
    # megac calibrate's own placement note (runtime/calibrate/CoreDistance.h): the host moved the
    # vCPUs between dies while the multi-thread occupancy ran.
    if "moved them between dies" in calibration.get("source", ""):
        return "the spec says its multi-thread sweeps ran in two placements"
    tables = {o["name"]: o["gemm"] for o in calibration.get("occupancies", [])}
    many = [n for n in tables if n != "alone-1t"]
    if "alone-1t" not in tables or not many:
        return None
    one = {(g["m"], g["n"], g["k"], g["elementBytes"]): g["flopsPerSecond"]
           for g in tables["alone-1t"] if min(g["m"], g["n"], g["k"]) >= 128}
    ratios = sorted(g["flopsPerSecond"] / one[key] for g in tables[many[0]]
                    for key in [(g["m"], g["n"], g["k"], g["elementBytes"])] if key in one)
    threads = max(o.get("threads", 1) for o in calibration["occupancies"])
    quartile = ratios[len(ratios) // 4] if ratios else None
    if quartile is not None and quartile < 0.75 * threads:
        return ("%s's GEMMs are %.2fx alone-1t's (lower quartile over %d shapes; %d threads on "
                "idle cores: ~%dx)" % (many[0], quartile, len(ratios), threads, threads))
    return None


def calibrate(megac, path, quick, attempts=3):
    """`megac calibrate`, again (up to `attempts` times) when the spec looks disturbed."""
    start = time.time()
    for attempt in range(1, attempts + 1):
        subprocess.run([megac, "calibrate", "--backend", "cpu", "-o", path] +
                       (["--quick"] if quick else []), check=True, capture_output=True, text=True)
        why = disturbed(path)
        if not why:
            break
        print("calibration attempt %d disturbed: %s%s" % (
            attempt, why, "; calibrating again" if attempt < attempts else "; kept"),
            file=sys.stderr, flush=True)
    return time.time() - start


def moe_load_flags(workdir, config):
    """`--moe-load LOG` for a dropless MoE configuration with expert parallelism: the routing as
    the 1-rank configuration of the same model measured it (its `megac train --log-json` in
    `workdir`, the same seed, data and steps, so the same routing; docs/planner.md), when that
    log is there. A capacity factor caps what any expert keeps, so those are left balanced."""
    name, model, ranks, threads, precision, layout, global_batch = config
    if workdir is None or layout[3] <= 1 or "capacity=" in model:
        return []
    for other in CONFIGS:
        log = os.path.join(workdir, other[0] + ".jsonl")
        if other[1] == model and other[2] == 1 and os.path.exists(log):
            return ["--moe-load", log]
    return []


def planned(megac, spec, config, workdir=None):
    """`megac plan --json`'s layout for the configuration, every choice pinned, from `spec`
    (and, with `workdir`, a dropless MoE's measured routing: moe_load_flags)."""
    name, model, ranks, threads, precision, layout, global_batch = config
    out = subprocess.run(
        [megac, "plan", "--model", model, "--cluster", "%s:1x%d" % (spec, ranks),
         "--threads", str(threads), "--global-batch", str(global_batch), "--stack", "megac",
         "--precision", precision, "--json", "--no-compile", "--top", "1",
         "--sequence-parallel" if layout[8] else "--no-sequence-parallel"] + layout_flags(layout)
        + schedule_flags(layout) + moe_load_flags(workdir, config),
        check=True, capture_output=True, text=True).stdout
    layouts = json.loads(out)["layouts"]
    if not layouts:
        raise SystemExit("the planner found no fitting layout for %s" % name)
    return layouts[0]


def predict(megac, spec, config, workdir=None):
    return planned(megac, spec, config, workdir)["step_time_s"] * 1e3


def schedule_flags(layout):
    """The pipeline schedule `megac train` runs by default (1F1B, interleaved with vpp > 1),
    pinned for the planner, which would otherwise pick the fastest (a zero-bubble one)."""
    tp, pp, dp, ep, vpp, mb, recompute, zero, sp = layout
    if pp == 1:
        return []
    return ["--schedule", "interleaved" if vpp > 1 else "1f1b"]


def train(megac, workdir, config, steps, extra):
    """`megac train` of the configuration for `steps` steps, with `extra` flags."""
    name, model, ranks, threads, precision, layout, global_batch = config
    cmd = [megac, "train", "--model", model, "--data", token_rows(workdir, model),
           "--steps", str(steps), "--global-batch", str(global_batch), "--lr", "1e-3",
           "--precision", precision, "--threads", str(threads)] + extra + layout_flags(layout)
    if layout[8]:
        cmd.append("--sequence-parallel")
    if ranks > 1:
        cmd += ["--ranks", str(ranks)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit("%s: megac train failed:\n%s" % (name, run.stderr[-2000:]))


def round_trip_ns(megac):
    """The cache-line round trip between CPUs 0 and 1 now (bench-core-round-trip, built next to
    megac), or None where it cannot be measured."""
    probe = os.path.join(os.path.dirname(os.path.abspath(megac)), "bench-core-round-trip")
    if not os.access(probe, os.X_OK):
        return None
    run = subprocess.run([probe], capture_output=True, text=True)
    if run.returncode != 0 or not run.stdout.startswith("round_trip_ns "):
        return None
    return float(run.stdout.split()[1])


def far_apart(round_trip, nearest):
    """Whether a run's cores were on two dies: its round trip over twice the round's nearest
    (the two placements this VM shows: ~55-80 ns and ~350-380 ns)."""
    return round_trip is not None and nearest is not None and round_trip > 2 * nearest


def measure(megac, workdir, config, steps):
    log = os.path.join(workdir, config[0] + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    train(megac, workdir, config, steps, ["--log-json", log])
    records = [json.loads(line) for line in open(log)]
    return statistics.median(r["step_time_s"] for r in records[SKIP:]) * 1e3


def run_round_trips(result):
    """The cache-line round trips recorded after a round's runs: (scheduled, retakes)."""
    rows = result["rows"].values()
    return ([t for row in rows for t in row.get("round_trip_ns", []) if t is not None],
            [t for row in rows for _, t in row.get("retakes", []) if t is not None])


def nearest_round_trip(result):
    """The round's nearest cache-line round trip so far (its calibration's and its runs')."""
    scheduled, retakes = run_round_trips(result)
    probes = scheduled + retakes + [t for t in [result.get("calibration_round_trip_ns")]
                                    if t is not None]
    return min(probes) if probes else None


def retake_far_run(args, result, row, config):
    """--placement-retakes N: a multi-thread configuration's run that ended with the vCPUs far
    apart is run again, up to N times, until one ends near; the retakes are kept apart
    (row["retakes"]: [ms, round trip]) and count only in the report's by-placement section,
    never in the headline median over the scheduled runs."""
    threads = config[3]
    if args.placement_retakes <= 0 or threads == 1:
        return
    if not far_apart(row["round_trip_ns"][-1], nearest_round_trip(result)):
        return
    for _ in range(args.placement_retakes):
        ms = measure(args.megac, args.workdir, config, args.steps)
        t = round_trip_ns(args.megac)
        row.setdefault("retakes", []).append([ms, t])
        if not far_apart(t, nearest_round_trip(result)):
            return


def run_round(args, configs, k, saved=None, save=None):
    """Calibration k, then every configuration predicted from it and measured.

    `saved`: what an earlier hold of this round left (its spec and finished configurations):
    the round resumes with that spec, measuring only the configurations it has not. `save` is
    called after each configuration, and the round stops starting new ones once
    `args.hold_seconds` have passed (0: no limit), so a round can span several holds of the CPU
    lock."""
    start = time.time()
    spec = os.path.join(args.workdir, "cpu-machine-%d.json" % k)
    if saved and os.path.exists(saved["spec"]):
        result = saved
        print("round %d: resuming with %s (%d of %d configurations done)"
              % (k, os.path.basename(spec), len(saved["rows"]), len(configs)),
              file=sys.stderr, flush=True)
    else:
        seconds = calibrate(args.megac, spec, args.quick)
        print("round %d: calibrated %s in %.0f s" % (k, os.path.basename(spec), seconds),
              file=sys.stderr, flush=True)
        result = {"round": k, "spec": spec, "calibrate_s": seconds, "rows": {},
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "calibration_round_trip_ns": round_trip_ns(args.megac)}
    rows = result["rows"]
    # --repeats N measures in N passes over the configurations, so a configuration's runs are
    # spread over the round (as the calibration spreads its sweeps over its own minutes) rather
    # than taken back to back inside one of the VM's speed phases; its time is their median.
    for repeat in range(args.repeats):
        for config in configs:
            row = rows.get(config[0])
            if row and len(row["runs_ms"]) > repeat:
                continue
            if args.hold_seconds and time.time() - start > args.hold_seconds:
                print("round %d: pass %d of %d stopped after %.0f s; run --round %d again to "
                      "resume" % (k, repeat + 1, args.repeats, time.time() - start, k),
                      file=sys.stderr, flush=True)
                return result
            if row is None:
                row = rows[config[0]] = {
                    "predicted_ms": predict(args.megac, spec, config, args.workdir),
                    "moe_load": moe_load_flags(args.workdir, config)[1:] or None,
                    "runs_ms": []}
            row["runs_ms"].append(measure(args.megac, args.workdir, config, args.steps))
            # Where the host had the vCPUs when the run ended (docs/cpu-performance.md: a rank's
            # threads share data, and two dies apart every transfer costs ~6x).
            row.setdefault("round_trip_ns", []).append(round_trip_ns(args.megac))
            retake_far_run(args, result, row, config)
            row["measured_ms"] = statistics.median(row["runs_ms"])
            row["time"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            print("round %d, pass %d: %-22s predicted %8.1f ms, measured %8.1f ms (%+.1f%%)"
                  % (k, repeat + 1, config[0], row["predicted_ms"], row["measured_ms"],
                     100 * (row["predicted_ms"] / row["measured_ms"] - 1)),
                  file=sys.stderr, flush=True)
            if save:
                save(result)
    return result


def by_class(args, config):
    """Predicted against traced time per kernel class for one configuration (--by-class)."""
    name = config[0]
    best = planned(args.megac, args.by_class, config, args.workdir)
    predicted, launches = best.get("kernel_seconds", {}), best.get("kernel_launches", {})
    trace = os.path.join(args.workdir, name + ".trace.json")
    train(args.megac, args.workdir, config, args.steps,
          ["--trace", trace, "--trace-steps", str(args.steps - SKIP)])
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step" and e.get("pid") == 0]
    traced, count = {}, {}
    for e in events:
        if e.get("cat") == "kernel" and e.get("pid") == 0:
            kind = CLASS.get(e["name"], "unmapped " + e["name"])
            traced[kind] = traced.get(kind, 0.0) + e["dur"] / 1e3 / len(steps)
            count[kind] = count.get(kind, 0) + 1 / len(steps)
    step_ms = statistics.median(e["dur"] / 1e3 for e in steps)
    print("%s: predicted step %.1f ms, traced step %.1f ms (median of %d, rank 0)"
          % (name, best["step_time_s"] * 1e3, step_ms, len(steps)))
    print("  %-20s %10s %10s %7s %9s %9s" % ("class", "pred ms", "traced ms", "ratio",
                                             "pred n", "traced n"))
    for kind in sorted(set(predicted) | set(traced), key=lambda k: -traced.get(k, 0.0)):
        p, t = predicted.get(kind, 0.0) * 1e3, traced.get(kind, 0.0)
        print("  %-20s %10.2f %10.2f %7s %9.0f %9.0f" % (
            kind, p, t, "%.2f" % (p / t) if t else "-", launches.get(kind, 0), count.get(kind, 0)))
    kernels = sum(traced.values())
    print("  %-20s %10.2f %10.2f  (predicted: overhead, communication, optimizer apart from its "
          "kernels)" % ("not instructions", best["step_time_s"] * 1e3 - sum(predicted.values())
                        * 1e3, step_ms - kernels))


def report(configs, rounds):
    cores = os.cpu_count()
    print("CPU runtime, %d cores; %d calibration(s) (`megac calibrate --backend cpu`, one spec "
          "per machine), each followed by its measurements; a measurement: median of the steps "
          "after the first %d" % (cores, len(rounds), SKIP))
    header = "%-22s %-5s %-5s" % ("configuration", "r x t", "prec")
    for r in rounds:
        header += " | cal %d: pred ms  meas ms   error" % r["round"]
    header += " | spread"
    print(header)
    errors = {r["round"]: [] for r in rounds}
    spreads = []
    for name, model, ranks, threads, precision, layout, gb in configs:
        line = "%-22s %dx%d   %-5s" % (name, ranks, threads, precision)
        these = []
        for r in rounds:
            row = r["rows"].get(name)
            if not row:
                line += " | %31s" % "-"
                continue
            e = row["predicted_ms"] / row["measured_ms"] - 1
            errors[r["round"]].append(abs(e))
            these.append(e)
            line += " |       %8.1f %8.1f %+6.1f%%" % (row["predicted_ms"], row["measured_ms"],
                                                       100 * e)
        if len(these) > 1:
            spreads.append(max(these) - min(these))
            line += " | %5.1f%%" % (100 * (max(these) - min(these)))
        print(line)
    for r in rounds:
        e = errors[r["round"]]
        if e:
            print("calibration %d (%s, %.0f s): %d configurations, mean |error| %.1f%%, max "
                  "|error| %.1f%%" % (r["round"], r["date"], r["calibrate_s"], len(e),
                                      100 * statistics.mean(e), 100 * max(e)))
    if spreads:
        print("error spread across calibrations (max - min per configuration): mean %.1f%%, max "
              "%.1f%%" % (100 * statistics.mean(spreads), 100 * max(spreads)))
    placement(configs, rounds)


def placement(configs, rounds):
    """The runs by where the host had the two vCPUs when each ended (bench-core-round-trip): a
    rank of several threads shares data between them and runs ~30% slower when they are two dies
    apart, ranks of one thread do not. Per round: how many runs were far apart, and each
    multi-thread configuration's median over its near runs (the placement the calibration's
    multi-thread sweep is retaken until it has) with that error. The table above is the headline;
    this says how much of it is the host's placement."""
    if not any(t is not None for r in rounds for row in r["rows"].values()
               for t in row.get("round_trip_ns", [])):
        return  # rounds saved before the probe, or a machine it cannot measure
    print("by placement (cache-line round trip between CPUs 0 and 1 after each run; far: over "
          "twice the round's nearest):")
    for r in rounds:
        probes, retaken = run_round_trips(r)
        if not probes:
            continue
        nearest = min(probes + retaken)
        far = sum(far_apart(t, nearest) for t in probes)
        retakes = sum(len(row.get("retakes", [])) for row in r["rows"].values())
        errors, lines = [], []
        for name, model, ranks, threads, precision, layout, gb in configs:
            row = r["rows"].get(name)
            if not row or "round_trip_ns" not in row:
                continue
            near = [ms for ms, t in list(zip(row["runs_ms"], row["round_trip_ns"]))
                    + [tuple(x) for x in row.get("retakes", [])]
                    if t is not None and not far_apart(t, nearest)]
            if threads == 1:
                errors.append(abs(row["predicted_ms"] / row["measured_ms"] - 1))
                continue
            runs = "%d near of %d runs%s" % (
                len(near), len(row["runs_ms"]),
                " + %d retakes" % len(row["retakes"]) if row.get("retakes") else "")
            if len(near) < 3:
                lines.append("  %-22s %s: no median" % (name, runs))
                continue
            e = row["predicted_ms"] / statistics.median(near) - 1
            errors.append(abs(e))
            lines.append("  %-22s %s: median %.1f ms, error %+.1f%%" % (
                name, runs, statistics.median(near), 100 * e))
        print("round %d: nearest %.0f ns, %d of %d runs far apart%s" % (
            r["round"], nearest, far, len(probes),
            ", %d multi-thread runs retaken (--placement-retakes)" % retakes if retakes else ""))
        for line in lines:
            print(line)
        if errors:
            print("round %d, 1-thread ranks as measured and multi-thread ranks near: %d "
                  "configurations, mean |error| %.1f%%, max |error| %.1f%%" % (
                      r["round"], len(errors), 100 * statistics.mean(errors), 100 * max(errors)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--calibrations", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--round", type=int,
                        help="run only this round and save it (resumes a partly saved round)")
    parser.add_argument("--hold-seconds", type=float, default=0,
                        help="with --round: start no configuration after this many seconds "
                             "(a hold of the CPU lock); the next --round K resumes")
    parser.add_argument("--placement-retakes", type=int, default=0, metavar="N",
                        help="run a multi-thread configuration again, up to N times, when its "
                             "run ended with the two vCPUs far apart; the retakes count only in "
                             "the report's by-placement medians, not in the headline")
    parser.add_argument("--report", action="store_true", help="print the saved rounds")
    parser.add_argument("--repredict", metavar="LABEL",
                        help="predict every saved round's configurations again with this megac "
                             "(a model change), keeping the old predictions under LABEL; then "
                             "--report")
    parser.add_argument("--only", action="append", help="run only these configurations")
    parser.add_argument("--by-class", metavar="SPEC",
                        help="per kernel class, predicted (from this calibration spec) against "
                             "traced time of the --only configurations")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    only = args.only or (QUICK if args.quick else None)
    configs = [c for c in CONFIGS if not only or c[0] in only]
    if args.quick:
        args.calibrations = 1
        args.repeats = 1
        args.steps = min(args.steps, 4)
    skipped = [c[0] for c in configs if c[2] * c[3] > os.cpu_count()]
    if skipped:
        print("skipped (ranks x threads > %d cores): %s" % (os.cpu_count(), ", ".join(skipped)))
    configs = [c for c in configs if c[2] * c[3] <= os.cpu_count()]
    if args.by_class:
        for config in configs:
            by_class(args, config)
        return 0
    saved = os.path.join(args.workdir, "rounds.json")
    if args.repredict:
        # The model changed after the measurements: predict every saved row again from its
        # round's spec (the measurements and the specs stay); the old prediction is kept under
        # the label.
        with open(saved) as f:
            rounds = json.load(f)
        for r in rounds.values():
            for config in configs:
                row = r["rows"].get(config[0])
                if row:
                    row.setdefault("earlier_predictions_ms", {})[args.repredict] = \
                        row["predicted_ms"]
                    row["predicted_ms"] = predict(args.megac, r["spec"], config, args.workdir)
        with open(saved, "w") as f:
            json.dump(rounds, f, indent=1)
        args.report = True
    if args.report:
        with open(saved) as f:
            rounds = sorted(json.load(f).values(), key=lambda r: r["round"])
        report(configs, rounds)
        return 0
    if args.round:
        rounds = {}
        if os.path.exists(saved):
            with open(saved) as f:
                rounds = json.load(f)

        def save(result):
            rounds[str(args.round)] = result
            with open(saved, "w") as f:
                json.dump(rounds, f, indent=1)

        save(run_round(args, configs, args.round, rounds.get(str(args.round)), save))
        report(configs, [rounds[str(args.round)]])
        return 0
    rounds = [run_round(args, configs, k) for k in range(1, args.calibrations + 1)]
    report(configs, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
