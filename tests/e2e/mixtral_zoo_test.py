"""The zoo's Mixtral (`--model mixtral:...`) against transformers' MixtralForCausalLM with the same
weights: megac's initial weights (seeded, written by a one-step run at lr 0) are loaded into a
MixtralForCausalLM of the same config (names: "model." + megac's name, lm_head.weight as is;
megac stacks each layer's experts along a leading dim of size E, transformers' expert X is
stacked[X]; per-expert names are accepted as well), and

  - forward: `megac run` logits vs MixtralForCausalLM logits, |diff| <= 1e-6 * max|logit| + 1e-7
    (llama_zoo_test's bound), for an untied GQA model with 4 experts, top-2, and a tied one with
    8 heads on 2 kv heads, 8 experts, top-2, rope_theta 500000, norm_eps 1e-6;
  - step 1 with the auxiliary loss (--moe-aux-loss-coeff 0.01; an lr-0 step): the loss (the
    language-model cross-entropy only) within 1e-5 relative of PyTorch's, `moe_aux_loss` within
    1e-5 relative of the reference below, `moe_load` and `moe_dropped` equal, and every gradient
    of CE + aux (--save-grads) within ||g - g_torch|| <= 1e-5 ||g_torch|| + 1e-8 sqrt(n);
    dropless and with capacity=1.0 (which drops assignments at these sizes);
  - training: 10 AdamW steps, dropless, aux coefficient 0, against transformers' own
    MixtralForCausalLM trained by train_test.py's reference loop: every loss and grad_norm
    within 1e-4 relative, every final parameter within 1e-4 ||p|| + 1e-6 sqrt(n), and the
    routing identical at every step and layer: megac's `moe_load` (per layer, per expert, the
    number of (token, choice) assignments over the global batch) equals the loads of the top-k
    choices recorded by forward hooks on each layer's `block_sparse_moe.gate`. The smallest
    gap between the k-th and (k+1)-th router probability over all steps, layers and tokens is
    printed (a gap under 1e-6 is flagged as a near tie: fp32 roundoff could then flip a choice);
  - aux loss and capacity: 3 AdamW steps with coefficient 0.01, dropless and capacity=1.0,
    against the same model with megac's MoE block (MoeReference: HF's parameters, megac's aux
    loss and capacity rule) and the objective CE + aux: losses and grad norms within 1e-4
    relative, `moe_aux_loss` within 1e-4 relative, `moe_load` and `moe_dropped` equal, final
    parameters within the training bound;
  - layouts against the one-rank runs: the dropless 10 steps on --ranks 4 --tp 2 --dp 2 and on
    --ranks 4 --dp 4 --ep 4 (each rank one expert), the capacity 3 steps on --ranks 4 --tp 2
    --dp 2 --ep 2, each in fp64 against one rank in fp64 (numerics.layout_check: losses, aux,
    step-1 gradients and final parameters within fp64 reassociation bounds, loads and drops
    equal). fp32 layouts would need a bound per parameter: a last-bit difference in a near-zero
    gradient moves its Adam steps by up to lr, and which bit differs depends on the CPU.
The fp32 bounds against PyTorch have train_test.py's error model.

megac's auxiliary loss (Megatron's switch load-balancing loss, statistics per sequence): for layer
l and a sequence of S tokens, p = softmax(router logits) [S, E] in fp32, m = the 0/1 top-k mask
[S, E] after capacity dropping; aux_{l,row} = coeff * E / (k * S^2) * sum_e (sum_s p[s,e]) *
(sum_s m[s,e]); the objective adds the mean over the global batch's sequences of sum_l aux_{l,row};
gradients flow through p only. Capacity (spec key capacity=F): per sequence and expert
C = ceil(F * S * k / E); assignments are kept in token order while the expert's running count
is <= C; a dropped assignment's gate (renormalised over the k choices before dropping) is 0.
`moe_load` counts the assignments each expert received (after capacity dropping), `moe_dropped`
those capacity dropped; dropless, the loads sum to rows * S * k per layer.

usage: mixtral_zoo_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it) and mpirun for the layout case (without it the rest
runs and the test exits 77, a skip).
"""
import json
import math
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from hf_models_test import venv_test_args  # noqa: E402
from llama_zoo_test import logits_module, run, tensor_problems  # noqa: E402

