"""Hugging Face weights in and out (issue 33 items 3 and 4): `--model hf:DIR` starts from the
folder's model.safetensors (or sharded model.safetensors.index.json) and `megac train --save-hf`
writes a folder transformers loads. Tiny random models made by transformers and written by
save_pretrained (weights redrawn from normal(0, 0.3), seeded, biases and norm weights too, so a
weight read from the wrong place or a missed +1 of LayerNorm1P shows):

  - llama: GQA, untied head, Llama 3.1 rope_scaling, attention and MLP biases; saved in shards
    of at most 20 KB (model.safetensors.index.json), fp32;
  - qwen2: q/k/v biases, tied head (save_pretrained leaves lm_head.weight out); saved in bf16
    (megac converts to fp32 exactly: the reference is transformers' model of the same file
    loaded in fp32);
  - mixtral: MoE, per-expert tensors stacked into megac's [E, ...] parameters; sharded;
  - qwen2_moe: MoE with a sigmoid-gated shared expert and top-k probabilities not renormalised
    (norm_topk_prob false); sharded;
  - nemotron: LayerNorm1P, squared ReLU, partial rotary (hf_config_models_test.py's shim makes
    NemotronForCausalLM build on torch 1.13).

For each:
  - forward: `megac run --model hf:DIR,seq=16` logits against transformers' of the same folder,
    max |diff| <= 1e-5 max |logit|. Error model (hf_config_models_test.py): fp32 sums in another
    order, ~1e-7 relative per sum of 64-96 terms amplified through two layers' softmax and norms,
    and rotary tables megac computes in double where transformers multiplies float32 frequencies
    by positions; measured there at 4e-7..1.2e-6 of the largest logit. A weight read transposed,
    from another tensor or another expert moves the logits by O(1) of the largest;
  - training: 3 AdamW steps of `megac train --model hf:DIR` against PyTorch from the same
    weights, then tp 2 x dp 2 against one rank in fp64 (hf_families.training_case:
    1e-4 relative on losses, grad norms and final parameters; its error model);
  - round trip: `megac train --save-hf OUT --hf-shard-size 30KB` (one step at lr 1e-3):
    transformers' from_pretrained(OUT) has exactly the parameters megac's --save-weights wrote
    (the same fp32 bits), and its logits equal `megac run --model hf:OUT,seq=16`'s (the forward
    bound above); OUT has the input's config.json and tokenizer file and its tensors are in the
    config's torch_dtype (qwen2's bf16: the trained parameters rounded to nearest even);
  - export: `megac export --load CKPT --hf OUT2` of the same run's checkpoint writes that folder
    again, tensors byte for byte;
  - generate (llama, qwen2, mixtral, qwen2_moe, nemotron): `megac generate --model hf:DIR`
    makes transformers' greedy tokens with its KV cache and with --no-kv-cache (GQA, Llama 3.1's
    and Nemotron's partial rotary at each token's position, MoE at one token), and llama's with
    a window that slides makes the same tokens with and without the cache.
Bad input, each refused by `megac train` in one line naming the file and the tensor, with no
--save-hf folder written: a truncated shard, an index naming a missing file, an unreadable dtype
(I32), a mis-shaped tensor (a config that does not match the weights), a missing tensor (then
accepted with --allow-missing, training that head from its initialisation) and an extra tensor.
About 40 s.

usage: hf_weights_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
       hf_weights_test.py ... --measure HIDDEN,FFN,LAYERS   (a measurement, not CI: below)
       hf_weights_test.py ... --measure-save HIDDEN,FFN,LAYERS,SHARD_BYTES   (the same, saving)
       hf_weights_test.py ... --measure-export HIDDEN,FFN,LAYERS,SHARD_BYTES   (megac export)
Needs transformers (the test venv; exits 77 without it); mpirun for tp 2 x dp 2 (skipped
without it).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from hf_families import Checks, megac, nemotron_shim, training_case  # noqa: E402
from hf_models_test import venv_test_args  # noqa: E402
from safetensors_np import read_raw, read_safetensors  # noqa: E402

SEQ, VOCAB = 16, 128
SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=VOCAB)


def cases():
    import torch
    import transformers as T
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    return [
        ("llama", T.LlamaForCausalLM,
         T.LlamaConfig(**SMALL, num_key_value_heads=2, rope_theta=500000.0, rope_scaling=llama3,
                       attention_bias=True, mlp_bias=True),
         dict(max_shard_size="20KB"), torch.float32),
        ("qwen2", T.Qwen2ForCausalLM,
         T.Qwen2Config(**SMALL, num_key_value_heads=2, tie_word_embeddings=True),
         {}, torch.bfloat16),
        ("mixtral", T.MixtralForCausalLM,
         T.MixtralConfig(**SMALL, num_key_value_heads=2, num_local_experts=4,
                         num_experts_per_tok=2),
         dict(max_shard_size="40KB"), torch.float32),
        # Shared expert (sigmoid-gated) and top-k probabilities not renormalised.
        ("qwen2_moe", T.Qwen2MoeForCausalLM,
         T.Qwen2MoeConfig(**SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                          moe_intermediate_size=48, shared_expert_intermediate_size=80,
                          norm_topk_prob=False),
         dict(max_shard_size="40KB"), torch.float32),
        ("nemotron", T.NemotronForCausalLM,
         T.NemotronConfig(**SMALL, num_key_value_heads=2, head_dim=24, partial_rotary_factor=0.5,
                          attention_bias=True),
         {}, torch.float32),
    ]


def make_folder(folder, cls, config, save_kwargs, dtype):
    """A random model saved by save_pretrained in `dtype`, a tokenizer file beside it; returns
    transformers' model of the folder in fp32 (the reference)."""
    import torch
    torch.manual_seed(1)
    model = cls(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.to(dtype).save_pretrained(folder, **save_kwargs)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 64}, f)
    return cls.from_pretrained(folder, torch_dtype=torch.float32).eval()


