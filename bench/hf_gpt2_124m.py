"""Times megac on a Hugging Face GPT-2 124M (transformers' GPT2LMHeadModel with GPT2Config's
defaults: 12 layers, hidden 768, 12 heads, vocab 50257; random weights, dropout off) exported to
ONNX as a user would, against PyTorch on the same CPU:

  - import (ONNX -> raised mega IR), compile, and one forward pass of batch 1 x SEQ, with the max
    logit difference against PyTorch;
  - training: STEPS AdamW steps of BATCH x SEQ tokens (fp32, one rank) with `megac train`, and the
    same steps in PyTorch (torch.optim.AdamW), printing ms/step and tokens/s of each, and the
    per-step loss difference.

usage: hf_gpt2_124m.py --megac build/bin/megac --workdir DIR [--seq 128 --batch 4 --steps 3
                       --threads N --venv .venv]
Needs transformers (the test venv of scripts/bootstrap.sh; re-executes itself with its python).
Exits non-zero if megac fails, the logits differ by more than 1e-3 or a loss by more than 1e-4
relative.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from hf_models_test import ensure_venv  # noqa: E402

sys.path.insert(0, HERE)
from gpt2_124m import forward_vs_torch, timed  # noqa: E402  (as the GptModel bench does them)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--venv", default=os.path.join(HERE, "..", ".venv"))
    args = parser.parse_args()
    ensure_venv(args.venv)
    args.megac = os.path.abspath(args.megac)
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    os.makedirs(args.workdir, exist_ok=True)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_positions=args.seq, resid_pdrop=0.0, embd_pdrop=0.0,
                                    attn_pdrop=0.0, use_cache=False))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids):
            return self.hf(input_ids=input_ids, return_dict=False)[0]

    model = Logits()
    params = sum(p.numel() for p in model.parameters())
    vocab = hf.config.vocab_size
    ids = torch.randint(0, vocab, (1, args.seq), dtype=torch.long)
    # Forward: export, then import, compile, run.
    onnx_path, s, _, err = forward_vs_torch(
        args.megac, args.workdir, "hf-gpt2-124m", model, ids,
        {"opset_version": 17, "do_constant_folding": False,
         "training": torch.onnx.TrainingMode.TRAINING, "dynamic_axes": {"input_ids": {0: "batch"}}},
        import_flags=["--input-shape", f"input_ids=1x{args.seq}"])

    # Training: the same rows for both; megac first (PyTorch then moves the weights).
    rng = np.random.default_rng(0)
    rows = rng.integers(0, vocab, size=(args.batch * args.steps, args.seq + 1), dtype=np.int64)
    data = os.path.join(args.workdir, "tokens.npy")
    np.save(data, rows)
    log = os.path.join(args.workdir, "train.jsonl")
    lr = 1e-4
    train_s, _ = timed([args.megac, "train", onnx_path, "--data", data, "--steps",
                        str(args.steps), "--global-batch", str(args.batch), "--micro-batch",
                        str(args.batch), "--lr", str(lr), "--adam-eps", "1e-6",
                        "--weight-decay", "0.01", "--threads", str(args.threads),
                        "--backend", "cpu", "--log-json", log])
    records = [json.loads(line) for line in open(log)]
    megac_losses = [r["loss"] for r in records]
    # Step 1 includes warming up (first-touch of buffers); report the later steps.
    megac_step = [r["step_time_s"] for r in records][1:] or [records[0]["step_time_s"]]

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, eps=1e-6)
    torch_losses, torch_step = [], []
    for s in range(args.steps):
        batch = torch.from_numpy(rows[s * args.batch:(s + 1) * args.batch])
        start = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_step.append(time.perf_counter() - start)
        torch_losses.append(loss.item())
    torch_step = torch_step[1:] or torch_step
    loss_err = max(abs(a - b) / abs(b) for a, b in zip(megac_losses, torch_losses))

    tokens = args.batch * args.seq
    m_ms, t_ms = 1e3 * np.mean(megac_step), 1e3 * np.mean(torch_step)
    print(f"model            HF GPT2LMHeadModel, 124M shape: {params:,} parameters, "
          f"{args.threads} threads")
    print(f"torch export     {s['export']:8.2f} s   (PyTorch forward 1 x {args.seq}: "
          f"{s['torch']:.3f} s)")
    print(f"megac import     {s['import']:8.2f} s   (ONNX -> raised mega IR + safetensors)")
    print(f"megac compile    {s['compile']:8.2f} s   (IR -> forward plan)")
    print(f"megac run        {s['run']:8.2f} s   (load plan + weights, one forward pass)")
    print(f"max |megac - torch| logits = {err:.3g}")
    print(f"train {args.steps} steps of {args.batch} x {args.seq}: megac {m_ms:.0f} ms/step "
          f"({tokens / m_ms * 1e3:.0f} tokens/s, whole command {train_s:.1f} s incl. import "
          f"and compile), PyTorch {t_ms:.0f} ms/step ({tokens / t_ms * 1e3:.0f} tokens/s); "
          f"megac/PyTorch throughput {t_ms / m_ms:.2f}")
    print(f"losses megac {megac_losses}\n       torch {torch_losses}\n"
          f"max relative loss difference over {args.steps} steps = {loss_err:.3g} (f32)")
    return 0 if err <= 1e-3 and loss_err <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
