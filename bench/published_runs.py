#!/usr/bin/env python3
"""Predicted vs measured step time for published large-model training runs.

Each run in bench/published_runs.json pins the whole layout a paper (or its authors' scripts) used
(GPTs, and "arch": "mixtral" runs with experts, topk, kv_heads and ep);
this calls `megac plan` with every choice pinned and compares layouts[0].step_time_s with the
run's measured_step_seconds (the paper's figure converted with that paper's own FLOP formula), and
prints the predicted memory per GPU (every run ran, so each must fit:
tests/e2e/published_runs_memory_test.py asserts it).

  /usr/bin/python3 bench/published_runs.py --megac build/bin/megac [--json bench/published_runs.json]
                                           [--stack-override S] [--sorted]

Each run belongs to a set (the stack family that ran it: megatron-2021, megatron-deepspeed,
megatron-core) and is a fit run or held out (docs/planner.md, "Blind protocol"); every set's
held-out runs and fit runs are summarised separately: mean |error|, max |error|, signed mean.
Exits non-zero only when a run fails to plan, never because of the size of an error.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BREAKDOWN = {"compute_s": "compute", "tp_comm_s": "tp-comm", "pp_comm_s": "pp-comm",
             "dp_comm_s": "dp-comm", "bubble_s": "bubble", "optimizer_s": "optimizer",
             "ep_comm_s": "ep-comm", "cp_comm_s": "cp-comm", "zero_gather_s": "zero-gather",
             "zero_reduce_scatter_s": "zero-reduce-scatter"}
# Options `megac plan` may not know yet; dropped (with one warning each) when it says so.
OPTIONAL = ("--stack", "--dropout")
missing = set()


def plan_command(megac, run, stack):
    if run.get("arch") == "mixtral":  # a mixture of experts (docs/moe.md): experts, topk, ep
        model = ("mixtral:layers={layers},hidden={hidden},heads={heads},kv_heads={kv_heads},"
                 "experts={experts},topk={topk},ffn={ffn},seq={seq},vocab={vocab}".format(**run))
    elif run.get("arch") == "nemotron":  # GQA, squared-ReLU MLP, rope, untied (docs/huggingface.md)
        model = ("nemotron:layers={layers},hidden={hidden},heads={heads},kv_heads={kv_heads},"
                 "ffn={ffn},seq={seq},vocab={vocab}".format(**run))
    else:
        model = ("gpt:layers={layers},hidden={hidden},heads={heads},seq={seq},vocab={vocab},"
                 "ffn={ffn}".format(**run))
    # Every spec states its embeddings (gpt: tied by default; mixtral, nemotron: untied); a run
    # that records them says which (the Megatron-LM README's GPTs: untied, from their sizes).
    if "tied_embeddings" in run:
        model += ",tied={}".format(int(run["tied_embeddings"]))
    # A run on a network other than its device preset's names a spec file next to this script
    # (bench/clusters/, e.g. BLOOM's Jean Zay: 6.25 GB/s per GPU between nodes).
    device = os.path.join(HERE, run["cluster_spec"]) if "cluster_spec" in run else run["device"]
    cmd = [megac, "plan", "--model", model,
           "--cluster", "{}:{}x{}".format(device, run["nodes"], run["gpus_per_node"]),
           "--global-batch", str(run["global_batch"])]
    for key in ("tp", "pp", "dp", "cp", "ep", "vpp"):
        if key in run:
            cmd += ["--" + key, str(run[key])]
    cmd += ["--micro-batch", str(run["micro_batch"]), "--recompute", run["recompute"],
            "--sequence-parallel" if run["sequence_parallel"] else "--no-sequence-parallel",
            "--zero", str(run["zero"]), "--precision", run["precision"],
            "--stack", stack, "--dropout", str(run["dropout"]),
            "--json", "--no-compile", "--top", "1"]
    return cmd


def without(cmd, option):
    i = cmd.index(option)
    return cmd[:i] + cmd[i + 2:]


def plan(megac, run, stack):
    """The first layout of `megac plan --json` (or the pinned layout that does not fit), or an error."""
    cmd = plan_command(megac, run, stack)
    for option in missing:
        cmd = without(cmd, option)
    while True:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        unknown = [o for o in OPTIONAL if o in cmd and "unknown option " + o in proc.stderr]
        if proc.returncode == 0 or not unknown:
            break
        for option in unknown:
            print(f"warning: {megac} has no {option} yet; planning without it", file=sys.stderr)
            missing.add(option)
            cmd = without(cmd, option)
    try:  # `megac plan` exits 1 when nothing fits, with the smallest layout in its JSON
        result = json.loads(proc.stdout)
    except ValueError:
        if proc.returncode != 0:
            return None, (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:]
        return None, ["unreadable JSON from megac plan"]
    if result.get("layouts"):
        return result["layouts"][0], None
    if result.get("smallest_memory"):  # every choice is pinned: this is that layout, over memory
        return result["smallest_memory"], None
    return None, ["no layout in megac plan's answer"]


SETS = ("megatron-2021", "megatron-deepspeed", "megatron-core")


def sets_of(runs):
    """The sets of `runs` in the order above, then any other in the order they appear
    (bench/device_runs.json: this project's own GPU measurements)."""
    seen = list(dict.fromkeys(run["set"] for run in runs))
    return [s for s in SETS if s in seen] + [s for s in seen if s not in SETS]


def statistics(errors):
    """(mean |error|, max |error|, signed mean) in percent, or None without runs."""
    if not errors:
        return None
    return (sum(abs(e) for e in errors) / len(errors), max(abs(e) for e in errors),
            sum(errors) / len(errors))


def summary(label, errors):
    stats = statistics(errors)
    if stats is None:
        return f"{label}: no runs"
    worst = max(errors, key=abs)
    return (f"{label}: {len(errors)} runs, mean |error| {stats[0]:.1f}%, max |error| {stats[1]:.1f}% "
            f"({worst:+.1f}%), signed mean {stats[2]:+.1f}%")


def predict_all(megac, runs, stack_override=None):
    """[(run, layout or None, error text or None, error % or None)] for every run."""
    results = []
    for run in runs:
        layout, error = plan(megac, run, stack_override or run["stack"])
        err = None
        if layout is not None:
            err = 100.0 * (layout["step_time_s"] - run["measured_step_seconds"]) / run["measured_step_seconds"]
        results.append((run, layout, error, err))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True, help="path to the megac binary")
    parser.add_argument("--json", default=os.path.join(HERE, "published_runs.json"))
    parser.add_argument("--stack-override", help="plan every run with this --stack instead of its own")
    parser.add_argument("--sorted", action="store_true",
                        help="also list each set's runs sorted by error, with hidden, tp, pp, "
                             "micro-batch, the compute alone against the measured step and the "
                             "step's split")
    args = parser.parse_args()
    if not os.access(args.megac, os.X_OK):
        print(f"error: {args.megac} is not an executable (build megac first)", file=sys.stderr)
        return 2
    with open(args.json) as f:
        runs = json.load(f)

    print(f"{'id':34} {'set':18} {'fit':8} {'stack':13} {'measured s':>10} {'predicted s':>11} "
          f"{'error':>7} {'GiB/GPU':>7}  dominant")
    errors = {}  # (set, fit) -> [error %]
    ranked = {}  # set -> [(error %, run, layout)]
    failed = []
    for run, layout, error, err in predict_all(args.megac, runs, args.stack_override):
        stack = args.stack_override or run["stack"]
        group = "fit" if run["fit"] else "held-out"
        measured = run["measured_step_seconds"]
        if layout is None:
            failed.append(run["id"])
            print(f"{run['id']:34} {run['set']:18} {group:8} {stack:13} {measured:10.3f} {'FAILED':>11}  "
                  f"{' '.join(error)}")
            continue
        predicted = layout["step_time_s"]
        errors.setdefault((run["set"], run["fit"]), []).append(err)
        ranked.setdefault(run["set"], []).append((err, run, layout))
        parts = {k: v for k, v in layout.get("breakdown", {}).items() if k in BREAKDOWN}
        key = max(parts, key=parts.get) if parts else None
        dominant = (f"{BREAKDOWN.get(key, key)} {100.0 * parts[key] / predicted:.0f}%"
                    if key and predicted > 0 else "-")
        if not layout.get("fits", True):
            dominant += " (planner: does not fit in memory)"
        gib = layout.get("memory_per_gpu_bytes", 0) / 2.0 ** 30
        print(f"{run['id']:34} {run['set']:18} {group:8} {stack:13} {measured:10.3f} {predicted:11.3f} "
              f"{err:+6.1f}% {gib:7.1f}  {dominant}")

    if args.sorted:
        # What the errors point at: each set's runs from the most optimistic to the most
        # pessimistic, with the geometry a mechanism would depend on.
        for name in sets_of(runs):
            print(f"\n{name}, sorted by error: {'id':32} {'fit':8} {'hidden':>6} {'tp':>3} {'pp':>3} "
                  f"{'mb':>3} {'error':>7} {'compute':>8}  compute / tp-comm / dp-comm / bubble / "
                  f"overhead share")
            for err, run, layout in sorted(ranked.get(name, []), key=lambda r: r[0]):
                b, t = layout.get("breakdown", {}), layout["step_time_s"]
                # The compute alone against the measured step: what the error would be if every
                # collective, bubble and optimizer step were hidden.
                compute = 100.0 * (b.get("compute_s", 0.0) / run["measured_step_seconds"] - 1)
                share = " / ".join(f"{100.0 * b.get(k, 0.0) / t:4.1f}%" for k in
                                   ("compute_s", "tp_comm_s", "dp_comm_s", "bubble_s",
                                    "overhead_s"))
                print(f"{'':{len(name) + 19}}{run['id']:32} {'fit' if run['fit'] else 'held-out':8} "
                      f"{run['hidden']:6} {run.get('tp', 1):3} {run.get('pp', 1):3} "
                      f"{run['micro_batch']:3} {err:+6.1f}% {compute:+7.1f}%  {share}")
    print()
    for name in sets_of(runs):
        print(summary(f"{name}, held out", errors.get((name, False), [])))
        print(summary(f"{name}, fit set", errors.get((name, True), [])))
    if missing:
        print("note: planned without " + ", ".join(sorted(missing)) + " (not supported by this megac)")
    if failed:
        print(f"{len(failed)} run(s) failed to plan: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