SEQ, VOCAB, ROWS = 16, 128, 24
NEAR_TIE = 1e-6
COEFF = 0.01
GQA = dict(layers=2, hidden=32, heads=4, kv_heads=2, experts=4, topk=2, ffn=48,
           rope_theta=10000.0, norm_eps=1e-5, tied=False)
TIED = dict(layers=2, hidden=32, heads=8, kv_heads=2, experts=8, topk=2, ffn=24,
            rope_theta=500000.0, norm_eps=1e-6, tied=True)
TRAIN = dict(steps=10, global_batch=4, micro_batch=2, torch_micro_batch=2, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-8,
             wd=0.1, clip=1.0, precision="fp32")
STACKED = re.compile(r"^layers\.(\d+)\.block_sparse_moe\.experts\.(w[123])\.weight$")


def spec(m, batch=None, capacity=None):
    s = (f"mixtral:layers={m['layers']},hidden={m['hidden']},heads={m['heads']},"
         f"kv_heads={m['kv_heads']},experts={m['experts']},topk={m['topk']},ffn={m['ffn']},"
         f"seq={SEQ},vocab={VOCAB},rope_theta={m['rope_theta']:g},norm_eps={m['norm_eps']:g},"
         f"tied={int(m['tied'])}")
    return s + (f",batch={batch}" if batch else "") + (f",capacity={capacity:g}" if capacity
                                                        else "")


# --- names ---------------------------------------------------------------------------------------
def hf_names(tensors, m):
    """megac's tensors (weights or gradients) under transformers' names: "model." + name,
    lm_head.weight as is, a stacked expert tensor [E, ...] split into experts.X.wN.weight (a
    per-expert name, should the file have them, only gains the prefix)."""
    out = {}
    for name, value in tensors.items():
        stacked = STACKED.match(name)
        if stacked:
            layer, w = stacked.groups()
            if value.shape[0] != m["experts"]:
                raise RuntimeError(f"{name} has shape {list(value.shape)}: expected "
                                   f"{m['experts']} experts along dim 0")
            for x in range(m["experts"]):
                out[f"model.layers.{layer}.block_sparse_moe.experts.{x}.{w}.weight"] = value[x]
        elif name == "lm_head.weight":
            out[name] = value
        else:
            out["model." + name] = value
    return out


def torch_tensors(module, grads=False):
    """A module's parameters (or their gradients) under transformers' names."""
    out = {}
    for name, p in module.named_parameters():
        name = name[len("hf."):] if name.startswith("hf.") else name
        out[name] = (p.grad if grads else p).detach().numpy()
    return out


