#!/usr/bin/env python3
"""Files megac cannot write, and checkpoints it cannot use, are never lost silently (issue 26).

Writes that fail (docs/robustness.md, "A full disk"): every file megac writes fails the run at
that write with exit 1 and a message naming the file and the reason (strerror):
  - train --log-json to /dev/full (ENOSPC) and under a file-size limit (EFBIG);
  - train --save-weights, --save-grads and --trace to a path that names /dev/full through a
    symlink (the atomic writers used to rename a temporary file over it: exit 0, "wrote ...",
    the bytes gone), and --save-weights under a file-size limit;
  - a checkpoint save (--save) under a file-size limit;
  - megac plan --trace to /dev/full (a buffered stream that failed only at its unchecked close).
A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes write() fail with EFBIG as a full disk
makes it fail with ENOSPC. The tests never give /dev/full itself to a writer that renames (as
root, a broken megac would replace the device node); a symlink in the work folder stands in.

Checkpoints that cannot be used: `megac generate --load` and `megac export --load` whose newest
checkpoint's meta.json fails its checksum warn naming it and the older checkpoint they use, as
`megac train --load` does (one code path picks the checkpoint for all three); a garbled `latest`
is named in a warning too, with the checkpoint used instead.

usage: /usr/bin/python3 write_errors_test.py --megac build/bin/megac --workdir DIR
Prints PASS/FAIL per case; exits 1 if any case fails.
"""
import argparse
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "examples", "tiny-corpus.npy")
SEQ = 8
MODEL = f"gpt:layers=2,hidden=16,heads=4,seq={SEQ},vocab=32"
# generate's byte tokenizer gives "ab" ids 97 and 98: the table needs 128 rows.
GEN_MODEL = f"gpt:layers=2,hidden=16,heads=4,seq={SEQ},vocab=128"
ENOSPC = os.strerror(28)  # "No space left on device"
EFBIG = os.strerror(27)   # "File too large"
TIMEOUT = 120


def make_tokens(workdir, vocab=32):
    """tiny-corpus.npy's text cut into rows of SEQ+1 tokens of a `vocab`-sized alphabet."""
    corpus = np.load(CORPUS)
    text = np.concatenate([corpus[0]] + [row[1:] for row in corpus[1:]])  # undo the overlap
    alphabet = np.unique(text)
    ids = (np.searchsorted(alphabet, text) % vocab).astype(np.int32)
    rows = (len(ids) - 1) // SEQ
    data = np.stack([ids[i * SEQ:i * SEQ + SEQ + 1] for i in range(rows)])
    path = os.path.join(workdir, "tokens.npy")
    np.save(path, data)
    return path


