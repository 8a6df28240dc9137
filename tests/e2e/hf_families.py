"""The transformers families the HF tests run (hf_models_test.py forward, hf_train_test.py
training): tiny random-weight configs (2 layers, hidden 64, 4 heads, vocab 128, dropout 0), one
exporter with a cache keyed by a hash of everything that shapes the file, and token data that
never holds a model's pad_token_id. Also what the `--model hf:DIR` tests share
(hf_config_models_test.py, hf_weights_test.py, hf_gpt2_test.py): the megac runner, the
ok/FAIL checker, the Nemotron shim and the 3-step training case against PyTorch.

Why no pad tokens: an embedding built with `padding_idx` (OPT, BLOOM-style configs, RoBERTa,
BERT, ...) never receives a gradient for that row in PyTorch, but torch.onnx drops the
`padding_idx` property, so megac (like any ONNX consumer) trains that row; the models only agree
when no input is the pad id. RoBERTa also derives position ids from `input_ids != pad`.

Mistral is exported with its sliding window (8 < the 16-token sequence). torch 1.13 has no ONNX
symbolic for `aten::bitwise_or`, which transformers uses on the boolean window mask; the exporter
registers one that emits ONNX `Or` (exact on booleans; ONNX's BitwiseOr needs opset 18).
"""
import hashlib
import json
import os
import shutil
import subprocess

VOCAB, HIDDEN, HEADS, LAYERS, SEQ = 128, 64, 4, 2, 16

# Causal LMs train (hf_train_test.py); masked LMs run forward only.
CAUSAL = ["gpt2", "gptj", "gpt_neox", "opt", "bloom", "falcon", "llama", "mistral", "qwen2",
          "gemma", "phi", "stablelm"]
MASKED = ["bert", "roberta", "distilbert", "electra"]
FAMILIES = CAUSAL + MASKED


