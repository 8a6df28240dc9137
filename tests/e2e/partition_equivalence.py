"""Every partitioned layout trains exactly like one rank (issue 5's equivalence suite).

For each model config, `megac train` runs once on one rank (the oracle, docs/pipeline.md and
tests TESTING.md) and once per layout (--ranks N --tp --pp --dp [--vpp --sequence-parallel
--zero 1 --recompute ... --schedule ...], MPI ranks oversubscribed on the CPU), on the same data,
seed and hyperparameters (AdamW lr 1e-3, eps 1e-8, weight decay 0.1, clip-grad 1.0 so that the
partitioned global norm matters, constant lr), and the suite compares:
  fp64, 10 steps: every step's loss and grad_norm within 1e-10 relative; every final parameter
        ||p - p_ref|| <= 1e-9 * ||p_ref|| + 1e-12 * sqrt(n); step 1's gradients within the
        same bound.
  fp32, 10 steps: every step's loss and grad_norm within 1e-5 relative; step 1's gradients
        ||g - g_ref|| <= 1e-5 * ||g_ref|| + 1e-7 * sqrt(n) (final fp32 parameters are not
        compared: roundoff in a near-zero gradient moves Adam's update by up to lr, TESTING.md).
  bf16/fp16 (group "mixed"), 10 steps: losses and grad_norms within 6.0e-3 (bf16) / 1.1e-3
        (fp16) relative, the same loss scales and skipped steps (fp16 starts at scale 2^20, so
        the first steps overflow), step 1's gradients within 6.3e-2 (bf16) / 7.9e-3 (fp16)
        relative (the error model is at TOLERANCES). fp16's step 1 overflows: the elements
        finite in both runs are compared, with identical finite masks wherever the layout sums
        the half-precision gradients as one rank does, and at least 90% of the elements.
The tolerances are roundoff bounds: a layout computes the same sums in another order (all-reduce
of tensor-parallel partial products, micro-batch accumulation, dp reduction), nothing else.
Every run also logs grad_norm (checked like the loss: the norm over shards counts each element
once) and must say it ran "N ranks (tp T, pp P, dp D)". A control run (tp 2 with lr * (1 + 1e-6))
must fail the fp64 parameter bound, showing the bounds can tell a wrong update.

Models (all tiny, built at test time):
  gpt   zoo gpt:layers=4,hidden=16,heads=4,seq=8,vocab=32 (causal LM)
  bert  zoo bert:layers=2,hidden=16,heads=4,seq=8,vocab=32 (masked LM, seeded masks)
  onnx  tests/e2e/torch_models.GptModel(layers=2, hidden=16, heads=4, seq=8, vocab=32)
        exported by PyTorch (fused qkv, tied head), trained from its own initializers
  gpt-untied, gpt-v30 (vocab 30: tp 4 keeps the table whole), gpt-ffn24 (tanh GELU),
        gpt-h12 (hidden 12: ZeRO-1 shards that dp 4 does not divide), t5
        (zoo t5:layers=2,hidden=16,heads=4,seq=4,dec_seq=4,vocab=32, seq2seq), llama
        (zoo llama:layers=4,hidden=16,heads=4,kv_heads=2,ffn=24,seq=8,vocab=32: RMSNorm, rotary,
        grouped-query attention, SwiGLU, no biases, untied head)
Data: examples/tiny-corpus.npy re-cut into rows of S+1 = 9 tokens (byte -> rank of the byte among
the corpus's distinct bytes, mod 32), so every layout reads real text.

Global batch 8; --micro-batch is per data-parallel rank and chosen so that a step has 2
micro-batches unless the layout says otherwise (the accumulation layouts use 1 row per rank).

usage: partition_equivalence.py --megac build/bin/megac --workdir DIR
           [--quick | --full | --group NAME ...] [--only SUBSTRING] [--timeout S]
  groups: quick (CI subset), grid (every (tp, pp, dp) in {1,2,4}^3 with 1 < tp*pp*dp <= 8),
          features (sequence parallel, ZeRO-1, vpp, recompute, accumulation, gpipe), bert, onnx,
          models (untied head, vocab not divisible by tp, ffn 24 + tanh GELU, T5, Llama),
          moe (Mixtral, dropless and capacity factor 1, with the load-balancing loss),
          mixed (bf16 and fp16 layouts against the 1-rank run of the same precision),
          zerobubble (issue 35: zb-h1, zb-h2, zbv at pp 2 and 4, m = p and 2p, with tp 2,
          dp 2, ZeRO-1, recompute selective/full, a Llama and a Mixtral with ep 2; each zb-h1
          and zb-h2 run must also equal the 1f1b run of its layout bit for bit: the split
          backward computes the same values, and W accumulates the weight gradients in
          micro-batch order as the whole backward does).
  --full runs every group. Default: --quick.
Prints one table row per (layout, precision): max relative loss / grad_norm difference, the
worst parameter or gradient ||diff|| / bound and PASS/FAIL; exits 1 on any failure, 77 (skip)
when mpirun is missing. Runs with Debian's /usr/bin/python3 (numpy; torch for the onnx group).
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(SOURCE_ROOT, "examples", "tiny-corpus.npy")
SKIP = 77

SEQ, VOCAB = 8, 32
GLOBAL_BATCH = 8
STEPS = 10
HYPER = ["--lr", "1e-3", "--adam-eps", "1e-8", "--adam-beta1", "0.9", "--adam-beta2", "0.999",
         "--weight-decay", "0.1", "--clip-grad", "1.0", "--lr-schedule", "constant",
         "--seed", "3"]

# precision -> loss/grad_norm rtol, (param rtol, atol) or None, (step-1 grad rtol, atol)
# fp64: numerics.py's error model (a layout only reassociates sums: ~sqrt(n)·u, u = 1.1e-16).
# fp32: the same reassociation at u = 2^-24 = 6e-8. The loss is a mean of B·S cross-entropies
# over V logits from GEMMs of K terms (B·S = 64, V = 32, K <= 64 here), errors of independent
# sums adding in quadrature: sqrt(3 levels)·sqrt(64)·u ~ 1e-6 on the loss and grad_norm, the same
# on a gradient tensor relative to its norm; 1e-5 leaves a margin near 10. The absolute 1e-7
# sqrt(n) is for gradients that are 0 in exact arithmetic (the key bias), which are roundoff
# of O(1e-1) sums: ~1e-8 per element. No fp32 parameter bound: roundoff in a near-zero gradient
# moves Adam's update by up to lr (TESTING.md).
TOLERANCES = {
    "fp64": dict(loss=1e-10, param=(1e-9, 1e-12), grad=(1e-9, 1e-12)),
    "fp32": dict(loss=1e-5, param=None, grad=(1e-5, 1e-7)),
    # Mixed precision (group "mixed"): every op rounds its result to half (u = 2^-8 bf16, 2^-11
    # fp16), and a layout rounds at other places (tensor-parallel partial products rounded
    # before their all-reduce, micro-batch and data-parallel partial sums, sequence-parallel
    # shards), so a layout and one rank differ by at most what two implementations with
    # independent half roundings differ by: lambda * sqrt(2) * sigma, sigma a half run's
    # deviation from exact arithmetic under the probabilistic rounding model (each rounding an
    # independent relative error uniform in [-u, u]; Higham & Mary 2019), propagated through the
    # network and AdamW by Monte Carlo: `mixed_precision_test.py --partition-sigmas` (megac's
    # rounding sites on a GptModel of this suite's GPT shape, batch 8, 10 steps, clip 1.0; since
    # issue 30 the weight gradients are summed in f32 by their GEMM, no rounding site) gives,
    # relative, max over steps / tensors (24 samples: the estimates move by ~15% between site
    # sets, as 1.06e-3 -> 8.48e-4 and 1.36e-2 -> 1.48e-2 did when the weight-gradient sites went):
    #            loss     grad_norm  step-1 gradient (per tensor, on ||g||)
    #   bf16   5.62e-5    8.48e-4    1.48e-2
    #   fp16   4.96e-6    1.55e-4    1.86e-3
    # loss and grad_norm share one rtol (compare() applies it to both), so it is grad_norm's:
    # lambda = 5 for a scalar (a Gaussian beyond 5 sigma: ~6e-7): 5 * sqrt(2) * 8.48e-4 = 6.0e-3
    # (bf16), 5 * sqrt(2) * 1.55e-4 = 1.1e-3 (fp16). A gradient tensor's 2-norm concentrates at
    # its mean: lambda = 3, 3 * sqrt(2) * 1.48e-2 = 6.3e-2 (bf16), 3 * sqrt(2) * 1.86e-3 =
    # 7.9e-3 (fp16). The absolute 1e-6 sqrt(n) is negligible next to that (fp16 gradients are
    # saved loss-scaled, the same scale on every layout, checked exactly; relative bounds do
    # not see the scale). Measured on this suite's layouts: worst error/bound <= 0.3.
    "bf16": dict(loss=6.0e-3, param=None, grad=(6.3e-2, 1e-6)),
    "fp16": dict(loss=1.1e-3, param=None, grad=(7.9e-3, 1e-6)),
}
# fp16 starts at a loss scale that overflows step 1 (PRECISION_ARGS), so its saved gradients
# hold inf where a half-precision partial sum passed 65504: the sums of the largest gradients
# over tokens (biases, embedding rows). Which elements those are depends on how the sums are
# split: a layout that computes a tensor's half sums exactly as one rank does (tensor
# parallelism: each rank owns whole rows of the sums) must overflow the same elements -- its
# finite mask must be identical. A layout that splits them (data parallelism: each rank sums its
# own rows of the micro-batch; sequence parallelism: the row-parallel linears' biases summed
# over each rank's sequence shard; pipeline parallelism: the tied table's embedding and head
# gradients summed across stages in f32 instead of in half) overflows other elements, and no
# bound says which (a sum can overflow where its halves do not, and the reverse with
# cancellation), so only there may the masks differ. Either way the finite elements compared
# must be at least MIN_COMPARED_FRACTION of all, and none may be empty: overflow at 2^20 hits
# fewer than 1% of the elements here.
MIN_COMPARED_FRACTION = 0.9


def splits_half_sums(layout, name):
    """Whether `layout` computes parameter `name`'s half-precision gradient sums from other
    partial sums than one rank (see above; the names are the zoo GPT's)."""
    if layout is None:
        return False
    if layout.dp > 1 or layout.ep > 1:
        return True
    if layout.sp and name.endswith("proj.bias"):
        return True
    return layout.pp > 1 and name == "wte"


sys.path.insert(0, HERE)
import numerics  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402


# --- layouts -------------------------------------------------------------------------------------
class Layout:
    def __init__(self, tp=1, pp=1, dp=1, vpp=1, sp=False, zero=0, recompute="none", micro=None,
                 schedule=None, extra=(), tag=None, mpirun=False, ep=1):
        self.tp, self.pp, self.dp, self.vpp, self.ep = tp, pp, dp, vpp, ep
        # mpirun: started by `mpirun -np N megac train ...` (no --ranks; megac detects the job)
        # instead of megac re-executing itself under mpirun.
        self.mpirun = mpirun
        self.extra, self.tag = list(extra), tag
        self.sp, self.zero, self.recompute, self.schedule = sp, zero, recompute, schedule
        # Rows per data-parallel rank and micro-batch: 2 micro-batches per step by default.
        self.micro = micro if micro is not None else max(1, GLOBAL_BATCH // (2 * dp))

    @property
    def ranks(self):
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self):
        return GLOBAL_BATCH // (self.micro * self.dp)

    def name(self):
        parts = [f"tp{self.tp}.pp{self.pp}.dp{self.dp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        if self.sp:
            parts.append("sp")
        if self.zero:
            parts.append(f"zero{self.zero}")
        if self.recompute != "none":
            parts.append(f"rc-{self.recompute}")
        if self.schedule:
            parts.append(self.schedule)
        parts.append(f"m{self.micro_batches}")
        if self.mpirun:
            parts.append("mpirun")
        if self.tag:
            parts.append(self.tag)
        return "+".join(parts)

    def argv(self):
        argv = ["--micro-batch", str(self.micro), *self.extra]
        if self.ranks == 1:
            return argv
        if not self.mpirun:
            argv += ["--ranks", str(self.ranks)]
        argv += ["--tp", str(self.tp), "--pp", str(self.pp), "--dp", str(self.dp),
                 "--comm-timeout", "30"]
        if self.vpp > 1:
            argv += ["--vpp", str(self.vpp)]
        if self.ep > 1:
            argv += ["--ep", str(self.ep)]
        if self.sp:
            argv.append("--sequence-parallel")
        if self.zero:
            argv += ["--zero", str(self.zero)]
        if self.recompute != "none":
            argv += ["--recompute", self.recompute]
        if self.schedule:
            argv += ["--schedule", self.schedule]
        return argv


def grid_layouts(layers):
    """Every (tp, pp, dp) in {1,2,4}^3 with 1 < tp*pp*dp <= 8 and pp <= layers."""
    out = []
    for tp in (1, 2, 4):
        for pp in (1, 2, 4):
            for dp in (1, 2, 4):
                if 1 < tp * pp * dp <= 8 and pp <= layers:
                    out.append(Layout(tp=tp, pp=pp, dp=dp))
    return out


def feature_layouts():
    return [
        Layout(tp=2, sp=True),
        Layout(tp=2, dp=2, sp=True),
        Layout(tp=4, sp=True),
        Layout(tp=2, pp=2, sp=True),
        Layout(dp=2, zero=1),
        Layout(dp=4, zero=1),
        Layout(tp=2, dp=2, zero=1),
        Layout(tp=2, dp=2, sp=True, zero=1),
        Layout(pp=2, dp=2, zero=1),
        Layout(pp=2, vpp=2),
        Layout(pp=2, vpp=2, dp=2),
        Layout(pp=2, vpp=2, micro=1),
        Layout(tp=2, pp=2, vpp=2),
        Layout(pp=2, recompute="selective"),
        Layout(pp=2, recompute="full"),
        Layout(tp=2, recompute="selective"),
        Layout(tp=2, dp=2, recompute="full"),
        Layout(tp=2, dp=2, micro=1),           # 4 micro-batches accumulated
        Layout(pp=2, dp=2, micro=1),           # 4 micro-batches through the pipeline
        Layout(pp=4, micro=1),                 # 8 micro-batches, 4 stages
        Layout(pp=2, schedule="gpipe"),
        # More chunks than the 4 layers: cuts inside a layer (after a residual add).
        Layout(pp=2, vpp=4),
        Layout(pp=8, micro=1),
        # Everything at once.
        Layout(tp=4, pp=2, sp=True),
        Layout(tp=2, pp=2, dp=2, sp=True, zero=1),
        Layout(tp=2, pp=2, dp=2, vpp=2, sp=True, zero=1, recompute="selective"),
        Layout(tp=2, pp=2, dp=2, vpp=2, recompute="full", micro=1),
        Layout(tp=2, pp=2, mpirun=True),
    ]


def quick_layouts():
    return [
        Layout(tp=2), Layout(pp=2), Layout(dp=2), Layout(tp=2, pp=2, dp=2),
        Layout(tp=2, sp=True), Layout(dp=2, zero=1), Layout(pp=2, vpp=2),
        Layout(pp=2, recompute="full"), Layout(tp=2, dp=2, micro=1),
        Layout(tp=2, dp=2, mpirun=True),
    ]


GPT = dict(name="gpt", spec=f"gpt:layers=4,hidden=16,heads=4,seq={SEQ},vocab={VOCAB}", layers=4,
           vocab=VOCAB)
BERT = dict(name="bert", spec=f"bert:layers=2,hidden=16,heads=4,seq={SEQ},vocab={VOCAB}",
            layers=2, vocab=VOCAB)
ONNX = dict(name="onnx", spec=None, layers=2, vocab=VOCAB)
# Variants (group "models"): an untied head (no embedding shared between pipeline stages), a
# vocab that tp = 4 does not divide (the table stays whole on every rank, with a warning), tanh
# GELU and a non-default ffn, and T5 (encoder-decoder, seq2seq: encoder row[:4], decoder
# row[4:8] predicting row[5:9]).
GPT_UNTIED = dict(name="gpt-untied",
                  spec=f"gpt:layers=2,hidden=16,heads=4,seq={SEQ},vocab={VOCAB},tied=0",
                  layers=2, vocab=VOCAB)
GPT_V30 = dict(name="gpt-v30", spec=f"gpt:layers=2,hidden=16,heads=4,seq={SEQ},vocab=30",
               layers=2, vocab=30)
GPT_FFN = dict(name="gpt-ffn24",
               spec=f"gpt:layers=2,hidden=16,heads=4,ffn=24,seq={SEQ},vocab={VOCAB},gelu=tanh",
               layers=2, vocab=VOCAB)
# hidden 12: with tp 2 a rank holds 6 rows of q/k/v, which dp 4 (ZeRO-1) does not divide.
GPT_H12 = dict(name="gpt-h12", spec=f"gpt:layers=2,hidden=12,heads=4,seq={SEQ},vocab={VOCAB}",
               layers=2, vocab=VOCAB)
# Llama: grouped-query attention (4 heads on 2 kv heads, so tp 2 splits kv groups), rotary
# tables (constants every rank holds whole), SwiGLU, bias-free partial sums through the residual.
LLAMA = dict(name="llama",
             spec=f"llama:layers=4,hidden=16,heads=4,kv_heads=2,ffn=24,seq={SEQ},vocab={VOCAB}",
             layers=4, vocab=VOCAB)
# Fewer key/value heads than tp (issue 18): one kv head (Gemma-2B, Falcon-7B multi-query) under
# tp 2 and tp 4, two kv heads under tp 4; each rank holds the kv head its query heads read, the
# kv projections stay whole and their gradients complete on every rank.
LLAMA_MQA = dict(name="llama-mqa",
                 spec=f"llama:layers=2,hidden=16,heads=4,kv_heads=1,ffn=24,seq={SEQ},vocab={VOCAB}",
                 layers=2, vocab=VOCAB)
LLAMA_KV2 = dict(name="llama-kv2",
                 spec=f"llama:layers=2,hidden=32,heads=8,kv_heads=2,ffn=24,seq={SEQ},vocab={VOCAB}",
                 layers=2, vocab=VOCAB)
# Mixture of experts (issue 21, docs/moe.md): Mixtral with 4 experts, 2 per token, dropless and
# with capacity factor 1 (tokens dropped per sequence in position order), the load-balancing loss
# at its default coefficient 0.01 in the objective.
MIXTRAL = dict(name="mixtral",
               spec=f"mixtral:layers=2,hidden=16,heads=4,kv_heads=2,experts=4,topk=2,ffn=24,"
                    f"seq={SEQ},vocab={VOCAB}",
               layers=2, vocab=VOCAB)
MIXTRAL_CAPACITY = dict(name="mixtral-capacity", spec=MIXTRAL["spec"] + ",capacity=1",
                        layers=2, vocab=VOCAB)
T5 = dict(name="t5", spec=f"t5:layers=2,hidden=16,heads=4,seq=4,dec_seq=4,vocab={VOCAB}",
          layers=4, vocab=VOCAB)


def zero_bubble_layouts():
    """(model, layout) pairs of group zerobubble: GLOBAL_BATCH 8 = micro x dp x m."""
    return [
        (GPT, Layout(pp=2, schedule="zb-h1")),                           # m 2 = p
        (GPT, Layout(pp=2, dp=2, micro=1, schedule="zb-h1")),            # m 4 = 2p
        (GPT, Layout(tp=2, pp=2, schedule="zb-h2")),
        (GPT, Layout(pp=2, dp=2, zero=1, micro=1, schedule="zb-h2")),
        (GPT, Layout(pp=4, micro=2, schedule="zb-h1")),                  # m 4 = p
        (GPT, Layout(pp=4, micro=1, schedule="zb-h2")),                  # m 8 = 2p
        (GPT, Layout(pp=2, recompute="selective", schedule="zb-h1")),
        (GPT, Layout(pp=2, dp=2, micro=1, recompute="full", schedule="zb-h2")),
        (GPT, Layout(pp=2, schedule="zbv")),
        (GPT, Layout(tp=2, pp=2, micro=2, recompute="selective", schedule="zbv")),
        (GPT, Layout(pp=2, dp=2, micro=1, zero=1, recompute="full", schedule="zbv")),
        (GPT, Layout(pp=4, micro=2, schedule="zbv")),
        (LLAMA, Layout(tp=2, pp=2, schedule="zb-h1")),
        (LLAMA, Layout(pp=2, dp=2, micro=1, schedule="zbv")),
        (MIXTRAL, Layout(pp=2, dp=2, ep=2, micro=1, schedule="zb-h2")),
    ]


def bert_layouts():
    return [Layout(tp=2), Layout(pp=2), Layout(dp=2), Layout(tp=2, sp=True),
            Layout(tp=2, pp=2, dp=2), Layout(dp=2, zero=1), Layout(tp=4),
            Layout(tp=2, dp=2, sp=True, zero=1), Layout(pp=2, vpp=2, recompute="selective"),
            Layout(tp=2, pp=2, recompute="full")]


def plan(groups):
    """(model, layout, precisions) triples, without duplicates, in a stable order."""
    cases = []
    if "quick" in groups:
        cases += [(GPT, layout, ("fp64",)) for layout in quick_layouts()]
        cases += [(GPT, Layout(tp=2, pp=2, dp=2), ("fp32",)),
                  (GPT, Layout(tp=2, sp=True), ("fp32",)),
                  (GPT, CONTROL, ("fp64",)),
                  (LLAMA, Layout(tp=2, pp=2, dp=2, sp=True), ("fp64",)),
                  (LLAMA_MQA, Layout(tp=2), ("fp64",)),
                  (LLAMA_KV2, Layout(tp=4), ("fp64",)),
                  (MIXTRAL, Layout(tp=2, pp=2, dp=2, sp=True), ("fp64",)),
                  (MIXTRAL_CAPACITY, Layout(tp=2, dp=2, sp=True), ("fp64",))]
    if "grid" in groups:
        cases += [(GPT, layout, ("fp64", "fp32")) for layout in grid_layouts(GPT["layers"])]
    if "features" in groups:
        cases += [(GPT, layout, ("fp64", "fp32")) for layout in feature_layouts()]
    if "bert" in groups:
        cases += [(BERT, layout, ("fp64", "fp32")) for layout in bert_layouts()]
    if "onnx" in groups:
        cases += [(ONNX, Layout(tp=2, pp=2), ("fp64", "fp32")),
                  (ONNX, Layout(tp=2), ("fp64",)),
                  (ONNX, Layout(tp=2, dp=2, sp=True), ("fp64",)),
                  (ONNX, Layout(dp=2), ("fp64", "fp32")),
                  (ONNX, Layout(tp=2, pp=2, dp=2, zero=1), ("fp64",))]
    if "models" in groups:
        cases += [(GPT_UNTIED, layout, ("fp64",))
                  for layout in (Layout(pp=2), Layout(tp=2), Layout(tp=2, pp=2, dp=2))]
        cases += [(GPT_V30, layout, ("fp64",))
                  for layout in (Layout(tp=4), Layout(tp=2), Layout(tp=4, sp=True))]
        cases += [(GPT_FFN, layout, ("fp64",)) for layout in (Layout(tp=4), Layout(tp=2, pp=2))]
        cases += [(GPT_H12, layout, ("fp64", "fp32"))
                  for layout in (Layout(tp=2, dp=4, zero=1), Layout(dp=4, zero=1))]
        cases += [(T5, layout, ("fp64", "fp32"))
                  for layout in (Layout(tp=2), Layout(dp=2), Layout(pp=2), Layout(tp=2, dp=2),
                                 Layout(tp=2, sp=True))]
        cases += [(LLAMA, layout, ("fp64", "fp32"))
                  for layout in (Layout(tp=2), Layout(pp=2), Layout(dp=2, zero=1),
                                 Layout(tp=2, dp=2, sp=True), Layout(pp=2, vpp=2),
                                 Layout(tp=2, pp=2, recompute="selective"))]
        cases += [(LLAMA_MQA, layout, ("fp64", "fp32"))
                  for layout in (Layout(tp=4), Layout(tp=2, dp=2, sp=True),
                                 Layout(tp=2, pp=2, dp=2, zero=1))]
        cases += [(LLAMA_KV2, layout, ("fp64",)) for layout in (Layout(tp=4, sp=True),)]
    if "moe" in groups:
        cases += [(MIXTRAL, layout, ("fp64", "fp32"))
                  for layout in (Layout(tp=2), Layout(pp=2), Layout(dp=2), Layout(dp=4),
                                 Layout(tp=2, sp=True), Layout(dp=2, zero=1),
                                 Layout(tp=2, pp=2, dp=2), Layout(pp=2, vpp=2),
                                 Layout(tp=2, dp=2, recompute="full"))]
        cases += [(MIXTRAL_CAPACITY, layout, ("fp64",))
                  for layout in (Layout(dp=2), Layout(tp=2, sp=True), Layout(pp=2),
                                 Layout(tp=2, pp=2, dp=2, zero=1))]
        # Expert parallelism, carved out of dp: 2 or 4 ranks of experts, with tp, pp, sp.
        cases += [(model, layout, ("fp64",))
                  for model in (MIXTRAL, MIXTRAL_CAPACITY)
                  for layout in (Layout(dp=2, ep=2), Layout(dp=4, ep=4), Layout(dp=4, ep=2),
                                 Layout(tp=2, dp=2, ep=2, sp=True), Layout(pp=2, dp=2, ep=2),
                                 Layout(tp=2, pp=2, dp=2, ep=2), Layout(dp=4, ep=2, zero=1))]
        cases += [(MIXTRAL, layout, ("fp32",))
                  for layout in (Layout(dp=2, ep=2), Layout(tp=2, dp=4, ep=4))]
    if "zerobubble" in groups:
        cases += [(model, layout, ("fp64",)) for model, layout in zero_bubble_layouts()]
    if "mixed" in groups:
        for precision in ("bf16", "fp16"):
            cases += [(GPT, layout, (precision,))
                      for layout in (Layout(tp=2), Layout(pp=2), Layout(dp=2),
                                     Layout(tp=2, pp=2, dp=2), Layout(tp=2, sp=True),
                                     Layout(dp=2, zero=1), Layout(pp=2, vpp=2))]
    seen, out = set(), []
    for model, layout, precisions in cases:
        for precision in precisions:
            key = (model["name"], layout.name(), precision)
            if key not in seen:
                seen.add(key)
                out.append((model, layout, precision))
    return out


# The control: the same layout with lr * (1 + 1e-6) (the later --lr wins) must fail the fp64
# bounds, or the comparison could not tell a wrong update from a right one.
CONTROL = Layout(tp=2, extra=["--lr", "1.000001e-3"], tag="control-lr")


# --- data and models -----------------------------------------------------------------------------
def make_tokens(workdir, vocab):
    """tiny-corpus.npy's text, cut into rows of SEQ+1 tokens of a `vocab`-sized alphabet."""
    corpus = np.load(CORPUS)
    text = np.concatenate([corpus[0]] + [row[1:] for row in corpus[1:]])  # undo the overlap
    alphabet = np.unique(text)
    ids = (np.searchsorted(alphabet, text) % vocab).astype(np.int32)
    rows = (len(ids) - 1) // SEQ
    data = np.stack([ids[i * SEQ:i * SEQ + SEQ + 1] for i in range(rows)])
    path = os.path.join(workdir, f"tokens-v{vocab}.npy")
    np.save(path, data)
    return path


def export_onnx(workdir):
    """torch_models.GptModel as train_test.py exports it: names and the tied head survive."""
    import torch
    sys.path.insert(0, HERE)
    from torch_models import GptModel
    torch.manual_seed(1234)
    model = GptModel(layers=ONNX["layers"], hidden=16, heads=4, seq=SEQ, vocab=VOCAB)
    path = os.path.join(workdir, "gpt.onnx")
    ids = torch.randint(0, VOCAB, (2, SEQ), dtype=torch.long)
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"input_ids": {0: "batch"}})
    return path


