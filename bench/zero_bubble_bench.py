"""The pipeline bubble of 1f1b and the zero-bubble schedules, measured from `megac train --trace`
against the one schedule simulator at the measured per-chunk costs (issue 35; docs/pipeline.md
"Zero-bubble schedules"). For each schedule, `megac train` runs a GPT on 2 ranks x 1 kernel
thread, pp 2, m micro-batches (default 4), and traces steps 2..steps; --rounds runs every
schedule that many times, interleaved, so the VM's drift shows as spread rather than as a
difference between schedules.

Per traced step, from the trace's pipeline lane (one span per schedule step: the chunk function,
the runner's set-up of its inputs and stash, its sends, and the receive it waits in):
- cost of a step = its span minus the waiting inside its receives: the part of a receive before
  its matched send (peer, tag) started. The rest of the receive, the copy, is work the receiving
  core does whether or not it waited, so it is part of the cost (counting it as idle made every
  receive look like bubble: ~0.15 ms each, 8 a step per zbv rank). Per global chunk and kind (F,
  B, W; 1f1b's whole backward is its B), the mean over steps and micro-batches.
- T (printed) = the median, over matched send/receive pairs, of the receive's end minus the
  later of the send's start and the receive's start: that copy. Being in the receiver's step
  cost, it is not also charged as the simulator's edge latency (transfer 0 below).
- measured bubble = mean over ranks of (pipeline makespan - the rank's summed step costs), the
  makespan from the first pipeline step's start to the last one's end on either rank (one clock
  for all ranks in the trace): the simulator's `bubble` (every stage starts the step together;
  the optimizer step waits for all).
- sim = `bench-pipeline-schedule --simulate SCHEDULE m 0 F,B,W ...` at the step's own per-chunk
  costs; ratio = measured / simulated per step (medians printed). pooled:
  the simulator at the per-chunk means over all steps and rounds. replay: the same simulator at
  every step's own measured time (`--simulate-steps`, PipelineCosts::steps), and its ratio: steps
  of one chunk and kind differ (a step runs slower while the other rank computes on the shared
  cores), which a per-chunk mean spreads evenly.
Peak activation bytes per rank (issue 35): `peak` is the most bytes the pipeline runner held
stashed and kept for later steps (the forward stashes, what each W reads), the trace's
`stash_bytes` after every step, largest over ranks and steps; `planned` the planner's activation
bytes for the same layout (`megac plan --cluster cpu:1x2 ... --schedule S --json`, every choice
pinned: the busiest stage's in-flight micro-batches times the stash, plus the one copied into
the arena); `plan stash` the compiled plan's own stash peak (`megac plan --ranks 2 --json`'s
stash_peak_bytes, largest role). The check: peak <= planned.
Also printed: `compute`, the chunk functions' own time, and `overhead`, the runner's time inside
steps outside the chunk functions and receives (per step, both ranks' mean), which the earlier
version of this bench counted as idle. `step` is the whole optimizer step (pipeline, gradient
reduction, optimizer); `opt` the time after the pipeline part. Medians over the traced steps and
the rounds. Timing: run it alone, under the CPU lock (flock /tmp/megac-cpu.lock).

usage: zero_bubble_bench.py --megac build/bin/megac
           --schedule-bench build/bin/bench-pipeline-schedule [--model SPEC]
           [--micro-batches M] [--steps N] [--rounds R] [--workdir DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SCHEDULES = ("1f1b", "zb-h1", "zb-h2", "zbv")
KINDS = ("forward", "backward", "backward_input", "backward_weight")
# The simulator's cost slot of each kind: 1f1b's whole backward is B + W with W = 0.
SLOT = {"forward": 0, "backward": 1, "backward_input": 1, "backward_weight": 2}


def load(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def measure(events, chunks):
    """Per traced step (bubble, step, opt, overhead, compute), per-chunk cost samples of all
    steps, and per step its own per-chunk mean costs."""
    steps = {}
    for e in events:
        if e.get("cat") == "step":
            steps.setdefault(e["args"]["step"], {})[e["pid"]] = (e["ts"], e["ts"] + e["dur"])
    costs = [[[] for _ in range(3)] for _ in range(chunks)]
    recvs = [e for e in events if e.get("cat") == "comm" and e["name"] == "Recv"]
    waits = receive_waits(events)
    funcs = [e for e in events if e.get("cat") == "function"
             and e["name"].split(".c")[0] in KINDS]
    pipe = [e for e in events if e.get("cat") in KINDS and e.get("tid") == 2]
    rows, step_costs, step_lists = [], [], []
    for _, ranks in sorted(steps.items()):
        own = [[[] for _ in range(3)] for _ in range(chunks)]
        each = []  # (F|B|W, chunk, micro-batch, cost) of every step: the replay's input
        first, last, busy, over, comp, ends = None, None, {}, [], [], {}
        for pid, (start, end) in ranks.items():
            inside = lambda e: e["pid"] == pid and start <= e["ts"] <= end
            spans = [e for e in pipe if inside(e)]
            rs = [e for e in recvs if inside(e)]
            fs = [e for e in funcs if inside(e)]
            busy[pid] = 0.0
            for s in spans:
                s_end = s["ts"] + s["dur"]
                waited = sum(waits[id(r)] for r in rs if s["ts"] <= r["ts"] <= s_end)
                fn = sum(f["dur"] for f in fs if s["ts"] <= f["ts"] <= s_end)
                cost = s["dur"] - waited
                busy[pid] += cost
                over.append(cost - fn)
                comp.append(fn)
                costs[s["args"]["chunk"]][SLOT[s["cat"]]].append(cost)
                own[s["args"]["chunk"]][SLOT[s["cat"]]].append(cost)
                each.append(("FBW"[SLOT[s["cat"]]], s["args"]["chunk"], s["args"]["micro_batch"],
                             cost))
                first = s["ts"] if first is None else min(first, s["ts"])
                last = s_end if last is None else max(last, s_end)
            ends[pid] = end
        makespan = last - first
        bubble = statistics.mean(makespan - b for b in busy.values())
        step = max(end - start for start, end in ranks.values())
        opt = max(ends.values()) - last
        rows.append((bubble, step, opt, sum(over) / len(ranks), sum(comp) / len(ranks)))
        step_costs.append([[statistics.mean(k) if k else 0.0 for k in c] for c in own])
        step_lists.append(each)
    return rows, costs, step_costs, step_lists


def stash_peak(events):
    """The most bytes any rank held stashed after a pipeline step (the runner's stash_bytes)."""
    return max((e["args"].get("stash_bytes", 0) for e in events
                if e.get("cat") in KINDS and e.get("tid") == 2), default=0)


def planned_activations(args, schedule):
    """The planner's activation bytes per rank and the compiled plan's stash peak (largest
    role) for the bench's layout."""
    layout = ["--tp", "1", "--pp", "2", "--dp", "1", "--micro-batch", "1", "--schedule", schedule,
              "--global-batch", str(args.micro_batches)]
    if schedule == "zbv":
        layout += ["--vpp", "2"]
    out = subprocess.run([args.megac, "plan", "--model", args.model, "--cluster", "cpu:1x2",
                          "--no-compile", "--json", "--zero", "0", "--cp", "1", "--recompute",
                          "none", "--precision", "fp32", "--no-sequence-parallel", *layout],
                         capture_output=True, text=True, check=True).stdout
    planned = json.loads(out)["layouts"][0]["memory"]["activations"]
    roles = json.loads(subprocess.run(
        [args.megac, "plan", "--model", args.model, "--ranks", "2", "--json", *layout],
        capture_output=True, text=True, check=True).stdout)
    roles = roles.get("roles", roles) if isinstance(roles, dict) else roles
    stash = max(r.get("stash_peak_bytes", 0) for r in roles) if isinstance(roles, list) else 0
    return planned, stash


def matched_transfers(events):
    """Each receive with the send it completes, matched in order per (sender, receiver, tag)."""
    sends, out = {}, []
    comm = sorted((e for e in events if e.get("cat") == "comm"), key=lambda e: e["ts"])
    for e in comm:
        if e["name"] == "Send":
            sends.setdefault((e["pid"], e["args"]["peer"], e["args"]["tag"]), []).append(e)
    for e in comm:
        if e["name"] == "Recv":
            queue = sends.get((e["args"]["peer"], e["pid"], e["args"]["tag"]))
            if queue:
                out.append((queue.pop(0), e))
    return out


def transfers(events):
    """Per matched send/receive: the receive's end - max(send start, receive start)."""
    return [r["ts"] + r["dur"] - max(s["ts"], r["ts"]) for s, r in matched_transfers(events)]


def receive_waits(events):
    """Per receive (by id), the part of it spent waiting for its send to start; the rest is
    the copy, work the receiving rank does (an unmatched receive: all of it waiting)."""
    waits = {id(r): r["dur"] for r in events if r.get("cat") == "comm" and r["name"] == "Recv"}
    for s, r in matched_transfers(events):
        waits[id(r)] = min(r["dur"], max(0, s["ts"] - r["ts"]))
    return waits


def replay(bench, schedule, m, transfer, chunks, each):
    """The simulator at every step's own measured time (--simulate-steps)."""
    text = "".join("%s %d %d %r\n" % step for step in each)
    out = subprocess.run([bench, "--simulate-steps", schedule, str(m), repr(transfer),
                          str(chunks)], input=text, capture_output=True, text=True,
                         check=True).stdout
    words = out.split()
    return float(words[words.index("bubble") + 1])


def simulate(bench, schedule, m, transfer, chunk_costs):
    triples = [",".join(repr(x) for x in c) for c in chunk_costs]
    out = subprocess.run([bench, "--simulate", schedule, str(m), repr(transfer)] + triples,
                         capture_output=True, text=True, check=True).stdout
    words = out.split()
    return float(words[words.index("bubble") + 1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--schedule-bench", required=True)
    parser.add_argument("--model", default="gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1024")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workdir", default="/tmp/zero_bubble_bench")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    seq = int(args.model.split("seq=")[1].split(",")[0])
    vocab = int(args.model.split("vocab=")[1].split(",")[0])
    # int32 tokens in .npy form without numpy: megac reads the header's dtype and shape.
    data = os.path.join(args.workdir, "tokens.npy")
    rows, state = 256, 12345
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, seq + 1)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    body = bytearray()
    for _ in range(rows * (seq + 1)):
        state = (state * 1103515245 + 12345) % 2**31
        body += (state % vocab).to_bytes(4, "little")
    with open(data, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        f.write(body)
    print(f"{args.model}, 2 ranks x 1 thread, pp 2, m {args.micro_batches}, fp32; times in ms "
          f"(medians of steps 2..{args.steps} over {args.rounds} round(s))")
    results = {s: {"rows": [], "costs": None, "transfers": [], "peak": 0, "rounds": []}
               for s in SCHEDULES}
    for r in range(args.rounds):
        for schedule in SCHEDULES:
            trace = os.path.join(args.workdir, f"{schedule}.{r}.json")
            argv = [args.megac, "train", "--model", args.model, "--data", data,
                    "--steps", str(args.steps), "--global-batch", str(args.micro_batches),
                    "--micro-batch", "1", "--lr", "1e-4", "--ranks", "2", "--pp", "2",
                    "--threads", "1", "--schedule", schedule, "--trace", trace,
                    "--trace-steps", str(args.steps - 1)]
            result = subprocess.run(argv, capture_output=True, text=True)
            if result.returncode != 0:
                print(f"{schedule}: megac train failed:\n{result.stdout}{result.stderr}")
                return 1
            events = load(trace)
            chunks = 4 if schedule == "zbv" else 2
            rows, costs, step_costs, step_lists = measure(events, chunks)
            res = results[schedule]
            ts = transfers(events)
            transfer = statistics.median(ts) if ts else 0.0
            # Each step simulated at its own per-chunk costs: the VM drifts between steps (step
            # times of one schedule spread over +-25%), and the ratio compares like with like.
            for row, own, each in zip(rows, step_costs, step_lists):
                sim = simulate(args.schedule_bench, schedule, args.micro_batches, 0.0, own)
                rep = replay(args.schedule_bench, schedule, args.micro_batches, 0.0, chunks,
                             each)
                res["rows"].append(row + (sim, row[0] / sim if sim else 0.0, rep,
                                          row[0] / rep if rep else 0.0))
            res["rounds"].append((statistics.median(r[1] for r in rows),
                                  statistics.median(r[0] for r in rows)))
            res["transfers"] += ts
            res["peak"] = max(res["peak"], stash_peak(events))
            if res["costs"] is None:
                res["costs"] = costs
            else:
                for c in range(chunks):
                    for k in range(3):
                        res["costs"][c][k] += costs[c][k]
    print(f"{'schedule':<8} {'step':>7} {'opt':>6} {'bubble':>7} {'sim':>7} {'ratio':>6} "
          f"{'pooled':>7} {'replay':>7} {'ratio':>6} "
          f"{'T':>5} {'overhead':>8} {'compute':>8}  per-chunk F/B/W")
    base = None
    for schedule in SCHEDULES:
        res = results[schedule]
        med = [statistics.median(col) for col in zip(*res["rows"])]
        bubble, step, opt, over, comp, sim, ratio, rep, rep_ratio = med
        chunk_costs = [[statistics.mean(k) if k else 0.0 for k in c] for c in res["costs"]]
        transfer = statistics.median(res["transfers"]) if res["transfers"] else 0.0
        pooled = simulate(args.schedule_bench, schedule, args.micro_batches, 0.0, chunk_costs)
        per_chunk = " ".join("/".join(f"{x / 1e3:.1f}" for x in c) for c in chunk_costs)
        print(f"{schedule:<8} {step / 1e3:7.1f} {opt / 1e3:6.1f} {bubble / 1e3:7.1f} "
              f"{sim / 1e3:7.1f} {ratio:6.2f} {pooled / 1e3:7.1f} {rep / 1e3:7.1f} "
              f"{rep_ratio:6.2f} {transfer / 1e3:5.2f} "
              f"{over / 1e3:8.1f} {comp / 1e3:8.1f}  {per_chunk}")
        busy = over + comp
        if base is None:
            base = (step, bubble, busy, opt)
        else:
            drop, saved = base[0] - step, base[1] - bubble
            print(f"{'':<8} step time drop vs 1f1b {drop / 1e3:.1f} ms, bubble saved "
                  f"{saved / 1e3:.1f} ms (drop / saved {drop / saved if saved else 0:.2f}); "
                  f"busy {(busy - base[2]) / 1e3:+.1f} ms, opt {(opt - base[3]) / 1e3:+.1f} ms")
            # Paired by round: each round runs the schedules back to back, so the VM's drift
            # between rounds cancels; the median and range of the rounds' drop / saved.
            paired = [(b[0] - z[0]) / (b[1] - z[1])
                      for b, z in zip(results[SCHEDULES[0]]["rounds"], res["rounds"])
                      if b[1] != z[1]]
            if paired:
                print(f"{'':<8} paired by round: drop / saved median {statistics.median(paired):.2f} "
                      f"(rounds {min(paired):.2f}..{max(paired):.2f})")
        sys.stdout.flush()
    print(f"\npeak activation bytes per rank (MiB): {'schedule':<8} {'peak':>8} {'planned':>8} "
          f"{'plan stash':>10}  peak <= planned")
    for schedule in SCHEDULES:
        planned, stash = planned_activations(args, schedule)
        peak = results[schedule]["peak"]
        mib = 1 << 20
        print(f"{'':<37} {schedule:<8} {peak / mib:8.2f} {planned / mib:8.2f} "
              f"{stash / mib:10.2f}  {'yes' if peak <= planned else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
