"""Mixture-of-experts transformers models through torch.onnx and megac: transformers'
MixtralForCausalLM (hf_families.py's "mixtral": 2 layers, hidden 64, 4 SwiGLU experts of 128,
top 2, vocab 128) exported at opsets 14 and 17 (and at 17 with constant folding, which stores
the experts' weights pre-transposed), and Qwen2MoeForCausalLM ("qwen2_moe": a sigmoid-gated
shared expert beside the routed ones, top-k probabilities not renormalised) at opset 17.
Their per-expert NonZero -> Gather -> MLP -> Mul -> ScatterElements loops are raised
at import to megac's MoE ops (frontends/onnx/OnnxMoe.cpp).

  - forward (eval-mode exports): `megac run` logits against PyTorch's within
    1e-4 + 1e-4 |ref| (fp32); the IR after --compile-to=input has, per layer, one topk_mask,
    one moe_dispatch, three moe_matmul and one moe_combine (and the attention raised). The
    smallest gap between the k-th and (k+1)-th router probability of every layer is printed:
    a near tie would let roundoff change a routing decision;
  - training (training-mode exports, dynamic batch): 3 AdamW steps of `megac train` (MoE aux
    loss coefficient 0, as transformers trains by default) against the same model trained in
    PyTorch (train_test.py's reference loop), hf_train_test.py's bounds: every loss and
    grad_norm within 1e-4 relative, every final parameter within 1e-4 ||p|| + 1e-6 sqrt(n)
    (not for the folded export, whose weights have onnx::MatMul_* names);
    Mixtral at opset 17 also with --ranks 4 --tp 2 --dp 2 against the one-rank run, and dp 4 x
    ep 2 likewise, both in fp64 (numerics.layout_check: losses, step-1 gradients and final
    parameters within fp64 reassociation bounds; in fp64 roundoff, ~1e-16, cannot flip a
    routing decision whose gap is the ~1e-5 printed below);
  - router logits: a Mixtral export that also outputs each layer's router logits (computed
    before the TopK, outside the raised block) matches PyTorch on every output;
  - errors: Mixtral exports edited into variants megac does not raise (another expert
    activation, renormalisation by a product, the routing used as a graph output), and a TopK
    that is no router, fail to import with an error naming the node that differs.

usage: hf_mixtral_onnx_test.py --megac build/bin/megac --workdir DIR [--venv .venv]
Needs transformers (the test venv from scripts/bootstrap.sh; the script re-executes itself with
the venv's python, or exits 77 without it) and mpirun for the layout case.
"""
import collections
import copy
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics  # noqa: E402
from hf_models_test import venv_test_args  # noqa: E402

# (family, opset, constant folding): the families of hf_families.py with a mixture of experts.
# Folded, torch.onnx stores the experts' weights pre-transposed under onnx::MatMul_* names.
CASES = (("mixtral", 14, False), ("mixtral", 17, False), ("mixtral", 17, True),
         ("qwen2_moe", 17, False))
# The export also trained with --ranks 4 --tp 2 --dp 2 against its one-rank run.
LAYOUT = ("mixtral", 17, False)
SEQ, VOCAB, ROWS, STEPS = 16, 128, 24, 3  # hf_families.SEQ and .VOCAB


