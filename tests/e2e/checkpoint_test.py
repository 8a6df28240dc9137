"""`megac train --save/--load`: checkpoints that resume bit-for-bit and reshard across layouts.

A checkpoint (format version 2) is per-rank shard files (model-rank-R.safetensors,
optimizer-rank-R.safetensors) and meta.json mapping every tensor to its shards; the tests
assemble whole tensors from them (checkpoint_tensors) to compare checkpoints of different
layouts. A tiny GPT in fp64 on examples/tiny-corpus.npy; the uninterrupted run is the oracle.
  same_layout: 1 rank, 8 steps straight vs 4 steps + save + --load to 8: the final weights
               (--save-weights) are byte-identical and the losses of steps 5..8 equal.
  fp16:        the loss scaler's state resumes mid-window (same loss scales, same weights).
  reshard:     saved at --ranks 4 --tp 2 --pp 2 after 4 steps; resumed at --tp 4, at tp 4 x
               dp 2, at dp 2 x tp 2 with --zero 1, and at 1 rank: losses of steps 5..8 within
               1e-10 relative of the one-rank run; the tensors saved under tp2 x pp2 and under dp2 x tp2 with
               ZeRO-1 (parameters, Adam moments) match the one-rank checkpoint's; the dp2 x tp2
               checkpoint stores each parameter once (only dp rank 0's ranks write model files;
               their data bytes equal the model's size).
  rank_files:  in that 4-rank checkpoint, a missing model file of rank 1 and a truncated
               optimizer file of rank 2 are refused naming the file, loading at 1 and 4 ranks;
               a bit flip in a file only rank 3 reads makes all four ranks fall back together.
  kill:        a 4-rank run (tp 2 x dp 2, --save-interval 2) has one rank SIGKILLed after the
               step-4 checkpoint appears; --load resumes it and the final parameters are
               byte-identical to an uninterrupted 4-rank run.
  cli_errors:  refused flag combinations.
  corrupt:     a truncated model file and a flipped byte are refused with a message naming the
               file; with an older checkpoint present, the load falls back to it.

usage: checkpoint_test.py --megac build/bin/megac --workdir DIR
Exits 77 (skip) when mpirun is missing, after the one-rank cases pass.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = "gpt:layers=2,hidden=16,heads=4,seq=64,vocab=256"
DATA = os.path.join(ROOT, "examples", "tiny-corpus.npy")


from safetensors_np import DTYPES, read_raw as read_safetensors  # noqa: E402
import numpy as np  # noqa: E402

MODEL_FILE = "model-rank-00000.safetensors"
OPTIMIZER_FILE = "optimizer-rank-00000.safetensors"


def checkpoint_tensors(step_dir, kind):
    """kind "parameters" or "optimizer": name -> (dtype, shape, raw bytes), each tensor assembled
    whole from the shards meta.json lists; every element must be covered."""
    meta = json.load(open(os.path.join(step_dir, "meta.json")))
    files, out = {}, {}
    for name, t in meta[kind].items():
        whole = np.zeros(t["shape"], dtype=DTYPES[t["dtype"]])
        covered = np.zeros(t["shape"], dtype=bool)
        for shard in t["shards"]:
            if shard["file"] not in files:
                files[shard["file"]] = read_safetensors(os.path.join(step_dir, shard["file"]))
            dtype, shape, raw = files[shard["file"]][name]
            check(dtype == t["dtype"] and shape == shard["shape"],
                  "%s: shard of '%s' in %s is %s %s" % (step_dir, name, shard["file"], dtype, shape))
            box = tuple(slice(o, o + n) for o, n in zip(shard["offset"], shard["shape"]))
            whole[box] = np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape)
            covered[box] = True
        check(covered.all(), "%s: the shards of '%s' leave part of it uncovered" % (step_dir, name))
        out[name] = (t["dtype"], t["shape"], whole.tobytes())
    return out


def f64_values(raw):
    return struct.unpack("<%dd" % (len(raw) // 8), raw)


def base_args(megac, steps):
    return [megac, "train", "--model", SPEC, "--data", DATA, "--steps", str(steps),
            "--global-batch", "4", "--micro-batch", "2", "--lr", "1e-2", "--precision", "fp64",
            "--threads", "1"]


def run(argv, expect_ok=True):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if expect_ok and proc.returncode != 0:
        raise AssertionError("failed (%d): %s\n%s%s" % (proc.returncode, " ".join(argv),
                                                       proc.stdout, proc.stderr))
    return proc


def train(megac, out, steps, extra):
    """Runs megac train; returns {step: loss} from its JSON log."""
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    run(base_args(megac, steps) + ["--log-json", log] + extra)
    with open(log) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f)}


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def check_losses(got, want, steps, rtol, what):
    check(sorted(got) == list(steps), "%s: logged steps %s, want %s" % (what, sorted(got),
                                                                       list(steps)))
    for s in steps:
        if rtol == 0:
            check(got[s] == want[s], "%s: step %d loss %r != %r" % (what, s, got[s], want[s]))
        else:
            check(abs(got[s] - want[s]) <= rtol * abs(want[s]),
                  "%s: step %d loss %r vs %r" % (what, s, got[s], want[s]))


def check_same_files(a, b, what):
    ta, tb = read_safetensors(a), read_safetensors(b)
    check(sorted(ta) == sorted(tb), "%s: tensor names differ" % what)
    for name in ta:
        check(ta[name] == tb[name], "%s: tensor '%s' differs" % (what, name))


def check_close_tensors(ta, tb, rtol, what):
    check(sorted(ta) == sorted(tb), "%s: tensor names differ: %s vs %s" % (what, sorted(ta),
                                                                          sorted(tb)))
    for name in ta:
        check(ta[name][:2] == tb[name][:2], "%s: '%s' dtype/shape differ" % (what, name))
        va, vb = f64_values(ta[name][2]), f64_values(tb[name][2])
        scale = max([abs(v) for v in vb] + [1e-300])
        worst = max(abs(x - y) for x, y in zip(va, vb)) if va else 0.0
        check(worst <= rtol * scale + 1e-12,
              "%s: '%s' differs by %g (max |value| %g)" % (what, name, worst, scale))


def same_layout(megac, work, full):
    out = os.path.join(work, "same")
    shutil.rmtree(out, ignore_errors=True)
    ckpt = os.path.join(out, "ckpt")
    first = train(megac, out, 4, ["--save", ckpt])
    check_losses(first, full["losses"], range(1, 5), 0, "same_layout first half")
    with open(os.path.join(ckpt, "latest")) as f:
        check(f.read().strip() == "4", "latest does not name step 4")
    meta = json.load(open(os.path.join(ckpt, "step-4", "meta.json")))
    check(meta["format_version"] == 2 and meta["step"] == 4 and meta["data_position"] == 4,
          "meta.json: %s" % meta)
    check(sorted(meta["files"]) == [MODEL_FILE, OPTIMIZER_FILE], "files: %s" % meta["files"])
    for name in (MODEL_FILE, OPTIMIZER_FILE):
        size = os.path.getsize(os.path.join(ckpt, "step-4", name))
        check(meta["files"][name]["bytes"] == size, "meta.json's size of %s" % name)
    # One rank: every tensor is one shard, whole, in rank 0's files.
    opt = read_safetensors(os.path.join(ckpt, "step-4", OPTIMIZER_FILE))
    model = read_safetensors(os.path.join(ckpt, "step-4", MODEL_FILE))
    check(model == checkpoint_tensors(os.path.join(ckpt, "step-4"), "parameters"),
          "model file vs meta.json's parameters")
    check(sorted(opt) == sorted(["adam.m." + p for p in model] + ["adam.v." + p for p in model]),
          "optimizer.safetensors holds %s" % sorted(opt))
    weights = os.path.join(out, "weights.safetensors")
    resumed = train(megac, out, 8, ["--load", ckpt, "--save-weights", weights])
    check_losses(resumed, full["losses"], range(5, 9), 0, "same_layout resumed")
    check_same_files(weights, full["weights"], "same_layout final weights")
    print("ok same_layout: resumed losses and final weights are bit-identical")


def reshard(megac, work, full, one_rank_ckpt):
    out = os.path.join(work, "reshard")
    shutil.rmtree(out, ignore_errors=True)
    ckpt = os.path.join(out, "ckpt")
    saved = train(megac, os.path.join(out, "save"), 4,
                  ["--save", ckpt, "--ranks", "4", "--tp", "2", "--pp", "2"])
    check_losses(saved, full["losses"], range(1, 5), 1e-10, "reshard save (tp2 pp2)")
    for kind in ("parameters", "optimizer"):
        check_close_tensors(checkpoint_tensors(os.path.join(ckpt, "step-4"), kind),
                            checkpoint_tensors(os.path.join(one_rank_ckpt, "step-4"), kind), 1e-9,
                            "tp2 pp2 checkpoint vs one rank's: " + kind)
    # ZeRO-1 shards the Adam moments over dp: saved whole, they match the one-rank moments.
    zero_ckpt = os.path.join(out, "zero_ckpt")
    train(megac, os.path.join(out, "save_zero"), 4,
          ["--save", zero_ckpt, "--ranks", "4", "--tp", "2", "--dp", "2", "--micro-batch", "1",
           "--zero", "1"])
    for kind in ("parameters", "optimizer"):
        check_close_tensors(checkpoint_tensors(os.path.join(zero_ckpt, "step-4"), kind),
                            checkpoint_tensors(os.path.join(one_rank_ckpt, "step-4"), kind), 1e-9,
                            "dp2 tp2 zero1 checkpoint vs one rank's: " + kind)
    print("ok reshard: tp2 pp2 and dp2 tp2 zero1 checkpoints hold the one-rank tensors")
    stored_once(zero_ckpt, one_rank_ckpt)
    for name, layout in [("tp4", ["--ranks", "4", "--tp", "4"]),
                         ("tp4_dp2", ["--ranks", "8", "--tp", "4", "--dp", "2",
                                      "--micro-batch", "1"]),
                         ("dp2_tp2_zero1", ["--ranks", "4", "--tp", "2", "--dp", "2",
                                            "--micro-batch", "1", "--zero", "1"]),
                         ("one_rank", [])]:
        got = train(megac, os.path.join(out, name), 8, ["--load", ckpt] + layout)
        check_losses(got, full["losses"], range(5, 9), 1e-10, "reshard to " + name)
        print("ok reshard: tp2 pp2 -> %s, losses of steps 5..8 within 1e-10" % name)


def data_bytes(step_dir, prefix):
    """The tensor bytes (headers excluded) of the step's files named PREFIX-rank-*."""
    names = sorted(n for n in os.listdir(step_dir) if n.startswith(prefix + "-rank-"))
    return names, sum(len(raw) for n in names
                      for (_, _, raw) in read_safetensors(os.path.join(step_dir, n)).values())