def logits_of(model, ids):
    import torch
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids)).logits.double().numpy()


def megac_logits(args, folder, ids_path, out):
    r = megac(args, ["run", "--model", f"hf:{folder},seq={SEQ}", "--input",
                     f"input_ids={ids_path}", "--output-dir", out])
    if r.returncode != 0:
        return None, r.stderr.strip()[-400:]
    import numpy as np
    return np.load(os.path.join(out, "logits.npy")).astype(np.float64), ""


def compare_logits(got, want):
    import numpy as np
    err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    scale = float(np.abs(want).max())
    return err <= 1e-5 * scale, f"max |diff| {err:.2e} (bound 1e-5 x max |logit| {scale:.3f})"


def train_argv(folder, tokens, extra):
    return ["train", "--model", f"hf:{folder}", "--data", tokens, "--steps", "1",
            "--global-batch", "4", "--micro-batch", "4", "--lr", "1e-3", "--seed", "0", *extra]


def bad_inputs(args, check, base, cls, config, tokens):
    """The refusals, on copies of the sharded llama folder `base`."""
    import numpy as np

    def copy(name):
        d = os.path.join(args.workdir, "bad-" + name)
        shutil.copytree(base, d)
        return d

    def refused(name, folder, expect, extra=()):
        out = os.path.join(args.workdir, "bad-" + name + "-out")
        t = megac(args, train_argv(folder, tokens, ["--save-hf", out, *extra]))
        lines = [line for line in t.stderr.splitlines() if "error" in line]
        text = lines[-1] if lines else t.stderr.strip()
        ok = (t.returncode != 0 and len(lines) == 1 and all(e in text for e in expect)
              and not os.path.exists(out))
        check(ok, f"bad input, {name}: refused in one line naming {expect}, nothing written"
              + ("" if ok else f"\n         rc {t.returncode}: {t.stderr.strip()[-600:]}"))

    index = json.load(open(os.path.join(base, "model.safetensors.index.json")))
    shard = sorted(set(index["weight_map"].values()))[-1]
    d = copy("truncated")
    path = os.path.join(d, shard)
    os.truncate(path, os.path.getsize(path) - 100)
    refused("truncated shard", d, [shard, "truncated"])

    d = copy("index-missing-file")
    i = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    i["weight_map"]["model.norm.weight"] = "model-00099-of-00099.safetensors"
    json.dump(i, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    refused("index naming a missing file", d,
            ["model.safetensors.index.json", "model.norm.weight", "model-00099-of-00099"])

    # An unreadable dtype: the header of model.norm.weight's file says I32 (4 bytes, as F32).
    d = copy("dtype")
    name = "model.norm.weight"
    path = os.path.join(d, index["weight_map"][name])
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    entry = json.dumps({name: json.loads(raw[8:8 + n])[name]}, separators=(",", ":"))[1:-1]
    text = raw[8:8 + n].replace(entry.encode(), entry.replace('"F32"', '"I32"').encode())
    assert entry.encode() in raw[8:8 + n] and len(text) == n
    open(path, "wb").write(raw[:8] + text + raw[8 + n:])
    refused("unreadable dtype", d, [index["weight_map"][name], name, "I32"])

    d = copy("mis-shaped")
    c = json.load(open(os.path.join(d, "config.json")))
    c["intermediate_size"] = 80
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    refused("mis-shaped tensor", d, ["model.safetensors.index.json",
                                     "model.layers.0.mlp.down_proj.weight", "[64, 96]",
                                     "[64, 80]"])

    # A missing head: refused, then trained from its initialisation with --allow-missing.
    d = copy("missing")
    i = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    del i["weight_map"]["lm_head.weight"]
    json.dump(i, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    refused("missing tensor", d, ["lm_head.weight", "--allow-missing"])
    t = megac(args, train_argv(d, tokens, ["--allow-missing", "lm_head.weight"]))
    check(t.returncode == 0, "missing tensor: accepted with --allow-missing lm_head.weight"
          + ("" if t.returncode == 0 else ": " + t.stderr.strip()[-400:]))

    d = copy("extra")
    from safetensors.numpy import save_file
    save_file({"model.layers.9.mlp.up_proj.weight": np.zeros((2, 2), np.float32)},
              os.path.join(d, "extra.safetensors"), metadata={"format": "pt"})
    i = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    i["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "extra.safetensors"
    json.dump(i, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    refused("extra tensor", d, ["model.layers.9.mlp.up_proj.weight"])

    # Flags refused before the run: a bad size, an existing --save-hf folder, --allow-missing
    # without weights to miss.
    bare = os.path.join(args.workdir, "bad-bare")
    os.makedirs(bare)
    shutil.copy(os.path.join(base, "config.json"), bare)
    for what, argv, expect in [
            ("--hf-shard-size 5XB", train_argv(base, tokens, ["--save-hf", bare + "-x",
                                                              "--hf-shard-size", "5XB"]),
             "--hf-shard-size: '5XB' is not a size"),
            ("--save-hf of an existing folder", train_argv(base, tokens, ["--save-hf", bare]),
             "exists"),
            ("--allow-missing without weights",
             train_argv(bare, tokens, ["--allow-missing", "lm_head.weight"]),
             "--allow-missing applies to --model hf:DIR folders with weights")]:
        t = megac(args, argv)
        check(t.returncode != 0 and expect in t.stderr,
              f"{what}: refused ({t.stderr.strip().splitlines()[-1] if t.stderr.strip() else ''})")


def check_export(args, check, name, ckpt, saved):
    """`megac export --load CKPT --hf OUT` of the run's checkpoint writes the folder --save-hf
    wrote at the end of the same run: the same files, the same tensors byte for byte (the
    shards' __metadata__ says which command wrote them)."""
    out = os.path.join(args.workdir, name + "-exported")
    e = megac(args, ["export", "--load", ckpt, "--hf", out, "--hf-shard-size", "30KB"])
    if e.returncode != 0:
        check(False, f"{name}: megac export --hf: {e.stderr.strip()[-400:]}")
        return
    files = sorted(os.listdir(out))
    same = files == sorted(os.listdir(saved)) and all(
        read_raw(os.path.join(out, f)) == read_raw(os.path.join(saved, f))
        if f.endswith(".safetensors") else
        open(os.path.join(out, f), "rb").read() == open(os.path.join(saved, f), "rb").read()
        for f in files)
    check(same, f"{name}: megac export --load CKPT --hf writes the --save-hf folder ({len(files)} "
          "files, tensors byte for byte)" + ("" if same else f": {files}"))


def check_sharded_save(args, check, name, folder, tokens, extra):
    """--save-hf under tp 2 x dp 2 (mixtral: ep 2 too), where rank 0 gathers each output shard's
    parameters from the ranks that own them, one shard at a time: the folder's tensors are
    exactly the whole parameters --save-weights gathers in the same run (F32 folders)."""
    if shutil.which("mpirun") is None:
        numerics.skip(f"{name}: --save-hf under tp 2 x dp 2: mpirun is not on PATH")
        return
    out = os.path.join(args.workdir, name + "-saved-tp2dp2")
    weights = out + ".safetensors"
    layout = ["--ranks", "4", "--tp", "2", "--dp", "2"] + (["--ep", "2"] if name == "mixtral"
                                                          else [])
    argv = train_argv(folder, tokens, ["--save-hf", out, "--hf-shard-size", "30KB",
                                       "--save-weights", weights, *layout, *extra])
    argv[argv.index("--micro-batch") + 1] = "2"  # global batch 4 = 2 x dp 2
    t = megac(args, argv, timeout=300)
    if t.returncode != 0:
        check(False, f"{name}: --save-hf under tp 2 x dp 2: {t.stderr.strip()[-400:]}")
        return
    saved = {}
    for f in os.listdir(out):
        if f.endswith(".safetensors"):
            saved.update({k.removeprefix("model."): v
                          for k, v in read_safetensors(os.path.join(out, f)).items()})
    whole = read_safetensors(weights)
    import numpy as np
    same = set(saved) == set(whole) and all(np.array_equal(saved[k], whole[k]) for k in whole)
    files = len([f for f in os.listdir(out) if f.endswith(".safetensors")])
    check(same, f"{name}: --save-hf under {' '.join(layout[2:])} ({files} shards gathered one "
          "at a time) holds exactly the parameters --save-weights gathered whole")


def generated_tokens(args, folder, prompt, new_tokens, extra=()):
    """`megac generate --model hf:FOLDER` of `prompt` (byte tokenizer): (the new token ids or
    None, stderr)."""
    g = subprocess.run([args.megac, "generate", "--model", f"hf:{folder}", "--prompt", prompt,
                        "--max-tokens", str(new_tokens), *extra], capture_output=True,
                       timeout=120)
    err = g.stderr.decode(errors="replace").strip()
    out = list(g.stdout)
    if g.returncode != 0 or out[:len(prompt)] != list(prompt.encode()):
        return None, err
    return out[len(prompt):-1], err


def check_generate(args, check, name, folder, model, new_tokens=12, slide=False):
    """`megac generate --model hf:DIR` (byte tokenizer: the prompt's ASCII bytes are its ids,
    all below the vocab of 128) against transformers' greedy generate of the same folder from
    the same ids, its end-of-sequence id unset so both make every token, with the KV cache (the
    default: a forward over the prompt, then one decode step per token over the cached keys and
    values) and with --no-kv-cache (the forward over the window per token). Greedy picks the
    argmax: the logits agree to ~1e-6 of the largest (the forward bound; transformers' KV-cached
    steps, and megac's, differ from a full forward by as little), so the tokens can differ only
    where the top two logits are closer than that; the message reports the smallest top-two gap
    on the path (relative to the largest logit) to show that they are not. With `slide`, also
    a window of 10 (seq=10: 6 prompt tokens, then the window slides after 4 new ones, where the
    cache gives way to the forward) makes the same tokens with and without the cache."""
    import torch
    prompt = "megac!"
    got, err = generated_tokens(args, folder, prompt, new_tokens)
    if got is None:
        check(False, f"{name}: megac generate --model hf:DIR: {err[-400:]}")
        return
    plain, plain_err = generated_tokens(args, folder, prompt, new_tokens, ["--no-kv-cache"])
    ids = torch.tensor([list(prompt.encode())])
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        r = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                           output_scores=True, return_dict_in_generate=True)
    want = r.sequences[0, ids.shape[1]:].tolist()
    gap = min(float((s[0].topk(2).values[0] - s[0].topk(2).values[1]) / s[0].abs().max())
              for s in r.scores)
    cached = "ms/token" in err and ", KV cache)" in err
    ok = got == want and plain == want and cached and ", no KV cache)" in plain_err
    check(ok, f"{name}: megac generate --model hf:DIR, {new_tokens} greedy tokens with the KV "
          f"cache and with --no-kv-cache equal transformers' generate (smallest top-two gap "
          f"{gap:.1e} of the largest logit)"
          + ("" if ok else f": {got} (KV cache: {cached}) and {plain} vs {want}"))
    if slide:
        a, err_a = generated_tokens(args, folder + ",seq=10", prompt, new_tokens)
        b, err_b = generated_tokens(args, folder + ",seq=10", prompt, new_tokens,
                                    ["--no-kv-cache"])
        check(a is not None and a == b,
              f"{name}: seq=10 (the window slides after 4 new tokens), {new_tokens} greedy "
              "tokens with the KV cache equal --no-kv-cache's"
              + ("" if a is not None and a == b else f": {a} vs {b} ({err_a[-300:]})"))


def write_bf16_shards(folder, shapes, shard_bytes):
    """Random normal(0, 0.02) bf16 tensors as save_pretrained's sharded layout (index + shards),
    made one tensor at a time (the writer never holds the model)."""
    import numpy as np
    rng = np.random.default_rng(0)
    groups, size = [[]], 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 2
        if size and size + n > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    weight_map = {}
    for i, names in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name in names:
            n = int(np.prod(shapes[name])) * 2
            header[name] = {"dtype": "BF16", "shape": list(shapes[name]),
                            "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(folder, file), "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for name in names:
                x = rng.standard_normal(shapes[name], dtype=np.float32) * 0.02
                f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(int(np.prod(s)) * 2 for s in shapes.values())},
                   "weight_map": weight_map}, f)


def measure(args):
    """Peak resident memory (VmHWM, rank 0's, from --log-json's mem_rss_peak_bytes) of one
    training step under tp 2 of a llama in sharded bf16 safetensors, against the same run from
    the bare config.json (the zoo's initialisation): what reading the weights adds to a rank's
    own state (fp32 parameters, gradients and Adam moments: 16 bytes per parameter of its
    shard, plus activations)."""
    import numpy as np
    import transformers as T
    hidden, ffn, layers = (int(x) for x in args.measure.split(","))
    vocab, heads = 32000, hidden // 64
    config = T.LlamaConfig(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=heads // 4,
                           vocab_size=vocab, torch_dtype="bfloat16")
    kv = hidden // 4
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
              "lm_head.weight": (vocab, hidden)}
    for i in range(layers):
        L = f"model.layers.{i}."
        shapes.update({L + "input_layernorm.weight": (hidden,),
                       L + "post_attention_layernorm.weight": (hidden,),
                       L + "self_attn.q_proj.weight": (hidden, hidden),
                       L + "self_attn.k_proj.weight": (kv, hidden),
                       L + "self_attn.v_proj.weight": (kv, hidden),
                       L + "self_attn.o_proj.weight": (hidden, hidden),
                       L + "mlp.gate_proj.weight": (ffn, hidden),
                       L + "mlp.up_proj.weight": (ffn, hidden),
                       L + "mlp.down_proj.weight": (hidden, ffn)})
    params = sum(int(np.prod(s)) for s in shapes.values())
    bare, full = os.path.join(args.workdir, "bare"), os.path.join(args.workdir, "full")
    config.save_pretrained(bare)
    config.save_pretrained(full)
    write_bf16_shards(full, shapes, 500_000_000)
    tokens = os.path.join(args.workdir, "tokens.npy")
    np.save(tokens, np.random.RandomState(0).randint(0, vocab, size=(2, 17)).astype(np.int64))
    peaks = {}
    for name, folder in (("bare config.json", bare), ("sharded bf16 weights", full)):
        log = os.path.join(args.workdir, name.split()[0] + ".jsonl")
        argv = ["train", "--model", f"hf:{folder}", "--data", tokens, "--steps", "1",
                "--global-batch", "1", "--micro-batch", "1", "--lr", "1e-4", "--ranks", "2",
                "--tp", "2", "--log-json", log]
        t = megac(args, argv, timeout=1800)
        if t.returncode != 0:
            print(f"{name}: megac train failed: {t.stderr.strip()[-600:]}")
            return 1
        peaks[name] = json.loads(open(log).read().splitlines()[-1])["mem_rss_peak_bytes"]
    shard = params // 2  # tp 2: every matrix and the embedding/head are split, norms are not
    state = 16 * shard
    file_shard = 2 * shard
    print(f"llama hidden {hidden}, ffn {ffn}, layers {layers}, vocab {vocab}: {params:,} "
          f"parameters, {2 * params / 1e9:.2f} GB of bf16 in "
          f"{len([f for f in os.listdir(full) if f.endswith('.safetensors')])} shards; tp 2")
    for name, peak in peaks.items():
        print(f"  {name}: rank 0 VmHWM {peak / 1e9:.2f} GB")
    w = peaks["sharded bf16 weights"]
    print(f"  with weights / bare: {w / peaks['bare config.json']:.3f}; with weights / (its "
          f"bf16 shard {file_shard / 1e9:.2f} GB + fp32 state 16 B x {shard:,} = "
          f"{state / 1e9:.2f} GB): {w / (file_shard + state):.3f}")
    return 0


