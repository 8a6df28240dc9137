"""The zoo's Llama (`--model llama:...`) against transformers' LlamaForCausalLM with the same
weights: megac's initial weights (seeded, written by a one-step run at lr 0) are loaded into a
LlamaForCausalLM (names: "model." + megac's name, lm_head.weight as is) of the same config, and

  - forward: `megac run` logits vs LlamaForCausalLM logits, |diff| <= 1e-6 * max|logits| + 1e-7
    (about 10 fp32 ulps of the largest logit: at init the attention scores are small, so a 1%
    error in the rotary base moves the logits by only ~5e-6),
    for an untied GQA model (4 heads on 2 kv heads, rope_theta 10000, norm_eps 1e-5) and a tied
    one with other keys (8 heads on 2 kv heads, rope_theta 500000, norm_eps 1e-6);
  - loss and gradients: the lr-0 step's loss within 1e-5 relative of PyTorch's mean
    cross-entropy over the same global batch, every step-1 gradient (--save-grads) within
    ||g - g_torch|| <= 1e-5 ||g_torch|| + 1e-8 sqrt(n);
  - training: 10 AdamW steps (train_test.py's reference loop) against PyTorch: every loss and
    grad_norm within 1e-4 relative, every final parameter within 1e-4 ||p|| + 1e-6 sqrt(n);
  - layout: the same 10 steps in fp64 with --ranks 4 --tp 2 --dp 2 against one rank in fp64
    (numerics.layout_check: losses, step-1 gradients and final parameters within fp64
    reassociation bounds);
  - errors: tp 2 on 1 kv head is refused naming both counts and tp; kv_heads that do not divide
    heads are refused naming both keys.

The tolerances are fp32 roundoff: the rotary tables are computed in double and rounded once
(transformers computes them in float32), and the sums run in another order (train_test.py has
the error model of the training bounds).

usage: llama_zoo_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it) and mpirun for the layout case (without it the rest
runs and the test exits 77, a skip).
"""
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from hf_models_test import venv_test_args  # noqa: E402

SEQ, VOCAB, ROWS = 16, 128, 24
GQA = dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, rope_theta=10000.0, norm_eps=1e-5,
           tied=False)
TIED = dict(layers=2, hidden=64, heads=8, kv_heads=2, ffn=96, rope_theta=500000.0, norm_eps=1e-6,
            tied=True)


def spec(m, batch=None):
    s = (f"llama:layers={m['layers']},hidden={m['hidden']},heads={m['heads']},"
         f"kv_heads={m['kv_heads']},ffn={m['ffn']},seq={SEQ},vocab={VOCAB},"
         f"rope_theta={m['rope_theta']:g},norm_eps={m['norm_eps']:g},tied={int(m['tied'])}")
    return s + (f",batch={batch}" if batch else "")


def run(argv):
    """Runs megac (`argv[0]`), with the tests' thread count for `run` and `train`."""
    if len(argv) > 1 and argv[1] in ("run", "train"):
        argv = [*argv, *numerics.threads_args()]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    return result


def hf_model(m, weights):
    """LlamaForCausalLM of config `m` holding megac's `weights` (name -> array)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=m["layers"], hidden_size=m["hidden"], num_attention_heads=m["heads"],
        num_key_value_heads=m["kv_heads"], intermediate_size=m["ffn"], vocab_size=VOCAB,
        max_position_embeddings=SEQ, rope_theta=m["rope_theta"], rms_norm_eps=m["norm_eps"],
        tie_word_embeddings=m["tied"], attention_bias=False, mlp_bias=False, use_cache=False))
    state = {("" if k == "lm_head.weight" else "model.") + k: torch.from_numpy(v.copy())
             for k, v in weights.items()}
    if m["tied"]:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    # Only the rotary inv_freq buffer is not a parameter megac has.
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise RuntimeError(f"weights do not match LlamaForCausalLM: missing {missing}, "
                           f"unexpected {unexpected}")
    return hf.float().train(False)


def logits_module(hf):
    """The model as train_test.torch_train wants it: input_ids -> logits."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids):
            return self.hf(input_ids=input_ids, return_dict=False)[0]

    return Logits()


