"""Training Hugging Face models exported to ONNX: `megac train` on every causal LM family of
hf_families.py (GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM, Falcon, Llama, Mistral with a sliding window,
Qwen2, Gemma, Phi, StableLM; random weights from tiny configs, dropout off, exported in training
mode and cached by config hash beside WORKDIR) gives PyTorch's AdamW run step by step, and a
tp=2 x dp=2 run gives the one-rank run.

  - parity: GPT-2 and Llama 10 steps, the others 3, on one rank against the same model trained
    in PyTorch (train_test.py's reference loop: the same rows, mean cross-entropy, AdamW with
    eps 1e-6 and decay on dim >= 2); every loss and grad_norm within 1e-4 relative, every final
    parameter within 1e-4 ||p|| + 1e-6 sqrt(n);
  - layout: the same steps in fp64 (megac runs the fp32 export in fp64) with --ranks 4 --tp 2
    --dp 2 against one rank in fp64: losses and grad_norms within 1e-10 relative, step-1
    gradients and final parameters within 1e-9 ||p|| + 1e-12 sqrt(n) (numerics.py gives the
    error model). Not fp32: a last-bit difference in a near-zero gradient (GPT-2's c_proj.bias
    starts at zero) moves its Adam steps by far more than a bound relative to its norm allows,
    and which last bit differs depends on the CPU's OpenBLAS kernels (issue 26).
The parity bounds' error model is train_test.py's.

The token data never holds the model's pad_token_id: PyTorch never updates an embedding's
padding_idx row and torch.onnx drops padding_idx (hf_families.py).

usage: hf_train_test.py --megac build/bin/megac --workdir DIR [--venv .venv] [--only A,B]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it) and mpirun for the layout case.
"""
import copy
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
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

    workdir = os.path.join(args.workdir, name)
    one = os.path.join(workdir, "one-rank")
    os.makedirs(one)
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

    if shutil.which("mpirun") is None:
        numerics.skip(f"{name}: tp 2 x dp 2 needs mpirun, which is not on PATH")
        return failures
    print(f"{name} (transformers), tp 2 x dp 2 against one rank, fp64", flush=True)
    c4 = dict(c, micro_batch=1)  # per data-parallel rank: the same 2-row micro-batches
    problems = numerics.layout_check(args.megac, [onnx_path], data, os.path.join(workdir, "layout"),
                                     c, c4, ["--ranks", "4", "--tp", "2", "--dp", "2"],
                                     "4 ranks (tp 2, pp 1, dp 2)")
    for p in problems:
        print(f"  FAIL {p}")
    failures += len(problems)
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
    return numerics.exit_code(failures)


if __name__ == "__main__":
    sys.exit(main())
