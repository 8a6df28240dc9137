#!/usr/bin/env python3
"""SHA-256 of every training plan the partition suite runs: a refactor that must not change what
megac compiles (issue 28's "plans byte-identical") compares these before and after.

Each (model, layout, precision) of tests/e2e/partition_equivalence.py (every group) is compiled
with `megac compile ... -o PLAN` under the suite's hyperparameters and global batch, and one line
`DIGEST  model layout precision` is printed per plan (sorted). The ONNX model is exported by the
suite's own export_onnx (torch needed; without it the ONNX cases are left out, and said so).

usage: scripts/plan-digests.py --megac build/bin/megac [--workdir DIR] [--out FILE]
                               [--compare BASELINE]
--compare exits 1 naming every plan whose digest differs from BASELINE's (or is missing there).
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import partition_equivalence as pe  # noqa: E402


def digests(megac, workdir):
    """{(model, layout, precision): sha256 hex} and the cases left out with why."""
    cases = pe.plan({"quick", "grid", "features", "bert", "onnx", "models", "moe", "mixed"})
    model_args, left_out = {}, []
    for model, _, _ in cases:
        if model["name"] in model_args:
            continue
        if model["spec"]:
            model_args[model["name"]] = ["--model", model["spec"]]
            continue
        try:
            model_args[model["name"]] = [pe.export_onnx(workdir)]
        except ImportError as e:
            left_out.append(f"{model['name']}: {e}")
    out = {}
    for model, layout, precisions in cases:
        if model["name"] not in model_args:
            continue
        for precision in ((precisions,) if isinstance(precisions, str) else precisions):
            key = (model["name"], layout.name(), precision)
            plan = os.path.join(workdir, f"plan-{len(out)}.mplan")
            # A model file takes its sequence length from the data's rows.
            data = [] if model["spec"] else ["--data", pe.make_tokens(workdir, model["vocab"])]
            argv = [megac, "compile", *model_args[model["name"]], *data, "--global-batch",
                    str(pe.GLOBAL_BATCH), *pe.HYPER, "--precision", precision,
                    *pe.PRECISION_ARGS.get(precision, []),
                    *[a for a in layout.argv() if a != "--comm-timeout" and a != "30"],
                    "-o", plan]
            if layout.mpirun or (layout.ranks > 1 and "--ranks" not in argv):
                argv += ["--ranks", str(layout.ranks)]
            result = subprocess.run(argv, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
            with open(plan, "rb") as f:
                out[key] = hashlib.sha256(f.read()).hexdigest()
            os.remove(plan)
    return out, left_out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir")
    parser.add_argument("--out")
    parser.add_argument("--compare")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="megac-plan-digests-")
    os.makedirs(workdir, exist_ok=True)
    found, left_out = digests(os.path.abspath(args.megac), workdir)
    lines = [f"{d}  {' '.join(k)}" for k, d in sorted(found.items())]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    for why in left_out:
        print(f"left out: {why}", file=sys.stderr)
    print(f"{len(found)} plans", file=sys.stderr)
    if args.compare:
        with open(args.compare) as f:
            want = dict(reversed(l.rstrip("\n").split("  ", 1)) for l in f if l.strip())
        got = {" ".join(k): d for k, d in found.items()}
        differ = [k for k in want if got.get(k) != want[k]] + [k for k in got if k not in want]
        for k in differ:
            print(f"DIFFERS {k}", file=sys.stderr)
        print("plans byte-identical to the baseline" if not differ else
              f"{len(differ)} plans differ from the baseline", file=sys.stderr)
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