def megac(binary, *argv):
    if argv and argv[0] in ("run", "train"):
        argv = (*argv, *numerics.threads_args())
    result = subprocess.run([binary, *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"megac {' '.join(argv)} failed:\n{result.stderr}")
    return result.stdout


def router_gaps(model, ids, k):
    """Per layer, the smallest gap over tokens between the k-th and (k+1)-th largest router
    probability (softmax of router_logits, as MixtralSparseMoeBlock computes it)."""
    import torch
    with torch.no_grad():
        out = model.hf(input_ids=ids, output_router_logits=True, return_dict=True)
    gaps = []
    for logits in out.router_logits:
        p = torch.softmax(logits.double(), dim=-1).sort(dim=-1, descending=True).values
        gaps.append(float((p[:, k - 1] - p[:, k]).min()))
    return gaps


def check_forward(args, family, opset, fold):
    """Problems of the eval-mode export at `opset`: logits against PyTorch, ops after raising."""
    import numpy as np
    import torch
    import hf_families as hf

    model, cfg = hf.build(family, seed=21)
    model.eval()
    workdir = os.path.join(args.workdir, f"{family}-forward-{opset}{'-folded' * fold}")
    os.makedirs(workdir)
    ids = torch.from_numpy(hf.pad_free(np.random.default_rng(121).integers(0, VOCAB, (2, SEQ)),
                                       cfg))
    with torch.no_grad():
        expected = model(ids).numpy()
    gaps = router_gaps(model, ids, cfg.num_experts_per_tok)
    path = hf.export(family, model, cfg, os.path.join(args.cache, "forward"), training=False,
                     opset=opset, fold=fold)
    mlir = os.path.join(workdir, f"{family}.mlir")
    megac(args.megac, "import", path, f"--input-shape=input_ids=2x{SEQ}", "--compile-to=input",
          "-o", mlir)
    with open(mlir) as f:
        ops = collections.Counter(re.findall(r"\bmega\.[a-z_]+", f.read()))
    layers = cfg.num_hidden_layers
    want = {"mega.topk_mask": layers, "mega.moe_dispatch": layers, "mega.moe_matmul": 3 * layers,
            "mega.moe_combine": layers, "mega.attention": layers}
    problems = [f"{op}={ops.get(op, 0)} (expected {n})" for op, n in want.items()
                if ops.get(op, 0) != n]
    np.save(os.path.join(workdir, "input_ids.npy"), ids.numpy())
    out_dir = os.path.join(workdir, "out")
    megac(args.megac, "run", mlir, f"--input=input_ids={workdir}/input_ids.npy",
          "--output-dir", out_dir)
    outputs = [f for f in os.listdir(out_dir) if f.endswith(".npy")]
    if len(outputs) != 1:
        return problems + [f"expected one output, megac wrote {outputs}"]
    got = np.load(os.path.join(out_dir, outputs[0]))
    error = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64))))
    if got.shape == expected.shape:
        # np.allclose's bound, element by element (NaN gives inf: it fails allclose too).
        ratio = np.abs(got.astype(np.float64) - expected) / (1e-4 + 1e-4 * np.abs(expected))
        numerics.report(f"{family} opset {opset}{' folded' * fold} logits against torch",
                        float(np.nan_to_num(ratio, nan=np.inf).max()), 1.0)
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
        problems.append(f"logits {list(got.shape)} differ from PyTorch's "
                        f"{list(expected.shape)} (max |megac - torch| {error:.2e})")
    print(f"{family} opset {opset}{' folded' * fold} eval: MoE ops "
          f"{ {op: ops.get(op, 0) for op in want} }; router gap k-th/(k+1)-th per layer "
          f"{['%.2e' % g for g in gaps]}; logits max |megac - torch| {error:.2e} -> "
          f"{'ok' if not problems else 'FAIL'}", flush=True)
    return problems


