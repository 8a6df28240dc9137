"""Training Hugging Face models exported to ONNX: `megac train` on every causal LM family of
hf_families.py (GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM, Falcon, Llama, Mistral with a sliding window,
Qwen2, Gemma, Phi, StableLM; random weights from tiny configs, dropout off, exported in training
mode and cached by config hash beside WORKDIR) gives PyTorch's AdamW run step by step, and a
tp=2 x dp=2 run gives the one-rank run.

  - parity: GPT-2 and Llama 10 steps, the others 3, on one rank against the same model trained
    in PyTorch (train_test.py's reference loop: the same rows, mean cross-entropy, AdamW with
    eps 1e-6 and decay on dim >= 2); every loss and grad_norm within 1e-4 relative, every final
    parameter within 1e-4 ||p|| + 1e-6 sqrt(n);
  - layout: the same steps with --ranks 4 --tp 2 --dp 2 against the one-rank log (losses
    within 1e-5 relative: fp32 partial sums reassociate) and its final weights.

The token data never holds the model's pad_token_id: PyTorch never updates an embedding's
padding_idx row and torch.onnx drops padding_idx (hf_families.py).

usage: hf_train_test.py --megac build/bin/megac --workdir DIR [--venv .venv] [--only A,B]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it) and mpirun for the layout case.
"""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models_test import venv_test_args  # noqa: E402

SEQ, VOCAB, ROWS = 16, 128, 24  # hf_families.SEQ and .VOCAB


def make_family(name, cache):
    """A transformers model of family `name` with random weights (dropout off), its config, and
    its training-mode export (hf_families.export, cached by config hash under `cache`)."""
    import hf_families as hf
    model, cfg = hf.build(name, seed=1234)
    return model, cfg, hf.export(name, model, cfg, cache, training=True)


def make_model(name, workdir):
    """(model, path of its training-mode export in `workdir`): generate_test.py's entry."""
    model, _, path = make_family(name, workdir)
    return model, path


def check(args, name, steps):
    """Returns the number of problems of model `name`: parity with PyTorch, then tp2 x dp2."""
    import numpy as np
    import hf_families as hf
    import train_test as tt
    from safetensors_np import read_safetensors

    workdir = os.path.join(args.workdir, name)
    one, four = os.path.join(workdir, "one-rank"), os.path.join(workdir, "tp2-dp2")
    os.makedirs(one)
    os.makedirs(four)
    model, cfg, onnx_path = make_family(name, os.path.join(args.cache, "train"))
    # No pad_token_id in the data: PyTorch keeps an embedding's padding_idx row fixed, and
    # torch.onnx drops padding_idx (hf_families.py says more).
    tokens = hf.pad_free(np.random.default_rng(7).integers(0, VOCAB, size=(ROWS, SEQ + 1)), cfg)
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, tokens.astype(np.int64))
    # Adam eps 1e-6, not 1e-8: GPT-2's key third of c_attn.bias has an exactly zero gradient
    # (softmax ignores a per-row constant), so its "gradient" is roundoff (~1e-10), which Adam
    # with eps 1e-8 turns into steps of ~1e-2·lr that differ between any two implementations.
    c = dict(steps=steps, global_batch=4, micro_batch=2, torch_micro_batch=2, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-6,
             wd=0.1, clip=0.0, precision="fp32")
    failures = 0

    print(f"{name} (transformers), {steps} steps on one rank against PyTorch", flush=True)
    records, weights, _ = tt.megac_train(args.megac, [onnx_path], data, one, c)
    reference = copy.deepcopy(model)
    losses, norms = tt.torch_train(reference, tokens, c)
    problems = tt.check_records(records, c, losses, norms, 1e-4, 1e-4)
    problems += tt.check_params(reference, weights, np.float32, 1e-4, 1e-6)
    for p in problems:
        print(f"  FAIL {p}")
    failures += len(problems)

    print(f"{name} (transformers), tp 2 x dp 2 against one rank", flush=True)
    c4 = dict(c, micro_batch=1)  # per data-parallel rank: the same 2-row micro-batches
    try:
        records4, weights4, _ = tt.megac_train(args.megac, [onnx_path], data, four, c4,
                                               ["--ranks", "4", "--tp", "2", "--dp", "2"])
    except RuntimeError as e:
        print(f"  FAIL {e}")
        return failures + 1
    problems, worst = tt.check_layout_losses(records4, records, 1e-5)
    for p in problems:
        print(f"  FAIL {p}")
    failures += len(problems)
    print(f"    losses: max relative difference to one rank {worst:.2e}")
    got, want = read_safetensors(weights4), read_safetensors(weights)
    worst = 0.0
    for key, w in want.items():
        d = np.linalg.norm((got[key].astype(np.float64) - w.astype(np.float64)).ravel())
        bound = 1e-5 * np.linalg.norm(w.astype(np.float64).ravel()) + 1e-7 * np.sqrt(w.size)
        worst = max(worst, d / bound)
        if d > bound:
            print(f"  FAIL {key}: ||tp2dp2 - one rank|| = {d:.3g} > {bound:.3g}")
            failures += 1
    print(f"    parameters: worst ||dp|| / bound = {worst:.3f}")
    return failures


def main():
    # Exports are cached beside the work folder, which is made anew.
    args = venv_test_args(lambda p: p.add_argument(
        "--only", help="comma-separated families (default: every causal LM)"), cache=True)
    import hf_families as hf

    failures = 0
    for name in (args.only.split(",") if args.only else hf.CAUSAL):
        # GPT-2 and Llama keep their 10-step runs; the other families run 3 steps.
        failures += check(args, name, 10 if name in ("gpt2", "llama") else 3)
    print("PASS" if failures == 0 else f"FAIL ({failures} problems)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
