"""End-to-end indexed datasets: `megac data prep` writes Megatron's .bin/.idx format and
`megac train --data PREFIX` trains on windows cut from it.

Cases:
  - prep: the repo's README.md and docs/*.md (concatenated) with --tokenizer byte --append-eod;
    an independent reader here (numpy, from the format description: magic, version, dtype code
    8 = uint16, counts, int32 sizes, int64 byte pointers, int64 document index) must find
    exactly the corpus's paragraphs as UTF-8 bytes, each followed by token 256.
  - jsonl: a .jsonl file's "text" members (non-ASCII included) become the documents.
  - train: `megac train --data PREFIX --model gpt:...,seq=32,vocab=257 --steps 3` gives finite
    losses, and exactly (bit for bit) the losses of the same run on a .npy of the windows this
    script cuts itself (tokens concatenated, windows of S+1 at stride S, Fisher-Yates order with
    SplitMix64 seeded by --seed).
  - split: --split 8,2,0 trains on the windows of the first 80% of the documents and validates
    on the next 20% (the same losses as .npy files of those windows), and needs an indexed set.
  - blend: `--data-path 5 A 3 B 2 C` (Megatron's weighted blend; B and C so small that they run
    through several epochs) gives exactly the losses of a .npy of the rows this script picks:
    each dataset's windows, every epoch in a new seeded order, chosen by Megatron's greedy
    blending rule (dataset maximizing w_d * (i+1) - taken_d, ties to the first); with --split,
    each dataset's train part; `--data-path A` alone is `--data A`; bad blends are refused.
  - test: --split 8,1,1 reports the test part's loss and perplexity after the last step (stdout
    and a {"step", "test_loss", "test_ppl"} log record), the loss of --eval-iters batches of the
    test part's windows (equal to validating on a .npy of them).
  - ranks: --ranks 2 (dp 2) on the dataset and on a blend gives the 1-rank losses, each rank
    reading only its rows (skipped without mpirun: the other cases still run, and the script
    exits 77, ctest's SKIP_RETURN_CODE, when none failed).
  - errors: a corrupt .idx is refused naming the file; a window with a token outside the
    model's vocabulary is refused naming the dataset and window; --seq with a .npy and a
    tokenizer whose vocabulary file is missing are refused.
  - throughput: prep of a ~20 MB generated text file; prints MB/s (never asserted).

usage: data_test.py --megac build/bin/megac --workdir DIR [--throughput-mb 20]
Prints PASS/FAIL/SKIP per case and ends with "N passed, M failed, K skipped". Compared losses must
be finite, and bounds are written `not diff <= bound`, which a NaN fails.
"""
import argparse
import glob
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MASK64 = (1 << 64) - 1
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True)


def read_indexed(prefix):
    """(documents as lists of sequences of tokens, dtype code), read with numpy."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
    version = int.from_bytes(idx[9:17], "little")
    code = idx[17]
    count = int.from_bytes(idx[18:26], "little")
    docs = int.from_bytes(idx[26:34], "little")
    assert version == 1, version
    sizes = np.frombuffer(idx, np.int32, count, 34)
    pointers = np.frombuffer(idx, np.int64, count, 34 + 4 * count)
    doc_idx = np.frombuffer(idx, np.int64, docs, 34 + 12 * count)
    assert len(idx) == 34 + 12 * count + 8 * docs
    binary = np.fromfile(prefix + ".bin", np.uint8)
    dtype = DTYPES[code]
    seqs = [np.frombuffer(binary.tobytes(), dtype, int(n), int(p)).tolist()
            for n, p in zip(sizes, pointers)]
    out = [seqs[doc_idx[d]:doc_idx[d + 1]] for d in range(docs - 1)]
    return out, code


def paragraphs(data):
    """The documents of a text file as megac defines them: runs of non-empty lines."""
    docs, current = [], []
    for line in re.findall(rb"[^\n]*\n|[^\n]+$", data):
        if line.rstrip(b"\r\n") == b"":
            if current:
                docs.append(b"".join(current))
            current = []
        else:
            current.append(line)
    if current:
        docs.append(b"".join(current))
    return docs


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    x = state
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, x ^ (x >> 31)


def windows(stream, seq, seed, max_rows):
    total = (len(stream) - 1) // seq
    order = list(range(total))
    state = seed
    for i in range(total - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (i + 1)
        order[i], order[j] = order[j], order[i]
    rows = min(total, max_rows)
    return np.array([stream[w * seq:w * seq + seq + 1] for w in order[:rows]], dtype=np.int64)


def permutation(total, seed):
    order = list(range(total))
    state = seed
    for i in range(total - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def epoch_seed(seed, epoch):
    """Epoch 0 keeps the run's seed; epoch e > 0: SplitMix64(seed ^ SplitMix64(e))."""
    if epoch == 0:
        return seed
    _, mixed = splitmix64(epoch)
    _, out = splitmix64(seed ^ mixed)
    return out


