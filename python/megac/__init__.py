"""megac from Python: models, their counts, and training sessions over megac's driver.

    import megac
    model = megac.Model.from_spec("gpt:layers=2,hidden=64,heads=4,seq=64,vocab=256")
    print(model.describe()["parameters"])
    plan = megac.plan(model, cluster="cpu:1x2", global_batch=8, precision="fp32")
    print(plan.best, plan.explain())   # the layouts, best first; `megac plan --explain`'s text
    session = megac.TrainSession(model, data="examples/tiny-corpus.npy", steps=3,
                                 global_batch=8, micro_batch=4, lr=3e-3)
    for _ in range(3):
        print(session.step())          # the step's metrics: the keys of --log-json
    weights = session.parameters()     # name -> numpy array, gathered whole
    session.stop()

The keyword arguments of TrainSession are `megac train`'s flags with underscores (global_batch=8
is --global-batch 8; True gives a bare flag, False or None leaves it out; a list gives several
values, as data_path=[0.7, "A", 0.3, "B"]). megac's errors raise MegacError with its message.
docs/python.md has the whole story.
"""
import json as _json
import os

from . import _megac
from ._megac import MegacError

__all__ = ["Model", "Layout", "Plan", "plan", "TrainSession", "MegacError"]


class Model:
    """A model megac can train: a zoo spec (or hf:PATH[,seq=S]) or an ONNX file."""

    def __init__(self, core):
        self._core = core

    @classmethod
    def from_spec(cls, spec):
        """A zoo model ("gpt:layers=2,hidden=64,...") or a transformers config ("hf:DIR,seq=S");
        a bad spec raises MegacError naming what is wrong."""
        return cls(_megac.Model.from_spec(str(spec)))

    @classmethod
    def from_hf(cls, path, seq=None):
        """A Hugging Face model folder (or its config.json) read as `--model hf:PATH[,seq=S]`:
        the transformers config's family, sizes and options (docs/huggingface.md); `seq` the
        sequence length (training takes the data's when it is None)."""
        spec = "hf:" + os.fspath(path)
        if seq is not None:
            spec += f",seq={int(seq)}"
        return cls(_megac.Model.from_spec(spec))

    @classmethod
    def from_onnx(cls, path, input_shapes=None):
        """An ONNX file; `input_shapes` binds symbolic input dims for describe(), as
        {"input_ids": [1, 64]} (training binds input_ids to the data's [micro_batch, S])."""
        shapes = {str(k): [int(d) for d in v] for k, v in (input_shapes or {}).items()}
        return cls(_megac.Model.from_onnx(str(path), shapes))

    @classmethod
    def from_torch(cls, module, example_inputs, path=None):
        """A torch.nn.Module exported by torch.onnx.export (torch is needed only here) to `path`
        (default: a temporary .onnx file that the Model keeps): `example_inputs` a tensor of
        token ids [b, S] or a tuple of inputs; the first input is named input_ids, the output
        logits, the batch dim dynamic (describe() binds it to the example's), training mode
        (dropout kept), opset 17."""
        import tempfile

        import torch
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        if path is None:
            handle, path = tempfile.mkstemp(prefix="megac-", suffix=".onnx")
            os.close(handle)
        torch.onnx.export(module, inputs, path, input_names=["input_ids"],
                          output_names=["logits"], opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING,
                          dynamic_axes={"input_ids": {0: "batch"}})
        return cls.from_onnx(path, {"input_ids": list(inputs[0].shape)})

    def describe(self):
        """`megac describe`'s counts of the forward graph as a dict: model, parameters,
        active_parameters, parameter_tensors, parameter_bytes, tokens, forward_flops,
        forward_matmul_flops, training_flops (3x forward), training_flops_per_token, ops."""
        return self._core.describe()

    def _args(self):
        if self._core.spec is not None:
            return ["--model", self._core.spec]
        return [self._core.file]

    def __repr__(self):
        return f"megac.Model({self._core.spec or self._core.file!r})"


