"""`--model hf:DIR` against transformers on tiny random configs (issue 33, first slice: hf:
loads no weights yet; the forward check hands megac the weights through an imported .mlir).
For each family a config made by transformers and written with save_pretrained (so fields equal
to the class defaults are left out, as published configs leave them out):

  - `megac describe --model hf:DIR,seq=16` counts exactly transformers' sum(p.numel()) of the
    model built from that config (tied heads counted once, as model.parameters() does);
  - the weights megac trains (`megac train --save-weights`, one step at lr 0: the seeded initial
    weights) have exactly the names and shapes of transformers' state_dict without its "model."
    prefix (a tied lm_head.weight is the embedding), so a later weights loader maps one to one;
  - forward: every transformers parameter redrawn from normal(0, 0.3) (seeded; biases and norm
    weights too, so a missing bias or LayerNorm1P's +1 shows, and scores large enough that the
    rotary frequencies matter), `megac import --model hf:DIR,seq=16` with those weights named
    by mega.weights, `megac run` logits against transformers', max |diff| <= 1e-5 max |logit|.
    Error model: fp32 sums in another order (~1e-7 relative per sum of 64-96 terms, amplified
    through two layers' softmax and norms) and rotary tables megac computes in double and rounds
    once where transformers multiplies float32 frequencies by positions (angles off by ~16 x
    6e-8 at position 15); measured 4e-7..1.2e-6 of the largest logit, 8x or more under the
    bound, while Llama 3.1's scaling left out, Nemotron's rotary on all dims or a rope_theta off
    by 1% each move the logits by more than 2e-4 of the largest (checked by hand);
  - training: 3 AdamW steps of `megac train --model hf:DIR` against PyTorch training the
    transformers model from megac's initial weights (train_test.py's reference loop, Adam eps
    1e-6 as in hf_train_test.py; mixtral with the aux loss off, as transformers trains without
    output_router_logits): every loss
    and grad_norm within 1e-4 relative, every final parameter within 1e-4 ||p|| + 1e-6 sqrt(n)
    (train_test.py has the error model of these bounds); and tp 2 x dp 2 against one rank in
    fp64 (numerics.layout_check), which needs mpirun (a skip without it) (hf_families.py's
    training_case, shared with hf_weights_test.py and hf_gpt2_test.py).

Configs exercise GQA and MHA, q/k/v/o and MLP biases (llama attention_bias/mlp_bias, qwen2's
q/k/v biases), tied and untied heads, Llama 3.1's rope_scaling, a head_dim other than
hidden/heads (mistral, nemotron), a sliding window no shorter than seq (mistral), MoE (mixtral)
and Nemotron's LayerNorm1P, squared ReLU and partial rotary. NemotronForCausalLM does not build
on torch 1.13 (NemotronLayerNorm1P passes `bias` to nn.LayerNorm, which takes it from torch 2.1):
hf_families.nemotron_shim builds it with torch 1.13's LayerNorm, which always has a bias. About 10 s.

usage: hf_config_models_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Needs transformers (the test venv; the script re-executes itself with the venv's python, or
exits 77 without it).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from hf_families import Checks, megac, nemotron_shim, training_case  # noqa: E402
from hf_models_test import venv_test_args  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402

SEQ, VOCAB = 16, 128
SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=VOCAB)


def cases():
    import transformers as T
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    return [
        ("llama-gqa-biases-llama3",
         T.LlamaForCausalLM, T.LlamaConfig(**SMALL, num_key_value_heads=2, rope_theta=500000.0,
                                           rope_scaling=llama3, attention_bias=True,
                                           mlp_bias=True)),
        ("llama-mha-tied",
         T.LlamaForCausalLM, T.LlamaConfig(**SMALL, tie_word_embeddings=True, rms_norm_eps=1e-5)),
        ("qwen2-gqa",
         T.Qwen2ForCausalLM, T.Qwen2Config(**SMALL, num_key_value_heads=2)),
        ("mistral-head-dim-window",
         T.MistralForCausalLM, T.MistralConfig(**SMALL, num_key_value_heads=2, head_dim=24,
                                               sliding_window=2 * SEQ)),
        ("mixtral",
         T.MixtralForCausalLM, T.MixtralConfig(**SMALL, num_key_value_heads=2,
                                               num_local_experts=4, num_experts_per_tok=2)),
        ("nemotron-partial-rotary",
         T.NemotronForCausalLM, T.NemotronConfig(**SMALL, num_key_value_heads=2, head_dim=24,
                                                 partial_rotary_factor=0.5, attention_bias=True)),
    ]


def write_safetensors(path, tensors):
    """name -> float32 numpy array, as a safetensors file (header JSON, then the bytes)."""
    import json
    import numpy as np
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def initial_model(cls, config, initial):
    """A transformers model of `config` holding megac's `initial` weights (megac's names)."""
    import torch
    model = cls(config)
    state = {("" if k == "lm_head.weight" else "model.") + k: torch.from_numpy(v.copy())
             for k, v in initial.items()}
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=False)
    return model


def main():
    args = venv_test_args()
    import numpy as np
    import torch
    nemotron_shim()
    rows = np.random.RandomState(0).randint(0, VOCAB, size=(12, SEQ + 1)).astype(np.int64)
    tokens = os.path.join(args.workdir, "tokens.npy")
    np.save(tokens, rows)
    check = Checks()
    ids = np.random.RandomState(1).randint(0, VOCAB, size=(1, SEQ)).astype(np.int64)
    ids_path = os.path.join(args.workdir, "ids.npy")
    np.save(ids_path, ids)
    for name, cls, config in cases():
        folder = os.path.join(args.workdir, name)
        config.save_pretrained(folder)
        torch.manual_seed(0)
        model = cls(config)
        want = sum(p.numel() for p in model.parameters())
        d = megac(args, ["describe", "--model", f"hf:{folder},seq={SEQ}"])
        got = None
        for line in d.stdout.splitlines():
            if line.startswith("parameters"):
                got = int(line.split()[1].replace(",", ""))
        check(d.returncode == 0 and got == want,
              f"{name}: megac describe {got} parameters, transformers {want}"
              + ("" if d.returncode == 0 else f" ({d.stderr.strip()})"))

        weights = os.path.join(args.workdir, name + ".safetensors")
        t = megac(args, ["train", "--model", f"hf:{folder}", "--data", tokens, "--steps", "1",
                         "--global-batch", "4", "--micro-batch", "4", "--lr", "0", "--seed", "0",
                         "--save-weights", weights])
        if t.returncode != 0:
            check(False, f"{name}: megac train: {t.stderr.strip()[-400:]}")
            continue
        megac_shapes = {k: list(v.shape) for k, v in read_safetensors(weights).items()}
        hf_shapes = {k.removeprefix("model."): list(v.shape)
                     for k, v in model.state_dict().items()}
        if config.tie_word_embeddings:
            hf_shapes.pop("lm_head.weight")
        missing = sorted(set(hf_shapes) - set(megac_shapes))
        extra = sorted(set(megac_shapes) - set(hf_shapes))
        shapes = sorted(k for k in set(hf_shapes) & set(megac_shapes)
                        if hf_shapes[k] != megac_shapes[k])
        check(not missing and not extra and not shapes,
              f"{name}: {len(megac_shapes)} weights, names and shapes as transformers'"
              + (f"; missing {missing[:4]}" if missing else "")
              + (f"; extra {extra[:4]}" if extra else "")
              + (f"; shapes differ {[(k, megac_shapes[k], hf_shapes[k]) for k in shapes[:3]]}"
                 if shapes else ""))
        if missing or extra or shapes:
            continue
        initial = read_safetensors(weights)
        problems = training_case(args, name, folder,
                                 lambda: initial_model(cls, config, initial), rows, tokens)
        check(not problems, f"{name}: 3 steps against PyTorch and tp 2 x dp 2 against one rank"
              + "".join("\n         " + p for p in problems))
        # Forward with random weights handed to megac through an imported .mlir.
        torch.manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.3)
        state = {k.removeprefix("model."): v.numpy() for k, v in model.state_dict().items()}
        if config.tie_word_embeddings:
            state.pop("lm_head.weight")
        mlir = os.path.join(args.workdir, name + ".mlir")
        i = megac(args, ["import", "--model", f"hf:{folder},seq={SEQ}", "-o", mlir])
        if i.returncode != 0:
            check(False, f"{name}: megac import: {i.stderr.strip()[-400:]}")
            continue
        write_safetensors(os.path.join(args.workdir, name + "-w.safetensors"), state)
        text = open(mlir).read().replace(
            "module attributes {", f'module attributes {{mega.weights = "{name}-w.safetensors", ',
            1)
        with open(mlir, "w") as f:
            f.write(text)
        out = os.path.join(args.workdir, name + "-run")
        r = megac(args, ["run", mlir, "--input", f"input_ids={ids_path}", "--output-dir", out])
        if r.returncode != 0:
            check(False, f"{name}: megac run: {r.stderr.strip()[-400:]}")
            continue
        got = np.load(os.path.join(out, "logits.npy")).astype(np.float64)
        with torch.no_grad():
            want = model.float().eval()(input_ids=torch.from_numpy(ids)).logits.double().numpy()
        err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
        scale = float(np.abs(want).max())
        check(err <= 1e-5 * scale,
              f"{name}: logits {list(got.shape)} max |megac - transformers| = {err:.2e} "
              f"(bound 1e-5 x max |logit| {scale:.3f})")
    return numerics.exit_code(check.failures)


if __name__ == "__main__":
    sys.exit(main())