def epoch_windows(stream, seq, seed, count):
    """The first `count` samples of a dataset: its windows, each epoch in a new seeded order."""
    total = (len(stream) - 1) // seq
    rows, order = [], None
    for i in range(count):
        epoch, k = divmod(i, total)
        if k == 0 or order is None:
            order = permutation(total, epoch_seed(seed, epoch))
        w = order[k]
        rows.append(stream[w * seq:w * seq + seq + 1])
    return rows


def blend_rows(streams, weights, seq, seed, count):
    """Megatron's BlendedDataset, from its description: sample i comes from the dataset d with
    the largest w_d * max(i, 1) - taken_d (w normalized; ties: the lowest d), and is that
    dataset's next sample."""
    w = [x / sum(weights) for x in weights]
    samples = [epoch_windows(s, seq, seed, count) for s in streams]
    taken, rows, picks = [0] * len(streams), [], []
    for i in range(count):
        d = max(range(len(w)), key=lambda d: (w[d] * max(i, 1) - taken[d], -d))
        rows.append(samples[d][taken[d]])
        picks.append(d)
        taken[d] += 1
    return np.array(rows, dtype=np.int64), picks


def prep(megac, source, prefix, *extra):
    result = run([megac, "data", "prep", source, "--tokenizer", "byte", "-o", prefix, *extra])
    if result.returncode != 0:
        raise RuntimeError(f"megac data prep failed ({result.returncode}): {result.stderr}")
    return result.stdout


def case_prep(args, work):
    corpus = os.path.join(work, "corpus.txt")
    files = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    data = b"\n\n".join(open(f, "rb").read() for f in files)
    with open(corpus, "wb") as f:
        f.write(data)
    prefix = os.path.join(work, "corpus")
    out = prep(args.megac, corpus, prefix, "--append-eod")
    print("  " + out.strip())
    want = paragraphs(data)
    docs, code = read_indexed(prefix)
    problems = []
    if code != 8:
        problems.append(f"dtype code {code}, not 8 (uint16)")
    if len(docs) != len(want):
        problems.append(f"{len(docs)} documents, want {len(want)}")
    for d, (got, text) in enumerate(zip(docs, want)):
        if got != [list(text) + [256]]:
            problems.append(f"document {d} differs")
            break
    if not re.search(rf"{len(want)} documents, \d+ tokens", out):
        problems.append(f"summary line: {out!r}")
    info = run([args.megac, "data", "info", prefix])
    tokens = sum(len(t) + 1 for t in want)
    if info.stdout.strip() != f"dtype uint16, {len(want)} sequences, {len(want)} documents, " \
                              f"{tokens} tokens":
        problems.append(f"data info: {info.stdout!r} {info.stderr!r}")
    return problems


