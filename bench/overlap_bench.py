"""How much emulated link time the latency-hiding schedule hides (issue 29; prints a table).

2 CPU ranks x 1 thread train a GPT (default zoo gpt:layers=4,hidden=512,heads=8,seq=64,vocab=1024,
13.2M parameters, fp32, micro-batches of 2 rows per rank: about 0.8-0.9 s per step with one
on this machine, whose 53 MB all-reduce takes 0.26 s on the emulated link) at dp 2 (and dp 2 +
ZeRO-N with --zero N, --zero1 for ZeRO-1) with --bucket-size 800000 (>= 16 dp buckets), in four
variants: --overlap off/on x with/without --emulate-link 2e8,2e-5. Each run trains --steps steps (default 12; the
first 2 are dropped as warm-up); the runs are interleaved (off, on, off, on, ...) --repeats times
and each variant's step time is the median of all its kept steps.

  link      = the emulated link time of one step's collectives, from the compiled plan (`megac
              plan --json`: every collective of forward_backward x micro-batches and of
              apply_gradients, at the alpha-beta time the emulation gives it: all-reduce
              2(g-1) latencies + 2(g-1)/g x bytes / bandwidth, all-gather and reduce-scatter
              (g-1) latencies + (g-1) x block bytes / bandwidth)
  exposed   = median step(emulated) - median step(not emulated), per --overlap setting
  hidden    = 1 - exposed(on) / link;  exposed(off) / link is the share exposed without overlap
  cost      = median step(on, not emulated) / median step(off, not emulated) - 1

With --overlap on at pp 1 the last micro-batch and the update run as one function
(forward_backward_apply), so each bucket's dp reduction starts as soon as its gradients are
final, while the rest of the last backward runs (docs/training-step.md "Overlap"). The emulated
link carries a group's collectives one at a time in posting order (each its alpha-beta time,
from the later of its post and the end of the group's previous one), as a real link shares its
bandwidth among buckets in flight.
The table also prints the arena bytes of each plan (the fused function holds the backward's
activations and the update's temporaries at once).

--pp trains pp 2 instead (dp 1, the default model with an untied head, `--schedule` 1f1b or
zb-h1..., `--vpp V` for interleaved; --micro-batches M >= 4 of --rows rows): link is then
2 x M x (2V - 1) pipeline messages of rows x seq x hidden fp32 values (one each way per
micro-batch and cut, each latency + bytes / bandwidth from when both sides posted: the emulated
point-to-point transfer) plus the plan's other transfers. --overlap on posts each step's
receives ahead of it (docs/training-step.md, "Pipeline transfers"). --link B,L sets the emulated
link (default 2e8,2e-5: at pp 2 the transfers are then under 1% of the step, below this VM's
spread; 2e6,2e-5 makes them comparable to the compute).

predicted = the planner's exposed communication for the same layout and --overlap (issue 29):
              `megac plan --cluster EMUL.json:2 ... --overlap on|off --bucket-size B --stack megac
              --top 1 --no-compile --json` minus the same with PLAIN.json, where EMUL.json is a
              calibrated CPU spec (--spec FILE, or `megac calibrate --backend cpu --ranks 2
              --threads 1` run first, ~1 min) with its measured collectives dropped and the
              emulated link as its bandwidth and latency (linkEfficiency 1), and PLAIN.json the
              same at 1e15 B/s and no latency. The step's compute comes from the calibration, so
              an overlapped prediction depends on it (the reduction hides behind the predicted
              last backward). The error is printed as a fraction of the link time, |predicted -
              measured| / link: an exposed time near zero (the overlapped rows) has no useful
              relative error, and the link time is what the planner has to get right or hide.

--plain-only measures only the cost without emulation (off/on interleaved, no link columns):
with short runs and many repeats (--steps 6 --repeats 8) the medians follow this VM's drift of
tens of percent within minutes better than 2 long runs per variant do.

usage: overlap_bench.py --megac build/bin/megac [--workdir DIR] [--steps 12] [--repeats 2]
                        [--zero N | --zero1 | --pp [--schedule S] [--vpp V]]
                        [--micro-batches M]
                        [--model SPEC] [--rows R] [--link B,L] [--plain-only]
                        [--spec CALIBRATED.json]
Not a test: it never fails on time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

SPEC = "gpt:layers=4,hidden=512,heads=8,seq=64,vocab=1024"
LINK = "2e8,2e-5"
BUCKET = "800000"
MICRO = 2  # rows per rank and micro-batch


PP = False  # --pp: pp 2 instead of dp 2
SCHEDULE = "1f1b"
VPP = 1
DEFAULT_SPEC = SPEC


def layout_args(zero, micro_batches):
    if PP:
        return ["--global-batch", str(MICRO * micro_batches), "--micro-batch", str(MICRO),
                "--precision", "fp32", "--ranks", "2", "--pp", "2", "--dp", "1", "--schedule",
                SCHEDULE, "--vpp", str(VPP)]
    argv = ["--global-batch", str(MICRO * 2 * micro_batches), "--micro-batch", str(MICRO),
            "--precision", "fp32", "--ranks", "2", "--dp", "2", "--bucket-size", BUCKET]
    if zero:
        argv += ["--zero", str(zero)]
    return argv


def run(megac, data, workdir, name, steps, overlap, emulate, zero, micro_batches):
    log = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    argv = [megac, "train", "--model", SPEC, "--data", data, "--steps", str(steps),
            "--lr", "1e-4", *layout_args(zero, micro_batches), "--threads", "1",
            "--overlap", overlap, "--log-json", log, "--oversubscribe"]
    if emulate:
        argv += ["--emulate-link", LINK]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"megac failed ({result.returncode}): {' '.join(argv)}\n"
                 f"{(result.stdout + result.stderr)[-2000:]}")
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["step_time_s"] for r in records[2:]]


def plan(megac, zero, micro_batches, overlap):
    argv = [megac, "plan", "--model", SPEC, *layout_args(zero, micro_batches), "--overlap",
            overlap, "--json"]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"megac plan failed: {' '.join(argv)}\n{result.stderr[-2000:]}")
    return json.loads(result.stdout)["roles"][0]


def calibrated_spec(megac, workdir, given):
    """A calibrated CPU spec for 2 ranks x 1 thread: the given file, or `megac calibrate`."""
    if given:
        return given
    path = os.path.join(workdir, "cpu-calibrated.json")
    argv = [megac, "calibrate", "--backend", "cpu", "--ranks", "2", "--threads", "1",
            "--oversubscribe", "-o", path]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"megac calibrate failed: {' '.join(argv)}\n{result.stderr[-2000:]}")
    return path


def predicted_exposed(megac, spec, workdir, zero, micro_batches, overlap):
    """The planner's exposed communication: its step on the emulated link minus its step on a
    link of 1e15 B/s without latency, both from the calibrated spec without its measured
    collectives (the emulation replaces the link; the planner then times each collective at the
    spec's alpha-beta cost, as the emulation does)."""
    with open(spec) as f:
        base = json.load(f)
    base.get("calibration", {}).pop("comm", None)
    bandwidth, latency = (float(x) for x in LINK.split(","))
    steps = {}
    for name, bw, lat in (("emul", bandwidth, latency), ("plain", 1e15, 0.0)):
        d = dict(base, intraNodeBandwidth=bw, interNodeBandwidth=bw, intraNodeLatency=lat,
                 interNodeLatency=lat, linkEfficiency=1.0, devicesPerNode=2)
        path = os.path.join(workdir, f"spec-{name}.json")
        with open(path, "w") as f:
            json.dump(d, f)
        if PP:
            argv = ["--global-batch", str(MICRO * micro_batches), "--pp", "2", "--dp", "1",
                    "--schedule", "interleaved" if VPP > 1 and SCHEDULE == "1f1b" else SCHEDULE,
                    "--vpp", str(VPP)]
        else:
            argv = ["--global-batch", str(MICRO * 2 * micro_batches), "--pp", "1", "--dp", "2",
                    "--zero", str(zero), "--bucket-size", BUCKET]
        argv = [megac, "plan", "--cluster", path + ":2", "--model", SPEC, "--micro-batch",
                str(MICRO), "--precision", "fp32", "--tp", "1", *argv, "--stack", "megac",
                "--threads", "1", "--overlap", overlap, "--top", "1", "--no-compile", "--json"]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"megac plan failed: {' '.join(argv)}\n{result.stderr[-2000:]}")
        steps[name] = json.loads(result.stdout)["layouts"][0]["step_time_s"]
    return steps["emul"] - steps["plain"]


