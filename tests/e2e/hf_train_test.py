"""Training Hugging Face models exported to ONNX: `megac train` on a transformers GPT2LMHeadModel
and a Llama-style LlamaForCausalLM (RMSNorm, rotary, SwiGLU, GQA; random weights from small
configs, dropout off) gives PyTorch's AdamW run step by step, and a tp=2 x dp=2 run gives the
one-rank run.

  - parity: 10 steps on one rank against the same model trained in PyTorch (train_test.py's
    reference loop: the same rows, mean cross-entropy, AdamW with decay on dim >= 2); every loss
    and grad_norm within 1e-4 relative, every final parameter within 1e-4 ||p|| + 1e-6 sqrt(n);
  - layout: the same 10 steps with --ranks 4 --tp 2 --dp 2 against the one-rank log (losses
    within 1e-5 relative: fp32 partial sums reassociate) and its final weights.

usage: hf_train_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it) and mpirun for the layout case.
"""
import argparse
import copy
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models_test import ensure_venv  # noqa: E402

SEQ, VOCAB, ROWS = 16, 128, 24


def make_model(name, workdir):
    """A transformers model with random weights (dropout off) exported for training."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    if name == "gpt2":
        hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=SEQ,
                                        vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0,
                                        attn_pdrop=0.0, use_cache=False))
    else:  # Llama-style: RMSNorm, rotary, SwiGLU, GQA (4 heads on 2 kv heads), untied head
        hf = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=64,
                                          num_attention_heads=4, num_key_value_heads=2,
                                          intermediate_size=128, vocab_size=VOCAB,
                                          max_position_embeddings=SEQ, use_cache=False))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids):
            return self.hf(input_ids=input_ids, return_dict=False)[0]

    model = Logits()
    path = os.path.join(workdir, f"{name}.onnx")
    ids = torch.randint(0, VOCAB, (2, SEQ), dtype=torch.long)
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"input_ids": {0: "batch"}})
    return model, path


def check(args, name, tokens, data):
    """Returns the number of problems of model `name`: parity with PyTorch, then tp2 x dp2."""
    import numpy as np
    import train_test as tt
    from safetensors_np import read_safetensors

    workdir = os.path.join(args.workdir, name)
    one, four = os.path.join(workdir, "one-rank"), os.path.join(workdir, "tp2-dp2")
    os.makedirs(one)
    os.makedirs(four)
    model, onnx_path = make_model(name, workdir)
    # Adam eps 1e-6, not 1e-8: GPT-2's key third of c_attn.bias has an exactly zero gradient
    # (softmax ignores a per-row constant), so its "gradient" is roundoff (~1e-10), which Adam
    # with eps 1e-8 turns into steps of ~1e-2·lr that differ between any two implementations.
    c = dict(steps=10, global_batch=4, micro_batch=2, torch_micro_batch=2, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-6,
             wd=0.1, clip=0.0, precision="fp32")
    failures = 0

    print(f"{name} (transformers), 10 steps on one rank against PyTorch")
    records, weights, _ = tt.megac_train(args.megac, [onnx_path], data, one, c)
    reference = copy.deepcopy(model)
    losses, norms = tt.torch_train(reference, tokens, c)
    problems = tt.check_records(records, c, losses, norms, 1e-4, 1e-4)
    problems += tt.check_params(reference, weights, np.float32, 1e-4, 1e-6)
    for p in problems:
        print(f"  FAIL {p}")
    failures += len(problems)

    print(f"{name} (transformers), tp 2 x dp 2 against one rank")
    c4 = dict(c, micro_batch=1)  # per data-parallel rank: the same 2-row micro-batches
    try:
        records4, weights4, _ = tt.megac_train(args.megac, [onnx_path], data, four, c4,
                                               ["--ranks", "4", "--tp", "2", "--dp", "2"])
    except RuntimeError as e:
        print(f"  FAIL {e}")
        return failures + 1
    worst = 0.0
    for a, b in zip(records4, records):
        rel = abs(a["loss"] - b["loss"]) / abs(b["loss"])
        worst = max(worst, rel)
        if rel > 1e-5:
            print(f"  FAIL step {a['step']}: loss {a['loss']!r} vs one rank {b['loss']!r}")
            failures += 1
    print(f"    losses: max relative difference to one rank {worst:.2e}")
    got, want = read_safetensors(weights4), read_safetensors(weights)
    worst = 0.0
    for key, w in want.items():
        d = np.linalg.norm((got[key].astype(np.float64) - w.astype(np.float64)).ravel())
        bound = 1e-5 * np.linalg.norm(w.astype(np.float64).ravel()) + 1e-7 * np.sqrt(w.size)
        worst = max(worst, d / bound)
        if d > bound:
            print(f"  FAIL {key}: ||tp2dp2 - one rank|| = {d:.3g} > {bound:.3g}")
            failures += 1
    print(f"    parameters: worst ||dp|| / bound = {worst:.3f}")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--venv", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       ".venv"))
    args = parser.parse_args()
    ensure_venv(args.venv)
    import numpy as np
    import torch

    torch.set_num_threads(1)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    tokens = np.random.default_rng(7).integers(0, VOCAB, size=(ROWS, SEQ + 1)).astype(np.int64)
    data = os.path.join(args.workdir, "tokens.npy")
    np.save(data, tokens)
    failures = 0
    for name in ("gpt2", "llama"):
        failures += check(args, name, tokens, data)
    print("PASS" if failures == 0 else f"FAIL ({failures} problems)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