def megac_name(torch_name):
    name = torch_name[len("hf."):] if torch_name.startswith("hf.") else torch_name
    return name[len("model."):] if name.startswith("model.") else name


def tensor_problems(got, want, rtol, atol, what):
    """||got - want|| <= rtol ||want|| + atol sqrt(n) per tensor, NaN-proof (numerics.py), the
    worst ratio reported; returns (problems, worst ratio)."""
    problems, worst, name = numerics.compare_tensors(got, want, rtol, atol, what)
    print(f"    error/bound {what}: {worst:.3g} ({name})")
    return problems, worst


def forward_case(args, m, weights, ids):
    """`megac run` logits against LlamaForCausalLM's."""
    import numpy as np
    import torch
    workdir = os.path.join(args.workdir, f"forward-{m['heads']}h{m['kv_heads']}kv")
    os.makedirs(workdir, exist_ok=True)
    np.save(os.path.join(workdir, "ids.npy"), ids)
    run([args.megac, "run", "--model", spec(m, batch=ids.shape[0]), "--seed", "0", "--input",
         f"input_ids={os.path.join(workdir, 'ids.npy')}", "--output-dir", workdir])
    got = np.load(os.path.join(workdir, "logits.npy"))
    with torch.no_grad():
        want = hf_model(m, weights)(input_ids=torch.from_numpy(ids)).logits.numpy()
    err = float(np.abs(got.astype(np.float64) - want).max())
    scale = float(np.abs(want).max())
    print(f"    logits {list(got.shape)}: max |megac - torch| = {err:.2e} (max |logit| {scale:.3f})")
    bound = 1e-6 * scale + 1e-7
    numerics.report(f"logits against torch ({m['heads']}h{m['kv_heads']}kv)", err, bound)
    if got.shape != want.shape or not err <= bound:
        return [f"{spec(m)}: logits differ by {err:.3g} (bound {bound:.3g})"]
    return []


def initial_weights(args, m, data, name):
    """A one-step run at lr 0 (AdamW then changes nothing): the seeded initial weights, step 1's
    loss and gradients."""
    from safetensors_np import read_safetensors
    workdir = os.path.join(args.workdir, name)
    os.makedirs(workdir, exist_ok=True)
    paths = {k: os.path.join(workdir, f"{k}.safetensors") for k in ("weights", "grads")}
    log = os.path.join(workdir, "log.jsonl")
    run([args.megac, "train", "--model", spec(m), "--data", data, "--steps", "1",
         "--global-batch", "4", "--micro-batch", "2", "--lr", "0", "--seed", "0",
         "--log-json", log, "--save-weights", paths["weights"], "--save-grads", paths["grads"]])
    with open(log) as f:
        loss = json.loads(f.readline())["loss"]
    return read_safetensors(paths["weights"]), read_safetensors(paths["grads"]), loss


def gradient_case(m, weights, grads, loss, tokens):
    """Step 1's loss and gradients against PyTorch's on rows 0..3."""
    import torch
    import torch.nn.functional as F
    hf = hf_model(m, weights)
    rows = torch.from_numpy(tokens[:4])
    logits = hf(input_ids=rows[:, :SEQ]).logits
    want = F.cross_entropy(logits.reshape(-1, VOCAB), rows[:, 1:].reshape(-1))
    want.backward()
    rel = abs(loss - want.item()) / abs(want.item())
    print(f"    step-1 loss {loss:.7f}, torch {want.item():.7f} (relative {rel:.1e})")
    problems = [] if rel <= 1e-5 else [f"step-1 loss {loss!r}, torch {want.item()!r}"]
    torch_grads = {megac_name(n): p.grad.numpy() for n, p in hf.named_parameters()
                   if not (m["tied"] and n == "lm_head.weight")}
    p, worst = tensor_problems(grads, torch_grads, 1e-5, 1e-8, "step-1 gradient")
    print(f"    gradients: worst ||diff|| / bound = {worst:.3f} over {len(grads)} tensors")
    return problems + p


