#!/usr/bin/env python3
"""`megac generate`: greedy decoding from a `megac train --save` checkpoint is deterministic and
is the forward pass's argmax, token by token (checked against PyTorch's GPT with the
checkpoint's weights, same window: the prompt at position 0, zeros after it, causal); sampling
is repeatable with a seed."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_models import GptModel  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402

DATA = os.path.join(HERE, "..", "..", "examples", "tiny-corpus.npy")
LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 2, 64, 4, 64, 256
MODEL = f"gpt:layers={LAYERS},hidden={HIDDEN},heads={HEADS},seq={SEQ},vocab={VOCAB}"
PROMPT = "The compiler "
TOKENS = 16
STEPS = 100


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def torch_state(weights):
    """The zoo GPT's parameters under torch_models.GptModel's names (its attention fuses q, k, v
    into c_attn, GPT-2's layout)."""
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


def generate(megac, ckpt, *extra):
    out = subprocess.run([megac, "generate", "--load", ckpt, "--prompt", PROMPT, "--max-tokens",
                          str(TOKENS), *extra], check=True, capture_output=True)
    return out.stdout.rstrip(b"\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        subprocess.run([args.megac, "train", "--model", MODEL, "--data", DATA, "--steps", str(STEPS),
                        "--global-batch", "8", "--micro-batch", "4", "--lr", "3e-3", "--save",
                        ckpt], check=True, capture_output=True)
        greedy = generate(args.megac, ckpt)
        check(greedy == generate(args.megac, ckpt), "greedy decoding is deterministic")
        check(greedy.startswith(PROMPT.encode()) and len(greedy) == len(PROMPT) + TOKENS,
              "the prompt and %d new bytes: %r" % (TOKENS, greedy))

        model = GptModel(LAYERS, HIDDEN, HEADS, SEQ, VOCAB)
        weights = read_safetensors(os.path.join(ckpt, "step-%d" % STEPS, "model.safetensors"))
        model.load_state_dict(torch_state(weights), strict=False)  # the causal mask buffers stay
        tokens = list(PROMPT.encode())
        with torch.no_grad():
            for i in range(TOKENS):
                window = tokens[-SEQ:]
                ids = torch.zeros(1, SEQ, dtype=torch.long)
                ids[0, :len(window)] = torch.tensor(window)
                logits = model(ids)[0, len(window) - 1]
                got = greedy[len(PROMPT) + i]
                top2 = torch.topk(logits, 2).values
                tie = float(top2[0] - top2[1]) < 1e-4
                check(got == int(torch.argmax(logits)) or tie,
                      "token %d: megac %d, PyTorch argmax %d" % (i, got, int(torch.argmax(logits))))
                tokens.append(got)

        sampled = generate(args.megac, ckpt, "--temperature", "0.8", "--top-k", "20", "--seed", "3")
        check(sampled == generate(args.megac, ckpt, "--temperature", "0.8", "--top-k", "20",
                                  "--seed", "3"), "sampling with a seed is repeatable")
        missing = subprocess.run([args.megac, "generate", "--load", os.path.join(tmp, "none"),
                                  "--prompt", "x"], capture_output=True, text=True)
        check(missing.returncode != 0 and "error" in missing.stderr,
              "a missing checkpoint is an error: " + missing.stderr.strip().splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
