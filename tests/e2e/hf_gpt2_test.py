"""GPT-2 from a Hugging Face folder (issue 33): `--model hf:DIR` of model_type gpt2 builds the
zoo's GPT under transformers' names (transformer.wte, wpe of n_positions rows, h.N.ln_1,
attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, ln_f, tied or untied lm_head). The file's
Conv1D weights are [in, out] and c_attn fuses q, k and v as [in, 3 out]; megac holds q, k and v
apart in nn.Linear's [out, in] (so each splits by heads under tp), and driver/HfWeights splits
and transposes on reading and joins and transposes back on --save-hf. Two tiny random models
written by save_pretrained (weights redrawn from normal(0, 0.3), biases and norms too):

  - tied: gelu_new, n_positions 32 > seq 16 (the first 16 rows of wpe are used), sharded in
    20 KB files, fp32;
  - untied: gelu (erf), scale_attn_weights false, layer_norm_epsilon 1e-6, n_inner 80, bf16.

For each (the bounds and their error models are hf_weights_test.py's):
  - forward: `megac run --model hf:DIR,seq=16` logits within 1e-5 of the largest of
    transformers';
  - training: 3 AdamW steps against PyTorch from the folder's weights (losses and grad norms
    1e-4 relative, final parameters 1e-4 ||p|| + 1e-6 sqrt(n), megac's parameters joined and
    transposed into transformers' layout), then tp 2 x dp 2 against one rank in fp64;
  - round trip: `--save-hf` reloads in transformers with exactly the trained parameters (bf16:
    rounded to nearest even) and logits equal to megac's forward of the saved folder;
    `megac export --hf` of the run's checkpoint writes that folder byte for byte;
  - generate (tied): `megac generate --model hf:DIR` makes transformers' greedy tokens;
  - the hub's original GPT-2 layout (tensors without `transformer.`, the old causal-mask
    buffers h.N.attn.bias and h.N.attn.masked_bias) reads to the same logits.
Refusals, one line naming the field: seq above n_positions, scale_attn_by_inverse_layer_idx
true, reorder_and_upcast_attn true, an activation_function megac does not build.
About 30 s.

usage: hf_gpt2_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Needs transformers (the test venv; exits 77 without it); mpirun for tp 2 x dp 2.
"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from hf_families import Checks, megac, training_case  # noqa: E402
from hf_models_test import venv_test_args  # noqa: E402
from hf_weights_test import (SEQ, VOCAB, check_export, check_generate,  # noqa: E402
                             compare_logits, logits_of, make_folder, megac_logits, train_argv)
from safetensors_np import read_raw, read_safetensors  # noqa: E402

SMALL = dict(n_embd=64, n_layer=2, n_head=4, n_positions=2 * SEQ, vocab_size=VOCAB,
             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def cases():
    import torch
    import transformers as T
    return [
        ("gpt2", T.GPT2Config(**SMALL), dict(max_shard_size="20KB"), torch.float32),
        ("gpt2-untied", T.GPT2Config(**SMALL, tie_word_embeddings=False, activation_function="gelu",
                                     scale_attn_weights=False, layer_norm_epsilon=1e-6,
                                     n_inner=80),
         {}, torch.bfloat16),
    ]


def to_hf(tensors):
    """megac's GPT-2 parameters (names and nn.Linear layouts) as transformers' state_dict:
    q, k, v joined into c_attn along the out dim, Conv1D weights transposed to [in, out]."""
    import numpy as np
    out, fused = {}, {}
    for name, t in tensors.items():
        m = re.match(r"(.*\.attn\.c_attn)\.([qkv])\.(weight|bias)$", name)
        if m:
            fused.setdefault(m.group(1) + "." + m.group(3), {})[m.group(2)] = t
        elif re.search(r"\.(c_proj|c_fc)\.weight$", name):
            out[name] = np.ascontiguousarray(t.T)
        else:
            out[name] = t
    for name, parts in fused.items():
        t = np.concatenate([parts["q"], parts["k"], parts["v"]], axis=0)
        out[name] = np.ascontiguousarray(t.T) if name.endswith(".weight") else t
    return out


def hub_layout(args, check, folder, ids_path, want):
    """The folder rewritten as the hub's original GPT-2 files are: one file, names without
    `transformer.`, each layer's causal-mask buffers; megac reads it to the same logits."""
    import numpy as np
    from safetensors.numpy import save_file
    hub = os.path.join(args.workdir, "gpt2-hub")
    os.makedirs(hub)
    shutil.copy(os.path.join(folder, "config.json"), hub)
    tensors = {}
    for f in os.listdir(folder):
        if f.endswith(".safetensors"):
            tensors.update({k.removeprefix("transformer."): v
                            for k, v in read_safetensors(os.path.join(folder, f)).items()})
    for layer in range(SMALL["n_layer"]):
        tensors[f"h.{layer}.attn.bias"] = np.tril(np.ones((32, 32), np.float32))[None, None]
        tensors[f"h.{layer}.attn.masked_bias"] = np.array(-1e4, np.float32)
    save_file(tensors, os.path.join(hub, "model.safetensors"), metadata={"format": "pt"})
    got, err = megac_logits(args, hub, ids_path, os.path.join(args.workdir, "gpt2-hub-run"))
    if got is None:
        check(False, f"gpt2: hub layout: megac run: {err}")
        return
    ok, said = compare_logits(got, want)
    check(ok, f"gpt2: the hub's layout (no transformer. prefix, attn.bias buffers): {said}")


