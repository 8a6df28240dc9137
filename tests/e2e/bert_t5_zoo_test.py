"""The zoo's BERT (`--model bert:...`) and T5 (`--model t5:...`) against transformers'
BertForMaskedLM and T5ForConditionalGeneration loaded with megac's initial weights, in fp64.

megac's seeded initial weights (a one-step `megac train --precision fp64` run at lr 0, so AdamW
changes nothing) are loaded into the transformers model of the matching config; then

  - forward: `megac run` logits (BERT with a padding attention_mask, T5 with input_ids and
    decoder_input_ids; the spec with dtype=f64) against the transformers model's (which also
    shows that `megac run` initializes as `megac train` does);
  - step 1: megac's logged loss against the transformers model's own loss (BertForMaskedLM's
    masked-LM cross-entropy over megac's seeded masks; T5ForConditionalGeneration's
    cross-entropy of decoder_input_ids = row[E:E+D] predicting labels = row[E+1:E+D+1]) over the
    same global batch of 4 rows (megac runs it as 2 micro-batches of 2), and every step-1
    gradient (--save-grads) against the transformers parameter's .grad;
  - the comparisons can fail: each is repeated against deliberately wrong references (BERT with
    LayerNorm epsilon 1e-5 instead of 1e-12, and with transformers' default padding row; T5 with
    RMSNorm epsilon 1e-5 instead of 1e-6, and with relative_attention_max_distance 64 instead
    of 128), each of which must fail at least one comparison.
    `--break NAME` runs the whole test against one wrong reference instead (it must then fail).

Two configs per model: BERT tied head with erf GELU and an untied head with tanh GELU (hidden
48, 6 heads); T5 v1.0 with a tied head (encoder seq 20, decoder seq 24: both stacks reach the
logarithmic relative-position buckets, bidirectional from distance 8 and causal from 16) and an
untied head with 1 encoder and 3 decoder layers.

Architecture mapping (megac frontends/models/Bert.cpp, T5.cpp; names in megac_to_hf_*):
  BERT: megac has no token-type embedding: transformers' is configured with type_vocab_size=1
    and its one row set to zeros (adding 0.0 is exact; its gradient is not compared). No pooler
    (BertForMaskedLM has none), no next-sentence head. No padding row: transformers' word
    embedding is nn.Embedding(padding_idx=pad_token_id), whose row pad_token_id (default 0) gets
    no gradient, while megac's wte[0] gets the gradient of every id-0 token (megac pads with
    the attention mask alone): configured away with pad_token_id=None (found by this test;
    every step-1 row holds an id 0 so the wrong reference "bert-pad" is rejected by the wte
    gradient; forward and loss do not see it). Attention padding mask: megac adds
    -10000, transformers finfo(float64).min; both make exp() underflow to exactly 0 in fp64, so
    this difference is invisible (the forward case uses padding to show it). MLM head
    transform (dense, GELU, LayerNorm) and the decoder with its own bias match
    BertLMPredictionHead; the decoder weight is wte when tied (tie_word_embeddings).
    attn_implementation "eager", dropout 0, eval mode.
  T5: v1.0 (feed_forward_proj "relu", bias-free, unscaled attention, 32 buckets, max distance
    128, RMSNorm epsilon 1e-6), one relative-bias table per stack as transformers' first block
    of each stack holds it; a tied head scales by d_model^-0.5 (transformers does too).
    transformers 4.44's T5LayerNorm computes the variance in float32 and T5Attention its softmax
    in float32 (`.to(torch.float32)`, `.float()`: meant for half precision, they round an fp64
    model's values to fp32). To compare near-exactly, the transformers model runs with those two
    casts made identities for float64 tensors (fp64_kept: Tensor.float()/.to(float32) return
    the fp64 tensor itself; counted and printed), which changes nothing else; the result of the
    unmodified transformers code is printed next to it (fp32-level differences, not checked).

Tolerances, fp64 (unit roundoff u = 1.1e-16). megac and PyTorch sum in different orders; a
length-k dot product's error is <= k u sum|a_i b_i| (worst case; typically sqrt(k) u), k <= 128
here, through at most 4 layers whose LayerNorm/RMSNorm keep relative errors relative, so the
expected relative error of logits, loss and gradients is ~1e-14 and a worst case ~1e-12:
  - logits: max|diff| <= 1e-10 max|logit| (1e6 u, ~1e4 above the expected error);
  - loss: |diff| <= 1e-10 |loss|;
  - each gradient: ||diff|| <= 1e-9 ||g_ref|| + 1e-12 sqrt(n): relative part ~1e5 above the
    expected error; the absolute part covers gradients that are 0 in exact arithmetic (BERT's
    key bias: softmax ignores a per-row shift, both sides get roundoff ~1e-21; T5's unused
    relative-bias buckets: exactly 0 on both sides), whose roundoff is <= u x (sum of |terms|
    ~1e-2 x 64 positions) ~ 1e-16 per element.
Every comparison is NaN-proof (`not diff <= bound`, finiteness of both sides checked).

usage: bert_t5_zoo_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
                           [--break bert-eps|bert-pad|t5-eps|t5-distance]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it). megac runs with --threads from MEGAC_TEST_THREADS
(numerics.threads_args, 1 by default); torch on one thread.
"""
import contextlib
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models_test import venv_test_args  # noqa: E402
from hf_mlm_test import masked_positions  # noqa: E402  (megac's seeded MLM masks)