def case_jsonl(args, work):
    source = os.path.join(work, "docs.jsonl")
    texts = ["héllo wörld", "", "line one\nline two", "€ and \U0001F600"]
    with open(source, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
        f.write("\n")
    prefix = os.path.join(work, "jsonl")
    prep(args.megac, source, prefix)
    docs, _ = read_indexed(prefix)
    want = [[list(t.encode("utf-8"))] for t in texts if t]
    return [] if docs == want else [f"documents {docs} != {want}"]


def case_train(args, work):
    prefix = os.path.join(work, "corpus")  # from case_prep
    docs, _ = read_indexed(prefix)
    stream = [t for doc in docs for seq in doc for t in seq]
    seq, steps, batch, seed = 32, 3, 4, 5
    rows = windows(stream, seq, seed, steps * batch)
    npy = os.path.join(work, "windows.npy")
    np.save(npy, rows)
    common = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257", "--steps", str(steps),
              "--global-batch", str(batch), "--micro-batch", "2", "--lr", "0.001",
              "--seed", str(seed)]
    losses = {}
    for name, data in (("prefix", prefix), ("npy", npy), ("bin", prefix + ".bin")):
        log = os.path.join(work, f"train_{name}.jsonl")
        result = run([args.megac, "train", *common, "--data", data, "--log-json", log])
        if result.returncode != 0:
            return [f"train --data {data} failed: {result.stderr.strip()}"]
        with open(log) as f:
            losses[name] = [json.loads(line)["loss"] for line in f]
    problems = []
    if len(losses["prefix"]) != steps or not all(math.isfinite(x) for x in losses["prefix"]):
        problems.append(f"losses {losses['prefix']}")
    if losses["prefix"] != losses["npy"]:
        problems.append(f"losses {losses['prefix']} != the .npy windows' {losses['npy']}")
    if losses["bin"] != losses["prefix"]:
        problems.append(f"--data PREFIX.bin: losses {losses['bin']} != {losses['prefix']}")
    print(f"  losses {losses['prefix']}")
    return problems


def split_parts(documents, weights):
    """runtime/data splitDocuments: contiguous document ranges in proportion to `weights`."""
    total, cumulative, first, parts = sum(weights), 0.0, 0, []
    for i, w in enumerate(weights):
        cumulative += w
        last = documents if i + 1 == len(weights) else int(
            math.floor(cumulative / total * documents + 0.5))
        last = min(max(last, first), documents)
        parts.append((first, last))
        first = last
    return parts


def case_split(args, work):
    """--split 8,2,0: training reads only the windows of the first 80% of the documents (the
    same losses as a .npy of those windows), and --eval-interval without --eval-data evaluates
    the next 20% (the same validation loss as --eval-data with a .npy of those windows)."""
    prefix = os.path.join(work, "corpus")  # from case_prep
    docs, _ = read_indexed(prefix)
    (t0, t1), (v0, v1), _ = split_parts(len(docs), [8, 2, 0])
    seq, steps, batch, seed = 32, 3, 4, 5

    def part_windows(first, last, max_rows):
        stream = [t for doc in docs[first:last] for s in doc for t in s]
        return windows(stream, seq, seed, max_rows)

    train_npy, valid_npy = os.path.join(work, "split_train.npy"), os.path.join(work, "split_valid.npy")
    np.save(train_npy, part_windows(t0, t1, steps * batch))
    np.save(valid_npy, part_windows(v0, v1, 2 * batch))  # --eval-iters 2 global batches
    common = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257", "--steps", str(steps),
              "--global-batch", str(batch), "--micro-batch", "2", "--lr", "0.001",
              "--seed", str(seed), "--eval-interval", "3", "--eval-iters", "2"]
    logs = {}
    for name, data in (("split", ["--data", prefix, "--split", "8,2,0"]),
                       ("npy", ["--data", train_npy, "--eval-data", valid_npy])):
        log = os.path.join(work, f"split_{name}.jsonl")
        result = run([args.megac, "train", *common, *data, "--log-json", log])
        if result.returncode != 0:
            return [f"train {' '.join(data)} failed: {result.stderr.strip()}"]
        with open(log) as f:
            logs[name] = [json.loads(line) for line in f]
    loss = {k: [r["loss"] for r in v if "loss" in r] for k, v in logs.items()}
    val = {k: [r["val_loss"] for r in v if "val_loss" in r] for k, v in logs.items()}
    problems = []
    if len(loss["split"]) != steps or loss["split"] != loss["npy"]:
        problems.append(f"--split losses {loss['split']} != the train part's windows' {loss['npy']}")
    if len(val["split"]) != 1 or val["split"] != val["npy"]:
        problems.append(f"--split validation {val['split']} != the validation part's {val['npy']}")
    print(f"  documents: train [{t0}, {t1}), validation [{v0}, {v1}); losses {loss['split']}, "
          f"validation {val['split']}")
    result = run([args.megac, "train", *common[:-4], "--data", train_npy, "--split", "1,1,0"])
    if result.returncode != 2 or "--split applies to an indexed dataset" not in result.stderr:
        problems.append(f"--split with .npy: rc {result.returncode}, {result.stderr.strip()!r}")
    return problems


