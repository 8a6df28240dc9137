"""End-to-end training: `megac train` on a PyTorch-exported GPT gives PyTorch's AdamW run, step
by step, and zoo GPT/BERT models train from the CLI.

Each GPT case exports torch_models.GptModel (do_constant_folding=False, TrainingMode.TRAINING, so
parameter names and the tied head survive; a symbolic batch dim that megac binds to the
micro-batch), writes random tokens [N, S+1], trains N steps in PyTorch (the same row order:
step i reads rows (i*B + j) mod N; loss = mean cross-entropy over the global batch; AdamW with
weight decay on parameters of dim >= 2 only; the lr schedule of runtime/train/LrSchedule.h) and
with `megac train ... --log-json --save-weights`. It checks
  - each step's loss: |megac - torch| <= 1e-4 * |torch|  (fp32; 1e-9 in fp64),
  - each step's grad_norm within 1e-4 relative (1e-9 in fp64) and lr equal to the schedule,
  - step 1's gradients (--save-grads): ||megac - torch|| <= 1e-4 ||g|| + 1e-8 sqrt(numel)
    (fp64: 1e-9 and 1e-12),
  - each final parameter: ||megac - torch|| <= 1e-4 * ||torch|| + 1e-6 * sqrt(numel)
    (fp64: 1e-9 and 1e-12) + 2·lr·T·||dg / (|g| + eps)|| (adam_bounds: the step-1 gradient
    difference dg carried through AdamW).
Error model of the fp32 bounds: megac and PyTorch compute the same formulas with other sum
orders and other exp/tanh/erf (1-2 ulp), so each of the D ~ 40 ops of a step (forward and
backward) adds a relative error of about sqrt(K)·u for its K-term sums (K <= 256 here,
u = 2^-24 = 6e-8), independent between ops: sqrt(D)·sqrt(K)·u ~ 6e-6 on the loss, grad_norm and
gradients. 1e-4 leaves a margin over 10 on that. A parameter after T AdamW steps moves by
lr·sum_t du_t, where du (the change of m/(sqrt(v) + eps)) is at most twice the gradient's
relative error, ~1e-5: lr·T·2e-5 <= 4e-7 per element for lr 1e-3 and T 20, inside the 1e-6
absolute term (with margin over 2 even if every element moved that much). But elements whose
gradient is near eps, or zero in exact arithmetic (a key bias: softmax ignores a per-row
constant) and so pure roundoff, have Adam amplify their difference by up to 1/eps, however small
it is: that part is measured, not assumed (adam_bounds, from the step-1 gradients of both runs,
which are themselves held to the gradient bound). The fp64 layout bounds: numerics.py.
scripts/numerics-sweep.py runs this test under other OpenBLAS kernels and thread counts and
prints each bound's worst error/bound ratio (the `error/bound` lines).
The mixed-precision cases train the same GPT with --precision bf16 and fp16 and check every
step's loss against megac's fp32 run (within 2% at the last step, 3% at every step); the fp16
overflow case starts from --initial-loss-scale 2^40 and checks that every overflowing step is
skipped, that the scale follows Megatron's DynamicGradScaler (kept at the first overflow, halved
from the second on), and that the clean steps after it lower the loss.
The zoo cases train a few steps on learnable token sequences and check that every loss is finite
and the second half's mean is below the first half's. The error cases check the CLI's one-line
errors and exit codes.

usage: train_test.py --megac build/bin/megac --workdir DIR [--only NAME]
Runs with Debian's /usr/bin/python3 (torch 1.13, onnx 1.12, numpy). Prints PASS/FAIL per case
and ends with "N passed, M failed".
"""
import argparse
import copy
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from torch_models import GptModel  # noqa: E402

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 2, 64, 4, 16, 128
ROWS = 24  # fewer than steps * batch: the row order wraps around


from safetensors_np import read_safetensors  # noqa: E402


