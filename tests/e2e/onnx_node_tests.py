"""ONNX's backend node tests through megac: every test under the libonnx-testdata node folder
whose ops megac imports (`megac import --list-ops`) is run with `megac run` on its
test_data_set_0 inputs and compared with the expected outputs.

usage: onnx_node_tests.py --megac build/bin/megac --workdir DIR
                          [--exclusions tests/e2e/onnx_node_exclusions.txt]
                          [--only GLOB] [--import-only] [--verbose]

Inputs that determine shapes (Reshape's shape, Slice's starts/ends/axes/steps, reduction axes,
Expand's shape, Tile's repeats, ...) become initializers of a rewritten model: megac folds them
at import time, as it does for exported models. Floats compare with np.allclose(rtol=1e-4,
atol=1e-5) (fp32 kernels against numpy's fp64-or-fp32 references); integers and booleans must be
equal. A test listed in the exclusion file (one `GLOB  reason` per line) is not run; every
exclusion has a reason. Prints pass/excluded/fail counts (and the tests skipped because an op is
not in megac's list) and exits non-zero on any failure, or when fewer than --min-passed pass.
--import-only checks that each model imports (for working without `megac run`).
--onnxruntime VENV also runs every passing test through onnxruntime (the test venv's, from
scripts/bootstrap.sh: the script re-executes itself with VENV's python) and requires megac's
outputs to match onnxruntime's too (a sanity check of both against a third implementation); a
model onnxruntime cannot load or run is counted, not failed. Without onnxruntime only that
comparison is skipped: every test still runs against its expected outputs (the primary oracle),
and the script then exits 77 (ctest's SKIP_RETURN_CODE) when nothing failed, so CI sees the skip.
Runs with Debian's /usr/bin/python3 (onnx 1.12, numpy).
"""
import argparse
import fnmatch
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

NODE_DIR = "/usr/share/libonnx-testdata/data/node"
SKIP = 77  # ctest's SKIP_RETURN_CODE for this test

# Per op, the input indices that are shape-like: constants in real models.
SHAPE_INPUTS = {
    "Reshape": [1], "Expand": [1], "Tile": [1], "Squeeze": [1], "Unsqueeze": [1],
    "Slice": [1, 2, 3, 4], "Split": [1], "ConstantOfShape": [0], "Range": [0, 1, 2],
    "Trilu": [1], "Dropout": [1, 2], "ReduceSum": [1], "ReduceMean": [1], "ReduceMax": [1],
    "ReduceMin": [1], "ReduceProd": [1], "ReduceL1": [1], "ReduceL2": [1],
    "ReduceLogSum": [1], "ReduceLogSumExp": [1], "ReduceSumSquare": [1], "CumSum": [1],
    "Loop": [0, 1],
}


def list_ops(megac):
    out = subprocess.run([megac, "import", "--list-ops"], capture_output=True, text=True,
                         check=True).stdout
    return {line.strip() for line in out.splitlines()
            if line.strip() and not line.startswith("#") and "(constant-only)" not in line}


def read_exclusions(path):
    rules = []
    if not path:
        return rules
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                sys.exit(f"{path}:{number}: '{parts[0]}' has no reason")
            rules.append((parts[0], parts[1]))
    return rules


def all_ops(graph):
    ops = set()
    for node in graph.node:
        ops.add(node.op_type if node.domain in ("", "ai.onnx") else node.domain + "." + node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= all_ops(attr.g)
            for g in attr.graphs:
                ops |= all_ops(g)
    return ops


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def prepare(test_dir, work):
    """Rewrites the model with shape-like inputs bound; returns (model path, {name: npy},
    [(output name, expected array)])."""
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    data_dir = os.path.join(test_dir, "test_data_set_0")
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    for i in inputs + list(model.graph.output):
        if not i.type.HasField("tensor_type"):
            raise ValueError(f"'{i.name}' is not a tensor")
    values = {}
    for k, inp in enumerate(inputs):
        path = os.path.join(data_dir, f"input_{k}.pb")
        if os.path.exists(path):
            values[inp.name] = load_tensor(path)
    shape_like = set()
    for node in model.graph.node:
        for index in SHAPE_INPUTS.get(node.op_type, []):
            if index < len(node.input) and node.input[index] in values:
                shape_like.add(node.input[index])
    for name in sorted(shape_like):
        model.graph.initializer.append(numpy_helper.from_array(values.pop(name), name))
        kept = [i for i in model.graph.input if i.name != name]
        del model.graph.input[:]
        model.graph.input.extend(kept)
    os.makedirs(work, exist_ok=True)
    model_path = os.path.join(work, "model.onnx")
    onnx.save(model, model_path)
    npys = {}
    for name, value in values.items():
        path = os.path.join(work, f"in_{len(npys)}.npy")
        np.save(path, value)
        npys[name] = path
    expected = []
    for k, out in enumerate(model.graph.output):
        path = os.path.join(data_dir, f"output_{k}.pb")
        expected.append((out.name, load_tensor(path)))
    return model_path, npys, expected


def compare(name, got, want):
    if got.shape != want.shape:
        return f"output '{name}': shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "f":
        if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-4, atol=1e-5,
                           equal_nan=True):
            err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
            return f"output '{name}': max |got - expected| = {err:.3g}"
    elif not np.array_equal(got.astype(want.dtype), want) or got.dtype.kind != want.dtype.kind:
        return f"output '{name}': values differ (got {got.dtype}, expected {want.dtype})"
    return None