def train_log(args, work, name, argv):
    """Runs `megac train argv --log-json`; returns (records, stdout) or raises with stderr."""
    log = os.path.join(work, f"{name}.jsonl")
    result = run([args.megac, "train", *argv, "--log-json", log])
    if result.returncode != 0:
        raise RuntimeError(f"train {' '.join(argv)} failed: {result.stderr.strip()}")
    with open(log) as f:
        return [json.loads(line) for line in f], result.stdout


def stream_of(docs):
    return [t for doc in docs for s in doc for t in s]


def case_blend(args, work):
    a = os.path.join(work, "corpus")  # from case_prep
    small = os.path.join(work, "small.txt")
    with open(small, "w") as f:  # 3 windows of 33 tokens: the blend runs through its epochs
        f.write("A small second dataset, a blend's minority part, read for several epochs: " * 2)
    b = os.path.join(work, "small")
    prep(args.megac, small, b, "--append-eod")
    c = os.path.join(work, "jsonl")  # from case_jsonl: 1 window
    streams = [stream_of(read_indexed(p)[0]) for p in (a, b, c)]
    seq, steps, batch, seed = 32, 4, 4, 11
    rows, picks = blend_rows(streams, [5, 3, 2], seq, seed, steps * batch)
    npy = os.path.join(work, "blend.npy")
    np.save(npy, rows)
    common = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257", "--steps", str(steps),
              "--global-batch", str(batch), "--micro-batch", "2", "--lr", "0.001",
              "--seed", str(seed)]
    loss = lambda records: [r["loss"] for r in records if "loss" in r]
    problems = []
    blended = loss(train_log(args, work, "blend", [*common, "--data-path", "5", a, "3", b, "2", c])[0])
    oracle = loss(train_log(args, work, "blend_npy", [*common, "--data", npy])[0])
    counts = [picks.count(d) for d in range(3)]
    print(f"  samples per dataset {counts} (windows {[(len(s) - 1) // seq for s in streams]}); "
          f"losses {blended}")
    if len(blended) != steps or blended != oracle:
        problems.append(f"blend losses {blended} != the oracle's rows' {oracle}")
    if counts[1] <= (len(streams[1]) - 1) // seq:
        problems.append(f"dataset B read {counts[1]} samples: no second epoch exercised")
    # --split applies to each dataset: A's train part (B and C have one document: all train).
    docs = read_indexed(a)[0]
    (t0, t1), _, _ = split_parts(len(docs), [8, 2, 0])
    parts = [stream_of(docs[t0:t1]), streams[1]]
    rows, _ = blend_rows(parts, [0.7, 0.3], seq, seed, steps * batch)
    np.save(npy, rows)
    split_blend = loss(train_log(args, work, "blend_split",
                                 [*common, "--data-path", "0.7", a, "0.3", b, "--split", "8,2,0"])[0])
    oracle = loss(train_log(args, work, "blend_split_npy", [*common, "--data", npy])[0])
    if split_blend != oracle:
        problems.append(f"blend with --split: losses {split_blend} != the oracle's {oracle}")
    single = loss(train_log(args, work, "blend_one", [*common, "--data-path", a])[0])
    plain = loss(train_log(args, work, "blend_plain", [*common, "--data", a])[0])
    if single != plain:
        problems.append(f"--data-path A: losses {single} != --data A's {plain}")
    for bad, message in ((["0.5", a, "0.5"], "3 values"),
                         (["-1", a, "1", b], "weight '-1'"),
                         (["x", a, "1", b], "weight 'x'"),
                         (["1", a, "1", os.path.join(work, "nosuch")],
                          os.path.join(work, "nosuch") + ".idx, " + os.path.join(work, "nosuch") +
                          ".bin not found")):
        result = run([args.megac, "train", *common, "--data-path", *bad])
        if result.returncode != 2 or message not in result.stderr:
            problems.append(f"--data-path {' '.join(bad)}: rc {result.returncode}, "
                            f"{result.stderr.strip()!r}")
    result = run([args.megac, "train", *common, "--data", a, "--data-path", a])
    if result.returncode != 2 or "not both" not in result.stderr:
        problems.append(f"--data with --data-path: {result.stderr.strip()!r}")
    return problems