class Layout:
    """One layout the planner costed (a row of `megac plan`'s table): the parallel split, its
    predicted step time, throughput, MFU and memory per device, and the step's breakdown."""

    def __init__(self, fields):
        self._fields = dict(fields)
        f = self._fields
        self.tp, self.pp, self.dp = f["tp"], f["pp"], f["dp"]
        self.ep, self.vpp, self.cp = f.get("ep", 1), f.get("vpp", 1), f.get("cp", 1)
        self.micro_batch = f["micro_batch"]
        self.sequence_parallel = f["sequence_parallel"]
        self.zero = f["zero"]
        self.recompute, self.precision = f["recompute"], f["precision"]
        self.step_time_s, self.tokens_per_s = f["step_time_s"], f["tokens_per_s"]
        self.tflops_per_gpu, self.mfu = f["tflops_per_gpu"], f["mfu"]
        self.memory_per_gpu_bytes, self.fits = f["memory_per_gpu_bytes"], f["fits"]
        self.breakdown = dict(f.get("breakdown", {}))
        self.memory = dict(f.get("memory", {}))
        self.kernel_launches = dict(f.get("kernel_launches", {}))
        self.kernel_seconds = dict(f.get("kernel_seconds", {}))
        self.kernel_bytes = dict(f.get("kernel_bytes", {}))

    @property
    def ranks(self):
        """Devices the layout runs on: tp x cp x pp x dp (ep is carved out of dp)."""
        return self.tp * self.cp * self.pp * self.dp

    def as_dict(self):
        """Every field `megac plan --json` gives the layout."""
        return dict(self._fields)

    def run_config(self):
        """The layout as TrainSession keyword arguments (`megac train`'s layout flags): ranks,
        tp, pp, dp, micro_batch, zero, precision, and sequence_parallel, vpp, ep, recompute
        where the layout uses them. Add the data, steps, global_batch and the rest."""
        config = {"ranks": self.ranks, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                  "micro_batch": self.micro_batch, "zero": self.zero,
                  "precision": self.precision}
        if self.sequence_parallel:
            config["sequence_parallel"] = True
        if self.vpp > 1:
            config["vpp"] = self.vpp
        if self.ep > 1:
            config["ep"] = self.ep
        if self.cp > 1:
            config["cp"] = self.cp
        if self.recompute != "none":
            config["recompute"] = self.recompute
        return config

    def __repr__(self):
        parts = [f"tp={self.tp} pp={self.pp} dp={self.dp}"]
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.vpp > 1:
            parts.append(f"vpp={self.vpp}")
        parts.append(f"mb={self.micro_batch}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.zero:
            parts.append(f"zero{self.zero}")
        if self.recompute != "none":
            parts.append(f"recompute={self.recompute}")
        return (f"megac.Layout({' '.join(parts)}: {self.step_time_s:.4g} s/step, "
                f"MFU {100 * self.mfu:.1f}%, {self.memory_per_gpu_bytes / 2**30:.2f} GiB/device)")


class Plan:
    """The planner's answer for a model on a cluster (`megac plan --cluster`): the best layouts,
    fastest first (`layouts`, `best`; empty / None when none fits), `explain()` the text
    `megac plan --explain` prints, `timeline(path)` #1's pipeline as `--timeline` draws it."""

    def __init__(self, core, result):
        self._core = core
        self.model = result["model"]
        self.cluster = result["cluster"]
        self.stack = result["stack"]
        self.devices = result["devices"]
        self.global_batch = result["global_batch"]
        self.evaluated = result["evaluated"]
        self.layouts = [Layout(layout) for layout in result["layouts"]]
        smallest = result.get("smallest_memory")
        self.smallest_memory = Layout(smallest) if smallest else None

    @property
    def best(self):
        """The fastest layout that fits, or None when none fits (report() says why)."""
        return self.layouts[0] if self.layouts else None

    def report(self):
        """What `megac plan` prints: the table, #1's breakdown and why it wins (or, when nothing
        fits, what the smallest layout needs and which single change would fit)."""
        return self._core.report(False)[1]

    def explain(self):
        """What `megac plan --explain` prints: the report, #1's step time by op class, and #1
        compiled down to its plan with every collective's predicted time."""
        return self._core.report(True)[1]

    def timeline(self, path):
        """Writes #1's pipeline schedule as an SVG (`megac plan --timeline`); returns path."""
        self._core.draw(os.fspath(path), True)
        return path

    def trace(self, path):
        """Writes #1's simulated schedule as a Chrome trace (`megac plan --trace`); returns
        path."""
        self._core.draw(os.fspath(path), False)
        return path

    def __len__(self):
        return len(self.layouts)

    def __iter__(self):
        return iter(self.layouts)

    def __getitem__(self, index):
        return self.layouts[index]

    def __str__(self):
        return self.report()

    def __repr__(self):
        return (f"megac.Plan({self.model} on {self.cluster}, global batch {self.global_batch}: "
                f"{len(self.layouts)} layouts, best {self.best!r})")


def plan(model, cluster, global_batch, *, tp=None, pp=None, dp=None, ep=None, cp=None,
         vpp=None, micro_batch=None, zero=None, sequence_parallel=None, recompute=None, precision=None,
         schedule=None, cp_comm_type=None, reshard_after_forward=None, seq=None, dropout=None,
         stack=None, top=None):
    """The planner's search over layouts of `model` on `cluster` ("a100-80g:128x8", "cpu:1x2",
    as `megac plan --cluster`) for `global_batch` samples per step, as a Plan. Keyword
    arguments pin the layout as `megac plan`'s flags do (None: the planner chooses): tp, pp, dp,
    ep, cp, vpp, micro_batch, zero (0-3), sequence_parallel, recompute, precision (bf16 by default, as the
    CLI), schedule ("1f1b", "interleaved", "zb-h1", "zb-h2", "zbv"), cp_comm_type ("all_gather",
    "p2p"), reshard_after_forward (ZeRO-3's, True or False); also seq (an ONNX model's sequence length; its input_ids binding by default), dropout,
    stack (the software stack costed), top (how many layouts, 5). Errors (a bad cluster, pin or
    model) raise MegacError."""
    if not isinstance(model, Model):
        raise TypeError("megac.plan takes a megac.Model, not " + type(model).__name__)
    pins = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "cp": cp, "vpp": vpp, "micro_batch": micro_batch,
            "zero": zero, "sequence_parallel": sequence_parallel, "recompute": recompute,
            "precision": precision, "schedule": schedule, "cp_comm_type": cp_comm_type,
            "reshard_after_forward": reshard_after_forward, "seq": seq, "dropout": dropout, "stack": stack, "top": top}
    core = _megac.PlanSearch(model._core, str(cluster), int(global_batch),
                             {k: v for k, v in pins.items() if v is not None})
    return Plan(core, _json.loads(core.json()))


