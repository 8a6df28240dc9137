"""Hugging Face `transformers` models through megac: the 16 families of hf_families.py (GPT-2,
GPT-J, GPT-NeoX, OPT, BLOOM, Falcon, Llama, Mistral with a sliding window, Qwen2, Gemma, Phi,
StableLM, BERT, RoBERTa, DistilBERT, ELECTRA) and T5, each built from a small config with random
weights (no downloads), exported with torch.onnx.export (opset 17; families cached by config
hash under WORKDIR/cache), imported by megac (raised to coarse ops) and run forward with
`megac run`; its logits must match PyTorch's and onnxruntime's on the same file
(|got - ref| <= 1e-4 + 1e-4 |ref|, fp32: two implementations of ~40 ops with sums of <= 256
terms, each ~sqrt(256)·u = 1e-6 relative at u = 6e-8, ~1e-5 together on logits of order 1, so a
margin near 10; the worst ratio is printed as an `error/bound` line), and the families of ATTENTION_RAISED must have their
attention raised to mega.attention (the others are listed there with the reason).

usage: hf_models_test.py --megac build/bin/megac --workdir DIR [--venv .venv] [--only NAME]

Needs `transformers` and `onnxruntime`, which scripts/bootstrap.sh installs (pinned) into the
venv .venv over /usr/bin/python3 (--system-site-packages, so Debian's torch 1.13 is reused). Run
with another Python, the script re-executes itself with the venv's; without the venv it exits 77
(a ctest skip) saying how to make it. Prints, per model, the ONNX op histogram, megac's op
histogram after raising, and the max errors against PyTorch and onnxruntime.
"""
import argparse
import collections
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SKIP = 77


def ensure_venv(venv):
    try:
        import onnxruntime  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    python = os.path.join(venv, "bin", "python")
    # A venv's python is a link to the base interpreter: compare prefixes, not executables.
    if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(python, [python] + sys.argv)
    print(f"SKIP: transformers/onnxruntime are not importable and {python} is missing or lacks "
          "them; run scripts/bootstrap.sh")
    sys.exit(SKIP)


