"""`megac train` stopped by a scheduler and resumed: save on signal and on time, retention, the
save folder's lock.

A tiny GPT in fp64 on examples/tiny-corpus.npy, 4 ranks (tp 2 x pp 2: every rank writes its own
shard files); the uninterrupted 4-rank run's final weights (--save-weights) are the oracle.
  ranks_sigterm:  SIGTERM to a `megac train --ranks 4` launcher mid-run: it exits 0 after the
                  ranks agree on a step N, with step-N holding every rank's files (meta.json
                  lists model and optimizer files of ranks 0..3), `latest` = N, no other step,
                  no temporary folder, no lock left; `--load` resumes at N+1 and the final
                  weights are byte-identical to the uninterrupted run's.
  mpirun_sigterm: the same for `mpirun -np 4 megac train` started directly by
                  examples/sbatch-train.sh (a scheduler script that turns its SIGTERM into
                  SIGUSR2 for mpirun); the script, run again, resumes from the checkpoint.
  duration:       --exit-duration-in-mins 0.01 under --ranks 4: stops and saves at one step
                  before the end (the time limit named), resumes byte-identical.
  keep_last:      --save-interval 2 --keep-last 2 over 12 steps (6 saves) leaves step-10 and
                  step-12 only; with --keep-steps 4, step-4 too; stale step-N.tmp folders of
                  failed saves (this and older megac's names) are removed by the next save.
  lock:           a second run saving into a folder a live run holds is refused (exit 1),
                  naming the holder's host and pid; the first, one rank without mpirun, then
                  stops on SIGTERM with a checkpoint and exit 0.
  stale_lock:     a lock left by a process that has ended is taken over with a warning.
  cli_errors:     --keep-last without --save, --keep-steps without --keep-last, a bad step list,
                  a non-positive duration, both signal-handler flags.

usage: stop_resume_test.py --megac build/bin/megac --workdir DIR
Exits 77 (skip) when mpirun is missing, after the one-rank cases pass.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = "gpt:layers=2,hidden=16,heads=4,seq=64,vocab=256"
DATA = os.path.join(ROOT, "examples", "tiny-corpus.npy")
STEPS = 300  # long enough that a signal after step 3 lands mid-run
LAYOUT = ["--tp", "2", "--pp", "2", "--micro-batch", "1"]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def train_args(steps=STEPS):
    return ["train", "--model", SPEC, "--data", DATA, "--steps", str(steps),
            "--global-batch", "4", "--lr", "1e-2", "--precision", "fp64", "--threads", "1"]


def run(argv, expect_rc=0, env=None):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError("exit %d, want %d: %s\n%s%s" % (proc.returncode, expect_rc,
                                                            " ".join(argv), proc.stdout,
                                                            proc.stderr))
    return proc


def logged_steps(log):
    try:
        with open(log) as f:
            return [json.loads(line)["step"] for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def signal_mid_run(argv, log, target_of, sig=signal.SIGTERM, env=None):
    """Starts argv, sends `sig` to target_of(proc) once 3 steps are logged; returns
    (returncode, stdout, stderr)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    deadline = time.time() + 300
    sent = False
    while time.time() < deadline and proc.poll() is None:
        if len(logged_steps(log)) >= 3:
            os.kill(target_of(proc), sig)
            sent = True
            break
        time.sleep(0.01)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        try:  # the job's own session: no rank outlives the test
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    check(sent, "the run ended (rc %s) before the signal was sent:\n%s%s" % (proc.returncode,
                                                                          out, err))
    return proc.returncode, out, err


def check_one_step_checkpoint(ckpt, out, err, why, what, first=3):
    """The stopped run's checkpoint: one complete step-N written by all 4 ranks; returns N."""
    check("stopped after step " in out, "%s: no stop line in:\n%s%s" % (what, out, err))
    line = [l for l in out.splitlines() if l.startswith("stopped after step ")][-1]
    step = int(line.split()[3])
    check(why in line, "%s: the stop line does not say '%s': %s" % (what, why, line))
    check(first <= step < STEPS, "%s: stopped at step %d" % (what, step))
    entries = sorted(os.listdir(ckpt))
    check(entries == ["latest", "step-%d" % step],
          "%s: the folder holds %s, want latest and step-%d only" % (what, entries, step))
    with open(os.path.join(ckpt, "latest")) as f:
        check(f.read().strip() == str(step), "%s: latest is not %d" % (what, step))
    meta = json.load(open(os.path.join(ckpt, "step-%d" % step, "meta.json")))
    check(meta["step"] == step, "%s: meta.json step %s" % (what, meta["step"]))
    for kind in ("model", "optimizer"):
        for rank in range(4):
            name = "%s-rank-%05d.safetensors" % (kind, rank)
            check(name in meta["files"], "%s: meta.json lists no %s" % (what, name))
            check(os.path.exists(os.path.join(ckpt, "step-%d" % step, name)),
                  "%s: %s missing" % (what, name))
    return step