def stored_once(zero_ckpt, one_rank_ckpt):
    """dp2 x tp2 ZeRO-1 (ranks 0, 1 are dp 0; 2, 3 dp 1): the dp-replicated parameters are
    written by dp 0's ranks only, so the model files hold exactly the model's bytes; the Adam
    moments, sharded over dp, are written by all four."""
    step = os.path.join(zero_ckpt, "step-4")
    model_bytes = sum(len(raw) for (_, _, raw) in
                      checkpoint_tensors(os.path.join(one_rank_ckpt, "step-4"),
                                         "parameters").values())
    names, got = data_bytes(step, "model")
    check(names == ["model-rank-00000.safetensors", "model-rank-00001.safetensors"],
          "dp2 tp2 model files: %s" % names)
    check(got == model_bytes, "dp2 tp2 model files hold %d tensor bytes, the model %d" %
          (got, model_bytes))
    names, got = data_bytes(step, "optimizer")
    check(len(names) == 4 and got == 2 * model_bytes,
          "dp2 tp2 zero1 optimizer files %s hold %d bytes, want %d" % (names, got, 2 * model_bytes))
    total = sum(os.path.getsize(os.path.join(step, n)) for n in os.listdir(step))
    print("ok stored once: dp2 tp2 zero1 model files hold %d bytes = the model's; checkpoint %d "
          "bytes" % (model_bytes, total))
    return step