def bf16_llama(args, hidden, ffn, layers):
    """The llama of --measure as sharded bf16 files in WORKDIR/full (made once) and token rows;
    returns (folder, tokens file, vocab)."""
    import numpy as np
    import transformers as T
    vocab, heads, kv = 32000, hidden // 64, hidden // 4
    full = os.path.join(args.workdir, "full")
    if not os.path.exists(os.path.join(full, "model.safetensors.index.json")):
        config = T.LlamaConfig(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                               num_attention_heads=heads, num_key_value_heads=heads // 4,
                               vocab_size=vocab, torch_dtype="bfloat16")
        config.save_pretrained(full)
        shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
                  "lm_head.weight": (vocab, hidden)}
        for i in range(layers):
            L = f"model.layers.{i}."
            for n, sh in (("input_layernorm", (hidden,)), ("post_attention_layernorm", (hidden,)),
                          ("self_attn.q_proj", (hidden, hidden)), ("self_attn.k_proj", (kv, hidden)),
                          ("self_attn.v_proj", (kv, hidden)), ("self_attn.o_proj", (hidden, hidden)),
                          ("mlp.gate_proj", (ffn, hidden)), ("mlp.up_proj", (ffn, hidden)),
                          ("mlp.down_proj", (hidden, ffn))):
                shapes[L + n + ".weight"] = sh
        write_bf16_shards(full, shapes, 500_000_000)
    tokens = os.path.join(args.workdir, "tokens.npy")
    np.save(tokens, np.random.RandomState(0).randint(0, vocab, size=(2, 17)).astype(np.int64))
    return full, tokens, vocab


