"""bench/cpu_cost_model.py, the CPU validation of issue 34, checked without timing anything.

The script's numbers feed docs/planner.md, so its bookkeeping is what this pins: which runs a
configuration's median takes (the scheduled ones, never the placement retakes), when a run is
retaken (a multi-thread configuration that ended with the cores far apart, up to N times, until
one ends near), that a round split over holds of the CPU lock resumes with its own calibration,
the report's per-calibration and near-placement statistics, and that a calibration is flagged
as disturbed when its multi-thread GEMMs do not scale. Everything it would measure comes from a
fake `megac` and a fake `bench-core-round-trip` that replay scripted values; one check runs the
real `megac plan` with the bench's own command line, so a change to megac's options that breaks
the bench fails here rather than on the next validation run.

usage: bench_cpu_cost_model_test.py --megac build/bin/megac
"""
import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
import cpu_cost_model as ccm  # noqa: E402  (bench/ is not a package)

MEGAC = None

# The fake megac: `calibrate -o PATH` writes an undisturbed two-occupancy spec, `plan --json`
# answers 100 ms, `train --log-json LOG` writes six steps whose first two are slow (skipped) and
# whose rest take the next scripted time; every call is appended to calls.log.
FAKE_MEGAC = textwrap.dedent("""\
    #!/usr/bin/env python3
    import json, os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    def pop(name):
        path = os.path.join(here, name)
        with open(path) as f:
            values = f.read().split()
        with open(path, "w") as f:
            f.write(" ".join(values[1:]))
        return float(values[0])
    with open(os.path.join(here, "calls.log"), "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    args = sys.argv[1:]
    if args[0] == "calibrate":
        gemm = lambda rate: [{"m": s, "n": s, "k": s, "elementBytes": 4, "flopsPerSecond": rate}
                             for s in (128, 256, 512)]
        spec = {"calibration": {"occupancies": [
            {"name": "alone-1t", "threads": 1, "gemm": gemm(50e9)},
            {"name": "alone-2t", "threads": 2, "gemm": gemm(98e9)}]}}
        with open(args[args.index("-o") + 1], "w") as f:
            json.dump(spec, f)
    elif args[0] == "plan":
        print(json.dumps({"layouts": [{"step_time_s": 0.1}]}))
    elif args[0] == "train":
        ms = pop("times")
        with open(args[args.index("--log-json") + 1], "w") as f:
            for step in range(6):
                f.write(json.dumps({"step_time_s": (9.0 if step < 2 else ms / 1e3)}) + "\\n")
    else:
        sys.exit("fake megac: unexpected " + args[0])
    """)

FAKE_ROUND_TRIP = textwrap.dedent("""\
    #!/usr/bin/env python3
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "round_trips")
    with open(path) as f:
        values = f.read().split()
    with open(path, "w") as f:
        f.write(" ".join(values[1:]))
    print("round_trip_ns " + values[0])
    """)


def spec_with(one, many, threads=2):
    """A calibration spec whose alone-1t and alone-Nt GEMM tables have these rates per shape."""
    table = lambda rates: [{"m": s, "n": s, "k": s, "elementBytes": 4, "flopsPerSecond": r}
                           for s, r in zip((128, 256, 512, 1024), rates)]
    return {"calibration": {"occupancies": [
        {"name": "alone-1t", "threads": 1, "gemm": table(one)},
        {"name": "alone-%dt" % threads, "threads": threads, "gemm": table(many)}]}}