def venv_test_args(add_arguments=None, cache=False, fresh_workdir=True):
    """The command line the venv-based e2e tests share (--megac, --workdir, --venv and what
    `add_arguments(parser)` adds), parsed, with --megac made absolute; then the script runs
    under the test venv (ensure_venv), torch on one thread; with `fresh_workdir` the work folder
    is made anew, with `cache` its export cache is named beside it (args.cache, kept)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--venv", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       ".venv"))
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args()
    args.megac = os.path.abspath(args.megac)
    ensure_venv(args.venv)
    import torch
    torch.set_num_threads(1)
    if cache:
        args.cache = args.workdir.rstrip("/") + "-cache"
    if fresh_workdir:
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(args.workdir)
    return args


def models():
    """(name, model, example inputs as a dict of int64 tensors, config or None), lazily: every
    family of hf_families.py (pad-free ids, see there), then T5. Dropout off, eval mode."""
    import numpy as np
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    import hf_families as hf
    for i, name in enumerate(hf.FAMILIES):
        model, cfg = hf.build(name, seed=i)
        ids = hf.pad_free(np.random.default_rng(100 + i).integers(0, hf.VOCAB, (2, hf.SEQ)), cfg)
        yield name, model.hf, {"input_ids": torch.from_numpy(ids)}, cfg
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 16))
    t5 = T5ForConditionalGeneration(T5Config(num_layers=2, num_decoder_layers=2, d_model=64,
                                             d_kv=16, num_heads=4, d_ff=128, vocab_size=128,
                                             dropout_rate=0.0, use_cache=False))
    yield "t5", t5, {"input_ids": ids, "decoder_input_ids": ids[:, :8]}, None


def logits_module(model, names):
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            # No key/value cache: the configs set use_cache=False.
            return self.model(**dict(zip(names, args)), return_dict=False)[0]

    return Logits().eval()


# Coarse ops each model must raise to (op -> count) and low-level ops that must not survive
# raising (the decomposed forms of those coarse ops).
RAISED = {
    # Per layer: rope on q and k, silu on the gate, attention on the 2 kv heads (no repeat).
    "llama": ({"mega.rope": 4, "mega.silu": 2, "mega.attention": 2, "mega.rms_norm": 5},
              {"mega.sigmoid", "mega.neg", "mega.concat", "mega.slice", "mega.broadcast"}),
}


# Every family's attention raises to mega.attention (2 layers; T5: 2 encoder self, 2 decoder
# self and 2 cross). Falcon's multi-query attention takes its one key/value head as it is;
# GPT-NeoX's, OPT's and BLOOM's rank-3 baddbmm/softmax/bmm are lifted to [b, h, s, t] first,
# BLOOM's ALiBi bias and causal mask becoming one attention mask; GPT-J scales its where-masked
# scores. Rotary embeddings: rotate-half (Llama-style, and the partial rotary of GPT-NeoX, Phi,
# StableLM) raise to mega.rope; GPT-J's interleaved rotate_every_two stays elementwise ops.
ATTENTION_RAISED = {"gpt2": 2, "gptj": 2, "gpt_neox": 2, "opt": 2, "bloom": 2, "falcon": 2, "llama": 2, "mistral": 2, "qwen2": 2, "gemma": 2,
                    "phi": 2, "stablelm": 2, "bert": 2, "roberta": 2, "distilbert": 2,
                    "electra": 2, "t5": 6}


def check_raised(name, raised, mlir):
    """Empty when `raised` ("op=count ...") has the coarse ops RAISED expects, else why not."""
    counts = dict((op, int(n)) for op, n in (item.rsplit("=", 1) for item in raised.split()))
    want, gone = RAISED.get(name, ({}, set()))
    problems = [f"{op}={counts.get(op, 0)} (expected {n})" for op, n in want.items()
                if counts.get(op, 0) != n]
    problems += [f"{op} still present" for op in sorted(gone) if op in counts]
    if name in ATTENTION_RAISED and counts.get("mega.attention", 0) != ATTENTION_RAISED[name]:
        problems.append(f"mega.attention={counts.get('mega.attention', 0)} (expected "
                        f"{ATTENTION_RAISED[name]})")
    if name == "llama":
        # Grouped-query attention: key and value keep their 2 heads ([b, t, hk, d]).
        with open(mlir) as f:
            text = f.read()
        if "tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>" not in text:
            problems.append("attention does not take the 2 kv heads directly")
    return "; ".join(problems)


def megac(megac_bin, *argv):
    if argv and argv[0] == "run":
        import numerics
        argv = (*argv, *numerics.threads_args())
    result = subprocess.run([megac_bin, *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"megac {' '.join(argv)} failed:\n{result.stderr}")
    return result.stdout


def check_model(args, name, model, inputs, cfg):
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    workdir = os.path.join(args.workdir, name)
    os.makedirs(workdir, exist_ok=True)
    names = list(inputs)
    module = logits_module(model.eval(), names)
    with torch.no_grad():
        expected = module(*inputs.values()).numpy()
    if cfg is not None:  # a family: the cached export (hf_families.export)
        import hf_families
        path = hf_families.export(name, module, cfg, os.path.join(args.workdir, "cache"),
                                  training=False)
    else:
        path = os.path.join(workdir, f"{name}.onnx")
        torch.onnx.export(module, tuple(inputs.values()), path, input_names=names,
                          output_names=["logits"], opset_version=17, do_constant_folding=False)
    onnx_ops = collections.Counter(n.op_type for n in onnx.load(path).graph.node)

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    from_ort = session.run(["logits"], {k: v.numpy() for k, v in inputs.items()})[0]

    shapes = [f"--input-shape={k}={'x'.join(map(str, v.shape))}" for k, v in inputs.items()]
    mlir = os.path.join(workdir, f"{name}.mlir")
    megac(args.megac, "import", path, *shapes, "--compile-to=input", "-o", mlir)
    described = megac(args.megac, "describe", mlir)
    raised = next((line.split(None, 1)[1] for line in described.splitlines()
                   if line.startswith("ops")), "?")
    feeds = []
    for k, v in inputs.items():
        npy = os.path.join(workdir, f"{k}.npy")
        np.save(npy, v.numpy())
        feeds.append(f"--input={k}={npy}")
    out_dir = os.path.join(workdir, "out")
    megac(args.megac, "run", mlir, *feeds, "--output-dir", out_dir)
    outputs = [f for f in os.listdir(out_dir) if f.endswith(".npy")]
    if len(outputs) != 1:
        raise RuntimeError(f"{name}: expected one output, megac wrote {outputs}")
    got = np.load(os.path.join(out_dir, outputs[0]))

    def max_error(a, b):
        return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))

    raise_problems = check_raised(name, raised, mlir)
    if got.shape == expected.shape:
        import numerics
        for what, ref in (("torch", expected), ("onnxruntime", from_ort)):
            ratio = np.abs(got.astype(np.float64) - ref) / (1e-4 + 1e-4 * np.abs(ref))
            numerics.report(f"{name} logits against {what}",
                            float(np.nan_to_num(ratio, nan=np.inf).max()), 1.0)
    ok = (got.shape == expected.shape and np.allclose(got, expected, rtol=1e-4, atol=1e-4)
          and np.allclose(got, from_ort, rtol=1e-4, atol=1e-4) and not raise_problems)
    print(f"{name}: ONNX ops {dict(onnx_ops.most_common())}")
    print(f"{name}: after raising: {raised}")
    if raise_problems:
        print(f"{name}: raising incomplete: {raise_problems}")
    print(f"{name}: logits {list(got.shape)}: max |megac - torch| {max_error(got, expected):.2e}, "
          f"max |megac - onnxruntime| {max_error(got, from_ort):.2e}, "
          f"max |onnxruntime - torch| {max_error(from_ort, expected):.2e} -> "
          f"{'ok' if ok else 'FAIL'}", flush=True)
    return ok


def main():
    args = venv_test_args(lambda p: p.add_argument("--only"), fresh_workdir=False)
    failed = []
    for name, model, inputs, cfg in models():
        if args.only and name != args.only:
            continue
        try:
            if not check_model(args, name, model, inputs, cfg):
                failed.append(name)
        except Exception as e:  # noqa: BLE001 - report every model, then fail
            print(f"{name}: FAIL: {e}", flush=True)
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    print("all models match PyTorch and onnxruntime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