VOCAB, ROWS, GLOBAL_BATCH, MICRO_BATCH, SEED = 128, 8, 4, 2, 0
MASK_ID = VOCAB - 1  # megac's default --mask-token-id: the vocabulary's last id

BERT_TIED = dict(name="bert-tied", arch="bert", layers=2, hidden=64, heads=4, ffn=128, seq=16,
                 tied=True, gelu="erf")
BERT_UNTIED = dict(name="bert-untied", arch="bert", layers=2, hidden=48, heads=6, ffn=96, seq=16,
                   tied=False, gelu="tanh")
T5_TIED = dict(name="t5-tied", arch="t5", enc_layers=2, dec_layers=2, hidden=64, heads=4,
               ffn=128, seq=20, dec_seq=24, tied=True)
T5_UNTIED = dict(name="t5-untied", arch="t5", enc_layers=1, dec_layers=3, hidden=48, heads=6,
                 ffn=96, seq=12, dec_seq=20, tied=False)
MODELS = [BERT_TIED, BERT_UNTIED, T5_TIED, T5_UNTIED]

# megac's constants (Bert.cpp: LayerNorm epsilon 1e-12; T5.cpp: 32 buckets, max distance 128;
# Layers.h: RMSNorm epsilon 1e-6) and the wrong references that must be rejected.
BERT_LN_EPS, T5_RMS_EPS, T5_BUCKETS, T5_MAX_DISTANCE = 1e-12, 1e-6, 32, 128
BROKEN = {
    "bert-eps": ("bert", "BertForMaskedLM with layer_norm_eps 1e-5 (megac: 1e-12)",
                 dict(layer_norm_eps=1e-5)),
    "bert-pad": ("bert", "BertForMaskedLM with its default pad_token_id 0 (padding_idx: no "
                 "gradient into wte[0]; megac has no padding row)", dict(pad_token_id=0)),
    "t5-eps": ("t5", "T5ForConditionalGeneration with layer_norm_epsilon 1e-5 (megac: 1e-6)",
               dict(layer_norm_epsilon=1e-5)),
    "t5-distance": ("t5", "T5ForConditionalGeneration with relative_attention_max_distance 64 "
                    "(megac: 128)", dict(relative_attention_max_distance=64)),
}