# --- the PyTorch reference -----------------------------------------------------------------------
def schedule(step, total, lr, kind, warmup, min_lr):
    """runtime/train/LrSchedule.h: the lr of 1-based step `step`."""
    if step <= warmup:
        return lr * step / warmup
    if kind == "constant":
        return lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def accumulate_gradients(model, tokens, c, step):
    """The gradients of 0-based step `step`'s loss accumulated into `model`'s .grad (the rows
    (step*B + j) mod N, micro-batches of c["torch_micro_batch"], mean cross-entropy over the
    global batch); returns the loss."""
    n, s = tokens.shape[0], tokens.shape[1] - 1
    big, micro = c["global_batch"], c["torch_micro_batch"]
    rows = [(step * big + j) % n for j in range(big)]
    total = 0.0
    for k in range(big // micro):
        chunk = tokens[rows[k * micro:(k + 1) * micro]]
        logits = model(chunk[:, :s])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                               reduction="sum") / (big * s)
        loss.backward()
        total += loss.item()
    return total


def torch_step1_grads(model, tokens, c):
    """Step 1's gradients in PyTorch by parameter name; `model` is left as it was."""
    m = copy.deepcopy(model)
    accumulate_gradients(m, torch.from_numpy(tokens.astype(np.int64)), c, 0)
    return {name: p.grad.detach().numpy().copy() for name, p in m.named_parameters()}


def adam_bounds(megac_grads, torch_grads, c):
    """Per parameter, how far AdamW may carry a step-1 gradient difference in c["steps"] steps:
    2·lr·T·||dg / (|g| + eps)||.

    Error model: at step 1 Adam's direction is g / (|g| + eps), which a gradient difference dg
    moves by eps·|dg| / (|g| + eps)^2 <= |dg| / (|g| + eps): near-zero gradients (|g| ~ eps, or
    exactly zero ones that are pure roundoff) amplify their difference by up to 1/eps, however
    small it is relative to the tensor. Later steps divide averages of gradients whose
    differences start at dg by sqrt(v) + eps >= that again; the factor 2 covers the m and v
    paths, T the steps, lr the step size (the schedule's peak). The step-1 gradient difference
    itself is bounded separately (check_step1_grads), so this term cannot hide a wrong gradient,
    only carry an allowed one through the optimizer."""
    bounds = {}
    for name, want in torch_grads.items():
        if name not in megac_grads:
            continue
        g = want.astype(np.float64)
        dg = megac_grads[name].astype(np.float64) - g
        if dg.shape != g.shape or not np.isfinite(dg).all():
            continue  # check_step1_grads reports it
        bounds[name] = 2 * c["lr"] * c["steps"] * float(
            np.linalg.norm((dg / (np.abs(g) + c["eps"])).ravel()))
    return bounds


def check_step1_grads(megac_grads, torch_grads, rtol, atol):
    """megac's step-1 gradients (--save-grads) against PyTorch's: the problems."""
    problems, worst, name = numerics.compare_tensors(megac_grads, torch_grads, rtol, atol,
                                                     "step-1 gradient")
    print(f"    error/bound step-1 gradients against torch: {worst:.3g} ({name})")
    return problems