def spec_value(key):
    return int(dict(kv.split("=") for kv in SPEC.split(":", 1)[1].split(","))[key])


def pipeline_link_seconds(micro_batches):
    """pp 2: the link time of one step's activation and activation-gradient messages, one each
    way per micro-batch and cut between chunks (pp x vpp - 1 cuts, each between the two stages;
    micro-batch rows x seq x hidden fp32 values each, the one tensor a GPT's cut carries), each
    latency + bytes / bandwidth (LinkEmulation::transferSeconds), each counted once (as each
    collective is)."""
    bandwidth, latency = (float(x) for x in LINK.split(","))
    message = MICRO * spec_value("seq") * spec_value("hidden") * 4
    return 2 * micro_batches * (2 * VPP - 1) * (latency + message / bandwidth)


def link_seconds(role, micro_batches, group=2):
    """One step's emulated link time: forward_backward's collectives per micro-batch and
    apply_gradients' once, as the emulation times them (runtime/comm LinkEmulation). The plan
    lists an all-reduce's and a reduce-scatter's input bytes and an all-gather's input (the
    rank's block), and point-to-point messages (pp: the tied embedding's gradient exchange of
    apply_gradients, one message each way, each counted once)."""
    bandwidth, latency = (float(x) for x in LINK.split(","))
    g = float(group)
    total = pipeline_link_seconds(micro_batches) if PP else 0.0
    for c in role["communication"]:
        calls = {"forward_backward": micro_batches, "apply_gradients": 1}.get(c["function"], 0)
        op = c["op"].removesuffix("Start")
        if op == "AllReduce":
            t = 2 * (g - 1) * latency + 2 * (g - 1) / g * c["bytes"] / bandwidth
        elif op == "ReduceScatter":
            t = (g - 1) * latency + (g - 1) * (c["bytes"] / g) / bandwidth
        elif op == "AllGather":
            t = (g - 1) * latency + (g - 1) * c["bytes"] / bandwidth
        elif op in ("Send", "Recv"):
            t = latency + c["bytes"] / bandwidth
        else:
            continue
        total += calls * c["count"] * t
    return total