def ensure_onnxruntime(venv):
    """(onnxruntime, None), re-executing this script with `venv`'s python when needed; or
    (None, why) when no python here has it."""
    try:
        import onnxruntime
        onnxruntime.set_default_logger_severity(3)  # errors only: old opsets warn per model
        return onnxruntime, None
    except ImportError:
        pass
    python = os.path.join(venv, "bin", "python")
    # A venv's python is a link to the base interpreter: compare prefixes, not executables.
    if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(python, [python] + sys.argv)
    return None, (f"onnxruntime is not importable and {python} is missing or lacks it (run "
                  "scripts/bootstrap.sh)")


def run_onnxruntime(ort, model_path, npys, out_dir, expected):
    """None when onnxruntime agrees with megac on every output; "n/a: why" when onnxruntime
    cannot run the model; else the disagreement."""
    try:
        session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        feeds = {name: np.load(path) for name, path in npys.items()}
        names = [name for name, _ in expected]
        results = session.run(names, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own limits are reported, not failed
        return "n/a: " + str(e).splitlines()[0][:120]
    for name, value in zip(names, results):
        why = compare(name, np.load(os.path.join(out_dir, f"{name}.npy")), np.asarray(value))
        if why:
            return "megac vs onnxruntime: " + why
    return None


def run_test(megac, test_dir, work, import_only, ort=None):
    model_path, npys, expected = prepare(test_dir, work)
    if import_only:
        argv = [megac, "import", model_path, "-o", os.path.join(work, "model.mlir")]
    else:
        out_dir = os.path.join(work, "out")
        argv = [megac, "run", model_path, "--output-dir", out_dir]
        for name, path in npys.items():
            argv += ["--input", f"{name}={path}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return (result.stdout + result.stderr).strip().splitlines()[0:3]
    if import_only:
        return None
    for name, want in expected:
        path = os.path.join(out_dir, f"{name}.npy")
        if not os.path.exists(path):
            return [f"megac run wrote no {name}.npy"]
        why = compare(name, np.load(path), want)
        if why:
            return [why]
    if ort:
        why = run_onnxruntime(ort, model_path, npys, out_dir, expected)
        if why and why.startswith("n/a"):
            return why
        if why:
            return [why]
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--exclusions",
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             "onnx_node_exclusions.txt"))
    parser.add_argument("--only", default="*")
    parser.add_argument("--import-only", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--onnxruntime", metavar="VENV",
                        help="also compare with onnxruntime (from this venv when needed)")
    # 503 pass today; a shrinking op list or a broken import would otherwise turn passes into
    # "not run" silently.
    parser.add_argument("--min-passed", type=int, default=500)
    args = parser.parse_args()
    if not os.path.isdir(NODE_DIR):
        print(f"SKIP: {NODE_DIR} is missing (install libonnx-testdata)")
        return SKIP
    ort, no_ort = ensure_onnxruntime(args.onnxruntime) if args.onnxruntime else (None, None)
    if no_ort:
        print(f"note: {no_ort}; running against the expected outputs only")
    supported = list_ops(args.megac)
    rules = read_exclusions(args.exclusions)
    used_rules = set()
    shutil.rmtree(args.workdir, ignore_errors=True)
    passed, excluded, failed, unsupported, ort_na = [], [], [], [], []
    for test in sorted(os.listdir(NODE_DIR)):
        if not fnmatch.fnmatch(test, args.only):
            continue
        test_dir = os.path.join(NODE_DIR, test)
        ops = all_ops(onnx.load(os.path.join(test_dir, "model.onnx")).graph)
        if not ops <= supported:
            unsupported.append(test)
            continue
        rule = next(((glob, why) for glob, why in rules if fnmatch.fnmatch(test, glob)), None)
        if rule:
            used_rules.add(rule[0])
            excluded.append(test)
            if args.verbose:
                print(f"EXCLUDED {test}: {rule[1]}")
            continue
        try:
            why = run_test(args.megac, test_dir, os.path.join(args.workdir, test), args.import_only,
                           ort)
        except (ValueError, subprocess.TimeoutExpired) as e:
            why = [str(e)]
        if isinstance(why, str):  # passed; onnxruntime could not run it
            ort_na.append(test)
            if args.verbose:
                print(f"PASS {test} (onnxruntime {why})")
            why = None
            passed.append(test)
            continue
        if why:
            failed.append(test)
            print(f"FAIL {test}: " + " | ".join(why))
        else:
            passed.append(test)
            if args.verbose:
                print(f"PASS {test}")
    stale = [glob for glob, _ in rules if glob not in used_rules and args.only == "*"]
    for glob in stale:
        print(f"note: exclusion '{glob}' matches no test with supported ops")
    mode = "import" if args.import_only else "run"
    print(f"onnx node tests ({mode}): {len(passed)} passed, {len(excluded)} excluded, "
          f"{len(failed)} failed; {len(unsupported)} not run (an op outside megac import "
          f"--list-ops)")
    if ort:
        print(f"onnxruntime {ort.__version__}: agrees with megac on {len(passed) - len(ort_na)} "
              f"passing tests; could not run {len(ort_na)}")
    if args.only == "*" and len(passed) < args.min_passed:
        print(f"FAIL: only {len(passed)} tests passed, fewer than --min-passed {args.min_passed}")
        return 1
    if failed:
        return 1
    if no_ort and not args.import_only:
        print(f"SKIP: the comparison with onnxruntime did not run: {no_ort}")
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
