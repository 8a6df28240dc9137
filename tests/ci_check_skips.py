#!/usr/bin/env python3
"""CI's check that `make test` ran every test: ctest exits 0 when a test skips (SKIP_RETURN_CODE,
a gtest GTEST_SKIP) or is disabled, so `.ci/run` saves `make test`'s output and this script reads
it. On CI everything but the `gpu` label is installed (TESTING.md), so any other skip is a failure.

usage: ci_check_skips.py LOG [--expect-project DIR]... [--allow-label gpu] [--allow-test NAME]...
                         [--partial]
       ci_check_skips.py --self-test

For each ctest run in LOG (a "Test project DIR" header, as `make test` runs one in build/ and one
in build-asan/), every test that `ctest --test-dir DIR --show-only=json-v1` lists must have a
result line, and each result must be "Passed" with no skip reported in its output (a "SKIP" line,
gtest's "[  SKIPPED ]", lit's "Unsupported: N", read from DIR's Testing/Temporary/LastTest.log:
build-asan runs each gtest binary as one test), unless the test carries an allowed label or is
named by --allow-test (a unit test that needs the CUDA backend built). Each offender is named
with its labels and the skip lines of its output. Exits 1 on any, on a listed test with no result
line, on a missing --expect-project run, or on a log with no ctest run at all (a changed output
format must not pass silently); 0 otherwise. --partial reads the log of a run of some tests
(`ctest -R/-L`): only the tests in it are checked. --self-test runs a tiny ctest project (a pass, a gpu
skip, an e2e skip, a test that exits 0 but prints a skip) and checks what is reported.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PROJECT = re.compile(r"^Test project (?P<dir>.+?)\s*$")
# "12/617 Test  #34: Grad.LayerNormGradMatchesFiniteDifferences ....   Passed    0.01 sec"
RESULT = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (?P<name>.+?)(?: \.+)?\s*"
                    r"(?P<status>Passed|\*\*\*.+?)\s+[\d.]+ sec\s*$")
# The summary's "The following tests did not run:" block: "\t  3 - name (Skipped)".
NOT_RUN_HEADER = "The following tests did not run:"
NOT_RUN = re.compile(r"^\s+\d+ - (?P<name>.+) \((?P<why>[^()]*)\)\s*$")


def parse_log(text):
    """[(project dir, {test name: status})] in the order the runs appear."""
    runs, results, in_not_run = [], None, False
    for line in text.splitlines():
        m = PROJECT.match(line)
        if m:
            results = {}
            runs.append((m.group("dir"), results))
            in_not_run = False
            continue
        if results is None:
            continue
        m = RESULT.match(line)
        if m:
            name = m.group("name").rstrip(" .")
            results[name] = m.group("status").lstrip("*").strip()
            continue
        if line.strip() == NOT_RUN_HEADER:
            in_not_run = True
            continue
        if in_not_run:
            m = NOT_RUN.match(line)
            if m:
                if results.get(m.group("name"), "Passed") == "Passed":
                    results[m.group("name")] = m.group("why")
                continue
            in_not_run = False
    return runs


def last_test_log(project):
    return os.path.join(project, "Testing", "Temporary", "LastTest.log")


def registered_tests(project):
    """{name: [labels]} of every test ctest has in `project`. (Even --show-only rewrites
    LastTest.log, so the run's log is put back afterwards.)"""
    saved = None
    try:
        with open(last_test_log(project), "rb") as f:
            saved = f.read()
    except OSError:
        pass
    out = subprocess.run(["ctest", "--test-dir", project, "--show-only=json-v1"],
                         capture_output=True, text=True)
    if saved is not None:
        with open(last_test_log(project), "wb") as f:
            f.write(saved)
    if out.returncode != 0:
        raise RuntimeError(f"ctest --test-dir {project} --show-only=json-v1 failed:\n"
                           f"{out.stdout}{out.stderr}")
    tests = {}
    for test in json.loads(out.stdout)["tests"]:
        labels = []
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels = list(prop["value"])
        tests[test["name"]] = labels
    return tests


# A test that exits 0 yet reports a skip in its output: the house "SKIP: why" line, gtest's
# "[  SKIPPED ]" (a whole gtest binary as one ctest entry, as in build-asan) and lit's summary.
SKIP_IN_OUTPUT = re.compile(r"^\s*SKIP\b|^\[  SKIPPED \] |^\s*(Unsupported|Skipped)\s*:\s*[1-9]",
                            re.M)


def test_outputs(project):
    """{test name: its output} from project's Testing/Temporary/LastTest.log."""
    try:
        with open(last_test_log(project), errors="replace") as f:
            log = f.read()
    except OSError:
        return {}
    block = re.compile(r"^\d+/\d+ Test: (?P<name>.+?)\n.*?^Output:\n-+\n"
                       r"(?P<out>.*?)^<end of output>", re.M | re.S)
    return {m.group("name"): m.group("out") for m in block.finditer(log)}


def skip_lines(output):
    """The last 5 lines of `output` that report a skip (else its last 5 lines)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    marked = [line for line in lines if SKIP_IN_OUTPUT.search(line) or "SKIP" in line.upper()]
    return (marked or lines)[-5:]


def check(text, expect_projects, allowed_labels, allowed_tests=(), partial=False):
    """Problems (strings) of one `make test` log."""
    runs = parse_log(text)
    if not runs:
        return ["no ctest run in the log (no 'Test project DIR' line): did `make test` run ctest?"]
    problems = []
    seen = {os.path.realpath(d) for d, _ in runs}
    for want in expect_projects:
        if os.path.realpath(want) not in seen:
            problems.append(f"no ctest run in {want} in the log (runs found: "
                            f"{', '.join(d for d, _ in runs)})")
    for project, results in runs:
        outputs = test_outputs(project)  # before --show-only rewrites LastTest.log
        if not results:
            problems.append(f"{project}: the ctest run has no test results")
            continue
        if not outputs:
            problems.append(f"{project}: no test output in {last_test_log(project)}: skips that "
                            "tests report in their output cannot be checked")
        try:
            tests = registered_tests(project)
        except (RuntimeError, OSError, ValueError) as e:
            problems.append(str(e))
            continue
        counts = {"passed": 0, "allowed skips": 0}
        for name in sorted(tests):
            labels = tests[name]
            status = results.get(name)
            if status is None and partial:
                continue
            if status is None:
                problems.append(f"{project}: {name} has no result line in the log")
            elif set(labels) & allowed_labels or name in allowed_tests:
                counts["passed" if status == "Passed" else "allowed skips"] += 1
                if status != "Passed":
                    print(f"ci: {name} ({status}; labels {';'.join(labels) or '-'}) may skip")
            elif status == "Passed" and not SKIP_IN_OUTPUT.search(outputs.get(name, "")):
                counts["passed"] += 1
            else:
                if status == "Passed":
                    status = "Passed, but its output reports a skip"
                why = skip_lines(outputs.get(name, ""))
                problems.append(f"{project}: {name} ({status}; labels {';'.join(labels) or '-'})"
                                + "".join(f"\n      {line}" for line in why))
        for name in sorted(set(results) - set(tests)):
            problems.append(f"{project}: {name} ran but ctest does not list it")
        print(f"ci: {project}: {len(results)} results, {counts['passed']} passed, "
              f"{counts['allowed skips']} allowed skips")
    return problems


def self_test():
    """A ctest project with a pass, a gpu skip, an e2e skip and a test that passes but prints a
    skip: the last two are reported, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "CMakeLists.txt"), "w") as f:
            f.write("""cmake_minimum_required(VERSION 3.20)
project(ci_check_skips_self_test LANGUAGES NONE)
enable_testing()
add_test(NAME passes COMMAND true)
add_test(NAME gpu_skips COMMAND sh -c "echo 'SKIP: no device'; exit 77")
set_tests_properties(gpu_skips PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
add_test(NAME Suite.e2e_skips COMMAND sh -c "echo 'SKIP: mpirun is not on PATH'; exit 77")
set_tests_properties(Suite.e2e_skips PROPERTIES LABELS "e2e;mpi" SKIP_RETURN_CODE 77)
add_test(NAME quiet_skip COMMAND sh -c "echo 'case 1 ok'; echo '  SKIP tp 2: no mpirun'")
set_tests_properties(quiet_skip PROPERTIES LABELS e2e)
""")
        build = os.path.join(tmp, "build")
        subprocess.run(["cmake", "-S", tmp, "-B", build], check=True, capture_output=True)
        run = subprocess.run(["ctest", "-j", "2"], cwd=build, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"self-test: ctest exited {run.returncode}:\n{run.stdout}{run.stderr}")
            return 1
        problems = check(run.stdout, [build], {"gpu"})
        ok = (len(problems) == 2 and "Suite.e2e_skips (Skipped" in problems[0]
              and "SKIP: mpirun is not on PATH" in problems[0]
              and "quiet_skip (Passed, but its output reports a skip" in problems[1]
              and "SKIP tp 2: no mpirun" in problems[1])
        print("self-test:", "PASS" if ok else "FAIL", problems)
        return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log", nargs="?")
    parser.add_argument("--expect-project", action="append", default=[], metavar="DIR")
    parser.add_argument("--allow-label", action="append", default=[], metavar="LABEL",
                        help="a label whose tests may skip (default: gpu)")
    parser.add_argument("--allow-test", action="append", default=[], metavar="NAME",
                        help="a test (by its ctest name) that may skip")
    parser.add_argument("--partial", action="store_true",
                        help="the log is of some tests only (ctest -R/-L)")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.log:
        parser.error("LOG is required")
    with open(args.log, errors="replace") as f:
        text = f.read()
    problems = check(text, args.expect_project, set(args.allow_label or ["gpu"]),
                     set(args.allow_test), args.partial)
    if problems:
        print(f"ci: FAIL: {len(problems)} test(s) did not run or pass outside the allowed labels "
              "(CI installs everything, TESTING.md; only `gpu` may skip):")
        for p in problems:
            print(f"  {p}")
        return 1
    print("ci: every test outside the allowed labels ran and passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
