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
    onnx_path = os.path.join(args.workdir, "gpt2-124m.onnx")
    start = time.perf_counter()
    torch.onnx.export(model, (ids,), onnx_path, input_names=["input_ids"],
                      output_names=["logits"], opset_version=14)
    export_s = time.perf_counter() - start
    with torch.no_grad():
        start = time.perf_counter()
        want = model(ids).numpy()
        torch_s = time.perf_counter() - start
    ids_path = os.path.join(args.workdir, "input_ids.npy")
    np.save(ids_path, ids.numpy())

    mlir = os.path.join(args.workdir, "gpt2-124m.mlir")
    plan = os.path.join(args.workdir, "gpt2-124m.mplan")
    out = os.path.join(args.workdir, "out")
    import_s, _ = timed([args.megac, "import", onnx_path, "--compile-to=input", "-o", mlir])
    compile_s, _ = timed([args.megac, "compile", mlir, "-o", plan])
    run_s, run_out = timed([args.megac, "run", plan, "--input", f"input_ids={ids_path}",
                            "--output-dir", out])
    got = np.load(os.path.join(out, "logits.npy"))
    err = float(np.max(np.abs(got - want)))
    print(f"model            GPT-2 124M shape: {params:,} parameters, batch 1 x {args.seq} tokens")
    print(f"torch export     {export_s:8.2f} s   (PyTorch forward {torch_s:.3f} s)")
    print(f"megac import     {import_s:8.2f} s   (ONNX -> raised mega IR + safetensors)")
    print(f"megac compile    {compile_s:8.2f} s   (IR -> plan)")
    print(f"megac run        {run_s:8.2f} s   (load plan + weights, one forward pass, write .npy)")
    for line in run_out.strip().splitlines():
        print(f"  | {line}")
    print(f"max |megac - torch| = {err:.3g}")
    return 0 if err <= 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