def torch_train(model, tokens, c):
    """Trains `model` in place; returns per-step losses and pre-clipping gradient norms."""
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["wd"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: schedule(i + 1, c["steps"], c["lr"], c["schedule"], c["warmup"],
                                c["min_lr"]) / c["lr"])
    tokens = torch.from_numpy(tokens.astype(np.int64))
    losses, norms = [], []
    for step in range(c["steps"]):
        opt.zero_grad()
        total = accumulate_gradients(model, tokens, c, step)
        norm = torch.norm(torch.stack([p.grad.detach().norm() for p in params])).item()
        if c["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, c["clip"])
        opt.step()
        sched.step()
        losses.append(total)
        norms.append(norm)
    return losses, norms


# --- megac ---------------------------------------------------------------------------------------
def run(argv):
    return subprocess.run(argv, capture_output=True, text=True)


def megac_train(megac, model_args, data, workdir, c, extra=()):
    log = os.path.join(workdir, "log.jsonl")
    weights = os.path.join(workdir, "final.safetensors")
    argv = [megac, "train", *model_args, "--data", data, "--steps", str(c["steps"]),
            "--global-batch", str(c["global_batch"]), "--micro-batch", str(c["micro_batch"]),
            "--lr", repr(c["lr"]), "--lr-schedule", c["schedule"],
            "--warmup-steps", str(c["warmup"]), "--adam-beta1", repr(c["beta1"]),
            "--adam-beta2", repr(c["beta2"]), "--adam-eps", repr(c["eps"]),
            "--weight-decay", repr(c["wd"]), "--clip-grad", repr(c["clip"]), "--seed", "0",
            "--precision", c["precision"], *numerics.threads_args(), "--log-json", log,
            "--save-weights", weights, *extra]
    if c["schedule"] == "cosine":
        argv += ["--min-lr", repr(c["min_lr"])]
    result = run(argv)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    with open(log) as f:
        records = [json.loads(line) for line in f]
    return records, weights, result.stdout


def check_records(records, c, want_losses, want_norms, loss_rtol, norm_rtol):
    problems = []
    if [r["step"] for r in records] != list(range(1, c["steps"] + 1)):
        return [f"log has steps {[r['step'] for r in records]}, expected 1..{c['steps']}"]
    for key in ("loss", "lr", "grad_norm", "loss_scale", "skipped", "tokens_per_s",
                "step_time_s"):
        if any(key not in r for r in records):
            problems.append(f"a log record lacks '{key}'")
    if problems:
        return problems
    worst = worst_norm = 0.0
    for r, want, norm in zip(records, want_losses, want_norms):
        # numerics.relative is inf for a non-finite value, and `not x <= tol` fails on NaN.
        rel = numerics.relative(r["loss"], want)
        worst = max(worst, rel)
        if not rel <= loss_rtol:
            problems.append(f"step {r['step']}: loss {r['loss']:.9g}, torch {want:.9g} "
                            f"(relative {rel:.2e} > {loss_rtol})")
        rel_norm = numerics.relative(r["grad_norm"], norm)
        worst_norm = max(worst_norm, rel_norm)
        if not rel_norm <= norm_rtol:
            problems.append(f"step {r['step']}: grad_norm {r['grad_norm']:.9g}, torch {norm:.9g}")
        lr = schedule(r["step"], c["steps"], c["lr"], c["schedule"], c["warmup"], c["min_lr"])
        if abs(r["lr"] - lr) > 1e-12 * lr:
            problems.append(f"step {r['step']}: lr {r['lr']!r}, schedule {lr!r}")
        if r["loss_scale"] != 1 or r["skipped"] is not False:
            problems.append(f"step {r['step']}: loss_scale {r['loss_scale']}, skipped "
                            f"{r['skipped']} (expected 1, false)")
        if not (r["tokens_per_s"] > 0 and r["step_time_s"] > 0):
            problems.append(f"step {r['step']}: tokens_per_s {r['tokens_per_s']}, step_time_s "
                            f"{r['step_time_s']}")
    print(f"    losses: max relative difference {worst:.2e} over {len(records)} steps "
          f"(first {records[0]['loss']:.6f}, last {records[-1]['loss']:.6f}); grad_norm: "
          f"{worst_norm:.2e}")
    print(f"    error/bound losses against torch: {worst / loss_rtol:.3g}")
    print(f"    error/bound grad_norms against torch: {worst_norm / norm_rtol:.3g}")
    return problems


def check_layout_losses(records, reference, rtol):
    """A partitioned run's losses against the one-rank run's (a layout only reassociates the
    partial sums): the problems and the worst relative difference."""
    problems, worst = [], 0.0
    if len(records) != len(reference):
        problems.append(f"{len(records)} logged steps, the one-rank run {len(reference)}")
    for a, b in zip(records, reference):
        rel = numerics.relative(a["loss"], b["loss"])
        worst = max(worst, rel)
        if not rel <= rtol:
            problems.append(f"step {a['step']}: loss {a['loss']!r} vs one rank {b['loss']!r}")
    return problems, worst


def check_params(model, weights_path, dtype, rtol, atol, adam=None):
    """Final parameters against `model`'s: ||megac - torch|| <= rtol ||p|| + atol sqrt(n), plus
    adam[name] (adam_bounds: the step-1 gradient difference carried through AdamW) when given."""
    adam = adam or {}
    got = read_safetensors(weights_path)
    problems = []
    worst_name, worst = None, 0.0
    names = dict(model.named_parameters())
    if set(got) != set(names):
        problems.append(f"saved tensors {sorted(set(got) ^ set(names))} differ from the model's "
                        "parameters")
    for name, p in names.items():
        if name not in got:
            continue
        want = p.detach().numpy()
        if got[name].shape != want.shape or got[name].dtype != dtype:
            problems.append(f"{name}: saved {got[name].dtype} {got[name].shape}, expected "
                            f"{np.dtype(dtype)} {want.shape}")
            continue
        diff = np.linalg.norm((got[name].astype(np.float64) - want.astype(np.float64)).ravel())
        bound = rtol * np.linalg.norm(want.astype(np.float64).ravel()) + atol * math.sqrt(want.size)
        bound += adam.get(name, 0.0)
        ratio = diff / bound if np.isfinite(diff) else math.inf
        if ratio > worst or worst_name is None:
            worst_name, worst = name, ratio
        if not diff <= bound:
            problems.append(f"{name}: ||megac - torch|| = {diff:.3g} > {bound:.3g}")
    print(f"    parameters: worst ||dp|| / bound = {worst:.3f} ({worst_name})")
    print(f"    error/bound parameters against torch: {worst:.3g} ({worst_name})")
    return problems


def make_gpt(workdir, dtype):
    torch.manual_seed(1234)
    model = GptModel(layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq=SEQ, vocab=VOCAB)
    onnx_path = os.path.join(workdir, "model.onnx")
    ids = torch.randint(0, VOCAB, (2, SEQ), dtype=torch.long)
    torch.onnx.export(model, (ids,), onnx_path, input_names=["input_ids"],
                      output_names=["logits"], opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"input_ids": {0: "batch"}})
    return model.to(dtype), onnx_path