def hf_model(m, weights):
    """MixtralForCausalLM of config `m` holding megac's `weights` (name -> array)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    hf = MixtralForCausalLM(MixtralConfig(
        num_hidden_layers=m["layers"], hidden_size=m["hidden"], num_attention_heads=m["heads"],
        num_key_value_heads=m["kv_heads"], intermediate_size=m["ffn"], vocab_size=VOCAB,
        num_local_experts=m["experts"], num_experts_per_tok=m["topk"],
        max_position_embeddings=SEQ, rope_theta=m["rope_theta"], rms_norm_eps=m["norm_eps"],
        tie_word_embeddings=m["tied"], sliding_window=None, router_jitter_noise=0.0,
        output_router_logits=False, use_cache=False))
    state = {k: torch.from_numpy(v.copy()) for k, v in hf_names(weights, m).items()}
    if m["tied"]:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    # Only the rotary inv_freq buffer is not a parameter megac has.
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise RuntimeError(f"weights do not match MixtralForCausalLM: missing {missing}, "
                           f"unexpected {unexpected}")
    return hf.float().train(False)


# --- the reference: routing, megac's aux loss and capacity rule ----------------------------------
def route(logits, topk):
    """Router logits [T, E] -> (fp32 probabilities, renormalised top-k weights [T, k], chosen
    experts [T, k], the gap between the k-th and (k+1)-th probability [T]) as Mixtral."""
    import torch
    import torch.nn.functional as F
    probs = F.softmax(logits, dim=1, dtype=torch.float)
    weights, chosen = torch.topk(probs, topk, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    if topk < probs.shape[1]:
        top = torch.topk(probs.detach(), topk + 1, dim=-1).values
        gap = top[:, topk - 1] - top[:, topk]
    else:
        gap = torch.full((probs.shape[0],), math.inf)
    return probs, weights, chosen, gap


def capacity_keep(chosen, rows, seq, experts, capacity):
    """Which of the top-k assignments [T, k] (T = rows * seq, row-major) survive: per sequence and
    expert, the first ceil(capacity * seq * k / E) in token order. All of them when capacity is
    None (dropless)."""
    import torch
    import torch.nn.functional as F
    topk = chosen.shape[1]
    if not capacity:
        return torch.ones(chosen.shape, dtype=torch.bool)
    limit = math.ceil(capacity * seq * topk / experts)
    onehot = F.one_hot(chosen, experts).reshape(rows, seq, topk, experts)
    # A token's k choices are distinct experts: its running count is the count through it.
    running = onehot.sum(dim=2).cumsum(dim=1)  # (rows, seq, E)
    kept = onehot * (running <= limit).unsqueeze(2).long()
    return kept.sum(dim=3).reshape(-1, topk).bool()


class MoeReference:
    """Mixtral's sparse MoE block as megac defines it (renormalised top-k, then capacity
    dropping; the auxiliary loss of the module docstring) on a MixtralSparseMoeBlock's own
    parameters. Each forward appends its statistics to `stats`."""

    def __init__(self, block, capacity, coeff, stats):
        self.block, self.capacity, self.coeff, self.stats = block, capacity, coeff, stats

    def __call__(self, hidden):
        import torch
        import torch.nn.functional as F
        block = self.block
        rows, seq, h = hidden.shape
        experts, topk = block.num_experts, block.top_k
        x = hidden.reshape(-1, h)
        logits = block.gate(x)
        probs, weights, chosen, gap = route(logits, topk)
        keep = capacity_keep(chosen, rows, seq, experts, self.capacity)
        gates = weights.to(x.dtype) * keep
        out = torch.zeros_like(x)
        for e in range(experts):
            token, slot = torch.where((chosen == e) & keep)
            if token.numel():
                out.index_add_(0, token, block.experts[e](x[token]) * gates[token, slot, None])
        kept = F.one_hot(chosen, experts) * keep.unsqueeze(2).long()  # (T, k, E)
        mask = kept.sum(dim=1).reshape(rows, seq, experts)
        p_sum = probs.reshape(rows, seq, experts).sum(dim=1)
        aux = self.coeff * experts / (topk * seq * seq) * (p_sum * mask.sum(dim=1)).sum(dim=1)
        self.stats.append(dict(aux=aux, load=kept.sum(dim=(0, 1)), dropped=int((~keep).sum()),
                               gap=float(gap.min())))
        return out.reshape(rows, seq, h), logits


def reference_model(m, weights, capacity, coeff):
    """MixtralForCausalLM with megac's weights whose MoE blocks are MoeReference; returns the
    model and the per-forward statistics list (layers in order, forwards appended)."""
    hf = hf_model(m, weights)
    stats = []
    for layer in hf.model.layers:
        layer.block_sparse_moe.forward = MoeReference(layer.block_sparse_moe, capacity, coeff,
                                                      stats)
    return hf, stats


def step_stats(stats, layers, big):
    """The statistics of one step's forwards (each `layers` entries): aux term of the objective
    (mean over the batch's sequences of the sum over layers) as a tensor, loads per layer,
    dropped total, smallest gap."""
    aux = sum(s["aux"].sum() for s in stats) / big
    loads = [sum(s["load"] for s in stats[l::layers]).tolist() for l in range(layers)]
    return aux, loads, sum(s["dropped"] for s in stats), min(s["gap"] for s in stats)


def reference_train(model, stats, layers, tokens, c):
    """train_test.torch_train's loop with the objective CE + aux (aux from `stats`); per step:
    CE loss, grad norm, aux, loads, dropped, smallest gap."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2],
                              "weight_decay": c["wd"]},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    assert c["schedule"] == "constant" and c["warmup"] == 0  # the lr is c["lr"] at every step
    tokens = torch.from_numpy(tokens.astype(np.int64))
    n, s = tokens.shape[0], tokens.shape[1] - 1
    big, micro = c["global_batch"], c["torch_micro_batch"]
    out = []
    for step in range(c["steps"]):
        rows = [(step * big + j) % n for j in range(big)]
        opt.zero_grad()
        stats.clear()
        ce_total = aux_total = 0.0
        for k in range(big // micro):
            chunk = tokens[rows[k * micro:(k + 1) * micro]]
            first = len(stats)
            logits = model(chunk[:, :s])
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                 reduction="sum") / (big * s)
            aux = step_stats(stats[first:], layers, big)[0]
            (ce + aux).backward()
            ce_total += ce.item()
            aux_total += aux.item()
        norm = torch.norm(torch.stack([p.grad.detach().norm() for p in params])).item()
        if c["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, c["clip"])
        opt.step()
        _, loads, dropped, gap = step_stats(stats, layers, big)
        out.append(dict(loss=ce_total, grad_norm=norm, aux=aux_total, load=loads,
                        dropped=dropped, gap=gap))
    return out


class GateRecorder:
    """Forward hooks on each layer's `block_sparse_moe.gate` of transformers' own model: the
    router logits of every forward, in call order (layer 0..L-1 per forward)."""

    def __init__(self, hf):
        self.logits = []
        for layer in hf.model.layers:
            layer.block_sparse_moe.gate.register_forward_hook(
                lambda module, inputs, output: self.logits.append(output.detach().clone()))

    def steps(self, layers, experts, topk, forwards_per_step):
        """Per step: loads [layer][expert] and the smallest gap."""
        import torch
        per_step = layers * forwards_per_step
        out = []
        for first in range(0, len(self.logits), per_step):
            calls = self.logits[first:first + per_step]
            loads = [[0] * experts for _ in range(layers)]
            gap = math.inf
            for i, logits in enumerate(calls):
                _, _, chosen, g = route(logits, topk)
                counts = torch.bincount(chosen.reshape(-1), minlength=experts).tolist()
                loads[i % layers] = [a + b for a, b in zip(loads[i % layers], counts)]
                gap = min(gap, float(g.min()))
            out.append(dict(load=loads, gap=gap))
        return out


# --- checks --------------------------------------------------------------------------------------
def report_gap(gap, what):
    if gap < NEAR_TIE:
        print(f"    NEAR TIE: {what}: the k-th and (k+1)-th router probabilities differ by only "
              f"{gap:.3e} (< {NEAR_TIE:g}); fp32 roundoff may flip that choice")
    else:
        print(f"    {what}: smallest gap between the k-th and (k+1)-th router probability "
              f"{gap:.3e}")


def moe_problems(records, want, aux_rtol, what):
    """megac's moe_load / moe_dropped / moe_aux_loss per step against `want` (per step: load,
    dropped, aux (0: must be exactly 0), the smallest router gap for the message)."""
    problems = []
    for r, w in zip(records, want):
        step = r.get("step")
        missing = [k for k in ("moe_load", "moe_dropped", "moe_aux_loss") if k not in r]
        if missing:
            return [f"{what} step {step}: the log record lacks {missing}"]
        if r["moe_load"] != w["load"]:
            diffs = [f"layer {l} expert {e}: megac {g}, torch {t}"
                     for l, (gl, tl) in enumerate(zip(r["moe_load"], w["load"]))
                     for e, (g, t) in enumerate(zip(gl, tl)) if g != t]
            problems.append(f"{what} step {step}: moe_load {r['moe_load']} differs from torch's "
                            f"{w['load']} ({'; '.join(diffs) or 'shapes differ'}); smallest "
                            f"router gap at this step {w['gap']:.3e}")
        if r["moe_dropped"] != w["dropped"]:
            problems.append(f"{what} step {step}: moe_dropped {r['moe_dropped']}, torch "
                            f"{w['dropped']}")
        aux = w.get("aux", 0.0)
        if aux == 0.0:
            if r["moe_aux_loss"] != 0:
                problems.append(f"{what} step {step}: moe_aux_loss {r['moe_aux_loss']!r} with "
                                "coefficient 0")
        elif not abs(r["moe_aux_loss"] - aux) <= aux_rtol * abs(aux):
            problems.append(f"{what} step {step}: moe_aux_loss {r['moe_aux_loss']!r}, torch "
                            f"{aux!r} (relative {abs(r['moe_aux_loss'] - aux) / abs(aux):.2e})")
    return problems


def forward_case(args, m, weights, ids):
    """`megac run` logits against MixtralForCausalLM's."""
    import numpy as np
    import torch
    workdir = os.path.join(args.workdir, f"forward-{m['experts']}x{m['topk']}")
    os.makedirs(workdir, exist_ok=True)
    np.save(os.path.join(workdir, "ids.npy"), ids)
    run([args.megac, "run", "--model", spec(m, batch=ids.shape[0]), "--seed", "0", "--input",
         f"input_ids={os.path.join(workdir, 'ids.npy')}", "--output-dir", workdir])
    got = np.load(os.path.join(workdir, "logits.npy"))
    hf = hf_model(m, weights)
    recorder = GateRecorder(hf)
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids)).logits.numpy()
    report_gap(recorder.steps(m["layers"], m["experts"], m["topk"], 1)[0]["gap"], "forward")
    err = math.inf
    if got.shape == want.shape:
        err = float(np.abs(got.astype(np.float64) - want).max())
    scale = float(np.abs(want).max())
    print(f"    logits {list(got.shape)}: max |megac - torch| = {err:.2e} "
          f"(max |logit| {scale:.3f})")
    bound = 1e-6 * scale + 1e-7
    numerics.report(f"logits against torch ({m['experts']}x{m['topk']})", err, bound)
    if not err <= bound:
        return [f"{spec(m)}: logits {list(got.shape)} differ from torch's {list(want.shape)} by "
                f"{err:.3g} (bound {bound:.3g})"]
    return []