def config(name):
    """(model class, config) of family `name`."""
    import transformers as T
    common = dict(vocab_size=VOCAB, use_cache=False)
    llama_like = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                      num_key_value_heads=2, intermediate_size=128,
                      max_position_embeddings=2 * SEQ, **common)
    bert_like = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                     intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=2 * SEQ + 2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    table = {
        "gpt2": (T.GPT2LMHeadModel, T.GPT2Config(
            n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_positions=2 * SEQ, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, **common)),
        # Interleaved rotary (rotate_every_two) on the first 8 of 16 head dims.
        "gptj": (T.GPTJForCausalLM, T.GPTJConfig(
            n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_positions=2 * SEQ, rotary_dim=8,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common)),
        # Partial rotary (a quarter of the head dims), fused [heads, 3, d] q/k/v, parallel MLP.
        "gpt_neox": (T.GPTNeoXForCausalLM, T.GPTNeoXConfig(
            num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
            intermediate_size=128, rotary_pct=0.25, max_position_embeddings=2 * SEQ,
            hidden_dropout=0.0, attention_dropout=0.0, **common)),
        # Learned positions from the attention mask's cumulative sum (offset 2).
        "opt": (T.OPTForCausalLM, T.OPTConfig(
            num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_dim=128,
            max_position_embeddings=2 * SEQ, word_embed_proj_dim=HIDDEN, dropout=0.0,
            attention_dropout=0.0, **common)),
        # ALiBi attention bias (from the mask's cumulative sum), embedding layer norm.
        "bloom": (T.BloomForCausalLM, T.BloomConfig(
            n_layer=LAYERS, hidden_size=HIDDEN, n_head=HEADS, hidden_dropout=0.0,
            attention_dropout=0.0, **common)),
        # Multi-query attention: q/k/v picked out of one fused projection.
        "falcon": (T.FalconForCausalLM, T.FalconConfig(
            num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
            hidden_dropout=0.0, attention_dropout=0.0, **common)),
        "llama": (T.LlamaForCausalLM, T.LlamaConfig(**llama_like)),
        "mistral": (T.MistralForCausalLM, T.MistralConfig(sliding_window=8, **llama_like)),
        # Mixture of experts: 4 SwiGLU experts of 128, top 2 (hf_mixtral_onnx_test.py, not in
        # CAUSAL: its export's per-expert NonZero loop is raised to megac's MoE ops).
        "mixtral": (T.MixtralForCausalLM, T.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, **llama_like)),
        "qwen2": (T.Qwen2ForCausalLM, T.Qwen2Config(**llama_like)),
        # Mixture of experts with a sigmoid-gated shared expert and top-k probabilities not
        # renormalised (hf_mixtral_onnx_test.py, not in CAUSAL).
        "qwen2_moe": (T.Qwen2MoeForCausalLM, T.Qwen2MoeConfig(
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=96,
            shared_expert_intermediate_size=128, norm_topk_prob=False, **llama_like)),
        "gemma": (T.GemmaForCausalLM, T.GemmaConfig(
            head_dim=HIDDEN // HEADS, hidden_activation="gelu_pytorch_tanh", **llama_like)),
        "phi": (T.PhiForCausalLM, T.PhiConfig(
            num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
            intermediate_size=128, partial_rotary_factor=0.5, max_position_embeddings=2 * SEQ,
            resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, **common)),
        "stablelm": (T.StableLmForCausalLM, T.StableLmConfig(
            partial_rotary_factor=0.25, **llama_like)),
        "bert": (T.BertForMaskedLM, T.BertConfig(**bert_like)),
        "roberta": (T.RobertaForMaskedLM, T.RobertaConfig(**bert_like)),
        "distilbert": (T.DistilBertForMaskedLM, T.DistilBertConfig(
            n_layers=LAYERS, dim=HIDDEN, n_heads=HEADS, hidden_dim=128, vocab_size=VOCAB,
            max_position_embeddings=2 * SEQ, dropout=0.0, attention_dropout=0.0)),
        "electra": (T.ElectraForMaskedLM, T.ElectraConfig(embedding_size=32, **bert_like)),
    }
    return table[name]


def logits_module(model):
    """transformers' `model` as a module from input_ids to logits (what train_test.py and the
    exporter take)."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = model

        def forward(self, input_ids):
            return self.hf(input_ids=input_ids, return_dict=False)[0]

    return Logits()


def build(name, seed):
    """Family `name` with seeded random weights, as a module from input_ids to logits."""
    import torch
    cls, cfg = config(name)
    torch.manual_seed(seed)
    return logits_module(cls(cfg)), cfg


def pad_free(ids, cfg):
    """`ids` (numpy ints) with every pad_token_id replaced by the next id (see the docstring)."""
    pad = getattr(cfg, "pad_token_id", None)
    if pad is not None:
        ids = ids.copy()
        ids[ids == pad] = (pad + 1) % VOCAB
    return ids


def _register_bitwise_or():
    from torch.onnx import register_custom_op_symbolic

    def bitwise_or(g, a, b):  # boolean masks only (transformers' sliding window)
        return g.op("Or", a, b)

    register_custom_op_symbolic("aten::bitwise_or", bitwise_or, 17)


def export(name, model, cfg, cache_dir, training, batch=2, opset=17, fold=False):
    """The ONNX file of `model` (opset 17 unless given; constant folding only with `fold`, which
    stores nn.Linear weights pre-transposed under names like onnx::MatMul_123), exported once
    per hash of the family, its config, the weights' seed state, the mode, the opset, folding
    and the versions; returns its path."""
    import numpy as np
    import torch
    import transformers
    key = json.dumps({"family": name, "config": cfg.to_dict(), "training": training,
                      "dynamic_batch": training,
                      "batch": batch, "seq": SEQ, "torch": torch.__version__,
                      "transformers": transformers.__version__,
                      "weights": float(sum(p.double().sum() for p in model.parameters())),
                      **({} if opset == 17 else {"opset": opset}),
                      **({"fold": True} if fold else {})},
                     sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    os.makedirs(cache_dir, exist_ok=True)
    tag = (name if opset == 17 else f"{name}-opset{opset}") + ("-folded" if fold else "")
    path = os.path.join(cache_dir, f"{tag}-{digest}.onnx")
    if os.path.exists(path):
        return path
    _register_bitwise_or()
    ids = torch.from_numpy(pad_free(np.random.default_rng(0).integers(0, VOCAB, (batch, SEQ)),
                                    cfg))
    kwargs = dict(input_names=["input_ids"], output_names=["logits"], opset_version=opset,
                  do_constant_folding=fold)
    if training:
        # A dynamic batch, as users export for training: GPT-J's repeat_interleave then becomes
        # SplitToSequence + Loop + ConcatFromSequence, which megac unrolls at import.
        kwargs["training"] = torch.onnx.TrainingMode.TRAINING
        kwargs["dynamic_axes"] = {"input_ids": {0: "batch"}}
    tmp = path + ".tmp"
    torch.onnx.export(model.eval() if not training else model, (ids,), tmp, **kwargs)
    os.replace(tmp, path)
    return path


class Checks:
    """`check(ok, message)` prints an ok/FAIL line and keeps the failures for the exit code."""

    def __init__(self):
        self.failures = []

    def __call__(self, ok, message):
        print(("  ok   " if ok else "  FAIL ") + message, flush=True)
        if not ok:
            self.failures.append(message)


def megac(args, argv, timeout=120):
    """`args.megac` with `argv` (a train gets the tests' thread count), output captured."""
    import numerics
    extra = numerics.threads_args() if argv[0] == "train" else []
    return subprocess.run([args.megac, *argv, *extra], capture_output=True, text=True,
                          timeout=timeout)


def nemotron_shim():
    """NemotronLayerNorm1P built on torch 1.13's nn.LayerNorm (elementwise affine, with bias):
    transformers 4.44's passes `bias` to nn.LayerNorm, which takes it from torch 2.1 on."""
    import torch.nn as nn
    from transformers.models.nemotron import modeling_nemotron as mn

    def init(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
             dtype=None):
        nn.LayerNorm.__init__(self, normalized_shape, eps, elementwise_affine, device=device,
                              dtype=dtype)
    mn.NemotronLayerNorm1P.__init__ = init


def training_case(args, name, folder, make_model, rows, tokens, to_hf=None):
    """3 AdamW steps of `megac train --model hf:FOLDER` (data `tokens`, whose `rows` PyTorch
    trains on) against PyTorch training `make_model()` (a fresh transformers model holding the
    weights megac starts from, in fp32), then tp 2 x dp 2 against one rank in fp64; returns the
    problems. Every loss and grad norm within 1e-4 relative, every final parameter within
    1e-4 ||p|| + 1e-6 sqrt(n) (train_test.py has the error model of these bounds). megac's final
    parameters are compared under transformers' names without "model." or, with `to_hf`, as
    to_hf maps them (GPT-2's layouts). MoE models train with the aux loss off, as transformers
    trains without output_router_logits.

    Adam eps 1e-6, not 1e-8 (as hf_train_test.py): the unrotated half of Nemotron's key bias
    has an exactly zero gradient (softmax ignores a per-row constant), whose roundoff Adam with
    eps 1e-8 turns into steps of up to lr that differ between any two implementations."""
    import numerics
    import train_test as tt
    from safetensors_np import read_safetensors
    c = dict(steps=3, global_batch=4, micro_batch=2, torch_micro_batch=2, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-6,
             wd=0.1, clip=1.0, precision="fp32")
    model = make_model().float().train(False)
    moe = model.config.model_type in ("mixtral", "qwen2_moe")
    extra = ["--moe-aux-loss-coeff", "0"] if moe else []
    model_args = ["--model", f"hf:{folder}"]
    one = os.path.join(args.workdir, name + "-train")
    os.makedirs(one, exist_ok=True)
    records, final, _ = tt.megac_train(args.megac, model_args, tokens, one, c, extra)
    losses, norms = tt.torch_train(logits_module(model), rows, c)
    problems = tt.check_records(records, c, losses, norms, 1e-4, 1e-4)
    got = read_safetensors(final)
    if to_hf:
        got, want = to_hf(got), {n: p.detach().numpy() for n, p in model.named_parameters()}
    else:
        want = {n.removeprefix("model."): p.detach().numpy() for n, p in model.named_parameters()}
    p, worst, _ = numerics.compare_tensors(got, want, 1e-4, 1e-6, "final parameter")
    print(f"    {name}: 3 steps against PyTorch, final parameters worst ||diff|| / bound "
          f"{worst:.3f}")
    problems += p
    if shutil.which("mpirun") is None:
        numerics.skip(f"{name}: tp 2 x dp 2: mpirun is not on PATH")
        return problems
    c4 = dict(c, micro_batch=1)  # per data-parallel rank: the same 2-row micro-batches
    problems += numerics.layout_check(args.megac, model_args, tokens,
                                      os.path.join(args.workdir, name + "-tp2-dp2"), c, c4,
                                      ["--ranks", "4", "--tp", "2", "--dp", "2"],
                                      "4 ranks (tp 2, pp 1, dp 2)", extra=extra)
    return problems