def training_case(args, m, weights, tokens, data):
    """10 steps against PyTorch, then tp 2 x dp 2 against one rank."""
    import numpy as np
    import train_test as tt
    from safetensors_np import read_safetensors
    c = dict(steps=10, global_batch=4, micro_batch=2, torch_micro_batch=2, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-8,
             wd=0.1, clip=1.0, precision="fp32")
    one = os.path.join(args.workdir, "train-one-rank")
    os.makedirs(one, exist_ok=True)
    records, final, _ = tt.megac_train(args.megac, ["--model", spec(m)], data, one, c)
    model = logits_module(hf_model(m, weights))
    losses, norms = tt.torch_train(model, tokens, c)
    problems = tt.check_records(records, c, losses, norms, 1e-4, 1e-4)
    want = {megac_name(n): p.detach().numpy() for n, p in model.named_parameters()}
    p, worst = tensor_problems(read_safetensors(final), want, 1e-4, 1e-6, "final parameter")
    print(f"    parameters after 10 steps: worst ||diff|| / bound = {worst:.3f}")
    problems += p

    if shutil.which("mpirun") is None:
        numerics.skip("tp 2 x dp 2: mpirun is not on PATH")
        return problems
    c4 = dict(c, micro_batch=1)  # per data-parallel rank: the same 2-row micro-batches
    p = numerics.layout_check(args.megac, ["--model", spec(m)], data,
                              os.path.join(args.workdir, "train-tp2-dp2"), c, c4,
                              ["--ranks", "4", "--tp", "2", "--dp", "2"],
                              "4 ranks (tp 2, pp 1, dp 2)")
    print(f"    tp 2 x dp 2 vs one rank in fp64: {'equal' if not p else 'DIFFER'}")
    return problems + [f"tp 2 x dp 2: {x}" for x in p]


def error_case(args, data):
    """One-line errors: a tp that does not divide the heads (fewer kv heads than tp are fine:
    they are replicated, the partition suite's llama-mqa), kv_heads that do not divide heads."""
    problems = []
    cases = [
        (spec(dict(GQA, kv_heads=1)), ["--ranks", "3", "--tp", "3"],
         "which is not divisible by tp = 3"),
        (spec(dict(GQA, kv_heads=3)), [],
         "key 'heads' (4) is not divisible by key 'kv_heads' (3)"),
    ]
    for model, extra, expect in cases:
        argv = [args.megac, "train", "--model", model, "--data", data, "--steps", "1",
                "--global-batch", "4", "--micro-batch", "2", "--lr", "1e-3",
                *numerics.threads_args(), *extra]
        if extra and shutil.which("mpirun") is None:
            numerics.skip(f"the error case {' '.join(extra)}: mpirun is not on PATH")
            continue
        result = subprocess.run(argv, capture_output=True, text=True)
        text = result.stdout + result.stderr
        if result.returncode == 0 or expect not in text:
            problems.append(f"{' '.join(argv)}: exit {result.returncode}, expected an error "
                            f"containing '{expect}', got:\n{text[-600:]}")
        else:
            print(f"    refused: {expect}")
    return problems


def main():
    args = venv_test_args()
    import numpy as np
    import torch

    tokens = np.random.default_rng(7).integers(0, VOCAB, size=(ROWS, SEQ + 1)).astype(np.int64)
    data = os.path.join(args.workdir, "tokens.npy")
    np.save(data, tokens)
    ids = tokens[:3, :SEQ]

    problems = []
    print(f"{spec(GQA)}: forward, step-1 loss and gradients against LlamaForCausalLM")
    weights, grads, loss = initial_weights(args, GQA, data, "init-gqa")
    problems += forward_case(args, GQA, weights, ids)
    problems += gradient_case(GQA, weights, grads, loss, tokens)
    print(f"{spec(TIED)}: forward, step-1 loss and gradients against LlamaForCausalLM")
    tied, tied_grads, tied_loss = initial_weights(args, TIED, data, "init-tied")
    problems += forward_case(args, TIED, tied, ids)
    problems += gradient_case(TIED, tied, tied_grads, tied_loss, tokens)
    print(f"{spec(GQA)}: 10 steps against PyTorch, tp 2 x dp 2 against one rank")
    problems += training_case(args, GQA, weights, tokens, data)
    print("errors")
    problems += error_case(args, data)
    for p in problems:
        print(f"  FAIL {p}")
    print("PASS" if not problems else f"FAIL ({len(problems)} problems)")
    return numerics.exit_code(len(problems))


if __name__ == "__main__":
    sys.exit(main())
