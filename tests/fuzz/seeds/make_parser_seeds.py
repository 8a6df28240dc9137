"""Writes the seeds of the parser fuzz drivers (issue 19), checked in beside this script under
plan/, checkpoint/, tensor_files/, tokenizer/ and spec/; rerun to regenerate.

usage: /usr/bin/python3 make_parser_seeds.py BUILD_DIR [DIR]   (DIR: default this folder)
Multi-file seeds are framed as FILE1 "\\n--8<--\\n" FILE2 (tests/fuzz/FuzzFiles.h).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

CUT = b"\n--8<--\n"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def safetensors(tensors):
    header, blobs, at = {}, [], 0
    for name, (dtype, array) in tensors.items():
        raw = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def npy(array):
    with tempfile.TemporaryFile() as f:
        np.save(f, array)
        f.seek(0)
        return f.read()


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    build = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
    megac = os.path.join(build, "bin", "megac")
    with tempfile.TemporaryDirectory() as tmp:
        # Plans: a zoo model's forward and a one-rank training step, sealed as megac writes them.
        subprocess.run([megac, "compile", "--model", "gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16",
                        "-o", os.path.join(out, "plan", "gpt_forward.mplan")], check=True)
        subprocess.run([megac, "compile", "--model", "gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16",
                        "--ranks", "1", "--global-batch", "2", "--micro-batch", "2",
                        "-o", os.path.join(out, "plan", "gpt_train.mplan")], check=True)
        # The checkpoint driver's own meta.json.
        env = dict(os.environ, MEGAC_FUZZ_SEED_OUT=os.path.join(out, "checkpoint", "meta.json"))
        os.makedirs(os.path.join(out, "checkpoint"), exist_ok=True)
        empty = os.path.join(tmp, "empty")
        write(empty, b"{}")
        subprocess.run([os.path.join(build, "bin", "checkpoint_fuzz_driver"), "--runs", "0", empty],
                       check=True, env=env)
        # Tensor files: .npy of several dtypes, a safetensors file, an indexed dataset.
        t = os.path.join(out, "tensor_files")
        write(os.path.join(t, "f32.npy"), npy(np.arange(6, dtype=np.float32).reshape(2, 3)))
        write(os.path.join(t, "i64.npy"), npy(np.array([3, 1, 4], dtype=np.int64)))
        write(os.path.join(t, "bool_scalar.npy"), npy(np.array(True)))
        write(os.path.join(t, "f16.npy"), npy(np.ones((2, 2), dtype=np.float16)))
        write(os.path.join(t, "model.safetensors"), safetensors({
            "w": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3)),
            "b": ("I64", np.array([1, 2], dtype=np.int64))}))
        text = os.path.join(tmp, "in.txt")
        with open(text, "w") as f:
            f.write("hello world\nfuzz me\n")
        subprocess.run([megac, "data", "prep", text, "--tokenizer", "byte", "-o", os.path.join(tmp, "ds")],
                       check=True, stdout=subprocess.DEVNULL)
        idx = open(os.path.join(tmp, "ds.idx"), "rb").read()
        bin_ = open(os.path.join(tmp, "ds.bin"), "rb").read()
        write(os.path.join(t, "dataset.idxbin"), idx + CUT + bin_)
    # Tokenizers: a byte-level vocabulary with two merges, in both formats.
    byte = bytes_to_unicode()
    vocab = {byte[b]: b for b in range(256)}
    vocab[byte[ord("h")] + byte[ord("e")]] = 256
    vocab[byte[ord("l")] + byte[ord("l")]] = 257
    vocab["<|endoftext|>"] = 258
    merges = ["h e", "l l"]
    k = os.path.join(out, "tokenizer")
    write(os.path.join(k, "gpt2.vocab_merges"),
          json.dumps(vocab).encode() + CUT + ("#version: 0.2\n" + "\n".join(merges) + "\n").encode())
    hf = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": 258, "content": "<|endoftext|>", "special": True}],
          "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                            "use_regex": True},
          "post_processor": None, "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
                    "merges": merges}}
    write(os.path.join(k, "tokenizer.json"), json.dumps(hf).encode())
    # Specs: model specs, cluster specs, device JSON.
    s = os.path.join(out, "spec")
    for name, text in {
            "gpt.txt": "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128",
            "llama.txt": "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,seq=32,vocab=128",
            "t5.txt": "t5:layers=1,hidden=32,heads=2,seq=5,dec_seq=3,vocab=64",
            "bert.txt": "bert:layers=1,hidden=32,heads=2,seq=8,vocab=64",
            "cluster.txt": "h100-sxm:2x8",
            "cluster_count.txt": "a100-80g:16",
            "device.json": json.dumps({"base": "h100-sxm", "name": "fuzz", "memoryBytes": 8e10,
                                       "devicesPerNode": 4}),
            "nemotron.txt": "nemotron:layers=1,hidden=64,heads=4,kv_heads=2,head_dim=24,ffn=96,"
                            "seq=8,vocab=128,qkv_bias=1,rotary_pct=0.5",
            # transformers config.json files (--model hf:), tiny.
            "hf-llama.json": json.dumps({
                "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 128, "rope_scaling": {
                    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
            "hf-mixtral.json": json.dumps({
                "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2,
                "sliding_window": 32}),
            "hf-nemotron.json": json.dumps({
                "model_type": "nemotron", "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 1, "num_attention_heads": 4, "head_dim": 24,
                "vocab_size": 128, "partial_rotary_factor": 0.5, "hidden_act": "relu2"}),
    }.items():
        write(os.path.join(s, name), text.encode())


if __name__ == "__main__":
    main()
