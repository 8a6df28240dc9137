"""`--model hf:CONFIG` on the published configs of Llama-3.1-405B, Mixtral-8x22B, Qwen2-72B and
Nemotron-4-340B (tests/e2e/hf_configs/, copied with their README): `megac describe` counts
exactly the parameter totals the README gives by each family's formula; `megac plan` plans each
on an H100/H200 cluster (a layout that fits, and the partitioner accepts #1); and bad configs are
refused in one line naming the file and the field. No venv, no weights; about 10 s.

usage: hf_config_test.py --megac build/bin/megac --workdir DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "hf_configs")

# The cluster each is planned on: a size where a layout fits. The planner searches powers of
# two for pp; Llama-3.1-405B's 126 layers split evenly only into 2, 3, 6, 7, 9, ... stages and
# need more than 2 (the smallest needs 240 GiB per device at pp 2), so its pp is pinned.
PLANS = {
    "llama-3.1-405b.json": ["--cluster", "h100-sxm:252x8", "--global-batch", "2016",
                            "--tp", "8", "--pp", "9"],
    "mixtral-8x22b.json": ["--cluster", "h200:256x8", "--global-batch", "2048"],
    "qwen2-72b.json": ["--cluster", "h100-sxm:128x8", "--global-batch", "1024"],
    "nemotron-4-340b.json": ["--cluster", "h100-sxm:128x8", "--global-batch", "1024"],
}


def readme_totals():
    """{file: parameters} from the README's table."""
    totals = {}
    with open(os.path.join(CONFIGS, "README.md")) as f:
        for line in f:
            m = re.match(r"\|\s*(\S+\.json)\s*\|\s*\w+\s*\|\s*([\d,]+)\s*\|", line)
            if m:
                totals[m.group(1)] = int(m.group(2).replace(",", ""))
    return totals


def run(args, argv):
    return subprocess.run([args.megac, *argv], capture_output=True, text=True, timeout=120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    failures = []

    def check(ok, message):
        print(("  ok   " if ok else "  FAIL ") + message, flush=True)
        if not ok:
            failures.append(message)

    totals = readme_totals()
    check(sorted(totals) == sorted(PLANS), f"the README lists the four configs: {sorted(totals)}")
    for name in sorted(PLANS):
        path = os.path.join(CONFIGS, name)
        d = run(args, ["describe", "--model", f"hf:{path},seq=4096"])
        m = re.search(r"^parameters\s+([\d,]+)", d.stdout, re.M)
        got = int(m.group(1).replace(",", "")) if m else None
        check(d.returncode == 0 and got == totals.get(name),
              f"describe {name}: {got} parameters, the README's {totals.get(name)}"
              + ("" if d.returncode == 0 else f" (exit {d.returncode}: {d.stderr.strip()})"))
        p = run(args, ["plan", "--model", f"hf:{path},seq=4096", *PLANS[name], "--top", "1"])
        fits = re.search(r"^1\s+tp=\d+ (cp=\d+(\(\w+\))? )?pp=\d+", p.stdout, re.M)  # cp (and its variant) only when > 1
        check(p.returncode == 0 and fits and "the partitioner accepts #1" in p.stdout,
              f"plan {name} on {PLANS[name][1]}: "
              + (fits.group(0)[1:].strip() if fits else "no layout")
              + ("" if p.returncode == 0 else f" (exit {p.returncode}: {p.stderr.strip()[-300:]})"))

    # A folder works as its config.json does; hf:PATH without seq needs one for describe.
    folder = os.path.join(args.workdir, "qwen2-folder")
    os.makedirs(folder)
    shutil.copy(os.path.join(CONFIGS, "qwen2-72b.json"), os.path.join(folder, "config.json"))
    d = run(args, ["describe", "--model", f"hf:{folder},seq=128"])
    check(d.returncode == 0 and "72,706,203,648" in d.stdout, "a model folder: hf:DIR,seq=128")
    d = run(args, ["describe", "--model", f"hf:{folder}"])
    check(d.returncode == 1 and "give the sequence length to build for, hf:PATH,seq=S"
          in d.stderr and d.stderr.count("\n") == 1, "hf:DIR without seq: " + d.stderr.strip())

    # Bad configs: one line naming the file and the field (or the model_type), nothing else.
    base = json.load(open(os.path.join(CONFIGS, "mixtral-8x22b.json")))
    cases = [
        ("softcap", dict(base, attn_logit_softcapping=30.0),
         "field 'attn_logit_softcapping' is 30; megac does not soft-cap logits"),
        ("rope", dict(base, model_type="llama", rope_scaling={"rope_type": "yarn", "factor": 4.0}),
         "field 'rope_scaling' is {\"rope_type\": \"yarn\", \"factor\": 4}"),
        ("window", dict(base, sliding_window=1024),
         "field 'sliding_window' is 1024, shorter than seq 4096"),
        ("unknown", dict(base, quantization_config={"bits": 4}), "field 'quantization_config'"),
        ("moe", dict({k: v for k, v in base.items() if k != "num_local_experts"},
                     model_type="qwen2_moe", decoder_sparse_step=2),
         "field 'decoder_sparse_step' is 2"),
        ("act", dict(base, hidden_act="gelu"), "field 'hidden_act' is \"gelu\""),
    ]
    for tag, config, expect in cases:
        path = os.path.join(args.workdir, f"{tag}.json")
        with open(path, "w") as f:
            json.dump(config, f)
        for command in (["describe"], ["plan", *PLANS["mixtral-8x22b.json"]]):
            r = run(args, [*command, "--model", f"hf:{path},seq=4096"])
            one_line = r.stderr.count("\n") == 1 and not r.stdout
            check(r.returncode != 0 and one_line and f"{path}: {expect}" in r.stderr,
                  f"{command[0]} refuses {tag}: {r.stderr.strip()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