LOGIT_RTOL = 1e-10
LOSS_RTOL = 1e-10
GRAD_RTOL, GRAD_ATOL = 1e-9, 1e-12


def spec(m, batch=None, f64=True):
    """The zoo spec; `megac train` takes the precision from --precision fp64 (it refuses dtype=
    in a bert spec), `megac run` from dtype=f64. Both draw the same seeded values (the
    initializer rounds them to f32 and an fp64 run widens them)."""
    if m["arch"] == "bert":
        s = (f"bert:layers={m['layers']},hidden={m['hidden']},heads={m['heads']},ffn={m['ffn']},"
             f"seq={m['seq']},vocab={VOCAB},tied={int(m['tied'])},gelu={m['gelu']}")
    else:
        s = (f"t5:enc_layers={m['enc_layers']},dec_layers={m['dec_layers']},"
             f"hidden={m['hidden']},heads={m['heads']},ffn={m['ffn']},seq={m['seq']},"
             f"dec_seq={m['dec_seq']},vocab={VOCAB},tied={int(m['tied'])}")
    return s + (f",batch={batch}" if batch else "") + (",dtype=f64" if f64 else "")


def run(argv):
    """Runs megac (`argv[0]`) with the tests' thread count (numerics.threads_args)."""
    import numerics
    result = subprocess.run([*argv, *numerics.threads_args()], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    return result


# ---------------------------------------------------------------------------------------------
# transformers models holding megac's weights


def megac_to_hf_bert(m):
    """megac parameter name -> BertForMaskedLM parameter name."""
    names = {"wte": "bert.embeddings.word_embeddings.weight",
             "wpe": "bert.embeddings.position_embeddings.weight"}
    for p in ("weight", "bias"):
        names[f"ln_emb.{p}"] = f"bert.embeddings.LayerNorm.{p}"
        names[f"mlm.transform.{p}"] = f"cls.predictions.transform.dense.{p}"
        names[f"mlm.ln.{p}"] = f"cls.predictions.transform.LayerNorm.{p}"
        for l in range(m["layers"]):
            hf, mg = f"bert.encoder.layer.{l}.", f"layer{l}."
            for a, b in (("q", "query"), ("k", "key"), ("v", "value")):
                names[f"{mg}attn.{a}.{p}"] = f"{hf}attention.self.{b}.{p}"
            names[f"{mg}attn.proj.{p}"] = f"{hf}attention.output.dense.{p}"
            names[f"{mg}ln1.{p}"] = f"{hf}attention.output.LayerNorm.{p}"
            names[f"{mg}mlp.fc.{p}"] = f"{hf}intermediate.dense.{p}"
            names[f"{mg}mlp.proj.{p}"] = f"{hf}output.dense.{p}"
            names[f"{mg}ln2.{p}"] = f"{hf}output.LayerNorm.{p}"
    names["mlm.decoder.bias"] = "cls.predictions.bias"  # decoder.bias is the same Parameter
    if not m["tied"]:
        names["mlm.decoder.weight"] = "cls.predictions.decoder.weight"
    return names


def megac_to_hf_t5(m):
    """megac parameter name -> T5ForConditionalGeneration parameter name."""
    names = {"shared": "shared.weight",
             "encoder.rel_bias": "encoder.block.0.layer.0.SelfAttention.relative_attention_bias"
                                 ".weight",
             "decoder.rel_bias": "decoder.block.0.layer.0.SelfAttention.relative_attention_bias"
                                 ".weight",
             "encoder.ln_f.weight": "encoder.final_layer_norm.weight",
             "decoder.ln_f.weight": "decoder.final_layer_norm.weight"}
    attn = (("q", "q"), ("k", "k"), ("v", "v"), ("proj", "o"))
    for l in range(m["enc_layers"]):
        hf, mg = f"encoder.block.{l}.layer.", f"encoder.block{l}."
        for a, b in attn:
            names[f"{mg}attn.{a}.weight"] = f"{hf}0.SelfAttention.{b}.weight"
        names[f"{mg}ln1.weight"] = f"{hf}0.layer_norm.weight"
        names[f"{mg}mlp.fc.weight"] = f"{hf}1.DenseReluDense.wi.weight"
        names[f"{mg}mlp.proj.weight"] = f"{hf}1.DenseReluDense.wo.weight"
        names[f"{mg}ln2.weight"] = f"{hf}1.layer_norm.weight"
    for l in range(m["dec_layers"]):
        hf, mg = f"decoder.block.{l}.layer.", f"decoder.block{l}."
        for a, b in attn:
            names[f"{mg}attn.{a}.weight"] = f"{hf}0.SelfAttention.{b}.weight"
            names[f"{mg}cross.{a}.weight"] = f"{hf}1.EncDecAttention.{b}.weight"
        names[f"{mg}ln1.weight"] = f"{hf}0.layer_norm.weight"
        names[f"{mg}ln_cross.weight"] = f"{hf}1.layer_norm.weight"
        names[f"{mg}mlp.fc.weight"] = f"{hf}2.DenseReluDense.wi.weight"
        names[f"{mg}mlp.proj.weight"] = f"{hf}2.DenseReluDense.wo.weight"
        names[f"{mg}ln2.weight"] = f"{hf}2.layer_norm.weight"
    if not m["tied"]:
        names["decoder.lm_head.weight"] = "lm_head.weight"
    return names


def hf_config(m, overrides=None):
    from transformers import BertConfig, T5Config
    if m["arch"] == "bert":
        cfg = BertConfig(
            vocab_size=VOCAB, hidden_size=m["hidden"], num_hidden_layers=m["layers"],
            num_attention_heads=m["heads"], intermediate_size=m["ffn"],
            hidden_act="gelu" if m["gelu"] == "erf" else "gelu_new",
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            max_position_embeddings=m["seq"], type_vocab_size=1, layer_norm_eps=BERT_LN_EPS,
            position_embedding_type="absolute", tie_word_embeddings=m["tied"], use_cache=False,
            pad_token_id=None, attn_implementation="eager")
    else:
        cfg = T5Config(
            vocab_size=VOCAB, d_model=m["hidden"], d_kv=m["hidden"] // m["heads"],
            d_ff=m["ffn"], num_layers=m["enc_layers"], num_decoder_layers=m["dec_layers"],
            num_heads=m["heads"], relative_attention_num_buckets=T5_BUCKETS,
            relative_attention_max_distance=T5_MAX_DISTANCE, dropout_rate=0.0,
            layer_norm_epsilon=T5_RMS_EPS, feed_forward_proj="relu",
            tie_word_embeddings=m["tied"], use_cache=False, decoder_start_token_id=0)
    for k, v in (overrides or {}).items():
        if not hasattr(cfg, k):
            raise RuntimeError(f"{type(cfg).__name__} has no {k}")
        setattr(cfg, k, v)
    return cfg


def hf_model(m, weights, overrides=None):
    """(transformers model in fp64 holding megac's `weights`, megac name -> its Parameter)."""
    import torch
    from transformers import BertForMaskedLM, T5ForConditionalGeneration
    cfg = hf_config(m, overrides)
    if m["arch"] == "bert":
        hf, names = BertForMaskedLM(cfg), megac_to_hf_bert(m)
    else:
        hf, names = T5ForConditionalGeneration(cfg), megac_to_hf_t5(m)
    hf = hf.double().train(False)
    if set(names) != set(weights):
        raise RuntimeError(f"megac's {m['name']} parameters do not match the mapping: only in "
                           f"megac {sorted(set(weights) - set(names))}, only in the mapping "
                           f"{sorted(set(names) - set(weights))}")
    params = {k: hf.get_parameter(v) for k, v in names.items()}
    covered = {id(p) for p in params.values()}
    extra = {}
    if m["arch"] == "bert":  # no token types in megac: one type whose embedding is 0
        extra["bert.embeddings.token_type_embeddings.weight"] = torch.zeros(1, m["hidden"],
                                                                           dtype=torch.float64)
    with torch.no_grad():
        for k, p in params.items():
            w = torch.from_numpy(weights[k].copy())
            if tuple(w.shape) != tuple(p.shape) or w.dtype != torch.float64:
                raise RuntimeError(f"{k}: megac {w.dtype} {tuple(w.shape)}, transformers "
                                   f"{names[k]} {tuple(p.shape)}")
            p.copy_(w)
        for k, v in extra.items():
            p = hf.get_parameter(k)
            if tuple(p.shape) != tuple(v.shape):
                raise RuntimeError(f"{k}: {tuple(p.shape)}, expected {tuple(v.shape)}")
            p.copy_(v)
            covered.add(id(p))
    # Every transformers parameter holds a value megac gave (or the zero token-type row).
    left = [n for n, p in hf.named_parameters() if id(p) not in covered]
    if left:
        raise RuntimeError(f"transformers parameters without a megac value: {left}")
    if m["tied"]:  # the head is the embedding, the same Parameter
        head = hf.cls.predictions.decoder.weight if m["arch"] == "bert" else hf.lm_head.weight
        embedding = params["wte" if m["arch"] == "bert" else "shared"]
        if head is not embedding:
            raise RuntimeError(f"{m['name']}: the transformers head is not tied")
    return hf, params


@contextlib.contextmanager
def fp64_kept(counts):
    """transformers' T5 rounds fp64 values to fp32 for its RMSNorm variance
    (`hidden_states.to(torch.float32)`) and softmax (`scores.float()`): within this block those
    two conversions of a float64 tensor return the tensor itself (counted in `counts`)."""
    import torch
    to, to_float = torch.Tensor.to, torch.Tensor.float

    def keep_to(self, *args, **kwargs):
        if self.dtype == torch.float64 and not kwargs and len(args) == 1 and \
                args[0] is torch.float32:
            counts["to"] = counts.get("to", 0) + 1
            return self
        return to(self, *args, **kwargs)

    def keep_float(self, *args, **kwargs):
        if self.dtype == torch.float64 and not args and not kwargs:
            counts["float"] = counts.get("float", 0) + 1
            return self
        return to_float(self, *args, **kwargs)

    torch.Tensor.to, torch.Tensor.float = keep_to, keep_float
    try:
        yield
    finally:
        torch.Tensor.to, torch.Tensor.float = to, to_float


def hf_forward(m, hf, inputs, labels=None):
    out = hf(**inputs, labels=labels, return_dict=True)
    return out.logits, out.loss


# ---------------------------------------------------------------------------------------------
# data and megac runs


def step1_batch(m, tokens):
    """The inputs and labels of step 1's global batch (rows 0..3, megac's dataRow at step 0)."""
    import numpy as np
    rows = tokens[:GLOBAL_BATCH]
    if m["arch"] == "bert":
        s = m["seq"]
        ids = rows[:, :s].copy()
        labels = np.full((GLOBAL_BATCH, s), -100, dtype=np.int64)
        for j in range(GLOBAL_BATCH):
            for t in masked_positions(SEED, 0, j, s):
                labels[j, t] = ids[j, t]
                ids[j, t] = MASK_ID
        # megac train feeds attention_mask all ones
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}, labels
    e, d = m["seq"], m["dec_seq"]
    return ({"input_ids": rows[:, :e].copy(), "decoder_input_ids": rows[:, e:e + d].copy()},
            rows[:, e + 1:e + d + 1].copy())