def check_training(args, family, opset, fold):
    """Problems of 3 AdamW steps of the training-mode export at `opset` against PyTorch."""
    import numpy as np
    import hf_families as hf
    import train_test as tt

    workdir = os.path.join(args.workdir, f"{family}-train-{opset}{'-folded' * fold}")
    os.makedirs(workdir)
    model, cfg = hf.build(family, seed=1234)
    path = hf.export(family, model, cfg, os.path.join(args.cache, "train"), training=True,
                     opset=opset, fold=fold)
    tokens = hf.pad_free(np.random.default_rng(7).integers(0, VOCAB, size=(ROWS, SEQ + 1)), cfg)
    data = os.path.join(workdir, "tokens.npy")
    np.save(data, tokens.astype(np.int64))
    # hf_train_test.py's run: Adam eps 1e-6, decay on dim >= 2, no clipping.
    c = dict(steps=STEPS, global_batch=4, micro_batch=2, torch_micro_batch=2, lr=1e-3,
             schedule="constant", warmup=0, min_lr=0.0, beta1=0.9, beta2=0.999, eps=1e-6,
             wd=0.1, clip=0.0, precision="fp32")
    # No load-balancing loss: transformers trains without one unless asked (output_router_logits),
    # megac adds its own by default.
    no_aux = ["--moe-aux-loss-coeff", "0"]
    records, weights, _ = tt.megac_train(args.megac, [path], data, workdir, c, no_aux)
    reference = copy.deepcopy(model)
    losses, norms = tt.torch_train(reference, tokens, c)
    problems = tt.check_records(records, c, losses, norms, 1e-4, 1e-4)
    if not fold:  # folded, the experts' weights are saved under onnx::MatMul_* names
        problems += tt.check_params(reference, weights, np.float32, 1e-4, 1e-6)
    worst = max(abs(r["loss"] - w) / abs(w) for r, w in zip(records, losses))
    print(f"{family} opset {opset}{' folded' * fold} training: losses "
          f"{[round(r['loss'], 6) for r in records]}, torch {[round(w, 6) for w in losses]}; "
          f"max relative difference {worst:.2e} -> {'ok' if not problems else 'FAIL'}",
          flush=True)
    if (family, opset, fold) == LAYOUT:
        # tp 2 x dp 2, and expert parallelism over the export's separate expert parameters
        # (concatenated by the raise, exchanged by moe_exchange like the zoo's).
        if shutil.which("mpirun") is None:
            numerics.skip(f"{family} opset {opset} layouts: mpirun is not on PATH")
            return problems
        for name, extra, said in (
                ("tp 2 x dp 2", ["--tp", "2", "--dp", "2"], "4 ranks (tp 2, pp 1, dp 2)"),
                ("dp 4 x ep 2", ["--dp", "4", "--ep", "2"], "4 ranks (tp 1, pp 1, dp 4, ep 2)")):
            layout = numerics.layout_check(args.megac, [path], data,
                                           os.path.join(workdir, name.replace(" ", "")), c,
                                           dict(c, micro_batch=1), ["--ranks", "4"] + extra,
                                           said, no_aux)
            print(f"{family} opset {opset} {name} against one rank in fp64 -> "
                  f"{'ok' if not layout else 'FAIL'}", flush=True)
            problems += layout
    return problems


def check_router_logits(args):
    """Problems of a Mixtral export whose outputs include the router logits (computed before the
    TopK, they stay outside the raised block): every output against PyTorch."""
    import numpy as np
    import torch
    import hf_families as hf

    model, cfg = hf.build("mixtral", seed=21)

    class WithRouter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = model.hf

        def forward(self, input_ids):
            out = self.hf(input_ids=input_ids, output_router_logits=True, return_dict=True)
            return (out.logits, *out.router_logits)

    module = WithRouter().eval()
    workdir = os.path.join(args.workdir, "router-logits")
    os.makedirs(workdir)
    ids = torch.from_numpy(hf.pad_free(np.random.default_rng(121).integers(0, VOCAB, (2, SEQ)),
                                       cfg))
    names = ["logits"] + [f"router_logits_{i}" for i in range(cfg.num_hidden_layers)]
    path = os.path.join(workdir, "mixtral.onnx")
    torch.onnx.export(module, (ids,), path, input_names=["input_ids"], output_names=names,
                      opset_version=17, do_constant_folding=False)
    with torch.no_grad():
        expected = [t.numpy() for t in module(ids)]
    np.save(os.path.join(workdir, "input_ids.npy"), ids.numpy())
    out_dir = os.path.join(workdir, "out")
    megac(args.megac, "run", path, f"--input-shape=input_ids=2x{SEQ}",
          f"--input=input_ids={workdir}/input_ids.npy", "--output-dir", out_dir)
    problems, errors = [], []
    for name, want in zip(names, expected):
        if not os.path.exists(os.path.join(out_dir, f"{name}.npy")):
            problems.append(f"router logits export: megac wrote no output {name}")
            errors.append(float("nan"))
            continue
        got = np.load(os.path.join(out_dir, f"{name}.npy"))
        errors.append(float(np.max(np.abs(got.astype(np.float64) - want))))
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            problems.append(f"router logits export: {name} differs from PyTorch's "
                            f"(max {errors[-1]:.2e})")
    print(f"mixtral with router logits as outputs: max |megac - torch| "
          f"{dict(zip(names, ('%.2e' % e for e in errors)))} -> "
          f"{'ok' if not problems else 'FAIL'}", flush=True)
    return problems