class Suite:
    def __init__(self, megac, workdir):
        self.megac, self.workdir = megac, workdir
        self.tokens = make_tokens(workdir)
        self.failed = []

    def run(self, args, file_size_limit=None):
        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
        p = subprocess.run([self.megac] + [str(a) for a in args], capture_output=True, text=True,
                           timeout=TIMEOUT, cwd=self.workdir,
                           preexec_fn=limit if file_size_limit is not None else None)
        return p.returncode, p.stdout, p.stderr

    def train(self, extra, model=MODEL, steps=3, file_size_limit=None):
        return self.run(["train", "--model", model, "--data", self.tokens, "--steps", steps,
                         "--global-batch", 4, "--micro-batch", 2, "--lr", "1e-3",
                         "--threads", 1] + extra, file_size_limit)

    def case(self, name, fn):
        folder = os.path.join(self.workdir, name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        try:
            problems = fn(folder)
        except subprocess.TimeoutExpired as e:
            problems = ["ran past %d s: %s" % (TIMEOUT, e.cmd)]
        except (RuntimeError, OSError, AssertionError) as e:
            problems = ["could not set the case up: %s" % e]
        if problems:
            self.failed.append(name)
            print("FAIL %s:\n  %s" % (name, "\n  ".join(problems)))
        else:
            print("PASS %s" % name)


def refused_write(result, names, reason):
    """Problems with a run that had to fail at a write: exit 1 and an error naming every one of
    `names` (the file) and `reason` (strerror)."""
    rc, out, err = result
    problems = []
    if rc != 1:
        problems.append("exit %d, not 1" % rc)
    if "error:" not in err:
        problems.append("no error on stderr")
    for text in names + [reason]:
        if text not in err:
            problems.append("the error does not say %r" % text)
    if problems:
        problems.append("stdout: %s" % out[-400:].strip())
        problems.append("stderr: %s" % err[-600:].strip())
    return problems


def dev_full_link(folder, name):
    """FOLDER/NAME, a symlink to /dev/full."""
    link = os.path.join(folder, name)
    os.symlink("/dev/full", link)
    return link


def dev_full_intact(links):
    problems = []
    if not stat.S_ISCHR(os.stat("/dev/full").st_mode):
        problems.append("/dev/full is no longer a character device")
    for link in links:
        if not os.path.islink(link):
            problems.append("%s was replaced (it was a symlink to /dev/full)" % link)
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    megac = os.path.abspath(a.megac)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    s = Suite(megac, os.path.abspath(a.workdir))

    # --- logs --------------------------------------------------------------------------------
    def log_dev_full(folder):
        return refused_write(s.train(["--log-json", "/dev/full"]), ["/dev/full"], ENOSPC)

    def log_file_size_limit(folder):
        log = os.path.join(folder, "log.jsonl")  # the first line fits, the second does not
        return refused_write(s.train(["--log-json", log], file_size_limit=300), [log], EFBIG)

    # --- weights, gradients, trace -----------------------------------------------------------
    def to_dev_full(flag):
        def fn(folder):
            link = dev_full_link(folder, flag.strip("-") + ".out")
            return refused_write(s.train([flag, link]), [link], ENOSPC) + dev_full_intact([link])
        return fn

    def weights_file_size_limit(folder):
        weights = os.path.join(folder, "weights.safetensors")
        problems = refused_write(s.train(["--save-weights", weights], file_size_limit=4096),
                                 [weights], EFBIG)
        if [f for f in os.listdir(folder) if f != "weights.safetensors"]:
            problems.append("left behind: %s" % os.listdir(folder))
        return problems

    # --- checkpoints -------------------------------------------------------------------------
    def checkpoint_file_size_limit(folder):
        ckpt = os.path.join(folder, "ckpt")
        problems = refused_write(s.train(["--save", ckpt, "--steps", 2], file_size_limit=4096),
                                 [ckpt + "/", "model-rank-00000.safetensors"], EFBIG)
        if os.path.exists(os.path.join(ckpt, "latest")):
            problems.append("a failed save wrote %s/latest" % ckpt)
        return problems

    # --- plan --------------------------------------------------------------------------------
    def plan_trace_dev_full(folder):
        # Safe with /dev/full itself: the plan's writer wrote in place (an ofstream) before the fix.
        return refused_write(s.run(["plan", "--model", MODEL, "--cluster", "cpu:1x2",
                                    "--global-batch", 4, "--top", 1, "--no-compile",
                                    "--trace", "/dev/full"]),
                             ["/dev/full"], ENOSPC) + dev_full_intact([])

    # --- a refused newest checkpoint ---------------------------------------------------------
    def two_checkpoints(folder):
        ckpt = os.path.join(folder, "ckpt")
        rc, out, err = s.train(["--save", ckpt, "--save-interval", 2], model=GEN_MODEL, steps=4)
        if rc != 0 or not all(os.path.isdir(os.path.join(ckpt, d)) for d in ("step-2", "step-4")):
            raise RuntimeError("training the checkpoints failed (exit %d): %s" % (rc, err))
        return ckpt

    def warned(result, label, expect_rc, names):
        rc, out, err = result
        problems = []
        if rc != expect_rc:
            problems.append("%s: exit %d, not %d" % (label, rc, expect_rc))
        warnings = [line for line in err.splitlines() if "warning:" in line]
        if not any(all(n in line for n in names) for line in warnings):
            problems.append("%s: no warning naming %s; stderr: %s" % (label, names, err[-600:]))
        return problems

    def generate(ckpt):
        return s.run(["generate", "--load", ckpt, "--prompt", "ab", "--max-tokens", 4])

    def corrupt_newest_meta(folder):
        ckpt = two_checkpoints(folder)
        meta = os.path.join(ckpt, "step-4", "meta.json")
        text = open(meta).read()
        assert '"step": 4,' in text
        open(meta, "w").write(text.replace('"step": 4,', '"step": 5,', 1))  # CRC32 no longer fits
        names = [meta, "CRC32", os.path.join(ckpt, "step-2")]
        problems = warned(s.train(["--load", ckpt], model=GEN_MODEL, steps=5), "train", 0, names)
        gen = generate(ckpt)
        problems += warned(gen, "generate", 0, names)
        if not gen[1].startswith("ab") or len(gen[1].strip()) <= 2:
            problems.append("generate printed no continuation: %r" % gen[1])
        # export refuses a zoo checkpoint, but only after picking it: the warning comes first.
        problems += warned(s.run(["export", "--load", ckpt, "--onnx", "none.onnx", "-o",
                                  os.path.join(folder, "out.onnx")]), "export", 1, names)
        return problems

    def garbled_latest(folder):
        ckpt = two_checkpoints(folder)
        latest = os.path.join(ckpt, "latest")
        open(latest, "w").write("garbage\n")
        names = [latest, os.path.join(ckpt, "step-4")]
        return (warned(s.train(["--load", ckpt], model=GEN_MODEL, steps=5), "train", 0, names) +
                warned(generate(ckpt), "generate", 0, names))

    cases = [("log_json_dev_full", log_dev_full),
             ("log_json_file_size_limit", log_file_size_limit),
             ("save_weights_dev_full", to_dev_full("--save-weights")),
             ("save_grads_dev_full", to_dev_full("--save-grads")),
             ("trace_dev_full", to_dev_full("--trace")),
             ("save_weights_file_size_limit", weights_file_size_limit),
             ("checkpoint_file_size_limit", checkpoint_file_size_limit),
             ("plan_trace_dev_full", plan_trace_dev_full),
             ("generate_corrupt_newest_meta", corrupt_newest_meta),
             ("generate_garbled_latest", garbled_latest)]
    for name, fn in cases:
        s.case(name, fn)
    print("%d of %d cases passed" % (len(cases) - len(s.failed), len(cases)))
    return 1 if s.failed else 0


if __name__ == "__main__":
    sys.exit(main())