def measure_save(args):
    """Peak resident memory of `megac train --save-hf` under tp 2 (--measure-save H,F,L,SHARD):
    the llama of --measure in sharded bf16 files, one step, then saved in shards of SHARD bytes
    (its config says bfloat16, so the folder is bf16). The whole run's peak is the largest of
    its processes' VmHWM (wait4's ru_maxrss of the launcher, which takes the maximum over the
    ranks it waited for: rank 0, which gathers and writes, is the largest); the step's peak is
    --log-json's mem_rss_peak_bytes (rank 0, before the save). SHARD larger than the model is
    one shard: rank 0 gathers the whole model at once, as --save-hf did before it saved shard by
    shard."""
    import resource
    hidden, ffn, layers, shard = (int(x) for x in args.measure_save.split(","))
    full, tokens, _ = bf16_llama(args, hidden, ffn, layers)
    out = os.path.join(args.workdir, f"saved-{shard}")
    shutil.rmtree(out, ignore_errors=True)
    log = os.path.join(args.workdir, f"save-{shard}.jsonl")
    t = megac(args, ["train", "--model", f"hf:{full}", "--data", tokens, "--steps", "1",
                     "--global-batch", "1", "--micro-batch", "1", "--lr", "1e-4", "--ranks", "2",
                     "--tp", "2", "--log-json", log, "--save-hf", out, "--hf-shard-size",
                     str(shard)], timeout=1800)
    if t.returncode != 0:
        print(f"megac train --save-hf failed: {t.stderr.strip()[-600:]}")
        return 1
    whole = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    step = json.loads(open(log).read().splitlines()[-1])["mem_rss_peak_bytes"]
    files = [f for f in os.listdir(out) if f.endswith(".safetensors")]
    print(f"--hf-shard-size {shard}: {len(files)} bf16 file(s); step peak (rank 0) "
          f"{step / 1e9:.2f} GB, whole run with the save {whole / 1e9:.2f} GB "
          f"(+{(whole - step) / 1e9:.2f} GB)")
    return 0