class Helpers(unittest.TestCase):
    def test_disturbed_flags_a_multi_thread_sweep_that_does_not_scale(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "spec.json")
            with open(path, "w") as f:
                json.dump(spec_with([50, 50, 50, 50], [97, 99, 100, 95]), f)
            self.assertIsNone(ccm.disturbed(path))
            # Two of four shapes at 1.2x: the lower quartile is under 0.75 x 2 threads.
            with open(path, "w") as f:
                json.dump(spec_with([50, 50, 50, 50], [60, 60, 100, 95]), f)
            why = ccm.disturbed(path)
            self.assertIsNotNone(why)
            self.assertIn("alone-2t", why)
            # Scaling GEMMs, but megac calibrate's note says the CPUs moved between dies.
            spec = spec_with([50, 50, 50, 50], [97, 99, 100, 95])
            spec["calibration"]["source"] = ("...; alone-2t: CPUs 0 and 1 55 / 361 ns apart (...): "
                                             "the host moved them between dies meanwhile, ...")
            with open(path, "w") as f:
                json.dump(spec, f)
            self.assertIn("two placements", ccm.disturbed(path))
            # A spec of one occupancy (a --ranks N calibration) is never judged.
            with open(path, "w") as f:
                json.dump({"calibration": {"gemm": []}}, f)
            self.assertIsNone(ccm.disturbed(path))

    def test_far_apart_is_over_twice_the_nearest(self):
        self.assertFalse(ccm.far_apart(110, 55))
        self.assertTrue(ccm.far_apart(111, 55))
        self.assertFalse(ccm.far_apart(None, 55))
        self.assertFalse(ccm.far_apart(370, None))

    def test_nearest_round_trip_takes_the_calibration_runs_and_retakes(self):
        result = {"calibration_round_trip_ns": 70, "rows": {
            "a": {"round_trip_ns": [80, None, 400], "retakes": [[1.0, 65], [2.0, None]]},
            "b": {"round_trip_ns": [90]}}}
        self.assertEqual(ccm.run_round_trips(result), ([80, 400, 90], [65]))
        self.assertEqual(ccm.nearest_round_trip(result), 65)
        self.assertIsNone(ccm.nearest_round_trip({"rows": {}}))

    def test_a_dropless_moe_with_ep_is_planned_with_its_1_rank_routing(self):
        by_name = {c[0]: c for c in ccm.CONFIGS}
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(ccm.moe_load_flags(d, by_name["mixtral-dp2-ep2"]), [])  # no log yet
            log = os.path.join(d, "mixtral-1r2t.jsonl")
            open(log, "w").close()
            self.assertEqual(ccm.moe_load_flags(d, by_name["mixtral-dp2-ep2"]), ["--moe-load", log])
            # A capacity factor caps every expert; ep 1 holds every expert; dense models route
            # nothing; no workdir (the real-megac check below), no flag.
            for name in ("mixtral-dp2-ep2-cap1", "mixtral-1r2t", "h512-tp2"):
                self.assertEqual(ccm.moe_load_flags(d, by_name[name]), [], name)
            self.assertEqual(ccm.moe_load_flags(None, by_name["mixtral-dp2-ep2"]), [])

    def test_layout_and_schedule_flags(self):
        layout = (2, 2, 1, 1, 2, 1, "selective", 1, True)
        self.assertEqual(ccm.layout_flags(layout),
                         ["--tp", "2", "--pp", "2", "--dp", "1", "--vpp", "2", "--micro-batch",
                          "1", "--recompute", "selective", "--zero", "1"])
        self.assertEqual(ccm.schedule_flags(layout), ["--schedule", "interleaved"])
        self.assertEqual(ccm.schedule_flags((1, 2, 1, 1, 1, 1, "none", 0, False)),
                         ["--schedule", "1f1b"])
        self.assertEqual(ccm.schedule_flags((1, 1, 1, 1, 1, 1, "none", 0, False)), [])
        self.assertIn("--ep", ccm.layout_flags((1, 1, 2, 2, 1, 2, "none", 0, False)))