def rank_files(megac, work, full):
    """A missing or truncated rank file of a 4-rank checkpoint is refused, naming it."""
    source = os.path.join(work, "reshard", "zero_ckpt")
    layouts = {"one rank": [], "4 ranks": ["--ranks", "4", "--tp", "2", "--dp", "2",
                                           "--micro-batch", "1", "--zero", "1"]}
    for case, file, layout in [("missing", "model-rank-00001.safetensors", "one rank"),
                               ("truncated", "optimizer-rank-00002.safetensors", "4 ranks"),
                               ("missing", "optimizer-rank-00003.safetensors", "4 ranks")]:
        ckpt = os.path.join(work, "rank_files", case)
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.copytree(source, ckpt)
        target = os.path.join(ckpt, "step-4", file)
        if case == "missing":
            os.remove(target)
        else:
            os.truncate(target, os.path.getsize(target) - 16)
        proc = run(base_args(megac, 8) + ["--load", ckpt] + layouts[layout], expect_ok=False)
        check(proc.returncode == 1 and target in proc.stderr,
              "%s %s at %s: exit %d, stderr:\n%s" % (case, file, layout, proc.returncode,
                                                      proc.stderr))
        print("ok rank_files: %s %s refused at %s" % (case, file, layout))
    # A bit flip in a file only rank 3 reads: every rank falls back to step 2 together.
    out = os.path.join(work, "rank_files", "fallback")
    shutil.rmtree(out, ignore_errors=True)
    ckpt = os.path.join(out, "ckpt")
    train(megac, os.path.join(out, "save"), 4,
          layouts["4 ranks"] + ["--save", ckpt, "--save-interval", "2"])
    target = os.path.join(ckpt, "step-4", "optimizer-rank-00003.safetensors")
    with open(target, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        byte = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x80]))
    log = os.path.join(out, "resume.jsonl")
    proc = run(base_args(megac, 8) + layouts["4 ranks"] + ["--load", ckpt, "--log-json", log])
    check(target in proc.stderr and os.path.join(ckpt, "step-2") in proc.stderr,
          "rank_files fallback: the warning does not name the file and step-2:\n" + proc.stderr)
    with open(log) as f:
        got = {r["step"]: r["loss"] for r in map(json.loads, f)}
    check_losses(got, full["losses"], range(3, 9), 1e-10, "rank_files fallback to step 2")
    print("ok rank_files: a corrupt file of rank 3 made all 4 ranks fall back to step 2")


