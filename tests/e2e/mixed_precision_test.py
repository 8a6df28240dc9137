"""megac's bf16 and fp16 mixed-precision training against PyTorch, on the same weights and data.

The model and data are train_test.py's GPT (torch_models.GptModel, layers 2, hidden 64, heads 4,
seq 16, vocab 128, exported to ONNX by train_test.make_gpt; its 24 random rows; global batch =
micro-batch 4, AdamW lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on matrices, constant
lr, no clipping). megac runs `megac train --precision bf16|fp16 --threads 1 --save-grads ...` for
STEPS steps.

What megac's mixed precision is (docs/training-step.md, passes/training/TrainingPrecision.cpp,
runtime/cpu/HalfCompute.h, and the IR of this very model, see SITES): parameters stay f32 (master
weights; AdamW, its moments, the gradient accumulators and grad_norm are f32) and each is cast to
half once; every op of the forward and of the backward computes in f32 on its exactly widened half
inputs and rounds its result to half once (matmuls accumulate in f32); layer_norm and
cross_entropy with the loss tail compute in f32 (LayerNorm's output is rounded where the next
linear casts it), so the logits are rounded to half and the loss is f32. The importer raises
this ONNX graph to fused ops: linear (MatMul + Add), attention (QK^T, scale, causal mask,
softmax, PV: one f32 kernel, so scores and probabilities are never half) and gelu. fp16 adds
dynamic loss scaling: the backward is seeded with the scale (2^16 at first; Megatron's
DynamicGradScaler); --save-grads writes the scaled f32 accumulators (divided back here).

The references (PyTorch 1.13 on the CPU, f32 master weights, torch.optim.AdamW):
  bf16  torch.autocast("cpu", dtype=torch.bfloat16) around GptModel's forward, the logits cast to
        f32 for the cross entropy (as megac's loss tail). Autocast rounds at other places than
        megac (SITES["autocast"] vs SITES["megac"]): the embeddings, their sum, the residual
        stream and the LayerNorm inputs stay f32 (bf16 + f32 promotes to f32; megac rounds them),
        the tied table is rounded for the head only (megac: for the embedding too), and the
        attention's q @ k^T, softmax and att @ v are three bf16 ops (megac: one f32 kernel);
        Linear (one addmm), GELU, the LayerNorm outputs and the logits are rounded by both.
        Checked at start: PyTorch's CPU bf16 Linear is the f32 product rounded once (as megac's).
  fp16  torch 1.13's CPU autocast does not support float16 ("AutocastCPU only support Bfloat16")
        and the CPU has no half matmul kernel ("addmm_impl_cpu_ not implemented for 'Half'"), so
        the reference is megac's documented fp16 policy written out in PyTorch: FunctionalGpt
        (GptModel's forward op by op, in f32) with every tensor megac keeps in half rounded to
        float16 (x.half().float()) in the forward and the gradient with respect to it rounded in
        the backward (a custom autograd function), the loss multiplied by 2^16 before the
        backward and the gradients divided by it (exact) before AdamW. It is an independent
        implementation of the same rounding policy (PyTorch's kernels and autograd), not of
        megac's code: where megac rounds inside a backward (LayerNorm's input gradient, each
        add of two gradient branches) it rounds at the same tensors, in f32 sums of another order.

What is compared: every step's loss and grad_norm for STEPS steps (step 1's loss included), and
every parameter's step-1 gradient (all 28 tensors, the attention key bias included); fp16: every
step's loss scale is 2^16 and no step is skipped, and step 1's gradients are finite in both runs
(identical finite masks: with the scale not overflowing, both all-finite), at least MIN_COMPARED
elements compared. Comparisons are NaN-proof (`not (d <= bound)`, np.isfinite).

Error model (the tolerances). Round-to-nearest in half gives fl(x) = x (1 + d), |d| <= u, with
u = 2^-8 (bf16) and 2^-11 (fp16); f32 arithmetic (2^-24) is negligible next to it. Two
implementations differ by their roundings: d at every "site" where either rounds -- a tensor
rounded to half in the forward, or the gradient with respect to it in the backward (SITES lists
them per implementation, with counts) -- propagated to the loss, the gradients and, through
AdamW, to the later steps. Each rounding is modelled as an independent relative perturbation d
uniform in [-u, u] (variance u^2/3; the true relative error of round-to-nearest has RMS ~0.43 u,
so the model overstates it ~1.35x): the probabilistic rounding-error model of Higham & Mary
(SIAM J. Sci. Comput. 41(5), 2019), in which n roundings along a path give O(sqrt(n) u), not
n u. The depth (2 blocks of 8-9 rounded tensors, forward and backward), the accumulation
lengths (<= 256 terms, in f32, rounded once) and the amplification by the network and by AdamW
are not put into a formula but computed: FunctionalGpt in f64 runs the same STEPS training steps
MC_SAMPLES times with such random d at one implementation's sites, and once without. For each
compared quantity Q (a loss, a grad_norm, one parameter's gradient) that gives the mean squared
deviation of that implementation from exact arithmetic, E|Q_X - Q|^2. Two implementations whose
roundings are independent then differ by at most
  |Q_megac - Q_ref| <= LAMBDA * sqrt(E|Q_megac - Q|^2 + E|Q_ref - Q|^2)
with LAMBDA_SCALAR = 5 for a loss or a grad_norm (a near-Gaussian scalar: exceeded with
probability ~6e-7) and LAMBDA_VECTOR = 3 for the 2-norm of a gradient tensor (a sum of many
weakly dependent squares concentrates at its mean: ||.||/sigma = 1 +- O(1/sqrt(n))). Where the
two round the same tensor from the same value they agree exactly: the Linear weights and biases
and the head's copy of the table, whose casts are left out of the model (SHARED_PARAM_CASTS);
shared sites with different inputs are counted for both, which overstates. The model is first
order and assumes no underflow and no overflow -- in fp16 that is what the loss scale is for:
the `--break loss-scale` variant (scale 2^-8: the gradients of a 256x larger batch, unscaled)
flushes gradients into fp16's subnormals and fails. A parameter whose true gradient is zero (the
attention key bias: softmax ignores a per-row constant) gets pure rounding noise from both; the
model computes that noise too, so it is compared like the rest. This model is also why the
comparison can tell: megac bf16 against the fp16 reference (`--break wrong-precision`) fails.

usage: mixed_precision_test.py --megac build/bin/megac --workdir DIR [--only bf16|fp16]
           [--break loss-scale|bf16-loss|wrong-precision]
--break runs a deliberately wrong variant, which must FAIL (exit 1): loss-scale trains megac
fp16 at loss scale 2^-8; bf16-loss computes the reference's cross entropy on the bf16 logits
(autocast's policy without the f32 loss tail); wrong-precision trains megac in bf16 and compares
it with the fp16 reference. Runs with Debian's /usr/bin/python3 (torch 1.13, onnx, numpy); one
megac thread unless MEGAC_TEST_THREADS says otherwise. Prints each comparison's worst
error/bound (also as `error/bound LABEL: RATIO` lines for scripts/numerics-sweep.py) and
PASS/FAIL per case; ends with "N passed, M failed".
"""
import argparse
import copy
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_test  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402