def mutate(source, target, edit):
    """Writes `source` with `edit(graph)` applied to `target`; returns the name `edit` gives."""
    import onnx
    model = onnx.load(source)
    name = edit(model.graph)
    onnx.save(model, target)
    return name


def check_errors(args):
    """Problems of the variants megac must refuse: each import fails naming its node."""
    import onnx
    import hf_families as hf

    model, cfg = hf.build("mixtral", seed=21)
    source = hf.export("mixtral", model.eval(), cfg, os.path.join(args.cache, "forward"),
                       training=False)
    prefix = "/hf/model/layers.1/block_sparse_moe/"

    def node(graph, name):
        return next(n for n in graph.node if n.name == prefix + name)

    def tanh_expert(graph):  # expert 2's SiLU becomes x * tanh(x)
        node(graph, "experts.2/act_fn/Sigmoid").op_type = "Tanh"
        return prefix + "experts.2/w1/MatMul"

    def product_gates(graph):  # routing weights vals * sum instead of vals / sum
        node(graph, "Div").op_type = "Mul"
        return prefix + "Div"

    def routing_output(graph):  # the tokens routed to expert 0 as a graph output
        squeeze = node(graph, "Squeeze_1")
        graph.output.append(onnx.helper.make_tensor_value_info(squeeze.output[0],
                                                               onnx.TensorProto.INT64, ["n"]))
        return squeeze.name

    def plain_topk(graph):  # a TopK that routes nothing: the values are the graph's output
        h = onnx.helper
        k = h.make_tensor("k", onnx.TensorProto.INT64, [1], [2])
        graph.CopyFrom(h.make_graph(
            [h.make_node("TopK", ["x", "k"], ["values", "indices"], name="top2")], "plain",
            [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
            [h.make_tensor_value_info("values", onnx.TensorProto.FLOAT, [3, 2])], [k]))
        return "top2"

    problems = []
    for edit, expect in ((tanh_expert, "SiLU"), (product_gates, "routing weights"),
                         (routing_output, "graph output"), (plain_topk, "OneHot")):
        target = os.path.join(args.workdir, f"{edit.__name__}.onnx")
        culprit = mutate(source, target, edit)
        shape = [] if edit is plain_topk else [f"--input-shape=input_ids=2x{SEQ}"]
        result = subprocess.run([args.megac, "import", target, *shape, "-o",
                                 os.path.join(args.workdir, f"{edit.__name__}.mlir")],
                                capture_output=True, text=True)
        message = result.stderr
        ok = (result.returncode != 0 and f"'{culprit}'" in message and expect in message
              and "cannot raise the mixture-of-experts block" in message)
        print(f"error case {edit.__name__}: exit {result.returncode}, "
              f"{message.splitlines()[0] if message else 'no message'} -> "
              f"{'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            problems.append(f"{edit.__name__}: expected an import error naming '{culprit}' and "
                            f"'{expect}', got exit {result.returncode}: {message}")
    return problems


def main():
    # Exports are cached beside the work folder, which is made anew.
    args = venv_test_args(cache=True)
    problems = []
    for family, opset, fold in CASES:
        for check in (check_forward, check_training):
            what = f"{family} opset {opset}{' folded' * fold} {check.__name__[6:]}"
            try:
                problems += [f"{what}: {p}" for p in check(args, family, opset, fold)]
            except RuntimeError as e:
                problems.append(f"{what}: {e}")
    try:
        problems += check_router_logits(args)
    except RuntimeError as e:
        problems.append(f"router logits export: {e}")
    problems += check_errors(args)
    for p in problems:
        print(f"  FAIL {p}")
    print("PASS" if not problems else f"FAIL ({len(problems)} problems)")
    return numerics.exit_code(len(problems))


if __name__ == "__main__":
    sys.exit(main())