def fp16_scaler(megac, work):
    """fp16: the loss scaler's state (scale, growth and hysteresis trackers) resumes mid-window."""
    out = os.path.join(work, "fp16")
    shutil.rmtree(out, ignore_errors=True)
    common = ["--precision", "fp16", "--initial-loss-scale", "4096", "--loss-scale-window", "3"]

    def scales(log_dir):
        with open(os.path.join(log_dir, "log.jsonl")) as f:
            return {r["step"]: (r["loss"], r["loss_scale"]) for r in map(json.loads, f)}

    straight = os.path.join(out, "straight.safetensors")
    train(megac, os.path.join(out, "full"), 8, common + ["--save-weights", straight])
    want = scales(os.path.join(out, "full"))
    ckpt = os.path.join(out, "ckpt")
    train(megac, os.path.join(out, "first"), 4, common + ["--save", ckpt])
    meta = json.load(open(os.path.join(ckpt, "step-4", "meta.json")))
    scaler = meta["loss_scaler"]
    # The scale step 5 uses is the one saved after step 4; a window of 3 clean steps leaves the
    # growth tracker mid-window, which a restart without the scaler's state would lose.
    check(scaler["scale"] == want[5][1] and scaler["growth_tracker"] == 1 and
          scaler["hysteresis_tracker"] == 2, "meta.json's loss_scaler: %s" % scaler)
    resumed = os.path.join(out, "resumed.safetensors")
    train(megac, os.path.join(out, "second"), 8, common + ["--load", ckpt, "--save-weights",
                                                           resumed])
    got = scales(os.path.join(out, "second"))
    check(got == {s: want[s] for s in range(5, 9)},
          "fp16 resumed (loss, loss_scale) %s, want %s" % (got, want))
    check_same_files(resumed, straight, "fp16 final weights")
    print("ok fp16: loss scales %s resumed, final weights bit-identical" %
          [got[s][1] for s in sorted(got)])


