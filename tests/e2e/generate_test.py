#!/usr/bin/env python3
"""`megac generate`: greedy decoding from a `megac train --save` checkpoint is deterministic and
is the forward pass's argmax, token by token; sampling is repeatable with a seed.

  - a zoo GPT on the byte corpus: against PyTorch's GptModel with the trained weights (the same
    window: the last seq tokens at position 0, zeros after them, causal); a padding=1 GPT
    (attention_mask fed over the window) continues as the same weights without the mask;
  - ONNX-imported causal LMs (tests/e2e/torch_models.py's GPT, Hugging Face GPT-2 and Llama
    exports): against a greedy loop in onnxruntime on the `megac export`ed model (an oracle that
    shares no code with megac's forward), with the byte tokenizer; a changed ONNX file and a
    checkpoint of another model are refused; --onnx finds a moved file.
A token may differ from the oracle's argmax only where the oracle's top two logits are within
1e-4 (fp32 roundoff decides such ties); the test then follows megac's token.

usage: generate_test.py --megac build/bin/megac [--workdir DIR] [--venv .venv]
The ONNX part needs onnxruntime and transformers (the test venv from scripts/bootstrap.sh; the
script re-executes itself with the venv's python); without them it runs the zoo part and exits
77 (skip) naming what is missing.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from safetensors_np import read_safetensors  # noqa: E402

SKIP = 77
DATA = os.path.join(HERE, "..", "..", "examples", "tiny-corpus.npy")
LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 2, 64, 4, 64, 256
MODEL = f"gpt:layers={LAYERS},hidden={HIDDEN},heads={HEADS},seq={SEQ},vocab={VOCAB}"
PROMPT = "The compiler "
TOKENS = 16
STEPS = 100
SENTENCE = "The compiler lowers the model; megac plans each rank of the layout and trains it. "
TOKENIZER_TEXT = """
Training a language model on many ranks splits its layers, its heads and its batch. Tensor
parallelism divides each matrix; pipeline parallelism assigns whole layers to stages; data
parallelism gives every replica its own rows. The optimizer state may be sharded as well.
Checkpoints record every shard with its offset, so a run can resume under another layout.
"""
BYTE_VOCAB = 257  # the byte tokenizer's ids: ids past it are never chosen


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def have_venv_modules():
    try:
        import onnxruntime  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def torch_state(weights):
    """The zoo GPT's parameters under torch_models.GptModel's names (its attention fuses q, k, v
    into c_attn, GPT-2's layout)."""
    import torch
    t = {name: torch.from_numpy(np.array(w, dtype=np.float32)) for name, w in weights.items()}
    state = {"wte.weight": t["wte"], "wpe.weight": t["wpe"], "lm_head.weight": t["wte"],
             "ln_f.weight": t["ln_f.weight"], "ln_f.bias": t["ln_f.bias"]}
    for i in range(LAYERS):
        h, m = f"h{i}.", f"h.{i}."
        for kind in ("weight", "bias"):
            state[m + "ln_1." + kind] = t[h + "ln1." + kind]
            state[m + "ln_2." + kind] = t[h + "ln2." + kind]
            state[m + "attn.c_attn." + kind] = torch.cat(
                [t[h + "attn." + x + "." + kind] for x in ("q", "k", "v")])
            state[m + "attn.c_proj." + kind] = t[h + "attn.proj." + kind]
            state[m + "c_fc." + kind] = t[h + "mlp.fc." + kind]
            state[m + "c_proj." + kind] = t[h + "mlp.proj." + kind]
    return state


def generate(megac, ckpt, *extra, prompt=PROMPT, tokens=TOKENS):
    out = subprocess.run([megac, "generate", "--load", ckpt, "--prompt", prompt, "--max-tokens",
                          str(tokens), *extra], capture_output=True)
    if out.returncode != 0:
        print("FAIL: megac generate:", out.stderr.decode(errors="replace"))
        sys.exit(1)
    timing = re.search(rb"([0-9.]+) ms/token", out.stderr)
    return out.stdout.rstrip(b"\n"), float(timing.group(1)) if timing else None


def greedy_oracle(step_logits, prompt, new, seq, what):
    """Checks megac's greedy continuation `new` (ids) of `prompt` against `step_logits(window)`,
    the oracle's logits row after the window; returns the number of near-ties followed."""
    tokens, ties = list(prompt), 0
    for i, got in enumerate(new):
        window = tokens[-seq:]
        logits = np.asarray(step_logits(window), dtype=np.float64)[:BYTE_VOCAB]
        want = int(np.argmax(logits))
        top2 = np.sort(logits)[-2:]
        tie = top2[1] - top2[0] < 1e-4
        if got != want:
            check(tie, "%s token %d: megac %d, oracle argmax %d" % (what, i, got, want))
            ties += 1
        tokens.append(got)
    return ties


def zoo_part(megac, tmp):
    import torch
    from torch_models import GptModel
    ckpt, final = os.path.join(tmp, "ckpt"), os.path.join(tmp, "final.safetensors")
    subprocess.run([megac, "train", "--model", MODEL, "--data", DATA, "--steps", str(STEPS),
                    "--global-batch", "8", "--micro-batch", "4", "--lr", "3e-3", "--save",
                    ckpt, "--save-weights", final], check=True, capture_output=True)
    greedy, ms = generate(megac, ckpt)
    check(greedy == generate(megac, ckpt)[0], "zoo: greedy decoding is deterministic")
    check(greedy.startswith(PROMPT.encode()) and len(greedy) == len(PROMPT) + TOKENS,
          "zoo: the prompt and %d new bytes: %r (%.2f ms/token)" % (TOKENS, greedy, ms))

    model = GptModel(LAYERS, HIDDEN, HEADS, SEQ, VOCAB)
    model.load_state_dict(torch_state(read_safetensors(final)), strict=False)  # mask buffers stay

    def step(window):
        ids = torch.zeros(1, SEQ, dtype=torch.long)
        ids[0, :len(window)] = torch.tensor(window)
        with torch.no_grad():
            return model(ids)[0, len(window) - 1].numpy()

    greedy_oracle(step, PROMPT.encode(), list(greedy[len(PROMPT):]), SEQ, "zoo")
    check(True, "zoo: every token is PyTorch's argmax")
    sampled = generate(megac, ckpt, "--temperature", "0.8", "--top-k", "20", "--seed", "3")[0]
    check(sampled == generate(megac, ckpt, "--temperature", "0.8", "--top-k", "20",
                              "--seed", "3")[0], "zoo: sampling with a seed is repeatable")
    # A padding model (zoo padding=1: an attention_mask input): generate feeds 1 over the
    # window's tokens and 0 after them. Causal attention never looks past the last token, so
    # the same weights run as the model without the mask (--model) continue alike; a mask fed
    # as zeros, or not at all, would not.
    padded = os.path.join(tmp, "padded")
    subprocess.run([megac, "train", "--model", MODEL + ",padding=1", "--data", DATA, "--steps",
                    str(STEPS), "--global-batch", "8", "--micro-batch", "4", "--lr", "3e-3",
                    "--save", padded], check=True, capture_output=True)
    with_mask = generate(megac, padded)[0]
    check(with_mask == generate(megac, padded, "--model", MODEL)[0] and
          len(with_mask) == len(PROMPT) + TOKENS,
          "zoo padding=1: generate feeds the attention_mask; the continuation %r equals the "
          "unmasked model's on the same weights" % with_mask)
    missing = subprocess.run([megac, "generate", "--load", os.path.join(tmp, "none"),
                              "--prompt", "x"], capture_output=True, text=True)
    check(missing.returncode != 0 and "error" in missing.stderr,
          "a missing checkpoint is an error: " + missing.stderr.strip().splitlines()[0])


def ort_step(path):
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    seq = session.get_inputs()[0].shape[1]

    def step(window):
        ids = np.zeros((1, seq), dtype=np.int64)
        ids[0, :len(window)] = window
        return session.run(["logits"], {"input_ids": ids})[0][0, len(window) - 1]
    return step, seq


def onnx_model(megac, workdir, name, onnx_path, data, steps, prompt, tokens, lr="3e-3"):
    """Trains `onnx_path`, exports it and checks greedy generation against onnxruntime on the
    export; returns (checkpoint, greedy output)."""
    from export_test import train
    ckpt, _ = train(megac, onnx_path, data, workdir, steps=steps, lr=lr)
    trained = os.path.join(workdir, "trained.onnx")
    subprocess.run([megac, "export", "--load", ckpt, "--onnx", onnx_path, "-o", trained],
                   check=True, capture_output=True)
    greedy, ms = generate(megac, ckpt, prompt=prompt, tokens=tokens)
    check(greedy == generate(megac, ckpt, prompt=prompt, tokens=tokens)[0],
          "%s: greedy decoding is deterministic" % name)
    check(greedy.startswith(prompt.encode()) and len(greedy) == len(prompt) + tokens,
          "%s: the prompt and %d new tokens: %r (%.2f ms/token)" % (name, tokens, greedy, ms))
    check(len(set(greedy[len(prompt):])) >= 4, "%s: the greedy text has several different tokens"
          % name)
    step, seq = ort_step(trained)
    ties = greedy_oracle(step, prompt.encode(), list(greedy[len(prompt):]), seq, name)
    check(True, "%s: every token is onnxruntime's argmax on the exported model (%d near-ties)"
          % (name, ties))
    return ckpt, greedy


def bpe_part(megac, workdir):
    """--tokenizer hf:TOKENIZER.json: a byte-level BPE (vocab 384, trained here on a fixed text)
    encodes the prompt and decodes the new ids; the text must be the prompt followed by the
    tokenizer's decoding of onnxruntime's greedy ids (stopping at <|endoftext|>)."""
    from export_test import export_gpt, train
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    os.makedirs(workdir)
    # A fixed text (not a repository file, which changes) so the vocabulary, and with it the
    # trained model and its continuations, are the same in every run.
    text = SENTENCE * 20 + TOKENIZER_TEXT
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=384, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok_path = os.path.join(workdir, "tokenizer.json")
    tok.save(tok_path)
    vocab, seq = 384, 16
    # Training text a small model learns in a few steps: one sentence, repeated, so the greedy
    # continuation of a prompt is its next words (many different ids), set by the prompt's ids.
    ids = np.array(tok.encode(SENTENCE * 200).ids, dtype=np.int32)
    rows = len(ids) // (seq + 1)
    np.save(os.path.join(workdir, "rows.npy"), ids[: rows * (seq + 1)].reshape(rows, seq + 1))
    onnx_path = export_gpt(os.path.join(workdir, "gpt.onnx"), vocab=vocab)
    ckpt, _ = train(megac, onnx_path, os.path.join(workdir, "rows.npy"), workdir, steps=100)
    trained = os.path.join(workdir, "trained.onnx")
    subprocess.run([megac, "export", "--load", ckpt, "--onnx", onnx_path, "-o", trained],
                   check=True, capture_output=True)
    step, _ = ort_step(trained)
    eod, seen = tok.token_to_id("<|endoftext|>"), set()
    for prompt in ("The compiler", "megac plans", "each rank", "the layout"):
        got, ms = generate(megac, ckpt, "--tokenizer", "hf:" + tok_path, prompt=prompt,
                           tokens=8)
        tokens, new = tok.encode(prompt).ids, []
        for _ in range(8):
            next_id = int(np.argmax(np.asarray(step(tokens[-seq:]))[: tok.get_vocab_size()]))
            if next_id == eod:
                break
            tokens.append(next_id)
            new.append(next_id)
        seen.update(new)
        want = (prompt + tok.decode(new)).encode()
        check(got == want, "hf tokenizer: %r is the prompt + onnxruntime's greedy ids %s decoded "
              "(%.2f ms/token)" % (got, new, ms))
    check(len(seen) >= 3, "hf tokenizer: the continuations use %d different ids" % len(seen))


def onnx_part(megac, workdir):
    from export_test import export_gpt, text_rows
    os.makedirs(workdir)
    data = text_rows(os.path.join(workdir, "rows.npy"))
    gpt_dir = os.path.join(workdir, "gpt")
    os.makedirs(gpt_dir)
    gpt = export_gpt(os.path.join(gpt_dir, "gpt.onnx"))
    prompt = "The compiler "  # 13 bytes, 12 new: the window (16) slides
    ckpt, greedy = onnx_model(megac, gpt_dir, "onnx gpt", gpt, data, 300, prompt, 12)

    sampled = ["--temperature", "0.9", "--top-p", "0.9", "--seed", "7"]
    a = generate(megac, ckpt, *sampled, prompt=prompt, tokens=12)[0]
    check(a == generate(megac, ckpt, *sampled, prompt=prompt, tokens=12)[0],
          "onnx gpt: sampling with a seed is repeatable: %r" % a)

    def fails(argv, needle, what):
        r = subprocess.run([megac, "generate", "--load", ckpt, "--prompt", prompt, *argv],
                           capture_output=True, text=True)
        line = (r.stderr.strip().splitlines() or [""])[-1]
        check(r.returncode != 0 and needle in r.stderr, "%s: %s" % (what, line))

    other = export_gpt(os.path.join(gpt_dir, "other.onnx"), seed=99)
    fails(["--onnx", other], "not the file the checkpoint was trained from",
          "--onnx naming another model is refused")
    fails(["--model", "gpt:layers=1,hidden=16,heads=2,seq=16,vocab=128"], "--model applies to zoo",
          "--model on an ONNX checkpoint is refused")
    moved = os.path.join(workdir, "moved.onnx")
    shutil.copy(gpt, moved)
    shutil.copy(other, gpt)  # the recorded file changes
    fails([], "not the file the checkpoint was trained from", "a changed ONNX file is refused")
    check(generate(megac, ckpt, "--onnx", moved, prompt=prompt, tokens=12)[0] == greedy,
          "--onnx finds the moved original: the same text")

    bpe_part(megac, os.path.join(workdir, "bpe"))
    for name in ("gpt2", "llama"):
        from hf_train_test import make_model
        hf_dir = os.path.join(workdir, name)
        os.makedirs(hf_dir)
        _, path = make_model(name, hf_dir)
        # The text's first row begins with this prompt, at position 0 as generation puts it;
        # 400 steps at lr 1e-3 all but memorize the rows (loss < 1), so the continuation is text.
        onnx_model(megac, hf_dir, "hf " + name, path, data, 400, "megac is ", 10, lr="1e-3")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir")
    parser.add_argument("--venv", default=os.path.join(HERE, "..", "..", ".venv"))
    args = parser.parse_args()
    megac = os.path.abspath(args.megac)
    if not have_venv_modules():
        python = os.path.join(args.venv, "bin", "python")
        if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(args.venv):
            os.execv(python, [python] + sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
        zoo = os.path.join(workdir, "zoo")
        os.makedirs(zoo)
        zoo_part(megac, zoo)
        if not have_venv_modules():
            print("SKIP: the ONNX part needs onnxruntime and transformers (the venv %s lacks "
                  "them; run scripts/bootstrap.sh)" % args.venv)
            return SKIP
        onnx_part(megac, os.path.join(workdir, "onnx"))
    print("generate: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