def gpt_case(megac, workdir, overrides):
    c = dict(steps=20, global_batch=4, micro_batch=4, torch_micro_batch=None, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-8,
             wd=0.1, clip=0.0, precision="fp32", token_dtype=np.int64)
    c.update(overrides)
    if c["torch_micro_batch"] is None:
        c["torch_micro_batch"] = c["micro_batch"]
    fp64 = c["precision"] == "fp64"
    dtype = torch.float64 if fp64 else torch.float32
    model, onnx_path = make_gpt(workdir, dtype)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, VOCAB, size=(ROWS, SEQ + 1)).astype(c["token_dtype"])
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, tokens)
    grads_path = os.path.join(workdir, "grads.safetensors")
    records, weights, _ = megac_train(megac, [onnx_path], data, workdir, c,
                                      ["--save-grads", grads_path])
    megac_grads, torch_grads = read_safetensors(grads_path), torch_step1_grads(model, tokens, c)
    reference = copy.deepcopy(model)
    losses, norms = torch_train(reference, tokens, c)
    problems = check_records(records, c, losses, norms, 1e-9 if fp64 else 1e-4,
                             1e-9 if fp64 else 1e-4)
    problems += check_step1_grads(megac_grads, torch_grads, 1e-9 if fp64 else 1e-4,
                                  1e-12 if fp64 else 1e-8)
    if c["clip"] > 0 and not any(n > c["clip"] for n in norms):
        problems.append(f"no step's gradient norm exceeds --clip-grad {c['clip']}: the case does "
                        "not test clipping")
    problems += check_params(reference, weights, np.float64 if fp64 else np.float32,
                             1e-9 if fp64 else 1e-4, 1e-12 if fp64 else 1e-6,
                             adam_bounds(megac_grads, torch_grads, c))
    return problems


def gpt_run(megac, workdir, c, extra=()):
    """megac train on the exported GPT and the random tokens of gpt_case; the log records."""
    os.makedirs(workdir, exist_ok=True)
    _, onnx_path = make_gpt(workdir, torch.float32)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, VOCAB, size=(ROWS, SEQ + 1)).astype(np.int64)
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, tokens)
    records, _, stdout = megac_train(megac, [onnx_path], data, workdir, c, extra)
    return records, stdout


def mixed_config(precision, steps=20):
    return dict(steps=steps, global_batch=4, micro_batch=4, lr=1e-3, schedule="constant",
                warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.1, clip=0.0,
                precision=precision)