def forward_inputs(m, tokens):
    """3 rows for `megac run`: BERT's with padding (attention_mask 0 on the last 5 and 11
    positions of rows 1 and 2), T5's encoder and decoder ids."""
    import numpy as np
    rows = tokens[ROWS - 3:]
    if m["arch"] == "bert":
        s = m["seq"]
        mask = np.ones((3, s), dtype=np.int64)
        mask[1, s - 5:] = 0
        mask[2, s - 11:] = 0
        return {"input_ids": rows[:, :s].copy(), "attention_mask": mask}
    e, d = m["seq"], m["dec_seq"]
    return {"input_ids": rows[:, :e].copy(), "decoder_input_ids": rows[:, e:e + d].copy()}


def initial_weights(args, m, data):
    """A one-step fp64 run at lr 0: the seeded initial weights, step 1's loss and gradients."""
    from safetensors_np import read_safetensors
    workdir = os.path.join(args.workdir, m["name"], "train")
    os.makedirs(workdir, exist_ok=True)
    paths = {k: os.path.join(workdir, f"{k}.safetensors") for k in ("weights", "grads")}
    log = os.path.join(workdir, "log.jsonl")
    run([args.megac, "train", "--model", spec(m, f64=False), "--data", data, "--steps", "1",
         "--global-batch", str(GLOBAL_BATCH), "--micro-batch", str(MICRO_BATCH), "--lr", "0",
         "--seed", str(SEED), "--precision", "fp64", "--log-json", log,
         "--save-weights", paths["weights"], "--save-grads", paths["grads"]])
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    steps = [r for r in records if "loss" in r]
    if len(steps) != 1:
        raise RuntimeError(f"{log}: expected 1 step record, got {records}")
    return (read_safetensors(paths["weights"]), read_safetensors(paths["grads"]),
            float(steps[0]["loss"]))


