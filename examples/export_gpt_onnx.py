"""Writes the example GPT that `make demo` imports: a GPT-2-style transformer (pre-LN, fused qkv,
learned positions, tied head) exported by torch.onnx.export with random weights, the way a user
brings a model to megac. The model's code is the end-to-end tests' GptModel
(tests/e2e/torch_models.py). Needs PyTorch (Debian's python3-torch):

    /usr/bin/python3 examples/export_gpt_onnx.py -o gpt.onnx [--layers 4 --hidden 128 ...]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from torch_models import GptModel  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    # 257 byte tokens (256 ends a document), padded to a multiple of 64 as Megatron pads its
    # vocabulary, so the embedding and head split evenly under tensor parallelism.
    parser.add_argument("--vocab", type=int, default=320)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = GptModel(layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                     vocab=args.vocab, gelu="tanh")
    ids = torch.randint(0, args.vocab, (2, args.seq), dtype=torch.long)
    tmp = args.output + ".tmp"
    torch.onnx.export(model, (ids,), tmp, input_names=["input_ids"], output_names=["logits"],
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"input_ids": {0: "batch"}})
    os.replace(tmp, args.output)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.output}: GPT, {args.layers} layers, hidden {args.hidden}, {args.heads} "
          f"heads, seq {args.seq}, vocab {args.vocab}, {params / 1e6:.2f} M parameters")


if __name__ == "__main__":
    main()