def measure_export(args):
    """Peak resident memory of `megac export --load CKPT --hf OUT` (--measure-export
    H,F,L,SHARD): the llama of --measure in sharded bf16 files trained one step under tp 2 with
    --save CKPT (made once, kept in the work folder), then exported in shards of SHARD bytes.
    The export's peak is its VmHWM (a wrapper process's RUSAGE_CHILDREN ru_maxrss, which counts
    the export alone), against the checkpoint's parameters in fp32 (what reading the whole
    checkpoint holds) and one output shard."""
    hidden, ffn, layers, shard = (int(x) for x in args.measure_export.split(","))
    full = os.path.join(args.workdir, "full")
    ckpt = os.path.join(args.workdir, "export-ckpt")
    if not os.path.exists(os.path.join(ckpt, "latest")):
        full, tokens, _ = bf16_llama(args, hidden, ffn, layers)
        t = megac(args, ["train", "--model", f"hf:{full}", "--data", tokens, "--steps", "1",
                         "--global-batch", "1", "--micro-batch", "1", "--lr", "1e-4", "--ranks",
                         "2", "--tp", "2", "--save", ckpt], timeout=1800)
        if t.returncode != 0:
            print(f"megac train --save failed: {t.stderr.strip()[-600:]}")
            return 1
    out = os.path.join(args.workdir, f"exported-{shard}")
    shutil.rmtree(out, ignore_errors=True)
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); "
               "sys.exit(r.returncode)")
    t = subprocess.run([sys.executable, "-c", wrapper, args.megac, "export", "--load", ckpt,
                        "--hf", out, "--hf-shard-size", str(shard)], capture_output=True,
                       text=True, timeout=1800)
    if t.returncode != 0:
        print(f"megac export --hf failed: {t.stderr.strip()[-600:]}")
        return 1
    peak = int(t.stdout.strip().splitlines()[-1])
    index = json.load(open(os.path.join(full, "model.safetensors.index.json")))
    params = index["metadata"]["total_size"] // 2
    files = [f for f in os.listdir(out) if f.endswith(".safetensors")]
    print(f"megac export --hf-shard-size {shard}: {params:,} parameters into {len(files)} bf16 "
          f"file(s); VmHWM {peak / 1e9:.2f} GB (the parameters in fp32: "
          f"{4 * params / 1e9:.2f} GB; one output shard {shard / 1e9:.2f} GB)")
    return 0