def initial_step(args, m, data, name, capacity=None):
    """A one-step run at lr 0 with the aux loss on (AdamW then changes nothing): the seeded
    initial weights, step 1's log record and gradients."""
    from safetensors_np import read_safetensors
    workdir = os.path.join(args.workdir, name)
    os.makedirs(workdir, exist_ok=True)
    paths = {k: os.path.join(workdir, f"{k}.safetensors") for k in ("weights", "grads")}
    log = os.path.join(workdir, "log.jsonl")
    run([args.megac, "train", "--model", spec(m, capacity=capacity), "--data", data, "--steps",
         "1", "--global-batch", "4", "--micro-batch", "2", "--lr", "0", "--seed", "0",
         "--moe-aux-loss-coeff", repr(COEFF), "--log-json", log,
         "--save-weights", paths["weights"], "--save-grads", paths["grads"]])
    with open(log) as f:
        record = json.loads(f.readline())
    return read_safetensors(paths["weights"]), read_safetensors(paths["grads"]), record


def gradient_case(m, weights, grads, record, tokens, capacity=None):
    """Step 1 (rows 0..3) against PyTorch: CE loss, aux, loads, drops and the gradients of
    CE + aux. Dropless, the reference's CE also equals transformers' own model's."""
    import torch
    import torch.nn.functional as F
    hf, stats = reference_model(m, weights, capacity, COEFF)
    rows = torch.from_numpy(tokens[:4])
    logits = hf(input_ids=rows[:, :SEQ]).logits
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), rows[:, 1:].reshape(-1))
    aux, loads, dropped, gap = step_stats(stats, m["layers"], 4)
    (ce + aux).backward()
    problems = []
    if not capacity:
        with torch.no_grad():
            plain = hf_model(m, weights)(input_ids=rows[:, :SEQ]).logits
        same = float((plain - logits).abs().max())
        if not same <= 1e-6 * float(plain.abs().max()):
            problems.append(f"the reference MoE block's logits differ from transformers' by "
                            f"{same:.3g}: the reference is wrong")
    if capacity and dropped == 0:
        problems.append(f"capacity={capacity:g} drops nothing at step 1: the case tests nothing")
    rel = abs(record["loss"] - ce.item()) / abs(ce.item())
    print(f"    step-1 loss {record['loss']:.7f}, torch {ce.item():.7f} (relative {rel:.1e}); "
          f"aux {record.get('moe_aux_loss', math.nan):.7g}, torch {aux.item():.7g}; dropped "
          f"{record.get('moe_dropped')}, torch {dropped}")
    report_gap(gap, "step 1")
    if not rel <= 1e-5:
        problems.append(f"step-1 loss {record['loss']!r}, torch {ce.item()!r}")
    want = dict(load=loads, dropped=dropped, aux=aux.item(), gap=gap)
    problems += moe_problems([record], [want], 1e-5, "lr-0")
    torch_grads = torch_tensors(hf, grads=True)
    p, worst = tensor_problems(hf_names(grads, m), torch_grads, 1e-5, 1e-8, "step-1 gradient")
    print(f"    gradients of CE + aux: worst ||diff|| / bound = {worst:.3f} over {len(grads)} "
          "tensors")
    return problems + p


