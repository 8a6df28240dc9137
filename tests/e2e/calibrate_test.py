#!/usr/bin/env python3
"""`megac calibrate --backend cpu --ranks 2 --quick` (labels e2e, mpi): a short calibration on two
MPI ranks writes a device spec that the planner loads.

- The file has every field of a device spec, devicesPerNode 2, efficiencies 1, and a calibration
  with every memory-bound kernel class at two sizes, GEMM, bandwidth, attention and all four
  collectives over 2 ranks: every number finite and positive.
- Sanity, not speed (timing never decides): a larger call of a kernel class takes longer than a
  smaller one, a 4 MiB collective longer than a 4-byte one, GEMM rates between 0.1 GFLOP/s and
  100 TFLOP/s.
- `megac plan --cluster FILE.json:1x2` searches layouts with it.
- One spec per machine (issue 34): `megac calibrate --backend cpu --quick` without --ranks writes
  the every-core-busy tables (ranks = cores, 1 thread, collectives over the cores) with
  occupancies "alone-1t" and "alone-Ct" (one rank alone, 1 and C = cores threads), each with
  every table; `megac plan --cluster SPEC:1xR --threads T` predicts from the layout's occupancy:
  with alone-1t's rates halved in a copy of the spec, a 1-rank, 1-thread layout's compute time
  grows (by 1.5-2.1x: GEMM and memory-bound time double, instruction overhead does not) while
  the 1-rank layout of every core's threads and the every-core layout predict the same.
- Bad flags are one-line errors naming the flag (exit 2); --backend cuda without a GPU says
  "no usable CUDA device".
Exit 77 (a skip) where mpirun is missing.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

KERNELS = ["elementwise", "copy", "transpose", "broadcast", "cast", "softmax", "softmax_grad",
           "gelu", "gelu_grad", "silu", "layer_norm", "layer_norm_grad", "rms_norm",
           "rms_norm_grad", "reduce", "embedding", "embedding_grad", "cross_entropy",
           "cross_entropy_grad", "adamw", "global_norm", "dropout", "rope"]
SCALARS = ["peakFlopsFp32", "peakFlopsBf16", "peakFlopsFp16", "memoryBytes", "memoryBandwidth",
           "devicesPerNode", "intraNodeBandwidth", "intraNodeLatency", "interNodeBandwidth",
           "interNodeLatency", "computeUnits", "gemmTileM", "gemmTileN", "gemmEfficiency",
           "memoryEfficiency", "linkEfficiency", "reservedBytes", "launchSeconds"]
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def megac(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)


def plan_compute(binary, spec, ranks, threads):
    """The compute seconds megac plan predicts for a pinned layout of `ranks` x `threads`."""
    model = "gpt:layers=2,hidden=128,heads=4,seq=64,vocab=256"
    run = megac(binary, "plan", "--model", model, "--cluster", "%s:1x%d" % (spec, ranks),
                "--threads", str(threads), "--global-batch", str(4 * ranks), "--tp", "1",
                "--pp", "1", "--dp", str(ranks), "--vpp", "1", "--micro-batch", "4", "--zero", "0",
                "--recompute", "none", "--precision", "fp32", "--json", "--no-compile",
                "--top", "1")
    check(run.returncode == 0, "megac plan %s:1x%d --threads %d runs (%s)"
          % (os.path.basename(spec), ranks, threads, run.stderr.strip()[:200]))
    return json.loads(run.stdout)["layouts"][0]["breakdown"]["compute_s"]


def machine_spec(args):
    cores = os.cpu_count()
    if cores < 2:
        print("note: 1 core: one occupancy, the machine spec is not checked")
        return
    path = os.path.join(args.workdir, "cpu-machine.json")
    if os.path.exists(path):
        os.remove(path)
    run = megac(args.megac, "calibrate", "--backend", "cpu", "--quick", "-o", path)
    print(run.stdout + run.stderr)
    check(run.returncode == 0 and os.path.exists(path),
          "megac calibrate --backend cpu --quick (no --ranks) wrote %s" % path)
    with open(path) as f:
        spec = json.load(f)
    cal = spec["calibration"]
    check(cal["ranks"] == cores and cal["cores"] == cores and cal["threads"] == 1 and
          spec["devicesPerNode"] == cores,
          "the top-level tables are every core busy: %d ranks x 1 thread" % cores)
    check(sorted({c["op"] for c in cal["comm"]}) == sorted(COLLECTIVES) and
          all(c["ranks"] == cores for c in cal["comm"]),
          "the collectives were measured over the %d cores" % cores)
    occupancies = {o["name"]: o for o in cal["occupancies"]}
    want = {"alone-1t": 1, "alone-%dt" % cores: cores}
    check(sorted(occupancies) == sorted(want) and
          all(occupancies[n]["ranks"] == 1 and occupancies[n]["threads"] == t
              for n, t in want.items()),
          "occupancies %s: one rank alone with 1 and %d threads" % (sorted(occupancies), cores))
    for name, o in occupancies.items():
        check(positive(o["instructionSeconds"]) and len(o["gemm"]) >= 5 and
              len(o["bandwidth"]) >= 5 and
              sorted({k["kernel"] for k in o["kernels"]}) == sorted(KERNELS) and o["attention"],
              "%s has every table (%d GEMM points, f32 peak %.1f GFLOP/s)"
              % (name, len(o["gemm"]), max(g["flopsPerSecond"] for g in o["gemm"]) / 1e9))
    check("one rank alone" in cal["source"] and "every core busy" in cal["source"],
          "the source says what was measured: %s" % cal["source"][:120])
    # The multi-thread occupancy records where its CPUs were (a cache line's round trip between
    # the first two CPUs it may use, before and after its sweeps), so a spec says which placement
    # its rates describe.
    placement = re.search(r"alone-%dt: CPUs \d+ and \d+ (\d+) / (\d+) ns apart" % cores,
                          cal["source"])
    check(placement is not None and all(int(v) > 0 for v in placement.groups()),
          "the source says how far apart the multi-thread rank's CPUs were: %s"
          % (placement.group(0) if placement else cal["source"][-200:]))

    # The layout's occupancy is the one the cost model reads: alone-1t's rates halved in a copy.
    slow = json.loads(json.dumps(spec))
    for o in slow["calibration"]["occupancies"]:
        if o["name"] == "alone-1t":
            for g in o["gemm"]:
                g["flopsPerSecond"] /= 2
            for b in o["bandwidth"]:
                b["bytesPerSecond"] /= 2
            for k in o["kernels"]:
                k["seconds"] = 2 * k["seconds"] - o["instructionSeconds"]
            for a in o["attention"]:
                a["forwardSeconds"] = 2 * a["forwardSeconds"] - o["instructionSeconds"]
                a["backwardSeconds"] = 2 * a["backwardSeconds"] - o["instructionSeconds"]
    slow_path = os.path.join(args.workdir, "cpu-machine-slow-1t.json")
    with open(slow_path, "w") as f:
        json.dump(slow, f)
    one = plan_compute(args.megac, path, 1, 1)
    one_slow = plan_compute(args.megac, slow_path, 1, 1)
    check(1.5 < one_slow / one < 2.1,
          "1 rank x 1 thread reads alone-1t: compute %.2f ms -> %.2f ms with its rates halved"
          % (one * 1e3, one_slow * 1e3))
    for ranks, threads in [(1, cores), (cores, 1)]:
        a, b = plan_compute(args.megac, path, ranks, threads), plan_compute(
            args.megac, slow_path, ranks, threads)
        check(a == b, "%d rank(s) x %d thread(s) reads other tables: %.2f ms either way"
              % (ranks, threads, a * 1e3))
    bad = megac(args.megac, "plan", "--model", "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128",
                "--cluster", path + ":1x1", "--global-batch", "4", "--threads", "0")
    check(bad.returncode == 2 and "--threads" in bad.stderr,
          "megac plan --threads 0: %s" % bad.stderr.strip())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    if shutil.which("mpirun") is None:
        print("skip: mpirun is missing (Debian: openmpi-bin)")
        return 77
    os.makedirs(args.workdir, exist_ok=True)
    spec_path = os.path.join(args.workdir, "cpu-calibrated.json")
    if os.path.exists(spec_path):
        os.remove(spec_path)

    run = megac(args.megac, "calibrate", "--backend", "cpu", "--ranks", "2", "--quick",
                "-o", spec_path)
    print(run.stdout + run.stderr)
    check(run.returncode == 0 and os.path.exists(spec_path),
          "megac calibrate --backend cpu --ranks 2 --quick wrote %s" % spec_path)
    groups = [l.split()[1] for l in run.stderr.splitlines() if l.startswith("calibrate: ")]
    check(groups == ["instruction", "gemm", "bandwidth", "kernels", "attention", "collectives"],
          "one progress line per group on stderr: %s" % groups)

    with open(spec_path) as f:
        spec = json.load(f)
    missing = [k for k in SCALARS if k not in spec]
    check(not missing and spec["name"].endswith("(calibrated)"),
          "every DeviceSpec field is written (%s)" % spec["name"])
    check(spec["devicesPerNode"] == 2 and spec["gemmEfficiency"] == 1 and
          spec["memoryEfficiency"] == 1 and spec["linkEfficiency"] == 1,
          "devicesPerNode 2 and efficiencies 1 (the tables hold what is achieved)")
    check(all(positive(spec[k]) for k in SCALARS if k not in ("reservedBytes", "launchSeconds")),
          "peaks, memory, bandwidths and latencies are positive")
    cal = spec["calibration"]
    check(cal["source"].startswith("megac calibrate --backend cpu --ranks 2") and
          cal["threads"] >= 1 and positive(cal["instructionSeconds"]),
          "source %r, %d thread(s), instruction %.3f us"
          % (cal["source"][:60], cal["threads"], cal["instructionSeconds"] * 1e6))

    gemm = cal["gemm"]
    check(len(gemm) >= 5 and all(positive(g["flopsPerSecond"]) and
                                 1e8 < g["flopsPerSecond"] < 1e14 for g in gemm),
          "%d GEMM points, %.1f..%.1f GFLOP/s" % (
              len(gemm), min(g["flopsPerSecond"] for g in gemm) / 1e9,
              max(g["flopsPerSecond"] for g in gemm) / 1e9))
    check({g["elementBytes"] for g in gemm} == {2, 4}, "GEMM in fp32 and bf16")
    check(abs(spec["peakFlopsFp32"] - max(g["flopsPerSecond"] for g in gemm
                                          if g["elementBytes"] == 4)) < 1,
          "peakFlopsFp32 is the best fp32 GEMM rate")

    bandwidth = cal["bandwidth"]
    check(len(bandwidth) >= 5 and all(positive(b["workingSetBytes"]) and
                                      positive(b["bytesPerSecond"]) for b in bandwidth),
          "%d bandwidth points, %.1f GB/s at %d MiB" % (
              len(bandwidth), bandwidth[-1]["bytesPerSecond"] / 1e9,
              bandwidth[-1]["workingSetBytes"] // (1 << 20)))
    check(spec["memoryBandwidth"] == bandwidth[-1]["bytesPerSecond"],
          "memoryBandwidth is the largest working set's rate")

    by_kernel = {}
    for k in cal["kernels"]:
        check(positive(k["bytes"]) and positive(k["seconds"]),
              "%s: %d bytes in %.1f us" % (k["kernel"], k["bytes"], k["seconds"] * 1e6))
        by_kernel.setdefault(k["kernel"], []).append(k)
    check(sorted(by_kernel) == sorted(KERNELS), "every kernel class is measured")
    for name, points in by_kernel.items():
        points.sort(key=lambda p: p["bytes"])
        check(len(points) >= 2 and points[-1]["bytes"] >= 32 * points[0]["bytes"] and
              points[-1]["seconds"] > points[0]["seconds"],
              "%s: the larger call (%d KiB) takes longer than the smaller (%d KiB)"
              % (name, points[-1]["bytes"] // 1024, points[0]["bytes"] // 1024))

    attention = cal["attention"]
    check(attention and all(a["causal"] and positive(a["forwardSeconds"]) and
                            positive(a["backwardSeconds"]) for a in attention),
          "%d causal attention shapes, forward and backward" % len(attention))

    comm = cal["comm"]
    check(sorted({c["op"] for c in comm}) == sorted(COLLECTIVES) and
          all(c["ranks"] == 2 and positive(c["bytes"]) and positive(c["seconds"]) for c in comm),
          "all five collectives over 2 ranks, %d points" % len(comm))
    for op in COLLECTIVES:
        points = sorted((c for c in comm if c["op"] == op), key=lambda c: c["bytes"])
        check(points[0]["bytes"] <= 8 and points[-1]["bytes"] >= 4 << 20 and
              points[-1]["seconds"] > points[0]["seconds"],
              "%s: %d B in %.1f us, %d MiB in %.1f us" % (
                  op, points[0]["bytes"], points[0]["seconds"] * 1e6,
                  points[-1]["bytes"] // (1 << 20), points[-1]["seconds"] * 1e6))

    # The planner reads it as a cluster of one node of 2 ranks.
    plan = megac(args.megac, "plan", "--model", "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128",
                 "--cluster", spec_path + ":1x2", "--global-batch", "8", "--json")
    check(plan.returncode == 0, "megac plan --cluster %s:1x2 runs (%s)"
          % (os.path.basename(spec_path), plan.stderr.strip()[:200]))
    layouts = json.loads(plan.stdout)["layouts"]
    check(layouts and all(l["tp"] * l["pp"] * l["dp"] == 2 and positive(l["step_time_s"])
                          for l in layouts),
          "%d layouts on 2 calibrated ranks, best %.4f s/step"
          % (len(layouts), layouts[0]["step_time_s"]))

    machine_spec(args)

    # Command-line errors: one line naming the flag, exit 2.
    out = os.path.join(args.workdir, "never.json")
    for flags, expected in [
            ([], "missing -o"),
            (["--ranks", "0", "-o", out], "--ranks: '0'"),
            (["--threads", "two", "-o", out], "--threads: 'two'"),
            (["--backend", "tpu", "-o", out], "--backend: 'tpu'"),
            (["--sweep", "-o", out], "unknown option --sweep"),
            (["-o", os.path.join(args.workdir, "no-such-dir", "x.json")], "-o: no directory")]:
        bad = megac(args.megac, "calibrate", *flags)
        check(bad.returncode == 2 and bad.stderr.count("\n") == 1 and expected in bad.stderr,
              "calibrate %s: %s" % (" ".join(flags), bad.stderr.strip()))
    cuda = megac(args.megac, "calibrate", "--backend", "cuda", "-o", out)
    if cuda.returncode == 0:
        print("note: a CUDA device is usable here; the no-device error is not checked")
    else:
        check(cuda.returncode == 2 and "no usable CUDA device" in cuda.stderr,
              "--backend cuda without a device: %s" % cuda.stderr.strip())
        check(not os.path.exists(out), "no spec is written on an error")
    return 0


if __name__ == "__main__":
    sys.exit(main())
