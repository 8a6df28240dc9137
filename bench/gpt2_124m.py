"""Times megac on a GPT-2-124M-shaped export: ONNX import, compile, one forward pass of
batch 1 x 128 tokens on the CPU, and checks the logits against PyTorch.

usage: gpt2_124m.py --megac build/bin/megac --workdir DIR
Prints one line per phase (seconds) and the max logit difference; exits non-zero if megac fails
or the logits differ by more than 1e-3 (fp32 over 12 layers and a 50257-way head).
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from torch_models import GptModel  # noqa: E402


def timed(argv):
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
    return seconds, result.stdout


def forward_vs_torch(megac, workdir, name, model, ids, export_kwargs, import_flags=()):
    """Exports `model` (input_ids -> logits) at `ids` to WORKDIR/NAME.onnx, runs PyTorch's forward
    and megac's import, compile and run of the export on the same ids. Returns the ONNX path, the
    seconds of each phase (export, torch, import, compile, run), `megac run`'s output and the max
    |megac - torch| over the logits."""
    onnx_path = os.path.join(workdir, f"{name}.onnx")
    start = time.perf_counter()
    torch.onnx.export(model, (ids,), onnx_path, input_names=["input_ids"],
                      output_names=["logits"], **export_kwargs)
    seconds = {"export": time.perf_counter() - start}
    with torch.no_grad():
        start = time.perf_counter()
        want = model(ids).numpy()
        seconds["torch"] = time.perf_counter() - start
    ids_path = os.path.join(workdir, "input_ids.npy")
    np.save(ids_path, ids.numpy())
    mlir = os.path.join(workdir, f"{name}.mlir")
    plan = os.path.join(workdir, f"{name}.mplan")
    out = os.path.join(workdir, "out")
    seconds["import"], _ = timed([megac, "import", onnx_path, *import_flags, "--compile-to=input",
                                  "-o", mlir])
    seconds["compile"], _ = timed([megac, "compile", mlir, "-o", plan])
    seconds["run"], run_out = timed([megac, "run", plan, "--input", f"input_ids={ids_path}",
                                     "--output-dir", out])
    got = np.load(os.path.join(out, "logits.npy"))
    return onnx_path, seconds, run_out, float(np.max(np.abs(got - want)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.manual_seed(0)
    model = GptModel(layers=12, hidden=768, heads=12, seq=args.seq, vocab=50257).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 50257, (1, args.seq), dtype=torch.long)
    _, s, run_out, err = forward_vs_torch(args.megac, args.workdir, "gpt2-124m", model, ids,
                                          {"opset_version": 14})
    print(f"model            GPT-2 124M shape: {params:,} parameters, batch 1 x {args.seq} tokens")
    print(f"torch export     {s['export']:8.2f} s   (PyTorch forward {s['torch']:.3f} s)")
    print(f"megac import     {s['import']:8.2f} s   (ONNX -> raised mega IR + safetensors)")
    print(f"megac compile    {s['compile']:8.2f} s   (IR -> plan)")
    print(f"megac run        {s['run']:8.2f} s   "
          "(load plan + weights, one forward pass, write .npy)")
    for line in run_out.strip().splitlines():
        print(f"  | {line}")
    print(f"max |megac - torch| = {err:.3g}")
    return 0 if err <= 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