def main():
    global SPEC, MICRO, PP, LINK, SCHEDULE, VPP
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3),
                        help="dp 2 with this ZeRO stage (2, 3: the per-micro-batch gradient "
                             "reduce-scatters in forward_backward)")
    parser.add_argument("--zero1", action="store_true", help="the same as --zero 1")
    parser.add_argument("--pp", action="store_true",
                        help="pp 2 instead of dp 2 (--model default: untied head); use "
                             "--micro-batches >= 4")
    parser.add_argument("--schedule", default="1f1b", help="pp: the pipeline schedule")
    parser.add_argument("--vpp", type=int, default=1, help="pp: virtual stages (interleaved)")
    parser.add_argument("--link", default=LINK, help="--emulate-link BYTES_PER_S,LATENCY_S")
    parser.add_argument("--micro-batches", type=int, default=1)
    parser.add_argument("--model", default=SPEC, help="a zoo gpt:... spec with vocab=1024")
    parser.add_argument("--rows", type=int, default=MICRO, help="rows per rank and micro-batch")
    parser.add_argument("--plain-only", action="store_true",
                        help="only the no-emulation cost: --overlap off/on without --emulate-link")
    parser.add_argument("--spec", default=None,
                        help="a calibrated CPU spec (megac calibrate --backend cpu --ranks 2 "
                             "--threads 1) for the predicted column; default: calibrate first")
    args = parser.parse_args()
    SPEC, MICRO, PP, LINK, SCHEDULE, VPP = (args.model, args.rows, args.pp, args.link,
                                            args.schedule, args.vpp)
    zero = 1 if args.zero1 else args.zero
    if PP and SPEC == DEFAULT_SPEC:
        # Untied: a tied head adds a blocking exchange of the embedding's gradient between the
        # first and last stage in apply_gradients, which no schedule overlaps.
        SPEC += ",tied=0"
    workdir = args.workdir or tempfile.mkdtemp(prefix="overlap-bench-")
    os.makedirs(workdir, exist_ok=True)
    data = os.path.join(workdir, "tokens.npy")
    rng = np.random.default_rng(0)
    seq = int(dict(kv.split("=") for kv in SPEC.split(":", 1)[1].split(","))["seq"])
    np.save(data, rng.integers(0, spec_value("vocab"),
                               size=(64 * args.micro_batches * MICRO, seq + 1),
                               dtype=np.int32))
    roles = {o: plan(args.megac, zero, args.micro_batches, o) for o in ("off", "on")}
    link = link_seconds(roles["off"], args.micro_batches)
    predicted = {}
    if not args.plain_only:
        spec = calibrated_spec(args.megac, workdir, args.spec)
        predicted = {o: predicted_exposed(args.megac, spec, workdir, zero,
                                          args.micro_batches, o) for o in ("off", "on")}
    times = {}
    for rep in range(args.repeats):
        for emulate in (False,) if args.plain_only else (False, True):
            for overlap in ("off", "on"):
                key = (overlap, emulate)
                name = f"{overlap}-{'emul' if emulate else 'plain'}-{rep}"
                times.setdefault(key, []).extend(
                    run(args.megac, data, workdir, name, args.steps, overlap, emulate,
                        zero, args.micro_batches))
    med = {k: statistics.median(v) for k, v in times.items()}
    virtual = f", vpp {VPP}" if VPP > 1 else ""
    layout = (f"pp 2 ({SCHEDULE}{virtual})" if PP else
              f"dp 2 + ZeRO-{zero}" if zero else "dp 2")
    if args.plain_only:
        sizes = "" if PP else f"--bucket-size {BUCKET}, "
        print(f"{layout}, {SPEC}, {args.micro_batches} micro-batch(es) of {MICRO} rows per rank, "
              f"{sizes}no emulation, 2 ranks x 1 thread; {args.repeats} runs "
              f"per variant interleaved, medians of {len(times[('off', False)])} steps")
        for overlap in ("off", "on"):
            print(f"{overlap:<8} {med[(overlap, False)]:>9.4f} s")
        print(f"no-emulation cost of the schedule (on / off - 1): "
              f"{med[('on', False)] / med[('off', False)] - 1:+.1%}")
        return
    buckets = sum(c["count"] for c in roles["off"]["communication"]
                  if c["function"] == "apply_gradients" and c["op"] in ("AllReduce",
                                                                        "ReduceScatter")
                  and c["bytes"] > 8)
    what = (f"{args.micro_batches} micro-batches of {MICRO} rows" if PP else
            f"{args.micro_batches} micro-batch(es) of {MICRO} rows per rank, --bucket-size "
            f"{BUCKET} ({buckets} dp buckets)")
    print(f"{layout}, {SPEC}, {what}, --emulate-link {LINK}, 2 ranks x 1 thread; medians of "
          f"{len(times[('off', False)])} steps per variant")
    if PP:
        print(f"link time of one step's transfers: {link:.4f} s (pipeline messages "
              f"{pipeline_link_seconds(args.micro_batches):.4f} s, the rest from the plan)")
    else:
        print(f"link time of one step's collectives (from the plan): {link:.4f} s")
    print(f"{'overlap':<8} {'plain s':>9} {'emulated s':>11} {'exposed s':>10} "
          f"{'exposed/link':>13} {'arena MiB':>10} {'predicted s':>12} {'|err|/link':>11}")
    for overlap in ("off", "on"):
        exposed = med[(overlap, True)] - med[(overlap, False)]
        print(f"{overlap:<8} {med[(overlap, False)]:>9.4f} {med[(overlap, True)]:>11.4f} "
              f"{exposed:>10.4f} {exposed / link:>13.1%} "
              f"{roles[overlap]['arena_bytes'] / 2**20:>10.2f} {predicted[overlap]:>12.4f} "
              f"{abs(predicted[overlap] - exposed) / link:>11.1%}")
    on = med[("on", True)] - med[("on", False)]
    print(f"hidden with --overlap on (1 - exposed(on) / link): {1 - on / link:.1%}")
    print(f"no-emulation cost of the schedule (on / off - 1): "
          f"{med[('on', False)] / med[('off', False)] - 1:+.1%}")


if __name__ == "__main__":
    main()