def check_resumed(log, weights, oracle, step, what):
    got = logged_steps(log)
    check(got and got[0] == step + 1 and got[-1] == STEPS,
          "%s: the resumed run logged steps %s..%s, want %d..%d" %
          (what, got[:1], got[-1:], step + 1, STEPS))
    with open(weights, "rb") as a, open(oracle, "rb") as b:
        check(a.read() == b.read(),
              "%s: final weights differ from the uninterrupted run's" % what)


def ranks_sigterm(megac, work, oracle):
    out_dir = os.path.join(work, "ranks_sigterm")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    ckpt, log = os.path.join(out_dir, "ckpt"), os.path.join(out_dir, "log.jsonl")
    argv = [megac] + train_args() + LAYOUT + ["--ranks", "4", "--save", ckpt, "--log-json", log]
    rc, out, err = signal_mid_run(argv, log, lambda p: p.pid)
    check(rc == 0, "ranks_sigterm: exit %d:\n%s%s" % (rc, out, err))
    # The launcher's SIGTERM reaches the ranks as SIGUSR2.
    step = check_one_step_checkpoint(ckpt, out, err, "on SIGUSR2", "ranks_sigterm")
    log2, weights = os.path.join(out_dir, "resume.jsonl"), os.path.join(out_dir, "final.st")
    run([megac] + train_args() + LAYOUT + ["--ranks", "4", "--load", ckpt, "--save", ckpt,
                                           "--log-json", log2, "--save-weights", weights])
    check_resumed(log2, weights, oracle, step, "ranks_sigterm")
    print("ok ranks_sigterm: stopped at step %d with every rank's files, resumed bit-identical"
          % step)


def mpirun_sigterm(megac, work, oracle):
    out_dir = os.path.join(work, "mpirun_sigterm")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    ckpt, log = os.path.join(out_dir, "ckpt"), os.path.join(out_dir, "log.jsonl")
    env = dict(os.environ, MEGAC=megac, RANKS="4", CKPT=ckpt,
               MPIRUN_FLAGS="--oversubscribe" + (" --allow-run-as-root"
                                                 if os.geteuid() == 0 else ""))
    script = os.path.join(ROOT, "examples", "sbatch-train.sh")
    argv = ["bash", script] + train_args()[1:] + LAYOUT + ["--log-json", log]
    rc, out, err = signal_mid_run(argv, log, lambda p: p.pid, env=env)
    check(rc == 0, "mpirun_sigterm: exit %d:\n%s%s" % (rc, out, err))
    step = check_one_step_checkpoint(ckpt, out, err, "on SIGUSR2", "mpirun_sigterm")
    # The same script again resumes from ckpt/latest.
    log2, weights = os.path.join(out_dir, "resume.jsonl"), os.path.join(out_dir, "final.st")
    run(["bash", script] + train_args()[1:] + LAYOUT +
        ["--log-json", log2, "--save-weights", weights], env=env)
    check_resumed(log2, weights, oracle, step, "mpirun_sigterm")
    print("ok mpirun_sigterm: mpirun -np 4 under a scheduler script stopped at step %d, the "
          "script resumed it bit-identical" % step)


def duration(megac, work, oracle):
    out_dir = os.path.join(work, "duration")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    ckpt, log = os.path.join(out_dir, "ckpt"), os.path.join(out_dir, "log.jsonl")
    proc = run([megac] + train_args() + LAYOUT + ["--ranks", "4", "--save", ckpt,
                                                  "--exit-duration-in-mins", "0.01",
                                                  "--log-json", log])
    step = check_one_step_checkpoint(ckpt, proc.stdout, proc.stderr,
                                     "on the time limit of 0.01 minutes", "duration", first=1)
    log2, weights = os.path.join(out_dir, "resume.jsonl"), os.path.join(out_dir, "final.st")
    run([megac] + train_args() + LAYOUT + ["--ranks", "4", "--load", ckpt, "--log-json", log2,
                                           "--save-weights", weights])
    check_resumed(log2, weights, oracle, step, "duration")
    # On a loaded machine 0.6 s may pass before step 1 ends: any step before the last will do.
    print("ok duration: stopped at step %d after 0.6 s, resumed bit-identical" % step)


