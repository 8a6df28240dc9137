#!/usr/bin/env python3
"""A dry run of scripts/device-check.sh (and device-preflight.sh, device-prepare.sh's size gate)
on a machine without a GPU: a fake GPU machine in a temporary folder.

The fake repository holds copies of the three scripts, a staged .device-carry/ whose programs are
bash stubs (each one's behaviour from FAKE_<NAME>: ok, fail, hang, hang-hard (ignores TERM),
nodevice (exit 77), badloss), a stub bench/torch_train_step_gpu.py, and a folder of fake commands
put first on PATH: nvidia-smi (prints FAKE_DRIVER), ldd (prints FAKE_LDD_MISSING as "not found"
for the programs named in FAKE_LDD_FOR), strip and megac for device-prepare.sh; no
compute-sanitizer (PATH keeps only folders without one, unless a case adds a fake one). The
deadline is shrunk through DEADLINE, RESERVE, KILL_GRACE, MIN_STEP and CAP_MAX, so each case
runs in seconds. Checked:
  - all stubs pass: exit 0, every step PASS in the order of value, the executor's first pass with
    MEGAC_CUDA_SYNC_EACH=1, the losses checked, racecheck SKIPPED-no-tool, from a compressed carry
    that device-prepare.sh packed (SKIP_BUILD=1) and device-check.sh unpacked;
  - a hung step (ignoring TERM) is killed at its limit (TIMEOUT) and later steps still run;
  - every step hanging: the script still ends before its deadline with the summary, the rest
    SKIPPED-no-time, a non-zero exit;
  - SIGTERM to the script's process group in the middle of a step: the summary is still printed
    (INTERRUPTED) and in $OUT/summary.txt;
  - a missing library (libnccl.so.2), an old driver (535) without compat, a runtime without a
    device: ends in under 10 s with exactly one "preflight: FATAL" line and the summary;
  - an old driver with a forward-compatibility libcuda in CUDA_COMPAT: goes on with it;
  - a failing test binary: FAIL with its failed test named in the summary, exit non-zero;
  - a first loss far from ln V: the loss check FAILs;
  - racecheck with a fake compute-sanitizer: run, its summary line reported;
  - device-prepare.sh over CARRY_LIMIT_BYTES even compressed: exit 1 naming the sizes.

  device_check_dry_run_test.py [--scripts DIR] [--workdir DIR] [-k NAME]

--scripts: the folder holding the scripts under test (default: this repository's scripts/), so a
deliberately broken copy can be shown to fail.
"""
import argparse
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

GTEST_PROGRAMS = ["cuda_kernels_elementwise_test", "cuda_kernels_nn_test", "cuda_fusion_gpu_test",
                  "cuda_executor_test", "nccl_comm_test"]
PROGRAMS = GTEST_PROGRAMS + ["bench-train-step", "megac-calibrate"]

STUB_COMMON = r'''#!/usr/bin/env bash
name=$(basename "$0")
var="FAKE_$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '_')"
mode=${!var:-ok}
case " $* " in
  *" --gtest_filter=Preflight."*)
    if [ "$mode" = nodevice ]; then
      echo "SKIP: no usable CUDA device: CUDA runtime: cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
      exit 77
    fi
    echo "device 0: Fake H200 (sm_90, 139.8 GiB, 132 SMs)"
    exit 0 ;;
esac
echo "$name $* (MEGAC_CUDA_SYNC_EACH=${MEGAC_CUDA_SYNC_EACH:-unset})"
hang() {
  if [ "$mode" = hang-hard ]; then trap '' TERM; fi
  while :; do sleep 1; done
}
case $mode in
  hang|hang-hard) hang ;;
  fail) echo "[  FAILED  ] Fake.ThisOneFails (1 ms)"; exit 1 ;;
  nodevice) echo "SKIP: no usable CUDA device"; exit 77 ;;
esac
sleep 0.2
'''

BENCH_STUB = STUB_COMMON + r'''
label="" json="" backend=""
while [ $# -gt 0 ]; do
  case $1 in
    --label) label=$2; shift ;;
    --json) json=$2; shift ;;
    --backend) backend=$2; shift ;;
  esac
  shift
done
case $label in
  small-*) first=4.8600 last=4.8600 ;;
  *) first=10.9800 last=10.9000 ;;
esac
[ "$mode" = badloss ] && first=2.0000 last=2.5000
echo "$label: 100.00 ms/step (median of 10), 1000 tokens/s; loss $first -> $last"
[ -n "$json" ] && echo "{\"label\": \"$label\", \"backend\": \"$backend\", \"ms_per_step\": 100.0, \"tokens_per_s\": 1000.0, \"model_tflops\": 1.0, \"mfu\": 0.001, \"first_loss\": $first, \"last_loss\": $last}" >>"$json"
exit 0
'''

