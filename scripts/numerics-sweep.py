#!/usr/bin/env python3
"""Runs the fp32-sensitive e2e tests under other OpenBLAS kernels and thread counts, and prints
each test's worst error/bound ratio: does every tolerance hold on CPUs the suite was not run on?

Not part of CI (tests and CI never set OPENBLAS_CORETYPE). Each configuration is a core type
(OPENBLAS_CORETYPE: which GEMM kernels Debian's DYNAMIC_ARCH OpenBLAS runs, so which order
its sums take) and a thread count (MEGAC_TEST_THREADS, which the tests pass to every megac run
as --threads, tests/e2e/numerics.py; OMP_NUM_THREADS too). The core types default to the
machine's own kernels plus those of FALLBACK_CORES this CPU can execute (judged from
/proc/cpuinfo's flags). Where the environment already sets OPENBLAS_CORETYPE or
OPENBLAS_L2_SIZE (some machines do, because the native kernels compute wrong results there),
the sweep leaves both alone and sweeps the threads only.

Each test runs as ctest registered it (`ctest --show-only=json-v1`: its command and folders),
one at a time, with what is left of the configuration's time budget as its timeout. Its
`error/bound LABEL: RATIO` lines (numerics.report and friends) give its worst ratio. A
configuration passes when every test exits 0 and every ratio is <= --limit (0.5 by default: a
margin of 2, not a coin flip).

usage: scripts/numerics-sweep.py [--build build] [--tests e2e_train,...] [--cores A,B]
                                 [--threads 1,2] [--budget SECONDS] [--limit 0.5]
                                 [--megac COPY]
--megac runs the tests on a copy of the megac binary (the sweep copies build/bin/megac to
BUILD/numerics-sweep/megac by default), so a rebuild during the sweep does not pull the
binary from under a running test.
Exit 0 when every configuration passes, 1 otherwise. Needs a built tree and the test venv.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The e2e tests whose bounds are about fp32 (or half precision) roundoff: compared against
# PyTorch, onnxruntime or the one-rank run, where another GEMM kernel or thread count changes
# the order of the sums.
SENSITIVE = ("e2e_train", "e2e_hf_train", "e2e_hf_mlm", "e2e_hf_mixtral_onnx", "e2e_llama_zoo",
             "e2e_mixtral_zoo", "e2e_partition_quick", "e2e_torch_forward", "e2e_hf_models",
             "e2e_bert_t5_zoo", "e2e_mixed_precision")

# OpenBLAS core types to try besides the native one, newest first, with the /proc/cpuinfo flags
# their kernels need.
FALLBACK_CORES = (("Haswell", {"avx2", "fma"}), ("Sandybridge", {"avx"}),
                  ("Nehalem", {"sse4_2"}))

RATIO = re.compile(r"error/bound (.*?): (\S+)")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def core_types(requested):
    """[(label, OPENBLAS_CORETYPE or None)]: None keeps the environment's."""
    if "OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ:
        print("OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are set here "
              f"({os.environ.get('OPENBLAS_CORETYPE', '-')}/"
              f"{os.environ.get('OPENBLAS_L2_SIZE', '-')}): sweeping threads only")
        return [("preset", None)]
    if requested:
        return [(name, name) for name in requested]
    flags = cpu_flags()
    return [("native", None)] + [(name, name) for name, need in FALLBACK_CORES
                                 if need <= flags]


def registered_tests(build, names):
    """name -> (command, working directory, environment additions) as ctest registered them."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                         capture_output=True, text=True, check=True).stdout
    tests = {}
    for t in json.loads(out)["tests"]:
        if t["name"] not in names:
            continue
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(kv.split("=", 1) for kv in props.get("ENVIRONMENT", []))
        tests[t["name"]] = (t["command"], props.get("WORKING_DIRECTORY", build), env)
    return tests


def run_test(command, cwd, env, timeout):
    """(exit code or 'timeout', worst ratio, its label, seconds)."""
    start = time.time()
    try:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=max(1, timeout))
        code, text = result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired as e:
        code = "timeout"
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
    worst, label = None, None
    for m in RATIO.finditer(text):
        try:
            value = float(m.group(2))
        except ValueError:
            value = math.inf
        if math.isnan(value):
            value = math.inf
        if worst is None or value > worst:
            worst, label = value, m.group(1)
    return code, worst, label, time.time() - start, text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--tests", help="comma-separated ctest names (default: the subset above)")
    parser.add_argument("--cores", help="comma-separated OPENBLAS_CORETYPE values")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--budget", type=float, default=1200,
                        help="seconds per configuration (default 1200)")
    parser.add_argument("--limit", type=float, default=0.5)
    parser.add_argument("--log-dir", help="where each run's output is kept "
                        "(default BUILD/numerics-sweep)")
    parser.add_argument("--megac", help="the megac binary the tests run (default: a copy of "
                        "BUILD/bin/megac made now)")
    args = parser.parse_args()

    names = args.tests.split(",") if args.tests else list(SENSITIVE)
    tests = registered_tests(args.build, set(names))
    missing = [n for n in names if n not in tests]
    if missing and args.tests:
        print(f"not registered in {args.build}: {', '.join(missing)}")
        return 1
    names = [n for n in names if n in tests]
    log_dir = args.log_dir or os.path.join(args.build, "numerics-sweep")
    os.makedirs(log_dir, exist_ok=True)
    built = os.path.abspath(os.path.join(args.build, "bin", "megac"))
    megac = args.megac
    if not megac:
        megac = os.path.join(log_dir, "megac")
        shutil.copy2(built, megac)
    # The tests name the built binary in their commands (--megac PATH): point them at the copy.
    tests = {name: ([megac if os.path.abspath(a) == built else a for a in command], cwd, env)
             for name, (command, cwd, env) in tests.items()}
    configs = [(core_label, core, int(t)) for core_label, core in core_types(
        args.cores.split(",") if args.cores else None) for t in args.threads.split(",")]
    print(f"{len(names)} tests x {len(configs)} configurations, budget {args.budget:.0f} s each, "
          f"limit error/bound <= {args.limit}")
    failures = []
    for core_label, core, threads in configs:
        config = f"{core_label}/threads={threads}"
        env = dict(os.environ, MEGAC_TEST_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        if core:
            env["OPENBLAS_CORETYPE"] = core
        print(f"\n== {config}", flush=True)
        deadline = time.time() + args.budget
        for name in names:
            command, cwd, extra_env = tests[name]
            left = deadline - time.time()
            if left < 5:
                print(f"  {name:<24} not run: the configuration's budget is spent")
                failures.append(f"{config} {name}: not run (budget)")
                continue
            code, worst, label, seconds, text = run_test(command, cwd, dict(env, **extra_env),
                                                         left)
            with open(os.path.join(log_dir, f"{core_label}-t{threads}-{name}.log"), "w") as f:
                f.write(text)
            ok = code == 0 and worst is not None and worst <= args.limit
            verdict = "ok" if ok else ("SKIP" if code == 77 else "FAIL")
            ratio = "-" if worst is None else f"{worst:.3g}"
            print(f"  {name:<24} exit {code!s:<7} {seconds:6.0f} s  worst error/bound {ratio:>8}"
                  f"  {verdict}  {label or ''}", flush=True)
            if not ok:
                why = (f"exit {code}" if code != 0 else
                       "no error/bound lines" if worst is None else
                       f"error/bound {worst:.3g} > {args.limit} ({label})")
                failures.append(f"{config} {name}: {why}")
    print()
    for f in failures:
        print(f"FAIL {f}")
    print("PASS: every configuration within the limit" if not failures else
          f"FAIL: {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