def layout_case(args, name, model_args, data, c, tp, dp, ep=1):
    """The same run in fp64 on tp * dp ranks (expert parallelism ep, carved out of dp) against
    one rank in fp64 (numerics.layout_check: the data-parallel ranks split the same global batch,
    so only partial sums reassociate), and the routing (loads, drops) identical, the aux loss
    within the fp64 loss bound: in fp64 a reassociation (~1e-16) cannot flip a routing decision
    whose gap is the ~1e-5 report_gap prints."""
    layout = " x ".join(f"{axis} {n}" for axis, n in (("tp", tp), ("dp", dp), ("ep", ep)) if n > 1)
    if shutil.which("mpirun") is None:
        numerics.skip(f"{layout} ({name}): mpirun is not on PATH")
        return []
    ranks = tp * dp
    c_many = dict(c, micro_batch=max(1, c["micro_batch"] // dp))
    flags = ["--ranks", str(ranks), "--tp", str(tp), "--dp", str(dp)]
    flags += ["--ep", str(ep)] if ep > 1 else []
    banner = f"{ranks} ranks (tp {tp}, pp 1, dp {dp}" + (f", ep {ep})" if ep > 1 else ")")

    def routing(records_many, records):
        want = [dict(load=r["moe_load"], dropped=r["moe_dropped"], aux=r["moe_aux_loss"],
                     gap=math.nan) for r in records]
        return moe_problems(records_many, want, numerics.FP64_LOSS_RTOL, "routing")

    problems = numerics.layout_check(args.megac, model_args, data,
                                     os.path.join(args.workdir, f"{name}-tp{tp}-dp{dp}-ep{ep}"),
                                     c, c_many, flags, banner, compare_records=routing)
    print(f"    {layout} vs one rank in fp64: {'equal' if not problems else 'DIFFER'}")
    return [f"{name} {layout}: {p}" for p in problems]


def training_case(args, m, weights, tokens, data):
    """10 dropless steps, aux coefficient 0, against transformers' MixtralForCausalLM trained by
    train_test's loop; routing recorded by gate hooks."""
    import train_test as tt
    from safetensors_np import read_safetensors
    c = TRAIN
    one = os.path.join(args.workdir, "train-dropless")
    os.makedirs(one, exist_ok=True)
    model_args = ["--model", spec(m), "--moe-aux-loss-coeff", "0"]
    records, final, _ = tt.megac_train(args.megac, model_args, data, one, c)
    hf = hf_model(m, weights)
    recorder = GateRecorder(hf)
    model = logits_module(hf)
    losses, norms = tt.torch_train(model, tokens, c)
    problems = tt.check_records(records, c, losses, norms, 1e-4, 1e-4)
    routing = recorder.steps(m["layers"], m["experts"], m["topk"],
                             c["global_batch"] // c["torch_micro_batch"])
    if len(routing) != c["steps"]:
        problems.append(f"recorded {len(routing)} steps of routing, expected {c['steps']}")
    want = [dict(r, dropped=0, aux=0.0) for r in routing]
    p = moe_problems(records, want, 0.0, "dropless")
    print(f"    routing: moe_load {'equals' if not p else 'DIFFERS from'} the hooks' top-"
          f"{m['topk']} loads at all {len(records)} steps x {m['layers']} layers")
    report_gap(min(r["gap"] for r in routing), f"{c['steps']} training steps")
    problems += p
    p, worst = tensor_problems(hf_names(read_safetensors(final), m), torch_tensors(model), 1e-4,
                               1e-6, "final parameter")
    print(f"    parameters after {c['steps']} steps: worst ||diff|| / bound = {worst:.3f}")
    problems += p
    for tp, dp, ep in ((2, 2, 1), (1, 4, 4)):
        problems += layout_case(args, "dropless", model_args, data, c, tp, dp, ep)
    return problems


def aux_case(args, m, weights, tokens, data, capacity):
    """3 steps with the aux loss (and capacity) against the reference model."""
    import train_test as tt
    from safetensors_np import read_safetensors
    c = dict(TRAIN, steps=3)
    name = f"aux-capacity{capacity:g}" if capacity else "aux-dropless"
    one = os.path.join(args.workdir, name)
    os.makedirs(one, exist_ok=True)
    model_args = ["--model", spec(m, capacity=capacity), "--moe-aux-loss-coeff", repr(COEFF)]
    records, final, _ = tt.megac_train(args.megac, model_args, data, one, c)
    hf, stats = reference_model(m, weights, capacity, COEFF)
    model = logits_module(hf)
    want = reference_train(model, stats, m["layers"], tokens, c)
    problems = tt.check_records(records, c, [w["loss"] for w in want],
                                [w["grad_norm"] for w in want], 1e-4, 1e-4)
    if capacity and not all(w["dropped"] for w in want):
        problems.append(f"capacity={capacity:g}: a step drops nothing: the case tests too little")
    p = moe_problems(records, want, 1e-4, name)
    worst_aux = max(abs(r.get("moe_aux_loss", math.nan) - w["aux"]) / w["aux"]
                    for r, w in zip(records, want))
    print(f"    moe_aux_loss: max relative difference {worst_aux:.2e} (torch "
          f"{' '.join(format(w['aux'], '.6g') for w in want)}); moe_dropped megac "
          f"{[r.get('moe_dropped') for r in records]}, torch {[w['dropped'] for w in want]}; "
          f"loads {'equal' if not p else 'DIFFER'}")
    report_gap(min(w["gap"] for w in want), f"{c['steps']} steps")
    problems += p
    p, worst = tensor_problems(hf_names(read_safetensors(final), m), torch_tensors(model), 1e-4,
                               1e-6, "final parameter")
    print(f"    parameters after {c['steps']} steps: worst ||diff|| / bound = {worst:.3f}")
    problems += p
    if capacity:
        problems += layout_case(args, name, model_args, data, c, 2, 2, 2)
    return problems


def main():
    args = venv_test_args()
    import numpy as np
    import torch

    tokens = np.random.default_rng(7).integers(0, VOCAB, size=(ROWS, SEQ + 1)).astype(np.int64)
    data = os.path.join(args.workdir, "tokens.npy")
    np.save(data, tokens)
    ids = tokens[:3, :SEQ]

    problems, init = [], {}
    try:
        for name, m in (("gqa", GQA), ("tied", TIED)):
            print(f"{spec(m)}: forward, step-1 loss, aux and gradients against "
                  "MixtralForCausalLM")
            init[name], grads, record = initial_step(args, m, data, f"init-{name}")
            problems += forward_case(args, m, init[name], ids)
            problems += gradient_case(m, init[name], grads, record, tokens)
        print(f"{spec(GQA, capacity=1.0)}: step-1 loss, aux, drops and gradients")
        capacity_init, grads, record = initial_step(args, GQA, data, "init-capacity",
                                                    capacity=1.0)
        problems += gradient_case(GQA, capacity_init, grads, record, tokens, capacity=1.0)
        print(f"{spec(GQA)}: 10 dropless steps, aux coefficient 0, against MixtralForCausalLM; "
              "tp 2 x dp 2 and dp 4 x ep 4 against one rank")
        problems += training_case(args, GQA, init["gqa"], tokens, data)
        for capacity in (None, 1.0):
            print(f"{spec(GQA, capacity=capacity)}: 3 steps, aux coefficient {COEFF:g}, against "
                  "megac's MoE definition in PyTorch" + (
                      "; tp 2 x dp 2 x ep 2 against one rank" if capacity else ""))
            weights = capacity_init if capacity else init["gqa"]
            problems += aux_case(args, GQA, weights, tokens, data, capacity)
    except RuntimeError as e:
        problems.append(str(e))
    for p in problems:
        print(f"  FAIL {p}")
    print("PASS" if not problems else f"FAIL ({len(problems)} problems)")
    return numerics.exit_code(len(problems))


if __name__ == "__main__":
    sys.exit(main())