CALIBRATE_STUB = STUB_COMMON + r'''
while [ $# -gt 0 ]; do
  [ "$1" = -o ] && echo '{"fake": true}' >"$2"
  shift
done
exit 0
'''

TORCH_STUB = r'''import json, os, sys, time
args = sys.argv[1:]
label = args[args.index("--label") + 1]
mode = os.environ.get("FAKE_TORCH", "ok")
print(f"torch stub {' '.join(args)}", flush=True)
if mode == "hang":
    while True:
        time.sleep(1)
if mode == "fail":
    sys.exit("torch_train_step_gpu.py: no CUDA device")
time.sleep(0.2)
print(f"{label}: 90.00 ms/step (median of 10), 1100 tokens/s; loss 10.9700 -> 10.9100")
with open(args[args.index("--json") + 1], "a") as out:
    out.write(json.dumps({"label": label, "backend": "torch", "ms_per_step": 90.0,
                          "tokens_per_s": 1100.0, "model_tflops": 1.1, "mfu": 0.001}) + "\n")
'''

FAKE_NVIDIA_SMI = r'''#!/usr/bin/env bash
[ -n "${FAKE_SMI_HANG:-}" ] && exec sleep 100
echo "${FAKE_DRIVER:-580.159.03}, NVIDIA H200, 143771 MiB"
'''

FAKE_LDD = r'''#!/usr/bin/env bash
name=$(basename "$1")
echo "	linux-vdso.so.1 (0x00007ffd0000)"
echo "	libcudart.so.13 => /usr/local/cuda/lib64/libcudart.so.13 (0x00007f0000)"
if [ -n "${FAKE_LDD_MISSING:-}" ] && [[ " ${FAKE_LDD_FOR:-} " == *" $name "* ]]; then
  echo "	${FAKE_LDD_MISSING} => not found"
else
  echo "	libnccl.so.2 => /usr/local/cuda/lib64/libnccl.so.2 (0x00007f0000)"
fi
echo "	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0000)"
'''

FAKE_SANITIZER = r'''#!/usr/bin/env bash
echo "========= COMPUTE-SANITIZER"
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ] || [ "$1" = racecheck ]; do
  case $1 in --tool|--error-exitcode) shift ;; esac
  shift
done
"$@"
rc=$?
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
exit $rc
'''

FAKE_MEGAC = r'''#!/usr/bin/env bash
while [ $# -gt 0 ]; do
  if [ "$1" = -o ]; then printf 'fake plan %s\n' "$2" >"$2"; fi
  shift
done
'''

# The steps in the order of value (issue 27).
ORDER = ["preflight", "kernels-elementwise", "kernels-nn", "kernels-attention-flash",
         "kernels-attention-chunked", "kernels-fused", "nccl-overlap",
         "executor-sync-each",
         "train-step-cpu", "train-step-cuda", "train-step cuda vs cpu", "loss small-gpt",
         "executor-train-steps", "nccl", "calibrate-quick", "bench-megac-gpt2-124m",
         "loss megac-gpt2-124m", "bench-torch-gpt2-124m", "loss torch-gpt2-124m",
         "bench-megac-gpt-1.3b", "loss megac-gpt-1.3b", "profile-megac-gpt-1.3b",
         "bench-torch-gpt-1.3b",
         "loss torch-gpt-1.3b", "bench-torch-readme-1.7b", "loss torch-readme-1.7b",
         "racecheck-attention"]


