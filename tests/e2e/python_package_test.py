#!/usr/bin/env python3
"""The megac Python package (python/, issue 36) against `megac train` on the same plan and data:

(a) a tiny zoo GPT trained 3 steps through megac.TrainSession logs exactly the CLI's loss, lr and
    grad_norm at every step (same plan, same rows, same seed: bit for bit), its step dicts have
    the --log-json keys, its log_json file the same lines' values, and parameters() equals the
    CLI's --save-weights tensor by tensor, bit for bit;
(b) batches given to step() (the rows the CLI reads: step i reads rows (i*B + j) mod N of the
    .npy) train exactly as the CLI does, as numpy int64 and int32 arrays;
(c) errors raise megac.MegacError with megac's message: a bad spec, an unknown keyword, a missing
    one, a batch of the wrong shape, a float batch, a token outside the vocabulary, a stopped
    session; Model.describe() counts what `megac describe` prints; another Python thread runs
    while a step does (the GIL is released);
(d) Model.from_torch: a torch GPT's 3 steps equal the CLI's on the ONNX it exported;
(e) `mpirun -np 2 python` with ranks=2, dp=2 steps as one rank does (fp64, 1e-12);
(f) megac.plan: the layouts are `megac plan --json`'s, field for field, with and without pins;
    explain() is `megac plan --explain`'s text (timings aside) and timeline(path) its
    --timeline SVG byte for byte; a model that fits nowhere gives no layouts and the CLI's
    report; a bad cluster, an unknown pin and a bad value raise MegacError;
(g) TrainSession.load(path) and load=DIR resume a checkpoint of step 2 so that step 3 equals
    the uninterrupted CLI run's bit for bit (as `megac train --load` does); a missing folder
    and no folder at all raise;
(h) Model.from_hf(DIR, seq=S): a tiny Llama config.json describes as `megac describe --model
    hf:DIR,seq=S` counts and trains 3 steps exactly as `megac train --model hf:DIR,seq=S`.

usage: python_package_test.py --megac build/bin/megac --pythonpath build/python --workdir DIR
Exits 77 (a ctest skip) when the module was not built (no pybind11: MEGAC_PYTHON=OFF).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "examples", "tiny-corpus.npy")
GPT = "gpt:layers=2,hidden=64,heads=4,seq=64,vocab=256"
RUN = {"data": DATA, "steps": 3, "global_batch": 8, "micro_batch": 4, "lr": 3e-3, "seed": 5,
       "threads": 1}
from e2e_support import SKIP, check, import_megac_package  # noqa: E402
# Keys whose values are timings or this process's memory: present, not compared across runs.
MEASURED = {"tokens_per_s", "step_time_s", "model_tflops_per_rank", "mem_rss_peak_bytes"}


def cli_args(run):
    args = []
    for key, value in run.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=dtypes[info["dtype"]]).reshape(
            info["shape"])
    return out


def raises(megac, call, needle, what):
    try:
        call()
    except megac.MegacError as e:
        check(needle in str(e), f"{what} raises MegacError: {e}")
        return
    check(False, f"{what} raises MegacError")


def torch_matches_cli(args, megac):
    """Model.from_torch: a torch GPT (tests/e2e/torch_models.py) exported through torch.onnx
    trains 3 steps exactly as `megac train` does on the ONNX file it wrote (same plan, data and
    seed). Needs torch (Debian's python3-torch, /usr/bin/python3's)."""
    import torch
    sys.path.insert(0, HERE)
    from torch_models import GptModel
    torch.manual_seed(3)
    gpt = GptModel(layers=1, hidden=32, heads=2, seq=64, vocab=256, gelu="tanh")
    path = os.path.join(args.workdir, "torch_gpt.onnx")
    model = megac.Model.from_torch(gpt, torch.randint(0, 256, (2, 64)), path=path)
    check(model.describe()["parameters"] == sum(p.numel() for p in gpt.parameters()),
          "from_torch: describe() counts torch's parameters")
    session = megac.TrainSession(model, **RUN)
    losses = [session.step()["loss"] for _ in range(3)]
    session.stop()
    log = os.path.join(args.workdir, "torch_cli.jsonl")
    subprocess.run([args.megac, "train", path, *cli_args(RUN), "--log-json", log], check=True,
                   capture_output=True)
    cli = [json.loads(line)["loss"] for line in open(log)]
    check(losses == cli, f"from_torch: 3 steps equal megac train on the exported ONNX: {losses}")


RANK_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import megac
s = megac.TrainSession(megac.Model.from_spec(sys.argv[2]), **json.loads(sys.argv[3]))
losses = [s.step()["loss"] for _ in range(2)]
params = s.parameters()
if s.rank == 0:
    np.savez(sys.argv[4], **params)
    print(json.dumps({"ranks": s.ranks, "losses": losses}))
s.stop()
"""


