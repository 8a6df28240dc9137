"""The PyTorch side of the GPU benchmark (scripts/device-check.sh): trains the same GPT as megac's
zoo `gpt:layers=L,hidden=H,heads=A,seq=S,vocab=V` (pre-LN blocks, separate q/k/v/proj linears with
biases, 4H MLP with exact GELU, learned positions, tied embedding) on one GPU the way a tuned
PyTorch user would: bf16 autocast, fused scaled-dot-product attention (is_causal), fused AdamW,
and torch.compile when it works. Prints ms/step, tokens/s, model TFLOP/s and MFU with the same
FLOP count as bench-train-step (Korthikanti et al.: 72·B·l·s·h²·(1 + s/(6h) + V/(12hl))).

usage: torch_train_step_gpu.py --gpt L,H,A,S,V --micro-batch B [--steps 10] [--warmup 3]
       [--compile auto|on|off] [--peak-tflops 989] [--label NAME] [--json FILE]
Needs torch >= 2.0 and a CUDA device. Exits non-zero only when a run fails, never on time.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.fc_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        d = c // self.heads
        y = self.ln1(x)
        q = self.q(y).view(b, t, self.heads, d).transpose(1, 2)
        k = self.k(y).view(b, t, self.heads, d).transpose(1, 2)
        v = self.v(y).view(b, t, self.heads, d).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.h = nn.ModuleList([Block(hidden, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpt", required=True, help="LAYERS,HIDDEN,HEADS,SEQ,VOCAB")
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--label", default="torch")
    parser.add_argument("--json")
    args = parser.parse_args()
    layers, hidden, heads, seq, vocab = (int(v) for v in args.gpt.split(","))
    if not torch.cuda.is_available():
        sys.exit("torch_train_step_gpu.py: no CUDA device")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cuda")
    model = Gpt(layers, hidden, heads, seq, vocab).to(device)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-4, fused=True)

    def loss_of(ids, labels):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
        return F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1))

    step_fn = loss_of
    compiled = "off"
    if args.compile != "off":
        try:
            step_fn = torch.compile(loss_of)
            ids = torch.randint(0, vocab, (args.micro_batch, seq), device=device)
            step_fn(ids, ids).backward()  # compile now, so a failure falls back here
            opt.zero_grad(set_to_none=True)
            compiled = "on"
        except Exception as e:  # noqa: BLE001 - any compile failure means eager
            if args.compile == "on":
                raise
            print(f"{args.label}: torch.compile failed ({type(e).__name__}: {e}); eager",
                  flush=True)
            step_fn = loss_of
    gen = torch.Generator(device="cuda").manual_seed(0)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, vocab, (args.micro_batch, seq), device=device, generator=gen)
        labels = torch.randint(0, vocab, (args.micro_batch, seq), device=device, generator=gen)
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step_fn(ids, labels)
        loss.backward()
        opt.step()
        value = loss.item()  # synchronizes
        elapsed = time.perf_counter() - start
        losses.append(value)
        if step >= args.warmup:
            times.append(elapsed)
    t = statistics.median(times)
    tokens = args.micro_batch * seq
    b, l, s, h, v = args.micro_batch, layers, seq, hidden, vocab
    flops = 72.0 * b * l * s * h * h * (1 + s / (6 * h) + v / (12 * h * l))
    mfu = flops / t / (args.peak_tflops * 1e12)
    print(f"{args.label}: {t * 1e3:.2f} ms/step (median of {args.steps}), {tokens / t:.0f} tokens/s,"
          f" {flops / t / 1e12:.1f} model TFLOP/s, MFU {100 * mfu:.1f}% of {args.peak_tflops:.0f}"
          f" TFLOP/s (torch {torch.__version__}, compile {compiled},"
          f" peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB);"
          f" loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    if args.json:
        with open(args.json, "a") as out:
            out.write(json.dumps({"label": args.label, "backend": "torch", "ms_per_step": t * 1e3,
                                  "tokens_per_s": tokens / t, "model_tflops": flops / t / 1e12,
                                  "mfu": mfu, "compile": compiled}) + "\n")


if __name__ == "__main__":
    main()
