#!/usr/bin/env python3
"""`megac train --tensorboard-dir`: the event files read back with TensorBoard's own reader
(tensorboard's EventAccumulator, which checks every record's masked CRC-32C) hold, at every
logged step, exactly the JSON log's scalars as float32 (TensorBoard's simple_value is a float32,
so each JSON number x must equal float32(x) bit for bit; a JSON null is a non-finite event),
and nothing else; the throughput and memory keys (model_tflops_per_rank from `megac describe`'s
training FLOPs per token, mem_plan_bytes, mem_rss_peak_bytes) are logged: a tiny GPT with validation (fp32), fp16 with dynamic loss scaling (skipped
steps, a changing loss scale), a Mixtral MoE (aux loss, drops, per-expert load), an indexed
dataset split into train, validation and test parts (test/loss), and 2 ranks (dp 2: rank 0
alone writes one file). A second run into the same directory adds a file; a directory
that cannot be made fails the run naming it.

usage: tensorboard_test.py --megac build/bin/megac --workdir DIR [--venv .venv]

Needs tensorboard, which scripts/bootstrap.sh installs (pinned) into the test venv .venv: run with
another Python, the script re-executes itself with the venv's; without it, it exits 77 (a ctest
skip) saying how to make it. The 2-rank case needs mpirun (exit 77 after the rest without it).
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
DATA = os.path.join(REPO, "examples", "tiny-corpus.npy")
GPT = "gpt:layers=2,hidden=64,heads=4,seq=64,vocab=256"
MIXTRAL = ("mixtral:layers=2,hidden=32,heads=4,kv_heads=2,experts=4,topk=2,ffn=48,seq=64,"
           "vocab=256")
from e2e_support import SKIP, check, ensure_modules  # noqa: E402


def train(megac, workdir, name, model, *extra, data=DATA):
    log = os.path.join(workdir, name + ".jsonl")
    tb = os.path.join(workdir, name + "-tb")
    cmd = [megac, "train", "--model", model, "--data", data, "--global-batch", "8",
           "--micro-batch", "4", "--log-json", log, "--tensorboard-dir", tb, *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(" ".join(cmd), "\n", run.stdout, run.stderr)
        check(False, f"{name}: megac train succeeds")
    return [json.loads(line) for line in open(log)], tb


def expected_scalars(records):
    """{(tag, step): JSON value} for every scalar of the JSON log, tagged as --tensorboard-dir
    documents: train/<key>, train/moe_load/layer<L>/expert<E>, <part>/loss, <part>/perplexity."""
    want = {}
    for r in records:
        step = r["step"]
        for key, value in r.items():
            if key == "step":
                continue
            part = key.split("_")[0]
            if part in ("val", "test"):
                tag = part + ("/loss" if key.endswith("_loss") else "/perplexity")
                want[(tag, step)] = value
            elif key == "moe_load":
                for layer, loads in enumerate(value):
                    for expert, load in enumerate(loads):
                        want[(f"train/moe_load/layer{layer}/expert{expert}", step)] = load
            else:
                want[("train/" + key, step)] = float(value) if isinstance(value, bool) else value
    return want


def read_events(tbdir):
    """{(tag, step): float32 value} through tensorboard's EventAccumulator (every event kept),
    and the event files."""
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader
    files = sorted(glob.glob(os.path.join(tbdir, "events.out.tfevents.*")))
    got, repeated = {}, []
    for path in files:
        first = next(iter(event_file_loader.LegacyEventFileLoader(path).Load()))
        check(first.file_version == "brain.Event:2" and first.wall_time > 0,
              f"{os.path.basename(path)} starts with the file_version event")
        acc = event_accumulator.EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                if (tag, event.step) in got:
                    repeated.append((tag, event.step))
                got[(tag, event.step)] = event.value
    check(not repeated, f"one event per tag and step in {tbdir} {repeated[:3]}")
    return got, files


def same(json_value, event_value):
    """The event's float32 equals float32(JSON value) exactly (null: non-finite)."""
    import numpy as np
    if json_value is None:
        return not math.isfinite(event_value)
    want = np.float32(json_value)
    got = np.float32(event_value)  # the reader's Python float holds the float32 exactly
    return bool(want == got) or (math.isnan(want) and math.isnan(got))


