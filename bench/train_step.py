"""Times one training step of a ~3M-parameter GPT (4 layers, hidden 256, seq 128, batch 8) in
`megac train` and in PyTorch eager, on the same model and data with the same thread count.

usage: train_step.py --megac build/bin/megac --workdir DIR [--threads 1] [--steps 12]
Prints ms/step and tokens/s for both and the ratio megac / PyTorch (median over the steps after
the first two). Exits non-zero only if a run fails; never on time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from torch_models import GptModel  # noqa: E402

LAYERS, HIDDEN, HEADS, SEQ, VOCAB, BATCH = 4, 256, 8, 128, 512, 8
LR, WD = 1e-3, 0.1
SKIP = 2  # warm-up steps left out of the medians


def torch_steps(model, tokens, steps):
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=LR)
    tokens = torch.from_numpy(tokens)
    n = tokens.shape[0]
    times, losses = [], []
    for step in range(steps):
        rows = [(step * BATCH + j) % n for j in range(BATCH)]
        batch = tokens[rows]
        start = time.perf_counter()
        opt.zero_grad()
        logits = model(batch[:, :SEQ])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return times, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    steps = max(args.steps, SKIP + 1)
    os.makedirs(args.workdir, exist_ok=True)

    torch.manual_seed(0)
    model = GptModel(layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq=SEQ, vocab=VOCAB)
    params = sum(p.numel() for p in model.parameters())
    onnx_path = os.path.join(args.workdir, "gpt-3m.onnx")
    torch.onnx.export(model, (torch.zeros(BATCH, SEQ, dtype=torch.long),), onnx_path,
                      input_names=["input_ids"], output_names=["logits"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    tokens = np.random.default_rng(0).integers(0, VOCAB, size=(64, SEQ + 1)).astype(np.int64)
    data = os.path.join(args.workdir, "tokens.npy")
    np.save(data, tokens)

    # megac: OpenBLAS threads = --threads; the step times come from its own log.
    log = os.path.join(args.workdir, "log.jsonl")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    argv = [args.megac, "train", onnx_path, "--data", data, "--steps", str(steps),
            "--global-batch", str(BATCH), "--micro-batch", str(BATCH), "--lr", str(LR),
            "--weight-decay", str(WD), "--log-json", log]
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
    with open(log) as f:
        records = [json.loads(line) for line in f]
    megac_s = statistics.median(r["step_time_s"] for r in records[SKIP:])

    torch.set_num_threads(args.threads)
    torch_times, torch_losses = torch_steps(model, tokens, steps)
    torch_s = statistics.median(torch_times[SKIP:])

    tokens_per_step = BATCH * SEQ
    print(f"model: GPT layers={LAYERS} hidden={HIDDEN} heads={HEADS} seq={SEQ} vocab={VOCAB}, "
          f"{params / 1e6:.2f}M parameters; batch {BATCH}; {args.threads} thread(s); "
          f"median of steps {SKIP + 1}..{steps}")
    print(f"megac train:   {megac_s * 1e3:8.1f} ms/step  {tokens_per_step / megac_s:9.0f} tokens/s"
          f"  (whole run incl. compile {wall:.1f} s; loss {records[0]['loss']:.4f} -> "
          f"{records[-1]['loss']:.4f})")
    print(f"pytorch eager: {torch_s * 1e3:8.1f} ms/step  {tokens_per_step / torch_s:9.0f} tokens/s"
          f"  (loss {torch_losses[0]:.4f} -> {torch_losses[-1]:.4f})")
    print(f"ratio megac / pytorch: {megac_s / torch_s:.2f}x time per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