def rank_pids(root_pid):
    """The pids of the megac ranks below `root_pid` (megac -> mpirun -> ranks)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append((int(entry), cmd))
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        for child, cmd in children.get(pid, []):
            todo.append(child)
            if cmd and os.path.basename(cmd[0].decode(errors="replace")) == "megac":
                found.append(child)
    return found


def kill(megac, work):
    out = os.path.join(work, "kill")
    shutil.rmtree(out, ignore_errors=True)
    layout = ["--ranks", "4", "--tp", "2", "--dp", "2", "--micro-batch", "1"]
    steps = 200  # long enough that the kill lands mid-run
    whole = os.path.join(out, "uninterrupted.safetensors")
    train(megac, os.path.join(out, "straight"), steps, layout + ["--save-weights", whole])
    ckpt = os.path.join(out, "ckpt")
    argv = base_args(megac, steps) + layout + ["--save", ckpt, "--save-interval", "2"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    latest = os.path.join(ckpt, "latest")
    killed_at = None
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            with open(latest) as f:
                step = int(f.read().strip() or 0)
        except (OSError, ValueError):
            step = 0
        if step >= 4:
            ranks = rank_pids(proc.pid)
            if ranks:
                os.kill(ranks[-1], signal.SIGKILL)  # one rank dies; mpirun ends the job
                killed_at = step
                break
        time.sleep(0.002)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    try:  # the job's own process group (start_new_session): no rank outlives the test
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    check(killed_at is not None, "the run ended (rc %s) before a rank could be killed" %
          proc.returncode)
    check(proc.returncode != 0, "the killed run exited 0")
    with open(latest) as f:
        resumed_from = int(f.read().strip())
    check(resumed_from < steps, "the killed run saved its last step")
    final = os.path.join(out, "resumed.safetensors")
    got = train(megac, os.path.join(out, "resume"), steps,
                layout + ["--load", ckpt, "--save", ckpt, "--save-interval", "50",
                          "--save-weights", final])
    check(min(got) == resumed_from + 1, "resumed at step %d, latest was %d" % (min(got),
                                                                              resumed_from))
    check_same_files(final, whole, "kill: final weights vs the uninterrupted run")
    print("ok kill: rank killed after checkpoint %d, resumed from step %d, final weights "
          "bit-identical" % (killed_at, resumed_from))


def copy_up_to_step_4(source, dest):
    """A copy of the 8-step run's checkpoints (steps 2, 4, 6, 8) as saved after step 4."""
    shutil.copytree(source, dest)
    for step in (6, 8):
        shutil.rmtree(os.path.join(dest, "step-%d" % step))
    with open(os.path.join(dest, "latest"), "w") as f:
        f.write("4\n")