def compare(name, records, tbdir, files=1):
    want = expected_scalars(records)
    got, paths = read_events(tbdir)
    check(len(paths) == files, f"{name}: {files} event file(s) in {tbdir}")
    check(set(got) == set(want), f"{name}: the events are the JSON log's {len(want)} "
          f"(tag, step) scalars, no more, no fewer"
          + ("" if set(got) == set(want) else f" (only in events: "
             f"{sorted(set(got) - set(want))[:5]}, only in JSON: "
             f"{sorted(set(want) - set(got))[:5]})"))
    bad = [(k, want[k], got[k]) for k in sorted(want) if not same(want[k], got[k])]
    check(not bad, f"{name}: every scalar equals the JSON log's as float32" +
          (f" (first differences: {bad[:3]})" if bad else ""))
    return got


def implied_flops_per_token(record, ranks):
    """The model FLOPs per token a record's model_tflops_per_rank says (it is that times the
    tokens over the step time and the ranks, divided by 1e12)."""
    return (record["model_tflops_per_rank"] * 1e12 * ranks * record["step_time_s"]
            / record["tokens"])


def describe_training_flops(megac, model):
    """`megac describe`'s "training X FLOP per token" as (value, half its last digit): the
    number is printed with one decimal after an SI prefix (humanCount), so the exact count lies
    within 0.05 of a prefix unit of it."""
    out = subprocess.run([megac, "describe", "--model", model], check=True, capture_output=True,
                         text=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("training"))
    text = line.split()[1]
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(text[-1], 1)
    number = float(text[:-1]) if scale != 1 else float(text)
    return number * scale, (0.05 if scale != 1 else 0.5) * scale