STEPS = 6
U = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}
LOSS_SCALE = {"bf16": 1.0, "fp16": 2.0 ** 16}  # megac's initial scale (docs/training-step.md)
BROKEN_SCALE = 2.0 ** -8  # --break loss-scale
MC_SAMPLES = 24
LAMBDA_SCALAR = 5.0
LAMBDA_VECTOR = 3.0
# Every parameter element is compared (none may be dropped as non-finite); a floor on the count
# so that an empty or truncated gradient file cannot pass.
MIN_COMPARED = 100_000


# --- where each implementation rounds --------------------------------------------------------------
# Site name -> (forward roundings, backward roundings) in FunctionalGpt below. A site rounds the
# tensor it names in the forward and the gradient with respect to it in the backward; a site of
# (0, k) rounds only the gradient that flows through it (a branch of a sum).
SITES = {
    # megac, read off `megac-opt --mega-input-raise --mega-training-loss
    # --mega-training-precision=precision=bf16 --mega-training-autodiff` on this model: the
    # importer raises the ONNX graph to mega.linear (MatMul + Add: one op, one rounding),
    # mega.attention (QK^T, scale, causal mask, softmax and PV in one f32 kernel: scores and
    # probabilities are never half) and mega.gelu; every parameter is cast to half once (the
    # tied table once, for the embedding and the head); the embedding sum and the residual adds
    # are half ops; LayerNorm runs in f32 on the half stream widened and is cast to half for the
    # next linear; the head's output is cast up for the f32 cross entropy. Backward: every
    # backward op rounds its result once -- linear's dX and db (reduce), gelu_grad,
    # attention_grad's dq/dk/dv, the embedding gradients, the cross entropy's gradient cast to
    # half, LayerNorm's f32 input gradient cast to half (the *.in sites) and each half add of
    # two gradient branches (the residual stream) -- except the weight gradients of the linears
    # and of the head: mega-training-gemm-fusion has each GEMM read its half operands into the
    # f32 gradient accumulator (issue 30), so dW is summed in f32 and never rounded, and the
    # tied table's two gradients meet in f32 (the embedding's rounded scatter widened and added
    # to the accumulator, then the head's GEMM accumulates into it).
    "megac": {
        "param.wte": (0, 0), "param.wte.embed": (1, 1), "param.wte.head": (1, 0),
        "param.wpe": (1, 1), "param.linear.w": (1, 0), "param.linear.b": (1, 1),
        "embed.sum": (1, 1), "ln1.in": (0, 1), "ln1": (1, 1), "qkv": (1, 1),
        "scores": (0, 0), "probs": (0, 0), "attn.y": (1, 1), "proj": (1, 1), "res1": (1, 1),
        "ln2.in": (0, 1), "ln2": (1, 1), "fc": (1, 1), "gelu": (1, 1), "out": (1, 1),
        "res2": (1, 1), "lnf.in": (0, 1), "lnf": (1, 1), "logits": (1, 1),
    },
    # torch.autocast(cpu, bf16) on GptModel (torch 1.13): Linear is one addmm with bf16 weight,
    # bias and input, rounded once; q @ k^T, the softmax and att @ v are separate bf16 ops (the
    # softmax's backward rounds an intermediate too: 2); GELU is one bf16 op; the embeddings, their
    # sum, the residual stream and LayerNorm stay f32 (bf16 + f32 promotes to f32), so only the
    # LayerNorm outputs are rounded (cast for the next Linear) and a bf16 branch's gradient is
    # rounded where it leaves the f32 stream (proj, out); the tied table is cast for the head
    # only, the embedding reads it in f32.
    "autocast": {
        "param.wte": (0, 0), "param.wte.embed": (0, 0), "param.wte.head": (1, 1),
        "param.wpe": (0, 0), "param.linear.w": (1, 1), "param.linear.b": (1, 1),
        "embed.sum": (0, 0), "ln1.in": (0, 0), "ln1": (1, 1), "qkv": (1, 1),
        "scores": (1, 2), "probs": (1, 1), "attn.y": (1, 1), "proj": (1, 1), "res1": (0, 0),
        "ln2.in": (0, 0), "ln2": (1, 1), "fc": (1, 1), "gelu": (1, 1), "out": (1, 1),
        "res2": (0, 0), "lnf.in": (0, 0), "lnf": (1, 1), "logits": (1, 1),
    },
}
# The fp16 reference (the emulation) rounds where megac does.
SITES["emulation"] = dict(SITES["megac"])
# Parameter casts both implementations make (identical inputs, identical results): no forward
# site of their difference. megac's cast of the table for the embedding is megac's alone.
SHARED_PARAM_CASTS = ("param.linear.w", "param.linear.b", "param.wte.head")