def mixed_case(megac, workdir, precision):
    """bf16/fp16 losses stay within 2% of the fp32 run at the last step, 3% all along."""
    reference, _ = gpt_run(megac, os.path.join(workdir, "fp32"), mixed_config("fp32"))
    records, _ = gpt_run(megac, workdir, mixed_config(precision))
    problems = []
    if len(records) != len(reference):
        return [f"{len(records)} steps logged, expected {len(reference)}"]
    rel = [abs(r["loss"] - f["loss"]) / abs(f["loss"]) for r, f in zip(records, reference)]
    print(f"    {precision} vs fp32 loss: step 1 {records[0]['loss']:.5f} vs "
          f"{reference[0]['loss']:.5f}, step {len(records)} {records[-1]['loss']:.5f} vs "
          f"{reference[-1]['loss']:.5f}; relative difference last {rel[-1]:.2e}, max "
          f"{max(rel):.2e}; skipped steps {sum(r['skipped'] for r in records)}")
    if rel[-1] > 0.02:
        problems.append(f"step {len(records)}: loss {records[-1]['loss']:.6f} differs from fp32's "
                        f"{reference[-1]['loss']:.6f} by {rel[-1]:.2%} > 2%")
    for r, f, d in zip(records, reference, rel):
        if d > 0.03:
            problems.append(f"step {r['step']}: loss {r['loss']:.6f}, fp32 {f['loss']:.6f} "
                            f"({d:.2%} > 3%)")
    if precision == "bf16" and any(r["loss_scale"] != 1 or r["skipped"] for r in records):
        problems.append("bf16 logged a loss scale or a skipped step")
    if precision == "fp16" and records[0]["loss_scale"] != 65536:
        problems.append(f"fp16 started with loss_scale {records[0]['loss_scale']}, not 65536")
    return problems


def megatron_scales(initial, overflows, window=1000, hysteresis=2, minimum=1.0):
    """The scale each step uses under Megatron's DynamicGradScaler, given the overflow flags."""
    scale, growth, tracker, out = initial, 0, hysteresis, []
    for overflow in overflows:
        out.append(scale)
        if overflow:
            growth, tracker = 0, tracker - 1
            if tracker <= 0:
                scale = max(scale * 0.5, minimum)
        else:
            growth += 1
            if growth == window:
                growth, tracker, scale = 0, hysteresis, scale * 2
    return out


