"""Multi-rank `megac train`: every layout against the one-rank run, and the CLI's layout errors.

The one-rank run is the oracle (docs/pipeline.md, TESTING.md): a zoo GPT trained in fp64 for a
few steps with --ranks N and a layout (--tp/--pp/--dp/...) must give
  - the gradients of step 1 (--save-grads, gathered whole on rank 0): |multi - one| <= 1e-10 *
    max|one| + 1e-13 per tensor,
  - every step's loss within 1e-10 relative and every final parameter (--save-weights) within
    1e-9 * max|one| + 1e-12,
  - safetensors files with the same names, shapes and dtypes.
Every compared value must be finite in both runs (two NaN runs would otherwise agree), and each
bound is written `not diff <= bound`, which a NaN fails. The error cases check the one-line
messages of refused or inconsistent layouts (no mpirun needed: they fail before the relaunch).

usage: train_ranks_test.py --megac build/bin/megac --workdir DIR [--only NAME]
Needs mpirun for the layout cases and numpy. Without mpirun the layout cases are skipped, the rest
still run, and the script exits 77 (ctest's SKIP_RETURN_CODE) when nothing failed.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test
STEPS = 3
SPEC = "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64"


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    dtypes = {"F64": np.float64, "F32": np.float32}
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[base + begin:base + end],
                                  dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def tokens(workdir):
    path = os.path.join(workdir, "tokens.npy")
    rng = np.random.default_rng(5)
    np.save(path, rng.integers(0, 63, size=(16, 9)).astype(np.int32))
    return path


def train(megac, workdir, name, layout):
    out = os.path.join(workdir, name)
    os.makedirs(out, exist_ok=True)
    argv = [megac, "train", "--model", SPEC, "--data", tokens(workdir), "--steps", str(STEPS),
            "--global-batch", "8", "--micro-batch", "2", "--lr", "1e-2", "--precision", "fp64",
            "--log-json", os.path.join(out, "log.jsonl"),
            "--save-weights", os.path.join(out, "weights.safetensors"),
            "--save-grads", os.path.join(out, "grads.safetensors"), "--threads", "1",
            "--comm-timeout", "60", *layout]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    with open(os.path.join(out, "log.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f]
    return (losses, read_safetensors(os.path.join(out, "grads.safetensors")),
            read_safetensors(os.path.join(out, "weights.safetensors")))


def compare(what, got, want, rtol, atol):
    problems = []
    if sorted(got) != sorted(want):
        return [f"{what}: tensors {sorted(got)} differ from the one-rank run's {sorted(want)}"]
    for name in want:
        g, w = got[name], want[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            problems.append(f"{what} {name}: {g.dtype} {g.shape}, one rank {w.dtype} {w.shape}")
            continue
        if not w.size:
            problems.append(f"{what} {name}: empty")
            continue
        if not np.isfinite(w).all():
            problems.append(f"{what} {name}: the one-rank run has {np.sum(~np.isfinite(w))} "
                            f"non-finite values")
            continue
        if not np.isfinite(g).all():
            problems.append(f"{what} {name}: {np.sum(~np.isfinite(g))} non-finite values")
            continue
        err = float(np.max(np.abs(g - w)))
        bound = rtol * float(np.max(np.abs(w))) + atol
        if not err <= bound:
            problems.append(f"{what} {name}: max |diff| {err:.3g} > {bound:.3g}")
    return problems


def layout_case(megac, workdir, layout):
    if shutil.which("mpirun") is None:
        return None  # skip
    one = train(megac, workdir, "one", [])
    multi = train(megac, workdir, "multi", layout)
    problems = compare("gradient", multi[1], one[1], 1e-10, 1e-13)
    problems += compare("weight", multi[2], one[2], 1e-9, 1e-12)
    if len(multi[0]) != STEPS or len(one[0]) != STEPS:
        problems.append(f"{len(multi[0])} losses logged, one rank {len(one[0])}; expected {STEPS}")
    for step, (g, w) in enumerate(zip(multi[0], one[0]), 1):
        if not (np.isfinite(g) and np.isfinite(w) and abs(g - w) <= 1e-10 * abs(w)):
            problems.append(f"step {step}: loss {g!r}, one rank {w!r}")
    print(f"    losses: {' '.join(f'{x:.6f}' for x in multi[0])}")
    return problems


def error_case(megac, workdir, extra, expect, code=2):
    argv = [megac, "train", "--model", SPEC, "--data", tokens(workdir), "--steps", "2",
            "--global-batch", "8", "--micro-batch", "2", "--lr", "1e-3", *extra]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    if result.returncode != code or expect not in output:
        return [f"exit {result.returncode} (expected {code}); the output lacks {expect!r}:\n"
                f"{output}"]
    print(f"    {output.strip().splitlines()[-1]}")
    return []


def help_case(megac, workdir):
    text = subprocess.run([megac, "train", "--help"], capture_output=True, text=True).stdout
    return [f"--help does not document {flag}" for flag in
            ["--ranks", "--tp", "--pp", "--dp", "--vpp", "--sequence-parallel", "--zero",
             "--recompute", "--schedule", "--threads", "--comm-timeout", "--save-grads"]
            if flag not in text]


def cases():
    yield "help", help_case
    # cp composes with pp now (e2e_context_parallel); a layout that does not multiply out still
    # names every degree, cp included.
    yield "error-cp", lambda m, w: error_case(m, w, ["--ranks", "2", "--cp", "2", "--pp", "2"],
                                              "--ranks 2 is not tp 1 x cp 2 x pp 2 x dp 1 = 4")
    yield "error-fp8", lambda m, w: error_case(m, w, ["--fp8"],
                                               "megac train: --fp8 is not supported yet")
    yield "error-degrees", lambda m, w: error_case(
        m, w, ["--ranks", "4", "--tp", "3"], "--ranks 4 is not tp 3 x pp 1 x dp 1 = 3")
    yield "error-micro-batch-dp", lambda m, w: error_case(
        m, w, ["--ranks", "4", "--micro-batch", "4"],
        "--global-batch 8 is not a multiple of --micro-batch 4 x dp 4 = 16")
    yield "dp2", lambda m, w: layout_case(m, w, ["--ranks", "2"])
    yield "tp2", lambda m, w: layout_case(m, w, ["--ranks", "2", "--tp", "2"])
    yield "tp2-sp", lambda m, w: layout_case(m, w, ["--ranks", "2", "--tp", "2",
                                                    "--sequence-parallel"])
    yield "pp2", lambda m, w: layout_case(m, w, ["--ranks", "2", "--pp", "2"])
    yield "dp2-zero1", lambda m, w: layout_case(m, w, ["--ranks", "2", "--zero", "1"])
    yield "tp2-dp2", lambda m, w: layout_case(m, w, ["--ranks", "4", "--tp", "2"])
    yield "dp2-recompute", lambda m, w: layout_case(m, w, ["--ranks", "2", "--recompute",
                                                           "selective"])
    yield "pp2-gpipe", lambda m, w: layout_case(m, w, ["--ranks", "2", "--pp", "2",
                                                       "--schedule", "gpipe"])
    yield "tp2-pp2", lambda m, w: layout_case(m, w, ["--ranks", "4", "--tp", "2", "--pp", "2"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--only")
    args = parser.parse_args()
    passed = failed = skipped = 0
    for name, case in cases():
        if args.only and args.only != name:
            continue
        workdir = os.path.join(args.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        print(f"{name}:")
        try:
            problems = case(args.megac, workdir)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            problems = [str(e)]
        if problems is None:
            print(f"SKIP: {name} (mpirun is not on PATH)")
            skipped += 1
            continue
        print(f"{'PASS' if not problems else 'FAIL'}: {name}")
        for p in problems:
            print(f"    {p}")
        sys.stdout.flush()
        passed += not problems
        failed += bool(problems)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed or not passed:
        return 1
    if skipped:
        print(f"SKIP: {skipped} layout case(s) not run: mpirun is not on PATH (install "
              "openmpi-bin)")
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