def megac_logits(args, m, inputs):
    import numpy as np
    workdir = os.path.join(args.workdir, m["name"], "forward")
    os.makedirs(workdir, exist_ok=True)
    argv = [args.megac, "run", "--model", spec(m, batch=3), "--seed", str(SEED),
            "--output-dir", workdir]
    for k, v in inputs.items():
        path = os.path.join(workdir, f"{k}.npy")
        np.save(path, v)
        argv += ["--input", f"{k}={path}"]
    run(argv)
    return np.load(os.path.join(workdir, "logits.npy"))


# ---------------------------------------------------------------------------------------------
# comparisons (NaN-proof: `not diff <= bound`, finiteness of both sides)


def compare_logits(got, want):
    """(problem or None, diff / bound)."""
    import numpy as np
    if got.shape != want.shape:
        return f"logits shape {got.shape}, transformers {want.shape}", math.inf
    if not (np.isfinite(got).all() and np.isfinite(want).all()):
        return "non-finite logits", math.inf
    diff = float(np.abs(got.astype(np.float64) - want).max())
    bound = LOGIT_RTOL * float(np.abs(want).max())
    ratio = diff / bound if bound > 0 else math.inf
    if not diff <= bound:
        return f"logits: max |megac - transformers| = {diff:.3g} > {bound:.3g}", ratio
    return None, ratio