def check_throughput_and_memory(megac, name, records, model, ranks):
    """Every step logs model_tflops_per_rank, mem_plan_bytes and mem_rss_peak_bytes, and no mfu
    (CPU ranks: no peak is known); the FLOPs per token they imply are the same at every step
    (to float64 rounding of the product and quotient, 1e-12 relative) and are what `megac
    describe` prints for the model."""
    records = [r for r in records if "tokens" in r]  # the step lines, not evaluations
    for key in ("model_tflops_per_rank", "mem_plan_bytes", "mem_rss_peak_bytes"):
        check(all(isinstance(r.get(key), (int, float)) and r[key] > 0 for r in records),
              f"{name}: every step logs a positive {key}")
    check(all("mfu" not in r for r in records), f"{name}: no mfu on CPU ranks (no known peak)")
    check(all(r["mem_rss_peak_bytes"] >= r["mem_plan_bytes"] for r in records),
          f"{name}: the process's peak RSS holds at least the CPU arena")
    flops = [implied_flops_per_token(r, ranks) for r in records]
    check(max(flops) - min(flops) <= 1e-12 * max(flops),
          f"{name}: the same model FLOPs per token at every step ({flops[0]:.6g})")
    want, half_digit = describe_training_flops(megac, model)
    check(abs(flops[0] - want) <= half_digit,
          f"{name}: {flops[0]:.6g} FLOP per token = megac describe's {want:.6g} (+-{half_digit:g})")
    return flops[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--venv", default=os.path.join(HERE, "..", "..", ".venv"))
    args = parser.parse_args()
    args.megac = os.path.abspath(args.megac)
    ensure_modules(args.venv, ["tensorboard"])
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    w = args.workdir

    records, tb = train(args.megac, w, "gpt", GPT, "--steps", "4", "--lr", "3e-3",
                        "--eval-data", DATA, "--eval-interval", "2", "--eval-iters", "1")
    got = compare("gpt fp32 with validation", records, tb)
    gpt_flops = check_throughput_and_memory(args.megac, "gpt", records, GPT, 1)
    check(sorted(s for t, s in got if t == "val/loss") == [2, 4], "val/loss at steps 2 and 4")
    check(sorted(s for t, s in got if t == "train/loss") == [1, 2, 3, 4],
          "train/loss at steps 1..4")

    # A second run into the same directory: a new file beside the first, which stays whole.
    before = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
    first_size = os.path.getsize(before[0])
    again = os.path.join(w, "again.jsonl")
    subprocess.run([args.megac, "train", "--model", GPT, "--data", DATA, "--global-batch", "8",
                    "--micro-batch", "4", "--steps", "1", "--lr", "3e-3", "--log-json", again,
                    "--tensorboard-dir", tb], check=True, capture_output=True)
    after = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
    check(len(after) == 2 and os.path.getsize(before[0]) == first_size,
          "a second run adds an event file and leaves the first one as it was")

    # fp16: an initial scale that overflows, so steps are skipped and the scale halves.
    records, tb = train(args.megac, w, "fp16", GPT, "--steps", "4", "--lr", "3e-3",
                        "--precision", "fp16", "--initial-loss-scale", "1e30",
                        "--hysteresis", "1")
    compare("gpt fp16 with loss scaling", records, tb)
    check(any(r.get("skipped") for r in records) and
          len({r["loss_scale"] for r in records}) > 1,
          "fp16: skipped steps and a changing loss scale were logged")

    # Mixture of experts: aux loss, dropped assignments, per-layer per-expert load.
    records, tb = train(args.megac, w, "moe", MIXTRAL, "--steps", "2", "--lr", "1e-3")
    got = compare("mixtral moe", records, tb)
    check(sum(1 for t, s in got if t.startswith("train/moe_load/") and s == 1) == 8,
          "moe: 2 layers x 4 experts of load at step 1")

    # An indexed dataset (this repository's docs, byte tokens) split 8,1,1: validation every 2
    # steps and the test part after the last (test/loss, test/perplexity).
    corpus, prefix = os.path.join(w, "corpus.txt"), os.path.join(w, "corpus")
    with open(corpus, "wb") as f:
        for name in ["README.md"] + sorted(n for n in os.listdir(os.path.join(REPO, "docs"))
                                           if n.endswith(".md")):
            f.write(open(os.path.join(REPO, name if name == "README.md" else "docs/" + name),
                         "rb").read() + b"\n\n")
    subprocess.run([args.megac, "data", "prep", corpus, "--tokenizer", "byte", "-o", prefix],
                   check=True, capture_output=True)
    records, tb = train(args.megac, w, "split", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257",
                        "--steps", "4", "--lr", "1e-3", "--split", "8,1,1", "--eval-interval",
                        "2", "--eval-iters", "1", data=prefix)
    got = compare("indexed data split 8,1,1", records, tb)
    check(sorted(s for t, s in got if t.startswith("test/")) == [4, 4] and
          sorted(s for t, s in got if t == "val/perplexity") == [2, 4],
          "split: val/* at steps 2 and 4, test/loss and test/perplexity at step 4")

    bad = subprocess.run([args.megac, "train", "--model", GPT, "--data", DATA, "--steps", "1",
                          "--global-batch", "8", "--micro-batch", "4", "--lr", "1e-3",
                          "--tensorboard-dir", os.path.join(DATA, "tb")],
                         capture_output=True, text=True)
    check(bad.returncode == 1 and "cannot create the TensorBoard directory" in bad.stderr and
          os.path.join(DATA, "tb") in bad.stderr,
          "a --tensorboard-dir under a file fails the run, naming it: " + bad.stderr.strip())

    if not shutil.which("mpirun"):
        print("SKIP: the 2-rank case needs mpirun, which is not on PATH (install openmpi-bin)")
        return SKIP
    records, tb = train(args.megac, w, "dp2", GPT, "--steps", "2", "--lr", "3e-3", "--ranks",
                        "2", "--dp", "2", "--threads", "1")
    compare("dp 2 (rank 0 writes)", records, tb, files=1)
    dp2_flops = check_throughput_and_memory(args.megac, "dp 2", records, GPT, 2)
    check(abs(dp2_flops - gpt_flops) <= 1e-12 * gpt_flops,
          "dp 2: per rank, half the job's model FLOP/s (the same FLOPs per token as one rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
