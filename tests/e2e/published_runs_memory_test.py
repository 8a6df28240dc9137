#!/usr/bin/env python3
"""Every published run in bench/published_runs.json ran, so it fit in its GPUs' memory: the
planner must predict that it fits (`megac plan`, every choice pinned, the run's own stack) --
issue 34, "memory per stack".

Also the Megatron-Core GPT-3 175B layout of NeMo's performance summary (128 H100, tp 4, pp 8,
vpp 6, micro-batch 1, global batch 256, sequence 2048, no recompute; BF16 here): it fits on the
flash-attention stack, and the same layout with Megatron 2021's materialised s x s scores does
not (that stack keeps 5·a·s/h = 80 s·b·h of scores per block, /tp), so the check is not passed by
a memory model that fits everything.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import published_runs  # noqa: E402  (plan_command and plan: the bench's exact invocation)

GIB = 2.0 ** 30

# NeMo Framework 24.12 performance summary, pre-training table: GPT3-175B, 128 GPUs, GBS 256,
# MBS 1, sequence 2048, TP 4, PP 8, CP 1, VP 6 (docs.nvidia.com/nemo-framework/user-guide/24.12/
# nemotoolkit/performance/performance_summary.html). NeMo's GPT-3 recipe: sequence parallel,
# distributed optimizer, no activation recompute. Only the layout is used (no time).
GPT3_H100 = {
    "id": "nemo-24.12-gpt3-175b-128xh100-layout", "layers": 96, "hidden": 12288, "heads": 96,
    "seq": 2048, "vocab": 50257, "ffn": 49152, "device": "h100-sxm", "nodes": 16,
    "gpus_per_node": 8, "tp": 4, "pp": 8, "dp": 4, "vpp": 6, "micro_batch": 1,
    "global_batch": 256, "recompute": "none", "sequence_parallel": True, "zero": 1,
    "precision": "bf16", "dropout": 0.0, "stack": "megatron-core",
}


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def memory(megac, run, stack):
    layout, error = published_runs.plan(megac, run, stack)
    check(layout is not None, "%s (%s): megac plan answers (%s)" % (run["id"], stack, error))
    return layout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--json", default=os.path.join(ROOT, "bench", "published_runs.json"))
    args = parser.parse_args()
    with open(args.json) as f:
        runs = json.load(f)
    check(len(runs) >= 22, "%d published runs to check" % len(runs))
    for run in runs + [GPT3_H100]:
        layout = memory(args.megac, run, run["stack"])
        check(layout["fits"], "%s (%s, recompute %s): predicted %.1f GiB per GPU fits" %
              (run["id"], run["stack"], run["recompute"], layout["memory_per_gpu_bytes"] / GIB))
    scores = memory(args.megac, GPT3_H100, "megatron-2021")
    check(not scores["fits"],
          "GPT-3 175B H100 layout with materialised scores (megatron-2021) needs %.1f GiB: over"
          % (scores["memory_per_gpu_bytes"] / GIB))
    return 0


if __name__ == "__main__":
    sys.exit(main())