def keep_last(megac, work):
    out_dir = os.path.join(work, "keep_last")
    shutil.rmtree(out_dir, ignore_errors=True)
    for extra, want in (([], ["step-10", "step-12"]),
                        (["--keep-steps", "4"], ["step-10", "step-12", "step-4"])):
        ckpt = os.path.join(out_dir, "ckpt%d" % len(extra))
        # What failed saves left: a temporary folder of an older megac and one of another run.
        for stale in ("step-7.tmp", "step-3.tmp-otherhost-4242"):
            os.makedirs(os.path.join(ckpt, stale))
            open(os.path.join(ckpt, stale, "model-rank-00000.safetensors"), "w").close()
        run([megac] + train_args(12) + ["--micro-batch", "2", "--save", ckpt, "--save-interval",
                                        "2", "--keep-last", "2"] + extra)
        entries = sorted(os.listdir(ckpt))
        check(entries == ["latest"] + want,
              "keep_last %s: the folder holds %s, want %s" % (extra, entries, ["latest"] + want))
        for step in want:
            check(os.path.exists(os.path.join(ckpt, step, "meta.json")),
                  "keep_last: %s is incomplete" % step)
    print("ok keep_last: 6 saves kept step-10 and step-12 (and step-4 with --keep-steps 4); "
          "stale .tmp folders removed")


def lock(megac, work):
    out_dir = os.path.join(work, "lock")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    ckpt, log = os.path.join(out_dir, "ckpt"), os.path.join(out_dir, "log.jsonl")
    argv = [megac] + train_args(100000) + ["--micro-batch", "2", "--save", ckpt,
                                           "--log-json", log]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and first.poll() is None and len(logged_steps(log)) < 2:
            time.sleep(0.01)
        check(first.poll() is None, "lock: the first run ended early")
        second = run([megac] + train_args(4) + ["--micro-batch", "2", "--save", ckpt],
                     expect_rc=1)
        want = "host %s, pid %d" % (socket.gethostname(), first.pid)
        check("another run is saving into '%s'" % ckpt in second.stderr and want in second.stderr,
              "lock: the second writer's error does not name the holder (%s):\n%s" %
              (want, second.stderr))
        first.send_signal(signal.SIGTERM)  # one rank without mpirun handles SIGTERM itself
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    check(first.returncode == 0, "lock: the first run exited %d on SIGTERM:\n%s%s" %
          (first.returncode, out, err))
    check("on SIGTERM: saved" in out, "lock: no stop line naming SIGTERM:\n%s" % out)
    check(not os.path.exists(os.path.join(ckpt, "save.lock")), "lock: the lock outlived the run")
    print("ok lock: second writer refused naming %s; the first saved on SIGTERM and exited 0"
          % want)


def stale_lock(megac, work):
    out_dir = os.path.join(work, "stale_lock")
    shutil.rmtree(out_dir, ignore_errors=True)
    ckpt = os.path.join(out_dir, "ckpt")
    os.makedirs(ckpt)
    gone = subprocess.Popen(["true"])
    gone.wait()
    with open(os.path.join(ckpt, "save.lock"), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": gone.pid, "start_ticks": 1}, f)
    proc = run([megac] + train_args(2) + ["--micro-batch", "2", "--save", ckpt])
    check("took over the stale save folder lock" in proc.stderr and
          "pid %d" % gone.pid in proc.stderr,
          "stale_lock: no take-over message naming pid %d:\n%s" % (gone.pid, proc.stderr))
    check(sorted(os.listdir(ckpt)) == ["latest", "step-2"],
          "stale_lock: the folder holds %s" % sorted(os.listdir(ckpt)))
    print("ok stale_lock: the lock of ended pid %d taken over with a warning" % gone.pid)


def cli_errors(megac):
    base = [megac] + train_args(2) + ["--micro-batch", "2"]
    for extra, message in (
            (["--keep-last", "2"], "--keep-last and --keep-steps need --save DIR"),
            (["--save", "x", "--keep-steps", "3"], "--keep-steps applies with --keep-last N"),
            (["--save", "x", "--keep-last", "1", "--keep-steps", "3,a"],
             "--keep-steps: 'a' is not a step number"),
            (["--exit-duration-in-mins", "0"], "--exit-duration-in-mins"),
            (["--exit-signal-handler", "--no-exit-signal-handler"],
             "give either --exit-signal-handler or --no-exit-signal-handler")):
        proc = run(base + extra, expect_rc=2)
        check(message in proc.stderr, "cli_errors %s: got %r" % (extra, proc.stderr))
    print("ok cli_errors")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    megac = os.path.abspath(args.megac)
    work = os.path.abspath(args.workdir)
    os.makedirs(work, exist_ok=True)
    cli_errors(megac)
    keep_last(megac, work)
    lock(megac, work)
    stale_lock(megac, work)
    if not shutil.which("mpirun"):
        print("skip: mpirun not found (the multi-rank cases need Open MPI)")
        return SKIP
    oracle = os.path.join(work, "uninterrupted.safetensors")
    run([megac] + train_args() + LAYOUT + ["--ranks", "4", "--save-weights", oracle])
    ranks_sigterm(megac, work, oracle)
    mpirun_sigterm(megac, work, oracle)
    duration(megac, work, oracle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