def case_test(args, work):
    """--split 8,1,1: after the last step, the test part's loss over --eval-iters batches."""
    prefix = os.path.join(work, "corpus")
    docs, _ = read_indexed(prefix)
    (t0, t1), _, (s0, s1) = split_parts(len(docs), [8, 1, 1])
    seq, steps, batch, seed, iters = 32, 3, 4, 5, 2
    train_npy, test_npy = os.path.join(work, "test_train.npy"), os.path.join(work, "test_test.npy")
    np.save(train_npy, windows(stream_of(docs[t0:t1]), seq, seed, steps * batch))
    np.save(test_npy, windows(stream_of(docs[s0:s1]), seq, seed, iters * batch))
    common = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257", "--steps", str(steps),
              "--global-batch", str(batch), "--micro-batch", "2", "--lr", "0.001",
              "--seed", str(seed), "--eval-iters", str(iters)]
    records, out = train_log(args, work, "test_split", [*common, "--data", prefix, "--split", "8,1,1"])
    oracle, _ = train_log(args, work, "test_npy", [*common, "--data", train_npy, "--eval-data",
                                                    test_npy, "--eval-interval", str(steps)])
    tests = [r for r in records if "test_loss" in r]
    want = [r["val_loss"] for r in oracle if "val_loss" in r]
    problems = []
    if [r["loss"] for r in records if "loss" in r] != [r["loss"] for r in oracle if "loss" in r]:
        problems.append("training losses differ from the train part's windows'")
    if len(tests) != 1 or tests[0]["step"] != steps or [tests[0]["test_loss"]] != want:
        problems.append(f"test records {tests} != the test part's loss {want}")
    elif not close(tests[0]["test_ppl"], math.exp(tests[0]["test_loss"]), 1e-9):
        problems.append(f"test perplexity {tests[0]['test_ppl']} != exp(loss)")
    if not re.search(rf"test after step {steps}: loss [\d.]+, perplexity [\d.]+", out):
        problems.append(f"no test line in {out!r}")
    if any("val_loss" in r for r in records):
        problems.append("validation ran without --eval-interval")
    print(f"  documents: test [{s0}, {s1}); test loss {tests[0]['test_loss'] if tests else None}")
    return problems


def close(got, want, rtol):
    """|got - want| <= rtol |want| with both finite (False for a NaN or an infinity)."""
    return math.isfinite(got) and math.isfinite(want) and abs(got - want) <= rtol * abs(want)


def case_ranks(args, work):
    """--ranks 2 (dp 2) on --data PREFIX: every rank cuts the same windows; losses as 1 rank
    within fp32 roundoff of the data-parallel gradient sum (1e-5 relative)."""
    if not shutil.which("mpirun"):
        return None
    common = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257", "--steps", "3",
              "--global-batch", "4", "--lr", "0.001", "--data", os.path.join(work, "corpus")]
    losses = []
    for extra in (["--micro-batch", "2"], ["--micro-batch", "1", "--ranks", "2", "--oversubscribe"]):
        log = os.path.join(work, f"ranks{len(losses)}.jsonl")
        result = run([args.megac, "train", *common, *extra, "--log-json", log])
        if result.returncode != 0:
            return [f"train {' '.join(extra)} failed: {result.stderr.strip()}"]
        with open(log) as f:
            losses.append([json.loads(line)["loss"] for line in f])
    one, two = losses
    problems = []
    if len(one) != 3 or len(two) != 3 or not all(close(b, a, 1e-5) for a, b in zip(one, two)):
        problems.append(f"2 ranks: losses {two} differ from 1 rank's {one}")
    # A blend with its epochs, every rank reading only its rows of each micro-batch.
    blend = ["--data-path", "5", os.path.join(work, "corpus"), "3", os.path.join(work, "small"),
             "2", os.path.join(work, "jsonl"), "--seed", "11", "--steps", "4"]
    blended = []
    for extra in (["--micro-batch", "2"], ["--micro-batch", "1", "--ranks", "2", "--oversubscribe"]):
        records, _ = train_log(args, work, f"ranks_blend{len(blended)}",
                               [*common[:2], *common[4:8], *blend, *extra])
        blended.append([r["loss"] for r in records])
    one, two = blended
    if len(one) != 4 or len(two) != 4 or not all(close(b, a, 1e-5) for a, b in zip(one, two)):
        problems.append(f"2 ranks on a blend: losses {two} differ from 1 rank's {one}")
    return problems