def overflow_case(megac, workdir):
    """fp16 from loss scale 2^40: overflowing steps are skipped until the scale fits."""
    c = mixed_config("fp16", steps=45)
    records, stdout = gpt_run(megac, workdir, c, ["--initial-loss-scale", str(2.0 ** 40)])
    skipped = [r["skipped"] for r in records]
    scales = [r["loss_scale"] for r in records]
    first_clean = skipped.index(False) if False in skipped else len(skipped)
    print(f"    {first_clean} overflowing steps skipped; scales "
          f"{' '.join(f'2^{math.log2(x):g}' for x in scales[:first_clean + 2])}")
    for line in stdout.splitlines():
        if line.startswith("step ") and ("skipped" in line or line.startswith(
                f"step {first_clean + 1}/")):
            print(f"    | {line}")
    problems = []
    if first_clean < 3:
        problems.append(f"only {first_clean} steps overflowed from 2^40; the case tests nothing")
    if first_clean >= len(records) - 5:
        problems.append(f"{first_clean} of {len(records)} steps overflowed: too few clean ones")
    later = sum(skipped[first_clean:])
    if later > (len(records) - first_clean) // 4:
        problems.append(f"{later} steps overflowed after the first clean one: "
                        f"{[r['step'] for r in records if r['skipped']]}")
    # A skipped step leaves the parameters alone: the same rows give the same loss again.
    period = ROWS // c["global_batch"]
    for a, b in zip(records, records[period:]):
        if a["skipped"] and b["step"] <= first_clean and a["loss"] != b["loss"]:
            problems.append(f"steps {a['step']} and {b['step']} read the same rows after skipped "
                            f"steps but have losses {a['loss']!r} and {b['loss']!r}")
    want = megatron_scales(2.0 ** 40, skipped)
    if scales != want:
        problems.append(f"logged scales {scales} differ from Megatron's {want}")
    if len(scales) > 2 and not (scales[1] == scales[0] and scales[2] == scales[0] / 2):
        problems.append(f"scales {scales[:3]}: expected the first overflow to keep the scale and "
                        "the second to halve it")
    for r in records[:first_clean]:
        if math.isfinite(r["grad_norm"] if r["grad_norm"] is not None else math.inf):
            problems.append(f"step {r['step']} is skipped with a finite grad_norm")
    clean = [r["loss"] for r in records[first_clean:] if not r["skipped"]]
    if len(clean) >= 4 and not (np.mean(clean[len(clean) // 2:]) < np.mean(clean[:len(clean) // 2])
                                and clean[-1] < clean[0]):
        problems.append(f"the clean steps' loss does not decrease: {clean}")
    return problems


def learnable_tokens(rows, seq, vocab, seed):
    """Arithmetic sequences mod (vocab - 1) (vocab - 1 is BERT's mask token): learnable."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocab - 1, size=(rows, 1))
    stride = rng.integers(1, 4, size=(rows, 1))
    return ((start + stride * np.arange(seq + 1)) % (vocab - 1)).astype(np.int32)


def zoo_case(megac, workdir, spec, steps=12):
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, learnable_tokens(16, 16, 64, seed=3))
    c = dict(steps=steps, global_batch=8, micro_batch=4, lr=3e-3, schedule="cosine", warmup=2,
             min_lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.01, clip=1.0, precision="fp32")
    records, weights, _ = megac_train(megac, ["--model", spec], data, workdir, c)
    losses = [r["loss"] for r in records]
    print(f"    losses: {' '.join(f'{x:.3f}' for x in losses)}")
    problems = []
    if len(losses) != steps or not all(math.isfinite(x) for x in losses):
        problems.append(f"expected {steps} finite losses, got {losses}")
    elif np.mean(losses[steps // 2:]) >= np.mean(losses[:steps // 2]):
        problems.append("the loss does not decrease on average: second half mean "
                        f"{np.mean(losses[steps // 2:]):.4f} >= first half "
                        f"{np.mean(losses[:steps // 2]):.4f}")
    if not read_safetensors(weights):
        problems.append("--save-weights wrote no tensors")
    return problems


def error_case(megac, workdir, extra, expect):
    """`megac train` with a bad setting exits non-zero with a message containing `expect`."""
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, learnable_tokens(8, 16, 64, seed=4))
    argv = [megac, "train", "--model", f"gpt:layers=1,hidden=32,heads=2,seq=16,vocab=64",
            "--data", data, "--steps", "3", "--lr", "1e-3", *numerics.threads_args(), *extra]
    result = run(argv)
    output = result.stdout + result.stderr
    if result.returncode == 0:
        return [f"exit 0, expected an error containing {expect!r}:\n{output}"]
    if expect not in output:
        return [f"exit {result.returncode}; the output lacks {expect!r}:\n{output}"]
    print(f"    {output.strip().splitlines()[-1]}")
    return []


def cases():
    yield "gpt-plain", lambda m, w: gpt_case(m, w, {})
    yield "gpt-clip-cosine", lambda m, w: gpt_case(
        m, w, dict(clip=1.0, schedule="cosine", warmup=5, lr=3e-3, min_lr=3e-4,
                   token_dtype=np.int32))
    yield "gpt-accumulation", lambda m, w: gpt_case(
        m, w, dict(global_batch=8, micro_batch=2, torch_micro_batch=8))
    yield "gpt-fp64", lambda m, w: gpt_case(m, w, dict(precision="fp64", steps=8))
    yield "gpt-bf16", lambda m, w: mixed_case(m, w, "bf16")
    yield "gpt-fp16", lambda m, w: mixed_case(m, w, "fp16")
    yield "gpt-fp16-overflow", overflow_case
    yield "zoo-gpt", lambda m, w: zoo_case(m, w, "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=64")
    yield "zoo-bert", lambda m, w: zoo_case(m, w,
                                            "bert:layers=2,hidden=64,heads=4,seq=16,vocab=64")
    yield "error-batch-split", lambda m, w: error_case(
        m, w, ["--global-batch", "6", "--micro-batch", "4"], "not divisible by the micro-batch")
    yield "error-loss-scale-fp32", lambda m, w: error_case(
        m, w, ["--global-batch", "4", "--micro-batch", "4", "--initial-loss-scale", "1024"],
        "applies to --precision fp16")
    yield "error-nan-loss", lambda m, w: error_case(
        m, w, ["--global-batch", "4", "--micro-batch", "4", "--lr", "1e30"], "at step 2")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    passed = failed = 0
    for name, case in cases():
        if args.only and args.only != name:
            continue
        workdir = os.path.join(args.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        print(f"{name}:")
        try:
            problems = case(args.megac, workdir)
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