# --- running megac -------------------------------------------------------------------------------
class RunError(Exception):
    pass


# fp16 starts from a scale that overflows for the first steps (skipped, the scale halves), so
# the layouts must agree on which steps overflow.
PRECISION_ARGS = {"fp16": ["--initial-loss-scale", "1048576"]}


def megac_train(megac, model_args, data, rundir, layout, precision, timeout):
    os.makedirs(rundir, exist_ok=True)
    log = os.path.join(rundir, "log.jsonl")
    weights = os.path.join(rundir, "weights.safetensors")
    grads = os.path.join(rundir, "grads.safetensors")
    for path in (log, weights, grads):
        if os.path.exists(path):
            os.remove(path)
    launcher = []
    if layout.mpirun:
        launcher = ["mpirun", "--oversubscribe", "-np", str(layout.ranks)]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            launcher.insert(1, "--allow-run-as-root")
    argv = [*launcher, megac, "train", *model_args, "--data", data, "--steps", str(STEPS),
            "--global-batch", str(GLOBAL_BATCH), *HYPER, "--precision", precision,
            *numerics.threads_args(), *PRECISION_ARGS.get(precision, []), "--log-json", log,
            "--save-weights", weights, "--save-grads", grads, *layout.argv()]
    trace = None
    if layout.schedule in ("zb-h1", "zb-h2", "zbv"):  # the trace shows the split steps ran
        trace = os.path.join(rundir, "trace.json")
        argv += ["--trace", trace]
    with open(os.path.join(rundir, "command.txt"), "w") as f:
        f.write(" ".join(argv) + "\n")
    start = time.time()
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError(f"timed out after {timeout} s: {' '.join(argv)}")
    elapsed = time.time() - start
    with open(os.path.join(rundir, "output.txt"), "w") as f:
        f.write(result.stdout + result.stderr)
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        # megac's own errors (one per rank, often the same) rather than mpirun's banner.
        errors = list(dict.fromkeys(l for l in lines if "error" in l and "[warn]" not in l))
        tail = "\n".join(errors[:6] if errors else lines[-12:])
        raise RunError(f"exit {result.returncode}: {' '.join(argv)}\n{tail}")
    for path in (log, weights, grads):
        if not os.path.exists(path):
            raise RunError(f"{os.path.basename(path)} was not written: {' '.join(argv)}")
    # The run must have used the layout (not silently one rank): megac's first line says
    # "... N ranks (tp T, pp P, dp D) ...".
    if layout.ranks > 1:
        said = f"{layout.ranks} ranks (tp {layout.tp}, pp {layout.pp}, dp {layout.dp}" + (
            f", ep {layout.ep})" if layout.ep > 1 else ")")
        if said not in result.stdout:
            raise RunError(f"the output does not say '{said}': {' '.join(argv)}\n"
                           f"{result.stdout.splitlines()[0] if result.stdout else ''}")
    if trace:
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        kinds = {e.get("args", {}).get("kind") for e in events}
        if not {"backward_input", "backward_weight"} <= kinds or "backward" in kinds:
            raise RunError(f"the trace of {layout.schedule} has step kinds "
                           f"{sorted(map(str, kinds))}, not the split backward's: "
                           f"{' '.join(argv)}")
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return dict(records=records, weights=read_safetensors(weights), grads=read_safetensors(grads),
                seconds=elapsed)