def main():
    args = venv_test_args(lambda p: (p.add_argument("--measure", default=None),
                                     p.add_argument("--measure-save", default=None),
                                     p.add_argument("--measure-export", default=None)),
                          fresh_workdir="--measure-save" not in sys.argv
                          and "--measure-export" not in sys.argv)
    if args.measure:
        return measure(args)
    if args.measure_save:
        os.makedirs(args.workdir, exist_ok=True)
        return measure_save(args)
    if args.measure_export:
        os.makedirs(args.workdir, exist_ok=True)
        return measure_export(args)
    import numpy as np
    import torch
    nemotron_shim()
    rows = np.random.RandomState(0).randint(0, VOCAB, size=(12, SEQ + 1)).astype(np.int64)
    tokens = os.path.join(args.workdir, "tokens.npy")
    np.save(tokens, rows)
    ids = np.random.RandomState(1).randint(0, VOCAB, size=(1, SEQ)).astype(np.int64)
    ids_path = os.path.join(args.workdir, "ids.npy")
    np.save(ids_path, ids)
    check = Checks()
    for name, cls, config, save_kwargs, dtype in cases():
        folder = os.path.join(args.workdir, name)
        model = make_folder(folder, cls, config, save_kwargs, dtype)
        files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
        what = f"{len(files)} {str(dtype).removeprefix('torch.')} file(s)"

        got, err = megac_logits(args, folder, ids_path, os.path.join(args.workdir, name + "-run"))
        if got is None:
            check(False, f"{name}: megac run: {err}")
            continue
        ok, said = compare_logits(got, logits_of(model, ids))
        check(ok, f"{name} ({what}): forward logits from hf:DIR against transformers: {said}")

        problems = training_case(
            args, name, folder,
            lambda: cls.from_pretrained(folder, torch_dtype=torch.float32), rows, tokens)
        check(not problems, f"{name}: 3 steps from the folder's weights against PyTorch and "
              "tp 2 x dp 2 against one rank" + "".join("\n         " + p for p in problems))

        out = os.path.join(args.workdir, name + "-saved")
        weights = os.path.join(args.workdir, name + "-saved.safetensors")
        ckpt = os.path.join(args.workdir, name + "-ckpt")
        extra = ["--moe-aux-loss-coeff", "0"] if name in ("mixtral", "qwen2_moe") else []
        t = megac(args, train_argv(folder, tokens, ["--save-hf", out, "--hf-shard-size", "30KB",
                                                    "--save-weights", weights, "--save", ckpt,
                                                    *extra]))
        if t.returncode != 0:
            check(False, f"{name}: megac train --save-hf: {t.stderr.strip()[-400:]}")
            continue
        saved = sorted(os.listdir(out))
        reloaded = cls.from_pretrained(out, torch_dtype=torch.float32).eval()
        state = {k.removeprefix("model."): v.numpy() for k, v in reloaded.state_dict().items()}
        if config.tie_word_embeddings:
            state.pop("lm_head.weight")
        # Saved in the config's torch_dtype: a bf16 folder holds the trained fp32 parameters
        # rounded to nearest even, as torch's .to(torch.bfloat16) rounds them.
        trained = {k: v if dtype == torch.float32 else
                   torch.from_numpy(v.copy()).to(dtype).float().numpy()
                   for k, v in read_safetensors(weights).items()}
        want_dtype = {torch.float32: "F32", torch.bfloat16: "BF16"}[dtype]
        dtypes = {d for f in saved if f.endswith(".safetensors")
                  for d, _, _ in read_raw(os.path.join(out, f)).values()}
        same = set(state) == set(trained) and all(
            np.array_equal(state[k], trained[k]) for k in trained)
        check(same and dtypes == {want_dtype} and "config.json" in saved
              and "tokenizer_config.json" in saved and "model.safetensors.index.json" in saved,
              f"{name}: --save-hf folder ({len(saved)} files, {sorted(dtypes)}) reloads in "
              "transformers with exactly the trained parameters" + ("" if same else
                                                 f"; names differ: {sorted(set(state) ^ set(trained))[:4]}"))
        got, err = megac_logits(args, out, ids_path, os.path.join(args.workdir, name + "-run2"))
        if got is None:
            check(False, f"{name}: megac run of the saved folder: {err}")
            continue
        ok, said = compare_logits(got, logits_of(reloaded, ids))
        check(ok, f"{name}: saved folder's logits, transformers against megac: {said}")
        check_export(args, check, name, ckpt, out)
        if name in ("llama", "mixtral"):
            check_sharded_save(args, check, name, folder, tokens, extra)
        if name in ("llama", "qwen2", "mixtral", "qwen2_moe", "nemotron"):
            check_generate(args, check, name, folder, model, slide=name == "llama")

        if name == "llama":
            bad_inputs(args, check, folder, cls, config, tokens)
    return numerics.exit_code(check.failures)


if __name__ == "__main__":
    sys.exit(main())