class Round(torch.autograd.Function):
    """fwd(x) in the forward, bwd(grad) in the backward."""

    @staticmethod
    def forward(ctx, x, fwd, bwd):
        ctx.bwd = bwd
        return fwd(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.bwd(grad), None, None


def identity(x):
    return x


class Rounding:
    """What happens at a site: nothing (exact arithmetic), a real rounding to `half` (the fp16
    reference), or the error model's random relative perturbation (Monte Carlo)."""

    def __init__(self, sites=None, half=None, u=None, generator=None):
        self.sites, self.half, self.u, self.gen = sites, half, u, generator

    def real(self, x):
        return x.to(self.half).to(x.dtype)

    def perturb(self, count):
        def f(x):
            d = torch.rand(x.shape, dtype=x.dtype, generator=self.gen) * 2 - 1
            return x * (1 + d * (self.u * math.sqrt(count)))
        return f

    def __call__(self, site, x):
        if self.sites is None:
            return x
        fwd_n, bwd_n = self.sites[site]
        if self.half is not None:  # the emulation: real roundings
            fwd = self.real if fwd_n else identity
            bwd = self.real if bwd_n else identity
        else:  # the Monte Carlo model
            if site in SHARED_PARAM_CASTS:
                fwd_n = 0
            fwd = self.perturb(fwd_n) if fwd_n else identity
            bwd = self.perturb(bwd_n) if bwd_n else identity
        if fwd is identity and bwd is identity:
            return x
        return Round.apply(x, fwd, bwd)


class FunctionalGpt(torch.nn.Module):
    """GptModel's forward written out op by op, with a Rounding call at every tensor that megac
    or autocast rounds (SITES). Shares the parameters of `model` (a torch_models.GptModel); with
    Rounding() it is GptModel's forward exactly."""

    def __init__(self, model, rounding):
        super().__init__()
        self.m, self.r = model, rounding

    def linear(self, x, lin, name):
        r = self.r
        y = x @ r("param.linear.w", lin.weight).t() + r("param.linear.b", lin.bias)
        return r(name, y)

    def layer_norm(self, x, ln, name):
        x = self.r(f"{name}.in", x)  # LayerNorm's input gradient, rounded before it joins the sum
        return self.r(name, F.layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps))

    def forward(self, ids):
        m, r = self.m, self.r
        b, t = ids.shape
        wte = r("param.wte", m.wte.weight)  # megac: the sum of the table's two gradients, rounded
        x = r("param.wte.embed", wte)[ids] + r("param.wpe", m.wpe.weight)[:t]
        x = r("embed.sum", x)
        for block in m.h:
            att = block.attn
            qkv = self.linear(self.layer_norm(x, block.ln_1, "ln1"), att.c_attn, "qkv")
            c = x.shape[-1]
            q, k, v = qkv.split(c, dim=2)
            q, k, v = (z.view(b, t, att.heads, c // att.heads).transpose(1, 2) for z in (q, k, v))
            s = r("scores", q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # 0.25: exact
            s = s.masked_fill(att.bias[:, :, :t, :t] == 0, float("-inf"))
            p = r("probs", F.softmax(s, dim=-1))
            y = r("attn.y", p @ v).transpose(1, 2).contiguous().view(b, t, c)
            x = r("res1", x + self.linear(y, att.c_proj, "proj"))
            h = self.linear(self.layer_norm(x, block.ln_2, "ln2"), block.c_fc, "fc")
            h = r("gelu", F.gelu(h))
            x = r("res2", x + self.linear(h, block.c_proj, "out"))
        f = self.layer_norm(x, m.ln_f, "lnf")
        return r("logits", f @ r("param.wte.head", wte).t())


class Autocast(torch.nn.Module):
    """GptModel under torch.autocast(cpu, bf16); the logits go to f32 for the loss unless
    `half_loss` (the broken variant: the cross entropy on bf16 logits)."""

    def __init__(self, model, half_loss=False):
        super().__init__()
        self.m, self.half_loss = model, half_loss

    def forward(self, ids):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.m(ids)
        return logits if self.half_loss else logits.float()


class HalfLogits(torch.nn.Module):
    """`forward`'s logits rounded to bf16 and the cross entropy on them in bf16 (the broken
    variant of the emulated bf16 reference)."""

    def __init__(self, forward):
        super().__init__()
        self.f = forward

    def forward(self, ids):
        return self.f(ids).bfloat16()


# --- the PyTorch training loop (train_test.torch_train's, plus loss scaling and step-1 grads) ----
def train(model, forward, tokens, c, loss_scale=1.0):
    """AdamW as megac (decay on dim >= 2); returns per-step losses, pre-clipping grad norms and
    step 1's (unscaled) gradients by parameter name."""
    names = {id(p): n for n, p in model.named_parameters()}
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2],
                              "weight_decay": c["wd"]},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    tokens = torch.from_numpy(tokens.astype(np.int64))
    n, s = tokens.shape[0], tokens.shape[1] - 1
    big = c["global_batch"]
    assert c["micro_batch"] == big
    losses, norms, grads = [], [], None
    for step in range(c["steps"]):
        rows = [(step * big + j) % n for j in range(big)]
        chunk = tokens[rows]
        opt.zero_grad()
        logits = forward(chunk[:, :s])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                               reduction="sum") / (big * s)
        (loss * loss_scale).backward()
        if any(p.grad is None for p in params):
            raise RuntimeError("a parameter of the reference got no gradient")
        for p in params:
            p.grad /= loss_scale  # a power of two: exact
        if not all(torch.isfinite(p.grad).all() for p in params):
            raise RuntimeError(f"the reference's gradients overflow at step {step + 1}")
        if step == 0:
            grads = {names[id(p)]: p.grad.detach().clone() for p in params}
        norms.append(torch.norm(torch.stack([p.grad.detach().double().norm()
                                             for p in params])).item())
        if c["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, c["clip"])  # clip / (norm + 1e-6), as megac
        losses.append(loss.item())
        opt.step()
        for group in opt.param_groups:
            group["lr"] = train_test.schedule(step + 2, c["steps"], c["lr"], c["schedule"],
                                              c["warmup"], c["min_lr"])
    return losses, norms, grads


def model_deviation(model64, tokens, c, sites, u, samples, seed):
    """The error model: per quantity the mean squared deviation of an implementation rounding at
    `sites` (random relative perturbations, see the module docstring) from exact arithmetic, in
    f64. Returns (losses, norms, grads) mean squared deviations."""
    exact_model = copy.deepcopy(model64)
    e_loss, e_norm, e_grad = train(exact_model, FunctionalGpt(exact_model, Rounding()), tokens, c)
    gen = torch.Generator().manual_seed(seed)
    ms_loss, ms_norm = np.zeros(c["steps"]), np.zeros(c["steps"])
    ms_grad = {k: 0.0 for k in e_grad}
    for _ in range(samples):
        m = copy.deepcopy(model64)
        loss, norm, grad = train(m, FunctionalGpt(m, Rounding(sites, u=u, generator=gen)), tokens, c)
        ms_loss += (np.array(loss) - e_loss) ** 2 / samples
        ms_norm += (np.array(norm) - e_norm) ** 2 / samples
        for k in grad:
            ms_grad[k] += float(((grad[k] - e_grad[k]) ** 2).sum()) / samples
    return ms_loss, ms_norm, ms_grad


# --- the cases -------------------------------------------------------------------------------------
def check_bf16_matmul():
    """The bf16 reference assumes PyTorch's CPU bf16 matmul accumulates in f32 and rounds once
    (as megac's HalfCompute); a kernel that rounds partial sums would add sqrt(K) u per dot
    product that the model does not have. Returns a problem or None."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(32, 256, generator=gen).bfloat16()
    b = torch.randn(256, 48, generator=gen).bfloat16()
    once = (a.float() @ b.float()).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        results = {"Linear": F.linear(a.float(), b.t().float()),
                   "batched matmul": (a.float()[None] @ b.float()[None])[0]}
    for what, got in results.items():
        if got.dtype != torch.bfloat16:
            return f"torch.autocast(cpu, bf16) gives a {got.dtype} {what}, not bfloat16"
        mismatch = (got.float() != once.float()).float().mean().item()
        # f32 sums in another order may round a few results to the neighbouring bf16 value.
        if not mismatch <= 0.01:
            return (f"PyTorch's bf16 {what} differs from the f32 product rounded once in "
                    f"{mismatch:.1%} of the elements: this CPU's bf16 kernel does not accumulate "
                    "in f32 (torch 1.13 uses oneDNN's bf16 GEMM only with AVX-512 BW/VL/DQ)")
    return None


def ratio_line(what, ratios, label):
    """Prints the worst ratio, also as the `error/bound LABEL: RATIO` line that
    scripts/numerics-sweep.py collects."""
    worst = max(ratios, key=lambda kv: kv[1] if not math.isnan(kv[1]) else math.inf)
    ratio = worst[1] if not math.isnan(worst[1]) else math.inf
    print(f"    {what}: worst error/bound {ratio:.3f} ({worst[0]})")
    print(f"    error/bound {label}: {ratio:.3g}")
    return ratio


def compare_scalar(what, got, want, ms_a, ms_b, problems, label):
    """Per step: |got - want| <= LAMBDA_SCALAR * sqrt(ms_a + ms_b) (module docstring)."""
    ratios = []
    for i, (g, w) in enumerate(zip(got, want)):
        bound = LAMBDA_SCALAR * math.sqrt(ms_a[i] + ms_b[i])
        d = abs(g - w) if g is not None and math.isfinite(g) else math.inf
        ratios.append((f"step {i + 1}", d / bound if bound > 0 else math.inf))
        if not d <= bound:
            problems.append(f"step {i + 1}: {what} megac {g!r}, PyTorch {w!r}: |diff| {d:.3e} > "
                            f"bound {bound:.3e}")
    return ratio_line(f"{what} (steps 1..{len(got)})", ratios, label)


def compare_grads(got, want, ms_a, ms_b, problems, label):
    """Step 1's gradients: identical finite masks (all finite: loss scaling exists so that none
    overflows), at least MIN_COMPARED elements, ||diff|| <= LAMBDA_VECTOR * sqrt(ms_a + ms_b)
    per parameter."""
    if set(got) != set(want):
        problems.append(f"gradient tensors {sorted(set(got) ^ set(want))} differ from the model's "
                        "parameters")
    ratios, compared = [], 0
    for name in sorted(set(got) & set(want)):
        g = got[name].astype(np.float64)
        w = want[name].double().numpy()
        if g.shape != w.shape:
            problems.append(f"{name}: megac's gradient is {list(g.shape)}, PyTorch's "
                            f"{list(w.shape)}")
            continue
        fg, fw = np.isfinite(g), np.isfinite(w)
        if not (fg.all() and fw.all()):
            problems.append(f"{name}: {int((~fg).sum())} non-finite gradient elements in megac's "
                            f"run, {int((~fw).sum())} in PyTorch's (the finite masks must be "
                            "identical and full: the loss scale does not overflow)")
            ratios.append((name, math.inf))
            continue
        compared += g.size
        d = float(np.linalg.norm((g - w).ravel()))
        bound = LAMBDA_VECTOR * math.sqrt(ms_a[name] + ms_b[name])
        ratios.append((name, d / bound if bound > 0 else math.inf))
        if not d <= bound:
            problems.append(f"step-1 gradient {name}: ||megac - PyTorch|| = {d:.3e} > bound "
                            f"{bound:.3e} (||PyTorch|| = {np.linalg.norm(w.ravel()):.3e})")
    print(f"    step-1 gradients: {compared} elements of {len(ratios)} tensors compared")
    if compared < MIN_COMPARED:
        problems.append(f"only {compared} gradient elements compared (< {MIN_COMPARED})")
    return ratio_line("step-1 gradients ||diff||", ratios, label) if ratios else math.inf


def mixed_case(megac, workdir, precision, broken=None, bf16_reference="autocast"):
    problems = []
    megac_precision = "bf16" if broken == "wrong-precision" else precision
    if precision == "bf16" and bf16_reference == "autocast":
        problem = check_bf16_matmul()
        if problem:
            print(f"    NOTE: {problem}; the bf16 reference is autocast's rounding policy "
                  "emulated with f32 kernels (FunctionalGpt, SITES['autocast'])")
            bf16_reference = "emulated"
    model, onnx_path = train_test.make_gpt(workdir, torch.float32)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, train_test.VOCAB, size=(train_test.ROWS, train_test.SEQ + 1))
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, tokens)
    c = train_test.mixed_config(megac_precision, steps=STEPS)
    grads_path = os.path.join(workdir, "grads.safetensors")
    # One thread unless MEGAC_TEST_THREADS says otherwise (scripts/numerics-sweep.py).
    extra = ["--threads", os.environ.get("MEGAC_TEST_THREADS", "1"), "--save-grads", grads_path]
    if broken == "loss-scale":
        # The gradients of a batch 256x larger (the loss is a mean) without loss scaling.
        extra += ["--initial-loss-scale", repr(BROKEN_SCALE), "--min-loss-scale",
                  repr(BROKEN_SCALE)]
    records, _, _ = train_test.megac_train(megac, [onnx_path], data, workdir, c, extra)
    if [r["step"] for r in records] != list(range(1, STEPS + 1)):
        return [f"megac logged steps {[r['step'] for r in records]}, expected 1..{STEPS}"]
    scale = records[0]["loss_scale"]
    want_scale = LOSS_SCALE[precision] if broken != "loss-scale" else BROKEN_SCALE
    if megac_precision == precision:
        for r in records:
            if r["loss_scale"] != want_scale or r["skipped"] is not False:
                problems.append(f"step {r['step']}: loss_scale {r['loss_scale']}, skipped "
                                f"{r['skipped']} (expected {want_scale:g}, false)")
    megac_grads = {k: v.astype(np.float64) / scale for k, v in read_safetensors(grads_path).items()}

    # The reference run.
    ref = copy.deepcopy(model)
    if precision == "bf16" and bf16_reference == "autocast":
        forward = Autocast(ref, half_loss=broken == "bf16-loss")
        ref_sites = SITES["autocast"]
    elif precision == "bf16":
        forward = FunctionalGpt(ref, Rounding(SITES["autocast"], half=torch.bfloat16))
        if broken == "bf16-loss":
            forward = HalfLogits(forward)
        ref_sites = SITES["autocast"]
    else:
        forward = FunctionalGpt(ref, Rounding(SITES["emulation"], half=torch.float16))
        ref_sites = SITES["emulation"]
    c_ref = dict(c, precision=precision)
    losses, norms, grads = train(ref, forward, tokens, c_ref, LOSS_SCALE[precision])

    # The error model (module docstring): each implementation's mean squared deviation.
    model64 = copy.deepcopy(model).double()
    u = U[precision]
    ms_megac = model_deviation(model64, tokens, c_ref, SITES["megac"], u, MC_SAMPLES, seed=11)
    ms_ref = model_deviation(model64, tokens, c_ref, ref_sites, u, MC_SAMPLES, seed=12)
    ref_name = {"bf16": f"bf16 {bf16_reference}", "fp16": "fp16 policy"}[precision]
    print(f"    megac {megac_precision} vs PyTorch {ref_name}: "
          f"step 1 loss {records[0]['loss']:.6f} vs {losses[0]:.6f}, step {STEPS} "
          f"{records[-1]['loss']:.6f} vs {losses[-1]:.6f}; loss scale {scale:g}")
    print(f"    model sigma (megac, reference): step-1 loss {math.sqrt(ms_megac[0][0]):.2e}, "
          f"{math.sqrt(ms_ref[0][0]):.2e}; step {STEPS} loss {math.sqrt(ms_megac[0][-1]):.2e}, "
          f"{math.sqrt(ms_ref[0][-1]):.2e}")
    compare_scalar("loss", [r["loss"] for r in records], losses, ms_megac[0], ms_ref[0], problems,
                   f"{precision} losses against PyTorch")
    compare_scalar("grad_norm", [r["grad_norm"] for r in records], norms, ms_megac[1], ms_ref[1],
                   problems, f"{precision} grad_norms against PyTorch")
    compare_grads(megac_grads, grads, ms_megac[2], ms_ref[2], problems,
                  f"{precision} step-1 gradients against PyTorch")
    return problems


def partition_sigmas():
    """The error model's relative standard deviations for partition_equivalence.py's mixed
    group (its TOLERANCES bf16/fp16 entries cite these numbers): megac's sites on a GptModel of
    the suite's GPT shape (layers 4, hidden 16, heads 4, seq 8, vocab 32), global batch 8, 10
    steps, lr 1e-3, weight decay 0.1, clip 1.0, random tokens."""
    from torch_models import GptModel
    torch.manual_seed(3)
    model = GptModel(layers=4, hidden=16, heads=4, seq=8, vocab=32).double()
    tokens = np.random.default_rng(7).integers(0, 32, size=(64, 9))
    c = dict(steps=10, global_batch=8, micro_batch=8, lr=1e-3, schedule="constant", warmup=0,
             min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.1, clip=1.0)
    exact = copy.deepcopy(model)
    loss, norm, grad = train(exact, FunctionalGpt(exact, Rounding()), tokens, c)
    for precision in ("bf16", "fp16"):
        ms_loss, ms_norm, ms_grad = model_deviation(model, tokens, c, SITES["megac"], U[precision],
                                                    MC_SAMPLES, seed=11)
        rel_grad = max(math.sqrt(ms_grad[k]) / float(grad[k].norm()) for k in grad
                       if float(grad[k].norm()) > 0)
        print(f"{precision}: sigma/|loss| {max(np.sqrt(ms_loss) / loss):.3g}, sigma/grad_norm "
              f"{max(np.sqrt(ms_norm) / norm):.3g} (max over steps), step-1 sigma/||g|| "
              f"{rel_grad:.3g} (max over tensors)")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac")
    parser.add_argument("--workdir")
    parser.add_argument("--only", choices=["bf16", "fp16"])
    parser.add_argument("--partition-sigmas", action="store_true",
                        help="print the error model's numbers behind partition_equivalence.py's "
                        "bf16/fp16 tolerances and exit")
    parser.add_argument("--bf16-reference", choices=["autocast", "emulated"], default="autocast",
                        help="emulated: autocast's rounding policy with f32 kernels (the "
                        "fallback where PyTorch's CPU bf16 matmul does not accumulate in f32)")
    parser.add_argument("--break", dest="broken",
                        choices=["loss-scale", "bf16-loss", "wrong-precision"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.partition_sigmas:
        return partition_sigmas()
    if not (args.megac and args.workdir):
        parser.error("--megac and --workdir are required")
    cases = {"bf16": "bf16", "fp16": "fp16"}
    if args.broken:
        cases = {"loss-scale": "fp16", "bf16-loss": "bf16", "wrong-precision": "fp16"}
        cases = {f"{cases[args.broken]}-broken-{args.broken}": cases[args.broken]}
    passed = failed = 0
    for name, precision in cases.items():
        if args.only and args.only != precision:
            continue
        workdir = os.path.join(args.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        print(f"{name}:")
        sys.stdout.flush()
        try:
            problems = mixed_case(args.megac, workdir, precision, args.broken,
                                  args.bf16_reference)
        except RuntimeError as e:
            problems = [str(e)]
        print(f"{'PASS' if not problems else 'FAIL'}: {name}")
        for p in problems:
            print(f"    {p}")
        sys.stdout.flush()
        passed += not problems
        failed += bool(problems)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
