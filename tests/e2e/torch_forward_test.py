"""End-to-end: PyTorch-exported GPT-2- and BERT-style models run through `megac run` give
PyTorch's logits (fp32, |megac - torch| <= 1e-4 + 1e-4 |torch| per logit), and the raised IR
has the coarse ops partitioning needs. Error model: a 2-layer forward is ~20 ops with sums of at
most 256 terms; other sum orders and exp/erf/tanh of 1-2 ulp give each op ~sqrt(256)·u = 1e-6
relative (u = 6e-8), ~sqrt(20)·1e-6 = 5e-6 on logits of order 1: 1e-4 leaves a margin near 20.

usage: torch_forward_test.py --megac build/bin/megac --workdir DIR [--only NAME]
Runs with Debian's /usr/bin/python3 (torch 1.13, onnx 1.12).
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from torch_models import BertModel, GptModel  # noqa: E402

LAYERS = 2
ATOL = 1e-4
RTOL = 1e-4


def gpt_variants():
    for opset in (13, 14, 17):
        for folding in (True, False):
            yield dict(name=f"gpt-opset{opset}-{'fold' if folding else 'nofold'}", opset=opset,
                       folding=folding, gelu="none", tied=True)
    yield dict(name="gpt-tanh-gelu", opset=17, folding=True, gelu="tanh", tied=True)
    yield dict(name="gpt-untied", opset=14, folding=True, gelu="none", tied=False)
    yield dict(name="gpt-untied-nofold-tanh", opset=13, folding=False, gelu="tanh", tied=False)


def export(model, args, names, path, opset, folding):
    training = torch.onnx.TrainingMode.EVAL if folding else torch.onnx.TrainingMode.TRAINING
    torch.onnx.export(model, args, path, input_names=names, output_names=["logits"],
                      opset_version=opset, do_constant_folding=folding, training=training)


def megac(megac_bin, *argv):
    result = subprocess.run([megac_bin, *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"megac {' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def run_megac(megac_bin, onnx_path, inputs, workdir):
    argv = ["run", onnx_path, "--output-dir", os.path.join(workdir, "out"),
            *numerics.threads_args()]
    for name, value in inputs.items():
        path = os.path.join(workdir, f"{name}.npy")
        np.save(path, value)
        argv += ["--input", f"{name}={path}"]
    megac(megac_bin, *argv)
    return np.load(os.path.join(workdir, "out", "logits.npy"))


def check_raised_ir(megac_bin, onnx_path, workdir, layers, norms):
    """One mega.attention per layer, one mega.layer_norm per norm, no shape arithmetic."""
    mlir = os.path.join(workdir, "raised.mlir")
    megac(megac_bin, "import", onnx_path, "--compile-to=input", "-o", mlir)
    text = open(mlir).read()
    problems = []
    if text.count("mega.attention") != layers:
        problems.append(f"{text.count('mega.attention')} mega.attention ops, expected {layers}")
    if text.count("mega.layer_norm") != norms:
        problems.append(f"{text.count('mega.layer_norm')} mega.layer_norm ops, expected {norms}")
    # Shape arithmetic would leave integer ops computed from constants alone (the importer folds
    # them); integer ops on data (the padding mask input) are fine.
    constants = set()
    for line in text.splitlines():
        m = re.match(r"\s*(%\S+) = mega\.(\w+) (.*)", line)
        if not m:
            continue
        value, op, rest = m.groups()
        if op == "constant":
            constants.add(value)
            continue
        operands = re.findall(r"%[\w#]+", rest.split(":")[0])
        integer = re.search(r"(->|:)\s*tensor<[0-9x]*i(64|32)>\s*$", line)
        if integer and operands and all(o in constants for o in operands):
            problems.append(f"shape arithmetic left in the IR: {line.strip()}")
    return problems


def compare(name, got, want):
    if got.shape != want.shape:
        return [f"logits shape {got.shape}, PyTorch {want.shape}"]
    ratio = np.abs(got.astype(np.float64) - want) / (ATOL + RTOL * np.abs(want.astype(np.float64)))
    numerics.report(f"{name} logits", float(np.nan_to_num(ratio, nan=np.inf).max()), 1.0)
    if not np.allclose(got, want, atol=ATOL, rtol=RTOL):
        err = np.max(np.abs(got - want))
        return [f"max |megac - torch| = {err:.3g} > {ATOL} (+{RTOL} relative)"]
    return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--only")
    args = parser.parse_args()
    torch.manual_seed(0)
    passed = failed = 0

    cases = []
    for v in gpt_variants():
        cases.append(("gpt", v))
    cases.append(("bert", dict(name="bert-padding-mask", opset=14, folding=True)))
    for kind, v in cases:
        if args.only and args.only != v["name"]:
            continue
        workdir = os.path.join(args.workdir, v["name"])
        os.makedirs(workdir, exist_ok=True)
        onnx_path = os.path.join(workdir, "model.onnx")
        torch.manual_seed(1234)
        batch, seq, vocab = 2, 16, 128
        ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long)
        if kind == "gpt":
            model = GptModel(layers=LAYERS, hidden=64, heads=4, seq=seq, vocab=vocab,
                             gelu=v["gelu"], tied=v["tied"]).eval()
            export(model, (ids,), ["input_ids"], onnx_path, v["opset"], v["folding"])
            with torch.no_grad():
                want = model(ids).numpy()
            inputs = {"input_ids": ids.numpy()}
            norms = 2 * LAYERS + 1
        else:
            model = BertModel(layers=LAYERS, hidden=64, heads=4, seq=seq, vocab=vocab).eval()
            mask = torch.ones(batch, seq, dtype=torch.long)
            mask[0, 11:] = 0
            mask[1, 5:] = 0
            export(model, (ids, mask), ["input_ids", "attention_mask"], onnx_path, v["opset"],
                   v["folding"])
            with torch.no_grad():
                want = model(ids, mask).numpy()
            inputs = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
            norms = 2 * LAYERS + 2
        try:
            problems = compare(v["name"], run_megac(args.megac, onnx_path, inputs, workdir), want)
            problems += check_raised_ir(args.megac, onnx_path, workdir, LAYERS, norms)
        except RuntimeError as e:
            problems = [str(e)]
        status = "PASS" if not problems else "FAIL"
        print(f"{status}: {v['name']}")
        for p in problems:
            print(f"    {p}")
        passed += not problems
        failed += bool(problems)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