def compare_tensors(got, want, rtol, atol, what, precision, layout=None):
    """Worst ||diff|| / bound over the tensors, and the problems."""
    problems = []
    if set(got) != set(want):
        problems.append(f"{what}: tensors {sorted(set(got) ^ set(want))} differ from the "
                        "1-rank run's")
    worst, worst_name = 0.0, None
    compared = total = 0
    for name in sorted(set(got) & set(want)):
        # The attention key bias adds the same q.b to every score of a row, which softmax
        # ignores: its true gradient is exactly 0 and what a run computes is roundoff of large
        # cancelling sums. In half precision that noise is as large as the value itself, so a
        # relative bound means nothing there (fp32 and fp64 still bound it).
        if precision in ("bf16", "fp16") and name.endswith("attn.k.bias"):
            continue
        g, w = got[name], want[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            problems.append(f"{what} {name}: {g.dtype} {list(g.shape)}, 1 rank {w.dtype} "
                            f"{list(w.shape)}")
            continue
        g64, w64 = g.astype(np.float64).ravel(), w.astype(np.float64).ravel()
        total += w64.size
        fg, fw = np.isfinite(g64), np.isfinite(w64)
        if precision != "fp16" and not (fg.all() and fw.all()):
            problems.append(f"{what} {name}: {int((~fg).sum())} non-finite values "
                            f"(1 rank: {int((~fw).sum())})")
            worst = math.inf
            continue
        # fp16: an overflowed step 1 (see MIN_COMPARED_FRACTION): the same finite mask unless
        # the layout splits this tensor's half-precision sums.
        differ = int((fg != fw).sum())
        if differ and not splits_half_sums(layout, name):
            problems.append(f"{what} {name}: the finite masks differ in {differ} of {fg.size} "
                            f"elements ({int((~fg).sum())} non-finite, 1 rank "
                            f"{int((~fw).sum())}), but this layout sums its half-precision "
                            "gradients as one rank does")
            worst = math.inf
        keep = fg & fw
        g64, w64 = g64[keep], w64[keep]
        if w64.size == 0:
            problems.append(f"{what} {name}: no element finite in both runs to compare")
            worst = math.inf
            continue
        compared += w64.size
        diff = np.linalg.norm(g64 - w64)
        bound = rtol * np.linalg.norm(w64) + atol * math.sqrt(w64.size)
        ratio = diff / bound if np.isfinite(diff) else math.inf
        if ratio > worst or worst_name is None:
            worst, worst_name = max(worst, ratio), name
        if not diff <= bound:
            problems.append(f"{what} {name}: ||diff|| = {diff:.3e} > {bound:.3e} "
                            f"(||ref|| = {np.linalg.norm(w64):.3e})")
    if not compared >= MIN_COMPARED_FRACTION * total or compared == 0:
        problems.append(f"{what}: {compared} of {total} elements compared (finite in both "
                        f"runs); at least {MIN_COMPARED_FRACTION:.0%} and one are required")
        worst = math.inf
    return worst, worst_name, problems


def compare(run, ref, precision, layout=None):
    tol = TOLERANCES[precision]
    problems = []
    steps = [r["step"] for r in run["records"]]
    if steps != list(range(1, STEPS + 1)):
        return dict(loss=math.inf, norm=math.inf, param=math.inf, grad=math.inf,
                    problems=[f"logged steps {steps}, expected 1..{STEPS}"])
    loss_rel = norm_rel = 0.0
    for r, q in zip(run["records"], ref["records"]):
        # The loss scale and the skipped (overflowed) steps must be the same decisions.
        for key in ("loss_scale", "skipped"):
            if r.get(key) != q.get(key):
                problems.append(f"step {r['step']}: {key} {r.get(key)!r}, 1 rank {q.get(key)!r}")
        for key in ("loss", "grad_norm"):
            a, b = r[key], q[key]
            if a is None or b is None:  # a skipped fp16 step logs no norm
                if (a is None) != (b is None):
                    problems.append(f"step {r['step']}: {key} {a!r}, 1 rank {b!r}")
                continue
            rel = abs(a - b) / abs(b) if b != 0 else abs(a - b)
            if not math.isfinite(a):
                rel = math.inf
            if key == "loss":
                loss_rel = max(loss_rel, rel)
            else:
                norm_rel = max(norm_rel, rel)
            if not rel <= tol["loss"]:
                problems.append(f"step {r['step']}: {key} {a!r}, 1 rank {b!r} (relative "
                                f"{rel:.2e} > {tol['loss']:g})")
    param = grad = None
    if tol["param"]:
        param, pname, p = compare_tensors(run["weights"], ref["weights"], *tol["param"],
                                          "final parameter", precision)
        problems += p
    grad, gname, p = compare_tensors(run["grads"], ref["grads"], *tol["grad"], "step-1 gradient",
                                      precision, layout)
    problems += p
    return dict(loss=loss_rel, norm=norm_rel, param=param, grad=grad, problems=problems)


def same_bits(run, base, schedule):
    """The problems of a zero-bubble run that is not bit for bit its layout's 1f1b run."""
    problems = []
    keys = ("loss", "grad_norm")
    got = [[r.get(k) for k in keys] for r in run["records"]]
    want = [[r.get(k) for k in keys] for r in base["records"]]
    if got != want:
        problems.append(f"{schedule}: losses/grad_norms {got} differ from 1f1b's {want}")
    for name in sorted(set(run["weights"]) | set(base["weights"])):
        a, b = run["weights"].get(name), base["weights"].get(name)
        if a is None or b is None or a.tobytes() != b.tobytes():
            problems.append(f"{schedule}: final parameter {name} differs from 1f1b's in bits")
    return problems


def fmt(x):
    if x is None:
        return "-"
    if x == math.inf:
        return "inf"
    return f"{x:.2e}" if x < 1e-2 or x >= 1e3 else f"{x:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--group", action="append", default=[],
                        choices=["quick", "grid", "features", "bert", "onnx", "models", "moe",
                                 "mixed", "zerobubble"])
    parser.add_argument("--only", help="run only the layouts whose name contains this")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per megac run")
    args = parser.parse_args()

    groups = set(args.group)
    if args.full:
        groups |= {"quick", "grid", "features", "bert", "onnx", "models", "moe", "mixed",
                   "zerobubble"}
    if args.quick or not groups:
        groups.add("quick")

    if shutil.which("mpirun") is None:
        print("SKIP: mpirun is not on PATH (Debian: openmpi-bin); the layouts need MPI ranks")
        return SKIP
    megac = os.path.abspath(args.megac)
    help_text = subprocess.run([megac, "train", "--help"], capture_output=True, text=True)
    if "--ranks" not in help_text.stdout + help_text.stderr:
        print(f"FAIL: {megac} train --help does not mention --ranks: this megac cannot train "
              "partitioned layouts")
        return 1

    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    data = {v: make_tokens(workdir, v) for v in sorted({c[0]["vocab"] for c in plan(groups)})}
    cases = plan(groups)
    if args.only:
        cases = [c for c in cases if args.only in c[1].name() or args.only == c[0]["name"]]
    print(f"groups: {', '.join(sorted(groups))}; {len(cases)} runs against 1-rank references; "
          f"{STEPS} steps, global batch {GLOBAL_BATCH}, seq {SEQ}, vocab {VOCAB}")

    model_args = {}
    skipped = []
    if any(m["name"] == "onnx" for m, _, _ in cases):
        try:
            model_args["onnx"] = [export_onnx(workdir)]
        except ImportError as e:
            skipped.append(f"onnx: torch/onnx not importable ({e})")
            cases = [c for c in cases if c[0]["name"] != "onnx"]
    for m in (GPT, BERT, GPT_UNTIED, GPT_V30, GPT_FFN, GPT_H12, T5, LLAMA, LLAMA_MQA, LLAMA_KV2,
              MIXTRAL, MIXTRAL_CAPACITY):
        model_args[m["name"]] = ["--model", m["spec"]]

    references = {}
    rows, failures = [], 0
    header = (f"{'model':<10} {'layout':<44} {'prec':<5} {'ranks':>5} {'loss rel':>9} "
              f"{'norm rel':>9} {'param':>8} {'grad':>8} {'time':>6}  result")
    print(header)
    print("-" * len(header))
    sys.stdout.flush()
    start_all = time.time()
    for model, layout, precision in cases:
        key = (model["name"], precision)
        problems = []
        result = None
        try:
            if key not in references:
                references[key] = megac_train(
                    megac, model_args[model["name"]], data[model["vocab"]],
                    os.path.join(workdir, model["name"], precision, "reference"),
                    Layout(micro=GLOBAL_BATCH // 2), precision, args.timeout)
            ref = references[key]
            run = megac_train(megac, model_args[model["name"]], data[model["vocab"]],
                              os.path.join(workdir, model["name"], precision, layout.name()),
                              layout, precision, args.timeout)
            result = compare(run, ref, precision, layout)
            problems = result["problems"]
            seconds = run["seconds"]
            if layout.schedule in ("zb-h1", "zb-h2"):
                twin = copy.copy(layout)
                twin.schedule = None  # 1f1b
                base = megac_train(megac, model_args[model["name"]], data[model["vocab"]],
                                   os.path.join(workdir, model["name"], precision, twin.name()),
                                   twin, precision, args.timeout)
                problems += same_bits(run, base, layout.schedule)
        except RunError as e:
            problems = [str(e)]
            seconds = None
        ok = not problems
        if layout is CONTROL and result is not None:
            # Expected to differ: pass when the bounds catch a 1e-6 relative change of lr.
            ok = any("final parameter" in p for p in problems)
            problems = [] if ok else ["the control run (lr * (1 + 1e-6)) passed the fp64 "
                                      "parameter bounds: the comparison is not sensitive"]
        failures += not ok
        r = result or {}
        print(f"{model['name']:<10} {layout.name():<44} {precision:<5} {layout.ranks:>5} "
              f"{fmt(r.get('loss')):>9} {fmt(r.get('norm')):>9} {fmt(r.get('param')):>8} "
              f"{fmt(r.get('grad')):>8} {(f'{seconds:.1f}s' if seconds else '-'):>6}  "
              f"{'PASS' if ok else 'FAIL'}")
        if result is not None and layout is not CONTROL:
            # One line for scripts/numerics-sweep.py: the worst of the four ratios to their bounds.
            tol = TOLERANCES[precision]
            ratios = [r.get("loss"), r.get("norm")]
            ratios = [x / tol["loss"] if x is not None else None for x in ratios]
            ratios += [r.get("param"), r.get("grad")]
            ratios = [math.inf if (x is not None and not math.isfinite(x)) else x for x in ratios]
            worst = max((x for x in ratios if x is not None), default=math.inf)
            print(f"      error/bound {model['name']} {layout.name()} {precision}: {worst:.3g}")
        for p in problems[:8]:
            for line in p.splitlines():
                print(f"      {line}")
        if len(problems) > 8:
            print(f"      ... and {len(problems) - 8} more")
        sys.stdout.flush()
        rows.append((model["name"], layout.name(), precision, ok))
    for s in skipped:
        print(f"SKIP: {s}")
    passed = sum(ok for *_, ok in rows)
    print(f"{passed} passed, {failures} failed ({len(rows)} layout runs, "
          f"{time.time() - start_all:.0f} s); 'param'/'grad': worst ||diff|| / bound "
          "(<= 1 passes)")
    if failures:
        return 1
    if not rows:
        print("FAIL: nothing ran")
        return 1
    return SKIP if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