def _flag_args(run_config):
    args = []
    for key, value in run_config.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args.append(flag)
            args.extend(str(v) for v in value)
        else:
            args += [flag, str(value)]
    return args


class TrainSession:
    """A training run of `model` on this process's rank, configured by `megac train`'s flags as
    keyword arguments. Under `mpirun -np N python SCRIPT.py` with ranks=N every rank runs the
    same script; rank 0 writes log_json / tensorboard_dir."""

    def __init__(self, model, **run_config):
        if not isinstance(model, Model):
            raise TypeError("megac.TrainSession takes a megac.Model (Model.from_spec, "
                            "Model.from_onnx), not " + type(model).__name__)
        self.model = model
        self._core = _megac.Session(model._args() + _flag_args(run_config))

    def step(self, batch=None):
        """One optimizer step on the configured data (batch None) or on `batch`, an integer
        array [global_batch, S + 1] of token ids (numpy, or a torch tensor via .numpy()); returns
        the step's metrics, the keys of the --log-json line. The GIL is released while it runs."""
        if batch is not None and hasattr(batch, "detach") and hasattr(batch, "numpy"):
            batch = batch.detach().cpu().numpy()  # a torch tensor
        return _json.loads(self._core.step(batch))

    def evaluate(self, part="val"):
        """The mean loss of eval_iters batches of the validation ("val") or test ("test") data;
        logged like the CLI's evaluations."""
        return self._core.evaluate(part)

    def parameters(self):
        """Every parameter, gathered whole in the model's own shapes, as {name: numpy array} on
        rank 0 (other ranks: {}); every rank calls it."""
        return self._core.parameters()

    def save(self):
        """A checkpoint of the steps done in the save= folder; returns its path."""
        return self._core.save()

    def load(self, path=None):
        """Resumes from the newest usable checkpoint under `path` (None: the load= folder), as
        `megac train --load` does: parameters, optimizer state, loss scale and the step count, so
        step() continues after it; finetune=True loads the parameters only. Returns {"path",
        "step", "layout"}. (load=DIR given to TrainSession resumes when it opens.)"""
        return self._core.load(None if path is None else os.fspath(path))

    @property
    def resumed(self):
        """What the session last resumed from ({"path", "step", "layout"}), or None."""
        return self._core.resumed

    def stop(self):
        """Closes the logs and frees the session; later calls raise MegacError."""
        self._core.stop()

    @property
    def steps_done(self):
        return self._core.steps_done

    @property
    def sequence_length(self):
        return self._core.sequence_length

    @property
    def vocab(self):
        return self._core.vocab

    @property
    def rank(self):
        return self._core.rank

    @property
    def ranks(self):
        return self._core.ranks

    @property
    def global_batch(self):
        return self._core.global_batch

    @property
    def total_steps(self):
        return self._core.total_steps

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
