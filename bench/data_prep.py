"""`megac data prep` throughput: a generated text file (~100 MB by default) tokenized with the
byte tokenizer and with byte-level BPE (gpt2:vocab.json,merges.txt and hf:tokenizer.json of a
vocabulary this script trains with the `tokenizers` library), on 1 and 2 workers. Prints MB/s
per run and MB per CPU second (which a loaded machine still measures); never fails on time.
--hf also times Hugging Face's encode_batch on the same documents.

The text: paragraphs of words drawn (Zipf-like, seeded) from the repo's README.md and docs/*.md,
with numbers, punctuation and some non-ASCII words mixed in, so the merge cache sees a realistic
spread of pieces rather than one repeated page.

usage: data_prep.py --megac build/bin/megac --workdir DIR [--mb 100] [--vocab 8000] [--hf]
        [--venv .venv]
"""
import argparse
import glob
import os
import random
import re
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from hf_models_test import ensure_venv  # noqa: E402
EXTRA = ["café", "naïve", "straße", "日本語", "中文", "😀", "Ελληνικά", "Русский", "½", "١٢٣",
         "don't", "it's", "we've"]


def generate(path, megabytes):
    words = []
    for doc in [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs",
                                                                                 "*.md"))):
        words += re.findall(r"\S+", open(doc, encoding="utf-8").read())
    vocab = sorted(set(words)) + EXTRA
    rng = random.Random(0)
    rng.shuffle(vocab)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    target = megabytes * 1_000_000
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            parts = []
            for _ in range(200):  # a paragraph of a few sentences
                n = rng.randint(3, 30)
                sentence = " ".join(rng.choices(vocab, weights, k=n))
                if rng.random() < 0.2:
                    sentence += f" {rng.randint(0, 10**rng.randint(1, 7))}"
                parts.append(sentence + rng.choice([".", "!", "?", ",", ";"]))
                if rng.random() < 0.15:
                    parts.append("\n\n")
            block = " ".join(parts) + "\n\n"
            f.write(block)
            written += len(block.encode())
    return written


def train(workdir, text_path, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    with open(text_path, encoding="utf-8") as f:
        sample = f.read(5_000_000)
    tok.train_from_iterator(sample.split("\n\n"), trainer)
    tok.save(os.path.join(workdir, "tokenizer.json"))
    tok.model.save(workdir)
    return tok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--hf", action="store_true", help="also time HF encode_batch")
    parser.add_argument("--venv", default=os.path.join(REPO, ".venv"))
    args = parser.parse_args()
    ensure_venv(args.venv)
    os.makedirs(args.workdir, exist_ok=True)
    text = os.path.join(args.workdir, f"text-{args.mb}mb.txt")
    if not os.path.exists(text):
        size = generate(text, args.mb)
        print(f"generated {text}: {size / 1e6:.1f} MB")
    tok = train(args.workdir, text, args.vocab)
    w = args.workdir
    specs = {"byte": "byte", "gpt2": f"gpt2:{w}/vocab.json,{w}/merges.txt",
             "hf": f"hf:{w}/tokenizer.json"}
    size_mb = os.path.getsize(text) / 1e6
    print(f"data prep of {size_mb:.1f} MB ({os.cpu_count()} CPUs here; "
          f"BPE vocab {args.vocab}):")
    for name, spec in specs.items():
        for workers in (1, 2):
            prefix = os.path.join(w, f"out-{name}-{workers}")
            cmd = [args.megac, "data", "prep", text, "--tokenizer", spec, "-o", prefix,
                   "--append-eod", "--workers", str(workers)]
            start = time.perf_counter()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            result = subprocess.run(cmd, capture_output=True, text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds = time.perf_counter() - start
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            rate = re.search(r"\(([\d.]+) MB/s\)", result.stdout)
            tokens = re.search(r"(\d+) tokens", result.stdout)
            if result.returncode != 0 or not rate:
                print(f"  {name:5s} workers {workers}: failed: {result.stderr.strip()}")
                continue
            print(f"  {name:5s} workers {workers}: {float(rate.group(1)):7.1f} MB/s "
                  f"({tokens.group(1)} tokens, {seconds:.1f} s wall, {cpu:.1f} s CPU = "
                  f"{size_mb / cpu if cpu > 0 else 0:.1f} MB per CPU second)")
            for suffix in (".bin", ".idx"):
                os.remove(prefix + suffix)
    if args.hf:
        docs = [d for d in open(text, encoding="utf-8").read().split("\n\n") if d.strip()]
        start = time.perf_counter()
        tok.encode_batch(docs)
        seconds = time.perf_counter() - start
        print(f"  HF tokenizers encode_batch (its own thread pool): "
              f"{os.path.getsize(text) / 1e6 / seconds:.1f} MB/s")


if __name__ == "__main__":
    main()