def write(path, text, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class Machine:
    """A fake GPU machine: a repository root with the scripts, a stage, fake commands."""

    def __init__(self, base, scripts, name):
        self.root = os.path.join(base, name)
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(os.path.join(self.root, "scripts"))
        for s in ("device-check.sh", "device-preflight.sh", "device-prepare.sh"):
            shutil.copy(os.path.join(scripts, s), os.path.join(self.root, "scripts", s))
        write(os.path.join(self.root, "bench", "torch_train_step_gpu.py"), TORCH_STUB)
        self.fakebin = os.path.join(self.root, "fakebin")
        write(os.path.join(self.fakebin, "nvidia-smi"), FAKE_NVIDIA_SMI, True)
        write(os.path.join(self.fakebin, "ldd"), FAKE_LDD, True)
        write(os.path.join(self.fakebin, "strip"), "#!/bin/sh\nexit 0\n", True)
        self.out = os.path.join(self.root, "out")
        self.work = os.path.join(self.root, "work")

    def stage(self, where=None):
        """The staged layout device-prepare.sh makes (bin, lib, plans), plain."""
        where = where or os.path.join(self.root, ".device-carry")
        for p in GTEST_PROGRAMS:
            write(os.path.join(where, "bin", p), STUB_COMMON + "exit 0\n", True)
        write(os.path.join(where, "bin", "bench-train-step"), BENCH_STUB, True)
        write(os.path.join(where, "bin", "megac-calibrate"), CALIBRATE_STUB, True)
        os.makedirs(os.path.join(where, "lib"), exist_ok=True)
        for plan in ("gpt-train-f32", "gpt-train-bf16", "gpt2-124m-bf16", "gpt-1.3b-bf16"):
            write(os.path.join(where, "plans", plan + ".mplan"), "fake plan\n")

    def env(self, **extra):
        # Keep the folders of the ordinary tools, but none holding a real GPU tool.
        path = [self.fakebin]
        for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
            if d and not any(os.path.exists(os.path.join(d, t))
                             for t in ("compute-sanitizer", "nvidia-smi")):
                path.append(d)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
        env.update(PATH=os.pathsep.join(path), OUT=self.out, WORK=self.work,
                   CUDA_COMPAT=os.path.join(self.root, "no-compat"),
                   DEADLINE="30", RESERVE="4", KILL_GRACE="1", MIN_STEP="1", CAP_MAX="10",
                   PYTHONDONTWRITEBYTECODE="1")
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def check(self, timeout=60, term_after=None, **extra):
        """Runs device-check.sh; returns (rc, output, seconds)."""
        start = time.monotonic()
        # Output to a file, not a pipe: a process the script leaves behind cannot hold it open.
        with tempfile.TemporaryFile("w+") as output:
            proc = subprocess.Popen(["bash", os.path.join(self.root, "scripts", "device-check.sh")],
                                    cwd=self.root, env=self.env(**extra), stdout=output,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
            if term_after is not None:
                time.sleep(term_after)
                os.killpg(proc.pid, signal.SIGTERM)  # the script and its log's tee
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            secs = time.monotonic() - start
            kill_session(proc.pid)  # anything left (a step is its own process group)
            proc.wait()
            output.seek(0)
            out = output.read()
            if rc is None:
                out += f"\n[dry-run test: the script did not end within {timeout} s; killed]\n"
            return rc, out, secs


def kill_session(sid):
    """SIGKILL every process of the session this test started (its leader's pid is sid)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after ")": state, ppid, pgrp, session
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def summary_rows(out):
    """{step: (status, note)} from the printed summary (the last one)."""
    at = out.rfind("device-check summary:")
    if at < 0:
        return None
    rows = {}
    for line in out[at:].splitlines()[2:]:
        m = re.match(r"(\S.{0,33}?)\s+(PASS|FAIL|TIMEOUT|SKIPPED-\S+|INTERRUPTED|RUNNING)\s+(\S+)"
                     r"\s+(\S+)\s+(\S+)\s*(.*)$", line)
        if not m:
            break
        rows[m.group(1).strip()] = (m.group(2), m.group(6))
    return rows


class Failure(Exception):
    pass


def expect(cond, what, out=""):
    if not cond:
        raise Failure(what + ("\n--- output ---\n" + out[-4000:] if out else ""))


def expect_summary(out):
    rows = summary_rows(out)
    expect(rows is not None and "preflight" in rows, "no summary printed", out)
    expect(re.search(r"device-check: \d+ of \d+ steps and checks did not pass; exit \d+", out),
           "no final verdict line", out)
    return rows


def expect_one_fatal(out, pattern):
    fatal = [line for line in out.splitlines() if line.startswith("preflight: FATAL:")]
    expect(len(fatal) == 1, f"{len(fatal)} 'preflight: FATAL' lines, not one", out)
    expect(re.search(pattern, fatal[0]), f"the fatal line does not say /{pattern}/: {fatal[0]}",
           out)


# --- the cases ------------------------------------------------------------------------------

def case_all_pass(m, base):
    """device-prepare.sh packs a stage over the limit; device-check.sh unpacks it and all pass."""
    build = os.path.join(base, "fake-build")
    shutil.rmtree(build, ignore_errors=True)
    m.stage(where=build)
    write(os.path.join(m.fakebin, "megac"), FAKE_MEGAC, True)
    env = m.env(SKIP_BUILD=1, BUILD_DIR=build, MEGAC=os.path.join(m.fakebin, "megac"),
                CARRY_LIMIT_BYTES=20000)
    p = subprocess.run(["bash", "scripts/device-prepare.sh"], cwd=m.root, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    expect(p.returncode == 0, f"device-prepare.sh exited {p.returncode}", p.stdout)
    expect(os.path.exists(os.path.join(m.root, ".device-carry", "carry.tar.xz")) and
           not os.path.exists(os.path.join(m.root, ".device-carry", "bin")),
           "the stage was not packed into carry.tar.xz", p.stdout)
    rc, out, secs = m.check()
    rows = expect_summary(out)
    expect(rc == 0, f"exit {rc}, not 0", out)
    expect(rows.get("unpack", ("",))[0] == "PASS", "the carry was not unpacked", out)
    steps = [s for s in rows if s != "unpack"]
    expect(steps == ORDER, f"steps {steps}, not in the order {ORDER}", out)
    bad = {s: v for s, v in rows.items()
           if v[0] != "PASS" and not (s == "racecheck-attention" and v[0] == "SKIPPED-no-tool")}
    expect(not bad, f"not passed: {bad}", out)
    expect(re.search(r"cuda_executor_test --gtest_brief=1 \(MEGAC_CUDA_SYNC_EACH=1\)", out),
           "the executor's first pass did not set MEGAC_CUDA_SYNC_EACH=1", out)
    expect(re.search(r"gpt2-124m: megac / PyTorch tokens/s = 0\.91", out),
           "no megac/PyTorch ratio", out)
    expect(os.path.exists(os.path.join(m.out, "summary.txt")), "no $OUT/summary.txt")
    return f"exit 0, {len(rows)} rows PASS, {secs:.1f} s"


def case_hang_killed(m, base):
    """A step that ignores TERM is killed at its limit; the later steps still run."""
    m.stage()
    rc, out, secs = m.check(FAKE_cuda_kernels_nn_test="hang-hard", CAP_MAX=3, KILL_GRACE=1)
    rows = expect_summary(out)
    # The program runs three times: all its tests, then the attention tests on the flash
    # kernels and on the GEMM path in small chunks.
    for name in ("kernels-nn", "kernels-attention-flash", "kernels-attention-chunked"):
        expect(rows[name][0] == "TIMEOUT", f"{name}: {rows[name]}", out)
    expect(rows["kernels-fused"][0] == "PASS" and rows["bench-torch-gpt-1.3b"][0] == "PASS",
           "the steps after the hung one did not run", out)
    expect(rc == 3, f"exit {rc}, not 3 (three steps timed out)", out)
    expect(secs < 30, f"took {secs:.1f} s, past its 30 s deadline", out)
    return f"kernels-nn x3 TIMEOUT at 3 s (+1 s kill), the rest PASS, exit 3, {secs:.1f} s"


def case_deadline(m, base):
    """Every step hangs, caps as on the device: the deadline ends the run, summary printed."""
    m.stage()
    hang = {f"FAKE_{p.replace('-', '_')}": "hang" for p in PROGRAMS}
    deadline = 12
    rc, out, secs = m.check(DEADLINE=deadline, RESERVE=3, KILL_GRACE=1, CAP_MAX=600,
                            FAKE_TORCH="hang", timeout=40, **hang)
    rows = expect_summary(out)
    expect(rc not in (None, 0), f"exit {rc}", out)
    expect(secs < deadline, f"took {secs:.1f} s, past its {deadline} s deadline", out)
    expect(rows["kernels-elementwise"][0] == "TIMEOUT", str(rows["kernels-elementwise"]), out)
    expect(rows["bench-torch-gpt-1.3b"][0] == "SKIPPED-no-time", str(rows), out)
    expect(rows["racecheck-attention"][0] == "SKIPPED-no-tool", str(rows), out)
    return f"deadline {deadline} s: ended in {secs:.1f} s, exit {rc}, TIMEOUT then SKIPPED-no-time"


def case_sigterm(m, base):
    """TERM to the script's process group (its log's tee too) in the middle of a hung step: the
    summary is still printed, and written to $OUT/summary.txt."""
    m.stage()
    rc, out, secs = m.check(FAKE_cuda_kernels_elementwise_test="hang", CAP_MAX=60,
                            term_after=3)
    rows = expect_summary(out)
    expect(rows["kernels-elementwise"][0] == "INTERRUPTED", str(rows), out)
    expect(rc not in (None, 0), f"exit {rc}", out)
    expect(secs < 8, f"took {secs:.1f} s after a TERM at 3 s", out)
    expect("INTERRUPTED" in open(os.path.join(m.out, "summary.txt")).read(),
           "$OUT/summary.txt does not show the interrupted step", out)
    return f"TERM at 3 s: summary printed, kernels-elementwise INTERRUPTED, exit {rc}"


def fast_fatal(m, pattern, **extra):
    m.stage()
    rc, out, secs = m.check(**extra)
    expect_summary(out)
    expect_one_fatal(out, pattern)
    expect(rc not in (None, 0), f"exit {rc}", out)
    expect(secs < 10, f"took {secs:.1f} s, not under 10", out)
    expect("kernels-elementwise" not in summary_rows(out), "steps ran after a fatal preflight", out)
    line = [x for x in out.splitlines() if x.startswith("preflight: FATAL:")][0]
    return f"{secs:.1f} s, exit {rc}: {line[:150]}"


def case_missing_library(m, base):
    return fast_fatal(m, r"libnccl\.so\.2 \(needed by bench-train-step, cuda_executor_test\)",
                      FAKE_LDD_MISSING="libnccl.so.2",
                      FAKE_LDD_FOR="bench-train-step cuda_executor_test")


def case_old_driver(m, base):
    return fast_fatal(m, r"driver 535\.104\.05 .*older than CUDA 13 needs \(>= 580\)",
                      FAKE_DRIVER="535.104.05")


def case_no_device(m, base):
    return fast_fatal(m, r"cudaErrorInsufficientDriver",
                      FAKE_cuda_kernels_elementwise_test="nodevice")


def case_old_driver_compat(m, base):
    """An old driver with a forward-compatibility libcuda: the run goes on with it."""
    m.stage()
    compat = os.path.join(m.root, "compat")
    write(os.path.join(compat, "libcuda.so.580.65.06"), "")
    rc, out, secs = m.check(FAKE_DRIVER="535.104.05", CUDA_COMPAT=compat, CAP_MAX=2)
    rows = expect_summary(out)
    expect(rows["preflight"][0] == "PASS", str(rows["preflight"]), out)
    expect("trying the forward-compatibility libcuda 580.65.06" in out, "compat not named", out)
    env_file = open(os.path.join(m.work, "preflight.env")).read()
    expect(compat in env_file, f"{compat} not on LD_LIBRARY_PATH: {env_file}", out)
    return "preflight PASS with the compat libcuda first on LD_LIBRARY_PATH"


def case_failing_binary(m, base):
    m.stage()
    rc, out, secs = m.check(FAKE_cuda_kernels_elementwise_test="fail",
                            FAKE_cuda_executor_test="nodevice")
    rows = expect_summary(out)
    expect(rows["kernels-elementwise"][0] == "FAIL" and "Fake.ThisOneFails" in
           rows["kernels-elementwise"][1], str(rows["kernels-elementwise"]), out)
    expect(rows["executor-sync-each"][0] == "FAIL" and "77" in rows["executor-sync-each"][1],
           str(rows["executor-sync-each"]), out)
    expect(rows["kernels-nn"][0] == "PASS", "the steps after a failure did not run", out)
    expect(rc == 3, f"exit {rc}, not 3 (two binaries and one executor step failed)", out)
    return f"FAIL named (Fake.ThisOneFails; exit 77), exit {rc}"


def case_bad_loss(m, base):
    m.stage()
    rc, out, secs = m.check(FAKE_bench_train_step="badloss", FAKE_TORCH="fail")
    rows = expect_summary(out)
    expect(rows["loss megac-gpt2-124m"][0] == "FAIL" and "ln V" in rows["loss megac-gpt2-124m"][1],
           str(rows.get("loss megac-gpt2-124m")), out)
    expect(rows["bench-torch-gpt2-124m"][0] == "FAIL", "the PyTorch exit code was not counted",
           out)
    expect(rc not in (None, 0), f"exit {rc}", out)
    return f"first loss 2.0 vs ln V 10.82: FAIL; torch exit 1: FAIL; exit {rc}"


def case_racecheck(m, base):
    m.stage()
    write(os.path.join(m.fakebin, "compute-sanitizer"), FAKE_SANITIZER, True)
    rc, out, secs = m.check(RACECHECK_MIN=1, DEADLINE=60)
    rows = expect_summary(out)
    expect(rows["racecheck-attention"][0] == "PASS" and "RACECHECK SUMMARY: 0 hazards" in
           rows["racecheck-attention"][1], str(rows["racecheck-attention"]), out)
    expect(rc == 0, f"exit {rc}", out)
    return "racecheck ran, its summary in the table"


def case_prepare_over_limit(m, base):
    build = os.path.join(base, "fake-build-big")
    shutil.rmtree(build, ignore_errors=True)
    m.stage(where=build)
    with open(os.path.join(build, "bin", "bench-train-step"), "ab") as f:
        f.write(os.urandom(300000))  # incompressible
    write(os.path.join(m.fakebin, "megac"), FAKE_MEGAC, True)
    env = m.env(SKIP_BUILD=1, BUILD_DIR=build, MEGAC=os.path.join(m.fakebin, "megac"),
                CARRY_LIMIT_BYTES=200000)
    p = subprocess.run(["bash", "scripts/device-prepare.sh"], cwd=m.root, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    expect(p.returncode == 1, f"device-prepare.sh exited {p.returncode}, not 1", p.stdout)
    expect(re.search(r"FAILED: the carry is 0\.\d MiB \(\d+ bytes; plain 0\.\d MiB\), over the "
                     r"0\.2 MiB limit", p.stdout), "the failure does not name the sizes", p.stdout)
    expect(re.search(r"MiB\s+\S*bench-train-step", p.stdout), "no size breakdown", p.stdout)
    return "exit 1: " + [x for x in p.stdout.splitlines() if "FAILED" in x][0]


def case_skip_torch(m, base):
    """SKIP_TORCH=1: the PyTorch runs are SKIPPED-asked, not failures; megac's still run."""
    m.stage()
    rc, out, secs = m.check(SKIP_TORCH=1, FAKE_TORCH="fail")
    rows = expect_summary(out)
    for name in ("bench-torch-gpt2-124m", "bench-torch-gpt-1.3b", "bench-torch-readme-1.7b"):
        expect(rows[name][0] == "SKIPPED-asked", f"{name}: {rows[name]}", out)
        expect(f"loss {name[6:]}" not in rows, f"a loss check of the skipped {name}", out)
    expect(rows["bench-megac-gpt-1.3b"][0] == "PASS", "megac's run did not run", out)
    expect(rc == 0, f"exit {rc}, not 0 (skipping on request fails nothing)", out)
    return f"torch runs SKIPPED-asked, exit 0, {secs:.1f} s"

CASES = [case_all_pass, case_hang_killed, case_deadline, case_sigterm, case_missing_library,
         case_old_driver, case_no_device, case_old_driver_compat, case_failing_binary,
         case_bad_loss, case_racecheck, case_prepare_over_limit, case_skip_torch]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scripts", default=os.path.join(REPO, "scripts"))
    parser.add_argument("--workdir")
    parser.add_argument("-k", help="run only the cases whose name contains this")
    args = parser.parse_args()
    if shutil.which("xz") is None or shutil.which("timeout") is None:
        print("SKIP: no xz or timeout here")
        return 77
    base = args.workdir or tempfile.mkdtemp(prefix="device-check-dry-run-")
    os.makedirs(base, exist_ok=True)
    failures = 0
    for case in CASES:
        name = case.__name__[len("case_"):]
        if args.k and args.k not in name:
            continue
        m = Machine(base, args.scripts, name)
        try:
            print(f"ok   {name}: {case(m, base)}", flush=True)
        except (Failure, subprocess.TimeoutExpired, KeyError, OSError) as e:
            failures += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    print(f"{failures} case(s) failed" if failures else "all cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