@unittest.skipIf((os.cpu_count() or 1) < 2, "the configurations below need 2 cores")
class Rounds(unittest.TestCase):
    """main() end to end against the fakes: a round over a 1 x 2 and a 2 x 1 configuration."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.tmp.name, "bin")
        os.makedirs(self.bin)
        for name, text in (("megac", FAKE_MEGAC), ("bench-core-round-trip", FAKE_ROUND_TRIP)):
            path = os.path.join(self.bin, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.work = os.path.join(self.tmp.name, "work")

    def tearDown(self):
        self.tmp.cleanup()

    def script(self, times, round_trips):
        with open(os.path.join(self.bin, "times"), "w") as f:
            f.write(" ".join(str(t) for t in times))
        with open(os.path.join(self.bin, "round_trips"), "w") as f:
            f.write(" ".join(str(t) for t in round_trips))

    def main(self, *extra):
        argv = ["cpu_cost_model.py", "--megac", os.path.join(self.bin, "megac"), "--workdir",
                self.work, "--only", "h512-1r2t", "--only", "h512-tp2"] + list(extra)
        out, err = io.StringIO(), io.StringIO()
        old = sys.argv
        sys.argv = argv
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                self.assertEqual(ccm.main(), 0)
        finally:
            sys.argv = old
        return out.getvalue(), err.getvalue()

    def saved(self):
        with open(os.path.join(self.work, "rounds.json")) as f:
            return json.load(f)

    def calls(self, verb):
        with open(os.path.join(self.bin, "calls.log")) as f:
            return [line for line in f if line.startswith(verb + " ")]

    def test_a_round_with_retakes_resumed_after_a_hold(self):
        # The first hold ends before any configuration: calibrated (round trip 60 ns), nothing run.
        self.script([], [60])
        _, err = self.main("--round", "1", "--repeats", "3", "--placement-retakes", "2",
                           "--hold-seconds", "1e-9")
        self.assertIn("stopped after", err)
        self.assertEqual(self.saved()["1"]["rows"], {})
        # Resumed: the same spec, no second calibration. Scripted, in call order: pass 1 (1r2t
        # near, tp2 far: a 1-thread run is never retaken), pass 2 (1r2t far, retaken far, then
        # near: stop; tp2), pass 3.
        self.script([100, 200, 130, 101, 102, 210, 99, 190],
                    [60, 370, 370, 380, 55, 60, 58, 58])
        out, err = self.main("--round", "1", "--repeats", "3", "--placement-retakes", "2")
        self.assertIn("resuming with cpu-machine-1.json", err)
        self.assertEqual(len(self.calls("calibrate")), 1)
        rows = self.saved()["1"]["rows"]
        one_by_two, tp2 = rows["h512-1r2t"], rows["h512-tp2"]
        r = lambda values: [round(v, 6) for v in values]
        self.assertEqual(r(one_by_two["runs_ms"]), [100, 130, 99])
        self.assertEqual(one_by_two["round_trip_ns"], [60, 370, 58])
        self.assertEqual([[round(ms, 6), t] for ms, t in one_by_two["retakes"]],
                         [[101, 380], [102, 55]])
        self.assertAlmostEqual(one_by_two["measured_ms"], 100)  # the scheduled runs' median only
        self.assertEqual(r(tp2["runs_ms"]), [200, 210, 190])
        self.assertNotIn("retakes", tp2)
        self.assertAlmostEqual(tp2["measured_ms"], 200)
        self.assertAlmostEqual(one_by_two["predicted_ms"], 100)
        # Predicted once per configuration, from the round's spec, with its ranks and threads.
        plans = self.calls("plan")
        self.assertEqual(len(plans), 2)
        self.assertTrue(all("cpu-machine-1.json:1x" in p for p in plans))
        self.assertTrue(any("--threads 2" in p and ":1x1 " in p for p in plans))
        self.assertTrue(any("--threads 1" in p and ":1x2 " in p for p in plans))
        trains = self.calls("train")
        self.assertEqual(len(trains), 8)
        self.assertTrue(all("--threads 2" in t and "--ranks" not in t
                            for t in trains if "hidden=512" in t and "--tp 1" in t))
        self.assertTrue(all("--ranks 2" in t for t in trains if "--tp 2" in t))
        # The report: per calibration 0% and -50%; near placement: nearest 55 ns, 2 of the 6
        # scheduled runs far; the 1 x 2 has 3 near runs (100, 99 and the retake's 102): median 100.
        self.assertIn("2 configurations, mean |error| 25.0%, max |error| 50.0%", out)
        self.assertIn("round 1: nearest 55 ns, 2 of 6 runs far apart, 2 multi-thread runs "
                      "retaken", out)
        self.assertIn("h512-1r2t              3 near of 3 runs + 2 retakes: median 100.0 ms, "
                      "error +0.0%", out)
        report, _ = self.main("--report")
        self.assertEqual(report, out)


class AgainstRealMegac(unittest.TestCase):
    """The bench's `megac plan` command line, as it builds it, accepted by the real megac."""

    def test_every_configuration_plans(self):
        if MEGAC is None:
            self.skipTest("no --megac")
        for config in ccm.CONFIGS:
            name, model, ranks, threads = config[:4]
            with self.subTest(config=name):
                layout = ccm.planned(MEGAC, "cpu", config)
                self.assertGreater(layout["step_time_s"], 0)

    def test_the_dropless_moe_with_a_routing_log(self):
        if MEGAC is None:
            self.skipTest("no --megac")
        config = {c[0]: c for c in ccm.CONFIGS}["mixtral-dp2-ep2"]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "mixtral-1r2t.jsonl"), "w") as f:
                f.write(json.dumps({"step": 1, "moe_load": [[300, 300, 212, 212]] * 2}) + "\n")
            measured = ccm.planned(MEGAC, "cpu", config, d)["step_time_s"]
        balanced = ccm.planned(MEGAC, "cpu", config)["step_time_s"]
        self.assertGreater(measured, balanced)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac")
    args, rest = parser.parse_known_args()
    MEGAC = args.megac
    unittest.main(argv=[sys.argv[0]] + rest)