def compare_loss(got, want):
    if not (math.isfinite(got) and math.isfinite(want)):
        return f"step-1 loss megac {got!r}, transformers {want!r}: not finite", math.inf
    diff, bound = abs(got - want), LOSS_RTOL * abs(want)
    ratio = diff / bound if bound > 0 else math.inf
    if not diff <= bound:
        return f"step-1 loss megac {got!r}, transformers {want!r} (|diff| {diff:.3g} > " \
               f"{bound:.3g})", ratio
    return None, ratio


def compare_grads(got, want):
    """||got - want|| <= GRAD_RTOL ||want|| + GRAD_ATOL sqrt(n) per tensor: (problems, worst
    ratio, its tensor)."""
    import numpy as np
    problems, worst, where = [], 0.0, None
    if set(got) != set(want):
        problems.append(f"gradients of {sorted(set(got) ^ set(want))} are on one side only")
        worst = math.inf
    for name in sorted(set(got) & set(want)):
        g, w = np.asarray(got[name], dtype=np.float64), np.asarray(want[name], dtype=np.float64)
        if g.shape != w.shape:
            problems.append(f"gradient {name}: shape {g.shape}, transformers {w.shape}")
            worst = math.inf
            continue
        if not (np.isfinite(g).all() and np.isfinite(w).all()):
            problems.append(f"gradient {name}: not finite (megac {np.isfinite(g).all()}, "
                            f"transformers {np.isfinite(w).all()})")
            worst = math.inf
            continue
        diff = float(np.linalg.norm((g - w).ravel()))
        bound = GRAD_RTOL * float(np.linalg.norm(w.ravel())) + GRAD_ATOL * math.sqrt(w.size)
        ratio = diff / bound
        if not ratio <= worst:
            worst, where = ratio, name
        if not diff <= bound:
            problems.append(f"gradient {name}: ||megac - transformers|| = {diff:.3g} > "
                            f"{bound:.3g} (||transformers|| {np.linalg.norm(w):.3g})")
    return problems, worst, where