def refusals(args, check, folder):
    """Bad configs and lengths, each refused in one line naming the field."""
    d = megac(args, ["describe", "--model", f"hf:{folder},seq=64"])
    check(d.returncode != 0 and "field 'n_positions' is 32" in d.stderr
          and "seq 64" in d.stderr and len(d.stderr.strip().splitlines()) == 1,
          f"seq above n_positions refused: {d.stderr.strip()}")
    config = json.load(open(os.path.join(folder, "config.json")))
    for field, value in (("scale_attn_by_inverse_layer_idx", True),
                         ("reorder_and_upcast_attn", True), ("activation_function", "relu")):
        bad = os.path.join(args.workdir, "bad-" + field)
        os.makedirs(bad)
        json.dump(dict(config, **{field: value}), open(os.path.join(bad, "config.json"), "w"))
        d = megac(args, ["describe", "--model", f"hf:{bad},seq=16"])
        check(d.returncode != 0 and f"field '{field}' is {json.dumps(value)}" in d.stderr
              and len(d.stderr.strip().splitlines()) == 1,
              f"{field} {json.dumps(value)} refused: {d.stderr.strip()}")


def main():
    args = venv_test_args()
    import numpy as np
    import torch
    import transformers as T
    rows = np.random.RandomState(0).randint(0, VOCAB, size=(12, SEQ + 1)).astype(np.int64)
    tokens = os.path.join(args.workdir, "tokens.npy")
    np.save(tokens, rows)
    ids = np.random.RandomState(1).randint(0, VOCAB, size=(1, SEQ)).astype(np.int64)
    ids_path = os.path.join(args.workdir, "ids.npy")
    np.save(ids_path, ids)
    check = Checks()
    cls = T.GPT2LMHeadModel
    for name, config, save_kwargs, dtype in cases():
        folder = os.path.join(args.workdir, name)
        model = make_folder(folder, cls, config, save_kwargs, dtype)
        files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
        what = f"{len(files)} {str(dtype).removeprefix('torch.')} file(s)"
        got, err = megac_logits(args, folder, ids_path, os.path.join(args.workdir, name + "-run"))
        if got is None:
            check(False, f"{name}: megac run: {err}")
            continue
        want = logits_of(model, ids)
        ok, said = compare_logits(got, want)
        check(ok, f"{name} ({what}): forward logits from hf:DIR against transformers: {said}")

        problems = training_case(
            args, name, folder,
            lambda: cls.from_pretrained(folder, torch_dtype=torch.float32), rows, tokens, to_hf)
        check(not problems, f"{name}: 3 steps from the folder's weights against PyTorch and "
              "tp 2 x dp 2 against one rank" + "".join("\n         " + p for p in problems))

        out = os.path.join(args.workdir, name + "-saved")
        weights = os.path.join(args.workdir, name + "-saved.safetensors")
        ckpt = os.path.join(args.workdir, name + "-ckpt")
        t = megac(args, train_argv(folder, tokens, ["--save-hf", out, "--hf-shard-size", "30KB",
                                                    "--save-weights", weights, "--save", ckpt]))
        if t.returncode != 0:
            check(False, f"{name}: megac train --save-hf: {t.stderr.strip()[-400:]}")
            continue
        saved = sorted(os.listdir(out))
        reloaded = cls.from_pretrained(out, torch_dtype=torch.float32).eval()
        state = {k: v.numpy() for k, v in reloaded.state_dict().items()}
        if config.tie_word_embeddings:
            state.pop("lm_head.weight")
        trained = {k: v if dtype == torch.float32 else
                   torch.from_numpy(v.copy()).to(dtype).float().numpy()
                   for k, v in to_hf(read_safetensors(weights)).items()}
        want_dtype = {torch.float32: "F32", torch.bfloat16: "BF16"}[dtype]
        dtypes = {d for f in saved if f.endswith(".safetensors")
                  for d, _, _ in read_raw(os.path.join(out, f)).values()}
        same = set(state) == set(trained) and all(
            np.array_equal(state[k], trained[k]) for k in trained)
        check(same and dtypes == {want_dtype} and "config.json" in saved
              and "model.safetensors.index.json" in saved,
              f"{name}: --save-hf folder ({len(saved)} files, {sorted(dtypes)}) reloads in "
              "transformers with exactly the trained parameters" + (
                  "" if same else f"; names differ: {sorted(set(state) ^ set(trained))[:4]}"))
        got, err = megac_logits(args, out, ids_path, os.path.join(args.workdir, name + "-run2"))
        if got is None:
            check(False, f"{name}: megac run of the saved folder: {err}")
            continue
        ok, said = compare_logits(got, logits_of(reloaded, ids))
        check(ok, f"{name}: saved folder's logits, transformers against megac: {said}")
        check_export(args, check, name, ckpt, out)
        if name == "gpt2":
            check_generate(args, check, name, folder, model)
            hub_layout(args, check, folder, ids_path, want)
            refusals(args, check, folder)
    return numerics.exit_code(check.failures)


if __name__ == "__main__":
    sys.exit(main())