def corrupt(megac, work, full, source):
    out = os.path.join(work, "corrupt")
    shutil.rmtree(out, ignore_errors=True)
    for case in ("truncated", "flipped"):
        ckpt = os.path.join(out, case)
        copy_up_to_step_4(source, ckpt)
        shutil.rmtree(os.path.join(ckpt, "step-2"))
        target = os.path.join(ckpt, "step-4", MODEL_FILE)
        with open(target, "rb") as f:
            data = bytearray(f.read())
        if case == "truncated":
            data = data[:len(data) // 2]
        else:
            data[-100] ^= 0x04  # inside a tensor: the file still parses
        with open(target, "wb") as f:
            f.write(data)
        proc = run(base_args(megac, 8) + ["--load", ckpt], expect_ok=False)
        check(proc.returncode == 1, "%s: exit %d, want 1" % (case, proc.returncode))
        check(target in proc.stderr, "%s: the error does not name %s:\n%s" % (case, target,
                                                                              proc.stderr))
        check("Traceback" not in proc.stderr and "terminate" not in proc.stderr,
              "%s: crashed:\n%s" % (case, proc.stderr))
        print("ok corrupt: %s model file refused: %s" %
              (case, proc.stderr.strip().splitlines()[-1][:160]))
    # With step 2 still there, the load falls back to it and resumes from step 3.
    ckpt = os.path.join(out, "fallback")
    copy_up_to_step_4(source, ckpt)
    target = os.path.join(ckpt, "step-4", OPTIMIZER_FILE)
    with open(target, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        byte = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x80]))
    log = os.path.join(out, "fallback.jsonl")
    proc = run(base_args(megac, 8) + ["--load", ckpt, "--log-json", log])
    check(target in proc.stderr and os.path.join(ckpt, "step-2") in proc.stderr,
          "fallback: the warning does not name the file and the next checkpoint:\n" +
          proc.stderr)
    with open(log) as f:
        got = {r["step"]: r["loss"] for r in map(json.loads, f)}
    check_losses(got, full["losses"], range(3, 9), 0, "fallback to step 2")
    print("ok corrupt: fell back to step 2 and resumed bit-identically")


def cli_errors(megac, work):
    """The checkpoint flags' one-line errors (exit 2, before any training)."""
    cases = [(["--save-interval", "2"], "--save-interval needs --save DIR"),
             (["--save", os.path.join(work, "x"), "--save-interval", "0"],
              "--save-interval: '0' is not an integer >= 1"),
             (["--load", os.path.join(work, "missing")], "--load: no checkpoint directory"),
             (["--load", work, "--trace", os.path.join(work, "t.json")],
              "--trace with --load is not supported yet"),
             (["--load", work, "--save-grads", os.path.join(work, "g.safetensors")],
              "a run resumed with --load does not run step 1")]
    for extra, want in cases:
        proc = run(base_args(megac, 2) + extra, expect_ok=False)
        check(proc.returncode == 2 and want in proc.stderr,
              "%s: exit %d, stderr %r; want 2 and %r" % (extra, proc.returncode, proc.stderr,
                                                         want))
    print("ok cli_errors: %d refused flag combinations" % len(cases))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    megac = os.path.abspath(args.megac)
    work = os.path.abspath(args.workdir)
    os.makedirs(work, exist_ok=True)

    full_dir = os.path.join(work, "full")
    shutil.rmtree(full_dir, ignore_errors=True)
    weights = os.path.join(full_dir, "weights.safetensors")
    ckpt = os.path.join(full_dir, "ckpt")
    losses = train(megac, full_dir, 8, ["--save-weights", weights, "--save", ckpt,
                                        "--save-interval", "2"])
    full = {"losses": losses, "weights": weights}
    cli_errors(megac, work)
    same_layout(megac, work, full)
    fp16_scaler(megac, work)
    corrupt(megac, work, full, ckpt)
    if shutil.which("mpirun") is None:
        print("skip: mpirun not found (reshard and kill cases)")
        return SKIP
    reshard(megac, work, full, ckpt)
    rank_files(megac, work, full)
    kill(megac, work)
    print("all checkpoint cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