def reference(m, weights, inputs, labels, fwd_inputs, overrides=None, keep_fp64=True):
    """The transformers model's forward logits, step-1 loss and gradients (megac names)."""
    import torch
    counts = {}
    ctx = fp64_kept(counts) if keep_fp64 else contextlib.nullcontext()
    hf, params = hf_model(m, weights, overrides)
    with ctx:
        with torch.no_grad():
            logits, _ = hf_forward(m, hf, {k: torch.from_numpy(v) for k, v in fwd_inputs.items()})
        hf.zero_grad(set_to_none=True)
        _, loss = hf_forward(m, hf, {k: torch.from_numpy(v) for k, v in inputs.items()},
                             torch.from_numpy(labels))
        loss.backward()
    grads = {k: (p.grad.numpy().copy() if p.grad is not None else None) for k, p in params.items()}
    missing = [k for k, g in grads.items() if g is None]
    if missing:
        raise RuntimeError(f"transformers computed no gradient for {missing}")
    return logits.numpy(), float(loss.item()), grads, counts


def check_model(args, m, tokens, data):
    """Returns (problems, {what: worst ratio})."""
    import numpy as np
    reference_class = "BertForMaskedLM" if m["arch"] == "bert" else "T5ForConditionalGeneration"
    print(f"{spec(m, f64=False)} --precision fp64: against {reference_class}", flush=True)
    weights, grads, loss = initial_weights(args, m, data)
    fwd = forward_inputs(m, tokens)
    got_logits = megac_logits(args, m, fwd)
    inputs, labels = step1_batch(m, tokens)
    if m["arch"] == "bert":
        count = int((labels != -100).sum())
        print(f"    masked positions: {count} of {labels.size} (megac's seeded masks, "
              f"id {MASK_ID})")
    overrides = BROKEN[args.broken][2] if args.broken and BROKEN[args.broken][0] == m["arch"] \
        else None
    if overrides:
        print(f"    BROKEN REFERENCE: {BROKEN[args.broken][1]}")
    want_logits, want_loss, want_grads, counts = reference(m, weights, inputs, labels, fwd,
                                                           overrides)
    if counts:
        print(f"    fp32 conversions of fp64 tensors kept in fp64: {counts}")
    problems, ratios = [], {}
    p, ratios["logits"] = compare_logits(got_logits, want_logits)
    problems += [p] if p else []
    print(f"    logits {list(got_logits.shape)}: max |megac - transformers| = "
          f"{float(np.abs(got_logits - want_logits).max()):.2e} (max |logit| "
          f"{float(np.abs(want_logits).max()):.3f}), ratio to bound {ratios['logits']:.1e}")
    p, ratios["loss"] = compare_loss(loss, want_loss)
    problems += [p] if p else []
    print(f"    step-1 loss {loss:.15f}, transformers {want_loss:.15f} "
          f"(relative {abs(loss - want_loss) / abs(want_loss):.1e}), ratio to bound "
          f"{ratios['loss']:.1e}")
    p, ratios["gradients"], where = compare_grads(grads, want_grads)
    problems += p
    print(f"    gradients: worst ||diff|| / bound = {ratios['gradients']:.1e} ({where}) over "
          f"{len(grads)} tensors")
    if not overrides:  # the lines scripts/numerics-sweep.py collects
        for what, ratio in ratios.items():
            print(f"    error/bound {m['name']} {what} against transformers: {ratio:.3g}")
    if m["arch"] == "t5" and not overrides:
        # transformers' unmodified code (fp32 softmax and RMS variance): for information.
        l2, s2, g2, _ = reference(m, weights, inputs, labels, fwd, keep_fp64=False)
        _, r_l = compare_logits(got_logits, l2)
        _, r_s = compare_loss(loss, s2)
        _, r_g, _ = compare_grads(grads, g2)
        print(f"    (transformers without fp64_kept, not checked: loss relative "
              f"{abs(loss - s2) / abs(s2):.1e}; ratios to the fp64 bounds: logits {r_l:.1e}, "
              f"loss {r_s:.1e}, gradients {r_g:.1e})")

    # The comparisons can tell a wrong reference: each broken variant must be rejected.
    if not args.broken:
        for key, (arch, what, bad) in BROKEN.items():
            if arch != m["arch"]:
                continue
            bl, bs, bg, _ = reference(m, weights, inputs, labels, fwd, bad)
            pl, rl = compare_logits(got_logits, bl)
            ps, rs = compare_loss(loss, bs)
            pg, rg, _ = compare_grads(grads, bg)
            by = [k for k, bad_result in (("logits", pl), ("loss", ps), ("gradients", pg))
                  if bad_result]
            print(f"    wrong reference {key} ({what}): "
                  f"{'rejected by ' + ', '.join(by) if by else 'ACCEPTED'} (ratios to bound: "
                  f"logits {rl:.1e}, loss {rs:.1e}, gradients {rg:.1e})")
            if not by:
                problems.append(f"the wrong reference {key} ({what}) passes every comparison")
    return [f"{m['name']}: {p}" for p in problems], ratios


