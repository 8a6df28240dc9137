"""End-to-end byte-level BPE: `megac data prep --tokenizer gpt2:... | hf:...` against Hugging
Face's own encoding, token for token.

The test trains a small ByteLevel BPE (vocab 1000) with the `tokenizers` library on the repo's
README.md and docs/*.md plus a mixed-Unicode text (accents, CJK, emoji, digits, whitespace runs,
contractions, CRLF), saves it both as vocab.json + merges.txt and as tokenizer.json, and
requires:
  - txt: a ~2.5 MB text (the corpus repeated, so the input is cut into several 1 MB chunks)
    prepared with gpt2:V,M and hf:T, --workers 1, 2 and 3, --append-eod: every paragraph's ids
    are HF's encoding followed by <|endoftext|>'s id, and the files are byte-identical across
    worker counts. A literal <|endoftext|> in the text is plain text for gpt2: (compared with HF
    on vocab.json + merges.txt without added tokens, as Megatron) and the added token for hf:.
  - jsonl: the mixed-Unicode documents and 400 seeded random strings of tricky fragments, as
    JSON lines: the same equality, also for tokenizer.json variants with a Split pre-tokenizer
    (Llama 3's pattern with ignore_merges; prefix spaces per split) and one whose post-processor
    adds a BOS token (not applied: HF's add_special_tokens=False ids).
  - transformers: GPT2TokenizerFast and GPT2Tokenizer (slow) built from vocab.json/merges.txt
    give the same ids on the unique paragraphs and JSON documents.
  - int32: a vocab entry renumbered to 70000 makes the dataset int32 (Megatron's rule), with
    HF's ids.
  - errors: a normalizer, and --append-eod without an end-of-document token, are refused with
    one line naming the file / option.

usage: tokenizer_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Prints PASS/FAIL per case and ends with "N passed, M failed"; exit 77 without `tokenizers`.
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models_test import ensure_venv  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = {4: "int32", 8: "uint16"}

MIXED = [
    "Café déjà vu, naïve façade — Ångström über straße.",
    "日本語のテキストと中文字符，还有한국어 문장。",
    "Emoji: 😀👍🏽🎉 and flags 🇫🇷🇯🇵, math ∑∫√ ≠ ½ ¾ ², symbols ©®™ €£¥.",
    "Numbers 12345 678 9.0 3,141,592 and ٣٤٥ (Arabic-Indic) and ⅫⅣ.",
    "Whitespace   runs\t\tand tabs,  double  spaces, trailing spaces   ",
    "   leading spaces and a line\r\nwith CRLF\r\nendings\r\n",
    "Contractions: I'm, you're, we've, they'll, he'd, it's, don't, ISN'T, 'quoted'.",
    "Newlines\n\n\nin a row\n \n  \nand\u3000ideographic\u00a0no-break spaces\u2003em.",
    "Punctuation!!! ??? ... --- *** ((nested)) [brackets] {braces} <tags> @#$%^&",
    "Ελληνικά και Русский текст, עברית ועוד, العربية أيضا, हिन्दी भी।",
    "A literal <|endoftext|> inside: plain text for gpt2:, the added token for hf: (as HF).",
]


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True)


def read_indexed(prefix):
    """(documents as flat token lists, dtype name), read with numpy from the format."""
    import numpy as np
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
    code = idx[17]
    count = int.from_bytes(idx[18:26], "little")
    docs = int.from_bytes(idx[26:34], "little")
    sizes = np.frombuffer(idx, np.int32, count, 34)
    pointers = np.frombuffer(idx, np.int64, count, 34 + 4 * count)
    doc_idx = np.frombuffer(idx, np.int64, docs, 34 + 12 * count)
    binary = open(prefix + ".bin", "rb").read()
    dtype = {4: np.int32, 8: np.uint16}[code]
    seqs = [np.frombuffer(binary, dtype, int(n), int(p)).tolist()
            for n, p in zip(sizes, pointers)]
    out = [sum(seqs[doc_idx[d]:doc_idx[d + 1]], []) for d in range(docs - 1)]
    return out, DTYPES[code]


def paragraphs(text):
    """The documents of a text file as megac defines them: runs of non-empty lines."""
    docs, current = [], []
    for line in re.findall(r"[^\n]*\n|[^\n]+$", text):
        if line.rstrip("\r\n") == "":
            if current:
                docs.append("".join(current))
            current = []
        else:
            current.append(line)
    if current:
        docs.append("".join(current))
    return docs


def corpus():
    texts = []
    for path in [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs",
                                                                                  "*.md"))):
        with open(path, encoding="utf-8", newline="") as f:
            texts.append(f.read())
    return texts + MIXED


def train(workdir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.save(os.path.join(workdir, "tokenizer.json"))
    tok.model.save(workdir)  # vocab.json, merges.txt
    return tok


def plain(args):
    """HF's tokenizer of vocab.json + merges.txt without added tokens: GPT-2's plain text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    t = Tokenizer(models.BPE.from_file(os.path.join(args.workdir, "vocab.json"),
                                       os.path.join(args.workdir, "merges.txt")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return t


def prep(megac, source, spec, prefix, extra=()):
    result = run([megac, "data", "prep", source, "--tokenizer", spec, "-o", prefix, *extra])
    if result.returncode != 0:
        raise RuntimeError(f"data prep {spec} {' '.join(extra)}: rc {result.returncode}: "
                           f"{result.stderr.strip()}")
    return result.stdout


def compare(got, want, label):
    if len(got) != len(want):
        return [f"{label}: {len(got)} documents, want {len(want)}"]
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            at = next((k for k, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            return [f"{label}: document {i} differs at token {at}: got {g[at:at + 8]}, "
                    f"want {w[at:at + 8]} ({len(g)} vs {len(w)} tokens)"]
    return []


def case_txt(args, tok, specs):
    eot = tok.token_to_id("<|endoftext|>")
    unique = "\n\n".join(corpus()) + "\n"
    text = unique * (2_500_000 // len(unique.encode()) + 1)
    source = os.path.join(args.workdir, "corpus.txt")
    with open(source, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    docs = paragraphs(text)
    wants = {"gpt2": [e.ids + [eot] for e in plain(args).encode_batch(docs)],
             "hf": [e.ids + [eot] for e in tok.encode_batch(docs)]}
    if wants["gpt2"] == wants["hf"]:
        return ["the corpus has no literal <|endoftext|>, so gpt2: vs hf: is not exercised"]
    problems, files = [], {}
    for name, spec in specs.items():
        want = wants[name]
        for workers in (1, 2, 3):
            prefix = os.path.join(args.workdir, f"txt-{name}-{workers}")
            out = prep(args.megac, source, spec, prefix, ["--append-eod", "--workers",
                                                           str(workers)])
            got, dtype = read_indexed(prefix)
            problems += compare(got, want, f"{name} workers {workers}")
            if dtype != "uint16":
                problems.append(f"{name}: dtype {dtype}, want uint16")
            files.setdefault(name, set()).add(open(prefix + ".bin", "rb").read() +
                                              open(prefix + ".idx", "rb").read())
            if workers == 2:
                print(f"  {name}: {out.strip()}")
        if len(files[name]) != 1:
            problems.append(f"{name}: the .bin/.idx files differ between worker counts")
    return problems


def random_docs(count=400):
    """Seeded random strings of the fragments the patterns treat differently."""
    rng = random.Random(0)
    pool = ["a", "Zq", "the", " ", "  ", "\t", "\n", "\r\n", "\n\n", "'", "'s", "'LL", "'re",
            "1", "23", "4567", "!", "?!", "...", "é", "日本", "😀", "½", "٣", "\u3000", "\u00a0",
            "-", "(", ")", "<", "|", ">", " x", " 9", " .", "\x0b", "\u2028", "ß", "İ", "ǅ", "\x1c", "\x85", "'ſ", "<|endoftext|>"]
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def variants(args, tok):
    """tokenizer.json files of other pre-tokenizers on the trained model, with HF tokenizers."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    out = {}
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
    for name, pattern, prefix, use_regex, ignore_merges in [
            ("llama3", llama3, False, False, True),
            ("llama3-prefix", llama3, True, True, False),
            ("gpt2-split-prefix", gpt2, True, False, False)]:
        t = Tokenizer.from_str(tok.to_str())
        t.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=use_regex)])
        spec = json.loads(t.to_str())
        spec["model"]["ignore_merges"] = ignore_merges
        path = os.path.join(args.workdir, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        out[name] = (path, Tokenizer.from_file(path))
    # A post-processor adding a BOS token is not applied: add_special_tokens=False's ids.
    from tokenizers import processors
    t = Tokenizer.from_str(tok.to_str())
    eot = tok.token_to_id("<|endoftext|>")
    t.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                     special_tokens=[("<|endoftext|>", eot)])
    path = os.path.join(args.workdir, "template.json")
    t.save(path)
    out["template"] = (path, t)
    return out


def case_jsonl(args, tok, specs):
    source = os.path.join(args.workdir, "mixed.jsonl")
    docs = MIXED + random_docs()
    with open(source, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
    wants = {"gpt2": [e.ids for e in plain(args).encode_batch(docs)],
             "hf": [e.ids for e in tok.encode_batch(docs)]}
    problems = []
    for name, spec in specs.items():
        prefix = os.path.join(args.workdir, f"jsonl-{name}")
        prep(args.megac, source, spec, prefix, ["--workers", "2"])
        problems += compare(read_indexed(prefix)[0], wants[name], f"jsonl {name}")
    for name, (path, hf) in variants(args, tok).items():
        prefix = os.path.join(args.workdir, f"jsonl-{name}")
        prep(args.megac, source, "hf:" + path, prefix, ["--workers", "2"])
        want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
        problems += compare(read_indexed(prefix)[0], want, f"jsonl {name}")
    return problems


def case_transformers(args, tok, specs):
    from transformers import GPT2Tokenizer, GPT2TokenizerFast
    files = dict(vocab_file=os.path.join(args.workdir, "vocab.json"),
                 merges_file=os.path.join(args.workdir, "merges.txt"))
    docs = paragraphs("\n\n".join(corpus()) + "\n") + MIXED
    want = [tok.encode(d).ids for d in docs]
    problems = []
    for cls in (GPT2TokenizerFast, GPT2Tokenizer):
        t = cls(**files)
        problems += compare([t.encode(d) for d in docs], want, cls.__name__)
    return problems


def case_int32(args, tok, specs):
    """A vocab entry renumbered to 70000 (a gap in the ids, as HF allows): int32 tokens."""
    with open(os.path.join(args.workdir, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    moved = next(i for i in tok.encode(MIXED[0]).ids if i > 256)
    vocab = {k: (70000 if v == moved else v) for k, v in spec["model"]["vocab"].items()}
    spec["model"]["vocab"] = vocab
    path = os.path.join(args.workdir, "big.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    from tokenizers import Tokenizer
    big = Tokenizer.from_file(path)
    source = os.path.join(args.workdir, "mixed.jsonl")  # MIXED + random_docs(), from case_jsonl
    prefix = os.path.join(args.workdir, "big")
    out = prep(args.megac, source, "hf:" + path, prefix)
    got, dtype = read_indexed(prefix)
    problems = compare(got, [e.ids for e in big.encode_batch(MIXED + random_docs())], "int32")
    if dtype != "int32" or "int32" not in out:
        problems.append(f"vocab 70001: dtype {dtype}, want int32 ({out.strip()})")
    if 70000 not in got[0]:
        problems.append(f"id 70000 is not in the first document: {got[0]}")
    return problems


def case_errors(args, tok, specs):
    problems = []
    with open(os.path.join(args.workdir, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    source = os.path.join(args.workdir, "mixed.jsonl")
    nfc = dict(spec, normalizer={"type": "NFC"})
    path = os.path.join(args.workdir, "nfc.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(nfc, f)
    result = run([args.megac, "data", "prep", source, "--tokenizer", "hf:" + path, "-o",
                  os.path.join(args.workdir, "bad")])
    lines = result.stderr.strip().splitlines()
    if result.returncode == 0 or len(lines) != 1 or "nfc.json" not in lines[0] or \
            "normalizer" not in lines[0]:
        problems.append(f"NFC normalizer: rc {result.returncode}, {result.stderr!r}")
    model = dict(spec["model"])
    vocab = {("<|nope|>" if k == "<|endoftext|>" else k): v for k, v in model["vocab"].items()}
    noeod = dict(spec, added_tokens=[], model=dict(model, vocab=vocab))
    path = os.path.join(args.workdir, "noeod.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(noeod, f)
    result = run([args.megac, "data", "prep", source, "--tokenizer", "hf:" + path, "-o",
                  os.path.join(args.workdir, "bad"), "--append-eod"])
    if result.returncode == 0 or "--append-eod" not in result.stderr:
        problems.append(f"--append-eod without eod: rc {result.returncode}, {result.stderr!r}")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--venv", default=os.path.join(REPO, ".venv"))
    args = parser.parse_args()
    ensure_venv(args.venv)
    args.megac = os.path.abspath(args.megac)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    tok = train(args.workdir)
    w = args.workdir
    specs = {"gpt2": f"gpt2:{w}/vocab.json,{w}/merges.txt", "hf": f"hf:{w}/tokenizer.json"}
    passed = failed = 0
    for name, case in [("txt", case_txt), ("jsonl", case_jsonl),
                       ("transformers", case_transformers), ("int32", case_int32),
                       ("errors", case_errors)]:
        try:
            problems = case(args, tok, specs)
        except Exception as e:  # a crash is a failure of that case, not of the script
            problems = [f"{type(e).__name__}: {e}"]
        if problems:
            failed += 1
            print(f"FAIL {name}")
            for p in problems:
                print(f"  {p}")
        else:
            passed += 1
            print(f"PASS {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
