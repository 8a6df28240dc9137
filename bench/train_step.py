"""Times one training step of a GPT in `megac train` and in PyTorch eager, on the same model
and data with the same thread count, against this machine's sgemm peak measured in the same run.

Sizes: small (default) = 4 layers, hidden 256, seq 128, batch 8, vocab 512 (~3M parameters);
mid = 6 layers, hidden 512, seq 256, batch 4, vocab 8192 (issue 30's mid-size GPT, fp32).

usage: train_step.py --megac build/bin/megac --workdir DIR [--size small|mid] [--threads 1]
                     [--steps 12] [--trace]
Prints ms/step and tokens/s for both and the ratio megac / PyTorch (median over the steps after
the first two); the sgemm peak (best GFLOP/s of numpy's and torch's fp32 matmul of square
matrices 512, 1024, 2048 on the same threads, each the best of 3 runs); and each run's GEMM
GFLOP/s = the step's GEMM FLOPs / its median time, as a fraction of that peak. The step's GEMM
FLOPs are 3 x the forward's (forward, input gradient, weight gradient): per layer
2 T (4 h^2 + 2 h f) for the projections and 2 x 2 b s^2 h for attention's two products (computed
whole, as both runtimes do), plus 2 T h V for the LM head (T = b s tokens, f = 4 h). With
--trace, megac's per-opcode time of one step (`megac train --trace`) is printed too. Exits
non-zero only if a run fails; never on time.
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

SIZES = {"small": dict(layers=4, hidden=256, heads=8, seq=128, vocab=512, batch=8),
         "mid": dict(layers=6, hidden=512, heads=8, seq=256, vocab=8192, batch=4)}
LAYERS, HIDDEN, HEADS, SEQ, VOCAB, BATCH = 4, 256, 8, 128, 512, 8
LR, WD = 1e-3, 0.1
PEAK_SIZES = (512, 1024, 2048)

PEAK_SCRIPT = """
import sys, time
import numpy as np
best = 0.0
for n in %r:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    a @ b
    for _ in range(3):
        start = time.perf_counter()
        a @ b
        best = max(best, 2 * n ** 3 / (time.perf_counter() - start) / 1e9)
print(best)
""" % (PEAK_SIZES,)


def sgemm_peak(threads):
    """Best fp32 matmul GFLOP/s of numpy (in a child with the BLAS thread count set before it
    loads) and torch (set_num_threads), square sizes PEAK_SIZES, best of 3 runs each."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    result = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True,
                            env=env, check=True)
    numpy_best = float(result.stdout.strip())
    torch.set_num_threads(threads)
    torch_best = 0.0
    for n in PEAK_SIZES:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        for _ in range(3):
            start = time.perf_counter()
            a @ b
            torch_best = max(torch_best, 2 * n ** 3 / (time.perf_counter() - start) / 1e9)
    return numpy_best, torch_best


def gemm_flops_per_step():
    """3 x the forward's GEMM FLOPs (module docstring)."""
    tokens, h, f = BATCH * SEQ, HIDDEN, 4 * HIDDEN
    per_layer = 2 * tokens * (4 * h * h + 2 * h * f) + 2 * 2 * BATCH * SEQ * SEQ * h
    return 3 * (LAYERS * per_layer + 2 * tokens * h * VOCAB)


def trace_summary(path):
    """{opcode name: total ms} of the traced step's instructions (Chrome trace events)."""
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    totals = {}
    for e in events:
        # Instructions are named by opcode (CamelCase); steps and functions are not.
        if e.get("ph") == "X" and "dur" in e and e.get("name", "?")[:1].isupper():
            totals[e.get("name", "?")] = totals.get(e.get("name", "?"), 0.0) + e["dur"] / 1e3
    return totals
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
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args()
    global LAYERS, HIDDEN, HEADS, SEQ, VOCAB, BATCH
    size = SIZES[args.size]
    LAYERS, HIDDEN, HEADS, SEQ = size["layers"], size["hidden"], size["heads"], size["seq"]
    VOCAB, BATCH = size["vocab"], size["batch"]
    steps = max(args.steps, SKIP + 1)
    os.makedirs(args.workdir, exist_ok=True)

    torch.manual_seed(0)
    model = GptModel(layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq=SEQ, vocab=VOCAB)
    params = sum(p.numel() for p in model.parameters())
    onnx_path = os.path.join(args.workdir, f"gpt-{args.size}.onnx")
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
            "--weight-decay", str(WD), "--log-json", log, "--threads", str(args.threads)]
    trace = os.path.join(args.workdir, "trace.json")
    if args.trace:
        argv += ["--trace", trace, "--trace-steps", "1"]
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
    numpy_peak, torch_peak = sgemm_peak(args.threads)
    peak = max(numpy_peak, torch_peak)
    flops = gemm_flops_per_step()
    print(f"sgemm peak: {peak:.1f} GFLOP/s (numpy {numpy_peak:.1f}, torch {torch_peak:.1f}; "
          f"square {'/'.join(map(str, PEAK_SIZES))}, {args.threads} thread(s))")
    for name, seconds in (("megac", megac_s), ("pytorch", torch_s)):
        rate = flops / seconds / 1e9
        print(f"{name:8s} GEMM rate: {rate:6.1f} GFLOP/s = {rate / peak:.3f} of the sgemm peak "
              f"({flops / 1e9:.2f} GEMM GFLOP per step)")
    if args.trace and os.path.exists(trace):
        totals = trace_summary(trace)
        print("megac per-instruction time of one traced step (ms):")
        for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {name:24s} {ms:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
