"""Hostile inputs against megac (issue 19): corrupt and mismatched checkpoints, flipped plan bits,
huge shapes and ids in data and tensor files, directories for files, numeric options out of range.
Every case must end in a clear error (exit 1 or 2, "error:" on stderr) or, where stated, succeed;
a signal, a sanitizer report or "terminate called" is a crash, running past the time limit a
hang, and exit 0 where an error was due a silent wrong result.

usage: /usr/bin/python3 bench/hostile_inputs.py --megac build/bin/megac [--workdir DIR]
Prints one line per failing case and the counts; exits 1 unless crash/hang/silent are 0/0/0.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np

TIMEOUT = 60
MODEL = "gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64"
TRAIN = ["--data", None, "--global-batch", "4", "--micro-batch", "2", "--lr", "1e-3"]


class Runner:
    def __init__(self, megac, workdir):
        self.megac, self.workdir = megac, workdir
        self.counts = {"ok": 0, "crash": 0, "hang": 0, "silent": 0}
        self.by_class = {}

    def run(self, cls, name, args, expect="error", stdin=None, preexec=None):
        """expect: "error" (exit 1/2 naming the problem) or "ok" (exit 0)."""
        cmd = [self.megac] + [str(a) for a in args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                               cwd=self.workdir, input=stdin, preexec_fn=preexec)
        except subprocess.TimeoutExpired:
            return self.record(cls, name, "hang", "ran past %d s" % TIMEOUT)
        err = p.stderr
        crashed = p.returncode < 0 or p.returncode >= 128 or "terminate called" in err or \
            "Sanitizer" in err or "runtime error:" in err
        if crashed:
            return self.record(cls, name, "crash", "exit %d: %s" % (p.returncode, err[-300:]))
        if expect == "error":
            if p.returncode == 0:
                return self.record(cls, name, "silent", "exit 0: " + (p.stdout + err)[-200:])
            if "error" not in err and "no layout" not in p.stdout:  # plan: a search's verdict
                return self.record(cls, name, "silent", "failed without a clear error: " + err[-200:])
        elif p.returncode != 0:
            return self.record(cls, name, "silent", "refused a valid input: " + err[-300:])
        return self.record(cls, name, "ok", "")

    def record(self, cls, name, verdict, detail):
        self.counts[verdict] += 1
        c = self.by_class.setdefault(cls, {"ok": 0, "crash": 0, "hang": 0, "silent": 0})
        c[verdict] += 1
        if verdict != "ok":
            print("%-6s %s / %s: %s" % (verdict.upper(), cls, name, detail))
        return verdict


def seal_meta(text):
    """meta.json re-sealed as megac seals it: the CRC32 of the text with the value as zeros."""
    key = '"meta_crc32": "'
    at = text.rfind(key)
    if at < 0:
        return text
    at += len(key)
    text = text[:at] + "00000000" + text[at + 8:]
    return text[:at] + "%08x" % zlib.crc32(text.encode()) + text[at + 8:]


def checkpoints(r, tok):
    base = os.path.join(r.workdir, "ckpt")
    r.run("setup", "train and save", ["train", "--model", MODEL, "--steps", "2", "--save", base] +
          [tok if a is None else a for a in TRAIN], expect="ok")
    meta_path = os.path.join(base, "step-2", "meta.json")
    original = open(meta_path).read()

    def edited(name, edit, reseal=True, expect="error", extra=()):
        d = os.path.join(r.workdir, "ck-" + name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        text = edit(original)
        open(os.path.join(d, "step-2", "meta.json"), "w").write(seal_meta(text) if reseal else text)
        r.run("checkpoint meta.json", name, ["train", "--model", MODEL, "--steps", "3", "--load", d] +
              [tok if a is None else a for a in TRAIN] + list(extra), expect=expect)

    edited("step flipped", lambda t: t.replace('"step": 2', '"step": 3'))
    edited("step 1e12", lambda t: t.replace('"step": 2', '"step": 1000000000000'))
    edited("step negative", lambda t: t.replace('"step": 2', '"step": -12'))
    edited("data_position flipped, not resealed",
           lambda t: t.replace('"data_position": 2', '"data_position": 3'), reseal=False)
    edited("path escapes", lambda t: t.replace('"model-rank-00000.safetensors"',
                                               '"../step-1/model-rank-00000.safetensors"'))
    edited("loss scale 0", lambda t: t.replace('"loss_scaler": null',
                                               '"loss_scaler": {"scale": 0, "growth_tracker": 0, '
                                               '"hysteresis_tracker": 0}'))
    for shape in ["[4294967296, 4294967296]", "[1099511627776]", "[2305843009213693952]",
                  "[9223372036854775807, 9223372036854775807]"]:
        edited("shape " + shape, lambda t, s=shape: t.replace('"shape": [64, 32]', '"shape": ' + s, 1))
    edited("offset past int64", lambda t: t.replace('"offset": [0, 0]',
                                                    '"offset": [9223372036854775807, 0]', 1))
    meta = json.loads(original)
    any_param = sorted(meta["model_fingerprint"]["parameters"])[0]
    edited("fingerprint shape", lambda t: t.replace('"%s": [' % any_param, '"%s": [7, ' % any_param, 1))
    edited("truncated meta", lambda t: t[:len(t) // 2], reseal=False)
    for i in range(8):  # random single-byte flips of meta.json, not re-sealed: the seal refuses
        rng = random.Random(i)
        def flip(t, rng=rng):
            at = rng.randrange(len(t))
            return t[:at] + chr((ord(t[at]) ^ (1 << rng.randrange(7))) or 32) + t[at + 1:]
        edited("byte flip %d" % i, flip, reseal=False)
    # A shard file flipped: the CRC32 refuses it.
    d = os.path.join(r.workdir, "ck-shard")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    shard = os.path.join(d, "step-2", "model-rank-00000.safetensors")
    b = bytearray(open(shard, "rb").read())
    b[len(b) // 2] ^= 4
    open(shard, "wb").write(b)
    r.run("checkpoint shard", "flipped byte", ["train", "--model", MODEL, "--steps", "3", "--load", d] +
          [tok if a is None else a for a in TRAIN])
    # A save whose writes fail (a file-size limit: write() fails with EFBIG as on a full disk)
    # is an error, and the previous checkpoint still loads.
    import resource
    import signal

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
    d = os.path.join(r.workdir, "ck-full")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    r.run("disk full", "save fails", ["train", "--model", MODEL, "--steps", "3", "--load", d, "--save", d] +
          [tok if a is None else a for a in TRAIN], preexec=small_disk)
    r.run("disk full", "previous checkpoint loads", ["train", "--model", MODEL, "--steps", "3", "--load", d] +
          [tok if a is None else a for a in TRAIN], expect="ok")
    # Another model: layers, heads, width.
    for other in ["gpt:layers=1,hidden=32,heads=2,seq=8,vocab=64",
                  "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64",
                  "gpt:layers=3,hidden=32,heads=2,seq=8,vocab=64",
                  "gpt:layers=2,hidden=64,heads=2,seq=8,vocab=64",
                  "llama:layers=2,hidden=32,heads=2,seq=8,vocab=64"]:
        r.run("checkpoint of another model", other, ["train", "--model", other, "--steps", "3", "--load",
              base] + [tok if a is None else a for a in TRAIN])
    # Layout and precision may change: these must succeed.
    r.run("checkpoint relayout", "micro-batch 4, bf16",
          ["train", "--model", MODEL, "--steps", "3", "--load", base, "--precision", "bf16", "--data",
           tok, "--global-batch", "4", "--micro-batch", "4", "--lr", "1e-3"], expect="ok")
    # generate and export trust meta.json shapes no more than train does.
    d = os.path.join(r.workdir, "ck-gen")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    open(os.path.join(d, "step-2", "meta.json"), "w").write(
        seal_meta(original.replace('"shape": [64, 32]', '"shape": [4294967296, 4294967296]', 1)))
    r.run("checkpoint meta.json", "generate with a [2^32, 2^32] shape",
          ["generate", "--load", d, "--model", MODEL, "--prompt", "hi", "--max-tokens", "2"])


def plans(r):
    plan = os.path.join(r.workdir, "p.mplan")
    r.run("setup", "compile", ["compile", "--model", "gpt:layers=1,hidden=16,heads=2,seq=4,vocab=32",
                               "-o", plan], expect="ok")
    ids = os.path.join(r.workdir, "ids.npy")
    np.save(ids, np.zeros((1, 4), np.int64))
    data = open(plan, "rb").read()
    rng = random.Random(19)
    for i in range(54):
        bad = bytearray(data)
        at = rng.randrange(len(bad))
        bad[at] ^= 1 << rng.randrange(8)
        path = os.path.join(r.workdir, "flip.mplan")
        open(path, "wb").write(bad)
        r.run("plan bit flips", "byte %d" % at, ["run", path, "--input", "input_ids=" + ids,
                                                   "--output-dir", os.path.join(r.workdir, "out")])
    for cut in [0, 8, 16, 24, len(data) // 2, len(data) - 1]:
        path = os.path.join(r.workdir, "cut.mplan")
        open(path, "wb").write(data[:cut])
        r.run("plan truncated", "%d bytes" % cut, ["run", path, "--input", "input_ids=" + ids,
                                                    "--output-dir", os.path.join(r.workdir, "out")])


def npy_header(shape, descr="<f4"):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * (-(len(d) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()


def data_files(r):
    shapes = ["(4294967296, 4294967296)", "(1099511627776,)", "(2305843009213693952,)",
              "(9223372036854775807, 2)", "(99999999999999999999999,)", "(-1, 4)"]
    for s in shapes:
        path = os.path.join(r.workdir, "huge.npy")
        open(path, "wb").write(npy_header(s, "<i8") + b"\0" * 64)
        r.run("npy shapes", s, ["train", "--model", MODEL, "--steps", "1", "--data", path,
                                "--global-batch", "4", "--micro-batch", "2", "--lr", "1e-3"])
    for s in ["[4294967296, 4294967296]", "[1099511627776]", "[2305843009213693952]"]:
        header = json.dumps({"w": {"dtype": "F32", "shape": json.loads(s), "data_offsets": [0, 8]}}).encode()
        path = os.path.join(r.workdir, "huge.safetensors")
        open(path, "wb").write(struct.pack("<Q", len(header)) + header + b"\0" * 8)
        r.run("safetensors shapes", s, ["run", "--model", "gpt:layers=1,hidden=16,heads=2,seq=4,vocab=32",
                                        "--weights", path, "--input", "input_ids=" + os.path.join(r.workdir, "ids.npy"),
                                        "--output-dir", os.path.join(r.workdir, "o")])
    # .idx with counts that overflow the multiplication.
    txt = os.path.join(r.workdir, "t.txt")
    open(txt, "w").write("hello world\n" * 20)
    prefix = os.path.join(r.workdir, "ds")
    r.run("setup", "data prep", ["data", "prep", txt, "--tokenizer", "byte", "-o", prefix], expect="ok")
    idx = bytearray(open(prefix + ".idx", "rb").read())
    for field, value in [(18, 2 ** 62), (26, 2 ** 61), (18, 2 ** 64 - 1)]:
        bad = bytearray(idx)
        bad[field:field + 8] = struct.pack("<Q", value)
        shutil.copy(prefix + ".bin", prefix + "x.bin")
        open(prefix + "x.idx", "wb").write(bad)
        r.run("idx counts", "field %d = %d" % (field, value),
              ["train", "--model", MODEL, "--steps", "1", "--data", prefix + "x",
               "--global-batch", "4", "--micro-batch", "2", "--lr", "1e-3"])
    # Tokenizer ids.
    vocab = {chr(0x100 + b) if b < 33 else chr(b): b for b in range(256)}
    for name, extra in [("vocab id 2147483646", {"zz": 2147483646}), ("vocab id -1", {"zz": -1}),
                        ("vocab id 2^40", {"zz": 2 ** 40})]:
        v = dict(vocab, **extra)
        vp, mp = os.path.join(r.workdir, "v.json"), os.path.join(r.workdir, "m.txt")
        json.dump(v, open(vp, "w"))
        open(mp, "w").write("#version: 0.2\n")
        r.run("tokenizer ids", name, ["data", "prep", txt, "--tokenizer", "gpt2:%s,%s" % (vp, mp),
                                      "-o", os.path.join(r.workdir, "tk")])


def files_and_options(r, tok):
    d = os.path.join(r.workdir, "dir.onnx")
    os.makedirs(d, exist_ok=True)
    r.run("directory as a file", "ONNX model", ["import", d, "-o", os.path.join(r.workdir, "x.mlir")])
    r.run("directory as a file", "plan", ["run", r.workdir, "--output-dir", os.path.join(r.workdir, "o")])
    r.run("directory as a file", "data", ["train", "--model", MODEL, "--steps", "1", "--data", r.workdir,
                                          "--global-batch", "4", "--micro-batch", "2", "--lr", "1e-3"])
    ck = os.path.join(r.workdir, "ckpt")
    for flag, value in [("--max-tokens", "1e30"), ("--max-tokens", "inf"), ("--max-tokens", "nan"),
                        ("--max-tokens", "-1"), ("--seed", "1e30"), ("--seed", "-1"),
                        ("--top-k", "1e30"), ("--temperature", "nan"), ("--top-p", "inf")]:
        r.run("numeric options", "generate %s %s" % (flag, value),
              ["generate", "--load", ck, "--prompt", "x", flag, value])
    for flag, value in [("--comm-timeout", "10000000000"), ("--steps", "1e30"), ("--lr", "inf"),
                        ("--global-batch", "99999999999999999999"), ("--micro-batch", "0"),
                        ("--threads", "1000000"), ("--warmup-steps", "-3"), ("--clip-grad", "nan")]:
        args = ["train", "--model", MODEL, "--steps", "1", "--data", tok, "--global-batch", "4",
                "--micro-batch", "2", "--lr", "1e-3"]
        i = args.index(flag) if flag in args else -1
        if i >= 0:
            args[i + 1] = value
        else:
            args += [flag, value]
        r.run("numeric options", "train %s %s" % (flag, value), args)
    for name, args in [
            ("plan --global-batch 999999999999", ["plan", "--model", MODEL, "--cluster", "h100-sxm:2x8",
                                                   "--global-batch", "999999999999", "--no-compile"]),
            ("plan cluster 999999999x999999999", ["plan", "--model", MODEL, "--cluster",
                                                   "h100-sxm:999999999x999999999", "--global-batch", "8",
                                                   "--no-compile"]),
            ("plan cluster 2^62x2^62", ["plan", "--model", MODEL, "--cluster",
                                         "h100-sxm:4611686018427387904x4611686018427387904",
                                         "--global-batch", "8", "--no-compile"]),
            ("plan --micro-batch 2^62", ["plan", "--model", MODEL, "--cluster", "h100-sxm:1x8",
                                          "--global-batch", "8", "--micro-batch", "4611686018427387904",
                                          "--no-compile"]),
            ("describe layers=99999999999", ["describe", "--model",
                                              "gpt:layers=99999999999,hidden=64,heads=4,seq=32,vocab=128"]),
            ("describe hidden=2^32", ["describe", "--model", "gpt:layers=2,hidden=4294967296,heads=4,seq=32,vocab=128"]),
            ("describe vocab=2^63-1", ["describe", "--model",
                                        "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=9223372036854775807"])]:
        r.run("sizes", name, args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", default="/tmp/megac-hostile")
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    r = Runner(os.path.abspath(args.megac), args.workdir)
    tok = os.path.join(args.workdir, "tok.npy")
    np.save(tok, (np.arange(8 * 9).reshape(8, 9) * 5 % 63).astype(np.int32))
    checkpoints(r, tok)
    plans(r)
    data_files(r)
    files_and_options(r, tok)
    for cls, c in r.by_class.items():
        print("%-30s %3d cases: %d crash, %d hang, %d silent" % (cls, sum(c.values()), c["crash"],
                                                                  c["hang"], c["silent"]))
    c = r.counts
    print("hostile inputs: %d cases, %d crash, %d hang, %d silent wrong" %
          (sum(c.values()), c["crash"], c["hang"], c["silent"]))
    sys.exit(0 if c["crash"] == c["hang"] == c["silent"] == 0 else 1)


if __name__ == "__main__":
    main()