def main():
    args = venv_test_args(lambda p: p.add_argument(
        "--break", dest="broken", choices=sorted(BROKEN),
        help="compare against this wrong transformers reference (the test must then fail)"))
    import numpy as np
    import torch
    torch.set_num_threads(1)

    problems, worst = [], {}
    for m in MODELS:
        if m["arch"] == "bert":
            width = m["seq"] + 1
        else:
            width = m["seq"] + m["dec_seq"] + 1
        rng = np.random.default_rng(7 + MODELS.index(m))
        tokens = rng.integers(0, VOCAB, size=(ROWS, width)).astype(np.int64)
        # Id 0 (transformers' default pad id) in every row of step 1, at a position BERT's
        # masks leave (the first unmasked one), so its embedding gradient is compared.
        for j in range(GLOBAL_BATCH):
            seq = m["seq"]
            masked = set(masked_positions(SEED, 0, j, seq)) if m["arch"] == "bert" else set()
            tokens[j, min(set(range(seq)) - masked)] = 0
        data = os.path.join(args.workdir, f"{m['name']}-tokens.npy")
        np.save(data, tokens)
        try:
            p, ratios = check_model(args, m, tokens, data)
        except RuntimeError as e:
            p, ratios = [f"{m['name']}: {e}"], {}
        problems += p
        for k, r in ratios.items():
            if not r <= worst.get(k, 0.0):
                worst[k] = r
    print("worst error / bound: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    for p in problems:
        print(f"  FAIL {p}")
    print("PASS" if not problems else f"FAIL ({len(problems)} problems)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
