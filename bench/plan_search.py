"""How long the planner's layout search takes on large models (issue 15: the 1T search < 1 s).

usage: plan_search.py --megac build/bin/megac [--repeats 5]
Runs `megac plan --json --no-compile` (the search alone; the model is read once per run) for
GPT-3 175B on 1024 A100s, a 1T GPT on 3072 A100s, Llama-3-70B on 1024 H100s, Mixtral-8x7B
(a mixture of experts: ep searched too) on 64 H100s and Llama-3.1-8B at sequence 131072 on 32
H100s (context parallelism decides it) under every stack profile, and prints the median search
time, the layouts evaluated and the winner (cp and ZeRO levels 0-3 are searched everywhere). Exits non-zero only if a search fails;
never on time.
"""
import argparse
import json
import statistics
import subprocess
import sys

CASES = [
    ("GPT-3 175B", "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200",
     "a100-80g:128x8", 1536),
    ("GPT 1T", "gpt:layers=128,hidden=25600,heads=160,seq=2048,vocab=51200", "a100-80g:384x8",
     3072),
    ("Llama-3-70B", "llama:layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672,seq=8192,"
     "vocab=128256", "h100-sxm:128x8", 512),
    ("Mixtral-8x7B", "mixtral:layers=32,hidden=4096,heads=32,kv_heads=8,experts=8,topk=2,"
     "ffn=14336,seq=4096,vocab=32000", "h100-sxm:8x8", 256),
    ("Llama-3.1-8B 128K", "llama:layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,"
     "seq=131072,vocab=128256", "h100-sxm:4x8", 32),
]
STACKS = ["megac", "megatron-2021", "megatron-deepspeed", "megatron-core"]  # planner/StackProfile.cpp


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("%-17s %-14s %10s %10s  %s" % ("model", "stack", "search ms", "evaluated", "winner"))
    for name, model, cluster, batch in CASES:
        for stack in STACKS:
            times = []
            for _ in range(args.repeats):
                out = subprocess.run(
                    [args.megac, "plan", "--model", model, "--cluster", cluster,
                     "--global-batch", str(batch), "--stack", stack, "--json", "--no-compile",
                     "--top", "1"], check=True, capture_output=True, text=True).stdout
                result = json.loads(out)
                times.append(result["search_seconds"])
            w = result["layouts"][0]
            winner = "tp%d cp%d pp%d dp%d ep%d vpp%d mb%d zero%d %s%s, %.1f s/step, MFU %.1f%%" % (
                w["tp"], w.get("cp", 1), w["pp"], w["dp"], w.get("ep", 1), w["vpp"],
                w["micro_batch"], w["zero"], w["recompute"],
                " sp" if w["sequence_parallel"] else "", w["step_time_s"], 100 * w["mfu"])
            print("%-17s %-14s %10.1f %10d  %s" % (name, stack, 1e3 * statistics.median(times),
                                                  result["evaluated"], winner))
    return 0


if __name__ == "__main__":
    sys.exit(main())