def mpi_matches_one_rank(args, megac, np):
    """`mpirun -np 2 python SCRIPT` with ranks=2, dp=2 (fp64) steps as one rank does: the same
    losses and gathered parameters to 1e-12 relative (dp 2 sums the two halves' gradients in
    another order than one rank: fp64 rounding, ~1e-16 per operation, through two Adam steps),
    plus 1e-12 absolute for the key biases: their true gradient is 0 (softmax ignores a shift
    of the scores), so they hold Adam's steps on roundoff (~1e-15 here), not values to compare
    relatively. The other parameters are O(0.01..1) and move by ~lr = 3e-3 a step.
    False (a skip) without mpirun."""
    if not shutil.which("mpirun"):
        print("SKIP: the 2-rank case needs mpirun, which is not on PATH (install openmpi-bin)")
        return False
    run = dict(RUN, steps=2, precision="fp64")
    one = megac.TrainSession(megac.Model.from_spec(GPT), **run)
    want = [one.step()["loss"] for _ in range(2)]
    want_params = one.parameters()
    one.stop()
    script = os.path.join(args.workdir, "rank.py")
    with open(script, "w") as f:
        f.write(RANK_SCRIPT)
    out = os.path.join(args.workdir, "dp2.npz")
    launcher = ["mpirun", "--oversubscribe", "-np", "2"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        launcher.insert(1, "--allow-run-as-root")
    result = subprocess.run([*launcher, sys.executable, script, os.path.abspath(args.pythonpath),
                             GPT, json.dumps(dict(run, ranks=2, dp=2)), out],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
    check(result.returncode == 0, "mpirun -np 2 python: a 2-rank session runs")
    got = json.loads(result.stdout.strip().splitlines()[-1])
    check(got["ranks"] == 2 and np.allclose(got["losses"], want, rtol=1e-12, atol=0),
          f"mpirun -np 2 python, dp 2: losses {got['losses']} = one rank's {want}")
    params = np.load(out)
    check(sorted(params.files) == sorted(want_params) and
          all(np.allclose(params[k], want_params[k], rtol=1e-12, atol=1e-12) for k in want_params),
          "dp 2: rank 0's gathered parameters equal one rank's (1e-12)")
    return True


PLAN = {"cluster": "cpu:1x2", "global_batch": 8, "precision": "fp32"}


def plan_cli(args, *extra):
    return subprocess.run([args.megac, "plan", "--model", GPT, "--cluster", PLAN["cluster"],
                           "--global-batch", str(PLAN["global_batch"]), "--precision",
                           PLAN["precision"], *extra], check=True, capture_output=True,
                          text=True).stdout


def untimed(text):
    """The report without its wall-clock timings (search, model read, compile)."""
    return re.sub(r"in [0-9]+\.[0-9]+ s", "in T s", text)


def plan_matches_cli(args, megac, model):
    plan = megac.plan(model, **PLAN)
    cli = json.loads(plan_cli(args, "--json"))
    check(len(plan.layouts) == len(cli["layouts"]) == 5 and
          [layout.as_dict() for layout in plan] == cli["layouts"],
          f"plan(): the 5 layouts are megac plan --json's, field for field: {plan.best!r}")
    best = plan.best
    check(best.step_time_s == cli["layouts"][0]["step_time_s"] and
          best.mfu == cli["layouts"][0]["mfu"] and best.breakdown["compute_s"] > 0 and
          best.memory["parameters"] > 0 and best.ranks == 2 and plan.devices == 2,
          f"plan.best: {best.step_time_s} s/step, MFU {best.mfu}, compute "
          f"{best.breakdown['compute_s']} s, parameters {best.memory['parameters']} B, 2 ranks")
    config = best.run_config()
    check(config["ranks"] == 2 and config["tp"] == best.tp and config["dp"] == best.dp and
          config["micro_batch"] == best.micro_batch and config["precision"] == "fp32",
          f"run_config() gives TrainSession the layout: {config}")
    check(untimed(plan.explain()) == untimed(plan_cli(args, "--explain")),
          "explain() is megac plan --explain's text (timings aside)")
    check(untimed(plan.report()) == untimed(plan_cli(args)), "report() is megac plan's text")
    svg, cli_svg = os.path.join(args.workdir, "plan.svg"), os.path.join(args.workdir, "cli.svg")
    plan.timeline(svg)
    plan_cli(args, "--timeline", cli_svg, "--no-compile")
    check(open(svg, "rb").read() == open(cli_svg, "rb").read() and
          "<svg " in open(svg).read(), "timeline(path) writes megac plan --timeline's SVG")
    pinned = megac.plan(model, **PLAN, tp=1, micro_batch=2)
    cli_pinned = json.loads(plan_cli(args, "--json", "--tp", "1", "--micro-batch", "2"))
    check([layout.as_dict() for layout in pinned] == cli_pinned["layouts"] and
          all(layout.tp == 1 and layout.micro_batch == 2 for layout in pinned),
          f"pins tp=1, micro_batch=2 are --tp 1 --micro-batch 2: {[repr(x) for x in pinned]}")
    zb = megac.plan(model, **PLAN, pp=2, schedule="zb-h1")
    cli_zb = json.loads(plan_cli(args, "--json", "--pp", "2", "--schedule", "zb-h1"))
    check([layout.as_dict() for layout in zb] == cli_zb["layouts"] and
          all(layout.as_dict()["schedule"] == "zb-h1" for layout in zb),
          f"pins pp=2, schedule='zb-h1' are --pp 2 --schedule zb-h1: {[repr(x) for x in zb]}")
    raises(megac, lambda: megac.plan(model, **PLAN, schedule="zigzag"), "schedule: 'zigzag'",
           "an unknown schedule")
    big = megac.Model.from_spec("gpt:layers=48,hidden=8192,heads=64,seq=2048,vocab=50304")
    none = megac.plan(big, cluster="a100-80g:1x1", global_batch=8)
    check(none.best is None and none.layouts == [] and none.smallest_memory is not None and
          "no layout fits" in none.report(),
          f"a 39B model on one A100 fits nowhere: {none.report().splitlines()[-1]}")
    raises(megac, lambda: none.timeline(os.path.join(args.workdir, "none.svg")),
           "no layout fits", "timeline() with no layout")
    raises(megac, lambda: megac.plan(model, cluster="abacus:1x2", global_batch=8), "cluster:",
           "a bad cluster")
    try:
        megac.plan(model, **PLAN, bogus=1)
        check(False, "an unknown pin raises TypeError")
    except TypeError as e:
        check("bogus" in str(e), f"an unknown pin raises TypeError: {e}")
    raises(megac, lambda: megac.plan(model, **PLAN, zero=4), "zero: 4 is not 0, 1, 2 or 3",
           "zero=4")
    raises(megac, lambda: megac.plan(model, **PLAN, tp="2"), "tp: '2' is not an integer",
           "tp='2'")


def load_resumes(args, megac, cli):
    """A checkpoint of step 2 resumed by load(path), and by load=DIR, continues as the
    uninterrupted CLI run: step 3 bit for bit (megac's resume is deterministic)."""
    ckpt = os.path.join(args.workdir, "ckpt")
    first = megac.TrainSession(megac.Model.from_spec(GPT), save=ckpt, **RUN)
    first.step()
    first.step()
    saved = first.save()
    first.stop()
    check(os.path.isdir(saved), f"save() wrote {saved}")
    later = megac.TrainSession(megac.Model.from_spec(GPT), **RUN)
    check(later.resumed is None, "a session without load= resumed nothing")
    resumed = later.load(ckpt)
    check(resumed["step"] == 2 and later.steps_done == 2 and
          os.path.samefile(resumed["path"], saved) and later.resumed == resumed,
          f"load(path) resumed {resumed}")
    step3 = later.step()
    check(step3["step"] == 3 and step3["loss"] == cli[2]["loss"] and
          step3["grad_norm"] == cli[2]["grad_norm"],
          f"after load(), step 3 equals the uninterrupted run: loss {step3['loss']!r}")
    later.stop()
    again = megac.TrainSession(megac.Model.from_spec(GPT), load=ckpt, **RUN)
    check(again.resumed is not None and again.resumed["step"] == 2 and again.steps_done == 2,
          "load=DIR resumes when the session opens, as megac train --load")
    check(again.step()["loss"] == cli[2]["loss"], "and its step 3 equals the CLI's too")
    raises(megac, lambda: again.load(os.path.join(args.workdir, "no-such")),
           "load: no checkpoint directory", "load() of a missing folder")
    again.stop()
    s = megac.TrainSession(megac.Model.from_spec(GPT), **RUN)
    raises(megac, s.load, "give the checkpoint folder", "load() with no folder")
    s.stop()


TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 128,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "hidden_act": "silu"}


def from_hf_matches_cli(args, megac):
    folder = os.path.join(args.workdir, "tiny-llama")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TINY_LLAMA, f)
    model = megac.Model.from_hf(folder, seq=64)
    spec = f"hf:{folder},seq=64"
    out = subprocess.run([args.megac, "describe", "--model", spec], check=True,
                         capture_output=True, text=True).stdout
    count = model.describe()["parameters"]
    check(f"{count:,}" in out, f"from_hf(DIR, seq=64) counts {count:,} parameters as megac "
          "describe --model hf:DIR,seq=64")
    session = megac.TrainSession(model, **RUN)
    losses = [session.step()["loss"] for _ in range(3)]
    session.stop()
    log = os.path.join(args.workdir, "hf_cli.jsonl")
    subprocess.run([args.megac, "train", "--model", spec, *cli_args(RUN), "--log-json", log],
                   check=True, capture_output=True)
    want = [json.loads(line)["loss"] for line in open(log)]
    check(losses == want, f"from_hf: 3 steps equal megac train --model hf:DIR,seq=64: {losses}")
    raises(megac, lambda: megac.Model.from_hf(os.path.join(args.workdir, "no-such")), "no-such",
           "from_hf of a missing folder")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    parser.add_argument("--pythonpath", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    megac = import_megac_package(args.pythonpath)
    if megac is None:
        return SKIP
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    w = args.workdir

    # The CLI's run: its JSON log and its final weights.
    cli_log, cli_weights = os.path.join(w, "cli.jsonl"), os.path.join(w, "cli.safetensors")
    subprocess.run([args.megac, "train", "--model", GPT, *cli_args(RUN), "--log-json", cli_log,
                    "--save-weights", cli_weights], check=True, capture_output=True)
    cli = [json.loads(line) for line in open(cli_log)]
    check(len(cli) == 3, "megac train logged 3 steps")

    # (a) the configured data through the module.
    model = megac.Model.from_spec(GPT)
    py_log = os.path.join(w, "py.jsonl")
    session = megac.TrainSession(model, log_json=py_log, **RUN)
    check(session.sequence_length == 64 and session.vocab == 256 and session.global_batch == 8,
          "the session reads S = 64, vocab 256, global batch 8")
    steps = [session.step() for _ in range(3)]
    for got, want in zip(steps, cli):
        check(set(got) == set(want), f"step {want['step']}: the JSON log's keys {sorted(got)}")
        same = {k: got[k] for k in want if k not in MEASURED}
        check(same == {k: want[k] for k in same},
              f"step {want['step']}: loss {got['loss']!r}, lr, grad_norm, ... equal the CLI's")
    logged = [json.loads(line) for line in open(py_log)]
    check([r["loss"] for r in logged] == [r["loss"] for r in cli],
          "log_json= holds the same losses")
    params = session.parameters()
    weights = read_safetensors(cli_weights)
    check(sorted(params) == sorted(weights), f"parameters() names the CLI's {len(weights)} tensors")
    check(all(params[k].dtype == weights[k].dtype and params[k].shape == weights[k].shape and
              np.array_equal(params[k], weights[k]) for k in weights),
          "parameters() after 3 steps equals --save-weights bit for bit")
    session.stop()
    raises(megac, session.step, "the session is stopped", "a step after stop()")

    # (b) the same rows given as batches: step i reads rows (i*B + j) mod N.
    rows = np.load(DATA)
    b = RUN["global_batch"]
    for dtype in (np.int64, np.int32):
        s = megac.TrainSession(megac.Model.from_spec(GPT), **RUN)
        losses = []
        for i in range(3):
            batch = rows[[(i * b + j) % len(rows) for j in range(b)]].astype(dtype)
            losses.append(s.step(batch)["loss"])
        check(losses == [r["loss"] for r in cli],
              f"batches given as {np.dtype(dtype).name} train exactly as the CLI: {losses}")
        s.stop()

    # The GIL is released while a step runs: a Python thread keeps running during step(). It
    # records the time at each iteration; with the GIL held by the step, it could only run
    # before or after it, so some of its times must lie well inside the step (10 ms from each
    # end: more than the interpreter's 5 ms switch interval). The session steps 8x RUN's batch:
    # RUN's own step can take under 20 ms, too short for those margins.
    import threading
    import time
    s = megac.TrainSession(megac.Model.from_spec(GPT), **dict(RUN, global_batch=64, micro_batch=8))
    times, done = [], threading.Event()

    def tick():
        while not done.is_set():
            times.append(time.monotonic())

    thread = threading.Thread(target=tick)
    thread.start()
    time.sleep(0.01)
    t0 = time.monotonic()
    s.step()
    t1 = time.monotonic()
    done.set()
    thread.join()
    inside = [t for t in times if t0 + 0.01 < t < t1 - 0.01]
    check(t1 - t0 > 0.02 and inside,
          f"another Python thread ran {len(inside)} times during a {1e3 * (t1 - t0):.0f} ms step")
    s.stop()

    # (c) errors carry megac's message.
    raises(megac, lambda: megac.Model.from_spec("gpt:layers=two"), "--model",
           "a bad spec")
    raises(megac, lambda: megac.TrainSession(model, bogus_flag=1, **RUN),
           "unknown option --bogus-flag", "an unknown keyword")
    missing = dict(RUN)
    del missing["steps"]
    raises(megac, lambda: megac.TrainSession(model, **missing), "missing --steps",
           "a missing steps=")
    s = megac.TrainSession(model, **RUN)
    raises(megac, lambda: s.step(rows[:4]), "has shape [4, 65]", "a batch of 4 rows")
    raises(megac, lambda: s.step(rows[:8].astype(np.float32)), "integer token ids",
           "a float32 batch")
    bad = rows[:8].copy()
    bad[1, 3] = 256
    raises(megac, lambda: s.step(bad), "outside the model's vocabulary [0, 256)",
           "a token outside the vocabulary")
    check(s.steps_done == 0, "failed steps take no step")
    s.stop()
    plan_matches_cli(args, megac, model)
    load_resumes(args, megac, cli)
    from_hf_matches_cli(args, megac)
    torch_matches_cli(args, megac)
    if not mpi_matches_one_rank(args, megac, np):
        return SKIP
    d = model.describe()
    out = subprocess.run([args.megac, "describe", "--model", GPT], check=True,
                         capture_output=True, text=True).stdout
    check(f"{d['parameters']:,}" in out and d["training_flops"] == 3 * d["forward_flops"],
          f"describe(): {d['parameters']:,} parameters as megac describe prints, training = 3x "
          "forward FLOPs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
