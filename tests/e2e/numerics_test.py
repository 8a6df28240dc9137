"""tests/e2e/numerics.py's comparisons can fail: NaN, inf, a missing tensor, an empty comparison
and a difference just over the bound are each caught; a skipped case makes the exit code 77;
MEGAC_TEST_THREADS becomes --threads. No megac needed (label e2e, a second)."""
import contextlib
import io
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402


def quiet(f, *args):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        value = f(*args)
    return value, out.getvalue()


def main():
    problems = []

    def expect(condition, what):
        if not condition:
            problems.append(what)

    ref = {"w": np.linspace(-1, 1, 64), "b": np.zeros(8)}
    bound = 1e-9 * np.linalg.norm(ref["w"]) + 1e-12 * math.sqrt(64)
    for name, got, fails in [
            ("equal", dict(ref), False),
            ("just inside", {"w": ref["w"] + 0.9 * bound / 8, "b": ref["b"]}, False),
            ("just outside", {"w": ref["w"] + 1.1 * bound / 8, "b": ref["b"]}, True),
            ("one NaN", {"w": np.where(np.arange(64) == 3, np.nan, ref["w"]), "b": ref["b"]},
             True),
            ("all NaN", {"w": np.full(64, np.nan), "b": np.full(8, np.nan)}, True),
            ("inf", {"w": ref["w"], "b": np.full(8, np.inf)}, True),
            ("a tensor missing", {"w": ref["w"]}, True),
            ("a shape differs", {"w": ref["w"][:63], "b": ref["b"]}, True)]:
        p, worst, _ = numerics.compare_tensors(got, ref, 1e-9, 1e-12, "t")
        expect(bool(p) == fails, f"compare_tensors '{name}': problems {p}, worst {worst}")
    p, _, _ = numerics.compare_tensors({}, {}, 1e-9, 1e-12, "t")
    expect(p, "an empty comparison passed")

    ok, out = quiet(numerics.report, "x", math.nan, 1.0)
    expect(not ok and "error/bound x: inf" in out, f"report(NaN) -> {ok}, {out!r}")
    ok, _ = quiet(numerics.report, "x", 0.5, 1.0)
    expect(ok, "report(0.5 <= 1) failed")
    expect(numerics.relative(math.nan, 1.0) == math.inf, "relative(NaN) is not inf")
    rec = [{"step": 1, "loss": 2.0, "grad_norm": 1.0}]
    p, _ = quiet(numerics.compare_losses, "l", [{"step": 1, "loss": math.nan, "grad_norm": 1.0}],
                 rec, 1e-10)
    expect(p, "compare_losses passed a NaN loss")
    p, _ = quiet(numerics.compare_losses, "l", [], [], 1e-10)
    expect(p, "compare_losses passed an empty log")

    os.environ[numerics.THREADS_ENV] = "2"
    expect(numerics.threads_args() == ["--threads", "2"], "MEGAC_TEST_THREADS=2 ignored")
    del os.environ[numerics.THREADS_ENV]
    expect(numerics.threads_args() == ["--threads", "1"], "the default is not one thread")

    code, _ = quiet(numerics.exit_code, 0)
    expect(code == 0, f"exit_code(0) = {code} with nothing skipped")
    quiet(numerics.skip, "a case")
    code, _ = quiet(numerics.exit_code, 0)
    expect(code == numerics.SKIP, f"exit_code after a skip = {code}, expected 77")
    code, _ = quiet(numerics.exit_code, 2)
    expect(code == 1, f"exit_code(2 failures) = {code}")

    for p in problems:
        print(f"FAIL {p}")
    print("PASS" if not problems else f"FAIL ({len(problems)} problems)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