def case_errors(args, work):
    problems = []
    bad = os.path.join(work, "bad")
    prep(args.megac, os.path.join(REPO, "README.md"), bad)
    with open(bad + ".idx", "r+b") as f:
        f.write(b"XX")
    model = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=257", "--steps", "1",
             "--global-batch", "2", "--micro-batch", "2", "--lr", "0.001"]
    result = run([args.megac, "train", *model, "--data", bad])
    if result.returncode == 0 or f"{bad}.idx: not an indexed dataset" not in result.stderr:
        problems.append(f"corrupt .idx: rc {result.returncode}, {result.stderr.strip()!r}")
    npy = os.path.join(work, "windows.npy")
    result = run([args.megac, "train", *model, "--data", npy, "--seq", "32"])
    if result.returncode != 2 or "--seq applies to an indexed dataset" not in result.stderr:
        problems.append(f"--seq with .npy: rc {result.returncode}, {result.stderr.strip()!r}")
    spec16 = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=16,vocab=257"] + model[2:]
    result = run([args.megac, "train", *spec16, "--data", os.path.join(work, "corpus"), "--seq",
                  "32"])
    if result.returncode == 0:
        problems.append("--seq 32 with a spec of seq=16 was accepted")
    # Windows are checked as a step reads them: every window of English text holds a byte >= 100.
    corpus = os.path.join(work, "corpus")
    vocab100 = ["--model", "gpt:layers=1,hidden=16,heads=2,seq=32,vocab=100"] + model[2:]
    result = run([args.megac, "train", *vocab100, "--data", corpus])
    if result.returncode != 1 or not re.search(
            rf"error: token \d+ at position \d+ of {re.escape(corpus)}, window \d+ "
            r"\(epoch 0\) is outside the model's vocabulary \[0, 100\)", result.stderr):
        problems.append(f"token >= vocab: rc {result.returncode}, {result.stderr.strip()!r}")
    result = run([args.megac, "data", "prep", npy, "--tokenizer", "gpt2:v.json,m.txt", "-o", bad])
    if result.returncode != 2 or "v.json" not in result.stderr:  # missing vocab file named
        problems.append(f"gpt2 tokenizer: rc {result.returncode}, {result.stderr.strip()!r}")
    return problems


def case_throughput(args, work):
    source = os.path.join(work, "big.txt")
    rng = random.Random(0)
    words = ["the", "model", "token", "layer", "parallel", "gradient", "tensor", "pipeline",
             "rank", "ü", "naïve", "data", "loss", "step"]
    target = int(args.throughput_mb * 1e6)
    with open(source, "w", encoding="utf-8") as f:
        written = 0
        while written < target:
            para = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(4))
            f.write(para + "\n\n")
            written += len(para) + 2
    out = prep(args.megac, source, os.path.join(work, "big"), "--append-eod")
    rate = re.search(r"\(([\d.]+) MB/s\)", out)
    print(f"  prep throughput: {rate.group(1) if rate else '?'} MB/s ({out.strip()})")
    return [] if rate else [f"no MB/s in {out!r}"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--throughput-mb", type=float, default=20)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    passed = failed = skipped = 0
    for name, case in (("prep", case_prep), ("jsonl", case_jsonl), ("train", case_train),
                       ("split", case_split), ("blend", case_blend), ("test", case_test),
                       ("ranks", case_ranks), ("errors", case_errors),
                       ("throughput", case_throughput)):
        try:
            problems = case(args, args.workdir)
        except Exception as e:  # a crash is a failure of this case, not of the script
            problems = [f"{type(e).__name__}: {e}"]
        if problems is None:
            print(f"SKIP: {name} (mpirun is not on PATH; install openmpi-bin)")
            skipped += 1
            continue
        print(f"{'PASS' if not problems else 'FAIL'}: {name}")
        for p in problems:
            print(f"  {p}")
        passed += not problems
        failed += bool(problems)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed or not passed:
        return 1
    return SKIP if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
